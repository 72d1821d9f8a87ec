#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every relative link in the docs resolves: the file, and its #anchor.

Usage: check_doc_links.py SOURCE_DIR

Reads README.md and docs/**/*.md. A link [text](target) whose target is not
a URL (http:, https:, mailto:) must name a file or folder that exists,
relative to the linking file; a #anchor (alone, or after a .md file) must be
a heading of that file, as GitHub makes anchors of headings (lower case,
punctuation dropped, blanks to dashes, -1, -2 ... for repeats), or an
explicit <a id="...">. Links inside fenced code blocks and `code` are not
links. Prints every broken link with its file and line; exits 1 if any.
"""
import os
import re
import sys

LINK = re.compile(r'(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
IMAGE = re.compile(r'!\[[^\]]*\]\(([^)\s]+)\)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
EXPLICIT = re.compile(r'<a\s+(?:id|name)="([^"]+)"')


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link: its text
    text = re.sub(r'<[^>]+>', '', text)                       # inline HTML
    text = text.replace('`', '').strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fence = None
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            m = re.match(r'^\s*(```+|~~~+)', line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif m.group(1).startswith(fence):
                    fence = None
                continue
            if fence is None:
                yield n, line.rstrip('\n')


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for _, line in prose_lines(path):
            out.update(EXPLICIT.findall(line))
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                out.add(base if count == 0 else f'{base}-{count}')
        cache[path] = out
    return cache[path]


def docs(root):
    yield os.path.join(root, 'README.md')
    for dirpath, dirs, files in os.walk(os.path.join(root, 'docs')):
        dirs.sort()
        for name in sorted(files):
            if name.endswith('.md'):
                yield os.path.join(dirpath, name)


def main():
    if len(sys.argv) != 2:
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    root = os.path.abspath(sys.argv[1])
    problems, links = [], 0
    for doc in docs(root):
        rel_doc = os.path.relpath(doc, root)
        # Code blocks blanked (line numbers kept), so a link may span lines.
        numbered = dict(prose_lines(doc))
        with open(doc, encoding='utf-8') as f:
            count = sum(1 for _ in f)
        text = '\n'.join(numbered.get(n, '') for n in range(1, count + 1))
        text = re.sub(r'`[^`\n]*`', lambda m: '`' + ' ' * (len(m.group(0)) - 2) + '`', text)
        for m in list(LINK.finditer(text)) + list(IMAGE.finditer(text)):
            target, n = m.group(1), text.count('\n', 0, m.start(1)) + 1
            if re.match(r'^[a-z][a-z0-9+.-]*:', target):
                continue  # a URL
            links += 1
            path, _, anchor = target.partition('#')
            full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not full.startswith(root + os.sep) and full != root:
                problems.append(f'{rel_doc}:{n}: {target} leaves the repository')
            elif not os.path.exists(full):
                problems.append(f'{rel_doc}:{n}: {target}: no file {os.path.relpath(full, root)}')
            elif anchor and not full.endswith('.md'):
                problems.append(f'{rel_doc}:{n}: {target}: an anchor into a file that is not Markdown')
            elif anchor and anchor not in anchors(full):
                problems.append(f'{rel_doc}:{n}: {target}: {os.path.relpath(full, root)} '
                                f'has no heading #{anchor}')
    for p in problems:
        print('FAIL', p)
    if not problems:
        print(f'{links} relative links in README.md and docs/ resolve')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
