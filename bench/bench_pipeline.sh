#!/usr/bin/env bash
# bench/bench_pipeline.sh — pipeline bubble measured vs predicted, and MoE vs dense throughput.
#
# (0) The schedules (parallel/pp.h) at P = 4, M = 8: 1F1B, interleaved (v 2) and ZB-H1, their
#     drivers run for real over MPI with passes of known cost (bench/bench_pp_sched.c: each pass
#     sleeps 100 ms, so the P ranks need no cores and the machine's load does not enter): idle
#     fraction per stage against the schedule's formula (pp_idle_formula, must be within 3
#     points) and peak activations in flight against its bound (pp_slots_needed, must be equal).
#     Then the same three schedules training the real 8-layer model: idle share per stage from
#     run.db (pp_idle; on a 2-core machine P = 4 time-shares the cores, so this share also holds
#     waiting for a core), peak in flight per stage, and the measured timeline picture of each
#     (report --svg: F, B and W boxes) written to $OUT (default: a temp dir, kept).
# (1) For P = 2 and 4 stages and M = 1..8 microbatches, train a 8-layer model a few steps with
#     the 1F1B schedule and read the idle share per stage (time in point-to-point waits / step
#     time, logged to run.db as pp_idle events); print its median next to the ideal bubble
#     (P-1)/(M+P-1). On a 2-core machine P=4 oversubscribes the cores, so there the measured share
#     also contains time-sharing; ranks yield the CPU while waiting (mpi_yield_when_idle).
# (2) tokens/s of a MoE model (every 2nd MLP with 4 experts, top-1) vs the dense model of equal
#     ACTIVE parameters (a top-1 expert has the dense MLP's shape), one process.
#
#   bash bench/bench_pipeline.sh            (after `make`, from the repository root)
set -euo pipefail
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none --mca mpi_yield_when_idle 1"
TMP=$(mktemp -d /tmp/mt_bpp_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
[ -f examples/data/shakespeare_byte/train_000.bin ] || \
  ./minitrain prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null
BASE="--config examples/shakespeare.ini --n-layer 8 --d-model 128 --n-head 4 --seq-len 64 --global-batch 16 --steps 8 --warmup-steps 1 --eval-every 0 --sample-tokens 0 --log-every 1 --threads 1"
OUT=${OUT:-$(mktemp -d /tmp/mt_bpp_svg_XXXXXX)}
mkdir -p "$OUT"
[ -x build/bench/bench_pp_sched ] || make -s build/bench/bench_pp_sched

printf "\npipeline schedules, P 4, M 8, passes of known cost (100 ms each of F, B, W)\n"
fail=0
for S in "1f1b" "interleaved --chunks 2" "zb-h1"; do
  $MPI -np 4 build/bench/bench_pp_sched --schedule $S --microbatches 8 2>&1 | grep -v "^---\|^Primary\|^a non-zero\|^mpirun\|^the job\|^ *Process\|^ *Exit\|^$" || fail=1
done
[ $fail = 0 ] && echo "every stage within 3 points of its formula, peaks equal to the bounds" \
  || echo "MISS: a stage off its formula by more than 3 points or off its bound"

printf "\nthe same schedules training the 8-layer model, P 4, M 8 (idle share median over steps > 2)\n"
printf "%-12s %-26s %-20s %-20s %s\n" schedule "idle per stage" "in flight per stage" "bound" picture
for S in "1f1b" "interleaved --virtual-stages 2" "zb-h1"; do
  name=${S%% *}
  $MPI -np 4 ./minitrain train $BASE --pp 4 --microbatches 8 --pp-schedule $S --run-dir "$TMP/s_$name" > "$TMP/s_$name.log" 2>&1
  ./minitrain report --run "$TMP/s_$name" --svg "$OUT/$name.svg" > /dev/null
  /usr/bin/python3 - "$TMP/s_$name/run.db" "$name" "$OUT/$name-pipeline.svg" <<'PY'
import json, sqlite3, statistics, sys
rows = [json.loads(d) for (d,) in sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind = 'pp_idle'")]
P, M, v = 4, 8, 2 if sys.argv[2] == "interleaved" else 1
idle = [statistics.median(r["idle_share"] for r in rows if r["stage"] == s and r["step"] > 2) for s in range(P)]
peak = [max(r["in_flight"] for r in rows if r["stage"] == s) for s in range(P)]
bound = {"1f1b": [min(M, P - s) for s in range(P)], "zb-h1": [min(M, P)] * P,
         "interleaved": [min(2 * (P - s - 1) + (v - 1) * P + 1, v * M) for s in range(P)]}[sys.argv[2]]
print(f"{sys.argv[2]:12s} {' '.join(f'{100 * x:5.1f}%' for x in idle):26s} "
      f"{','.join(map(str, peak)):20s} {','.join(map(str, bound)):20s} {sys.argv[3]}")
PY
done

printf "\npipeline bubble, 1F1B, 8 layers, global batch 16\n"
printf "%4s %4s %12s %12s\n" P M predicted measured
for P in 2 4; do
  for M in 1 2 4 8; do
    $MPI -np $P ./minitrain train $BASE --pp $P --microbatches $M --run-dir "$TMP/p${P}m${M}" > "$TMP/p${P}m${M}.log" 2>&1
    meas=$(/usr/bin/python3 - "$TMP/p${P}m${M}/run.db" <<'PY'
import json, sqlite3, statistics, sys
rows = [json.loads(d) for (d,) in sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind = 'pp_idle'")]
rows = [r for r in rows if r["step"] > 2]            # skip warm-up steps
print(f"{100 * statistics.median(r['idle_share'] for r in rows):.1f}%")
PY
)
    pred=$(awk "BEGIN{printf \"%.1f%%\", 100*($P-1)/($M+$P-1)}")
    printf "%4d %4d %12s %12s\n" $P $M "$pred" "$meas"
  done
done

printf "\nMoE vs dense of equal active parameters (one process, 2 threads)\n"
MOE="--config examples/shakespeare.ini --steps 30 --warmup-steps 2 --eval-every 0 --sample-tokens 0 --log-every 1 --threads 2 --batch-size 8"
./minitrain train $MOE --run-dir "$TMP/dense" > "$TMP/dense.log"
./minitrain train $MOE --run-dir "$TMP/moe" --moe-every 2 --n-experts 4 --top-k 1 --capacity-factor 0 > "$TMP/moe.log"
/usr/bin/python3 - "$TMP/dense/run.db" "$TMP/moe/run.db" <<'PY'
import sqlite3, statistics, sys
def tps(p):
    v = [r[0] for r in sqlite3.connect(p).execute(
        "SELECT tokens_per_s FROM metrics WHERE tokens_per_s IS NOT NULL AND step > 5")]
    return statistics.median(v)
d, m = tps(sys.argv[1]), tps(sys.argv[2])
print(f"{'dense':28s} {d:10.0f} tokens/s   1.00")
print(f"{'MoE (4 experts, top-1)':28s} {m:10.0f} tokens/s   {m / d:.2f}")
PY
