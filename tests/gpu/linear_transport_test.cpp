// SPDX-License-Identifier: Apache-2.0
// The transport conformance suite on the linear (CUDA) transport, plus CUDA error reporting.
#include <doctest/doctest.h>

#include "gpu_support.hpp"
#include "transport/transport_conformance.hpp"

TEST_SUITE_BEGIN("gpu");

DDO_TRANSPORT_CONFORMANCE(ddo_test::linear_traits);

TEST_CASE("a CUDA failure is a cuda_error naming the call") {
  DDO_SKIP_WITHOUT_GPU();
  try {
    ddo::linear_options o;
    o.device = 9999;
    ddo::linear_transport t(o);
    FAIL("device 9999 was accepted");
  } catch (const ddo::cuda_error& e) {
    CHECK(e.call().find("cudaSetDevice") != std::string::npos);
    CHECK(e.error_name() == "cudaErrorInvalidDevice");
    CHECK(std::string(e.what()).find("cudaSetDevice") != std::string::npos);
  }
}

TEST_CASE("driver entry points are reachable without linking libcuda") {
  DDO_SKIP_WITHOUT_GPU();
  ddo::driver_api api;
  CHECK(std::string(api.error_name(2)) == "CUDA_ERROR_OUT_OF_MEMORY");
  using create_fn = ddo::driver_result (*)(void*, std::size_t, const void*, unsigned long long);
  const bool found = ddo::driver_entry_point<create_fn>("cuMemCreate") != nullptr;
  const bool bogus = ddo::driver_entry_point<create_fn>("cuNoSuchFunction") != nullptr;
  CHECK(found);
  CHECK_FALSE(bogus);
  try {
    DDO_CU_TRY(api, 2);
    FAIL("DDO_CU_TRY let an error through");
  } catch (const ddo::cuda_error& e) {
    CHECK(e.error_name() == "CUDA_ERROR_OUT_OF_MEMORY");
  }
}

TEST_SUITE_END();
