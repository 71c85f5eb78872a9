// SPDX-License-Identifier: Apache-2.0
// NVTX costs nothing unless asked for: this TU is compiled as an engine's would be, without
// DDO_ENABLE_NVTX (ddo's own programs and test suites define it), so the runtime (included whole
// here) must not have included any nvtx3 header.
#include <doctest/doctest.h>

#include "ddo/runtime/basic_offloader.hpp"
#include "ddo/runtime/nvtx_range.hpp"

#if defined(NVTX_VERSION) || defined(NVTOOLSEXT_H_)
#error "an nvtx3 header was included although DDO_ENABLE_NVTX is not defined"
#endif
static_assert(!ddo::nvtx_compiled_in);
static_assert(DDO_HAS_NVTX == 0);

TEST_SUITE_BEGIN("build_checks");

TEST_CASE("without DDO_ENABLE_NVTX the NVTX guard is an empty object") {
  static_assert(sizeof(ddo::nvtx_range) == sizeof(bool));
  ddo::nvtx_range on(true, "ddo test range");
  ddo::nvtx_range off(false, "ddo test range");
  CHECK(!ddo::nvtx_compiled_in);
}

TEST_SUITE_END();
