#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The layout's rules, checked against the tree and the built objects.

Usage: check_layout.py SOURCE_DIR BUILD_DIR

- The architecture table of docs/internals.md lists exactly the folders under src/, each
  with the external libraries its files include (no more, no fewer).
- No folder holds more than 12 .c files.
- Only *_pg.c files call libpq (PQ...); only files named *_nats* include
  nats.h or call nats.c; the writer's and the shared folders never include
  the worker's or the programs' code; nothing outside a program's folder
  includes it.
- No two files call each other, directly or around a circle: the call graph
  between object files, read from the symbols they define and use, has no
  cycle.
- The public headers name no test hook and declare no struct whose fields a
  caller sets (outbox_error, which the library fills, is the one struct).
Prints every violation and exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

SRC_ROOT, BUILD = sys.argv[1], sys.argv[2]
SRC = os.path.join(SRC_ROOT, 'src')
problems = []

EXTERNAL = {  # header -> the name the table uses
    'libpq-fe.h': 'libpq',
    'nats/nats.h': 'nats.c',
    'jansson.h': 'jansson',
    'uuid/uuid.h': 'libuuid',
    'microhttpd.h': 'libmicrohttpd',
    'curl/curl.h': 'libcurl',
}
# Folders of the two libraries, and of what only the programs use.
SHARED = {'common', 'envelope', 'config'}
WRITER = {'writer'}
WORKER = {'support', 'store', 'bus', 'feed', 'ledger', 'relay', 'consume'}
PROGRAMS = {'outboxd', 'outboxctl', 'bench'}


def folders():
    out = {}
    for dirpath, _, files in os.walk(SRC):
        code = [f for f in files if f.endswith(('.c', '.h'))]
        if code:
            out[os.path.relpath(dirpath, SRC)] = sorted(code)
    return out


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def top(folder):
    return folder.split('/')[0]


tree = folders()

# ---- the architecture table (docs/internals.md) ----------------------------------------------------------------------
readme = read(os.path.join(SRC_ROOT, 'docs', 'internals.md'))
m = re.search(r'^## Architecture\n(.*?)(?=^## )', readme, re.S | re.M)
if not m:
    problems.append('docs/internals.md has no "## Architecture" section')
    table = {}
else:
    table = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        row = re.fullmatch(r'`src/(.+?)/`', cells[0]) if cells else None
        if row and len(cells) >= 4:
            libs = set(re.findall(r'[A-Za-z0-9.+-]+', cells[3].replace('—', ''))) - {'none'}
            table[row.group(1)] = libs
for folder in sorted(set(tree) - set(table)):
    problems.append(f'src/{folder}/ is not in the architecture table of docs/internals.md')
for folder in sorted(set(table) - set(tree)):
    problems.append(f'the architecture table of docs/internals.md lists src/{folder}/, which does not exist')

# ---- per folder and per file ---------------------------------------------------------------
include_re = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)
pq_call = re.compile(r'\bPQ[a-z][A-Za-z]*\s*\(')
nats_call = re.compile(r'\b(?:nats[A-Z][A-Za-z]*_[A-Za-z]+|js[A-Z][A-Za-z]*_[A-Za-z]+|js_[A-Za-z]+)\s*\(')

for folder, files in sorted(tree.items()):
    c_files = [f for f in files if f.endswith('.c')]
    if len(c_files) > 12:
        problems.append(f'src/{folder}/ holds {len(c_files)} .c files (at most 12)')
    used = set()
    for name in files:
        rel = f'src/{folder}/{name}'
        text = read(os.path.join(SRC, folder, name))
        body = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
        for kind, target in include_re.findall(text):
            if kind == '<' and target in EXTERNAL:
                used.add(EXTERNAL[target])
                if target == 'nats/nats.h' and '_nats' not in name:
                    problems.append(f'{rel} includes nats.h but is not a *_nats file')
                if target == 'libpq-fe.h' and name.endswith('.c') and not name.endswith('_pg.c'):
                    problems.append(f'{rel} includes libpq-fe.h but is not a *_pg.c file')
            if kind == '"' and '/' in target:
                part = target.split('/')[0]
                if top(folder) in SHARED | WRITER and part in WORKER | PROGRAMS | {'devserver', 'audit'}:
                    problems.append(f'{rel} (shared or writer code) includes {target}')
                if top(folder) in WORKER and part in PROGRAMS | {'devserver', 'audit'}:
                    problems.append(f'{rel} (worker library) includes {target}')
                if part in PROGRAMS and top(folder) != part:
                    problems.append(f'{rel} includes {target}, which belongs to another program')
        if name.endswith('.c') and not name.endswith('_pg.c') and pq_call.search(body):
            problems.append(f'{rel} calls libpq but is not a *_pg.c file')
        if '_nats' not in name and nats_call.search(body):
            problems.append(f'{rel} calls nats.c but is not a *_nats file')
    if folder in table and table[folder] != used:
        problems.append(f'docs/internals.md says src/{folder}/ includes {sorted(table[folder]) or "nothing"}'
                        f', its files include {sorted(used) or "nothing"}')

# ---- call cycles between files, from the objects' symbols ----------------------------------
objects = []
for dirpath, _, files in os.walk(os.path.join(BUILD, 'CMakeFiles')):
    for f in files:
        if f.endswith('.c.o') and f'{os.sep}src{os.sep}' in dirpath + os.sep:
            objects.append(os.path.join(dirpath, f))
defined, uses = {}, {}
for obj in objects:
    source = obj[obj.index(f'{os.sep}src{os.sep}') + 1:-2]  # src/relay/relay.c
    if source in uses or not os.path.exists(os.path.join(SRC_ROOT, source)):
        continue  # a file compiled into two targets, or a stale object of a moved file
    out = subprocess.run(['nm', obj], capture_output=True, text=True, check=True).stdout
    uses[source] = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in 'TDRB':
            defined.setdefault(parts[2], source)
        elif len(parts) == 2 and parts[0] == 'U':
            uses[source].add(parts[1])
if not objects:
    problems.append(f'no object files under {BUILD}/CMakeFiles: build first')
edges = {s: {defined[u] for u in us if u in defined and defined[u] != s} for s, us in uses.items()}

index, low, on_stack, stack, counter = {}, {}, set(), [], [0]


def strongconnect(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on_stack.add(v)
    for w in sorted(edges.get(v, ())):
        if w not in index:
            strongconnect(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        scc = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            scc.append(w)
            if w == v:
                break
        if len(scc) > 1:
            problems.append('files call each other around a circle: ' + ' -> '.join(sorted(scc)))


sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index:
        strongconnect(v)

# ---- public headers ------------------------------------------------------------------------
inc_dir = os.path.join(SRC_ROOT, 'include', 'outbox')
for name in sorted(os.listdir(inc_dir)):
    text = read(os.path.join(inc_dir, name))
    for hook in re.findall(r'\bcrash_\w+|\bOUTBOX_TEST_\w*|\btest_hooks?\b', text):
        problems.append(f'include/outbox/{name} names a test hook: {hook}')
    for struct in re.findall(r'\bstruct\s+(\w+)\s*\{', text):
        if struct != 'outbox_error':
            problems.append(f'include/outbox/{name} declares struct {struct} with fields')

for p in problems:
    print('FAIL', p)
print(f'layout: {len(tree)} folders, {len(uses)} object files, {len(problems)} problems')
sys.exit(1 if problems else 0)
