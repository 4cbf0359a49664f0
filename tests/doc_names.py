#!/usr/bin/python3
"""tests/doc_names.py — the docs' names held to the code: links, files and functions.

A page that names `file` and `function` rots the first time someone renames either; this checker
makes the rot a test failure. Two pages use it:

  doc_names.py tutorial docs/tutorial.md      (tests/run_tutorial.sh)
      every relative link exists (and its #anchor is a heading there), and every `function` on a
      **Code:** line is defined in a file linked on that " · " segment of the line.
  doc_names.py map docs/architecture.md       (tests/run_map.sh)
      the links as above; every repository path the page mentions exists; in every table row of
      the form | mechanism | files | `function`s |, each function is defined in one of the row's
      files; in the prose, each "`function` (dir/file.c)" pair is defined there; and each function
      the map names is on a path: referenced somewhere in the product's own code (core/ .. cmd/,
      minitrain.c; comments removed) besides its own definition — a function only the tests call
      is off the path (issue 23: `ckpt_writer_start`, `ckpt_tiers_commit`).
  doc_names.py links README.md docs/design.md ...  (tests/run_map.sh)
      only the links, as above.

"Defined" means a line starting in column 0 that names the function followed by "(" and is not a
prototype (does not end in ");"), or a `#define NAME`, or a file-scope object `NAME = ` / `NAME[`
(a backend table such as ops_backend_cpu). Prints one summary line, then one line per problem;
exits 1 when there is any.
"""
import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PRODUCT = ["core", "parallel", "ckpt", "objstore", "text", "db", "ops", "model", "train", "report", "dash",
           "serve", "safety", "gateway", "sched", "cmd"]
TOP = PRODUCT + ["tests", "bench", "examples", "docs"]
IDENT = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
PATH = re.compile(r"(?<![\w/.-])((?:%s)/[\w*./-]*\.(?:c|h|cu|cuh|sh|py|ini|md|sbatch))(?![\w])"
                  % "|".join(TOP))


def slug(h):
    h = re.sub(r"[^\w\- ]", "", h.strip().lower())
    return h.replace(" ", "-")


def anchors(path):
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", open(path).read(), re.M)}


def check_links(doc, text, errors):
    base = os.path.dirname(doc)
    n = 0
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        full = os.path.normpath(os.path.join(base, path)) if path else doc
        n += 1
        if not os.path.exists(full):
            errors.append(f"link {target}: {full} does not exist")
            continue
        if frag and frag not in anchors(full):
            errors.append(f"link {target}: no heading #{frag} in {full}")
    return n


def defined(name, src):
    pat = (r"^[A-Za-z][^\n]*\b%s\s*\((?![^\n]*\);\s*$)|^#define %s\b|^[A-Za-z][^\n(]*\b%s\s*(=|\[)"
           % (name, name, name))
    return re.search(pat, src, re.M) is not None


def read_all(files):
    return "".join(open(f).read() for f in files if os.path.isfile(f) and not f.endswith(".md"))


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), s, flags=re.S)
    return re.sub(r"//[^\n]*", "", s)


_index = None


def product_index():
    """identifier -> the product's lines (comments removed) that mention it, read once."""
    global _index
    if _index is None:
        files = ["minitrain.c"] + [f for d in PRODUCT for f in sorted(glob.glob(f"{d}/*"))
                                   if f.endswith((".c", ".h", ".cu", ".cuh"))]
        _index = {}
        for f in files:
            for ln in strip_comments(open(f).read()).splitlines():
                for w in set(re.findall(r"[A-Za-z_]\w*", ln)):
                    _index.setdefault(w, []).append(ln)
    return _index


def on_path(name):
    """name is referenced in the product besides its definitions and prototypes."""
    head = re.compile(r"^[A-Za-z][^\n]*\b%s\s*\(|^#define %s\b|^[A-Za-z][^\n(]*\b%s\s*(=|\[|;)"
                      % (name, name, name))
    return any(not head.match(ln) for ln in product_index().get(name, []))


def tutorial(doc):
    base = os.path.dirname(doc)
    text = open(doc).read()
    errors = []
    n_links = check_links(doc, text, errors)
    n_names = 0
    for line in text.splitlines():
        if not line.startswith("**Code:**"):
            continue
        for seg in line[len("**Code:**"):].split(" · "):
            files = [os.path.normpath(os.path.join(base, p))
                     for p in re.findall(r"\]\(([^)#\s]+)", seg)]
            src = read_all(files)
            for name in IDENT.findall(seg):
                n_names += 1
                if not defined(name, src):
                    errors.append(f"`{name}` is not defined in {', '.join(files) or '(no file)'}")
    print(f"{n_links} links, {n_names} function names checked")
    return errors


def expand(paths):
    out = []
    for p in paths:
        out += sorted(glob.glob(os.path.join(ROOT, p))) or [os.path.join(ROOT, p)]
    return out


def map_page(doc):
    text = open(doc).read()
    errors = []
    n_links = check_links(doc, text, errors)
    paths = sorted(set(PATH.findall(text)))
    for p in paths:
        if not glob.glob(os.path.join(ROOT, p)):
            errors.append(f"{p}: no such file")
    named = {}  # function -> where the map names it (for the on-path check)
    n_rows = 0
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if set(cells[0]) <= set("-: ") or cells[0] == "mechanism":
                continue
            if len(cells) != 3:
                errors.append(f"line {i}: {len(cells)} cells, not | mechanism | files | functions |")
                continue
            n_rows += 1
            files = PATH.findall(cells[1])
            names = IDENT.findall(cells[2])
            if not files:
                errors.append(f"line {i}: row '{cells[0]}' names no file")
            if not names:
                errors.append(f"line {i}: row '{cells[0]}' names no function")
            src = read_all(expand(files))
            for name in names:
                named.setdefault(name, f"line {i}")
                if not defined(name, src):
                    errors.append(f"line {i}: `{name}` is not defined in {', '.join(files)}")
            continue
        for name, path in re.findall(r"`([A-Za-z_]\w*)` \(((?:%s)/[\w.]+\.(?:c|h|cu))" %
                                     "|".join(PRODUCT), line):
            named.setdefault(name, f"line {i}")
            if not defined(name, read_all(expand([path]))):
                errors.append(f"line {i}: `{name}` is not defined in {path}")
    for name, where in sorted(named.items()):
        if not on_path(name):
            errors.append(f"{where}: `{name}` has no caller in the product (off the path)")
    print(f"{n_rows} rows, {len(named)} functions, {len(paths)} paths, {n_links} links checked")
    return errors


def links(docs):
    errors = []
    n = sum(check_links(d, open(d).read(), errors) for d in docs)
    print(f"{n} links in {len(docs)} pages checked")
    return errors


def main():
    modes = {"tutorial": tutorial, "map": map_page}
    if len(sys.argv) == 3 and sys.argv[1] in modes:
        run = lambda: modes[sys.argv[1]](sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "links":
        run = lambda: links(sys.argv[2:])
    else:
        sys.exit("usage: doc_names.py tutorial|map DOC.md | links DOC.md...")
    os.chdir(ROOT)
    errors = run()
    for e in errors:
        print("  " + e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
