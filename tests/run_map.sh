#!/usr/bin/env bash
# tests/run_map.sh — docs/architecture.md held to the code: every repository path it mentions
# exists, every function in a | mechanism | files | functions | row is defined in one of that row's
# files, every "`function` (file)" pair of the prose is defined there, and every function the map
# names has a caller in the product (core/ .. cmd/, minitrain.c), so a name that only the tests
# call — off the path the map describes — fails. The checker is tests/doc_names.py, the one
# tests/run_tutorial.sh uses for the tutorial's **Code:** lines.
# Also holds the checker itself to a page with known mistakes, so a checker that accepts anything
# fails here. The README's, tests/README.md's, design.md's and benchmarks.md's links too.
# A second or two; needs no build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
. tests/lib.sh
tmp_dir mt_map

if $PY tests/doc_names.py map docs/architecture.md > "$TMP/map.log" 2>&1
then ok "architecture map: $(head -1 "$TMP/map.log")"
else bad "architecture map:"; sed 's/^/      /' "$TMP/map.log"; fi
if $PY tests/doc_names.py links README.md tests/README.md docs/design.md docs/benchmarks.md > "$TMP/links.log" 2>&1
then ok "README, tests/README, design, benchmarks: $(head -1 "$TMP/links.log")"
else bad "links:"; sed 's/^/      /' "$TMP/links.log"; fi
rows=$(head -1 "$TMP/map.log" | grep -o '^[0-9]*')
check "the map has its rows (70 or more, got ${rows:-0})" test "${rows:-0}" -ge 70
for s in "peer tier 0" "outlier ejection" "retry budget" "limits" "keys" "PII" "guard device" \
         "cuda" "Slurm" "placement" "restart loop" "ETTR formula" "MFU formula" "commit rename"; do
  check "the map names the mechanism '$s'" grep -qi -- "| .*$s" docs/architecture.md
done

# the checker against a page with one mistake of each kind (a page inside docs/ for its links)
bad_page=docs/.map_selftest_$$.md
on_exit() { rm -f "$bad_page"; }
cat > "$bad_page" <<'MD'
[gone](no_such_page.md)
The loop is `trainer_run` (train/trainer.c), data from `no_such_loader` (text/data.c).
| mechanism | file | function(s) |
|---|---|---|
| a file that is not there | train/no_such_file.c | `trainer_run` |
| a function in the wrong file | ckpt/ckpt.c | `trainer_run` |
| a function only the tests call | ckpt/writer.c | `ckpt_writer_start` |
| a row with a stray cell | ckpt/ckpt.c | `ckpt_commit_known` | extra |
MD
$PY tests/doc_names.py map "$bad_page" > "$TMP/bad.log" 2>&1 && st=0 || st=$?
check "the checker fails a page with mistakes (exit $st)" test "$st" = 1
for want in "link no_such_page.md" "train/no_such_file.c: no such file" \
            "\`no_such_loader\` is not defined in text/data.c" \
            "\`trainer_run\` is not defined in ckpt/ckpt.c" \
            "\`ckpt_writer_start\` has no caller in the product" "4 cells"; do
  check "the checker reports: $want" grep -qF -- "$want" "$TMP/bad.log"
done
check "the checker accepts what is right (trainer_run in train/trainer.c)" \
  bash -c "! grep -q 'trainer_run. is not defined in train/trainer.c' '$TMP/bad.log'"

finish "run_map"
