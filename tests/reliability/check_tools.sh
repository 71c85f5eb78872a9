#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# End-to-end reliability checks of the programs (the reliability issue's classes, as a user meets
# them): every bad input is a clean error naming what was wrong — never a signal, a hang, a
# wrapped number, a half-written file or raw bytes in output.
# usage: check_tools.sh DDO-MAKE-MODEL DDO-PLAN DDO-RUN DDO-CONFIG DDO-FLUX
# Exit statuses: 2 for usage errors (bad options, settings), 1 for failures (files, formats).
set -u
make_model=$1
plan=$2
run=$3
config=$4
flux=$5
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect RC NEEDLE CMD...: runs CMD (20 s at most), expects exit status RC and NEEDLE in stderr.
expect() {
  want=$1; needle=$2; shift 2
  timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$needle" "$tmp/err"; then
    fail "expected exit $want and '$needle': $*"
    echo "  rc=$rc stderr:"; sed 's/^/    /' "$tmp/err" | head -5
  fi
}

# --- class 1: crashes on valid input --------------------------------------------------------
# A valid model whose one large tensor has a ~50,000-character name: planned, not a SIGSEGV
# (name matching must not recurse with the name's length).
python3 - "$tmp/longname.safetensors" <<'PY' || fail "could not write the long-name model"
import json, struct, sys
names = ["transformer_blocks.0." + "a" * 50000 + ".weight",
         "transformer_blocks.1." + "a." * 25000 + "weight"]
n = 1024 * 1024
h = json.dumps({m: {"dtype": "BF16", "shape": [n // 2], "data_offsets": [i * n, (i + 1) * n]}
                for i, m in enumerate(names)}).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes([3]) * (2 * n))
PY
timeout 60 "$plan" "$tmp/longname.safetensors" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -ge 124 ] && { fail "ddo-plan hung or died with signal $((rc - 128)) on a 50,000-character name"; head -3 "$tmp/err"; }
timeout 120 "$run" --cpu --steps 1 --model "$tmp/longname.safetensors" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -ge 124 ] && { fail "ddo-run hung or died with signal $((rc - 128)) on a 50,000-character name"; head -3 "$tmp/err"; }

# --- class 3: numbers that wrap ------------------------------------------------------------
for flag in --blocks --hidden --mlp-ratio --shards --seed; do
  expect 2 "the argument '-1' for option '$flag' is invalid" "$make_model" -o "$tmp/m.safetensors" "$flag" -1
  expect 2 "the argument '-1' for option '$flag' is invalid" "$run" --cpu "$flag" -1
done
expect 2 "expected an integer from 1 to 4096" "$make_model" -o "$tmp/m.safetensors" --blocks 4294967295
expect 1 "refusing to write the model" "$make_model" -o "$tmp/huge.safetensors" --blocks 4096 --hidden 65536
[ -e "$tmp/huge.safetensors" ] && fail "a refused model left a file"

# --- class 4: atomic outputs, stale temporaries, interruption -------------------------------
"$make_model" -o "$tmp/good.safetensors" --blocks 2 --hidden 64 >/dev/null 2>&1 || fail "make-model"
cp "$tmp/good.safetensors" "$tmp/good.copy"
# A stale temporary of a dead process is removed at the next start; a live one is kept.
sh -c 'exit 0' & dead=$!; wait $dead
mkdir -p "$tmp/.good.safetensors.tmp-$dead-1" && echo half >"$tmp/.good.safetensors.tmp-$dead-1/x"
echo keep >"$tmp/.other.tmp-1-1"
"$make_model" -o "$tmp/good.safetensors" --blocks 2 --hidden 64 >/dev/null 2>&1 || fail "make-model again"
[ -e "$tmp/.good.safetensors.tmp-$dead-1" ] && fail "stale temporary of a dead process not removed"
[ -e "$tmp/.other.tmp-1-1" ] || fail "a live process's temporary was removed"
cmp -s "$tmp/good.safetensors" "$tmp/good.copy" || fail "rewriting the same model changed it"
rm -f "$tmp/.other.tmp-1-1"
# SIGTERM and SIGINT during generation: the previous model stays, no temporary is left.
for sig in TERM INT; do
  "$make_model" -o "$tmp/good.safetensors" --blocks 24 --hidden 2048 >/dev/null 2>"$tmp/sig.err" &
  pid=$!
  sleep 1
  kill -s "$sig" "$pid" 2>/dev/null
  wait "$pid"
  rc=$?
  if [ "$rc" = 0 ]; then
    echo "note: generation finished before SIG$sig; interruption not exercised"
  else
    grep -q "interrupted by SIG$sig" "$tmp/sig.err" || fail "SIG$sig: no interruption message"
    cmp -s "$tmp/good.safetensors" "$tmp/good.copy" || fail "SIG$sig replaced the good model"
  fi
  ls -a "$tmp" | grep -q '\.tmp-' && { fail "SIG$sig left a temporary"; ls -a "$tmp"; }
done
cmp -s "$tmp/good.safetensors" "$tmp/good.copy" || "$make_model" -o "$tmp/good.safetensors" --blocks 2 --hidden 64 >/dev/null 2>&1
# An unwritable trace path is reported at start, before any work.
expect 1 "cannot write the trace file '$tmp/no/such/t.json'" "$run" --cpu --model "$tmp/good.safetensors" --trace "$tmp/no/such/t.json"
grep -q "steps" "$tmp/out" && fail "ddo-run ran steps before reporting the trace path"

# --- class 5: special files and unbounded reads ---------------------------------------------
mkfifo "$tmp/fifo.safetensors" "$tmp/fifo.toml"
expect 1 "FIFO (named pipe), not a regular file" "$plan" "$tmp/fifo.safetensors"
expect 1 "FIFO (named pipe), not a regular file" "$plan" --config "$tmp/fifo.toml" "$tmp/good.safetensors"
expect 1 "character device, not a regular file" "$plan" --config /dev/zero "$tmp/good.safetensors"
expect 1 "character device, not a regular file" "$plan" /dev/zero
expect 1 "FIFO (named pipe), not a regular file" "$run" --cpu --model "$tmp/fifo.safetensors"

# --- class 6: bytes that are not text ---------------------------------------------------------
# A valid UTF-8 name with control characters plans, and the JSON output parses.
python3 - "$tmp/ctl.safetensors" <<'PY' || fail "could not write the control-character model"
import json, struct, sys
names = ["blocks.0.attn\u0007.weight", "blocks.0.ff\n.weight"]
header, off = {}, 0
for n in names:
    header[n] = {"dtype": "BF16", "shape": [512, 512], "data_offsets": [off, off + 512 * 512 * 2]}
    off += 512 * 512 * 2
h = json.dumps(header).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes([7]) * off)
PY
timeout 20 "$plan" --format json "$tmp/ctl.safetensors" >"$tmp/plan.json" 2>"$tmp/err" || fail "ddo-plan on control-character names"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/plan.json" 2>/dev/null || fail "ddo-plan's JSON does not parse"
# A header that is not UTF-8 is refused, and the message shows the bytes as \xHH.
printf '\071\000\000\000\000\000\000\000{"w\377":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}   ' >"$tmp/bad.safetensors"
printf 'x' >>"$tmp/bad.safetensors"
expect 1 "not valid UTF-8" "$plan" "$tmp/bad.safetensors"
LC_ALL=C grep -q "$(printf '\377')" "$tmp/err" && fail "raw invalid UTF-8 in ddo-plan's error"
expect 2 '\xff\xfe' env DDO_EXECUTION_MODE="$(printf '\377\376')" "$plan" "$tmp/good.safetensors"

# --- class 9: strict safetensors ---------------------------------------------------------------
printf '\151\000\000\000\000\000\000\000{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}' >"$tmp/gap.safetensors"
printf '123456' >>"$tmp/gap.safetensors"
expect 1 "gap of 2 bytes after tensor 'a'" "$plan" "$tmp/gap.safetensors"

# --- issue 30 class 3: failed output is a failure -----------------------------------------------
# Standard output on a full disk (/dev/full): every program says so and exits non-zero, never 0
# with its output lost.
full() {  # full NEEDLE CMD...: CMD with stdout on /dev/full must fail with NEEDLE in stderr
  needle=$1; shift
  timeout 60 "$@" >/dev/full 2>"$tmp/err"
  rc=$?
  if [ "$rc" = 0 ] || [ "$rc" -ge 124 ] || ! grep -qF -- "$needle" "$tmp/err"; then
    fail "stdout on /dev/full: expected a failure naming '$needle': $*"
    echo "  rc=$rc stderr:"; sed 's/^/    /' "$tmp/err" | head -5
  fi
}
nospace="cannot write standard output"
if [ -c /dev/full ]; then
  full "$nospace" "$config" --no-environment
  full "$nospace" "$config" --help
  full "$nospace" "$plan" --format json "$tmp/good.safetensors"
  full "$nospace" "$plan" "$tmp/good.safetensors"
  full "$nospace" "$run" --cpu --steps 1 --model "$tmp/good.safetensors"
  full "$nospace" "$make_model" -o "$tmp/full.safetensors" --blocks 2 --hidden 64
  full "$nospace" "$flux" --help
else
  echo "note: /dev/full is not a character device here; the full-disk checks did not run"
fi
# A file the program writes itself is written aside and renamed, so a failed write leaves no
# file and no temporary. The write fails part-way here through the file-size limit (EFBIG, with
# SIGXFSZ ignored): the trace of a step is larger than 1 block of 512 bytes. Its stderr goes
# through a pipe to a writer outside the limit: a file under it lost the error message whenever
# the progress lines before it passed 512 bytes (a loaded machine prints more of them).
( trap '' XFSZ; ulimit -f 1; "$run" --cpu --steps 1 --model "$tmp/good.safetensors" \
    --trace "$tmp/t.json" 2>&1 >/dev/null; echo $? >"$tmp/rc" ) | cat >"$tmp/err"
rc=$(cat "$tmp/rc")
{ [ "$rc" = 1 ] && grep -q "File too large" "$tmp/err"; } ||
  { fail "a trace write that failed part-way: rc=$rc"; tail -3 "$tmp/err"; }
[ -e "$tmp/t.json" ] && fail "a failed trace write left a partial file"
ls -a "$tmp" | grep -q '\.tmp-' && { fail "a failed output left a temporary"; ls -a "$tmp"; }
# A special file as an output is refused before the work, and left as it is (renaming a
# temporary over it would replace the node: as root, over /dev/full).
mkfifo "$tmp/out.fifo"
expect 1 "it is a FIFO, not a regular file" "$run" --cpu --steps 1 --model "$tmp/good.safetensors" --trace "$tmp/out.fifo"
[ -p "$tmp/out.fifo" ] || fail "the FIFO given as --trace was replaced"

# --- issue 30 classes 4 and 5: sizes that wrap, thread counts ------------------------------------
expect 2 "must be from 0 to 16777216 GiB" "$run" --cpu --steps 1 --model "$tmp/good.safetensors" --ddo-vmm-staging-buffer-gb 1e12
expect 2 "--ddo-vmm-staging-buffer-gb" "$run" --cpu --steps 1 --model "$tmp/good.safetensors" --ddo-vmm-staging-buffer-gb 1e12
expect 2 "DDO_MAX_PIN_WEIGHT_BUDGET_GB = " env DDO_MAX_PIN_WEIGHT_BUDGET_GB=1e300 "$plan" "$tmp/good.safetensors"
expect 2 "must be a positive worker count, at most 256" "$run" --cpu --steps 1 --model "$tmp/good.safetensors" --ddo-pin-cpu-workers 100000
expect 2 "--ddo-pin-cpu-workers" "$plan" --ddo-pin-cpu-workers 100000 "$tmp/good.safetensors"

# --- issue 30 class 6: advice that runs, checks before the work, one parser ------------------------
# ddo-plan --vram-gb "" and --ram-gb "" are refused as ddo-run refuses them.
expect 2 '--vram-gb = "": "" is not a number' "$plan" --vram-gb "" "$tmp/good.safetensors"
expect 2 '--ram-gb = "": "" is not a number' "$plan" --ram-gb "" "$tmp/good.safetensors"
expect 2 '--ram-gb = "": "" is not a number' "$run" --cpu --ram-gb ""
# The advice for a missing profile is a command that runs (on host_sim here: --cpu, one step),
# after which the same ddo-plan finds the profile.
export DDO_PROFILE_DIR="$tmp/profiles"
expect 2 "ddo-run --model $tmp/good.safetensors --profile absent --calibrate" \
  "$plan" --profile absent "$tmp/good.safetensors"
advice=$(sed -n 's/.*calibrate first: ddo-run \(.*\)$/\1/p' "$tmp/err")
if [ -z "$advice" ]; then
  fail "ddo-plan gave no calibration command"
else
  eval "set -- $advice"
  timeout 120 "$run" "$@" --cpu --steps 1 >"$tmp/out" 2>"$tmp/err" ||
    { fail "the advised command failed: ddo-run $advice"; head -5 "$tmp/err"; }
  timeout 60 "$plan" --profile absent "$tmp/good.safetensors" >"$tmp/out" 2>"$tmp/err" ||
    { fail "ddo-plan --profile after the advised calibration"; head -5 "$tmp/err"; }
fi
# ddo-plan refuses a sweep and names the ddo-run command that runs one: it runs.
expect 2 "a sweep is ddo-run --compare --vram-gb 4,8" "$plan" --vram-gb 4,8 "$tmp/good.safetensors"
timeout 120 "$run" --compare --vram-gb 4,8 --cpu --steps 1 --model "$tmp/good.safetensors" >"$tmp/out" 2>"$tmp/err" ||
  { fail "the advised sweep failed: ddo-run --compare --vram-gb 4,8"; head -5 "$tmp/err"; }
# A profile directory that is a file, or a cache directory under one, is refused before the work.
echo x >"$tmp/afile"
DDO_PROFILE_DIR="$tmp/afile"
expect 1 "cannot write the profile directory '$tmp/afile': it is not a directory" \
  "$run" --cpu --steps 1 --model "$tmp/good.safetensors" --profile p --calibrate
grep -q "steps" "$tmp/out" && fail "ddo-run calibrated before reporting the profile directory"
expect 1 "cannot write the model cache directory '$tmp/afile/cache': '$tmp/afile' is not a directory" \
  "$run" --cpu --steps 1 --blocks 2 --cache-dir "$tmp/afile/cache"
unset DDO_PROFILE_DIR

if [ "$failures" != 0 ]; then
  echo "$failures reliability check(s) failed"
  exit 1
fi
echo "all reliability checks passed"
