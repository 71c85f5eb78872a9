// SPDX-License-Identifier: Apache-2.0
// toml++'s implementation, compiled once for ddo's own programs and tests (meson.build: the
// ddo_toml_dep they see defines TOML_HEADER_ONLY=0 and links this TU). In header-only mode every
// TU that includes ddo/config/toml_source.hpp compiled toml++'s parser and printer again (about
// 7 s of a TU's -O2 compile; ddo-run, ddo-plan, ddo-config and three test areas, in each of CI's
// three builds). Included through toml_source.hpp so that its TOML_ASSERT setting is the one the
// parser is compiled with. Engines that use ddo keep the header-only dependency ('ddo-toml').
#define TOML_IMPLEMENTATION
#include "ddo/config/toml_source.hpp"
