#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ddo-run --compare on host_sim, small: the table and its JSON, a sweep of emulated cards with its
# plot, the accounted peak within each card, the separate verification pass, the plain run's
# summary (warm-up apart, median, ratio to the bound), and the argument
# errors of --vram-gb / --ram-gb (each naming the option and the allowed range, exit status 2).
#   check_compare.sh DDO_RUN DDO_PLAN PLOT_TOOL CACHE_DIR
set -eu
run=$1
plan=$2
plot=$3
cache=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# A 0.02 GB model (--hidden 512): the CPU stand-in and the copies cost what the weights weigh,
# most of this script's time under the sanitizers (each variant of the sweep runs the steps).
common="--cpu --no-environment --steps 1 --blocks 2 --hidden 512 --tokens 2 --cache-dir $cache"

# A sweep of two cards, with the verification pass: the table has every variant (one ddo row per
# card), each ddo row is within its card and verified, the JSON and a PNG plot of step time
# against VRAM are written. (One run: under ThreadSanitizer every variant is slow.)
# shellcheck disable=SC2086
"$run" $common --compare --vram-gb 0.15,0.3 --verify --json "$tmp/sweep.json" >"$tmp/sweep.out" 2>"$tmp/sweep.err" ||
  { cat "$tmp/sweep.out" "$tmp/sweep.err"; fail "ddo-run --compare (a sweep) failed"; }
for variant in "| resident |" "| ddo | 0.15 |" "| ddo | 0.30 |" "| naive pageable |" "| naive pinned |"; do
  grep -qF "$variant" "$tmp/sweep.out" || { cat "$tmp/sweep.out"; fail "no row '$variant'"; }
done
[ "$(grep -c '^| ddo |.*(within)' "$tmp/sweep.out")" -eq 2 ] ||
  { cat "$tmp/sweep.out"; fail "a ddo row's accounted peak is not within its card"; }
[ "$(grep -c '^| ddo |.*| ok |$' "$tmp/sweep.out")" -eq 2 ] ||
  { cat "$tmp/sweep.out"; fail "a verification pass did not report ok"; }
grep -qF "cannot reproduce the host side" "$tmp/sweep.out" || fail "the emulation caveat is missing"
grep -q '"kind": "ddo-run compare"' "$tmp/sweep.json" || fail "no compare JSON"
python3 "$plot" "$tmp/sweep.json" -o "$tmp/sweep.png" >"$tmp/plot.out" 2>&1 ||
  { cat "$tmp/plot.out"; fail "the plot tool failed"; }
[ "$(head -c 8 "$tmp/sweep.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] ||
  fail "the plot is not a PNG"

# The plain run states its card and its accounted peak; progress of setup shows in the log.
# shellcheck disable=SC2086
"$run" $common --vram-gb 0.2 >"$tmp/plain.out" 2>"$tmp/plain.err" || fail "the plain run failed"
grep -q "device budget: emulated .* accounted: within" "$tmp/plain.out" || fail "no budget line"
# ... and its steps: the warm-up apart, the steady median, the bound measured in the same run.
# The step time is the interval between step starts, the spans apart (issue 37 item 1).
grep -q "^summary: 1 steady step, median .* ms/step between step starts (min .*); warm-up: .* ms$" \
  "$tmp/plain.out" || { cat "$tmp/plain.out"; fail "no summary line with the warm-up apart"; }
grep -q "^  spans (first enqueue to synchronize, not the figure): median .* ms (min .*)$" \
  "$tmp/plain.out" || { cat "$tmp/plain.out"; fail "no spans line apart"; }
grep -q "^  bound, measured in this run: max(C = .*; B the best of: batches of 5 x .* GB/s$" \
  "$tmp/plain.out" || { cat "$tmp/plain.out"; fail "no bound with its pinned rates"; }
# A ratio as measured: a result at or above 0.98x, else a fault with the raw figures (host_sim's
# compute-bound steps can come in below C on a loaded machine: either form, never clamped).
grep -Eq "^  median / bound = [0-9]+\.[0-9]{3}x$" "$tmp/plain.out" ||
  { cat "$tmp/plain.out"; fail "no ratio to the bound in the plain run"; }
if grep -q "MEASUREMENT FAULT" "$tmp/plain.out"; then
  grep -Eq "^  MEASUREMENT FAULT: 0\.[0-9]{3}x is below 0\.98x: .* step intervals \[.*\] ms, spans \[.*\] ms, C = " \
    "$tmp/plain.out" || { cat "$tmp/plain.out"; fail "a fault without its raw figures"; }
fi
grep -q "^setup: pinning 100%" "$tmp/plain.err" || { cat "$tmp/plain.err"; fail "no setup progress"; }

# Argument errors: exit status 2 and a message naming the option and the allowed values.
expect_usage() {
  pattern=$1
  shift
  rc=0
  "$@" >"$tmp/bad.out" 2>"$tmp/bad.err" || rc=$?
  [ "$rc" -eq 2 ] || { cat "$tmp/bad.err"; fail "status $rc, not 2, for: $*"; }
  grep -qF -- "$pattern" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "no '$pattern' for: $*"; }
}
range="greater than 0 and at most 65536"
# shellcheck disable=SC2086
{
  expect_usage "--vram-gb = \"0\": 0 is outside the range; expected a size in GiB $range" "$run" $common --vram-gb 0
  expect_usage "--vram-gb = \"-1\": -1 is outside the range" "$run" $common --vram-gb -1
  expect_usage "--vram-gb = \"4,x\": \"x\" is not a number" "$run" $common --compare --vram-gb 4,x
  expect_usage "--ram-gb = \"0\"" "$run" $common --ram-gb 0
  expect_usage "several sizes are a sweep, which needs --compare" "$run" $common --vram-gb 4,8
  expect_usage "the emulated card does not hold" "$run" $common --vram-gb 0.01
  expect_usage "--json writes the --compare table" "$run" $common --json "$tmp/x.json"
  expect_usage "the argument '-1' for option '--warmup' is invalid: expected an integer from 0 to 100" \
    "$run" $common --warmup -1
  expect_usage "--warmup applies to the plain run" "$run" $common --compare --warmup 2
}
model=$(find "$cache" -name 'model.safetensors' -path '*dit-b2*' | head -n 1)
expect_usage "--vram-gb = \"0\"" "$plan" "$model" --vram-gb 0
expect_usage "ddo-plan plans one card" "$plan" "$model" --vram-gb 4,8
expect_usage "--ram-gb = \"x\": \"x\" is not a number" "$plan" "$model" --ram-gb x
# Counts through one checked conversion (issue 37 item 5): --steps 2147483647 wrapped the step
# loop's warm-up + steps, ran no step and exited 0; now it is refused by the parser, by name.
base="--cpu --no-environment --blocks 2 --hidden 512 --tokens 2 --cache-dir $cache"
# shellcheck disable=SC2086
{
  expect_usage "the argument '2147483647' for option '--steps' is invalid: expected an integer from 1 to 1000000" \
    "$run" $base --steps 2147483647
  expect_usage "the argument '1e3' for option '--steps' is invalid" "$run" $base --steps 1e3
  expect_usage "the argument '4294967297' for option '--devices' is invalid: expected an integer from 1 to 64" \
    "$run" $base --steps 1 --devices 4294967297
}
# A read-only cache that already holds the model is read, not refused: the cache is checked for
# writing only when a model must be written (a shared, read-only cache).
key=$(sed -n 's/^model: synthetic \([^,]*\), .*/\1/p' "$tmp/plain.out")
[ -n "$key" ] && [ -d "$cache/$key" ] || { cat "$tmp/plain.out"; fail "no cached model named"; }
mkdir -p "$tmp/ro-cache"
cp -r "$cache/$key" "$tmp/ro-cache/"
chmod -R a-w "$tmp/ro-cache"
# As root the mode binds nothing (the old refusal cannot show here); said, and the read path runs.
if touch "$tmp/ro-cache/probe" 2>/dev/null; then
  rm -f "$tmp/ro-cache/probe"
  echo "note: running as root: a read-only directory is writable, so this checks the read path only"
fi
rc=0
# shellcheck disable=SC2086
"$run" --cpu --no-environment --blocks 2 --hidden 512 --tokens 2 --steps 1 --no-bound \
  --vram-gb 0.2 --cache-dir "$tmp/ro-cache" >"$tmp/ro.out" 2>"$tmp/ro.err" || rc=$?
chmod -R u+w "$tmp/ro-cache"
[ "$rc" -eq 0 ] || { cat "$tmp/ro.err"; fail "a read-only cache holding the model was refused"; }
grep -q "^model: synthetic $key, cached at $tmp/ro-cache/" "$tmp/ro.out" ||
  { cat "$tmp/ro.out"; fail "the read-only cache's model was not used"; }
# --expect-model (issue 37 item 6): a figure names its model; a run of any other synthetic model
# (the smaller one ddo-run falls back to on a short disk, or other flags) is refused before any
# step, naming both; the model asked for runs.
other=dit-b3-h1024-r4-BF16-k1-s0
rc=0
# shellcheck disable=SC2086
"$run" $base --steps 1 --no-bound --expect-model "$other" >"$tmp/em.out" 2>"$tmp/em.err" || rc=$?
[ "$rc" -eq 1 ] || { cat "$tmp/em.err"; fail "status $rc, not 1, for another model than --expect-model"; }
grep -qF -- "--expect-model $other: this run's synthetic model is $key" "$tmp/em.err" ||
  { cat "$tmp/em.err"; fail "--expect-model: the refusal does not name both models"; }
grep -q "^steps:" "$tmp/em.out" && fail "--expect-model: steps ran on a substitute"
# shellcheck disable=SC2086
"$run" $base --steps 1 --no-bound --vram-gb 0.2 --expect-model "$key" >"$tmp/em.out" 2>&1 ||
  { cat "$tmp/em.out"; fail "--expect-model with the run's own model failed"; }
echo "ddo-run --compare, its sweep and plot, the budget line and the argument errors: ok"
