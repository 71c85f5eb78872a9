// SPDX-License-Identifier: Apache-2.0
// Near miss: collect() is not const, so a source cannot be read through a const reference.
// Must not compile.
#include "ddo/config/concepts.hpp"

struct mutating_source {
  using source_category = ddo::config_source_tag;
  int calls = 0;
  ddo::config_layer collect() {
    ++calls;
    return {};
  }
};
static_assert(ddo::config_source<mutating_source>);

int main() { return 0; }
