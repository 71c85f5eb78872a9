#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What including ddo costs an engine, as a ratio to a translation unit that includes only the
standard and CUDA headers ddo uses, both compiled in the same run.

Two measures of each compile, both from GCC's own -ftime-report:
  memory  what GCC's front and middle end allocated (GGC memory, "TOTAL"): the same for the same
          compiler and headers on any machine and under any load, and it moves with the parsing
          and template instantiation a header adds. The CI check (--check) is on this ratio.
  time    user CPU of the compile: what an engine author pays, but it drifts +-15% between runs on
          a shared VM (the same tree measured 2.48x and 2.86x back to back), so it is reported,
          and checked only on request (--check-time, the minimum of --repeat runs, the runs of a
          case and of its baseline interleaved) as a benchmark on a quiet machine.

  include_cost.py [--cxx g++] [--nvcc PATH] [--include DIR] [--cuda-include DIR] [--repeat N]
                  [--check umbrella=2.50] [--check-time umbrella=2.0 --slack 0.30]
                  [--cases umbrella,offloader,offloader_once,instantiate,backend,backend_once,nvcc]

Cases (each against its own baseline):
  umbrella   `#include <ddo/ddo.hpp>` alone, g++ -O2        vs the std + CUDA TU, g++ -O2
  offloader  one offloader<host_sim_transport> planned from settings (the setup path), acquire,
             a lease, metrics, g++ -O2, ddo header-only
                                                              vs the std + CUDA TU, g++ -O2
  offloader_once  the same TU in a program that compiles ddo once (DDO_EXTERN_TEMPLATES:
             ddo/instantiate.hpp in another TU compiles the setup path, the runtime core for the
             shipped transports and ddo's non-template functions), g++ -O2
                                                              vs the std + CUDA TU, g++ -O2
  instantiate  that other TU, ddo/instantiate.hpp alone (paid once per program), g++ -O2
                                                              vs the std + CUDA TU, g++ -O2
  backend, backend_once  an engine TU letting `backend` choose the transport
             (with_offload_backend: five offloader types), header-only / compiling ddo once
                                                              vs the std + CUDA TU, g++ -O2
  nvcc       a .cu including the umbrella, nvcc -O2 (time only: nvcc runs several compilers)
                                                              vs a .cu with the same std headers
--check CASE=LIMIT fails (exit 1) when CASE's memory ratio is above LIMIT: the CI check that keeps
later work from giving the include-cost gain back (docs/development.md). --check-time CASE=TARGET
fails when CASE's time ratio (min of --repeat) is above TARGET * (1 + slack).
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile

STD_HEADERS = ["vector", "string", "map", "unordered_map", "thread", "mutex",
               "condition_variable", "optional", "functional", "memory", "chrono", "algorithm",
               "filesystem", "span", "variant"]

BASELINE = "#include <cuda_runtime_api.h>\n" + "".join(f"#include <{h}>\n" for h in STD_HEADERS)
BASELINE += "int main() { return 0; }\n"

UMBRELLA = "#include <ddo/ddo.hpp>\nint main() { return 0; }\n"

# The model both engine TUs describe: one bf16 linear weight in host memory.
MODEL = r"""#include <cstddef>
#include <optional>
#include <vector>

static ddo::weight_table one_weight_model(std::vector<std::byte>& bytes) {
  bytes.assign(64 * 64 * 2, std::byte{7});
  ddo::weight_table table;
  table.add({.name = "blocks.0.proj.weight", .module_name = "", .kind = ddo::module_kind::linear,
             .type = ddo::dtype::bf16, .shape = {64, 64}, .bytes = 0,
             .source = ddo::host_source{bytes.data()}});
  return table;
}
"""

# One offloader planned from settings over host_sim: acquire, a lease, metrics.
OFFLOADER = "#include <ddo/ddo.hpp>\n#include <ddo/setup/setup.hpp>\n" + \
    "#include <ddo/transport/host_sim.hpp>\n" + MODEL + r"""
int main() {
  std::vector<std::byte> bytes;
  const ddo::weight_table table = one_weight_model(bytes);
  ddo::host_sim_transport transport({.device_capacity_bytes = 256 * ddo::mib});
  ddo::dynamic_offload_settings settings;
  ddo::offloader<ddo::host_sim_transport> offloader(table, settings, {}, transport);
  auto stream = transport.make_stream();
  std::size_t seen = 0;
  {
    auto lease = offloader.acquire(0, transport.view(stream));
    seen = lease.size();
  }
  transport.synchronize(transport.view(stream));
  const auto metrics = offloader.metrics(true);
  return seen == 1 && metrics.totals.group_loads <= 1 ? 0 : 1;
}
"""

# An engine letting `backend` choose: with_offload_backend instantiates five offloader types.
BACKEND = "#include <ddo/ddo.hpp>\n#include <ddo/setup/enable_offload.hpp>\n" + MODEL + r"""
int main() {
  std::vector<std::byte> bytes;
  const ddo::weight_table table = one_weight_model(bytes);
  return ddo::with_offload_backend(table, std::nullopt, ddo::setup_options{}, [](auto& enabled) {
    return static_cast<int>(enabled.offloader->group_count());
  });
}
"""

def run_compile(cmd):
    """Runs @p cmd (it must succeed); returns the user CPU seconds of it and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    if result.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + result.stdout[-4000:])
        raise SystemExit(f"include_cost: the compile failed (exit {result.returncode})")
    return after - before, result.stdout


UNITS = {"": 1, "k": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def gcc_memory(report):
    """Bytes GCC allocated, from the "TOTAL" line of its -ftime-report (e.g. "333M")."""
    for line in report.splitlines():
        fields = line.split()
        if fields and fields[0] == "TOTAL":
            amount = fields[-1]
            unit = amount[-1] if amount[-1] in UNITS else ""
            return float(amount[:len(amount) - len(unit)]) * UNITS[unit]
    raise SystemExit("include_cost: no TOTAL line in the compiler's -ftime-report:\n"
                     + report[-2000:])


def parse_checks(pairs, option):
    checks = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            checks[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise SystemExit(f"include_cost: {option} takes CASE=NUMBER, got '{pair}'")
    return checks


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    ap.add_argument("--include", default=os.path.normpath(os.path.join(here, "../../include")))
    ap.add_argument("--cuda-include", default="/usr/local/cuda/include")
    ap.add_argument("--repeat", type=int, default=1,
                    help="compiles of each TU for the time ratio (its minimum); memory needs one")
    ap.add_argument("--cases", default="umbrella")
    ap.add_argument("--check", action="append", default=[],
                    help="CASE=LIMIT: fail when the memory ratio exceeds LIMIT")
    ap.add_argument("--check-time", action="append", default=[],
                    help="CASE=TARGET: fail when the time ratio exceeds TARGET * (1 + slack)")
    ap.add_argument("--slack", type=float, default=0.30)
    args = ap.parse_args()
    if args.repeat < 1:
        raise SystemExit(f"include_cost: --repeat must be at least 1, got {args.repeat}")

    memory_checks = parse_checks(args.check, "--check")
    time_checks = parse_checks(args.check_time, "--check-time")
    if "nvcc" in memory_checks:
        raise SystemExit("include_cost: nvcc has no memory ratio (nvcc runs several compilers); "
                         "check it with --check-time")
    cases = [c for c in args.cases.split(",") if c]
    for name in [*memory_checks, *time_checks]:
        if name not in cases:
            cases.append(name)
    cxx_flags = ["-std=c++20", "-O2", "-c", "-o", os.devnull, "-I" + args.include,
                 "-isystem", args.cuda_include]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, text):
            path = os.path.join(tmp, name)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return path

        base_cpp = write("baseline.cpp", BASELINE)
        # Each g++ case: its TU and whether it compiles ddo once, against the baseline TU.
        once = ["-DDDO_EXTERN_TEMPLATES"]
        gxx_cases = {"umbrella": (UMBRELLA, []), "offloader": (OFFLOADER, []),
                     "offloader_once": (OFFLOADER, once),
                     "instantiate": ("#include <ddo/instantiate.hpp>\n", once),
                     "backend": (BACKEND, []), "backend_once": (BACKEND, once)}
        report = ["-ftime-report"]
        jobs = {name: ([args.cxx, *cxx_flags, *report, base_cpp],
                       [args.cxx, *cxx_flags, *flags, *report, write(name + ".cpp", text)])
                for name, (text, flags) in gxx_cases.items() if name in cases}
        if "nvcc" in cases:
            if not shutil.which(args.nvcc):
                raise SystemExit(f"include_cost: nvcc not found at {args.nvcc}")
            nv = [args.nvcc, "-std=c++20", "-O2", "-c", "-o", os.devnull, "-I" + args.include,
                  "-ccbin", args.cxx]
            jobs["nvcc"] = ([*nv, write("baseline.cu", BASELINE)],
                            [*nv, write("umbrella.cu", UMBRELLA)])
        # The g++ cases share one baseline TU: with one run each (CI) it is compiled once, not once
        # per case (its memory is the same every time; its time is one sample either way).
        shared_base = {}
        for name in cases:
            if name not in jobs:
                raise SystemExit(f"include_cost: unknown case '{name}' (cases: "
                                 + ", ".join([*gxx_cases, "nvcc"]) + ")")
            base_cmd, ddo_cmd = jobs[name]
            base_s, ddo_s = [], []
            for _ in range(args.repeat):  # interleaved: load on the machine touches both alike
                key = tuple(base_cmd)
                if args.repeat == 1 and key in shared_base:
                    seconds, base_report = shared_base[key]
                else:
                    seconds, base_report = run_compile(base_cmd)
                    shared_base[key] = (seconds, base_report)
                base_s.append(seconds)
                seconds, ddo_report = run_compile(ddo_cmd)
                ddo_s.append(seconds)
            memory = None if name == "nvcc" else (gcc_memory(base_report), gcc_memory(ddo_report))
            results[name] = (min(base_s), min(ddo_s), memory)

    compiler = subprocess.run([args.cxx, "--version"], stdout=subprocess.PIPE,
                              text=True).stdout.splitlines()[0]
    print(f"include cost ({compiler}; -O2): GCC's allocated memory (deterministic) and user CPU "
          f"(min of {args.repeat}; varies with the machine's load), each against the std + CUDA TU")
    print("| case | baseline MB | ddo MB | memory ratio | baseline s | ddo s | time ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, (b, d, memory) in results.items():
        mem = ("| — | — | — " if memory is None else
               f"| {memory[0] / 2**20:.0f} | {memory[1] / 2**20:.0f} | {memory[1] / memory[0]:.2f}x ")
        print(f"| {name} {mem}| {b:.2f} | {d:.2f} | {d / b:.2f}x |")
    failed = False
    for name, limit in memory_checks.items():
        base, ddo = results[name][2]
        ratio = ddo / base
        verdict = "ok" if ratio <= limit else "FAIL"
        print(f"{name}: memory {ratio:.3f}x ({ddo / 2**20:.0f} MB against {base / 2**20:.0f} MB),"
              f" limit {limit:.2f}x: {verdict}")
        failed |= ratio > limit
    for name, target in time_checks.items():
        b, d, _ = results[name]
        limit = target * (1.0 + args.slack)
        verdict = "ok" if d / b <= limit else "FAIL"
        print(f"{name}: time {d / b:.2f}x against target {target:.1f}x (fails above {limit:.2f}x,"
              f" min of {args.repeat}): {verdict}")
        failed |= d / b > limit
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
