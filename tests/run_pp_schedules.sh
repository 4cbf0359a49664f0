#!/usr/bin/env bash
# tests/run_pp_schedules.sh — the pipeline schedules that shrink the bubble (interleaved 1F1B,
# ZB-H1; parallel/pp.h) train the same model as one process and as 1F1B.
#
# 8 steps of a tiny 8-layer GPT under mpirun --oversubscribe:
#   * against one process (tests/reference/compare_runs.py: losses within 1e-5, parameters
#     within 1e-4 · max|p|; not bit-exact because the tied embedding's two gradient halves are
#     summed in another order, first stage + last stage by an all-reduce, as for 1F1B);
#   * against 1F1B of the same layout, bit-exact (--exact): every schedule runs, per stage and per
#     weight, the backwards in microbatch order, and ZB-H1's B then W is the whole backward's ops
#     on the same operands (model/model_wgrad.c), so the order of every sum is unchanged;
#   * layouts: interleaved v 2 at pp 2 (M 4) and pp 4 (M 4, 8 layers = 8 chunks), v 4 at pp 2;
#     zb-h1 at pp 2 (M 4), pp 4 (M 2 < P and M 8), an uneven hand split, and tp 2 x pp 2 x dp 2;
#     interleaved at tp 2 x pp 2 x dp 2;
#   * the peak activations in flight per stage (run.db, pp_idle events) equal each schedule's
#     bound (pp_slots_needed); the measured timeline has W spans for zb-h1 and 2·v·M forward
#     pairs for interleaved;
#   * the guard device gives the same bits; an interleaved checkpoint resumes straight and in one
#     process;
#   * bad input is one clear line: layers that v·p does not divide, M not a multiple of p,
#     virtual_stages without interleaved, zb-h1 or interleaved with MoE blocks.
set -euo pipefail
. tests/layout_lib.sh
layout_setup mt_pps
cat >> "$CONFIG" <<INI
n_layer = 8
n_head = 4
d_model = 32
global_batch = 16
eval_batches = 2
seed = 5
INI
run base4 1 --batch-size 4                          # 4 microbatches of 4
run base2 1 --batch-size 2                          # 8 microbatches of 2
run base8 1 --batch-size 8                          # 2 microbatches of 8
run pp2_1f1b 2 --pp 2 --microbatches 4
run pp4_1f1b 4 --pp 4 --microbatches 4
run pp4m8_1f1b 4 --pp 4 --microbatches 8
run pp4m2_1f1b 4 --pp 4 --microbatches 2

run pp2_il2 2 --pp 2 --microbatches 4 --pp-schedule interleaved --virtual-stages 2
check pp2_il2 base4
check pp2_il2 pp2_1f1b --exact
run pp2_il4 2 --pp 2 --microbatches 4 --pp-schedule interleaved --virtual-stages 4
check pp2_il4 pp2_1f1b --exact
run pp4_il2 4 --pp 4 --microbatches 4 --pp-schedule interleaved --virtual-stages 2
check pp4_il2 base4
check pp4_il2 pp4_1f1b --exact
run pp4m8_il2 4 --pp 4 --microbatches 8 --pp-schedule interleaved --virtual-stages 2
check pp4m8_il2 pp4m8_1f1b --exact

run pp2_zb 2 --pp 2 --microbatches 4 --pp-schedule zb-h1
check pp2_zb base4
check pp2_zb pp2_1f1b --exact
run pp4m8_zb 4 --pp 4 --microbatches 8 --pp-schedule zb-h1
check pp4m8_zb base2
check pp4m8_zb pp4m8_1f1b --exact
run pp4m2_zb 4 --pp 4 --microbatches 2 --pp-schedule zb-h1
check pp4m2_zb base8
check pp4m2_zb pp4m2_1f1b --exact
run pp2_zb_hand 2 --pp 2 --microbatches 4 --pp-schedule zb-h1 --pp-layers 3,5
check pp2_zb_hand base4

run 3d_1f1b 8 --tp 2 --pp 2 --dp 2 --microbatches 2
run 3d_zb 8 --tp 2 --pp 2 --dp 2 --microbatches 2 --pp-schedule zb-h1
check 3d_zb base4
check 3d_zb 3d_1f1b --exact
run 3d_il 8 --tp 2 --pp 2 --dp 2 --microbatches 2 --pp-schedule interleaved --virtual-stages 2
check 3d_il base4
check 3d_il 3d_1f1b --exact

# the guard device (PROT_NONE device memory: every host touch faults) runs the executor's staged
# sends and the split backward unchanged, bit for bit
run pp2_il2_guard 2 --pp 2 --microbatches 4 --pp-schedule interleaved --virtual-stages 2 --device guard
check pp2_il2_guard pp2_il2 --exact
run pp2_zb_guard 2 --pp 2 --microbatches 4 --pp-schedule zb-h1 --device guard
check pp2_zb_guard pp2_zb --exact

# checkpoints under interleaved chunks (a stage's file holds non-adjacent layers, by global name):
# stop at 4 + resume = straight, and the checkpoint resumes in one process
run il_ckpt 2 --pp 2 --microbatches 4 --pp-schedule interleaved --virtual-stages 2 --ckpt-every 4 --ckpt-tier0 0 --stop-after 4
run il_ckpt 2 --pp 2 --microbatches 4 --pp-schedule interleaved --virtual-stages 2 --ckpt-every 4 --ckpt-tier0 0
grep -q "resumed from step 4" "$TMP/il_ckpt.log" && check il_ckpt pp2_il2 --exact || bad "interleaved resume: $(tail -2 "$TMP/il_ckpt.log")"
cp -r "$TMP/il_ckpt" "$TMP/pp1_from_il"
run pp1_from_il 1 --batch-size 4 --steps 12 --ckpt-every 4 --ckpt-tier0 0
grep -q "resumed from step 8" "$TMP/pp1_from_il.log" && grep -q "done: 12 steps" "$TMP/pp1_from_il.log" \
  && ok "an interleaved checkpoint resumes in one process (resharded)" || bad "il -> pp1: $(tail -2 "$TMP/pp1_from_il.log")"

# peak activations in flight = the schedule's bound, per stage (pp_slots_needed, parallel/pp.c)
inflight() { # RUN EXPECTED(comma list per stage)
  /usr/bin/python3 - "$TMP/$1/run.db" "$2" <<'PY'
import json, sqlite3, sys
rows = [json.loads(d) for (d,) in sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind = 'pp_idle'")]
got = {}
for r in rows: got[r["stage"]] = max(got.get(r["stage"], 0), r["in_flight"])
want = [int(x) for x in sys.argv[2].split(",")]
assert [got[s] for s in range(len(want))] == want, (got, want)
print(",".join(str(got[s]) for s in range(len(want))))
PY
}
# 1f1b P 4 M 8: P-s; interleaved v 2 P 4 M 8: 2(P-s-1)+(v-1)P+1 (M = P: all v·M forwards warm
# up); zb-h1: min(M, P) on every stage
for spec in "pp4m8_1f1b 4,3,2,1" "pp4m8_il2 11,9,7,5" "pp4m8_zb 4,4,4,4" "pp4m2_zb 2,2,2,2" \
            "pp4_il2 8,8,8,8"; do
  set -- $spec
  if out=$(inflight "$1" "$2" 2>&1); then ok "$1: peak in flight per stage $out = the bound"
  else bad "$1: in flight: $out"; fi
done

# the measured timeline: zb-h1 logs W spans, interleaved 2 chunks x M forward pairs
/usr/bin/python3 - "$TMP/pp4m8_zb/run.db" "$TMP/pp4m8_il2/run.db" <<'PY' && ok "timeline: zb-h1 W spans after their B; interleaved v·M forward spans" || bad "timeline events"
import json, sqlite3, sys
def rows(p):
    return [json.loads(d) for (d,) in sqlite3.connect(p).execute(
        "SELECT detail FROM events WHERE kind = 'pp_timeline'")]
zb = rows(sys.argv[1])
assert zb and all(r["schedule"] == "zb-h1" and len(r["weight_ms"]) == 16 for r in zb)
for r in zb:
    b, w = r["backward_ms"], r["weight_ms"]
    assert all(w[2 * i] >= b[2 * i + 1] for i in range(8)), "a W before its B"
il = rows(sys.argv[2])
assert il and all(r["schedule"] == "interleaved" and r["chunks"] == 2 and
                  len(r["forward_ms"]) == 32 and "weight_ms" not in r for r in il)
PY

# bad input: one clear line, non-zero exit
refuse() { # NAME NP EXPECTED-TEXT FLAGS...
  local name=$1 np=$2 want=$3 rc; shift 3
  set +e
  $MPI -np "$np" $MT train --config "$CONFIG" --run-dir "$TMP/$name" "$@" > "$TMP/$name.out" 2>&1; rc=$?
  set -e
  if [ $rc -ne 0 ] && grep -q -- "$want" "$TMP/$name.out"; then ok "refused: $want"
  else bad "$name: rc $rc $(grep -m2 -i 'error\|minitrain:' "$TMP/$name.out")"; fi
}
refuse bad_div 2 "8 layers do not split into pp x virtual_stages = 2 x 3 = 6 equal chunks" \
  --pp 2 --microbatches 4 --pp-schedule interleaved --virtual-stages 3
refuse bad_m 4 "microbatches (2) must be a multiple of pp (4)" \
  --pp 4 --microbatches 2 --pp-schedule interleaved --virtual-stages 2
refuse bad_v 2 "virtual_stages = 2 needs pp_schedule = interleaved" \
  --pp 2 --microbatches 4 --virtual-stages 2
refuse bad_zb_moe 2 "pp_schedule = zb-h1 does not run mixture-of-experts blocks" \
  --pp 2 --microbatches 4 --pp-schedule zb-h1 --moe-every 2
refuse bad_sched 2 "'pp_schedule' must be 1f1b, gpipe, interleaved or zb-h1, got 'zb-v'" \
  --pp 2 --microbatches 4 --pp-schedule zb-v

finish pp_schedules
