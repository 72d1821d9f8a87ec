#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The code in a guide is the code that runs: each block comes from an example.

Usage: check_doc_snippets.py SOURCE_DIR DOC... [--write]

In a DOC (Markdown), a line `<!-- snippet: PATH NAME -->` stands right
before a fenced code block, which must equal the region NAME of the file
PATH (relative to SOURCE_DIR): the lines between `docs:start NAME` and
`docs:end NAME` comments, without their common indentation. Also:
- every fenced block in a language an example is written in (python, go,
  java, js) has such a line, so no hand-written copy can drift;
- every region marked in a file a DOC names appears in one of the DOCs
  (a guide shows them all; the README may show one).
--write rewrites the blocks from the files instead of checking them.
Prints every violation and exits 1 if there is any.
"""
import os
import re
import sys
import textwrap

MARKER = re.compile(r'^<!-- snippet: (\S+) (\S+) -->$')
REGION = re.compile(r'docs:(start|end) (\S+)\s*$')
EXAMPLE_LANGUAGES = {'python', 'go', 'java', 'js'}


def regions(path):
    """NAME -> the region's text, dedented, ending with a newline."""
    out, name, lines = {}, None, []
    with open(path, encoding='utf-8') as f:
        for line in f:
            m = REGION.search(line)
            if m and m.group(1) == 'start':
                name, lines = m.group(2), []
            elif m and name == m.group(2):
                out[name] = textwrap.dedent(''.join(lines)).strip('\n') + '\n'
                name = None
            elif name is not None:
                lines.append(line)
    return out


def check(source_dir, doc, write, problems, cache, used):
    with open(doc, encoding='utf-8') as f:
        lines = f.read().split('\n')
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        fence = line.startswith('```')
        if fence and line[3:].strip() in EXAMPLE_LANGUAGES:
            problems.append(f'{doc}:{i + 1}: a {line[3:]} block without a snippet line above it')
        if not m:
            out.append(line)
            i += 1
            continue
        path, name = m.group(1), m.group(2)
        if path not in cache:
            full = os.path.join(source_dir, path)
            cache[path] = regions(full) if os.path.exists(full) else None
        start = i + 1
        end = start + 1
        while end < len(lines) and not lines[end].startswith('```'):
            end += 1
        if start >= len(lines) or not lines[start].startswith('```') or end >= len(lines):
            problems.append(f'{doc}:{i + 1}: no fenced block right after the snippet line')
            out.append(line)
            i += 1
            continue
        have = '\n'.join(lines[start + 1:end]) + '\n'
        want = (cache[path] or {}).get(name)
        used.add((path, name))
        if cache[path] is None:
            problems.append(f'{doc}:{i + 1}: {path} does not exist')
        elif want is None:
            problems.append(f'{doc}:{i + 1}: {path} has no region "{name}" (docs:start {name})')
        elif have != want and not write:
            problems.append(f'{doc}:{i + 1}: the block differs from {path} region "{name}" '
                            f'(run {sys.argv[0]} {source_dir} {doc} --write)')
        out.append(line)
        out.append(lines[start])
        out.extend((want if write and want is not None else have).rstrip('\n').split('\n'))
        out.append(lines[end])
        i = end + 1
    if write:
        with open(doc, 'w', encoding='utf-8') as f:
            f.write('\n'.join(out))


def main():
    args = [a for a in sys.argv[1:] if a != '--write']
    if len(args) < 2:
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    problems, cache, used = [], {}, set()
    for doc in args[1:]:
        check(args[0], doc, '--write' in sys.argv, problems, cache, used)
    for path, names in cache.items():
        for name in sorted(names or {}):
            if (path, name) not in used:
                problems.append(f'region "{name}" of {path} is in none of the guides')
    for p in problems:
        print('FAIL', p)
    if not problems:
        print(f'the snippets of {len(args) - 1} guide(s) match their examples')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
