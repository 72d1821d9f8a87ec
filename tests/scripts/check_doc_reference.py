#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The generated references are current, and the guard that says so works.

Usage: check_doc_reference.py SOURCE_DIR

1. `scripts/gen-docs --check` passes: docs/reference/*.md and docs/man/* are
   what the settings table, the metrics, the verb tables, the migrations and
   the status codes generate today.
2. In a copy of the sources, a setting added to the settings table and a
   counter added to the relay's table each make `--check` fail naming them,
   and a metric name the generator cannot place stops it (exit 2): a new
   setting or metric without its reference cannot pass.
3. The metrics table of docs/operations.md (what to alert on) names exactly
   the metrics of docs/reference/metrics.md.
4. Every Markdown table of README.md and docs/ has as many cells in each row
   as in its header: a `|` in a cell's text must be written `\|` (also inside
   `code`), or it splits the cell and shifts the rest of the row.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def gen(root, *args):
    p = subprocess.run([sys.executable, os.path.join(root, 'scripts', 'gen-docs'), *args, root],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def edit(path, anchor, insert):
    with open(path, encoding='utf-8') as f:
        text = f.read()
    if anchor not in text:
        raise SystemExit(f'FAIL {path} no longer holds {anchor!r}: update this test')
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text.replace(anchor, anchor + insert, 1))


def table_names(path, header):
    """Metric names in the Markdown table under `header`, {a,b} expanded."""
    rows, on = [], False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if line.startswith(header):
                on = True
            elif on and not line.startswith('|'):
                break
            if on:
                rows.append(line)

    def expand(name):
        m = re.search(r'\{([a-z0-9_,]+)\}', name)
        if not m or ',' not in m.group(1):
            return [re.sub(r'\{.*', '', name)]
        return [x for part in m.group(1).split(',')
                for x in expand(name[:m.start()] + part + name[m.end():])]
    return {n for row in rows for tok in re.findall(r'`([^`]+)`', row)
            for n in expand(tok) if n.startswith('outbox_')}


CELL_SPLIT = re.compile(r'(?<!\\)\|')


def cells(row):
    """The cells of `| a | b |`: the pipes not escaped, less the two at the ends."""
    row = row.strip()
    row = row[1:] if row.startswith('|') else row
    row = row[:-1] if row.endswith('|') and not row.endswith('\\|') else row
    return len(CELL_SPLIT.split(row))


def table_problems(root):
    """Rows of Markdown tables whose cell count differs from their header's."""
    docs = [os.path.join(root, 'README.md')]
    for folder, _, files in os.walk(os.path.join(root, 'docs')):
        docs += [os.path.join(folder, f) for f in files if f.endswith('.md')]
    out = []
    for doc in sorted(docs):
        with open(doc, encoding='utf-8') as f:
            lines = f.read().split('\n')
        fenced, want = False, None
        for i, line in enumerate(lines):
            if line.startswith('```'):
                fenced = not fenced
            if fenced or not line.startswith('|'):
                want = None
                continue
            if want is None:
                if i + 1 < len(lines) and re.match(r'^\|(\s*:?-+:?\s*\|)+\s*$', lines[i + 1]):
                    want = cells(line)
                continue
            if cells(line) != want:
                out.append(f'{os.path.relpath(doc, root)}:{i + 1}: a table row of {cells(line)} cells '
                           f'under a header of {want} (a | in a cell must be written \\|)')
    return out


def main():
    root = os.path.abspath(sys.argv[1])
    problems = []

    code, out = gen(root, '--check')
    print(out, end='')
    if code != 0:
        problems.append('the committed references differ from their sources (run scripts/gen-docs)')

    with tempfile.TemporaryDirectory() as tmp:
        for part in ('src', 'sql', 'include', 'docs', 'scripts'):
            shutil.copytree(os.path.join(root, part), os.path.join(tmp, part))
        edit(os.path.join(tmp, 'src/config/settings.c'), 'obx_settings[] = {\n',
             '    INT("OUTBOX_DOC_PROBE", batch_size, R, "1", 1, 2, "a probe"),\n')
        edit(os.path.join(tmp, 'src/outboxd/relay_cmd.c'), 'obx_relay_counters[] = {\n',
             '    {OUTBOX_RELAY_LEASED, "doc_probe", "a probe"},\n')
        code, out = gen(tmp, '--check')
        for name in ('OUTBOX_DOC_PROBE', 'outbox_relay_doc_probe_total'):
            if code != 1 or name not in out:
                problems.append(f'gen-docs --check passed a new {name} missing from its reference '
                                f'(exit {code})')
        edit(os.path.join(tmp, 'src/outboxd/service/metrics.c'), '#include "metrics.h"\n',
             'static const char *stray = "outbox_doc_stray_total";\n')
        code, out = gen(tmp, '--check')
        if code != 2 or 'outbox_doc_stray_total' not in out:
            problems.append(f'gen-docs did not stop at a metric it cannot place (exit {code}): {out}')

    documented = table_names(os.path.join(root, 'docs/operations.md'), '| Metric |')
    served = table_names(os.path.join(root, 'docs/reference/metrics.md'), '| Metric |')
    for name in sorted(served - documented):
        problems.append(f'{name} is served but docs/operations.md\'s metrics table does not say '
                        'what to alert on')
    for name in sorted(documented - served):
        problems.append(f'docs/operations.md\'s metrics table lists {name}, which no daemon serves')

    problems += table_problems(root)

    for p in problems:
        print('FAIL', p)
    if not problems:
        print(f'references current; the guard fails on a new setting or metric; '
              f'{len(served)} metrics in both tables')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
