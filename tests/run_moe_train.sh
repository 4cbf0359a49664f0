#!/usr/bin/env bash
# tests/run_moe_train.sh — a mixture-of-experts GPT trains the same model under expert
# parallelism and the full 4D layout as in one process.
#
# MoE every 2nd block, 4 experts, top-2, capacity factor 1.25 (so tokens ARE dropped), aux loss
# 0.01. An EP group concatenates its ranks' microbatches, so ep = dp = E ranks with batch B
# equal one process with batch E·B (same routing groups, same capacities). Compared with
# tests/reference/compare_runs.py (losses 1e-5, parameters 1e-4 · max|p|): ep=2 (dp=2),
# ep=4 (dp=4), and tp=2 x pp=2 x dp=2 with ep=2 (8 ranks). Also: per-step MoE statistics are in
# run.db, and ep without a MoE model / zero with ep are refused with one line.
set -euo pipefail
. tests/layout_lib.sh
layout_setup mt_moe
cat >> "$CONFIG" <<INI
n_layer = 4
n_head = 4
d_model = 32
global_batch = 16
eval_batches = 2
seed = 5
moe_every = 2
n_experts = 4
top_k = 2
capacity_factor = 1.25
aux_loss_coef = 0.01
INI
run base8 1 --batch-size 8
run base16 1 --batch-size 16
run ep2 2 --batch-size 4 --dp 2 --ep 2
check ep2 base8
run ep4 4 --batch-size 4 --dp 4 --ep 4
check ep4 base16
run tp2_pp2_dp2_ep2 8 --tp 2 --pp 2 --dp 2 --ep 2 --microbatches 2
check tp2_pp2_dp2_ep2 base8

# expert-parallel checkpoints: every EP rank saves its experts; stop at 4 + resume = straight
run ep2_ckpt 2 --batch-size 4 --dp 2 --ep 2 --ckpt-every 4 --ckpt-tier0 0 --stop-after 4
ls "$TMP/ep2_ckpt/ckpt/step_00000004/" | grep -q "model-tp00-pp00-ep01" && ok "EP rank 1 saves its experts" || bad "no ep01 file"
# trainer_state.json names exactly the shard files of the step (one naming function for both)
/usr/bin/python3 - "$TMP/ep2_ckpt/ckpt/step_00000004" <<'PY' && ok "trainer_state.json lists exactly the ep2 shard files" || bad "trainer_state.json file list vs the step directory"
import json, os, sys
d = sys.argv[1]
st = json.load(open(os.path.join(d, "trainer_state.json")))
named = [f for kind in ("model", "optim") for f in st["files"][kind]]
on_disk = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
missing = [f for f in named if not os.path.isfile(os.path.join(d, f))]
unnamed = [f for f in on_disk if f not in named]
assert len(on_disk) == 4, on_disk  # model + optim, for EP ranks 0 and 1
assert not missing and not unnamed and len(named) == len(set(named)), (missing, unnamed, named)
PY
run ep2_ckpt 2 --batch-size 4 --dp 2 --ep 2 --ckpt-every 4 --ckpt-tier0 0
grep -q "resumed from step 4" "$TMP/ep2_ckpt.log" && check ep2_ckpt ep2 || bad "ep2 resume: $(tail -2 "$TMP/ep2_ckpt.log")"

/usr/bin/python3 - "$TMP/base8/run.db" "$TMP/ep2/run.db" <<'PY' && ok "per-step MoE statistics in run.db (aux loss, load, drops), equal across layouts" || bad "moe events"
import json, sqlite3, sys
def ev(p):
    return [json.loads(d) for (d,) in sqlite3.connect(p).execute(
        "SELECT detail FROM events WHERE kind = 'moe' ORDER BY rowid")]
a, b = ev(sys.argv[1]), ev(sys.argv[2])
assert len(a) == len(b) == 8, (len(a), len(b))
for x, y in zip(a, b):
    assert x["aux_loss"] > 0 and x["tokens_max"] >= x["tokens_min"] >= 0, x
    assert abs(x["aux_loss"] - y["aux_loss"]) <= 1e-5 * x["aux_loss"], (x, y)
    assert x["dropped"] == y["dropped"] and x["tokens_max"] == y["tokens_max"], (x, y)
assert any(x["dropped"] > 0 for x in a), "capacity factor 1.25 should drop some tokens"
PY
# the run's model samples (decode through MoE blocks)
$MT sample --run "$TMP/ep2" --prompt "A" --max-tokens 8 --temperature 0 > "$TMP/s.out" 2>&1 \
  && ok "sampling a MoE model" || bad "sample MoE: $(head -2 "$TMP/s.out")"

set +e
$MPI -np 2 $MT train --config "$CONFIG" --run-dir "$TMP/bad1" --batch-size 4 --dp 2 --ep 2 --moe-every 0 > "$TMP/bad1.out" 2>&1; r1=$?
$MPI -np 2 $MT train --config "$CONFIG" --run-dir "$TMP/bad2" --batch-size 4 --dp 2 --ep 2 --zero 1 > "$TMP/bad2.out" 2>&1; r2=$?
$MT train --config "$CONFIG" --run-dir "$TMP/bad3" --capacity-factor 0.5 > "$TMP/bad3.out" 2>&1; r3=$?
set -e
[ $r1 -ne 0 ] && grep -q "needs a mixture-of-experts model" "$TMP/bad1.out" && ok "ep without MoE refused" || bad "ep without MoE: $r1"
[ $r2 -ne 0 ] && grep -q "zero=1 together with ep>1" "$TMP/bad2.out" && ok "zero with ep refused" || bad "zero+ep: $r2"
[ $r3 -ne 0 ] && grep -q "capacity_factor (0.5) must be >= 1" "$TMP/bad3.out" && ok "capacity factor < 1 refused" || bad "cf 0.5: $r3"

finish "moe training"
