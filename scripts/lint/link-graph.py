#!/usr/bin/env python3
"""Link graph check: reads the gateway's built objects with nm and finds, for every symbol an object
uses, the object that defines it. A module is one .c file, or a folder that has an internal.h; a room
is a top-level folder, with core/ counted per subfolder. Prints every circle between modules,
every circle between rooms, and every rise (a room using a room on its floor or above, FLOORS
below), and exits 1 if there is one.

  scripts/lint/link-graph.py BUILD_DIR [-v] [--edges]
  scripts/lint/link-graph.py --self-test

-v prints each module's uses; --edges prints 'module -> module: symbols' for every edge."""
import os, subprocess, sys
from collections import defaultdict

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if '--self-test' in sys.argv:
    # Two modules that call each other, the lower one calling up: the check must see the circle
    # and the rise (and nothing in a tree without them).
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        src = {'core/base/low.c': 'int tg_high(void); int tg_low(void) { return tg_high(); }',
               'core/call/high.c': 'int tg_low(void); int tg_high(void) { return 1; } int tg_use(void) { return tg_low(); }',
               'core/wire/ok.c': 'int tg_low(void); int tg_ok(void) { return tg_low(); }'}
        for f, text in src.items():
            os.makedirs(os.path.join(t, 'src', os.path.dirname(f)), exist_ok=True)
            open(os.path.join(t, 'src', f), 'w').write(text + '\n')
            o = os.path.join(t, 'build', 'CMakeFiles', 'tgcore.dir', f + '.o')
            os.makedirs(os.path.dirname(o), exist_ok=True)
            subprocess.run(['cc', '-c', '-o', o, os.path.join(t, 'src', f)], check=True)
        env = dict(os.environ, TG_LINK_GRAPH_ROOT=os.path.join(t, 'src'))
        r = subprocess.run([sys.executable, __file__, os.path.join(t, 'build')], capture_output=True, text=True, env=env)
        want = ['module circle: core/base/low core/call/high', 'room circle: core/base core/call',
                'rise: core/base -> core/call: tg_high']
        missing = [w for w in want if w not in r.stdout]
        if r.returncode != 1 or missing or 'core/wire' in r.stdout.replace('rooms', ''):
            sys.exit(f'link-graph self-test: exit {r.returncode}, missing {missing}:\n{r.stdout}')
        print('link-graph self-test: ok (a circle and a rise found, the clean module not named)')
        sys.exit(0)
root = os.environ.get('TG_LINK_GRAPH_ROOT', root)
args = [a for a in sys.argv[1:] if not a.startswith('-')]
verbose, show_edges = '-v' in sys.argv, '--edges' in sys.argv
build = args[0] if args else os.path.join(root, 'build-asan')
objdir = os.path.join(build, 'CMakeFiles', 'tgcore.dir')
if not os.path.isdir(objdir):
    sys.exit(f'link-graph: no objects under {objdir}: build first')
GATEWAY = ('core', 'transports', 'policy', 'upstream', 'cluster')
# The floors from the top down (docs/architecture.md): a room may use the rooms below it; a use
# of a room above is a rise, which must be a callback handed down instead. Rooms on one line
# are side by side and do not use each other.
FLOORS = [['core/cmd'], ['core/app'], ['transports', 'cluster'], ['core/gate'], ['core/bridge'], ['core/call'],
          ['upstream'], ['core/mcp'], ['core/conf'], ['policy'], ['core/wire'], ['core/base']]
LEVEL = {room: i for i, line in enumerate(FLOORS) for room in line}

def module_of(src):
    d = os.path.dirname(src)
    while d:
        if os.path.exists(os.path.join(root, d, 'internal.h')):
            return d + '/'
        d = os.path.dirname(d)
    return src[:-2]

def room_of(src):
    parts = src.split('/')
    if parts[0] == 'core':
        return 'core/' + parts[1] if len(parts) > 2 else 'core'
    return parts[0]

objs = []
for dp, _, fs in os.walk(objdir):
    for f in fs:
        if f.endswith('.c.o'):
            src = os.path.relpath(os.path.join(dp, f), objdir)[:-2]
            # objects of sources that moved away stay in an old build tree: skip them
            if src.split('/')[0] in GATEWAY and os.path.exists(os.path.join(root, src)):
                objs.append((src, os.path.join(dp, f)))
if not objs:
    sys.exit('link-graph: no gateway objects found')
defs, uses = {}, defaultdict(set)
by_path = {path: src for src, path in objs}
# One nm per question over every object: 'path: value type name' lines (-A names the file).
for flags in (['--defined-only', '-g'], ['-u']):
    out = subprocess.run(['nm', '-A'] + flags + sorted(by_path), capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        cut = line.find('.o:') + 2
        path, p = line[:cut], line[cut + 1:].split()
        src = by_path.get(path)
        if src is None:
            continue
        if flags[0] == '-u':
            if p and p[0] == 'U':
                uses[src].add(p[1])
        elif len(p) == 3 and p[1] in 'TDBRVWG':
            defs[p[2]] = src

def graph(key):
    g, why = defaultdict(set), defaultdict(set)
    for src, syms in uses.items():
        a = key(src)
        g.setdefault(a, set())
        for s in syms:
            if s in defs:
                b = key(defs[s])
                if b != a:
                    g[a].add(b)
                    why[(a, b)].add(s)
    for src, _ in objs:
        g.setdefault(key(src), set())
    return g, why

def circles(g):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out

fail = 0
for name, key in (('module', module_of), ('room', room_of)):
    g, why = graph(key)
    if verbose or show_edges:
        for a in sorted(g):
            if show_edges:
                for b in sorted(g[a]):
                    print(f'{name}: {a} -> {b}: {" ".join(sorted(why[(a, b)]))}')
            else:
                print(f'{name}: {a} -> {" ".join(sorted(g[a]))}')
    for comp in circles(g):
        members = set(comp)
        fail = 1
        print(f'link-graph: {name} circle: {" ".join(comp)}')
        for a in comp:
            for b in sorted(g[a] & members):
                syms = sorted(why[(a, b)])
                more = f' (+{len(syms) - 3})' if len(syms) > 3 else ''
                print(f'    {a} -> {b}: {" ".join(syms[:3])}{more}')
    if name == 'room':
        for a in sorted(g):
            for b in sorted(g[a]):
                if a not in LEVEL or b not in LEVEL:
                    print(f'link-graph: room {a if a not in LEVEL else b} has no floor in FLOORS')
                    fail = 1
                elif LEVEL[b] <= LEVEL[a]:
                    fail = 1
                    syms = sorted(why[(a, b)])
                    more = f' (+{len(syms) - 4})' if len(syms) > 4 else ''
                    print(f'link-graph: rise: {a} -> {b}: {" ".join(syms[:4])}{more}')
    if name == 'module':
        print(f'link-graph: {len(g)} modules, {sum(len(v) for v in g.values())} edges')
    else:
        print(f'link-graph: {len(g)} rooms')
if not fail:
    print('link-graph: no circle, no rise')
sys.exit(fail)
