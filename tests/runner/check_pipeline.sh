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
        --ddo-pipeline-device-budget-gb 0.075 2>&1)" || {
  echo "$out"
  echo "check_pipeline: ddo-run --pipeline failed" >&2
  exit 1
}
fail() { echo "$out"; echo "check_pipeline: $1" >&2; exit 1; }
grep -q '^pipeline: device budget 76.80 MiB (.*; flag --ddo-pipeline-device-budget-gb), pinned-host budget .* (ddo-run.s default: every weight)' <<<"$out" \
  || fail "the device budget is not the flag's"
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
# The budgets are settings: the environment sets them too, and a bad value is refused by name.
env_out="$(DDO_PIPELINE_DEVICE_BUDGET_GB=0.08 DDO_PIPELINE_PINNED_BUDGET_GB=0.001 \
           "$run" --cpu --pipeline --images 1 --steps 1 2>&1)" || { out="$env_out"; fail "the DDO_PIPELINE_* run failed"; }
grep -q 'device budget 81.92 MiB (.*environment variable DDO_PIPELINE_DEVICE_BUDGET_GB), pinned-host budget 1.02 MiB (environment variable DDO_PIPELINE_PINNED_BUDGET_GB)' <<<"$env_out" \
  || { out="$env_out"; fail "the DDO_PIPELINE_* budgets were not used"; }
err="$("$run" --cpu --pipeline --no-environment --ddo-pipeline-device-budget-gb=-1 2>&1)" && fail "a negative budget was accepted"
grep -q 'flag --ddo-pipeline-device-budget-gb = "-1": not a valid value for pipeline_device_budget_gb; expected a non-negative number' <<<"$err" \
  || fail "a negative budget: unclear error: $err"
err="$("$run" --cpu --pipeline --images 0 --no-environment 2>&1)" && fail "--images 0 was accepted"
grep -q "the argument '0' for option '--images' is invalid: expected an integer from 1 to 100000" <<<"$err" || fail "--images 0: unclear error: $err"
echo "check_pipeline: ok"
