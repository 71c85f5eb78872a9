#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ddo-run --tokens T1,T2,T3 on host_sim (issue 41): one offloader through three phases, the
# budget following the activations (set_device_reserve between phases), every acquired weight
# copied back and compared (--verify), each phase's reserve measured from the engine's forward
# at its size (measure_workload_reserve); the phase table (each move, the step, a cached
# re-setup's time) and bad input refused.
# Usage: check_phases.sh DDO_RUN CACHE_DIR
set -euo pipefail
run="$1"
cache="$2"
# One token, no bound, no warm-up: bytes and the report, not speed (cheap under the sanitizers).
common=(--cpu --verify --steps 1 --warmup 0 --blocks 2 --no-bound --no-environment --ram-gb 6.5 --cache-dir "$cache")
fail() { echo "$out"; echo "check_phases: $1" >&2; exit 1; }

out="$("$run" "${common[@]}" --tokens 1,16,1 2>&1)" || fail "ddo-run --tokens 1,16,1 failed"
for p in 0 1 2; do
  grep -q "^phase $p: " <<<"$out" || fail "no line for phase $p"
done
grep -q '^| tokens | reserve | promoted | demoted | read | D2H | move ms | peak device |' <<<"$out" \
  || fail "no phase table"
[ "$(grep -c '^| 1 | \|^| 16 | ' <<<"$out")" -eq 3 ] || fail "not three phase rows"
grep -q '^| 1 | .* | setup | - |' <<<"$out" || fail "the first phase is not the setup"
# Each phase's reserve measured from the engine's forward at its size (its activations, linear
# in the tokens on the CPU stand-in): 16 tokens hold 16 times what 1 token holds, and the third
# phase reads the first's measurement.
r0="$(sed -n 's/^phase 0: 1 tokens, engine reserve \([0-9]*\) bytes.* (measured).*/\1/p' <<<"$out")"
r1="$(sed -n 's/^phase 1: 16 tokens, engine reserve \([0-9]*\) bytes.* (measured).*/\1/p' <<<"$out")"
r2="$(sed -n 's/^phase 2: 1 tokens, engine reserve \([0-9]*\) bytes.* (measured).*/\1/p' <<<"$out")"
[ -n "$r0" ] && [ -n "$r1" ] && [ "$r0" -gt 0 ] || fail "no measured reserve per phase"
[ "$r1" -eq $((16 * r0)) ] && [ "$r2" -eq "$r0" ] \
  || fail "measured reserves $r0, $r1, $r2: not linear in the tokens"
grep -q '^  verify: 0 mismatch(es)$' <<<"$out" || fail "verify did not pass"

for bad in "--tokens 1,0" "--tokens 1,x" "--tokens 1,2 --compare" "--tokens 1,2 --graph"; do
  # shellcheck disable=SC2086
  if err="$("$run" "${common[@]}" $bad 2>&1)"; then out="$err"; fail "'$bad' was accepted"; fi
done
err="$("$run" "${common[@]}" --tokens 1,0 2>&1)" || true
grep -q -- '--tokens 1,0: each count must be an integer in 1..1048576' <<<"$err" \
  || { out="$err"; fail "unclear --tokens error"; }
echo "check_phases: ok"
