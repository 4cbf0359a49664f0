#!/usr/bin/env bash
# tests/run_layers.sh — the house's floors, checked from the #include lines (docs/design.md, "The house").
#
#   core ← parallel, ckpt, objstore, text ← ops ← model ← train ← safety, sched ← cmd ← minitrain.c
#   report (run reports, SVG, ETTR accounting) rests on core, parallel, ckpt
#   db (the PostgreSQL outbox shipper and reader) rests on core; train, safety, sched, cmd use it
#   model ← serve ← gateway (serving needs the model, never the trainer)
#   report ← dash (the dashboard: report's pages served live, never serve/'s headers)
#
# A file may include its own module and the floors below it (the table ALLOWED says exactly which),
# plus these sideways steps: gateway may include safety (request guards); safety and sched may
# include report; cmd/ and minitrain.c may include everything. Fails, printing
# file:line for each, when
#   1. an #include "x/y.h" points up a floor or sideways (e.g. train/ including sched/);
#   2. a file includes another module's private header (x/*_impl.h from outside x/);
#   3. headers include each other in a cycle — counting a header's implementation: a .c whose
#      first project include is its own header (llm.c style) adds that header's edges, so
#      trainer.h → model_io.h → checkpoint.h → trainer.h is a cycle even though no header alone
#      closes it;
#   5. serve/ or gateway/ reaches the trainer: no header they include, directly or through other
#      headers, lies in train/ or sched/ (serving needs the model, never the trainer or supervisor);
#   4. a .c file declares a non-static function at file scope (a call that bypasses a header: the
#      compiler never checks it against the definition — how train/ used to reach into sched/).
# tests/ and bench/ sit outside the house (they may include anything) and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 - "$@" <<'PY'
import os, re, sys
from collections import defaultdict

# module -> modules it may include (besides itself)
ALLOWED = {
    "core": set(),
    "parallel": {"core"},
    "ckpt": {"core"},
    "objstore": {"core"},
    "text": {"core"},
    "db": {"core"},
    "ops": {"core", "parallel"},
    "model": {"core", "parallel", "ckpt", "objstore", "ops", "text"},
    "train": {"core", "parallel", "ckpt", "objstore", "ops", "model", "text", "db"},
    "report": {"core", "parallel", "ckpt"},
    "safety": {"core", "parallel", "ckpt", "objstore", "ops", "model", "text", "train", "report",
               "db"},
    "dash": {"core", "parallel", "ckpt", "report"},
    "serve": {"core", "parallel", "ckpt", "ops", "model", "text"},
    "gateway": {"core", "parallel", "ckpt", "ops", "model", "text", "serve", "safety"},
    "sched": {"core", "parallel", "ckpt", "objstore", "ops", "model", "text", "train", "report",
              "db"},
    "cmd": {"core", "parallel", "ckpt", "objstore", "ops", "model", "text", "train", "report",
            "safety", "serve", "gateway", "sched", "dash", "db"},
    "minitrain.c": {"core", "parallel", "ckpt", "objstore", "ops", "model", "text", "train",
                    "report", "safety", "serve", "gateway", "sched", "dash", "cmd", "db"},
}
# Known violations allowed for now (none: the table below is the whole rule).
ALLOW_CYCLES = set()  # none
ALLOW_LINES = set()  # "file:included/header.h" pairs allowed for now (none)

INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# a file-scope prototype: no indentation, not static/extern-"C"/typedef, ends with ");"
PROTO = re.compile(r'^(?!static\b|typedef\b|extern\s+"C"|return\b|#)[A-Za-z_][\w\s\*]*?\b(\w+)\s*\([^;{]*\)\s*(MT_\w+\([^)]*\)\s*)*;\s*(//.*|/\*.*)?$')

def module_of(path):
    return "minitrain.c" if path == "minitrain.c" else path.split("/")[0]

files = ["minitrain.c"] if os.path.exists("minitrain.c") else []
for m in ALLOWED:
    if os.path.isdir(m):
        for f in sorted(os.listdir(m)):
            if f.endswith((".c", ".h", ".cu", ".cuh")):
                files.append(f"{m}/{f}")

bad = []
includes = {}  # file -> [(line, header)]
for f in files:
    lst = []
    with open(f, errors="replace") as fh:
        in_comment = False
        for n, line in enumerate(fh, 1):
            mo = INC.match(line)
            if mo and "/" in mo.group(1):
                lst.append((n, mo.group(1)))
            if f.endswith(".c") and not in_comment and PROTO.match(line) and not line.startswith(" "):
                name = PROTO.match(line).group(1)
                bad.append(f"{f}:{n}: declares '{name}' outside a header (include the header "
                           "that declares it, or make it static)")
            # crude block-comment tracking, enough to skip prototypes quoted in comments
            if "/*" in line and "*/" not in line.split("/*")[-1]:
                in_comment = True
            if "*/" in line:
                in_comment = False
    includes[f] = lst

# 1 + 2: floors and private headers
for f, lst in includes.items():
    m = module_of(f)
    for n, h in lst:
        hm = h.split("/")[0]
        if f"{f}:{h}" in ALLOW_LINES:
            continue
        if hm not in ALLOWED or hm == "minitrain.c":
            continue  # a system header spelled with a slash, e.g. "cjson/cJSON.h" in quotes
        if hm != m and hm not in ALLOWED[m]:
            bad.append(f"{f}:{n}: {m}/ includes {h}: points up a floor ({m} may include "
                       f"{', '.join(sorted(ALLOWED[m])) or 'only itself'})")
        if h.endswith("_impl.h") and hm != m:
            bad.append(f"{f}:{n}: includes {h}, a private header of {hm}/")

# 3: cycles between headers, a header standing for its implementation too
edges = defaultdict(set)
where = {}
for f, lst in includes.items():
    if f.endswith(".h"):
        owner = f
    elif lst and os.path.dirname(lst[0][1]) == os.path.dirname(f) and lst[0][1] in includes:
        owner = lst[0][1]  # the .c implements its first include
    else:
        continue
    for n, h in lst:
        if h != owner and h in includes:
            edges[owner].add(h)
            where.setdefault((owner, h), f"{f}:{n}")

cycles, seen = set(), set()
def dfs(u, stack, on):
    for v in sorted(edges[u]):
        if v in on:
            cyc = stack[stack.index(v):]
            cycles.add(tuple(sorted(cyc)) + ("|",) + tuple(cyc))
        elif v not in seen:
            seen.add(v); on.add(v); stack.append(v)
            dfs(v, stack, on)
            stack.pop(); on.discard(v)
for u in sorted(edges):
    if u not in seen:
        seen.add(u)
        dfs(u, [u], {u})
for c in sorted(cycles):
    key, path = c[:c.index("|")], list(c[c.index("|") + 1:])
    if key in ALLOW_CYCLES:
        print(f"  (allowed for now) include cycle: {' -> '.join(path + [path[0]])}")
        continue
    steps = [where[(path[i], path[(i + 1) % len(path)])] for i in range(len(path))]
    bad.append(f"include cycle: {' -> '.join(path + [path[0]])} (at {', '.join(steps)})")

# 5: serving never reaches the trainer, through any chain of headers
NO_TRAINER = {"serve", "gateway"}
FORBIDDEN = ("train/", "sched/")
def closure(f):
    seen, pending, via = set(), [h for _, h in includes.get(f, [])], {}
    for h in pending: via[h] = f
    while pending:
        h = pending.pop()
        if h in seen or h not in includes: continue
        seen.add(h)
        for _, h2 in includes[h]:
            if h2 not in via: via[h2] = h
            pending.append(h2)
    return seen, via
for f in includes:
    if module_of(f) not in NO_TRAINER: continue
    reach, via = closure(f)
    for h in sorted(reach):
        if h.startswith(FORBIDDEN):
            chain, x = [h], h
            while via.get(x) and via[x] != f: x = via[x]; chain.append(x)
            bad.append(f"{f}: reaches {h} (through {' <- '.join(chain)}): serve and the gateway "
                       "must not depend on the trainer")

for b in bad:
    print(f"  FAIL {b}")
print(f"run_layers: {len(files)} files, {sum(len(v) for v in includes.values())} includes, "
      f"{len(bad)} violation{'s' if len(bad) != 1 else ''}")
sys.exit(1 if bad else 0)
PY
