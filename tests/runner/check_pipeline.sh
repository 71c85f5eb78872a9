#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ddo-run --pipeline on host_sim at small sizes: text encoder -> transformer steps -> VAE for two
# images under one shared budget and with that budget split by weight bytes, every acquired
# weight copied back and compared (--verify); ddo's device bytes within the budget + 64 MiB in
# both; the per-phase tables and the end-to-end ratio printed; flags that do not apply refused.
# Usage: check_pipeline.sh DDO_RUN
set -euo pipefail
run="$1"
out="$("$run" --cpu --pipeline --verify --images 2 --steps 3 --no-environment \
        --pipeline-budget-gb 0.075 2>&1)" || {
  echo "$out"
  echo "check_pipeline: ddo-run --pipeline failed" >&2
  exit 1
}
fail() { echo "$out"; echo "check_pipeline: $1" >&2; exit 1; }
grep -q '^shared budget, by phase: .* ms end to end for 2 image(s)' <<<"$out" || fail "no shared-budget result"
grep -q '^split by weight bytes: .* ms end to end for 2 image(s)' <<<"$out" || fail "no split result"
for phase in text_encoder transformer vae; do
  [ "$(grep -c "^| $phase | " <<<"$out")" -eq 2 ] || fail "phase $phase is not in both tables"
done
grep -q '^end to end: shared .* split / shared = ' <<<"$out" || fail "no end-to-end ratio"
[ "$(grep -c '^check: .*: ok$' <<<"$out")" -eq 4 ] || fail "not every check passed (budget and --verify, both variants)"
grep -q 'FAILED' <<<"$out" && fail "a check failed"
# The shared budget re-uploads the transformer's residents once per image; the split keeps them.
grep -q 'transformer: route dynamic_offload, resident [1-9]' <<<"$out" || fail "the transformer keeps nothing resident"
if "$run" --cpu --pipeline --compare --no-environment >/dev/null 2>&1; then
  fail "--pipeline --compare was accepted"
fi
err="$("$run" --cpu --pipeline --images 0 --no-environment 2>&1)" && fail "--images 0 was accepted"
grep -q 'images must be at least 1' <<<"$err" || fail "--images 0: unclear error: $err"
echo "check_pipeline: ok"
