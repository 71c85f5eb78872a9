#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Build checks of ddo's header graph (run by `meson test --suite build_checks`).

  check_layers.py layers INCLUDE_DIR   every header includes only its own layer and layers below
                                       (docs/design.md, "Layers"), except the pairs FORBIDDEN
                                       names (config/ -> model/), and another area's detail/
                                       only for core/detail; the standard headers STD_THROUGH
                                       names (<chrono>) only through ddo's lighter header;
  check_layers.py thirdparty INCLUDE_DIR  toml++ and Boost reach no header (directly or through
                                       the headers it includes) except the TOML source, the
                                       settings TOML writer and cli/;
  check_layers.py impls INCLUDE_DIR    every impl header a header includes only when ddo is
                                       header-only (`#if DDO_HEADER_ONLY`) is included by
                                       ddo/instantiate.hpp, after that header, which compiles
                                       them once otherwise (core/linkage.hpp), and nothing else
                                       is listed there;
  check_layers.py cycles INCLUDE_DIR   no header reaches itself through its ddo includes, gated
                                       or not (an impl header is part of the header that
                                       includes it and does not include it back);
  check_layers.py self-test            the checks fail on a tree that breaks their rule.

The order below is the one written in docs/design.md; keep the two in step.
"""
import os
import re
import sys
import tempfile

# Ground first: a header in layer N may include layers 0..N.
LAYERS = ["core", "platform", "memory", "model", "transport", "config", "plan", "profile",
          "adapter", "runtime", "setup", "cli"]
# Pairs the order allows but the design does not: config/ takes the two vocabulary types it shares
# with model/ (module_kind, safetensors_backend) from core/, so the settings do not depend on how
# models are read and represented. (Below config/ only core/ and memory/ are included by it, and
# neither may include model/, so a direct include is the only way in.)
FORBIDDEN = {("config", "model"): "config/ takes its vocabulary from core/ (core/module_kind.hpp, "
                                  "core/safetensors_backend.hpp), not from model/"}
# Headers allowed to reach toml++ / Boost (relative to the include directory).
THIRD_PARTY_ALLOWED = ("ddo/config/toml_source.hpp", "ddo/config/settings_toml.hpp", "ddo/cli/")
THIRD_PARTY = re.compile(r'^\s*#\s*include\s*[<"](toml\+\+/|boost/)')
DDO_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](ddo/[^>"]+)[>"]')
# Standard headers ddo's headers take through a lighter header of ddo's own: each is included
# directly only by that header (docs/development.md, "What including ddo costs").
STD_THROUGH = {"chrono": "ddo/core/chrono.hpp"}
STD_INCLUDE = re.compile(r'^\s*#\s*include\s*<([a-z_]+)>')


def headers(root):
    out = []
    for dirpath, _, files in os.walk(os.path.join(root, "ddo")):
        for f in files:
            if f.endswith(".hpp"):
                out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return sorted(out)


def includes(root, header):
    ddo, third = [], []
    with open(os.path.join(root, header), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = DDO_INCLUDE.match(line)
            if m:
                ddo.append((n, m.group(1)))
            if THIRD_PARTY.match(line):
                third.append((n, line.strip()))
    return ddo, third


def area(header):
    parts = header.split("/")
    return parts[1] if len(parts) > 2 else None  # None: the umbrella ddo/ddo.hpp


def check_std_through(root):
    errors = []
    for h in headers(root):
        with open(os.path.join(root, h), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = STD_INCLUDE.match(line)
                if m and m.group(1) in STD_THROUGH and STD_THROUGH[m.group(1)] != h:
                    errors.append(f"{h}:{n}: includes <{m.group(1)}>; include "
                                  f"{STD_THROUGH[m.group(1)]} instead (what ddo uses of it, "
                                  f"for less of every TU's compile cost)")
    return errors


def check_layers(root):
    errors = check_std_through(root)
    for h in headers(root):
        mine = area(h)
        if mine is None:
            continue  # the umbrella sits above every layer
        if mine not in LAYERS:
            errors.append(f"{h}: area '{mine}' is not in the layer order "
                          f"({' < '.join(LAYERS)}); add it to docs/design.md and {__file__}")
            continue
        for line, inc in includes(root, h)[0]:
            theirs = area(inc)
            if theirs is None:
                errors.append(f"{h}:{line}: includes the umbrella {inc}")
                continue
            if theirs not in LAYERS:
                errors.append(f"{h}:{line}: includes {inc} of unknown area '{theirs}'")
                continue
            if LAYERS.index(theirs) > LAYERS.index(mine):
                errors.append(f"{h}:{line}: layer '{mine}' includes {inc} of layer '{theirs}', "
                              f"which is above it (order, ground first: {' < '.join(LAYERS)})")
            elif (mine, theirs) in FORBIDDEN:
                errors.append(f"{h}:{line}: layer '{mine}' includes {inc}: "
                              f"{FORBIDDEN[(mine, theirs)]}")
            elif theirs != mine and "/detail/" in inc and theirs != "core":
                errors.append(f"{h}:{line}: includes {inc}, a detail header of another area "
                              f"(only core/detail is shared)")
    return errors


def check_third_party(root):
    all_headers = headers(root)
    direct = {h: includes(root, h) for h in all_headers}
    errors = []
    for h in all_headers:
        if h.startswith(THIRD_PARTY_ALLOWED):
            continue
        # Walk the ddo headers h reaches; report the first path to a toml++/Boost include.
        seen = {h: None}
        queue = [h]
        while queue:
            cur = queue.pop(0)
            ddo_incs, third = direct.get(cur, ([], []))
            if third:
                path = [cur]
                while seen[path[-1]] is not None:
                    path.append(seen[path[-1]])
                chain = " <- ".join(path)
                errors.append(f"{h}: reaches '{third[0][1]}' ({cur}:{third[0][0]}; through "
                              f"{chain}); only {', '.join(THIRD_PARTY_ALLOWED)} may")
                break
            for _, inc in ddo_incs:
                if inc in direct and inc not in seen:
                    seen[inc] = cur
                    queue.append(inc)
    return errors


INSTANTIATE = "ddo/instantiate.hpp"


def gated_impls(root):
    """Impl headers included under `#if DDO_HEADER_ONLY`, with the header and line including them."""
    found = {}
    for h in headers(root):
        gated = False
        with open(os.path.join(root, h), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                stripped = line.strip()
                if stripped.startswith("#if"):
                    gated = stripped == "#if DDO_HEADER_ONLY"
                elif stripped.startswith(("#endif", "#else", "#elif")):
                    gated = False  # an #else of DDO_HEADER_ONLY is the compiled-once side
                m = DDO_INCLUDE.match(line)
                if gated and m:
                    found.setdefault(m.group(1), f"{h}:{n}")
    return found


def check_impls(root):
    gated = gated_impls(root)
    if not os.path.exists(os.path.join(root, INSTANTIATE)):
        return [f"{INSTANTIATE} is missing: it compiles the {len(gated)} gated impl headers once"]
    order = {}
    for line, inc in includes(root, INSTANTIATE)[0]:
        order.setdefault(inc, line)
    listed = {inc for inc in order if inc.endswith("_impl.hpp")}
    errors = [f"{where}: includes {impl} only when header-only, but {INSTANTIATE} does not "
              f"include it: a program compiling ddo once would miss its functions"
              for impl, where in sorted(gated.items()) if impl not in listed]
    # An impl header does not include its header back (check_cycles), so the declarations it
    # defines must come first.
    for impl, where in sorted(gated.items()):
        owner = where.rsplit(":", 1)[0]
        if impl in listed and order.get(owner, order[impl] + 1) > order[impl]:
            errors.append(f"{INSTANTIATE}:{order[impl]}: includes {impl} without including "
                          f"{owner}, which declares what it defines, on an earlier line")
    errors += [f"{INSTANTIATE}: includes {impl}, which no header leaves out when ddo is compiled "
               f"once (#if DDO_HEADER_ONLY): drop it or gate it"
               for impl in sorted(listed - set(gated))]
    return errors


def find_cycle(graph):
    """One include cycle of @p graph (header -> ddo headers it includes) as a path that starts and
    ends at the same header, or None. Iterative depth-first search: white, grey (on the current
    path), black."""
    state = {}
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(graph[start])]
        state[start] = "grey"
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = "black"
                stack.pop()
            elif nxt not in graph:
                continue  # a header outside include/ (reported by the layer check if wrong)
            elif state.get(nxt) == "grey":
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = "grey"
                path.append(nxt)
                stack.append(iter(graph[nxt]))
    return None


def check_cycles(root):
    graph = {h: [inc for _, inc in includes(root, h)[0]] for h in headers(root)}
    errors = []
    # Report every cycle once: drop one edge of each found and search again.
    while (cycle := find_cycle(graph)) is not None:
        errors.append("include cycle: " + " -> ".join(cycle) + " (held only by #pragma once; "
                      "move what both need into a header neither includes back)")
        graph[cycle[-2]] = [inc for inc in graph[cycle[-2]] if inc != cycle[-1]]
    return errors


def self_test():
    failures = []
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        write("ddo/core/a.hpp", "#pragma once\n#include <string>\n")
        write("ddo/model/b.hpp", '#pragma once\n#include "ddo/core/a.hpp"\n')
        write("ddo/config/c.hpp", '#pragma once\n#include "ddo/core/a.hpp"\n')
        write("ddo/plan/p.hpp", '#pragma once\n#include "ddo/model/b.hpp"\n'
                                '#include "ddo/config/c.hpp"\n')
        write("ddo/config/toml_source.hpp", "#pragma once\n#include <toml++/toml.h>\n")
        if check_layers(root) or check_third_party(root):
            failures.append("a clean tree was reported")
        write("ddo/model/bad.hpp", '#pragma once\n#include "ddo/config/c.hpp"\n')
        if not any("model/bad.hpp" in e and "above it" in e for e in check_layers(root)):
            failures.append("model including config was not reported")
        os.remove(os.path.join(root, "ddo/model/bad.hpp"))
        write("ddo/config/detail/m.hpp", '#pragma once\n#include "ddo/model/b.hpp"\n')
        if not any("config/detail/m.hpp" in e and "vocabulary" in e for e in check_layers(root)):
            failures.append("config including model was not reported")
        os.remove(os.path.join(root, "ddo/config/detail/m.hpp"))
        write("ddo/model/t.hpp", '#pragma once\n#include <chrono>\n')
        if not any("model/t.hpp:2" in e and "ddo/core/chrono.hpp" in e for e in check_layers(root)):
            failures.append("a direct <chrono> include was not reported")
        os.remove(os.path.join(root, "ddo/model/t.hpp"))
        write("ddo/plan/d.hpp", '#pragma once\n#include "ddo/model/detail/x.hpp"\n')
        if not any("detail header" in e for e in check_layers(root)):
            failures.append("a foreign detail include was not reported")
        os.remove(os.path.join(root, "ddo/plan/d.hpp"))
        write("ddo/config/e.hpp", '#pragma once\n#include "ddo/config/toml_source.hpp"\n')
        write("ddo/model/f.hpp", '#pragma once\n#include <boost/program_options.hpp>\n')
        third = check_third_party(root)
        if not any(e.startswith("ddo/config/e.hpp") and "toml" in e for e in third):
            failures.append("toml++ reached through an include was not reported")
        if not any(e.startswith("ddo/model/f.hpp") and "boost" in e for e in third):
            failures.append("a direct Boost include was not reported")
        write("ddo/model/g.hpp", '#pragma once\n#if DDO_HEADER_ONLY\n'
                                 '#include "ddo/model/detail/g_impl.hpp"\n#endif\n')
        write("ddo/model/detail/g_impl.hpp", '#pragma once\n#include "ddo/model/g.hpp"\n')
        write(INSTANTIATE, '#pragma once\n#include "ddo/core/a.hpp"\n')
        if not any("g_impl.hpp" in e and "does not include it" in e for e in check_impls(root)):
            failures.append("a gated impl missing from ddo/instantiate.hpp was not reported")
        write(INSTANTIATE, '#pragma once\n#include "ddo/model/g.hpp"\n'
                           '#include "ddo/model/detail/g_impl.hpp"\n')
        if check_impls(root):
            failures.append("a complete ddo/instantiate.hpp was reported")
        write(INSTANTIATE, '#pragma once\n#include "ddo/model/detail/g_impl.hpp"\n'
                           '#include "ddo/model/detail/h_impl.hpp"\n')
        if not any("h_impl.hpp" in e for e in check_impls(root)):
            failures.append("an ungated impl listed in ddo/instantiate.hpp was not reported")
        write(INSTANTIATE, '#pragma once\n#include "ddo/model/detail/g_impl.hpp"\n'
                           '#include "ddo/model/g.hpp"\n')
        if not any("without including ddo/model/g.hpp" in e for e in check_impls(root)):
            failures.append("an impl listed before the header declaring it was not reported")
        # The fixture's g_impl.hpp includes g.hpp back: the cycle an impl header must not make.
        if not any(e.count("ddo/model/g.hpp") + e.count("ddo/model/detail/g_impl.hpp") == 3
                   for e in check_cycles(root)):
            failures.append("an impl header including its header back was not reported")
        write("ddo/model/detail/g_impl.hpp", '#pragma once\n#include "ddo/core/a.hpp"\n')
        if check_cycles(root):
            failures.append("a tree without cycles was reported: " + "; ".join(check_cycles(root)))
        write("ddo/runtime/x.hpp", '#pragma once\n#include "ddo/runtime/y.hpp"\n')
        write("ddo/runtime/y.hpp", '#pragma once\n#if !DDO_HEADER_ONLY\n'
                                   '#include "ddo/runtime/z.hpp"\n#endif\n')
        write("ddo/runtime/z.hpp", '#pragma once\n#include "ddo/runtime/x.hpp"\n')
        write("ddo/core/self.hpp", '#pragma once\n#include "ddo/core/self.hpp"\n')
        cycles = check_cycles(root)
        if not any("x.hpp -> ddo/runtime/y.hpp -> ddo/runtime/z.hpp -> ddo/runtime/x.hpp" in e
                   for e in cycles):
            failures.append("a three-header cycle through a gated include was not reported")
        if not any("ddo/core/self.hpp -> ddo/core/self.hpp" in e for e in cycles):
            failures.append("a header including itself was not reported")
        if len(cycles) != 2:
            failures.append(f"two planted cycles gave {len(cycles)} reports: {cycles}")
    return failures


def main(argv):
    if len(argv) == 2 and argv[1] == "self-test":
        failures = self_test()
        for f in failures:
            print("check_layers self-test: " + f, file=sys.stderr)
        return 1 if failures else 0
    if len(argv) != 3 or argv[1] not in ("layers", "thirdparty", "impls", "cycles"):
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[2]
    errors = {"layers": check_layers, "thirdparty": check_third_party,
              "impls": check_impls, "cycles": check_cycles}[argv[1]](root)
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print(f"{argv[1]}: {len(headers(root))} headers checked, order "
              f"{' < '.join(LAYERS)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
