#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# End-to-end checks of ddo-config: valid runs print TOML on stdout; every invalid input exits 2
# with exactly one line on stderr naming what was wrong, and nothing on stdout.
# usage: check_ddo_config.sh PATH/TO/ddo-config
set -u
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# run ENV... -- ARGS... : runs ddo-config with only the given environment.
run() {
  vars=""
  while [ "$1" != "--" ]; do vars="$vars $1"; shift; done
  shift
  # shellcheck disable=SC2086
  env -i PATH="$PATH" $vars timeout 20 "$exe" "$@" >"$tmp/out" 2>"$tmp/err"
  echo $? >"$tmp/rc"
}

expect_ok() {  # expect_ok NEEDLE ENV... -- ARGS...
  needle=$1; shift
  run "$@"
  if [ "$(cat "$tmp/rc")" != 0 ] || ! grep -qF -- "$needle" "$tmp/out"; then
    echo "FAIL (expected success with '$needle'): $*"; cat "$tmp/err"; failures=$((failures + 1))
  fi
}

expect_warning() {  # expect_warning NEEDLE ENV... -- ARGS... : success, NEEDLE on stderr
  needle=$1; shift
  run "$@"
  if [ "$(cat "$tmp/rc")" != 0 ] || ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL (expected success with warning '$needle'): $*"; cat "$tmp/err"; failures=$((failures + 1))
  fi
}

expect_error() {  # expect_error NEEDLE ENV... -- ARGS...
  needle=$1; shift
  run "$@"
  if [ "$(cat "$tmp/rc")" != 2 ] || [ -s "$tmp/out" ] || [ "$(wc -l <"$tmp/err")" != 1 ] ||
     ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL (expected exit 2, one line with '$needle'): $*"
    echo "  rc=$(cat "$tmp/rc") stdout=$(wc -c <"$tmp/out")B stderr:"; sed 's/^/    /' "$tmp/err"
    failures=$((failures + 1))
  fi
}

expect_ok '[provenance]' --
expect_ok 'effective_preset = "vmm_fast_runtime"' -- --ddo-backend vmm --ddo-preset auto
expect_ok 'pin_cpu_workers = "env"' DDO_PIN_CPU_WORKERS=3 --
expect_ok 'pin_cpu_workers = "cli"' DDO_PIN_CPU_WORKERS=3 -- --ddo-pin-cpu-workers 5
# The RAM stated: below ~12 GB available the auto preset is low_ram_safe (2 workers), and a
# loaded machine's available RAM falls that low.
expect_ok 'pin_cpu_workers = 4' DDO_PIN_CPU_WORKERS=3 -- --no-environment --ddo-available-system-ram-gb 64
expect_ok '[components.vae]' -- --component vae --component transformer
expect_ok 'route = "none"' DDO_VAE_ROUTE=cuda -- --component vae
expect_ok 'requested_preset = "off"' DDO_PRESET=off --
printf 'preset = "warm_process"\npin_cpu_workers = 6\n' >"$tmp/good.toml"
expect_ok 'pin_cpu_workers = "toml"' -- --config "$tmp/good.toml"
expect_ok 'effective_preset = "nvme_baseline"' -- --model-gb 1000 --ddo-available-system-ram-gb 32
expect_ok 'vmm_host_cache_gb = 0.0  # not_yet_implemented' --
expect_ok 'vmm_dxgi_local_headroom_gb = 0.0  # no_effect_on_this_platform' --
expect_ok 'not read by any VMM route of ddo yet' -- --fields
expect_warning 'environment variable DDO_VMM_HOST_CACHE_GB sets vmm_host_cache_gb' DDO_VMM_HOST_CACHE_GB=1 --
expect_warning 'flag --ddo-vmm-dxgi-system-headroom-gb sets vmm_dxgi_system_headroom_gb' -- --ddo-vmm-dxgi-system-headroom-gb 2
expect_warning 'DDO_PURGE_WINDOWS_STANDBY' DDO_PURGE_WINDOWS_STANDBY_BEFORE_VAE=1 --

expect_error 'DDO_PIN_CPU_WORKERS = "many"' DDO_PIN_CPU_WORKERS=many --
expect_error '--ddo-pin-cpu-workers = 0' -- --ddo-pin-cpu-workers 0
expect_error 'did you mean --ddo-pin-cpu-memory?' -- --ddo-pin-cpu-memry
expect_error '"balanced"' -- --ddo-auto-budget-policy=on
expect_error 'DDO_PRESET = "fast"' DDO_PRESET=fast --
expect_error 'DDO_VAE_ROUTE = "gpu"' DDO_VAE_ROUTE=gpu -- --component vae
expect_error 'not available with backend vmm' -- --ddo-backend vmm --ddo-preset low_ram_safe
expect_error 'multiple of 2' -- --ddo-vmm-page-mb 5
expect_error 'cannot read config file' -- --config "$tmp/missing.toml"
expect_error 'it is a directory, not a regular file' -- --config "$tmp"
# Special files are refused at once (a FIFO without a writer would block a plain open forever;
# /dev/zero would be read without end); timeout turns a hang into a failure.
mkfifo "$tmp/fifo.toml"
expect_error 'FIFO (named pipe), not a regular file' -- --config "$tmp/fifo.toml"
expect_error 'character device, not a regular file' -- --config /dev/zero
head -c 5000000 /dev/zero | tr '\0' '#' >"$tmp/huge.toml"
expect_error 'more than the limit of 4194304' -- --config "$tmp/huge.toml"
# A table header that toml++ asserted on (found by the TOML fuzzer): an error, not an abort.
printf '[=settings]\nplan = true\n' >"$tmp/assert.toml"
expect_error 'invalid TOML' -- --config "$tmp/assert.toml"
# The same setting at the top level and in [config]: refused naming both places.
printf 'verbose = true\n[config]\nverbose = false\n' >"$tmp/twice.toml"
expect_error 'TOML sets verbose twice: at' -- --config "$tmp/twice.toml"
# Invalid UTF-8 in an environment value is shown as \xHH, never raw.
expect_error 'DDO_EXECUTION_MODE = "\xff\xfe"' "DDO_EXECUTION_MODE=$(printf '\377\376')" --
expect_error 'at most 2147483647' -- --ddo-pin-cpu-workers 99999999999
printf 'pin_cpu_workrs = 2\n' >"$tmp/bad_key.toml"
expect_error "did you mean 'pin_cpu_workers'?" -- --config "$tmp/bad_key.toml"
printf 'verbose = "yes"\n' >"$tmp/bad_type.toml"
expect_error 'has type string; expected a boolean' -- --config "$tmp/bad_type.toml"
printf 'verbose = \n' >"$tmp/bad_syntax.toml"
expect_error 'bad_syntax.toml:1:' -- --config "$tmp/bad_syntax.toml"
expect_error 'unexpected argument' -- stray
expect_error '--model-gb' -- --model-gb -1
expect_error 'DDO_EXECUTION_MODE = "vmm_runtime"' DDO_EXECUTION_MODE=vmm_runtime --

if [ "$failures" != 0 ]; then
  echo "$failures ddo-config check(s) failed"
  exit 1
fi
echo "all ddo-config checks passed"
