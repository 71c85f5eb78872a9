// SPDX-License-Identifier: Apache-2.0
// The GPU probe runs on every machine: without a GPU it must say why, not throw; with one it
// must agree with the throwing per-device queries.
#include "ddo/platform/cuda_device.hpp"
#include "ddo/platform/cuda_driver.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>

TEST_SUITE("platform") {
  TEST_CASE("probe_cuda_device agrees with query_cuda_availability and never throws") {
    const auto availability = ddo::query_cuda_availability();
    const auto probe = ddo::probe_cuda_device(0);
    CHECK(probe.device == 0);
    CHECK(probe.device_count == availability.device_count);
    if (!availability.available) {
      MESSAGE("no CUDA device here: " << availability.reason);
      CHECK_FALSE(probe.available);
      CHECK(probe.reason == availability.reason);
      CHECK(probe.name.empty());
      CHECK(probe.total_bytes == 0);
      return;
    }
    REQUIRE(probe.available);
    CHECK(probe.reason.empty());
    CHECK(probe.name == ddo::query_device_name(0));
    CHECK(probe.total_bytes == ddo::query_device_memory(0).total_bytes);
    CHECK(probe.free_bytes <= probe.total_bytes);
  }

  TEST_CASE("probe_cuda_device refuses an ordinal CUDA does not have, with the count") {
    std::mt19937 rng(std::random_device{}());
    const int count = ddo::query_cuda_availability().device_count;
    const int missing = count + 1 + static_cast<int>(rng() % 64);
    for (int device : {missing, -1 - static_cast<int>(rng() % 8)}) {
      CAPTURE(device);
      const auto probe = ddo::probe_cuda_device(device);
      CHECK_FALSE(probe.available);
      CHECK(probe.device == device);
      CHECK_FALSE(probe.reason.empty());
      if (count > 0)
        CHECK(probe.reason.find("device " + std::to_string(device) + " was asked for") !=
              std::string::npos);
    }
  }

  // Preset auto reads it: known on a device (every GPU since Pascal has VMM), unknown without
  // one or for an ordinal CUDA does not have — never a throw.
  TEST_CASE("probe_vmm_supported: the device's answer, nothing without a device") {
    const auto availability = ddo::query_cuda_availability();
    CHECK_FALSE(ddo::probe_vmm_supported(-1).has_value());
    CHECK_FALSE(ddo::probe_vmm_supported(availability.device_count).has_value());
    if (!availability.available) {
      CHECK_FALSE(ddo::probe_vmm_supported(0).has_value());
      return;
    }
    CHECK(ddo::probe_vmm_supported(0).has_value());
  }
}
