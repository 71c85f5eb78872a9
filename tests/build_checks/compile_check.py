#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compile-fail checks as tests: `compile_check.py ok|fail|fail=TEXT COMPILER ARGS...` compiles
(syntax and semantics, no code generation) and succeeds when the compile's outcome is the expected
one; `fail=TEXT` also wants TEXT in the compiler's output (the diagnostic a user must see). The
reference models must compile (so the environment is sound); each near miss must not. On the
unexpected outcome the compiler's output is shown."""
import subprocess
import sys


def main(argv):
    mode, _, expected_text = argv[1].partition("=") if len(argv) > 1 else ("", "", "")
    if len(argv) < 4 or mode not in ("ok", "fail") or (expected_text and mode != "fail"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[2:] + ["-fsyntax-only"]
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    compiled = result.returncode == 0
    if not compiled and expected_text and expected_text not in result.stdout:
        print(result.stdout[-6000:], file=sys.stderr)
        print(f"{cmd[-2]}: is rejected, but the output lacks {expected_text!r}", file=sys.stderr)
        return 1
    if compiled == (mode == "ok"):
        print(f"{cmd[-2]}: {'compiles' if compiled else 'is rejected'}, as expected")
        return 0
    print(" ".join(cmd), file=sys.stderr)
    print(result.stdout[-6000:], file=sys.stderr)
    print(f"{cmd[-2]}: {'compiled but must not' if compiled else 'must compile but did not'}",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
