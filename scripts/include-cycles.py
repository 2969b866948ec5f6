#!/usr/bin/env python3
"""Include graph check: x.c, x.h and x's internal header x_int.h are one module; print every circle (strongly connected
component of more than one module, or a module including itself) and exit 1 if there is one.
Also prints, with -v, each module's dependencies."""
import os, re, sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
dirs = ['core', 'core/mcp', 'transports', 'policy', 'upstream']
edges = {}
for d in dirs:
    for f in os.listdir(os.path.join(root, d)):
        if not f.endswith(('.c', '.h')):
            continue
        mod = d + '/' + f[:-2]
        if mod.endswith('_int'):
            mod = mod[:-4]  # a module's internal header is part of it
        deps = edges.setdefault(mod, set())
        for line in open(os.path.join(root, d, f), encoding='utf-8'):
            m = re.match(r'\s*#\s*include\s+"([^"]+)\.[ch]"', line)
            dep = m.group(1) if m else None
            if dep and dep.endswith('_int'):
                dep = dep[:-4]
            if dep and dep != mod:
                deps.add(dep)
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def strong(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in edges:
            continue
        if w not in index:
            strong(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
for v in sorted(edges):
    if v not in index:
        strong(v)
if '-v' in sys.argv:
    for v in sorted(edges):
        print(v, '->', ' '.join(sorted(edges[v])))
for c in sccs:
    print('circle:', ' '.join(c))
print('%d modules, %d circles' % (len(edges), len(sccs)))
sys.exit(1 if sccs else 0)
