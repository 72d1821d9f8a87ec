#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The code blocks of README.md and docs/ that are not checked elsewhere.

Usage: check_doc_blocks.py SOURCE_DIR [--database-url URL [--psql PSQL]]

- Every ```sql block runs, in document order, with psql -v ON_ERROR_STOP=1
  against URL (a throwaway database with the schema migrated; the tables a
  guide's statements write to come from tests/data/doc_blocks_setup.sql),
  unless the line right before it is `<!-- not-runnable: REASON -->` with
  a reason (a fragment, a statement for another database...). Without
  --database-url the SQL blocks are only counted.
- In ```sh blocks, every `outboxd VERB` and `outboxctl VERB [SUBVERB]` is a
  command of docs/reference/cli.md, every --flag after one is an option that
  reference or docs/reference/settings.md names, and every OUTBOX_* name in
  a block of any language but C (whose OUTBOX_OK... are the API's) is a
  setting of docs/reference/settings.md. (The
  two references are what the sources say: unit.doc_reference.)
C blocks are compiled by check_readme_examples.sh; Python, Go, Java and JS
blocks are copies of the examples (check_doc_snippets.py), which run.
Prints every violation and exits 1 if there is any.
"""
import glob
import os
import re
import subprocess
import sys

NOT_RUNNABLE = re.compile(r'^<!-- not-runnable: (\S.*\S) -->$')


def blocks(path):
    """(language, first line number of the body, body lines, line before the fence)."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith('```'):
            lang = lines[i][3:].strip()
            end = i + 1
            while end < len(lines) and not lines[end].startswith('```'):
                end += 1
            out.append((lang, i + 2, lines[i + 1:end], lines[i - 1] if i else ''))
            i = end + 1
        else:
            i += 1
    return out


def cli_reference(source_dir):
    """{program: {verb: set of subverbs}}, and every --option the reference names."""
    with open(os.path.join(source_dir, 'docs', 'reference', 'cli.md'), encoding='utf-8') as f:
        text = f.read()
    verbs = {'outboxd': {}, 'outboxctl': {}}
    for m in re.finditer(r'^\| `(outboxd|outboxctl) ([a-z-]+)` \| (.*) \|$', text, re.M):
        sub = re.match(r'([a-z]+(?:\\\|[a-z]+)+) ', m.group(3))
        verbs[m.group(1)][m.group(2)] = set(sub.group(1).split('\\|')) if sub else set()
    options = set(re.findall(r'--[a-z][a-z0-9-]*', text))
    return verbs, options


def settings_reference(source_dir):
    with open(os.path.join(source_dir, 'docs', 'reference', 'settings.md'), encoding='utf-8') as f:
        text = f.read()
    names = set(re.findall(r'`(OUTBOX_[A-Z0-9_]+)`', text))
    flags = set(re.findall(r'`(--[a-z][a-z0-9-]*)`', text))
    return names, flags


def check_commands(where, body, verbs, options, problems):
    for n, line in enumerate(body):
        code = re.sub(r'\s+#.*$', '', line)
        if code.lstrip().startswith('#'):
            continue
        for segment in re.split(r'&&|\|\||;|\|', code):
            words = segment.split()
            while words and re.match(r'^[A-Za-z_][A-Za-z0-9_]*=', words[0]):
                words.pop(0)  # VAR=value before the command
            if not words or os.path.basename(words[0]) not in verbs:
                continue
            program = os.path.basename(words[0])
            at = f'{where[0]}:{where[1] + n}'
            if len(words) < 2 or words[1].startswith('-'):
                continue  # outboxd --help, outboxctl --version
            verb = words[1]
            if verb not in verbs[program]:
                problems.append(f'{at}: `{program} {verb}` is not a command of docs/reference/cli.md')
                continue
            subs = verbs[program][verb]
            if subs and (len(words) < 3 or words[2] not in subs):
                got = words[2] if len(words) > 2 else 'nothing'
                problems.append(f'{at}: `{program} {verb}` takes {"|".join(sorted(subs))}, not {got}')
            for word in words[2:]:
                flag = re.match(r'^\[?(--[a-z][a-z0-9-]*)', word)
                if flag and flag.group(1) not in options:
                    problems.append(f'{at}: `{program} {verb}`: {flag.group(1)} is not an option '
                                    'in docs/reference/cli.md or settings.md')


def main():
    args = sys.argv[1:]
    source_dir, url, psql = args[0], None, 'psql'
    if '--database-url' in args:
        url = args[args.index('--database-url') + 1]
    if '--psql' in args:
        psql = args[args.index('--psql') + 1]
    verbs, options = cli_reference(source_dir)
    settings, setting_flags = settings_reference(source_dir)
    options |= setting_flags
    docs = [os.path.join(source_dir, 'README.md')] + sorted(
        glob.glob(os.path.join(source_dir, 'docs', '**', '*.md'), recursive=True))
    problems, sql_blocks, skipped, ran, commands = [], [], 0, 0, 0
    for doc in docs:
        rel = os.path.relpath(doc, source_dir)
        for lang, first, body, before in blocks(doc):
            where = (rel, first)
            for n, line in enumerate(body if lang != 'c' else []):  # C: the API's OUTBOX_OK...
                for name in re.findall(r'\bOUTBOX_[A-Z0-9_]*[A-Z0-9]\b', line):
                    if name not in settings:
                        problems.append(f'{rel}:{first + n}: {name} is not a setting of '
                                        'docs/reference/settings.md')
            if lang == 'sh':
                commands += 1
                check_commands(where, body, verbs, options, problems)
            if lang != 'sql':
                continue
            if before.startswith('<!-- not-runnable'):
                if not NOT_RUNNABLE.match(before):
                    problems.append(f'{rel}:{first - 1}: a not-runnable line needs a reason: '
                                    '<!-- not-runnable: REASON -->')
                skipped += 1
                continue
            sql_blocks.append((where, '\n'.join(body) + '\n'))
    if url is not None:
        setup = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'data',
                             'doc_blocks_setup.sql')
        psql_cmd = [psql, '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url]
        r = subprocess.run(psql_cmd + ['-f', setup], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f'{setup}: {r.stderr.strip()}')
        else:
            for (rel, first), sql in sql_blocks:
                r = subprocess.run(psql_cmd + ['-f', '-'], input=sql, capture_output=True, text=True)
                if r.returncode != 0:
                    problems.append(f'{rel}:{first}: the sql block fails: {r.stderr.strip()}')
                else:
                    ran += 1
    for p in problems:
        print('FAIL', p)
    if problems:
        return 1
    print(f'{len(docs)} documents: {commands} sh blocks name known commands, options and settings; '
          f'{len(sql_blocks)} sql blocks ' + (f'ran ({ran})' if url else 'found (not run: no --database-url)')
          + f', {skipped} marked not runnable')
    return 0


if __name__ == '__main__':
    sys.exit(main())
