// SPDX-License-Identifier: Apache-2.0
#include "ddo/core/error.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <type_traits>

TEST_SUITE("core") {
  TEST_CASE("DDO_EXPECTS throws usage_error naming the condition and the message") {
    const int slots = 0;
    try {
      DDO_EXPECTS(slots > 0, "need at least one slot");
      FAIL("DDO_EXPECTS did not throw");
    } catch (const ddo::usage_error& e) {
      const std::string what = e.what();
      CHECK(what.find("need at least one slot") != std::string::npos);
      CHECK(what.find("slots > 0") != std::string::npos);
      CHECK(what.find("error_test.cpp") != std::string::npos);
    }
    CHECK_NOTHROW(DDO_EXPECTS(slots == 0, "unused"));
  }

  TEST_CASE("DDO_CUDA_TRY turns a failed runtime call into cuda_error with call, name and line") {
    auto failing = [] { return cudaErrorInvalidValue; };
    try {
      DDO_CUDA_TRY(failing());
      FAIL("DDO_CUDA_TRY did not throw");
    } catch (const ddo::cuda_error& e) {
      CHECK(e.code() == static_cast<int>(cudaErrorInvalidValue));
      CHECK(e.error_name() == "cudaErrorInvalidValue");
      CHECK(e.call() == "failing()");
      CHECK(e.line() > 0);
      CHECK(std::string(e.what()).find("cudaErrorInvalidValue") != std::string::npos);
    }
    CHECK_NOTHROW(DDO_CUDA_TRY(cudaSuccess));
  }

  TEST_CASE("the nothrow variant reports but never throws, and ignores CUDA unloading") {
    CHECK_NOTHROW(DDO_CUDA_TRY_NOTHROW(cudaErrorInvalidValue));
    CHECK_NOTHROW(DDO_CUDA_TRY_NOTHROW(cudaErrorCudartUnloading));
  }

  TEST_CASE("driver errors carry the numeric result and its name") {
    try {
      ddo::detail::throw_driver_error(2, "CUDA_ERROR_OUT_OF_MEMORY", "cuMemCreate(...)", "f.hpp", 7);
    } catch (const ddo::cuda_error& e) {
      CHECK(e.code() == 2);
      CHECK(e.error_name() == "CUDA_ERROR_OUT_OF_MEMORY");
      CHECK(std::string(e.what()).find("cuMemCreate") != std::string::npos);
    }
  }

  TEST_CASE("out_of_memory names its tier by memory_tier, canonically") {
    const ddo::out_of_memory pinned(ddo::memory_tier::pinned_host, 300, 200, "pinned: too much");
    CHECK(pinned.tier() == ddo::memory_tier::pinned_host);
    CHECK(pinned.tier_name() == "pinned_host");
    const ddo::out_of_memory registered(ddo::memory_tier::registered_host, 1, 0, "windows");
    CHECK(registered.tier_name() == "registered_host");
    // Text tiers are gone: a free-text name would not convert to memory_tier.
    static_assert(!std::is_constructible_v<ddo::out_of_memory, const char*, std::uint64_t,
                                           std::uint64_t, std::string>);
    for (std::size_t i = 0; i < ddo::memory_tier_names.size(); ++i) {
      const auto tier = static_cast<ddo::memory_tier>(i);
      CHECK(ddo::parse_memory_tier(ddo::to_string(tier)) == tier);
      CHECK(ddo::out_of_memory(tier, 1, 0, "").tier_name() == ddo::to_string(tier));
    }
  }

  TEST_CASE("out_of_memory is a bad_alloc that names the tier and both numbers") {
    try {
      throw ddo::out_of_memory(ddo::memory_tier::device, 100, 50,
                               "device: need 100 B, 50 B available");
    } catch (const std::bad_alloc& e) {
      CHECK(std::string(e.what()).find("100") != std::string::npos);
      const auto* oom = dynamic_cast<const ddo::out_of_memory*>(&e);
      REQUIRE(oom != nullptr);
      CHECK(oom->tier() == ddo::memory_tier::device);
      CHECK(oom->requested_bytes() == 100);
      CHECK(oom->available_bytes() == 50);
    }
  }
}
