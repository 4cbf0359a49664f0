#!/usr/bin/env bash
# tests/run_memory.sh — the memory wall: activation recompute, ZeRO-2/3 and the memory budget.
#
# 8 steps of a tiny GPT from one seed. recompute = selective | full must give bit-identical losses
# and final parameters to recompute = none (the same ops on the same inputs), alone and with
# tp 2 / pp 2 / dp 2 and MoE with ep 2. ZeRO-2 and ZeRO-3 at dp 2 and 4, alone, with tp 2 (also
# tp 2 x dp 4: 8 processes), with pp 2, with pp 2 x tp 2 x dp 2, with ep 2 (MoE, dp 2 and 4) and
# with recompute train the single-process model (and bit for bit zero 0's at dp 2, dense and with
# ep 2);
# a zero 3 checkpoint resumes under zero 1 and dp 1, a dp 1 one under zero 3. The memory budget
# is printed before step 1, a budget over memory_limit is refused with exit 2 before any work,
# and bad combinations get one line and exit 2.
set -euo pipefail
. tests/layout_lib.sh
layout_setup mt_mem
cat >> "$CONFIG" <<INI
n_layer = 4
n_head = 4
d_model = 32
batch_size = 2
global_batch = 8
eval_batches = 2
seed = 11
INI
MOE="--moe-every 2 --n-experts 4 --top-k 2"

# --- recompute: bit-identical to none, in every layout ---------------------------------------
for layout in "one:1:" "tp2:2:--tp 2" "pp2:2:--pp 2 --microbatches 4" "dp2:2:--dp 2" \
              "ep2:2:--dp 2 --ep 2 $MOE"; do
  IFS=: read -r name np flags <<< "$layout"
  run "rc_${name}_none" "$np" $flags || bad "rc_${name}_none: $(tail -2 "$TMP/rc_${name}_none.log")"
  for rc in selective full; do
    run "rc_${name}_$rc" "$np" $flags --recompute $rc || bad "rc_${name}_$rc: $(tail -2 "$TMP/rc_${name}_$rc.log")"
    check "rc_${name}_$rc" "rc_${name}_none" --exact
  done
done

# --- ZeRO-2 / ZeRO-3 against one process -----------------------------------------------------
# Losses within 1e-5 relative and parameters within 1e-4 max|p| (tests/reference/compare_runs.py):
# the data-parallel sum and the microbatch accumulation add in another order than one process.
run base 1 || bad "base: $(tail -2 "$TMP/base.log")"
for layout in "dp2_z2:2:--dp 2 --zero 2" "dp2_z3:2:--dp 2 --zero 3" \
              "dp4_z2:4:--dp 4 --zero 2" "dp4_z3:4:--dp 4 --zero 3" \
              "tp2_dp2_z2:4:--tp 2 --dp 2 --zero 2" "tp2_dp2_z3:4:--tp 2 --dp 2 --zero 3" \
              "pp2_dp2_z2:4:--pp 2 --dp 2 --zero 2" "pp2_dp2_z3:4:--pp 2 --dp 2 --zero 3" \
              "tp2_dp4_z2:8:--tp 2 --dp 4 --zero 2" "tp2_dp4_z3:8:--tp 2 --dp 4 --zero 3" \
              "pp2_tp2_dp2_z2:8:--pp 2 --tp 2 --dp 2 --zero 2" \
              "pp2_tp2_dp2_z3:8:--pp 2 --tp 2 --dp 2 --zero 3" \
              "dp2_z3_full:2:--dp 2 --zero 3 --recompute full" \
              "pp2_dp2_z3_sel:4:--pp 2 --dp 2 --zero 3 --recompute selective"; do
  IFS=: read -r name np flags <<< "$layout"
  run "$name" "$np" $flags || bad "$name: $(tail -2 "$TMP/$name.log" | cut -c1-200)"
  check "$name" base
done
grep -q "with ZeRO-3" "$TMP/dp4_z3.log" && ok "ZeRO-3 reports sharded optimizer memory" || bad "ZeRO-3 memory line"

# with expert parallelism: dense units sharded over dp, expert units over the expert-data-parallel
# group (train/zero.h). An EP group concatenates its ranks' microbatches, so the one-process
# reference runs batch ep x 2 (tests/run_moe_train.sh). dp 2 x ep 2: edp 1 (experts whole, only
# the dense part sharded); dp 4 x ep 2: edp 2 (the experts sharded too).
run base_moe 1 $MOE --batch-size 4 || bad "base_moe: $(tail -2 "$TMP/base_moe.log")"
for layout in "ep2_dp2_z2:2:--dp 2 --ep 2 --zero 2" "ep2_dp2_z3:2:--dp 2 --ep 2 --zero 3" \
              "ep2_dp4_z2:4:--dp 4 --ep 2 --zero 2" "ep2_dp4_z3:4:--dp 4 --ep 2 --zero 3" \
              "ep2_dp4_z3_full:4:--dp 4 --ep 2 --zero 3 --recompute full"; do
  IFS=: read -r name np flags <<< "$layout"
  run "$name" "$np" $flags $MOE || bad "$name: $(tail -2 "$TMP/$name.log" | cut -c1-200)"
  check "$name" base_moe
done
# pp 2 x dp 2 x ep 2 against zero 0 in the same layout: zero 0 itself is 2.0e-6 off one process
# on an expert bias here (tolerance 1.3e-6: AdamW's 1/sqrt(v) on a near-zero gradient), so the
# ZeRO stages are checked against the layout they replace
run pp2_ep2_z0 4 --pp 2 --dp 2 --ep 2 --microbatches 2 $MOE || bad "pp2_ep2_z0: $(tail -2 "$TMP/pp2_ep2_z0.log")"
for z in 2 3; do
  run "pp2_ep2_z$z" 4 --pp 2 --dp 2 --ep 2 --microbatches 2 --zero $z $MOE \
    || bad "pp2_ep2_z$z: $(tail -2 "$TMP/pp2_ep2_z$z.log" | cut -c1-200)"
  check "pp2_ep2_z$z" pp2_ep2_z0
done

# bit for bit against zero 0 at the same dp where the sum order is the same: dp 2 (a two-term sum
# is the same whichever rank adds), one microbatch per rank, no clipping (the norm's sum order
# differs, and clipping would carry its last bit into every update)
EXACT="--dp 2 --global-batch 4 --grad-clip 0"
run ex_z0 2 $EXACT || bad "ex_z0: $(tail -2 "$TMP/ex_z0.log")"
run ex_ep_z0 2 $EXACT --ep 2 $MOE || bad "ex_ep_z0: $(tail -2 "$TMP/ex_ep_z0.log")"
for z in 2 3; do
  run "ex_z$z" 2 $EXACT --zero $z || bad "ex_z$z: $(tail -2 "$TMP/ex_z$z.log")"
  check "ex_z$z" ex_z0 --exact
  run "ex_ep_z$z" 2 $EXACT --ep 2 --zero $z $MOE || bad "ex_ep_z$z: $(tail -2 "$TMP/ex_ep_z$z.log")"
  check "ex_ep_z$z" ex_ep_z0 --exact
done

# --- checkpoints: zero 3 resumes under zero 1 and dp 1, and the reverse ----------------------
CK="--ckpt-every 4 --ckpt-tier0 0"
run ck_z3 2 --dp 2 --zero 3 $CK --stop-after 4 || bad "ck_z3: $(tail -2 "$TMP/ck_z3.log")"
run ck_one 1 $CK --stop-after 4 || bad "ck_one: $(tail -2 "$TMP/ck_one.log")"
for pair in "ck_z3:z3_to_z1:2:--dp 2 --zero 1" "ck_z3:z3_to_dp1:1:" "ck_one:dp1_to_z3:2:--dp 2 --zero 3"; do
  IFS=: read -r from name np flags <<< "$pair"
  cp -r "$TMP/$from" "$TMP/$name"
  run "$name" "$np" $CK $flags || bad "$name: $(tail -2 "$TMP/$name.log" | cut -c1-200)"
  grep -q "resum" "$TMP/$name.log" || bad "$name did not resume: $(grep -m2 -i ckpt "$TMP/$name.log")"
  check "$name" base
done

# --- the memory budget: printed before step 1, against the measured peak, and the limit -------
# a model whose parameters and optimizer state dominate the process (12.8M parameters)
BIG="--d-model 512 --n-head 8 --steps 2 --eval-every 0 --batch-size 2"
budget() { # budget NAME: the largest predicted total over ranks (bytes), from run.db
  /usr/bin/python3 - "$TMP/$1/run.db" "${2:-total}" <<'PY'
import json, sqlite3, sys
d = json.loads(sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind='memory'").fetchone()[0])
print(int(max(d[sys.argv[2]])))
PY
}
for z in 0 3; do
  run "mem_z$z" 2 $BIG --dp 2 --zero $z || bad "mem_z$z: $(tail -2 "$TMP/mem_z$z.log")"
  # the budget table comes before the first step line
  b=$(grep -n "memory budget per rank" "$TMP/mem_z$z.log" | head -1 | cut -d: -f1)
  s1=$(grep -n "^step 1/" "$TMP/mem_z$z.log" | head -1 | cut -d: -f1)
  [ -n "$b" ] && [ -n "$s1" ] && [ "$b" -lt "$s1" ] && grep -q "rank 1: params" "$TMP/mem_z$z.log" \
    && ok "zero $z: the budget of every rank is printed before step 1" || bad "zero $z: budget not before step 1"
  # every rank's measured peak (VmHWM) within 10% of its prediction
  /usr/bin/python3 - "$TMP/mem_z$z/run.db" <<'PY' && ok "zero $z: peak RSS within 10% of the prediction on every rank" || bad "zero $z: peak RSS vs prediction"
import json, sqlite3, sys
d = json.loads(sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind='memory_peak'").fetchone()[0])
for peak, pred in zip(d["peak_rss"], d["total"]):
    print(f"    peak {peak/2**20:.1f} MiB, predicted {pred/2**20:.1f} MiB ({100*(peak/pred-1):+.1f}%)")
    assert abs(peak / pred - 1) <= 0.10, (peak, pred)
PY
done
# parameters + gradients + optimizer: 16 bytes per parameter at zero 0, about half at zero 3 and
# dp 2 (the shard, plus the embeddings and one block gathered)
/usr/bin/python3 - "$TMP/mem_z0/run.db" "$TMP/mem_z3/run.db" <<'PY' && ok "zero 3 at dp 2 holds about half of zero 0's model state" || bad "zero 3 model-state bytes"
import json, sqlite3, sys
def state(db):
    d = json.loads(sqlite3.connect(db).execute("SELECT detail FROM events WHERE kind='memory'").fetchone()[0])
    return max(p + g + o for p, g, o in zip(d["params"], d["grads"], d["optimizer"]))
z0, z3 = state(sys.argv[1]), state(sys.argv[2])
n = z0 / 16 # parameters
print(f"    zero 0 {z0/2**20:.1f} MiB = 16 B x {n/1e6:.2f}M; zero 3 {z3/2**20:.1f} MiB = {z3/n:.2f} B/param")
assert 7.5 <= z3 / n <= 11, z3 / n   # 16/2 + (root + one of 4 blocks) x 8 B / Ψ
PY
# report, report --json, report --html and the layout picture show the stage and the budget
$MT report --run "$TMP/mem_z3" > "$TMP/rep.txt" 2>&1 || true
grep -q "^memory: *zero 3, recompute none | rank [01] predicted .* measured peak" "$TMP/rep.txt" \
  && ok "report: ZeRO stage, predicted vs measured peak" || bad "report memory line: $(grep -m1 memory "$TMP/rep.txt")"
$MT report --run "$TMP/mem_z3" --json | /usr/bin/python3 -c "
import json, sys; m = json.load(sys.stdin)['memory']
assert m['zero'] == 3 and m['predicted_bytes'] > 0 and m['peak_rss_bytes'] > 0, m" \
  && ok "report --json: memory object" || bad "report --json memory"
$MT report --run "$TMP/mem_z3" --html "$TMP/rep.html" > /dev/null 2>&1 || true
grep -q "parallel layout: 2 ranks = tp 1 × pp 1 × dp 2, ZeRO-3" "$TMP/rep.html" && grep -q "memory per rank: zero 3" "$TMP/rep.html" \
  && ok "report --html: the layout picture names ZeRO-3 and the memory budget" || bad "report --html: no ZeRO-3 / budget"
# a limit between the two: zero 0 is refused before any work, zero 3 trains
lim=$(( ( $(budget mem_z0) + $(budget mem_z3) ) / 2 ))
set +e; run lim_z0 2 $BIG --dp 2 --memory-limit "$lim"; rc=$?; set -e
[ $rc -eq 2 ] && grep -q "exceeds memory_limit" "$TMP/lim_z0.log" && [ ! -f "$TMP/lim_z0/run.db" ] \
  && ok "zero 0 over memory_limit $lim refused (exit 2, no run.db)" || bad "lim_z0: rc $rc $(grep -m1 error "$TMP/lim_z0.log")"
run lim_z3 2 $BIG --dp 2 --zero 3 --memory-limit "$lim" && grep -q "^done:" "$TMP/lim_z3.log" \
  && ok "the same model under zero 3 fits memory_limit $lim and trains" || bad "lim_z3: $(tail -2 "$TMP/lim_z3.log")"
# full recompute keeps about 1/L of the activations (n_layer 4: each block's output only)
run mem_full 1 $BIG --recompute full || bad "mem_full"
run mem_none 1 $BIG || bad "mem_none"
a_full=$(budget mem_full activations); a_none=$(budget mem_none activations)
/usr/bin/python3 -c "import sys; r=$a_full/$a_none; print(f'    activations full/none = {r:.3f}'); sys.exit(0 if r < 0.25 else 1)" \
  && ok "recompute full: activations $a_full B vs none $a_none B (< 1/4 at 4 layers)" || bad "recompute full activations"
grep -q "MFU .* | HFU " "$TMP/mem_full.log" && ok "HFU printed beside MFU on the progress line" || bad "no HFU"
# report: HFU = MFU x (F + R) / F, F and R from docs/mfu.md's formulas on the run's own config
# (dense: N = 12·L·d² + V·d, F = 6N + 12·L·d·T; full recompute R = 2·12·L·d² + 4·L·d·T)
for rc in full none; do
  $MT report --run "$TMP/mem_$rc" > "$TMP/rep_$rc.txt" 2>&1 || true
  $MT report --run "$TMP/mem_$rc" --json > "$TMP/rep_$rc.json" 2>&1 || true
done
/usr/bin/python3 - "$TMP/mem_full/run.db" "$TMP/rep_full.json" "$TMP/rep_none.json" <<'PY' \
  && grep -q "^HFU (median): .* (recompute full counted" "$TMP/rep_full.txt" \
  && ok "report: HFU beside MFU, (F + R) / F of the formulas at recompute full, = MFU at none" \
  || bad "report HFU: $(grep -m1 HFU "$TMP/rep_full.txt")"
import json, sqlite3, sys
c = json.loads(sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind='start'").fetchone()[0])
L, d, T, V = c["n_layer"], c["d_model"], c["seq_len"], c["vocab_size"]
F = 6 * (12 * L * d * d + V * d) + 12 * L * d * T
R = 2 * 12 * L * d * d + 4 * L * d * T
full, none = (json.load(open(p)) for p in sys.argv[2:])
print(f"    recompute full: MFU {100*full['mfu']:.2f}%, HFU {100*full['hfu']:.2f}% (x{full['hfu']/full['mfu']:.4f}, formula x{(F+R)/F:.4f})")
assert abs(full["hfu"] / full["mfu"] - (F + R) / F) < 1e-9, (full, F, R)
assert none["hfu"] == none["mfu"], none
PY

# --- refusals: one clear line, exit 2 ------------------------------------------------------------
refuse() { # refuse NAME NP PATTERN flags...: exit 2 and the pattern in the output
  local name=$1 np=$2 pat=$3; shift 3
  set +e; run "$name" "$np" "$@"; local rc=$?; set -e
  [ $rc -eq 2 ] && grep -q "$pat" "$TMP/$name.log" && ok "$name refused (exit 2): $pat" \
    || bad "$name: rc $rc $(grep -m2 -i error "$TMP/$name.log")"
}
refuse no_dp 1 "zero = 3 with dp = 1" --zero 3
refuse no_ep 2 "zero=1 together with ep>1" --dp 2 --ep 2 --zero 1 $MOE
refuse bad_rc 1 "'recompute' must be none, selective or full" --recompute some
refuse bad_lim 1 "memory_limit '12Q' is not a size" --memory-limit 12Q
# the combinations the memory wall is not implemented with (train/trainer_setup.c check_memwall)
refuse rc_cp 2 "recompute = full with cp > 1 is not supported" --cp 2 --recompute full
refuse rc_sp 2 "recompute = selective with sp = 1 is not supported" --tp 2 --sp 1 --recompute selective
refuse z2_cp 2 "cp 2 needs zero = 0" --cp 2 --zero 2
refuse z3_sp 2 "sp = 1 needs zero = 0" --tp 2 --sp 1 --zero 3
refuse rc_il 2 "recompute = full with pp_schedule = interleaved is not supported" \
  --pp 2 --pp-schedule interleaved --virtual-stages 2 --microbatches 4 --recompute full
refuse rc_zb 2 "recompute = selective with pp_schedule = zb-h1 is not supported" \
  --pp 2 --pp-schedule zb-h1 --microbatches 4 --recompute selective
refuse z3_il 4 "zero = 3 with pp_schedule = interleaved is not supported" \
  --pp 2 --dp 2 --pp-schedule interleaved --virtual-stages 2 --microbatches 4 --zero 3
refuse z2_zb 4 "zero = 2 with pp_schedule = zb-h1 is not supported" \
  --pp 2 --dp 2 --pp-schedule zb-h1 --microbatches 4 --zero 2
# the budget with cp and sp: activations per rank, the CP shard's and sp's rows (< the whole's)
run bud_one 1 || bad "bud_one"
run bud_cp 2 --cp 2 || bad "bud_cp: $(tail -2 "$TMP/bud_cp.log")"
run bud_tp 2 --tp 2 || bad "bud_tp: $(tail -2 "$TMP/bud_tp.log")"
run bud_sp 2 --tp 2 --sp 1 || bad "bud_sp: $(tail -2 "$TMP/bud_sp.log")"
act() { # bytes of rank 0's predicted activations in run NAME's budget table
  /usr/bin/python3 - "$TMP/$1.log" <<'PY'
import re, sys
u = {'B': 1, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30}
for line in open(sys.argv[1], errors='replace'):
    m = re.search(r'rank 0:.*activations ([0-9.]+) ([KMG]?i?B)', line)
    if m:
        print(float(m.group(1)) * u[m.group(2)])
        break
else:
    print(-1)
PY
}
a1=$(act bud_one); ac=$(act bud_cp); at=$(act bud_tp); as=$(act bud_sp)
/usr/bin/python3 -c "import sys; a1,ac,at,asp=map(float,sys.argv[1:]); sys.exit(0 if 0 < ac < a1 and 0 < asp < at else 1)" "$a1" "$ac" "$at" "$as" \
  && ok "budget activations per rank: cp 2 $ac < cp 1 $a1 B, tp 2 sp $as < tp 2 $at B" \
  || bad "budget activations with cp/sp: one $a1 cp $ac tp $at sp $as"

finish memory
