#!/usr/bin/env bash
# tests/run_resilience.sh — the restart loop end to end, on a tiny model (one process, 1 thread):
#   - kill, hang, nan, exit and corrupt-ckpt faults each lead to a restart (the failure kind is
#     in run.db) and a completed run whose final parameters are BIT-identical to an unfaulted
#     run's (resumes are exact; corrupt-ckpt must make resume skip the damaged step);
#   - more failures than --max-restarts -> non-zero exit with a clear message;
#   - a clean supervised run -> exit 0 and ETTR close to 1 (> 0.8: see the comment there).
#   - --fault-mtbf (random kills), cordoning a fake host, and a straggler on 2 ranks (mpirun).
# Needs exact checkpoint resume (train/checkpoint.c). Runs from the repository root in ~60 s.
set -euo pipefail
PY=/usr/bin/python3
. tests/lib.sh
tmp_dir mt_resil
export MINITRAIN_SHM_DIR="$TMP/shm" # tier-0 checkpoints of this test stay in $TMP
# a private copy: every relaunch must exec the same binary even if ./minitrain is rebuilt meanwhile
cp ./minitrain "$TMP/minitrain"
MT=$TMP/minitrain

tiny_corpus 200000 "$TMP/byte"
cat > "$TMP/tiny.ini" <<INI
[data]
data = $TMP/byte
[model]
n_layer = 2
n_head = 2
d_model = 64
seq_len = 64
[train]
batch_size = 8
global_batch = 8
steps = 60
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
[run]
threads = 1
log_every = 20
eval_every = 30
eval_batches = 2
sample_every = 0
sample_tokens = 0
ckpt_every = 10
INI
source tests/timing_lib.sh

# json_get DIR EXPR: evaluate a Python expression on `report --json` (bound to r)
json_get() {
  $MT report --run "$1" --json | $PY -c "import json,sys; r=json.load(sys.stdin); print($2)"
}

# --- the unfaulted reference ---------------------------------------------------------------------
mt_timed REF_S $MT train --config "$TMP/tiny.ini" --run-dir "$TMP/ref" > "$TMP/ref.log" 2>&1 || true
[ -f "$TMP/ref/model.safetensors" ] && ok "unfaulted reference run (${REF_S} s)" || bad "reference run"
# --heartbeat-timeout: the hang scenario waits it out, so it must be short, but a healthy run
# must never go that long without a heartbeat (start-up, a save, an eval). Its longest quiet gap
# is shorter than its whole wall time, so 3 x the reference run's wall time (at least 3 s) holds
# however loaded the machine is; a fixed 3 s flaked (a false "hang" under load, two hang
# failures instead of one). The other runs get a limit they never reach.
HB_HANG=$(mt_scaled 3 3 "$REF_S")
SUP=($MT run --heartbeat-timeout "$(mt_scaled 60 10 "$REF_S")" --backoff 0.1:0.5 --grace 2)

# --- one restart per fault kind --------------------------------------------------------------
# scenario NAME KIND FAULTS...: supervised run with the faults; expects exit 0, a failure of KIND,
# at least one restart, and parameters equal to the reference
scenario() {
  local name=$1 kind=$2; shift 2
  local faults=()
  for f in "$@"; do faults+=(--fault "$f"); done
  set +e
  local hb=(); [ "$kind" = hang ] && hb=(--heartbeat-timeout "$HB_HANG")
  "${SUP[@]}" "${hb[@]}" --max-restarts 3 -- $MT train --config "$TMP/tiny.ini" --run-dir "$TMP/$name" \
    "${faults[@]}" > "$TMP/$name.log" 2>&1
  local rc=$?
  set -e
  if [ $rc != 0 ]; then bad "$name: supervisor exit $rc: $(grep 'minitrain' "$TMP/$name.log" | tail -3)"; return; fi
  local got
  got=$(json_get "$TMP/$name" "r['failures_by_kind'].get('$kind', 0), r['restarts'], r['status']")
  if [ "$got" != "1 1 completed" ]; then bad "$name: (failures of kind $kind, restarts, status) = $got"; return; fi
  if ! grep -q "resumed from step" "$TMP/$name.log"; then
    bad "$name: the relaunch did not resume from a checkpoint (is exact resume in? see train/checkpoint.c)"; return
  fi
  if same_params "$TMP/$name" "$TMP/ref" 2> "$TMP/$name.cmp"; then
    ok "$name: detected as $kind, restarted once, final parameters equal the unfaulted run's"
  else
    bad "$name: final parameters differ from the unfaulted run's: $(tail -1 "$TMP/$name.cmp")"
  fi
}
scenario kill  crash     "kill@step=25"
scenario exit  crash     "exit@step=25,code=1"
scenario nan   nonfinite "nan@step=25"
scenario hang  hang      "hang@step=25"
# corrupt-ckpt damages step 30 in every tier, then (kill=1) kills the rank: the resume must skip it
scenario corrupt crash   "corrupt-ckpt@step=30,kill=1"
if [ -f "$TMP/corrupt/run.db" ]; then
  $PY - "$TMP/corrupt/run.db" <<'PY' && ok "corrupt-ckpt: resume skipped the damaged step 30 and loaded step 20" || bad "corrupt-ckpt: resume did not fall back past the damaged checkpoint"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
skips = [json.loads(d) for (d,) in db.execute("SELECT detail FROM events WHERE kind='ckpt_skip'")]
resumes = [json.loads(d)["step"] for (d,) in db.execute("SELECT detail FROM events WHERE kind='resume'")]
faults = [json.loads(d) for (d,) in db.execute("SELECT detail FROM events WHERE kind='fault'")]
assert any(f["kind"] == "corrupt-ckpt" for f in faults), faults
assert any(s.get("step") == 30 for s in skips), skips
assert resumes == [20], resumes
PY
fi
# faults fire once: the record names each, and the kill scenario logged exactly one kill
[ "$(grep -c . "$TMP/kill/faults_fired")" = 1 ] && ok "a fired fault is recorded once and not re-armed" \
  || bad "faults_fired: $(cat "$TMP/kill/faults_fired")"

# --- Poisson failures from the supervisor: random ranks killed, still the same model ----------------
# Seed 21 draws 0.031 x MTBF for the first attempt (a kill at its first training step) and
# 1.145 x MTBF for the second, longer than the whole job: one kill. The MTBF is 2 x the reference
# run's wall time (at least 3 s): a fixed 3 s was shorter than the job itself on a loaded machine,
# where every attempt was killed before it finished (31 kills, gave up).
MTBF=$(mt_scaled 3 2 "$REF_S")
set +e
"${SUP[@]}" --max-restarts 30 --fault-mtbf "$MTBF" --seed 21 -- $MT train --config "$TMP/tiny.ini" \
  --run-dir "$TMP/mtbf" > "$TMP/mtbf.log" 2>&1
rc=$?
set -e
kills=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT COUNT(*) FROM events WHERE kind='mtbf_kill'\").fetchone()[0])" "$TMP/mtbf/run.db" 2>/dev/null || echo 0)
if [ $rc = 0 ] && [ "$kills" -ge 1 ] && same_params "$TMP/mtbf" "$TMP/ref" 2>/dev/null; then
  ok "--fault-mtbf $MTBF s: $kills random kill(s), job completed with the unfaulted parameters"
else
  bad "--fault-mtbf: exit $rc, $kills kills: $(grep 'minitrain' "$TMP/mtbf.log" | tail -2)"
fi

# --- cordon: a (fake) host blamed for two failures is left out of the next launch ---------------
printf 'node-a slots=1\nnode-b slots=1\n' > "$TMP/hosts"
set +e
"${SUP[@]}" --max-restarts 3 --hostfile "$TMP/hosts" -- $MT train --config "$TMP/tiny.ini" \
  --run-dir "$TMP/cordon" --fault exit@step=5,code=1 --fault exit@step=15,code=1 > "$TMP/cordon.log" 2>&1
rc=$?
set -e
if [ $rc = 0 ] && grep -q "cordoning host node-a" "$TMP/cordon.log" && ! grep -q "^node-a" "$TMP/cordon/hostfile.active" \
   && grep -q "^node-b" "$TMP/cordon/hostfile.active"; then
  ok "cordon: node-a blamed twice, left out of hostfile.active; job completed"
else
  bad "cordon (exit $rc): $(grep 'cordon\|minitrain: error' "$TMP/cordon.log" | tail -2)"
fi

# --- a straggler (2 ranks, data parallel): detected from busy time, evicted, job completes. K = 3
# and W = 8 because 2 ranks on 2 shared cores see descheduling noise of ~3x for a few steps; the
# injected straggler runs at ~12x, far from that noise, so the verdict does not depend on load -
if command -v mpirun >/dev/null 2>&1; then
  set +e
  "${SUP[@]}" --straggler-factor 3 --straggler-steps 8 --evict-stragglers -- mpirun --oversubscribe --allow-run-as-root \
    --mca btl_vader_single_copy_mechanism none -np 2 $MT train --config "$TMP/tiny.ini" --dp 2 \
    --global-batch 16 --run-dir "$TMP/slow" --fault slow@rank=1,factor=12 > "$TMP/slow.log" 2>&1
  rc=$?
  set -e
  got=$(json_get "$TMP/slow" "r['failures_by_kind'].get('straggler', 0), r['status']" 2>/dev/null || echo none)
  if [ $rc = 0 ] && [ "$got" = "1 completed" ] && grep -q "rank 1 is a straggler" "$TMP/slow.log"; then
    ok "straggler: rank 1 (slow x12) detected from its busy time, evicted once, job completed"
  else
    bad "straggler (exit $rc, $got): $(grep 'minitrain' "$TMP/slow.log" | tail -2)"
  fi
fi

# --- giving up ---------------------------------------------------------------------------------
set +e
"${SUP[@]}" --max-restarts 1 -- $MT train --config "$TMP/tiny.ini" --run-dir "$TMP/giveup" \
  --fault exit@step=5,code=1 --fault exit@step=15,code=1 > "$TMP/giveup.log" 2>&1
rc=$?
set -e
if [ $rc != 0 ] && grep -q "minitrain: error: run: giving up: 2 failures within .* exceeds --max-restarts 1" "$TMP/giveup.log"; then
  ok "more failures than --max-restarts: exit $rc with a clear message"
else
  bad "give up (exit $rc): $(grep minitrain "$TMP/giveup.log" | tail -2)"
fi
set +e
"${SUP[@]}" -- $MT train --config "$TMP/tiny.ini" --run-dir "$TMP/usage" --n-layer 0 > "$TMP/usage.log" 2>&1
rc=$?
set -e
[ $rc = 1 ] && grep -q "usage error" "$TMP/usage.log" && ! grep -q "attempt 2" "$TMP/usage.log" \
  && ok "a usage error of the launch is not retried" || bad "usage error (exit $rc)"

# --- a clean run: ETTR close to 1 ----------------------------------------------------------------
# At this scale a fixed ~0.8 s goes to process start-up (exec, data, and the 0.5 s sgemm probe
# that MFU is measured against) plus the final eval and save; 900 steps of ~12 ms make that
# ~10% of the wall time (more when other jobs share the cores), so ETTR > 0.8. On a real job
# start-up is amortised over hours.
set +e
"${SUP[@]}" -- $MT train --config "$TMP/tiny.ini" --run-dir "$TMP/clean" --steps 900 \
  --eval-every 0 --ckpt-every 300 > "$TMP/clean.log" 2>&1
rc=$?
set -e
ettr=$(json_get "$TMP/clean" "r['ettr']" 2>/dev/null || echo none)
if [ $rc = 0 ] && $PY -c "import sys; sys.exit(0 if float('$ettr') > 0.8 else 1)" 2>/dev/null; then
  ok "clean run: exit 0, ETTR $ettr"
else
  bad "clean run: exit $rc, ETTR $ettr"
fi

finish run_resilience
