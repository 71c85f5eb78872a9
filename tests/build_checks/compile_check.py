#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compile-fail checks as tests.

  compile_check.py ok|fail|fail=TEXT|one_error=TEXT COMPILER ARGS... SOURCE
      compiles SOURCE (syntax and semantics, no code generation) and succeeds when the outcome is
      the expected one; `fail=TEXT` also wants TEXT in the compiler's output (the diagnostic a
      user must see); `one_error=TEXT` wants exactly one error, and TEXT in it (a user meets the
      explanation and nothing else to puzzle over).
  compile_check.py link_first=TEXT COMPILER ARGS... SOURCE -- LINK_ARGS...
      compiles SOURCE to an object, links it alone with LINK_ARGS and wants the link to fail with
      TEXT in its first "undefined reference" line (the explanation before the bare symbols).

The reference models must compile (so the environment is sound); each near miss must not. On the
unexpected outcome the compiler's (or linker's) output is shown."""
import os
import re
import subprocess
import sys
import tempfile

MODES = ("ok", "fail", "one_error", "link_first")


def run(cmd):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return result.returncode == 0, result.stdout


def unexpected(cmd, output, message):
    print(" ".join(cmd), file=sys.stderr)
    print(output[-6000:], file=sys.stderr)
    print(message, file=sys.stderr)
    return 1


def link_first(expected_text, args):
    if "--" not in args:
        print(__doc__, file=sys.stderr)
        return 2
    split = args.index("--")
    compile_args, link_args = args[:split], args[split + 1:]
    source = compile_args[-1]
    with tempfile.TemporaryDirectory() as tmp:
        obj, exe = os.path.join(tmp, "tu.o"), os.path.join(tmp, "program")
        cmd = compile_args + ["-c", "-o", obj]
        compiled, output = run(cmd)
        if not compiled:
            return unexpected(cmd, output, f"{source}: must compile but did not")
        cmd = [compile_args[0], obj, "-o", exe] + link_args
        linked, output = run(cmd)
    if linked:
        return unexpected(cmd, output, f"{source}: linked but must not")
    undefined = [line for line in output.splitlines() if "undefined reference" in line]
    if not undefined or expected_text not in undefined[0]:
        first = undefined[0] if undefined else "(none)"
        return unexpected(cmd, output, f"{source}: the first undefined reference is {first!r}, "
                          f"not one naming {expected_text!r}")
    print(f"{source}: fails to link, {expected_text!r} first of {len(undefined)} undefined "
          "references, as expected")
    return 0


def main(argv):
    mode, _, expected_text = argv[1].partition("=") if len(argv) > 1 else ("", "", "")
    if len(argv) < 4 or mode not in MODES or (expected_text and mode == "ok") or \
            (mode in ("one_error", "link_first") and not expected_text):
        print(__doc__, file=sys.stderr)
        return 2
    if mode == "link_first":
        return link_first(expected_text, argv[2:])
    cmd = argv[2:] + ["-fsyntax-only"]
    compiled, output = run(cmd)
    source = cmd[-2]
    if not compiled and expected_text and expected_text not in output:
        return unexpected(cmd, output, f"{source}: is rejected, but the output lacks "
                          f"{expected_text!r}")
    errors = [line for line in output.splitlines() if re.search(r"\berror\b:", line)]
    if not compiled and mode == "one_error" and len(errors) != 1:
        return unexpected(cmd, output, f"{source}: is rejected with {len(errors)} errors, "
                          "not exactly one")
    if compiled == (mode == "ok"):
        print(f"{source}: {'compiles' if compiled else 'is rejected'}, as expected")
        return 0
    return unexpected(cmd, output, f"{source}: "
                      f"{'compiled but must not' if compiled else 'must compile but did not'}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
