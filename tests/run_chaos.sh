#!/usr/bin/env bash
# tests/run_chaos.sh — the chaos campaign (issue 11): a 4-rank job (tp 2 x dp 2 under mpirun)
# supervised by `minitrain run`, with random faults drawn from a seed, against an unfaulted twin.
#
# Each seed draws 1-4 faults (a give-up seed draws more failures than --max-restarts allows) from:
#   kill, exit, hang, nan, slow (a straggler), corrupt-ckpt (+kill once every copy is damaged),
#   a torn tier-0 file (torn-ckpt, then a kill), ENOSPC on a checkpoint save (tests/enospc_shim.c
#   as LD_PRELOAD, once), a kill while a checkpoint is being written (writes slowed by
#   MINITRAIN_CKPT_WRITE_DELAY_MS, kill one step after a save starts), and a kill in the middle of
#   the next resume (kill@at=resume) — at random steps and ranks.
# Every seed must end with
#   - exit 0, status completed and parameters BIT-identical to the unfaulted run's, or (when the
#     faults exceed the budget) a clean give-up: exit 1, status gave_up, max_restarts+1 failures;
#   - no process of the job left, no lock on RUN_DIR/.lock;
#   - every committed checkpoint verifying (ckpt verify), unless the catalog marks it corrupt;
#   - `report --json` consistent with the events: failures = failure events, restarts =
#     launches - 1 = failures (completed) or failures - 1 (gave up), launches = launch events.
# Prints per seed: faults injected, failures detected, restarts, ETTR, MTTR.
#
#   bash tests/run_chaos.sh                   # CHAOS_SEEDS=8 seeds (make test: ~2-4 minutes)
#   CHAOS_SEEDS=20 CHAOS_FIRST_SEED=100 bash tests/run_chaos.sh      # a longer campaign
set -euo pipefail
PY=/usr/bin/python3
SEEDS=${CHAOS_SEEDS:-8}
FIRST=${CHAOS_FIRST_SEED:-1}
MAX_RESTARTS=4
if ! command -v mpirun >/dev/null 2>&1; then
  echo "run_chaos: skipped (needs mpirun for its 4-rank job; make deps installs openmpi-bin)"; exit 0
fi
. tests/lib.sh
tmp_dir mt_chaos
export MINITRAIN_SHM_DIR="$TMP/shm"
SUPPID=
on_exit() { [ -z "$SUPPID" ] || kill -9 "$SUPPID" 2>/dev/null; }
cp "${MT:-./minitrain}" "$TMP/minitrain"
MT=$TMP/minitrain
cc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$TMP/enospc.so" tests/enospc_shim.c -ldl

tiny_corpus 200000 "$TMP/byte"
cat > "$TMP/tiny.ini" <<INI
data = $TMP/byte
n_layer = 2
n_head = 2
d_model = 64
seq_len = 64
batch_size = 4
global_batch = 8
steps = 120
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
threads = 1
log_every = 20
eval_every = 0
sample_every = 0
sample_tokens = 0
ckpt_every = 10
tp = 2
dp = 2
comm_timeout = 60
INI
MPI=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none -np 4)
export MINITRAIN_CKPT_WRITE_DELAY_MS=40 # saves take ~0.2 s: a kill one step later lands mid-write

t_start=$(date +%s)
source tests/timing_lib.sh
mt_timed REF_S "${MPI[@]}" $MT train --config "$TMP/tiny.ini" --run-dir "$TMP/ref" > "$TMP/ref.log" 2>&1 \
  || { echo "run_chaos: the unfaulted reference run failed"; tail -5 "$TMP/ref.log"; exit 1; }
# --heartbeat-timeout: a hang seed waits it out, and a healthy attempt never goes that long
# without a heartbeat: its longest quiet gap (start-up, a resume) is shorter than the whole
# unfaulted run, so max(8 s, that run's wall time) holds on a loaded machine too (a fixed 8 s
# gave false hangs there, and a seed that exceeds its restart budget gives up)
HB=$(mt_scaled 8 1 "$REF_S")
echo "run_chaos: unfaulted reference (4 ranks, tp 2 x dp 2, 120 steps) in $REF_S s; --heartbeat-timeout $HB"

# plan SEED -> lines "fault SPEC" / "enospc STEP" / "expect completed|gave_up" / "desc TEXT"
plan() {
  $PY - "$1" "$MAX_RESTARTS" <<'PY'
import random, sys
seed, max_restarts = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(seed)
used = set()
def step(lo=3, hi=117):
    while True:
        s = r.randint(lo, hi)
        if all(abs(s - u) > 2 for u in used):
            used.add(s); return s
faults, enospc, desc = [], None, []
give_up = seed % 4 == 0  # every fourth seed exceeds the budget
if give_up:  # unconditional failures only, so the count is exact
    for _ in range(max_restarts + 1):
        k = r.choice(["kill", "exit"])
        s, rank = step(), r.randrange(4)
        faults.append(f"kill@step={s},rank={rank}" if k == "kill" else f"exit@step={s},rank={rank},code=1")
        desc.append(f"{k}@{s}/r{rank}")
else:
    kinds = ["kill", "exit", "hang", "nan", "slow", "corrupt", "torn", "enospc", "midwrite", "resume"]
    n = r.randint(1, 4)
    chosen = r.sample(kinds, n)
    if chosen == ["resume"]: chosen = ["kill", "resume"]  # a resume needs an earlier failure
    for k in chosen:
        rank = r.randrange(4)
        if k in ("kill", "exit", "hang", "nan", "slow"):
            s = step()
            spec = {"kill": f"kill@step={s},rank={rank}", "exit": f"exit@step={s},rank={rank},code=1",
                    "hang": f"hang@step={s},rank={rank}", "nan": f"nan@step={s},rank={rank}",
                    "slow": f"slow@step={s},rank={rank},factor=3"}[k]
            faults.append(spec); desc.append(f"{k}@{s}/r{rank}")
        elif k == "corrupt":
            s = 10 * r.randint(1, 11); used.add(s)
            faults.append(f"corrupt-ckpt@step={s},kill=1"); desc.append(f"corrupt-ckpt@{s}+kill")
        elif k == "torn":
            s = 10 * r.randint(1, 11); used.add(s); k2 = step(s + 3, s + 7)
            faults += [f"torn-ckpt@step={s}", f"kill@step={k2},rank={rank}"]
            desc.append(f"torn-tier0@{s},kill@{k2}/r{rank}")
        elif k == "enospc":
            enospc = 10 * r.randint(1, 11); used.add(enospc); desc.append(f"ENOSPC@save{enospc}")
        elif k == "midwrite":
            s = 10 * r.randint(1, 11) + 1; used.add(s)
            faults.append(f"kill@step={s},rank={rank}"); desc.append(f"kill-mid-write@{s}/r{rank}")
        elif k == "resume":
            faults.append(f"kill@at=resume,rank={rank}"); desc.append(f"kill-in-resume/r{rank}")
for f in faults: print("fault", f)
if enospc: print("enospc", enospc)
print("expect", "gave_up" if give_up else "completed")
print("desc", " ".join(desc))
PY
}

pass=0; fail=0
printf '%-5s %-52s %6s %8s %8s %7s %7s %6s %s\n' seed faults injected failures restarts ETTR MTTR wall verdict
for seed in $(seq "$FIRST" $((FIRST + SEEDS - 1))); do
  R=$TMP/s$seed
  P=$(plan "$seed")
  FAULTS=(); while read -r f; do FAULTS+=(--fault "$f"); done < <(echo "$P" | awk '$1=="fault"{print $2}')
  enospc=$(echo "$P" | awk '$1=="enospc"{print $2}')
  expect=$(echo "$P" | awk '$1=="expect"{print $2}')
  desc=$(echo "$P" | sed -n 's/^desc //p')
  ENV=(MT_ENOSPC_MATCH=)
  [ -n "$enospc" ] && ENV=(LD_PRELOAD="$TMP/enospc.so" MT_ENOSPC_MATCH="$R/ckpt/step_$(printf %08d "$enospc").tmp/" MT_ENOSPC_ONCE="$R.enospc")
  t0=$(date +%s)
  set +e
  env "${ENV[@]}" $MT run --max-restarts $MAX_RESTARTS --heartbeat-timeout "$HB" --backoff 0.2:1 --grace 2 \
    --run-dir "$R" -- "${MPI[@]}" $MT train --config "$TMP/tiny.ini" --run-dir "$R" "${FAULTS[@]}" \
    > "$R.log" 2>&1 &
  SUPPID=$!
  wait $SUPPID; rc=$?
  SUPPID=
  set -e
  wall=$(( $(date +%s) - t0 ))
  problems=()
  # no process of the job is left (the supervisor reaps everything before it exits)
  sleep 0.5
  left=$(pgrep -f -- "--run-dir $R( |$)" || true)
  [ -z "$left" ] || { problems+=("orphans: $left"); for p in $left; do kill -9 "$p" 2>/dev/null || true; done; }
  # the lock is free
  $PY -c "import fcntl,sys; fcntl.flock(open(sys.argv[1]), fcntl.LOCK_EX | fcntl.LOCK_NB)" "$R/.lock" 2>/dev/null \
    || problems+=("RUN_DIR/.lock still held")
  # every committed checkpoint verifies, unless the catalog calls it corrupt
  bad_ckpt=$($PY - "$R" "$MT" <<'PY'
import sqlite3, subprocess, sys, os
run, mt = sys.argv[1], sys.argv[2]
corrupt = {s for (s,) in sqlite3.connect(run + "/run.db").execute(
    "SELECT step FROM checkpoints WHERE tier = 1 AND state = 'corrupt'")}
bad = []
for d in sorted(os.listdir(run + "/ckpt")) if os.path.isdir(run + "/ckpt") else []:
    if not d.startswith("step_") or d.endswith((".tmp", ".del", ".old")): continue
    step = int(d[5:])
    if step in corrupt: continue
    if subprocess.run([mt, "ckpt", "verify", "--run", run, "--step", str(step)],
                      capture_output=True).returncode != 0:
        bad.append(step)
print(" ".join(map(str, bad)))
PY
)
  [ -z "$bad_ckpt" ] || problems+=("committed checkpoints that do not verify: $bad_ckpt")
  # the report agrees with the events
  rep=$($MT report --run "$R" --json 2>/dev/null || echo '{}')
  read -r status failures restarts ettr mttr injected consistent <<<"$($PY - "$R" "$rep" <<'PY'
import json, sqlite3, sys
run, r = sys.argv[1], json.loads(sys.argv[2] or "{}")
db = sqlite3.connect(run + "/run.db")
n = lambda kind: db.execute("SELECT COUNT(*) FROM events WHERE run_id = 0 AND kind = ?", (kind,)).fetchone()[0]
fails, launches = n("failure"), n("launch")
try: injected = sum(1 for l in open(run + "/faults_fired") if l.strip())
except OSError: injected = 0
st = r.get("status")
want_restarts = fails if st == "completed" else fails - 1
ok = (r.get("failures") == fails and r.get("restarts") == launches - 1 == want_restarts)
f = lambda x, fmt: "n/a" if x is None else fmt % x
print(st, r.get("failures"), r.get("restarts"), f(r.get("ettr"), "%.3f"), f(r.get("mttr_s"), "%.2f"),
      injected, "yes" if ok else "no:fail_events=%d,launches=%d" % (fails, launches))
PY
)"
  [ -n "$enospc" ] && [ -e "$R.enospc" ] && injected=$((injected + 1))
  [ "$consistent" = yes ] || problems+=("report vs events: $consistent (report: failures $failures, restarts $restarts)")
  if [ "$expect" = completed ]; then
    if [ $rc != 0 ] || [ "$status" != completed ]; then
      problems+=("expected a completed job: exit $rc, status $status: $(grep 'minitrain' "$R.log" | tail -2 | tr '\n' ' ')")
    elif ! same_params "$R" "$TMP/ref" 2> "$R.cmp"; then
      problems+=("final parameters differ from the unfaulted run's: $(tail -1 "$R.cmp")")
    fi
  else
    [ $rc = 1 ] && [ "$status" = gave_up ] && [ "$failures" = $((MAX_RESTARTS + 1)) ] \
      || problems+=("expected a clean give-up after $((MAX_RESTARTS + 1)) failures: exit $rc, status $status, failures $failures")
  fi
  verdict=$([ ${#problems[@]} = 0 ] && echo "ok ($status)" || echo FAIL)
  printf '%-5s %-52s %6s %8s %8s %7s %7s %5ss %s\n' "$seed" "${desc:0:52}" "$injected" "$failures" "$restarts" "$ettr" "$mttr" "$wall" "$verdict"
  if [ ${#problems[@]} = 0 ]; then pass=$((pass+1)); else
    fail=$((fail+1)); for p in "${problems[@]}"; do echo "      - $p"; done
  fi
done
echo "run_chaos: $pass of $SEEDS seeds passed in $(( $(date +%s) - t_start )) s"
[ $fail = 0 ]
