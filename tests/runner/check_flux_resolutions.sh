#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ddo-flux --resolutions on host_sim (issue 41): one process, one offloader, three phases
# (128x128, 256x256, 128x128) on a card where the small image keeps the tiny transformer resident
# and the large one's activations leave room only for streaming: the second phase demotes, the
# third promotes back (set_device_reserve between phases, the engine's reserve per image size a
# ddo::workload_reserve), each phase's latents bitwise equal to the all-resident run's, the phase
# table (each move's bytes and time, step / bound, a cached re-setup's time); bad input refused.
#   check_flux_resolutions.sh DDO_FLUX
set -eu
flux=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$flux" --make-model "$tmp/tiny.safetensors" --config tiny --dtype bf16 --seed 3 >"$tmp/make.out" ||
  fail "--make-model failed"
common="--model $tmp/tiny.safetensors --axes 8,28,28 --text-tokens 16 --no-environment"
# No headroom and no small-tensor rule: the engine's reserve alone decides what stays resident.
card="--vram-gb 0.06733 --ddo-auto-vram-headroom-gb 0 --ddo-small-tensor-threshold-bytes 1024"
# shellcheck disable=SC2086
"$flux" $common $card --steps 2 --resolutions 128x128,256x256,128x128 >"$tmp/run.out" 2>&1 ||
  { cat "$tmp/run.out"; fail "ddo-flux --resolutions failed"; }
out=$(cat "$tmp/run.out")
for p in 0 1 2; do
  grep -q "^phase $p: " "$tmp/run.out" || { echo "$out"; fail "no line for phase $p"; }
  grep -q "^check: phase $p streamed through ddo vs all-resident without ddo: bitwise equal$" \
    "$tmp/run.out" || { echo "$out"; fail "phase $p is not bitwise equal to all-resident"; }
done
grep -q '^| image | reserve | promoted | demoted | read | D2H | move ms | resident | step ms |' \
  "$tmp/run.out" || { echo "$out"; fail "no phase table"; }
grep -q '^| 128x128 | .* | setup | - |' "$tmp/run.out" || { echo "$out"; fail "no setup row"; }
# The large image demotes weights (a count above 0), the small one after it promotes them back.
grep -q '^| 256x256 | [^|]* | 0 B (0) | [^|]* ([1-9][0-9]*) |' "$tmp/run.out" ||
  { echo "$out"; fail "the 256x256 phase demoted nothing"; }
grep -q '^| 128x128 | [^|]* | [^|]* ([1-9][0-9]*) | 0 B (0) |' "$tmp/run.out" ||
  { echo "$out"; fail "the last phase promoted nothing back"; }
# The engine's reserve per size: the 256x256 phase's above the 128x128 one's, the third phase's
# the first's.
r0=$(sed -n 's/^phase 0: .*engine reserve \([0-9]*\) bytes.*/\1/p' "$tmp/run.out")
r1=$(sed -n 's/^phase 1: .*engine reserve \([0-9]*\) bytes.*/\1/p' "$tmp/run.out")
r2=$(sed -n 's/^phase 2: .*engine reserve \([0-9]*\) bytes.*/\1/p' "$tmp/run.out")
[ -n "$r0" ] && [ -n "$r1" ] && [ "$r1" -gt "$r0" ] && [ "$r2" -eq "$r0" ] ||
  { echo "$out"; fail "reserves $r0, $r1, $r2 do not follow the image size"; }

expect_usage() {
  pattern=$1
  shift
  rc=0
  "$@" >"$tmp/bad.out" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { cat "$tmp/bad.out"; fail "status $rc, not 2, for: $*"; }
  grep -qF -- "$pattern" "$tmp/bad.out" || { cat "$tmp/bad.out"; fail "no '$pattern' for: $*"; }
}
# shellcheck disable=SC2086
{
  expect_usage '"128x100" has a side outside the allowed ones' \
    "$flux" $common --resolutions 128x128,128x100
  expect_usage '"128" is not WIDTHxHEIGHT' "$flux" $common --resolutions 128,256x256
  expect_usage '"" is not WIDTHxHEIGHT' "$flux" $common --resolutions 128x128,
  expect_usage '"x128" is not WIDTHxHEIGHT in whole pixels' "$flux" $common --resolutions x128
  expect_usage "not with --width" "$flux" $common --resolutions 128x128 --width 256
  expect_usage "not with --check" "$flux" $common --resolutions 128x128 --check
  expect_usage "not with --graph" "$flux" $common --resolutions 128x128 --graph
}
# A phase whose activations leave too little of the card: refused naming the reserve and the
# smallest card, nothing run at that size (status 1).
rc=0
# shellcheck disable=SC2086
"$flux" $common $card --steps 1 --resolutions 128x128,512x512 >"$tmp/big.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "set_device_reserve(.*) refused, nothing moved" "$tmp/big.out" ||
  { cat "$tmp/big.out"; fail "a reserve past the card: status $rc or no refusal"; }
grep -q "^phase 1: " "$tmp/big.out" && { cat "$tmp/big.out"; fail "the refused phase ran"; }
echo "ddo-flux --resolutions: moves per phase, bitwise equal, refusals: ok"
