// SPDX-License-Identifier: Apache-2.0
// Misuse: a type that says it is a transport but lacks most members. Must not compile; the
// diagnostic lists each missing member (runtime/policy_set.hpp).
#include "ddo/runtime/offloader.hpp"

struct almost_transport {
  using transport_category = ddo::transport_tag;
  struct stream {};
  struct event {};
  struct stream_view {};
  [[nodiscard]] std::string_view name() const { return "almost"; }
  [[nodiscard]] ddo::device_memory_info device_memory() { return {}; }
};

int main() {
  using bad = ddo::offloader<almost_transport>;
  return sizeof(bad::planner_type) > 0 ? 0 : 1;
}
