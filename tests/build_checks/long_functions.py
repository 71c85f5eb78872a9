#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Lists the functions of include/ longer than a limit (issue 26: no library function over ~80
lines). A function's length runs from the line of its name to its closing brace; lambdas and
local classes count toward the function that holds them.

Usage: long_functions.py DIR [--limit N] [--allow FILE] [--sources]
       long_functions.py self-test
DIR's headers (*.hpp); with --sources also its *.cpp and *.cu files (examples/ and bench/, whose
programs are read as models of the API: issue 40).
Prints `LINES NAME FILE:LINE`, longest first. With --allow (the build check) it fails on a function
over the limit that FILE does not list, or longer than FILE allows it (lines `LINES NAME FILE`,
a ceiling for each function not yet brought under the limit: a list that only shrinks).

A brace scanner, not a C++ parser: comments, string and character literals and preprocessor
lines are blanked first; a `{` at namespace or class scope opens a function body when the text
before it (since the last `;`, `{` or `}` there) names a call signature: a `(` with no `=` before
it, ending in `)`, a specifier (const, noexcept, override, ...), a trailing return type, a
requires-clause or a member-initializer list. Other braces there (`int x{1}`, `a_{x}` in an
initializer list, `= {...}`) are initializers and do not end the declaration.
"""
import pathlib
import re
import sys

_LITERAL = re.compile(
    r'//[^\n]*|/\*.*?\*/|R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
    re.S)
_PREPROCESSOR = re.compile(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', re.M)
_SPECIFIER_END = re.compile(
    r'(\)|\}|\bconst|\bnoexcept|\boverride|\bfinal|\bmutable|&|\btry)\s*$')


def _blank(match):
    return re.sub(r'[^\n]', ' ', match.group(0))


def strip(text):
    """The text with comments, literals and preprocessor lines blanked (newlines kept)."""
    return _PREPROCESSOR.sub(_blank, _LITERAL.sub(_blank, text))


def _without_templates(decl):
    """@p decl without its `template <...>` headers (so `template <class T>` is not a class)."""
    out, i = [], 0
    while True:
        m = re.compile(r'\btemplate\s*<').search(decl, i)
        if not m:
            return ''.join(out) + decl[i:]
        out.append(decl[i:m.start()])
        depth, j = 1, m.end()
        while j < len(decl) and depth:
            depth += {'<': 1, '>': -1}.get(decl[j], 0)
            j += 1
        i = j


def _kind(decl):
    """What a `{` after the declaration text @p decl opens: scope, function or init."""
    d = _without_templates(decl).strip()
    d = re.sub(r'^(public|private|protected)\s*:', '', d).strip()
    paren = d.find('(')
    head = d if paren < 0 else d[:paren]
    if re.search(r'\b(namespace|class|struct|union|enum)\b', head) or re.match(r'extern\b', d):
        return 'scope', None
    if paren < 0 or '=' in head:
        return 'init', None
    after = d[d.rfind(')'):]
    if _SPECIFIER_END.search(d) or '->' in after or re.search(r'\brequires\b', after):
        name = re.search(r'([~\w]+(?:\s*::\s*[~\w]+)*|operator\s*\S+?)\s*$', head)
        return 'function', (name.group(1) if name else head.strip())
    return 'init', None


def functions(text):
    """(first line, last line, name) of each function defined at namespace or class scope."""
    src = strip(text)
    stack = []  # (kind, name, first line) of each open brace
    start = 0  # where the current declaration at namespace or class scope begins
    opaque = 0  # open braces inside a function body or an initializer
    found = []
    for i, c in enumerate(src):
        if c == '{':
            if opaque:
                stack.append(('inner', None, 0))
                opaque += 1
                continue
            kind, name = _kind(src[start:i])
            line = 0
            if kind == 'function':
                at = src.rfind(name.split('::')[-1].strip(), start, i)
                line = src.count('\n', 0, at if at >= 0 else i) + 1
            stack.append((kind, name, line))
            if kind == 'scope':
                start = i + 1
            else:
                opaque += 1
        elif c == '}' and stack:
            kind, name, line = stack.pop()
            if kind != 'scope':
                opaque -= 1
            if kind == 'function':
                found.append((line, src.count('\n', 0, i) + 1, name))
            if kind in ('scope', 'function'):
                start = i + 1
        elif c == ';' and not opaque:
            start = i + 1
    return found


def long_functions(root, limit, patterns=('*.hpp',)):
    """(lines, name, 'file:line') of every function of @p root's files matching @p patterns
    (its headers by default) over @p limit lines."""
    rows = []
    for path in sorted(p for pattern in patterns for p in root.rglob(pattern)):
        for first, last, name in functions(path.read_text(encoding='utf-8')):
            if last - first + 1 > limit:
                rows.append((last - first + 1, name, f'{path.relative_to(root)}:{first}'))
    return sorted(rows, key=lambda r: (-r[0], r[2]))


def over_allowance(rows, allowed):
    """The rows of @p rows that @p allowed ({(name, file): lines}) does not allow."""
    return [r for r in rows if r[0] > allowed.get((r[1], r[2].rsplit(':', 1)[0]), 0)]


def self_test():
    text = """namespace a { template <class T> struct s { int f() const { return 1; } };
int g(int x)
{ if (x) { return [] { return 2; }(); }
  return 0; }
struct q : p { q() : a_{1}, b_(2) { x(); } int a_{3}; int b_; };
auto h() -> int { return 3; }
enum class e { x, y };
const char* t = "{"; // {
}"""
    found = sorted((n, f, l) for f, l, n in functions(text))
    expected = [('f', 1, 1), ('g', 2, 4), ('h', 6, 6), ('q', 5, 5)]
    assert found == expected, found
    rows = [(90, 'g', 'a.hpp:2'), (85, 'h', 'b.hpp:7')]
    assert over_allowance(rows, {('g', 'a.hpp'): 90}) == [rows[1]]
    assert over_allowance(rows, {('g', 'a.hpp'): 89, ('h', 'b.hpp'): 85}) == [rows[0]]
    print('long_functions self-test: OK')
    return 0


def main(argv):
    if argv == ['self-test']:
        return self_test()
    args = list(argv)
    limit, allow = 80, None
    if '--limit' in args:
        limit = int(args.pop(args.index('--limit') + 1))
        args.remove('--limit')
    if '--allow' in args:
        allow = args.pop(args.index('--allow') + 1)
        args.remove('--allow')
    patterns = ('*.hpp',)
    if '--sources' in args:
        args.remove('--sources')
        patterns = ('*.hpp', '*.cpp', '*.cu')
    rows = long_functions(pathlib.Path(args[0]), limit, patterns)
    if allow is None:
        for row in rows:
            print(*row)
        return 0
    allowed = {}
    for line in pathlib.Path(allow).read_text(encoding='utf-8').splitlines():
        if line.strip() and not line.startswith('#'):
            lines, name, file = line.split()
            allowed[(name, file)] = int(lines)
    bad = over_allowance(rows, allowed)
    for lines, name, where in bad:
        ceiling = allowed.get((name, where.rsplit(':', 1)[0]))
        print(f'{where}: {name} is {lines} lines, over ' +
              (f'its ceiling of {ceiling} in {allow}: simplify it (not by cutting it into pieces)'
               if ceiling else f'{limit}: simplify it (not by cutting it into pieces)'))
    print(f'{len(rows)} functions over {limit} lines, {len(bad)} over their allowance')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
