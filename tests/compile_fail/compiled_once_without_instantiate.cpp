// SPDX-License-Identifier: Apache-2.0
// A program compiled once (DDO_EXTERN_TEMPLATES) whose TUs include ddo/instantiate.hpp nowhere:
// the link fails, and its first undefined reference names ddo/instantiate.hpp, before the bare
// symbols of the offloader, the setup path and ddo's non-template functions (issue 40: 17 came
// first). main() calls them directly, so at -O0 its references sit in .text too.
#include <cstddef>
#include <vector>

#include <ddo/ddo.hpp>
#include <ddo/setup/prepare_offload.hpp>
#include <ddo/setup/setup.hpp>
#include <ddo/transport/host_sim.hpp>

int main() {
  std::vector<std::byte> bytes(64 * 64 * 2, std::byte{7});
  ddo::weight_table table;
  table.add({.name = "blocks.0.proj.weight", .module_name = "", .kind = ddo::module_kind::linear,
             .type = ddo::dtype::bf16, .shape = {64, 64}, .bytes = 0,
             .source = ddo::host_source{bytes.data()}});
  const auto groups = ddo::infer_execution_groups(table);
  ddo::host_sim_transport transport({.device_capacity_bytes = 256 * ddo::mib});
  auto enabled =
      ddo::prepare_offload(table, ddo::dynamic_offload_settings{}, {}, transport).start();
  auto& offloader = *enabled;
  auto stream = transport.make_stream();
  std::size_t seen = 0;
  {
    auto lease = offloader.acquire(0, transport.view(stream));
    seen = lease.size();
  }
  return seen == groups.size() && offloader.metrics(true).totals.group_loads <= 1 ? 0 : 1;
}
