#!/usr/bin/env bash
# tests/run_cp.sh — the sequence dimension: context parallelism (cp, ring attention) and
# sequence parallelism (sp, inside the TP group) train the same model as one process.
#
# 1. tests/cp_ring_driver.c under mpirun with cp = 1, 2, 4: each rank's rows of the output,
#    probabilities and dq/dk/dv against ops_cpu_attention_forward/backward on the whole
#    sequence, and central finite differences through the ring (tolerances in the driver).
# 2. Training parity: 8 steps of a tiny GPT (seq_len 32) under cp 2 and cp 4, alone and with
#    tp 2, pp 2 and dp 2 (8 ranks for cp 4 with one of them), against one process: per-step losses within 1e-5 relative and final
#    parameters within 1e-4 · max|p| per tensor (tests/reference/compare_runs.py). Not bit for
#    bit: the online softmax merges key blocks in another order than the one-pass softmax, and
#    gradients are partial sums per rank added over the dp x cp group. The mesh line names the
#    ring; activation memory per rank is exactly 1/cp; the ring volume counted per step equals
#    the formula; a cp 2 run stopped at step 4 resumes bit for bit, and resumes in one process
#    within the tolerance; bad input (2·cp not dividing seq_len, cp with MoE) exits 2 with one
#    line.
# 3. sp = 1 with tp 2, alone and with pp 2 and dp 2, against the same one process (same
#    tolerances: the LayerNorm and embedding gradients are summed from per-rank halves); the
#    LayerNorm/embedding gradients are identical across the TP group after their reduction
#    (MINITRAIN_TP_CHECK spread 0); activation memory per rank below tp 2 without sp; on the
#    guard device sp trains bit for bit like cpu; sp without tp > 1, and cp on a device other
#    than cpu, refused.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make -s "$BUILD/libminitrain.a" >/dev/null
. tests/layout_lib.sh
blas_env
BIN="$BUILD/tests/cp_ring_driver"
mpi_driver tests/cp_ring_driver.c "$BIN"
for np in 1 2 4; do
  if out=$(OMP_NUM_THREADS=1 timeout 120 $MPI -np $np "$BIN" 2>&1); then ok "ring attention: $out"
  else bad "ring attention cp $np: $(echo "$out" | tail -3)"; fi
done

layout_setup mt_cp
cat >> "$CONFIG" <<INI
n_layer = 2
n_head = 4
d_model = 32
batch_size = 2
global_batch = 8
eval_batches = 2
seed = 11
INI
run base 1
for layout in "cp2:2:--cp 2" "cp4:4:--cp 4" "cp2_tp2:4:--cp 2 --tp 2" "cp2_pp2:4:--cp 2 --pp 2" \
              "cp2_dp2:4:--cp 2 --dp 2" "cp4_tp2:8:--cp 4 --tp 2" "cp4_pp2:8:--cp 4 --pp 2" \
              "cp4_dp2:8:--cp 4 --dp 2"; do
  IFS=: read -r name np flags <<< "$layout"
  run "$name" "$np" $flags || bad "$name: $(tail -2 "$TMP/$name.log" | cut -c1-200)"
  check "$name" base
done
# activation memory per rank: every activation is (rows of this rank) x width, attention's
# (rows x all keys), so cp ranks hold exactly 1/cp of one process's
grep -q "activation memory per rank .*(0.500x)" "$TMP/cp2.log" && grep -q "(0.250x)" "$TMP/cp4.log" \
  && ok "activation memory per rank: 1/2 at cp 2, 1/4 at cp 4" \
  || bad "activation memory: $(grep -h "activation memory" "$TMP/cp2.log" "$TMP/cp4.log")"
# the ring volume each step equals the formula (floats counted by cp_ring_shift)
for name in cp2 cp4 cp2_tp2; do
  line=$(grep -m1 "cp ring: step 1 sent" "$TMP/$name.log" || true)
  sent=$(sed -n 's/.*MiB per rank (\([0-9]*\) floats).*/\1/p' <<< "$line")
  want=$(sed -n 's/.*MiB (\([0-9]*\) floats)$/\1/p' <<< "$line")
  [ -n "$sent" ] && [ "$sent" = "$want" ] && [ "$sent" -gt 0 ] \
    && ok "$name: ring volume $sent floats per rank per step = formula" \
    || bad "$name: ring volume '$line'"
done
# checkpoints: CP ranks hold copies, one writes; resume is bit for bit, and a cp 2 checkpoint
# resumes in one process within the parity tolerance
CK="--ckpt-every 2 --ckpt-keep 10 --ckpt-tier0 0"
run cp2_full 2 --cp 2 $CK
run cp2_stop 2 --cp 2 $CK --stop-after 4 && run cp2_stop 2 --cp 2 $CK
grep -q "resumed from step 4" "$TMP/cp2_stop.log" && check cp2_stop cp2_full --exact || bad "cp 2 resume: $(tail -2 "$TMP/cp2_stop.log")"
run cp2_to1 2 --cp 2 $CK --stop-after 4 && run cp2_to1 1 $CK
grep -q "resumed from step 4" "$TMP/cp2_to1.log" && check cp2_to1 base || bad "cp 2 -> 1 process resume"
grep -q "cp ring \[0,2\]" "$TMP/cp2_tp2.log" && ok "mesh: tp fastest, then the cp ring (rank 0's ring is [0,2] at tp 2)" \
  || bad "mesh line: $(grep -m2 "rank 0:" "$TMP/cp2_tp2.log")"

# bad input: one clear line, exit 2, before any work
set +e
$MPI -np 4 $MT train --config "$CONFIG" --run-dir "$TMP/bad1" --cp 4 --seq-len 20 > "$TMP/bad1.out" 2>&1; rc1=$?
$MPI -np 2 $MT train --config "$CONFIG" --run-dir "$TMP/bad2" --cp 2 --moe-every 2 > "$TMP/bad2.out" 2>&1; rc2=$?
$MPI -np 3 $MT train --config "$CONFIG" --run-dir "$TMP/bad3" --cp 2 > "$TMP/bad3.out" 2>&1; rc3=$?
set -e
[ $rc1 = 2 ] && grep -q "cp 4 must divide seq_len/2 (seq_len 20)" "$TMP/bad1.out" \
  && ok "cp 4 with seq_len 20 refused" || bad "cp 4 seq_len 20: rc $rc1 $(head -3 "$TMP/bad1.out")"
[ $rc2 = 2 ] && grep -q "cp 2 needs a dense model" "$TMP/bad2.out" \
  && ok "cp with a MoE model refused" || bad "cp moe: rc $rc2 $(head -3 "$TMP/bad2.out")"
[ $rc3 = 2 ] && grep -q "world size 3 is not divisible by tp 1 x cp 2 x pp 1" "$TMP/bad3.out" \
  && ok "world 3 for cp 2 refused" || bad "cp world 3: rc $rc3 $(head -3 "$TMP/bad3.out")"

# sequence parallelism inside the TP group
for layout in "tp2_sp:2:--tp 2 --sp 1" "tp2_sp_pp2:4:--tp 2 --sp 1 --pp 2" "tp2_sp_dp2:4:--tp 2 --sp 1 --dp 2"; do
  IFS=: read -r name np flags <<< "$layout"
  run "$name" "$np" $flags || bad "$name: $(tail -2 "$TMP/$name.log" | cut -c1-200)"
  check "$name" base
done
ratio=$(sed -n 's/.*sequence parallel: .*(\([0-9.]*\)x)/\1/p' "$TMP/tp2_sp.log" | head -1)
/usr/bin/python3 -c "import sys; r = float(sys.argv[1]); assert 0.3 < r < 0.95, r" "${ratio:-0}" \
  && ok "sp: activation memory per rank ${ratio}x of tp 2 without sp" || bad "sp memory ratio '$ratio'"
MINITRAIN_TP_CHECK=1 run spcheck 2 --tp 2 --sp 1 --steps 3
spread=$(grep -o "by at most [0-9.e+-]*" "$TMP/spcheck.log" | awk '{print $4}' | sort -g | tail -1)
[ -n "$spread" ] && [ "$spread" = 0 ] && ok "sp: replicated gradients identical across TP ranks after the sp reduction" \
  || bad "sp TP replica spread '$spread'"
# the guard device (every model buffer PROT_NONE outside the ops, docs/gpu.md): sp's collectives
# and permutes touch device memory only through comm/ops, so it trains bit for bit like cpu
MINITRAIN_DEVICE=guard run tp2_sp_guard 2 --tp 2 --sp 1 || bad "sp on guard: $(tail -2 "$TMP/tp2_sp_guard.log")"
check tp2_sp_guard tp2_sp --exact
set +e
MINITRAIN_DEVICE=guard $MPI -np 2 $MT train --config "$CONFIG" --run-dir "$TMP/bad5" --cp 2 > "$TMP/bad5.out" 2>&1; rc5=$?
$MPI -np 2 $MT train --config "$CONFIG" --run-dir "$TMP/bad4" --dp 2 --sp 1 > "$TMP/bad4.out" 2>&1; rc4=$?
set -e
[ $rc4 = 2 ] && grep -q "sp = 1 needs tp > 1" "$TMP/bad4.out" && ok "sp without tp > 1 refused" \
  || bad "sp tp 1: rc $rc4 $(head -3 "$TMP/bad4.out")"
[ $rc5 = 2 ] && grep -q "cp 2 needs device = cpu" "$TMP/bad5.out" && ok "cp on a device other than cpu refused" \
  || bad "cp guard: rc $rc5 $(head -3 "$TMP/bad5.out")"
finish "cp"
