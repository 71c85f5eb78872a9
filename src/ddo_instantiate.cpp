// SPDX-License-Identifier: Apache-2.0
// ddo compiled once for its own programs, benchmarks and test suites (meson.build): they are
// compiled with DDO_EXTERN_TEMPLATES and link this TU, which holds ddo's non-template functions,
// the runtime core and the setup path for the shipped transports (ddo/instantiate.hpp). Header-
// only, each of them compiled all of that again at -O2, in each of CI's three builds. The build
// checks (header, ODR, nvcc), the consumer builds and the fuzzers keep using ddo header-only, as
// engines do by default.
#include "ddo/instantiate.hpp"
#include "ddo/instantiate.hpp"  // twice: this TU is also the header's own compile check (its
                                // include guard too; tests/build_checks leaves it out)
