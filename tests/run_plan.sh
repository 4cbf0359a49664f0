#!/usr/bin/env bash
# tests/run_plan.sh — `minitrain plan` end to end: the table and rankfile for 4 nodes x 8 GPUs,
# --exclude on a uniform topology, bad input (one line, exit 2), and a real `mpirun --rankfile`
# of a plan made for this machine, whose layout `train --rankfile` takes (and refuses to
# contradict).
set -euo pipefail
MT=./minitrain
MPI="mpirun --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
. tests/lib.sh
tmp_dir mt_plan

$MT plan --nodes 4 --gpus-per-node 8 --nodes-per-leaf 2 --tp 4 --pp 2 --dp 4 --out "$TMP/rf" \
  > "$TMP/plan.txt"
grep -q '^planned .*(nvlink).*(leaf).*(spine).*all met$' "$TMP/plan.txt" \
  && ok "4x8: TP on NVLink, DP inside a leaf, PP across leaves, rules met" || bad "4x8 table: $(cat "$TMP/plan.txt")"
grep -q '^naive .*broken$' "$TMP/plan.txt" && ok "the naive order breaks the rules" || bad "naive row"
[ "$(grep -c '^rank ' "$TMP/rf")" = 32 ] && grep -q '^rank 13=node1 slot=5$' "$TMP/rf" \
  && ok "rankfile: 32 ranks in mesh order" || bad "rankfile: $(head -5 "$TMP/rf")"

$MT plan --nodes 5 --gpus-per-node 8 --tp 8 --pp 2 --dp 1 --exclude node1 --spares 1 --out "$TMP/rf2" >/dev/null
! grep -q '=node1 ' "$TMP/rf2" && grep -q '^# excluded node1$' "$TMP/rf2" && grep -q '^# spare ' "$TMP/rf2" \
  && ok "--exclude node1: never used; a spare held back" || bad "exclude: $(cat "$TMP/rf2")"

set +e
$MT plan --nodes 2 --gpus-per-node 8 --tp 8 --pp 4 --dp 1 > /dev/null 2> "$TMP/err"; rc=$?
set -e
[ $rc = 2 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q 'need 4 nodes' "$TMP/err" \
  && ok "too few nodes: one line, exit 2" || bad "too few nodes: rc $rc $(cat "$TMP/err")"

# a plan for this machine (2 slots), run for real by mpirun --rankfile
tiny_corpus 100000 "$TMP/data"
printf '[node %s]\ngpus = 2\n' "$(hostname)" > "$TMP/topo.ini"
$MT plan --topology "$TMP/topo.ini" --tp 2 --pp 1 --dp 1 --out "$TMP/local.rf" --quiet >/dev/null
cat > "$TMP/c.ini" <<INI
data = $TMP/data
n_layer = 2
n_head = 2
d_model = 32
seq_len = 32
batch_size = 2
global_batch = 2
steps = 2
warmup_steps = 1
eval_every = 0
sample_tokens = 0
threads = 1
INI
if $MPI --rankfile "$TMP/local.rf" -np 2 $MT train --config "$TMP/c.ini" --rankfile "$TMP/local.rf" \
     --run-dir "$TMP/run" > "$TMP/train.log" 2>&1 && grep -q 'world 2 = tp 2 x pp 1 x dp 1' "$TMP/train.log"; then
  ok "mpirun --rankfile + train --rankfile: trains with the plan's tp 2"
else bad "train --rankfile: $(tail -3 "$TMP/train.log")"; fi
set +e
$MT train --config "$TMP/c.ini" --rankfile "$TMP/local.rf" --tp 1 --pp 2 > /dev/null 2> "$TMP/err"; rc=$?
set -e
[ $rc = 2 ] && grep -q 'planned for pp 1, the config says pp 2' "$TMP/err" \
  && ok "a config that contradicts the rankfile is refused" || bad "contradiction: rc $rc $(cat "$TMP/err")"

finish plan
