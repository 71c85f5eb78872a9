#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A group partly resident streams right (issue 38): on cards of 0.086-0.09 GB the balanced budget
# does not hold every 6 MiB block of the 4-block synthetic model whole (--hidden 512: a quarter of
# the default's bytes, which the CPU stand-in and --verify cost under the sanitizers; the default
# model does the same on cards of 0.14-0.17 GB, ddo's 64 MiB reserve included), and what the
# whole blocks leave keeps single weights of the streamed blocks (reason "resident_budget: a
# weight of a streamed group"); ddo-run then streams the rest of each such group through the
# ring, every acquired weight copied back and compared with its file (--verify), on host_sim.
# Fails on the code before the fill (no card plans a group partly resident).
# Usage: check_partial_residency.sh DDO_RUN CACHE_DIR
set -euo pipefail
run="$1"
cache="$2"
# No headroom, so that the small cards below give the budget what is left of them.
common=(--cpu --verify --steps 2 --warmup 0 --blocks 4 --hidden 512 --tokens 1 --no-bound
        --no-environment --ram-gb 16 --ddo-auto-vram-headroom-gb 0 --cache-dir "$cache")
fail() { echo "$out"; echo "check_partial_residency: $1" >&2; exit 1; }
partly=0
for vram in 0.086 0.087 0.0875 0.09; do
  out="$("$run" "${common[@]}" --vram-gb "$vram" 2>&1)" || fail "ddo-run --vram-gb $vram failed"
  grep -q '^  verify: .* checked against the files, 0 mismatch(es)$' <<<"$out" ||
    fail "--vram-gb $vram: verify did not pass"
  grep -q ' resident_budget: a weight of a streamed group' <<<"$out" || continue
  partly=$((partly + 1))
done
echo "check_partial_residency: $partly card(s) with a group partly resident, --verify clean"
[ "$partly" -ge 2 ] || { out=""; fail "fewer than two cards planned a group partly resident"; }
