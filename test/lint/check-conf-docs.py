#!/usr/bin/env python3
"""lint.docs: every directive core/conf/*.c accepts is in docs/configuration.md, and every
directive documented there is accepted.

What the loader accepts is read from its own lists: each `static const char *const known[]`
(the members tg__conf_check_members() lets through; any other is an error at load) and each
`struct int_directive` table (limits, upstreams, pool). The documentation's directives are the
first column of its tables headed `| directive |` or `| member |` (a row may name siblings:
`upstreams[].tls.cert`, `.key`); a member that is a group is documented by its table; rows under `## \`limits\`` are written without
their `limits.` prefix. A list in the code has no name, so each is matched to the documented
group (`upstreams[].tls`, `log`, the top level, ...) it shares most names with; then, group by
group, the two sets of names must be equal. Exit 0, or 1 with one line per difference.

  python3 test/lint/check-conf-docs.py [REPO_ROOT]
"""
import glob
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')

# ---- the code --------------------------------------------------------------------------------
code_sets = []  # (where, set of names)
for path in sorted(glob.glob(os.path.join(root, 'core', 'conf', '*.c'))):
    text = open(path, encoding='utf-8').read()
    rel = os.path.relpath(path, root)
    for m in re.finditer(r'static const char \*const (\w*known\w*)\[\]\s*=\s*\{(.*?)NULL\s*\}', text, re.S):
        names = set(re.findall(r'"([^"]+)"', m.group(2)))
        line = text.count('\n', 0, m.start()) + 1
        code_sets.append((f'{rel}:{line} {m.group(1)}[]', names))
    for m in re.finditer(r'static const struct int_directive (\w+)\[\]\s*=\s*\{(.*?)\{\s*NULL', text, re.S):
        names = set(re.findall(r'\{\s*"([^"]+)"\s*,', m.group(2)))
        line = text.count('\n', 0, m.start()) + 1
        code_sets.append((f'{rel}:{line} {m.group(1)}[]', names))

# ---- the documentation -------------------------------------------------------------------------
doc_path = os.path.join(root, 'docs', 'configuration.md')
groups = {}  # prefix -> set of leaf names
heading = ''
in_table = False
for line in open(doc_path, encoding='utf-8'):
    if line.startswith('## '):
        heading = line[3:].strip().strip('`')
    if line.startswith('| directive') or line.startswith('| member'):
        in_table = True
        continue
    if not line.startswith('|'):
        in_table = False
        continue
    m = re.match(r'\| (`[^`|]+`(?:, `[^`|]+`)*) \|', line)
    if not in_table or not m:
        continue
    first, *more = re.findall(r'`([^`]+)`', m.group(1))
    if heading == 'limits' and first != 'limits' and '.' not in first:
        first = 'limits.' + first
    prefix, _, leaf = first.rpartition('.')
    # `upstreams[].tls.cert`, `.key`: the second names a sibling
    for leaf in [leaf] + [x[1:] for x in more if x.startswith('.')]:
        groups.setdefault(prefix, set()).add(leaf[:-2] if leaf.endswith('[]') else leaf)

# ---- compare -----------------------------------------------------------------------------------
problems = []
if not code_sets:
    problems.append('no directive lists found in core/conf/*.c (has the loader changed shape?)')
if not groups:
    problems.append('no directive tables found in docs/configuration.md')
accepted = {}  # prefix -> union of the code's names matched to it
for where, names in code_sets:
    best, score = None, 0
    for prefix, leaves in groups.items():
        n = len(names & leaves)
        if n > score:
            best, score = prefix, n
    if best is None:
        problems.append(f'{where}: none of its directives ({", ".join(sorted(names))}) is in docs/configuration.md')
        continue
    accepted.setdefault(best, set()).update(names)


def full(prefix, leaf):
    return f'{prefix}.{leaf}' if prefix else leaf


for prefix, leaves in sorted(groups.items()):
    code = accepted.get(prefix)
    if code is None:
        problems.append(f'docs/configuration.md documents {", ".join(full(prefix, x) for x in sorted(leaves))}, '
                        'which no directive list in core/conf/*.c accepts')
        continue
    # a member that is itself a group (`admin`, `listen[].tls`, `upstreams[].pool`) is
    # documented by that group's own table
    nested = {leaf for leaf in code if full(prefix, leaf) in groups or full(prefix, leaf) + '[]' in groups}
    for leaf in sorted(code - leaves - nested):
        problems.append(f'{full(prefix, leaf)}: accepted by core/conf/*.c, missing from docs/configuration.md')
    for leaf in sorted(leaves - code):
        problems.append(f'{full(prefix, leaf)}: in docs/configuration.md, not accepted by core/conf/*.c')

for p in problems:
    print(f'lint.docs: {p}')
if problems:
    sys.exit(1)
print(f'lint.docs: {sum(len(v) for v in groups.values())} directives documented and accepted, '
      f'in {len(groups)} groups')
