#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Groups the headers the header checks compile into chains, one translation unit each.

A header check proves that a header compiles on its own. Compiled alone, header X has, before its
first line of code, everything its leading includes bring in: each leading include is processed
whole (with the includes at its own end, such as an impl header) before X's code starts. So a TU
that includes P and then X checks X exactly as a TU of X alone does, when P is reached from X
through leading includes only (P is in X's "leading closure"): everything P brings is in X's own
TU before X's first line of code anyway. A chain P1, P2, ..., Pn in which each header is in the
leading closure of the next is then one TU, checking every one of them (each included twice: its
include guard too), for about the cost of Pn alone: the setup headers each parse most of ddo.

Leading includes: the `#include "ddo/..."` lines before the first line that is neither blank, a
comment, `#pragma once` nor an `#include`. A conditional (#if), a #define or a declaration ends
them, so an include that depends on a macro, or comes after code, never orders a chain.

Usage:
  header_chains.py chains INCLUDE_DIR HEADER...   one line per chain: its headers, in order
  header_chains.py self-test
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
PRAGMA_ONCE = re.compile(r'^\s*#\s*pragma\s+once\s*$')


def leading_includes(text):
    """The quoted includes before the header's first line of code."""
    found = []
    in_block = False
    for line in text.splitlines():
        stripped = line.strip()
        if in_block:
            if '*/' in stripped:
                in_block = False
                rest = stripped.split('*/', 1)[1].strip()
                if rest and not rest.startswith('//'):
                    break
            continue
        if not stripped or stripped.startswith('//'):
            continue
        if stripped.startswith('/*'):
            if '*/' not in stripped[2:]:
                in_block = True
                continue
            rest = stripped[2:].split('*/', 1)[1].strip()
            if not rest or rest.startswith('//'):
                continue
            break
        if PRAGMA_ONCE.match(stripped):
            continue
        match = INCLUDE.match(stripped)
        if match is None:
            if stripped.startswith('#') and re.match(r'^#\s*include\s*<', stripped):
                continue  # a standard or third-party header: no ddo header to order by
            break
        found.append(match.group(1))
    return found


def leading_closures(read, headers):
    """header -> the set of ddo headers reached from it through leading includes only."""
    edges = {}

    def edges_of(name):
        if name not in edges:
            text = read(name)
            edges[name] = [] if text is None else leading_includes(text)
        return edges[name]

    closures = {}
    for header in headers:
        seen = set()
        stack = list(edges_of(header))
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            stack.extend(edges_of(name))
        seen.discard(header)
        closures[header] = seen
    return closures


def chains(read, headers):
    """A cover of `headers` by chains (each header in the leading closure of the next), few and
    with cheap last headers: the cost of a chain's TU is about that of its last header."""
    headers = sorted(set(headers))
    closures = leading_closures(read, headers)
    # The size of a header's closure stands in for its cost. The most expensive headers are
    # placed under another first (then they cost nothing of their own); each goes under the
    # cheapest header that reaches it and has no header under it yet.
    size = {h: len(closures[h]) for h in headers}
    successor = {}
    has_predecessor = set()
    for header in sorted(headers, key=lambda h: (-size[h], h)):
        above = [x for x in headers if header in closures[x] and x not in has_predecessor]
        if above:
            target = min(above, key=lambda x: (size[x], x))
            successor[header] = target
            has_predecessor.add(target)
    result = []
    for start in headers:
        if start in has_predecessor:
            continue
        chain = [start]
        while chain[-1] in successor:
            chain.append(successor[chain[-1]])
        result.append(chain)
    return sorted(result, key=lambda c: c[-1])


def self_test():
    files = {
        'a.hpp': '#pragma once\n// doc\n#include <vector>\nint a();\n',
        'b.hpp': '#pragma once\n/* block\n comment */\n#include "a.hpp"\nint b();\n'
                 '#include "late.hpp"\n',
        'c.hpp': '#pragma once\n#include "b.hpp"\nint c();\n',
        'd.hpp': '#pragma once\n#if X\n#include "a.hpp"\n#endif\nint d();\n',
        'e.hpp': '#pragma once\n#define Y 1\n#include "c.hpp"\n',
        'late.hpp': '#pragma once\nint late();\n',
        'x.hpp': '#pragma once\n#include "late.hpp"\n',
    }
    read = files.get
    assert leading_includes(files['b.hpp']) == ['a.hpp'], 'an include after code leads nothing'
    assert leading_includes(files['d.hpp']) == [], 'a conditional ends the leading includes'
    assert leading_includes(files['e.hpp']) == [], 'a #define ends the leading includes'
    closures = leading_closures(read, ['a.hpp', 'b.hpp', 'c.hpp', 'd.hpp', 'e.hpp', 'x.hpp'])
    assert closures['c.hpp'] == {'a.hpp', 'b.hpp'}, closures['c.hpp']
    assert closures['d.hpp'] == set()
    got = chains(read, ['a.hpp', 'b.hpp', 'c.hpp', 'd.hpp', 'e.hpp', 'x.hpp'])
    assert ['a.hpp', 'b.hpp', 'c.hpp'] in got, got
    assert ['d.hpp'] in got and ['e.hpp'] in got and ['x.hpp'] in got, got
    # Every header exactly once, and each in the leading closure of the next.
    every = [h for chain in got for h in chain]
    assert sorted(every) == sorted(set(every)) and len(every) == 6, got
    for chain in got:
        for before, after in zip(chain, chain[1:]):
            assert before in closures[after], (before, after)
    print('header_chains self-test: passed')


def main(argv):
    if len(argv) >= 2 and argv[1] == 'self-test':
        self_test()
        return 0
    if len(argv) < 4 or argv[1] != 'chains':
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[2]

    def read(name):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            return None
        with open(path, encoding='utf-8') as handle:
            return handle.read()

    for header in argv[3:]:
        if read(header) is None:
            print(f'header_chains.py: {header}: no such header under {root}', file=sys.stderr)
            return 1
    for chain in chains(read, argv[3:]):
        print(' '.join(chain))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
