#!/usr/bin/env bash
# tests/run_pipeline.sh — pipeline parallelism trains the same model as one process.
#
# 8 steps of a tiny 4-layer GPT under mpirun --oversubscribe, compared with the single-process
# run (tests/reference/compare_runs.py: losses within 1e-5, parameters within 1e-4 · max|p|):
# pp=2 M=4; pp=2 with an uneven split (5 layers); pp=4 M=2 (fewer microbatches than stages);
# tp=2 x pp=2 x dp=2 (8 ranks). 1F1B and GPipe give bit-identical results; the two copies of
# the tied embedding stay identical; the bubble is printed and the idle share per stage lands in
# run.db; a bad --pp-layers is refused with one line.
set -euo pipefail
. tests/layout_lib.sh
layout_setup mt_pp
export MINITRAIN_PP_CHECK=1  # log the spread between the two copies of the tied wte
cat >> "$CONFIG" <<INI
n_layer = 4
n_head = 6
d_model = 48
global_batch = 12
eval_batches = 2
seed = 11
INI
run base3 1 --batch-size 3                        # 4 microbatches of 3
run base6 1 --batch-size 6                        # 2 microbatches of 6
run base5 1 --batch-size 3 --n-layer 5
run pp2 2 --pp 2 --microbatches 4
check pp2 base3
run pp2_gpipe 2 --pp 2 --microbatches 4 --pp-schedule gpipe
check pp2_gpipe pp2 --exact
run pp2_uneven 2 --pp 2 --microbatches 4 --n-layer 5
check pp2_uneven base5
grep -q "layers 3,2" "$TMP/pp2_uneven.log" && ok "5 layers split 3,2" || bad "uneven split line"
run pp2_hand 2 --pp 2 --microbatches 4 --pp-layers 1,3
check pp2_hand base3
run pp4_m2 4 --pp 4 --microbatches 2
check pp4_m2 base6
run tp2_pp2_dp2 8 --tp 2 --pp 2 --dp 2 --microbatches 2
check tp2_pp2_dp2 base3

# checkpoints under pipeline parallelism: stop at 4 + resume = straight; a pp=2 checkpoint
# loads into one process (the stages' tensors are stored with their global names)
run pp2_ckpt 2 --pp 2 --microbatches 4 --ckpt-every 4 --ckpt-tier0 0 --stop-after 4
run pp2_ckpt 2 --pp 2 --microbatches 4 --ckpt-every 4 --ckpt-tier0 0
grep -q "resumed from step 4" "$TMP/pp2_ckpt.log" && check pp2_ckpt pp2 --exact || bad "pp2 resume: $(tail -2 "$TMP/pp2_ckpt.log")"
cp -r "$TMP/pp2_ckpt" "$TMP/pp1_from_pp2"
run pp1_from_pp2 1 --batch-size 3 --steps 12 --ckpt-every 4 --ckpt-tier0 0
grep -q "resumed from step 8" "$TMP/pp1_from_pp2.log" && grep -q "done: 12 steps" "$TMP/pp1_from_pp2.log" \
  && ok "a pp=2 checkpoint resumes in one process (resharded)" || bad "pp2 -> pp1: $(tail -2 "$TMP/pp1_from_pp2.log")"

# tied embedding: both copies identical after every step
spread=$(grep -ho "differ by at most [0-9.e+-]*" "$TMP"/pp*.log | awk '{print $5}' | sort -g | tail -1)
[ "$spread" = 0 ] && ok "tied wte copies identical on first and last stage after 8 steps" \
  || bad "tied wte spread '$spread'"
# bubble printed, idle share logged per stage
grep -q "bubble (P-1)/(M+P-1) = 60.0%" "$TMP/pp4_m2.log" && ok "bubble printed (P=4, M=2: 60%)" || bad "bubble line"
/usr/bin/python3 - "$TMP/pp4_m2/run.db" <<'PY' && ok "idle share per stage in run.db" || bad "pp_idle events"
import json, sqlite3, sys
rows = [json.loads(d) for (d,) in sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind = 'pp_idle'")]
stages = {r["stage"] for r in rows}
assert stages == {0, 1, 2, 3}, stages
assert all(0 <= r["idle_share"] <= 1 for r in rows)
PY
# bad split: one clear line
set +e
$MPI -np 2 $MT train --config "$CONFIG" --run-dir "$TMP/bad" --pp 2 --microbatches 4 --pp-layers 1,2 > "$TMP/bad.out" 2>&1; rc=$?
set -e
[ $rc -ne 0 ] && grep -q "sums to 3, but the model has 4 layers" "$TMP/bad.out" && ok "bad --pp-layers refused" \
  || bad "bad --pp-layers: rc $rc $(head -2 "$TMP/bad.out")"

finish pipeline
