#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ddo-run --models A,B --switch-every N and --experts A,B on host_sim (issue 42): two small
# generated models in one process, their host copies in the process's weight registry, every
# acquired weight copied back and compared (--verify). The counts must be exact: a switch's
# reads (the process's own rchar, /proc/self/io) are the bytes the registry read and pinned plus
# the residents read from their files (and a few bytes of the host_sim machinery, at most 4 KiB);
# a switch back to a model the registry still holds reads none of its pinned bytes; a budget
# below the two models' sum evicts, and the switch back reads what was evicted, into the evicted
# model's pages (recycled: the two models have one shape); the registry never holds more than
# its budget. Bad input refused.
# Usage: check_switch.sh DDO_RUN CACHE_DIR
set -euo pipefail
run="$1"
cache="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# One token, no bound: bytes and the report, not speed (cheap under the sanitizers).
common=(--cpu --verify --blocks 2 --hidden 512 --tokens 1 --no-bound --no-environment
        --ddo-system-ram-headroom-gb 0 --cache-dir "$cache")
models=(--steps 2 --models synthetic:seed=1,synthetic:seed=2)
fail() { echo "$out"; echo "check_switch: $1" >&2; exit 1; }

# $1: the JSON; the rest: python checks over `rows` (the switches) — each an assert.
check_json() {
  local json="$1"; shift
  python3 - "$json" "$@" <<'PY' || fail "JSON check failed: ${*: -1}"
import json, sys
rows = json.load(open(sys.argv[1]))["switches"]
slack = 4096  # host_sim's own reads (its event counters), never a weight
def read_ok(r):
    expected = r["registry_loaded_bytes"] + r["resident_bytes"]
    return expected <= r["rchar_bytes"] <= expected + slack
for check in sys.argv[2:]:
    assert eval(check), check
PY
}

# Models of 0.02 GB (--hidden 512: 12 MiB of block weights the registry pins, 6 MiB resident;
# a quarter of the default's bytes, which the CPU stand-in and --verify cost under the sanitizers).
# 1. Room for both (0.06 GiB > 2 x 12 MiB): the switch back reads none of the held bytes.
out="$("$run" "${common[@]}" "${models[@]}" --ram-gb 0.06 --json "$work/roomy.json" 2>&1)" \
  || fail "ddo-run --models with room for both failed"
grep -q '^  verify: 0 mismatch(es)$' <<<"$out" || fail "verify did not pass"
grep -q '^| # | model | from | switch s | floor s | x floor | read (rchar) |' <<<"$out" \
  || fail "no switch table"
[ "$(grep -c '^switch synthetic:' <<<"$out")" -eq 3 ] || fail "not three switches (A B A B)"
check_json "$work/roomy.json" \
  'len(rows) == 4' \
  'all(read_ok(r) for r in rows)' \
  'rows[0]["registry_loaded_bytes"] > 0 and rows[1]["registry_loaded_bytes"] > 0' \
  'rows[2]["registry_loaded_bytes"] == 0 and rows[3]["registry_loaded_bytes"] == 0' \
  'rows[2]["registry_reused_bytes"] == rows[0]["registry_loaded_bytes"]' \
  'all(r["registry_evicted_bytes"] == 0 for r in rows)' \
  'all(r["pinned_bytes"] <= r["budget_bytes"] for r in rows)' \
  'all(r["verify_mismatches"] == 0 for r in rows)'

# 2. A budget below the sum (0.018 GiB: one model's 12 MiB, not two): each switch evicts the
#    other model, and the switch back reads again exactly what was evicted of it.
out="$("$run" "${common[@]}" "${models[@]}" --ram-gb 0.018 --json "$work/tight.json" 2>&1)" \
  || fail "ddo-run --models under a tight budget failed"
grep -q '^  verify: 0 mismatch(es)$' <<<"$out" || fail "verify did not pass (tight)"
check_json "$work/tight.json" \
  'len(rows) == 4' \
  'all(read_ok(r) for r in rows)' \
  'all(r["registry_evicted_bytes"] > 0 for r in rows[1:])' \
  'rows[2]["registry_loaded_bytes"] > 0' \
  '(rows[2]["registry_loaded_bytes"] + rows[2]["registry_reused_bytes"]
    == rows[0]["registry_loaded_bytes"])' \
  'all(r["pinned_bytes"] <= r["budget_bytes"] for r in rows)' \
  'all(0 < r["registry_recycled_bytes"] <= r["registry_evicted_bytes"] for r in rows[1:])' \
  '(all(r["unregistered_bytes"] == r["registry_evicted_bytes"] - r["registry_recycled_bytes"]
        for r in rows))' \
  'all(r["registered_bytes"] < r["registry_loaded_bytes"] for r in rows[1:])' \
  'all(r["registry_unpin_wait_s"] >= 0 and r["registry_load_s"] >= 0 for r in rows)'

# 3. Two experts, two generations: A B | A B, the second generation reusing both.
out="$("$run" "${common[@]}" --steps 3 --experts synthetic:seed=1,synthetic:seed=2 --generations 2 \
       --ram-gb 0.06 --json "$work/experts.json" 2>&1)" || fail "ddo-run --experts failed"
grep -q '^  verify: 0 mismatch(es)$' <<<"$out" || fail "verify did not pass (experts)"
check_json "$work/experts.json" \
  'len(rows) == 4' \
  '[r["steps"] for r in rows] == [2, 1, 2, 1]' \
  '[r["generation"] for r in rows] == [0, 0, 1, 1]' \
  'rows[2]["registry_loaded_bytes"] == 0 and rows[3]["registry_loaded_bytes"] == 0' \
  'all(read_ok(r) for r in rows)'

# 4. Bad input, each refused with the option named.
refused() {  # $1: what the error must say; the rest: the arguments
  local want="$1"; shift
  if err="$("$run" "${common[@]}" --ram-gb 0.06 "$@" 2>&1)"; then
    out="$err"; fail "'$*' was accepted"
  fi
  grep -qF -- "$want" <<<"$err" || { out="$err"; fail "unclear error for '$*'"; }
}
refused 'at least two models' --models synthetic:seed=1
refused 'exactly two models' --experts synthetic,synthetic:seed=2,synthetic:seed=3
refused "expected seed=S" --models synthetic:seed=1,synthetic:colour=2
refused 'neither a model file nor' --models synthetic:seed=1,"$work/missing.safetensors"
refused '--switch-every needs --models or --experts' --switch-every 2
refused 'run one model' "${models[@]}" --compare
refused 'not both' "${models[@]}" --experts synthetic,synthetic:seed=2
echo "check_switch: ok"
