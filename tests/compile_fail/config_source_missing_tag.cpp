// SPDX-License-Identifier: Apache-2.0
// Near miss: collect() is right, but the type never opts in with the tag. Must not compile.
#include "ddo/config/resolve.hpp"

struct untagged_source {
  [[nodiscard]] ddo::config_layer collect() const { return {}; }
};

int main() {
  ddo::resolve_context context;
  return ddo::resolve_from_sources(context, untagged_source{}).enabled ? 0 : 1;
}
