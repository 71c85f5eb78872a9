#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every relative link of README.md and docs/*.md reaches a file that exists and, when it names an
anchor (`page.md#heading`), a heading of that page (GitHub's anchors: lower case, punctuation
dropped, spaces to hyphens, a repeated heading suffixed -1, -2, ...). Run by `meson test --suite
build_checks`; the results page and its archive link each other and other pages by anchor, so a
renamed heading shows here, not in a reader's browser.

  check_doc_links.py ROOT        check ROOT/README.md and ROOT/docs/*.md
  check_doc_links.py self-test   the check fails on a tree with a broken file or anchor link
"""
import os
import re
import sys
import tempfile

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#+)\s+(.*)")


def lines_outside_fences(path):
    fence = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                fence = not fence
            elif not fence:
                yield n, line.rstrip("\n")


def anchors(path):
    seen, out = {}, set()
    for _, line in lines_outside_fences(path):
        m = HEADING.match(line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(2).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def check(root):
    pages = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    pages += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    errors, cache = [], {}
    for page in pages:
        if not os.path.exists(page):
            continue
        for n, line in lines_outside_fences(page):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z]+:", target):
                    continue  # https:, mailto:
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = f"{os.path.relpath(page, root)}:{n}"
                if not os.path.exists(dest):
                    errors.append(f"{where}: links {target}, but {os.path.relpath(dest, root)} "
                                  "does not exist")
                elif anchor and dest.endswith(".md"):
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        errors.append(f"{where}: links {target}, but "
                                      f"{os.path.relpath(dest, root)} has no heading with anchor "
                                      f"'{anchor}'")
    return errors


def self_test():
    failures = []
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs", "data"))

        def write(rel, text):
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        write("README.md", "[a](docs/a.md) [b](docs/b.md#the-route-vmm_runtime)\n")
        write("docs/a.md", "# A\n## Results\n## Results\n[self](#results-1) [x](https://x.y)\n"
                           "```\n[not a link](nowhere.md)\n```\n[data](data/r.json)\n")
        write("docs/b.md", "# B\n## The route (`vmm_runtime`)\n")
        write("docs/data/r.json", "{}\n")
        if check(root):
            failures.append("a clean tree was reported: " + "; ".join(check(root)))
        write("docs/a.md", "# A\n[gone](b.md#results) [missing](c.md)\n")
        errors = check(root)
        if not any("no heading with anchor 'results'" in e for e in errors):
            failures.append("a link to a missing anchor was not reported")
        if not any("docs/c.md does not exist" in e for e in errors):
            failures.append("a link to a missing page was not reported")
    return failures


def main(argv):
    if len(argv) == 2 and argv[1] == "self-test":
        failures = self_test()
        for f in failures:
            print("check_doc_links self-test: " + f, file=sys.stderr)
        return 1 if failures else 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    errors = check(argv[1])
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print("doc links: every relative link of README.md and docs/*.md resolves")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
