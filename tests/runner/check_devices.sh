#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ddo-run --devices on host_sim (issue 28): two simulated devices running the whole model (data
# parallel) and three running a range of the groups each (--shard layers), every acquired weight
# copied back and compared (--verify); one report line per device and the totals; the shared
# store holding the weights once (the same bytes whatever the device count); bad input refused.
# Usage: check_devices.sh DDO_RUN CACHE_DIR
set -euo pipefail
run="$1"
cache="$2"
# One token, no bound, no warm-up and a 0.02 GB model (--hidden 512): this checks bytes, budgets
# and the report, not speed (cheap under the sanitizers too, where the CPU stand-in and --verify
# cost what the weights weigh).
common=(--cpu --verify --steps 1 --warmup 0 --blocks 2 --hidden 512 --tokens 1 --no-bound
        --no-environment --cache-dir "$cache")
fail() { echo "$out"; echo "check_devices: $1" >&2; exit 1; }
store_line() { grep '^  shared weight store: ' <<<"$1" | sed 's/ page-locked.*//'; }

out="$("$run" "${common[@]}" --devices 2 2>&1)" || fail "ddo-run --devices 2 failed"
grep -q '^--devices 2 (data parallel): one shared weight store; no bound measured' <<<"$out" || fail "no --devices header"
for d in 0 1; do
  grep -q "^  device $d (the whole model): setup .* within; verify: .* checked, 0 mismatch(es)$" <<<"$out" \
    || fail "device $d: no clean report line"
done
grep -q '^  total: .* streamed by 2 devices in .* GB/s combined$' <<<"$out" || fail "no total line"
grep -q '^  shared weight store: .* NUMA: [1-9][0-9]* node(s) online' <<<"$out" || fail "no store line"
grep -q '^  host memory against the store (one copy): MemTotal-MemAvailable ' <<<"$out" || fail "no host memory line"
two="$(store_line "$out")"

out="$("$run" "${common[@]}" --devices 3 --shard layers 2>&1)" || fail "ddo-run --devices 3 --shard layers failed"
grep -q '^--devices 3 (layer-sharded)' <<<"$out" || fail "no layer-sharded header"
[ "$(grep -c '^  device [0-2] (groups [0-9]*-[0-9]* of [0-9]*): .* 0 mismatch(es)$' <<<"$out")" -eq 3 ] \
  || fail "not three clean shard lines"
# The whole model in shards is stored once, as in the data-parallel run.
[ "$(store_line "$out")" = "$two" ] || fail "the sharded store differs: '$(store_line "$out")' vs '$two'"

for bad in "--devices 0" "--devices 2 --shard rows" "--devices 2 --compare"; do
  # shellcheck disable=SC2086
  if err="$("$run" "${common[@]}" $bad 2>&1)"; then out="$err"; fail "'$bad' was accepted"; fi
done
err="$("$run" "${common[@]}" --devices 2 --shard rows 2>&1)" || true
grep -q -- '--shard = "rows": expected none or layers' <<<"$err" || { out="$err"; fail "unclear --shard error"; }
echo "check_devices: ok"
