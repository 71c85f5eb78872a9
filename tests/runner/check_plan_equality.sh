#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ddo-plan prints the plan ddo-run runs, end to end through the two programs: for several presets
# and budgets, the plan summary ddo-run prints before it sets up equals ddo-plan's for the same
# inputs (--tokens, the card of --vram-gb, --ram-gb), on host_sim (--ddo-backend host_sim, so that
# a machine with a GPU compares the same plans).
#   check_plan_equality.sh DDO_RUN DDO_PLAN CACHE_DIR
set -eu
run=$1
plan=$2
cache=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common="--no-environment --tokens 8 --ram-gb 16 --ddo-backend host_sim"
# Generate (or reuse) the small synthetic model once.
"$run" --cpu --steps 1 --blocks 2 --cache-dir "$cache" $common >"$tmp/gen.log" 2>&1
model=$(find "$cache" -name 'model.safetensors' -path '*b2*' | head -n 1)
[ -n "$model" ] || model=$(find "$cache" -name '*.safetensors' | head -n 1)
[ -n "$model" ] || { echo "no synthetic model under $cache"; exit 1; }
checked=0
refused=0
for settings in "--ddo-preset auto" "--ddo-preset low_ram_safe" "--ddo-preset one_shot_fast" \
                "--ddo-preset diffusers_offload_compat" "--ddo-resident-module-budget-gb 0.01" \
                "--ddo-auto-budget-policy off --ddo-pin-weight-budget-gb 0.02"; do
  for vram in 0.12 0.17 0.25 0.5; do
    # shellcheck disable=SC2086
    run_rc=0
    "$run" --cpu --steps 1 --warmup 0 --no-bound --model "$model" --vram-gb "$vram" $common $settings \
      >"$tmp/run.out" 2>"$tmp/run.err" || run_rc=$?
    plan_rc=0
    # shellcheck disable=SC2086
    "$plan" "$model" --vram-gb "$vram" $common $settings >"$tmp/plan.out" 2>"$tmp/plan.err" ||
      plan_rc=$?
    if [ "$run_rc" -ne 0 ] || [ "$plan_rc" -ne 0 ]; then
      # A plan that cannot fit is refused by both, with the same message.
      run_msg=$(sed -n 's/^ddo-run: //p' "$tmp/run.err" | tail -n 1)
      plan_msg=$(sed -n 's/^ddo-plan: //p' "$tmp/plan.err" | tail -n 1)
      if [ "$run_rc" -eq 0 ] || [ "$plan_rc" -eq 0 ] || [ "$run_msg" != "$plan_msg" ]; then
        echo "ddo-run (status $run_rc) and ddo-plan (status $plan_rc) disagree for: $settings --vram-gb $vram"
        echo "ddo-run: $run_msg"
        echo "ddo-plan: $plan_msg"
        exit 1
      fi
      checked=$((checked + 1))
      refused=$((refused + 1))
      continue
    fi
    # ddo-run: from the plan's first line to the blank line before "setup:".
    sed -n '/^ddo offload plan:/,/^$/p' "$tmp/run.out" | sed '/^$/d' >"$tmp/run.plan"
    sed -n '/^ddo offload plan:/,$p' "$tmp/plan.out" >"$tmp/plan.plan"
    if [ ! -s "$tmp/run.plan" ] || ! cmp -s "$tmp/run.plan" "$tmp/plan.plan"; then
      echo "plans differ for: $settings --vram-gb $vram"
      diff "$tmp/run.plan" "$tmp/plan.plan" || true
      exit 1
    fi
    checked=$((checked + 1))
  done
done
echo "ddo-plan printed the plan ddo-run ran in $((checked - refused)) cases and refused it the same way in $refused"
[ "$checked" -eq 24 ] && [ $((checked - refused)) -ge 16 ]
