#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every C++ snippet of README.md and docs/*.md compiles (issue 40: a getting-started snippet
did not). A fence's info string says how it is compiled:

  ```cpp               a complete translation unit, compiled alone as written;
  ```cpp {fragment}    statements (local classes too) of an engine: the body of a function
                       of `doc_engine` (doc_snippets/harness.hpp), whose members are the names
                       an engine has and the docs take as given (its model, transport, streams,
                       kernels...). Its leading #include lines go to file scope. Every fragment
                       of every page is one function of one translation unit (they share what
                       they instantiate, so the check costs one compile);
  ```cpp {file=PATH}   the snippet's code lines are in PATH (relative to the root), a file the
                       build compiles (no second compile of it here).

Any other fence of C++ (```c++, ```cxx, an unknown marker) fails the check. Compiled with
-fsyntax-only (templates are instantiated, no code is generated); an error points at the page
and line (#line), e.g. "docs/getting-started.md:259: error: ...".

  doc_snippets.py check ROOT --cxx CXX --cuda-include DIR [--harness-dir DIR] [--flags ...]
  doc_snippets.py self-test --cxx CXX --cuda-include DIR
"""
import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FENCE = re.compile(r"^(\s*)```(\S*)\s*(.*)$")
CXX_LANGS = ("cpp", "c++", "cxx", "cc", "C++")


class Snippet:
    def __init__(self, page, line, kind, arg, text):
        self.page, self.line, self.kind, self.arg, self.text = page, line, kind, arg, text

    def where(self):
        return f"{self.page}:{self.line}"


def parse_marker(info):
    """(kind, argument) of a fence's info string after the language, or (None, reason)."""
    info = info.strip()
    if not info:
        return "tu", None
    m = re.fullmatch(r"\{\s*(fragment|file\s*=\s*(\S+))\s*\}", info)
    if not m:
        return None, f"unknown marker {info!r} (allowed: none, {{fragment}}, {{file=PATH}})"
    return ("fragment", None) if m.group(1) == "fragment" else ("file", m.group(2))


def snippets_of(root, page, errors):
    found = []
    lines = open(os.path.join(root, page), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(2):
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        lang = m.group(2)
        if lang in CXX_LANGS:
            kind, arg = parse_marker(m.group(3)) if lang == "cpp" else (None, "write ```cpp")
            if kind is None:
                errors.append(f"{page}:{i + 1}: {arg}")
            else:
                found.append(Snippet(page, i + 2, kind, arg, lines[i + 1:end]))
        i = end + 1
    return found


def pages_of(root):
    pages = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    return pages + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs",
                                                                                    "*.md")))


def fragments_tu(fragments, root):
    """One TU: the fragments' #include lines, the harness, each fragment a function body."""
    includes, bodies = [], []
    for n, s in enumerate(fragments):
        k = 0
        while k < len(s.text) and (s.text[k].startswith("#include") or not s.text[k].strip()):
            if s.text[k].strip():
                includes.append(f'#line {s.line + k} "{s.page}"\n{s.text[k]}')
            k += 1
        body = "\n".join(s.text[k:])
        bodies.append(f"template <>\nvoid doc_engine::snippet<{n}>() {{\n"
                      f'#line {s.line + k} "{s.page}"\n{body}\n}}\n')
    return "\n".join(includes) + '\n#include "harness.hpp"\n\n' + "\n".join(bodies)


def compile_tu(cmd, source_text, name, tmp):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(source_text)
    r = subprocess.run(cmd + [path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       cwd=tmp)
    return r.returncode == 0, r.stdout


def code_line(line):
    """A line as the {file=PATH} comparison sees it: no comment, no spaces at the ends, an
    #include's <> and "" alike."""
    line = line.split("//")[0].strip()
    m = re.fullmatch(r'#include\s*[<"](.*)[>"]', line)
    return f"#include <{m.group(1)}>" if m else line


def check(root, cxx, cuda_include, flags, harness_dir):
    root = os.path.abspath(root)
    errors = []
    snippets = [s for page in pages_of(root) for s in snippets_of(root, page, errors)]
    for s in snippets:
        if s.kind == "file":
            path = os.path.join(root, s.arg)
            if not os.path.isfile(path):
                errors.append(f"{s.where()}: {{file={s.arg}}}: no such file")
                continue
            have = {code_line(line) for line in open(path, encoding="utf-8")}
            for k, line in enumerate(s.text):
                if code_line(line) and code_line(line) not in have:
                    errors.append(f"{s.page}:{s.line + k}: not in {s.arg}: {line.strip()!r}")
    cmd = [cxx, "-std=c++20", "-fsyntax-only", "-I" + os.path.join(root, "include"),
           "-I" + harness_dir, "-isystem", cuda_include,
           "-Wno-unused-result", *flags]  # the pages list accessors as statements
    fragments = [s for s in snippets if s.kind == "fragment"]
    units = [(f"{s.page}:{s.line}", "\n".join([f'#line {s.line} "{s.page}"', *s.text, ""]))
             for s in snippets if s.kind == "tu"]
    if fragments:
        units.append((f"{len(fragments)} fragments", fragments_tu(fragments, root)))
    with tempfile.TemporaryDirectory() as tmp:
        # The TUs' #line directives name pages relative to the root: the compiler reports them so.
        for page in {s.page for s in snippets}:
            os.makedirs(os.path.join(tmp, os.path.dirname(page)), exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as ex:
            results = list(ex.map(lambda u: (u[0], *compile_tu(cmd, u[1], f"tu{units.index(u)}.cpp",
                                                             tmp)), units))
    for name, ok, output in results:
        if not ok:
            errors.append(f"{name}: does not compile:\n{output[-8000:]}")
    for e in errors:
        print(e, file=sys.stderr)
    kinds = {k: sum(s.kind == k for s in snippets) for k in ("tu", "fragment", "file")}
    print(f"doc snippets: {len(snippets)} C++ snippets ({kinds['tu']} whole TUs, "
          f"{kinds['fragment']} fragments in one TU, {kinds['file']} kept in files the build "
          f"compiles): {'FAILED' if errors else 'all compile'}")
    return 1 if errors else 0


def self_test(cxx, cuda_include):
    """A page with a good fragment, a bad one and a bad marker: the check must name both lines."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.symlink(os.path.join(HERE, "..", "..", "include"), os.path.join(root, "include"))
        # A harness of one name (the real one compiles every setup path: 20 s for nothing here).
        with open(os.path.join(root, "harness.hpp"), "w", encoding="utf-8") as f:
            f.write("#include <ddo/ddo.hpp>\nstruct doc_engine {\n  ddo::weight_table model;\n"
                    "  template <int N>\n  void snippet();\n};\n")
        with open(os.path.join(root, "docs", "page.md"), "w", encoding="utf-8") as f:
            f.write("# page\n\n```cpp {fragment}\nddo::weight_table t = model;\n```\n\n"
                    "```cpp {fragment}\nddo::runtime_options o;\no.no_such_member = 1;\n```\n\n"
                    "```cpp {typo}\nint x;\n```\n")
        r = subprocess.run([sys.executable, __file__, "check", root, "--cxx", cxx,
                            "--cuda-include", cuda_include, "--harness-dir", root], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    failures = []
    if r.returncode == 0:
        failures.append("a page with a bad snippet passed")
    if "docs/page.md:9" not in r.stdout or "no_such_member" not in r.stdout:
        failures.append("the error does not point at docs/page.md:9")
    if "docs/page.md:4" in r.stdout:
        failures.append("the good fragment was reported")
    if "docs/page.md:12: unknown marker" not in r.stdout:
        failures.append("the unknown marker was not reported")
    for f in failures:
        print("self-test: " + f, file=sys.stderr)
    if failures:
        print(r.stdout, file=sys.stderr)
    print(f"doc snippets self-test: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["check", "self-test"])
    ap.add_argument("root", nargs="?")
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--cuda-include", default="/usr/local/cuda/include")
    ap.add_argument("--flags", nargs="*", default=[])
    ap.add_argument("--harness-dir", default=os.path.join(HERE, "doc_snippets"),
                    help="where harness.hpp is (default: doc_snippets/ beside this script)")
    args = ap.parse_args()
    if args.mode == "self-test":
        return self_test(args.cxx, args.cuda_include)
    if not args.root:
        ap.error("check needs ROOT")
    return check(args.root, args.cxx, args.cuda_include, args.flags, args.harness_dir)


if __name__ == "__main__":
    sys.exit(main())
