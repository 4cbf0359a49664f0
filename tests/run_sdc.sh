#!/usr/bin/env bash
# tests/run_sdc.sh — silent-data-corruption checks end to end (sched/sdc.h), on a tiny model:
#   - a clean dp 4 run with --sdc-check-every 5 finds no mismatch, prints the check's cost, and
#     its checks leave the parameters exactly as a run without them (dp 2 reference);
#   - dp 2 under the supervisor, bitflip@step=27 on rank 1: caught by the check of step 30 (a
#     1-against-1 tie naming ranks 0 and 1), failure kind sdc, the synchronous checkpoint of step
#     30 (saved after the flip) is skipped, the relaunch resumes from step 20 and verifies it
#     against the check of step 20, and the final parameters are bit-identical to the reference;
#   - dp 4 under the supervisor with a fake hostfile, bitflip on rank 2: the verdict names rank 2
#     alone, the failure is blamed on rank 2 and its host n2, and the job ends bit-identical;
#   - user errors: --sdc-check-every with zero 3, a bitflip on a tensor that does not exist;
#   - minitrain doctor: a healthy --json baseline, a machine made 5x slower
#     (MINITRAIN_DOCTOR_SLOWDOWN) fails against it with one line per failed check, the config's
#     tier roots written, the pair tests and the record under mpirun -np 2, a bad baseline.
# Needs mpirun (else skip). About 1 minute on the loaded 2-core machine.
set -euo pipefail
PY=/usr/bin/python3
. tests/lib.sh
tmp_dir mt_sdc
export MINITRAIN_SHM_DIR="$TMP/shm"
cp ./minitrain "$TMP/minitrain" # relaunches exec the same binary even if ./minitrain is rebuilt
MT=$TMP/minitrain
if ! command -v mpirun >/dev/null 2>&1; then
  echo "  skip no mpirun on PATH"
  finish sdc
  exit $?
fi
M=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none)

tiny_corpus 200000 "$TMP/byte"
# ckpt_async = 0: a save commits before the step's later hooks, so the checkpoint of step 30 is
# committed (and suspect) when the check of step 30 finds the flip of step 27
cat > "$TMP/tiny.ini" <<INI
[data]
data = $TMP/byte
[model]
n_layer = 2
n_head = 2
d_model = 64
seq_len = 64
[train]
batch_size = 2
global_batch = 8
steps = 40
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
[run]
threads = 1
log_every = 10
eval_every = 40
eval_batches = 2
sample_every = 0
sample_tokens = 0
ckpt_every = 10
ckpt_async = 0
INI
SUP=("$MT" run --heartbeat-timeout 120 --backoff 0.1:0.5 --grace 2 --max-restarts 3)
json_get() { "$MT" report --run "$1" --json | $PY -c "import json,sys; r=json.load(sys.stdin); print($2)"; }
sql() { $PY -c "import sqlite3,sys; print('\n'.join('|'.join(str(c) for c in r) for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2])))" "$1/run.db" "$2"; }

# --- references -----------------------------------------------------------------------------------
set +e
"${M[@]}" -np 2 "$MT" train --config "$TMP/tiny.ini" --dp 2 --run-dir "$TMP/ref2" > "$TMP/ref2.log" 2>&1
rc2=$?
"${M[@]}" -np 4 "$MT" train --config "$TMP/tiny.ini" --dp 4 --run-dir "$TMP/ref4" \
  --sdc-check-every 5 > "$TMP/ref4.log" 2>&1
rc4=$?
set -e
check "reference dp 2 (no checks) completes" test $rc2 = 0 -a -f "$TMP/ref2/model.safetensors"
if [ $rc4 = 0 ] && grep -q "sdc: 8 checks, none found a mismatch" "$TMP/ref4.log" \
   && [ "$(sql "$TMP/ref4" "SELECT COUNT(*) FROM events WHERE kind = 'sdc'")" = 0 ] \
   && [ "$(sql "$TMP/ref4" "SELECT COUNT(*) FROM events WHERE kind = 'sdc_ok'")" = 9 ]; then
  ok "clean dp 4 run with --sdc-check-every 5: 8 checks (steps 5..40, and one at start-up) agree, no sdc event"
else
  bad "clean dp 4 run (exit $rc4): $(grep 'sdc\|error' "$TMP/ref4.log" | tail -2)"
fi
cost=$(grep -o "sdc: 8 checks.*" "$TMP/ref4.log" || true)
echo "  cost: $cost"
check "the check's cost is printed in ms and % of a step" \
  grep -Eq "[0-9.]+ ms each = [0-9.]+% of a [0-9.]+ ms step" <<<"$cost"

# --- dp 2: a tie, resumed before the flip -----------------------------------------------------------
set +e
"${SUP[@]}" -- "${M[@]}" -np 2 "$MT" train --config "$TMP/tiny.ini" --dp 2 --run-dir "$TMP/dp2" \
  --sdc-check-every 5 --fault bitflip@step=27,rank=1 > "$TMP/dp2.log" 2>&1
rc=$?
set -e
check "dp 2: the supervised job completes (exit $rc)" [ $rc = 0 ]
got=$(json_get "$TMP/dp2" "r['failures_by_kind'].get('sdc', 0), r['restarts'], r['status']" || true)
check "dp 2: one failure of kind sdc, one restart, completed (got: $got)" [ "$got" = "1 1 completed" ]
ev=$(sql "$TMP/dp2" "SELECT json_extract(detail,'\$.step'), json_extract(detail,'\$.last_good'), json_extract(detail,'\$.blame'), json_extract(detail,'\$.tie') FROM events WHERE kind = 'sdc'")
check "dp 2: caught by the check of step 30, last agreeing check 25, ranks 0,1 named as a tie (got: $ev)" \
  [ "$ev" = "30|25|[0,1]|1" ]
check "dp 2: the checkpoint of step 30 (after the flip) is skipped: resumed from step 20" \
  grep -q "resuming from 20" "$TMP/dp2.log"
check "dp 2: resumed from step 20" grep -q "resumed from step 20" "$TMP/dp2.log"
check "dp 2: the resumed parameters verified against the check of step 20" \
  grep -q "sdc: resumed step 20 verified" "$TMP/dp2.log"
check "dp 2: final parameters bit-identical to the unfaulted run without checks" \
  same_tensors "$TMP/ref2/model.safetensors" "$TMP/dp2/model.safetensors"

# --- dp 4: the odd rank out, its host blamed -----------------------------------------------------------
printf 'n0 slots=1\nn1 slots=1\nn2 slots=1\nn3 slots=1\n' > "$TMP/hosts"
set +e
"${SUP[@]}" --hostfile "$TMP/hosts" -- "${M[@]}" -np 4 "$MT" train --config "$TMP/tiny.ini" \
  --dp 4 --run-dir "$TMP/dp4" --sdc-check-every 5 --fault bitflip@step=27,rank=2,bit=3 \
  > "$TMP/dp4.log" 2>&1
rc=$?
set -e
check "dp 4: the supervised job completes (exit $rc)" [ $rc = 0 ]
ev=$(sql "$TMP/dp4" "SELECT json_extract(detail,'\$.step'), json_extract(detail,'\$.blame'), json_extract(detail,'\$.tie') FROM events WHERE kind = 'sdc'")
check "dp 4: the check of step 30 names rank 2 alone, no tie (got: $ev)" [ "$ev" = "30|[2]|0" ]
fl=$(sql "$TMP/dp4" "SELECT rank, json_extract(detail,'\$.kind'), json_extract(detail,'\$.host') FROM events WHERE kind = 'failure'")
check "dp 4: the failure is sdc, blamed on rank 2 and its host n2 (got: $fl)" [ "$fl" = "2|sdc|n2" ]
check "dp 4: the verdict line names rank 2 against ranks 0,1,3" \
  grep -q "rank 2 (tp 0 pp 0) holds parameters that differ from their 3 replicas (ranks 0,1,3" "$TMP/dp4.log"
check "dp 4: final parameters bit-identical to the clean dp 4 run" \
  same_tensors "$TMP/ref4/model.safetensors" "$TMP/dp4/model.safetensors"

# --- user errors --------------------------------------------------------------------------------------
ONE_ERROR_LINE=1 expect_exit 2 "--sdc-check-every with zero 3: one line, exit 2" \
  "$MT" train --config "$TMP/tiny.ini" --run-dir "$TMP/bad1" --sdc-check-every 5 --zero 3
grep -q "sdc_check_every" "$TMP/err" || bad "the zero 3 error does not name sdc_check_every"
expect_exit 2 "bitflip on a tensor that does not exist: exit 2" \
  "$MT" train --config "$TMP/tiny.ini" --run-dir "$TMP/bad2" --fault bitflip@step=3,tensor=nope
check "  ... naming the tensor" grep -q "holds no tensor 'nope'" "$TMP/err"
# --- minitrain doctor ------------------------------------------------------------------------------
DOC=("$MT" doctor --probe-s 0.5 --threads 1)
{ cat "$TMP/tiny.ini"; printf '[run]\nrun_dir = %s\n' "$TMP/docrun"; } > "$TMP/doc.ini" # tier 1 in $TMP
set +e
"${DOC[@]}" --json > "$TMP/healthy.json" 2>"$TMP/doc0.err"; rc0=$?
MINITRAIN_DOCTOR_SLOWDOWN=5 "${DOC[@]}" --baseline "$TMP/healthy.json" --config "$TMP/doc.ini" \
  > "$TMP/doc1.out" 2>"$TMP/doc1.err"; rc1=$?
mkdir -p "$TMP/fleet/a"
"${M[@]}" -np 2 "$MT" doctor --probe-s 0.3 --threads 1 --record "$TMP/fleet/a" > "$TMP/doc2.out" 2>&1; rc2=$?
set -e
check "doctor --json on this machine passes and gives an sgemm figure (exit $rc0)" \
  $PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['ok'] and d['sgemm_gflops'] > 0" "$TMP/healthy.json"
check "doctor: a machine 5x slower than its baseline fails (exit $rc1)" test "$rc1" = 1
check "  ... one stderr line per failed check, sgemm among them" \
  test "$(grep -c 'minitrain: doctor: FAIL' "$TMP/doc1.err")" = "$(grep -c '^  FAIL' "$TMP/doc1.out")" -a \
  -n "$(grep 'FAIL sgemm' "$TMP/doc1.err")"
check "  ... while the disk checks of the config's tier roots pass" \
  grep -q "ok   disk tier 1 .*written + fsync" "$TMP/doc1.out"
check "doctor under mpirun -np 2: ping-pong and all-reduce of the pair (exit $rc2)" \
  grep -q "allreduce 0-1: .* GB/s" "$TMP/doc2.out"
check "  ... recorded as a doctor event" \
  test "$(sql "$TMP/fleet/a" "SELECT COUNT(*) FROM events WHERE kind = 'doctor'")" = 1
expect_exit 2 "doctor with an unreadable baseline: exit 2" "$MT" doctor --baseline "$TMP/nope.json"
finish sdc
