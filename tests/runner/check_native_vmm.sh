#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The native VMM route end to end on host_sim's VMM mode: `--ddo-backend vmm --ddo-preset auto`
# selects vmm_fast_runtime, which ddo-run executes with --verify (every acquired byte compared)
# and reports as executed with its window's map/access/unmap host time; ddo-config and ddo-plan
# name the route; `--ddo-execution-mode vmm_runtime` alone runs with the CLI helper's VMM budget;
# --graph streams on the legacy route and is refused on the native one. Beside them, the file
# route of auto's three tiers (RAM stated below the model): a steady step reads the plan's file
# tier (the report once read it from the plan start() had moved into the offloader: 0 B).
# The runs check routes and budgets, not speed: --no-bound and one token each (the CPU stand-in's
# steps are most of this script's time under the sanitizers: 34 s under ASan with the bound and 8
# tokens).
# Usage: check_native_vmm.sh DDO_RUN DDO_CONFIG DDO_PLAN CACHE_DIR
set -euo pipefail
run="$1" config="$2" plan="$3" cache="$4"
out="$("$run" --cpu --verify --steps 2 --blocks 2 --tokens 1 --no-bound --no-environment --cache-dir "$cache" \
        --ddo-backend vmm --ddo-preset auto --ddo-show-profile 2>&1)" || {
  echo "$out"
  echo "check_native_vmm: ddo-run failed" >&2
  exit 1
}
fail() { echo "$out"; echo "check_native_vmm: $1" >&2; exit 1; }
grep -q 'executed dynamic_offload (host_sim_vmm transport, vmm_fast_runtime)' <<<"$out" ||
  fail "the summary does not report vmm_fast_runtime as executed"
grep -q 'native VMM: 2 registered windows x 0.07 GB (of the 20 vmm_staging_buffer_gb allows)' <<<"$out" ||
  fail "vmm_fast_runtime's 1.25 GiB of total staging (20 windows of 64 MiB) does not register the two windows ddo cycles"
grep -Eq 'VMM window: [0-9]+ slots, .* binds, map/access/unmap host time [0-9.]+ ms = [0-9.]+ ms per GB loaded' <<<"$out" ||
  fail "the summary does not report the VMM window's map/access/unmap host time"
out="$("$config" --no-environment --ddo-backend vmm --ddo-preset auto)"
grep -q '^# VMM route: vmm_fast_runtime' <<<"$out" || fail "ddo-config does not name the native route"
out="$("$config" --no-environment --ddo-preset nvme_baseline)"
grep -q '^# VMM route: vmm_runtime' <<<"$out" || fail "ddo-config does not name the legacy route"
model=$(find "$cache" -name '*.safetensors' | head -n 1)
[ -n "$model" ] || fail "no synthetic model under $cache"
out="$("$plan" "$model" --no-environment --ddo-preset vmm_fast_runtime)"
grep -q '^VMM route: vmm_fast_runtime' <<<"$out" || fail "ddo-plan does not name the native route"
# ddo-run's flags are the reference's CLI helper: `--ddo-execution-mode vmm_runtime` alone runs,
# with the helper's 4 GiB VMM budget (or what a smaller emulated card holds), said so.
out="$("$run" --cpu --steps 1 --blocks 2 --tokens 1 --no-bound --no-environment --cache-dir "$cache" \
        --ddo-execution-mode vmm_runtime 2>&1)" || fail "ddo-run --ddo-execution-mode vmm_runtime failed"
grep -q "vmm_resident_weight_budget_gb 4.00 GiB: the CLI helper's default" <<<"$out" ||
  fail "the VMM budget is not the CLI helper's 4 GiB"
out="$("$run" --cpu --steps 1 --blocks 2 --tokens 1 --no-bound --no-environment --cache-dir "$cache" --vram-gb 2 \
        --ddo-execution-mode vmm_runtime 2>&1)" || fail "ddo-run --vram-gb 2 --ddo-execution-mode vmm_runtime failed"
grep -q "vmm_resident_weight_budget_gb 2.00 GiB: what the emulated card holds" <<<"$out" ||
  fail "on a 2 GiB emulated card the VMM budget is not what the card holds"
# --graph on the legacy route with a window of 2 slots, fewer than the streamed groups: the first
# step captured, every step launched through offloader.launch_graph (graph streaming on VMM:
# docs/cuda-graphs.md; the runtime suite checks the bytes); the native route refuses --graph.
out="$("$run" --cpu --graph --steps 2 --blocks 2 --tokens 1 --no-bound --no-environment --cache-dir "$cache" \
        --ddo-execution-mode vmm_runtime --ddo-vmm-resident-weight-budget-gb 0.07 2>&1)" ||
  fail "ddo-run --graph --ddo-execution-mode vmm_runtime failed"
grep -q 'every step launched through offloader.launch_graph (graph streaming: 2 slots' <<<"$out" ||
  fail "--graph on vmm_runtime with a 2-slot window did not stream through launch_graph"
grep -q 'executed dynamic_offload (host_sim_vmm transport, vmm_runtime)' <<<"$out" ||
  fail "--graph did not run the legacy VMM route"
if out="$("$run" --cpu --graph --steps 1 --blocks 2 --tokens 1 --no-bound --no-environment --cache-dir "$cache" \
        --ddo-backend vmm --ddo-preset auto 2>&1)"; then
  fail "--graph on the native VMM route was not refused"
fi
grep -q 'the native VMM route (vmm_fast_runtime) does not stream through a captured graph; graph streaming runs on the linear route and the legacy VMM route' <<<"$out" ||
  fail "the native route's --graph refusal does not name the routes that stream"
out="$("$run" --cpu --steps 3 --blocks 2 --tokens 1 --no-bound --no-environment --cache-dir "$cache" \
        --ram-gb 0.05 --ddo-system-ram-headroom-gb 0 --vram-gb 0.15 2>&1)" ||
  fail "ddo-run --ram-gb 0.05 --vram-gb 0.15 (three tiers) failed"
grep -Eq 'tiers: resident .* \| pinned .* \| file [1-9]' <<<"$out" || fail "auto did not plan a file tier"
grep -Eq "file route, a steady step: .* \(the plan's file tier 0\.0[1-9] GB, [+-]0\.[0-9]+%\)" <<<"$out" ||
  fail "a steady step's file reads are not beside the plan's file tier"
echo "check_native_vmm: ok"
