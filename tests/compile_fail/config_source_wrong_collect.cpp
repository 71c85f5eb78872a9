// SPDX-License-Identifier: Apache-2.0
// Near miss: tagged, but collect() returns something other than a config_layer. Must not compile.
#include "ddo/config/resolve.hpp"

struct map_source {
  using source_category = ddo::config_source_tag;
  [[nodiscard]] std::map<std::string, std::string> collect() const { return {}; }
};

int main() {
  ddo::resolve_context context;
  return ddo::resolve_from_sources(context, map_source{}).enabled ? 0 : 1;
}
