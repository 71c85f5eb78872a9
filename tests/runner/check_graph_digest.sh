#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# --graph gives the eager loop's output bit for bit (issue 37): ddo-run prints the activation's
# digest after its steps (FNV-1a 64 of its bytes); the same model, tokens and steps run eagerly
# and with --graph (the first step captured, every step launched) must print the same digest, on
# the linear route, the legacy VMM route with a 2-slot window (graph streaming through
# offloader.launch_graph) and the file route (nvme_baseline: the legacy VMM route fed from the
# file). Different steps must print different digests (the digest follows the output). The runs
# check bytes, not speed: --no-bound, one token each and a 0.02 GB model (--hidden 512: a quarter
# of the default's bytes, which the CPU stand-in and --verify's copies cost under the sanitizers;
# ASan: 30 -> ~12 s of CPU for the script).
# Usage: check_graph_digest.sh DDO_RUN CACHE_DIR
set -euo pipefail
run="$1" cache="$2"
out=""
fail() { echo "$out"; echo "check_graph_digest: $1" >&2; exit 1; }
digest=""
two_steps=""  # the first eager digest (2 steps), for the last check
run_digest() {  # ARGS... : runs ddo-run (output in $out), its digest line's value in $digest
  out="$("$run" --cpu --blocks 2 --hidden 512 --tokens 1 --no-bound --no-environment \
    --cache-dir "$cache" "$@" 2>&1)" ||
    fail "ddo-run $* failed"
  digest="$(sed -n 's/^  output: activation digest \([0-9a-f]\{16\}\) after .*/\1/p' <<<"$out")"
  [ -n "$digest" ] || fail "no digest line in the output of ddo-run $*"
}
check_route() {  # NAME ROUTE-ARGS...
  local name="$1"
  shift
  run_digest --steps 2 "$@"
  local eager="$digest"
  run_digest --steps 2 --graph "$@"
  grep -q 'graph: the first step captured' <<<"$out" || fail "$name: --graph did not capture a step"
  [ "$eager" = "$digest" ] || fail "$name: --graph's digest $digest differs from the eager loop's $eager"
  echo "check_graph_digest: $name: eager and --graph both $eager"
  [ -n "$two_steps" ] || two_steps="$eager"
}
check_route "linear route"
check_route "legacy VMM route, 2-slot window" --ddo-execution-mode vmm_runtime --ddo-vmm-resident-weight-budget-gb 0.015
grep -q 'through offloader.launch_graph (graph streaming: 2 slots' <<<"$out" ||
  fail "--graph on vmm_runtime with a 2-slot window did not stream through launch_graph"
check_route "file route" --ddo-preset nvme_baseline
grep -q 'executed dynamic_offload (nvme transport' <<<"$out" || fail "nvme_baseline did not run the file route"
# The digest follows the output: one step more gives another.
run_digest --steps 3
[ "$digest" != "$two_steps" ] || fail "2 and 3 steps printed the same digest ($digest)"
