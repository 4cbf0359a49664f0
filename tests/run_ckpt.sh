#!/usr/bin/env bash
# tests/run_ckpt.sh — checkpoints end to end on a tiny model (2 layers, d_model 64, T 32):
#   determinism (20 steps straight == 10 + --stop-after + resume + 10: losses and parameters bit
#   for bit), resharding across tensor-parallel layouts under mpirun (tp=2 -> tp=1, tp=1 -> tp=2),
#   tier 0 preferred / corrupt tier 0 falls back to tier 1, tier 2 copy, retention, SIGKILL in the
#   middle of a save, SIGTERM to a plain train (checkpoint of that step, exit 143, resume), SIGUSR1 likewise (exit 138), corrupted checkpoints (flipped byte, truncated file, missing manifest,
#   manifest naming a missing file) caught by `ckpt verify` and skipped by --resume auto, a
#   read-only checkpoint directory (ckpt_on_error stop | continue), an incompatible model refused,
#   and tests/reference/ckpt_loss.py recomputing the loss of a checkpoint (and of its Hugging Face
#   export) with PyTorch. Runs from the repository root in about 40 s on 2 cores.
set -euo pipefail
MT=$PWD/minitrain
PY=/usr/bin/python3
. tests/lib.sh
tmp_dir mt_ckpt
export MINITRAIN_SHM_DIR=$TMP/shm

tiny_corpus 120000 "$TMP/data"
cat > "$TMP/tiny.ini" <<INI
n_layer = 2
n_head = 2
d_model = 64
seq_len = 32
batch_size = 4
global_batch = 8
steps = 20
lr = 3e-3
min_lr = 3e-4
warmup_steps = 3
threads = 1
log_every = 100
eval_every = 0
eval_batches = 2
sample_tokens = 0
ckpt_every = 5
ckpt_keep = 10
ckpt_tier0 = 0
INI
train() { $MT train --config "$TMP/tiny.ini" --data "$TMP/data" "$@"; }

# losses of every train step in run order (one line each, exact repr) and tensor bytes
losses() { $PY -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1] + '/run.db')
for s, l in c.execute('SELECT step, train_loss FROM metrics WHERE train_loss IS NOT NULL ORDER BY rowid'):
    print(s, repr(l))" "$1"; }
# the same losses within fp32 tolerance (another layout sums in another order)
close_losses() { $PY -c "
import sys
a = [l.split() for l in open(sys.argv[1])]; b = [l.split() for l in open(sys.argv[2])]
ok = len(a) == len(b) > 0 and all(x[0] == y[0] and abs(float(x[1]) - float(y[1])) <= 1e-5 * abs(float(x[1])) for x, y in zip(a, b))
sys.exit(0 if ok else 1)" <(losses "$1") <(losses "$2"); }
sql() { $PY -c "import sqlite3, sys; [print(*r, sep='|') for r in sqlite3.connect(sys.argv[1] + '/run.db').execute(sys.argv[2])]" "$1" "$2"; }

# ---- determinism: straight vs stop + resume ------------------------------------------------------
train --run-dir "$TMP/A" > "$TMP/A.log"
train --run-dir "$TMP/B" --stop-after 10 > "$TMP/B1.log"
check "--stop-after 10 commits step 10" test -d "$TMP/B/ckpt/step_00000010"
train --run-dir "$TMP/B" > "$TMP/B2.log"
check "resume auto picks step 10" grep -q "resumed from step 10" "$TMP/B2.log"
check "20 straight == 10 + resume + 10: losses bit for bit" diff <(losses "$TMP/A") <(losses "$TMP/B")
check "... and parameters bit for bit" same_tensors "$TMP/A/model.safetensors" "$TMP/B/model.safetensors"
[ "$(losses "$TMP/A" | wc -l)" = 20 ] && ok "20 loss rows" || bad "loss rows"

# ---- resharding across tensor-parallel layouts (needs mpirun) --------------------------------------
# Only a missing mpirun skips. A tp=2 run that fails (a crash, a refused layout) is a FAIL, and so
# is every check that needed its checkpoint: each check below runs, whatever the run before it did.
if ! command -v mpirun >/dev/null; then
  echo "  skip tp=2 resharding: no mpirun on PATH (make test-deps installs openmpi-bin)"
else
  MPI="mpirun --oversubscribe -np 2"; [ "$(id -u)" = 0 ] && MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
  $MPI $MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/T2" --tp 2 --stop-after 10 > "$TMP/T2a.log" 2>&1 \
    && ok "tp=2 run (mpirun -np 2 --tp 2 --stop-after 10)" \
    || bad "tp=2 run (mpirun -np 2 --tp 2) failed (exit $?): $(tail -3 "$TMP/T2a.log" | tr '\n' ' ')"
  check "tp=2 writes one model shard per tp rank" test -f "$TMP/T2/ckpt/step_00000010/model-tp01-pp00.safetensors"
  train --run-dir "$TMP/T2" > "$TMP/T2b.log" 2>&1 && grep -q "resumed from step 10" "$TMP/T2b.log" \
    && close_losses "$TMP/A" "$TMP/T2" \
    && ok "tp=2 checkpoint resumes at tp=1: losses of tp=1 straight (fp32 tolerance)" || bad "tp=2 -> tp=1"
  train --run-dir "$TMP/T1" --stop-after 10 > /dev/null
  $MPI $MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/T1" --tp 2 > "$TMP/T1.log" 2>&1 \
    && grep -q "resumed from step 10" "$TMP/T1.log" && close_losses "$TMP/A" "$TMP/T1" \
    && ok "tp=1 checkpoint resumes at tp=2: same losses (fp32 tolerance)" || bad "tp=1 -> tp=2"
  $MPI $MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/Z" --zero 1 --stop-after 10 > "$TMP/Z.log" 2>&1 \
    && train --run-dir "$TMP/Z" > "$TMP/Z2.log" 2>&1 \
    && grep -q "resumed from step 10" "$TMP/Z2.log" && close_losses "$TMP/A" "$TMP/Z" \
    && ok "dp=2 ZeRO-1 checkpoint resumes at dp=1: same losses (fp32 tolerance)" || bad "dp=2 zero=1 -> dp=1"
  $PY tests/reference/ckpt_loss.py "$TMP/T2/ckpt/step_00000010" "$TMP/data" > "$TMP/T2.loss" 2>&1 || true
  want=$(sql "$TMP/T2" "SELECT val_loss FROM metrics WHERE step = 10 AND val_loss IS NOT NULL LIMIT 1" 2>/dev/null || true)
  $PY -c "import sys; a=float(sys.argv[1].split()[1]); b=float(sys.argv[2]); sys.exit(abs(a-b) > 1e-4*abs(b))" "$(cat "$TMP/T2.loss")" "$want" 2>/dev/null \
    && ok "PyTorch assembles the tp=2 shards: loss $(cut -d' ' -f2 "$TMP/T2.loss" | cut -c1-8) == minitrain $want" \
    || bad "tp=2 reference loss: $(tail -1 "$TMP/T2.loss") vs minitrain '${want}'"
fi

# ---- reference: PyTorch recomputes the loss of a checkpoint and of its export -------------------
$MT ckpt export --run "$TMP/A" --step 20 > /dev/null
$PY tests/reference/ckpt_loss.py "$TMP/A/ckpt/step_00000020" "$TMP/data" --export "$TMP/A/hf/model.safetensors" > "$TMP/ref.out"
want=$(sql "$TMP/A" "SELECT val_loss FROM metrics WHERE step = 20 AND val_loss IS NOT NULL LIMIT 1")
$PY -c "import sys; a=float(sys.argv[1].split()[1]); b=float(sys.argv[2]); sys.exit(abs(a-b) > 1e-4*abs(b))" "$(head -1 "$TMP/ref.out")" "$want" \
  && ok "PyTorch loss of checkpoint step 20 $(head -1 "$TMP/ref.out" | cut -c6-13) == minitrain val loss $want" || bad "reference loss"
check "HF export: Conv1D transposed, config.json, same loss" grep -q "export ok" "$TMP/ref.out"

# ---- tiers, retention, catalog --------------------------------------------------------------------
train --run-dir "$TMP/C" --ckpt-tier0 1 --ckpt-durable "$TMP/durable" --ckpt-keep 2 --ckpt-major-every 10 --stop-after 15 > "$TMP/C1.log"
check "retention keeps the 2 newest + every 10th (tier 1: 10, 15)" test "$(ls "$TMP/C/ckpt" | grep -c '^step_')" = 2 -a -d "$TMP/C/ckpt/step_00000010"
check "tier 0 keeps the 2 newest in memory" test -d "$(ls -d "$TMP"/shm/*/ckpt)/step_00000015" -a -d "$(ls -d "$TMP"/shm/*/ckpt)/step_00000010"
check "tier 2 copy committed and verified" test -f "$TMP/durable/step_00000015/manifest.json"
$MT ckpt verify --run "$TMP/C" > "$TMP/C.verify" && grep -q "ok    tier 0" "$TMP/C.verify" && grep -q "ok    tier 2" "$TMP/C.verify" \
  && ok "ckpt verify checks tiers 0, 1 and 2" || bad "verify all tiers"
$MT ckpt ls --run "$TMP/C" > "$TMP/C.ls"
check "ckpt ls lists tier/state/size" grep -qE "^1 +15 +committed +[0-9.]+ (kB|MB)" "$TMP/C.ls"
check "catalog: committed rows with stall and write times; deleted by retention" test \
  "$(sql "$TMP/C" "SELECT count(*) FROM checkpoints WHERE tier=1 AND state='committed' AND snapshot_ms >= 0 AND write_ms > 0")" = 2 \
  -a "$(sql "$TMP/C" "SELECT state FROM checkpoints WHERE tier=1 AND step=5")" = deleted
train --run-dir "$TMP/C" --ckpt-tier0 1 --ckpt-durable "$TMP/durable" --stop-after 16 > "$TMP/C2.log"
check "restart prefers tier 0" grep -q "resumed from step 15 (tier 0" "$TMP/C2.log"
T0=$(ls -d "$TMP"/shm/*/ckpt)
printf 'x' | dd of="$T0/step_00000016/trainer_state.json" bs=1 seek=5 conv=notrunc 2>/dev/null
train --run-dir "$TMP/C" --ckpt-tier0 1 --stop-after 17 > "$TMP/C3.log" 2>&1
check "corrupt tier-0 copy: falls back to tier 1, same step" grep -q "resumed from step 16 (tier 1" "$TMP/C3.log"

# ---- SIGKILL in the middle of a save ----------------------------------------------------------------
# The background write of step 10 sleeps 600 ms before each file and the process SIGKILLs itself
# one step later (kill@step=11, after step 11's optimizer step has waited for the snapshot): the
# kill lands inside the write at a fixed step. (A poll for the first file followed by kill -9 raced
# the rest of the write, and its 10 s deadline raced start-up on a loaded machine.)
MINITRAIN_CKPT_WRITE_DELAY_MS=600 $MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/K" \
  --fault kill@step=11 > "$TMP/K.log" 2>&1 || true
check "killed while step 10 was half written" test -d "$TMP/K/ckpt/step_00000010.tmp" -a ! -e "$TMP/K/ckpt/step_00000010"
$MT ckpt verify --run "$TMP/K" > /dev/null && ok "no torn step is committed (verify passes)" || bad "verify after kill"
train --run-dir "$TMP/K" --stop-after 10 > "$TMP/K2.log"
check "resume after SIGKILL uses the previous step (5)" grep -q "resumed from step 5" "$TMP/K2.log"
check "the torn .tmp is replaced by a committed step 10" test -d "$TMP/K/ckpt/step_00000010" -a ! -e "$TMP/K/ckpt/step_00000010.tmp"

# ---- SIGTERM to a plain `minitrain train` (no supervisor): checkpoint of the current step, exit 143 ----
$MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/S" --steps 100000 --ckpt-every 100000 --log-every 1 > "$TMP/S.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "^step 3/" "$TMP/S.log" && break; sleep 0.05; done
kill -TERM $pid; set +e; wait $pid; rc=$?; set -e
sstep=$(sed -n 's/^SIGTERM received: saving a checkpoint of step \([0-9]*\) and stopping.*/\1/p' "$TMP/S.log")
[ $rc = 143 ] && [ -n "$sstep" ] && [ "$sstep" -ge 3 ] && ok "SIGTERM: one line naming step $sstep, exit 143" || bad "SIGTERM: rc $rc, step '$sstep': $(tail -2 "$TMP/S.log")"
check "... checkpoint of step $sstep committed and verified, run 'stopped'" test -d "$TMP/S/ckpt/$(printf 'step_%08d' "${sstep:-0}")" \
  -a "$($MT ckpt verify --run "$TMP/S" 2>&1 | tail -1)" = "1 checkpoint(s) checked, 0 failed" -a "$(sql "$TMP/S" "SELECT status FROM runs")" = stopped
train --run-dir "$TMP/S" --steps 100000 --ckpt-every 100000 --stop-after $((sstep + 1)) > "$TMP/S2.log" 2>&1
check "... --resume auto continues from step $sstep" grep -q "resumed from step $sstep " "$TMP/S2.log"

# ---- SIGUSR1 to a plain train (sbatch --signal=USR1@T without B:, scancel --signal=USR1): the same
# agreed-step checkpoint, exit 138 (128 + SIGUSR1), never killed at once ----
$MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/U" --steps 100000 --ckpt-every 100000 --log-every 1 > "$TMP/U.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "^step 3/" "$TMP/U.log" && break; sleep 0.05; done
kill -USR1 $pid; set +e; wait $pid; rc=$?; set -e
ustep=$(sed -n 's/^SIGUSR1 (time limit or preemption) received: saving a checkpoint of step \([0-9]*\) and stopping.*/\1/p' "$TMP/U.log")
[ $rc = 138 ] && [ -n "$ustep" ] && ok "SIGUSR1: checkpoint of step $ustep named, exit 138" || bad "SIGUSR1: rc $rc, step '$ustep': $(tail -2 "$TMP/U.log")"
check "... checkpoint of step $ustep committed and verified" test -d "$TMP/U/ckpt/$(printf 'step_%08d' "${ustep:-0}")" \
  -a "$($MT ckpt verify --run "$TMP/U" 2>&1 | tail -1)" = "1 checkpoint(s) checked, 0 failed"

# ---- SIGHUP (a closed terminal) to a plain train: the same, exit 129 ----
$MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/H" --steps 100000 --ckpt-every 100000 --log-every 1 > "$TMP/H.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "^step 3/" "$TMP/H.log" && break; sleep 0.05; done
kill -HUP $pid; set +e; wait $pid; rc=$?; set -e
hstep=$(sed -n 's/^SIGHUP received: saving a checkpoint of step \([0-9]*\) and stopping.*/\1/p' "$TMP/H.log")
[ $rc = 129 ] && [ -n "$hstep" ] && test -d "$TMP/H/ckpt/$(printf 'step_%08d' "$hstep")" && ok "SIGHUP: checkpoint of step $hstep, exit 129" || bad "SIGHUP: rc $rc: $(tail -2 "$TMP/H.log")"

# ---- SIGTERM to `minitrain run`: forwarded as the same agreed-step checkpoint request, exit 143 ----
$MT run --run-dir "$TMP/V" -- $MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$TMP/V" --steps 100000 \
  --ckpt-every 100000 --log-every 1 > "$TMP/V.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "^step 3/" "$TMP/V.log" && break; sleep 0.05; done
kill -TERM $pid; set +e; wait $pid; rc=$?; set -e
vstep=$(sed -n 's/^checkpoint step \([0-9]*\) committed.*/\1/p' "$TMP/V.log" | tail -1)
[ $rc = 143 ] && grep -q "asking the job to checkpoint now and stop" "$TMP/V.log" && [ -n "$vstep" ] \
  && ok "SIGTERM to minitrain run: the job checkpoints step $vstep and stops, exit 143" || bad "run SIGTERM: rc $rc: $(tail -3 "$TMP/V.log")"
check "... that checkpoint verifies and the run is 'stopped', not torn down" test -d "$TMP/V/ckpt/$(printf 'step_%08d' "${vstep:-0}")" \
  -a "$(sql "$TMP/V" "SELECT status FROM runs")" = stopped

# ---- corruptions: ckpt verify names the file, --resume auto skips the step --------------------------
corrupt() { # NAME ACTION: a copy of run A whose step 20 is damaged by ACTION (run in the step dir)
  rm -rf "$TMP/X"; cp -r "$TMP/A" "$TMP/X"; (cd "$TMP/X/ckpt/step_00000020" && eval "$2")
  set +e; $MT ckpt verify --run "$TMP/X" > "$TMP/X.out" 2> "$TMP/X.err"; local rc=$?; set -e
  if [ $rc = 2 ] && grep -q "$3" "$TMP/X.err"; then ok "$1: ckpt verify exits 2 naming $3"; else bad "$1: verify rc $rc: $(head -c 300 "$TMP/X.err")"; fi
  train --run-dir "$TMP/X" --stop-after 16 > "$TMP/X.log" 2>&1
  if grep -q "resumed from step 15" "$TMP/X.log" && [ "$(sql "$TMP/X" "SELECT count(*) FROM events WHERE kind='ckpt_skip'")" -ge 1 ]; then
    ok "$1: --resume auto skips it (warning event) and loads step 15"; else bad "$1: resume"; fi
}
corrupt "flipped byte" 'printf "\x55" | dd of=model-tp00-pp00.safetensors bs=1 seek=4000 conv=notrunc 2>/dev/null' model-tp00-pp00.safetensors
corrupt "truncated file" 'truncate -s -100 optim-tp00-pp00.safetensors' optim-tp00-pp00.safetensors
corrupt "missing manifest" 'rm manifest.json' manifest.json
corrupt "manifest naming a missing file" 'rm trainer_state.json' trainer_state.json

# ---- incompatible model -------------------------------------------------------------------------------
rm -rf "$TMP/X"; cp -r "$TMP/A" "$TMP/X"
set +e; train --run-dir "$TMP/X" --d-model 32 --steps 25 > "$TMP/X.log" 2> "$TMP/X.err"; rc=$?; set -e
[ $rc = 2 ] && grep -q "d_model 64, this run has d_model 32" "$TMP/X.err" && ok "incompatible d_model refused (exit 2)" || bad "incompatible config: rc $rc $(cat "$TMP/X.err")"
set +e; train --run-dir "$TMP/X" --resume 7 > "$TMP/X.log" 2> "$TMP/X.err"; rc=$?; set -e
[ $rc = 2 ] && grep -q "step 7" "$TMP/X.err" && ok "--resume 7 (no such step) refused" || bad "--resume 7: rc $rc"
set +e; train --run-dir "$TMP/X" --resume sometimes > "$TMP/X.log" 2> "$TMP/X.err"; rc=$?; set -e
[ $rc = 2 ] && grep -q "resume" "$TMP/X.err" && ok "--resume sometimes refused by config validation" || bad "--resume value"

# ---- read-only checkpoint directory during a save -----------------------------------------------------
# root ignores permission bits, so the runs below drop to nobody when the test runs as root
AS=(); if [ "$(id -u)" = 0 ]; then AS=(setpriv --reuid=65534 --regid=65534 --clear-groups); fi
chmod 755 "$TMP"
if [ ${#AS[@]} -gt 0 ] && ! "${AS[@]}" test -x "$MT" -a -r "$TMP/data/tokenizer.bin" 2>/dev/null; then
  echo "  skip read-only checkpoint directory (cannot drop to an unprivileged user that can run $MT)"
else for policy in stop continue; do
  R="$TMP/RO_$policy"
  train --run-dir "$R" --stop-after 5 > /dev/null
  [ "$(id -u)" = 0 ] && chown -R 65534:65534 "$R"
  chmod 555 "$R/ckpt"
  set +e; "${AS[@]}" $MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$R" --ckpt-on-error $policy > "$R.log" 2>&1; rc=$?; set -e
  chmod 755 "$R/ckpt"
  errors=$(sql "$R" "SELECT count(*) FROM events WHERE kind='ckpt_error'")
  last=$(sql "$R" "SELECT max(step) FROM metrics WHERE train_loss IS NOT NULL")
  intact=$($MT ckpt verify --run "$R" --step 5 > /dev/null 2>&1 && echo yes || echo no)
  if [ $policy = stop ]; then
    [ $rc = 1 ] && [ "$errors" -ge 1 ] && [ "$last" = 10 ] && [ "$intact" = yes ] && grep -q "stopping the run cleanly" "$R.log" \
      && ok "read-only ckpt dir, stop: error event, clean stop after step 10 (exit 1), step 5 intact" \
      || bad "read-only stop: rc $rc errors $errors last $last intact $intact"
  else
    [ $rc = 0 ] && [ "$errors" -ge 3 ] && [ "$last" = 20 ] && [ "$intact" = yes ] \
      && ok "read-only ckpt dir, continue: training reaches step 20, error events, step 5 intact" \
      || bad "read-only continue: rc $rc errors $errors last $last intact $intact"
  fi
done
# the directory turns read-only while the background writer is in the middle of step 10
R="$TMP/RO_mid"
train --run-dir "$R" --stop-after 5 > /dev/null
[ "$(id -u)" = 0 ] && chown -R 65534:65534 "$R"
# (the writer sleeps 1.5 s before its first file: the poll has that long to see step_10.tmp and
# make it read-only; its deadline is start-up plus 5 steps, however slow: 120 s, not 4 s)
MINITRAIN_CKPT_WRITE_DELAY_MS=1500 "${AS[@]}" $MT train --config "$TMP/tiny.ini" --data "$TMP/data" --run-dir "$R" > "$R.log" 2>&1 &
pid=$!
for _ in $(seq 6000); do [ -d "$R/ckpt/step_00000010.tmp" ] && break; sleep 0.02; done
chmod 555 "$R/ckpt/step_00000010.tmp" 2>/dev/null || true
set +e; wait $pid; rc=$?; set -e
chmod -R u+w "$R/ckpt"
errors=$(sql "$R" "SELECT count(*) FROM events WHERE kind='ckpt_error' AND detail LIKE '%step_00000010.tmp/model-tp00-pp00%'")
[ $rc = 1 ] && [ "$errors" -ge 1 ] && [ ! -e "$R/ckpt/step_00000010" ] && $MT ckpt verify --run "$R" --step 5 > /dev/null 2>&1 \
  && ok "read-only in the middle of a background write: error event names the file, clean stop, step 5 intact" \
  || bad "mid-write failure: rc $rc errors $errors"
fi

# ---- CLI --------------------------------------------------------------------------------------------
for c in "" ls verify export; do $MT ckpt $c --help > /dev/null && ok "ckpt $c --help" || bad "ckpt $c --help"; done
set +e; $MT ckpt ls --run "$TMP/A" --bogus 2> "$TMP/e"; rc=$?; set -e
[ $rc = 2 ] && grep -q "bogus" "$TMP/e" && ok "unknown flag refused by name" || bad "unknown flag"
set +e; $MT ckpt verify --run "$TMP/nope" 2> "$TMP/e"; rc=$?; set -e
[ $rc = 2 ] && ok "ckpt verify of a missing run: exit 2" || bad "missing run"

finish ckpt
