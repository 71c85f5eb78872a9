// SPDX-License-Identifier: Apache-2.0
// Near miss: a source_category that is not ddo::config_source_tag. Must not compile.
#include "ddo/config/concepts.hpp"

struct other_tag {};
struct mistagged_source {
  using source_category = other_tag;
  [[nodiscard]] ddo::config_layer collect() const { return {}; }
};
static_assert(ddo::config_source<mistagged_source>);

int main() { return 0; }
