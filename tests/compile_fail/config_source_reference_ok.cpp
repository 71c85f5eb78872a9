// SPDX-License-Identifier: Apache-2.0
// Positive control for the config_source compile-fail checks: the reference model compiles, so
// the near misses below fail for their own reason, not for a broken check environment.
#include "ddo/config/resolve.hpp"

struct good_source {
  using source_category = ddo::config_source_tag;
  [[nodiscard]] ddo::config_layer collect() const { return {}; }
};
static_assert(ddo::config_source<good_source>);

int main() {
  ddo::resolve_context context;
  return ddo::resolve_from_sources(context, good_source{}).enabled ? 0 : 1;
}
