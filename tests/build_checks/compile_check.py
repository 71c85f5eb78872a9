#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compile-fail checks as tests: `compile_check.py ok|fail COMPILER ARGS...` compiles (syntax and
semantics, no code generation) and succeeds when the compile's outcome is the expected one. The
reference models must compile (so the environment is sound); each near miss must not. On the
unexpected outcome the compiler's output is shown."""
import subprocess
import sys


def main(argv):
    if len(argv) < 4 or argv[1] not in ("ok", "fail"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[2:] + ["-fsyntax-only"]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    compiled = result.returncode == 0
    if compiled == (argv[1] == "ok"):
        print(f"{cmd[-2]}: {'compiles' if compiled else 'is rejected'}, as expected")
        return 0
    print(" ".join(cmd), file=sys.stderr)
    print(result.stdout[-6000:], file=sys.stderr)
    print(f"{cmd[-2]}: {'compiled but must not' if compiled else 'must compile but did not'}",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
