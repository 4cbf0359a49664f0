#!/usr/bin/env bash
# tests/run_slurm.sh — minitrain against a REAL Slurm cluster started on this machine: munged with
# a test key, slurmctld on a loopback port and three slurmd (`slurmd -N n1..n3`, NodeAddr
# 127.0.0.1, one port each, per-node spool dirs), all started here and stopped by pid.
#   - `plan --from-slurm` inside `salloc -N3` places on the allocation's nodes (n1, n2; spare n3);
#   - `minitrain run` inside `salloc -N2` learns its hosts from SLURM_*; a failure blamed twice on
#     a host drains that node in Slurm with a "minitrain: ..." reason (sinfo -R), run.db records
#     it, and the job still finishes.
#   - the self-healing loop: a 4-rank job (tp 2 x dp 2) planned on n1+n2 of `salloc -N3` with n3
#     spare, run as `minitrain run --rankfile` around `mpirun --rankfile {rankfile}` across the
#     slurmd nodes; n2's ranks are SIGKILLed at step 10 (found by SLURMD_NODENAME=n2 in their
#     environment): n2 is drained with the reason, Slurm's log and run.db record it, the job is
#     re-planned onto n1+n3 (its ranks seen there), finishes, its final tensors are bit-identical
#     to an unfaulted run's, and `minitrain report` shows n2 drained and why;
#   - the USR1 path: examples/slurm/minitrain.sbatch under sbatch, `scancel --signal=USR1 --batch`
#     at step 10: the job checkpoints now, requeues itself, the requeued job resumes from that
#     checkpoint's step and finishes bit-identical to the unfaulted run.
# Skips (exit 0, saying so) when slurm-wlm or munge are not installed (make test-deps installs them).
set -euo pipefail
for c in slurmctld slurmd munged salloc scontrol sinfo; do
  command -v $c >/dev/null 2>&1 || [ -x /usr/sbin/$c ] || { echo "slurm: SKIP ($c missing: make test-deps)"; exit 0; }
done
. tests/lib.sh
TMP=$(mktemp -d /tmp/mt_slurm_XXXXXX)
cp ./minitrain "$TMP/minitrain"; MT=$TMP/minitrain
PIDS=() # here: pid files (slurmctld, slurmd and munged write their own), not pids
stop_all() {
  for f in "${PIDS[@]}"; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 1
  for f in "${PIDS[@]}"; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
  [ -n "${KEEP:-}" ] || rm -rf "$TMP"
}
trap stop_all EXIT
t0=$(date +%s)

# ports: a free-looking block chosen at random, so parallel runs do not collide
free_port() { ! (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; }
for try in $(seq 20); do
  BASE=$((20000 + (RANDOM % 400) * 10))
  all=1; for i in 0 1 2 3 4; do free_port $((BASE + i)) || all=0; done
  [ $all = 1 ] && break
done
mkdir -p "$TMP/munge" "$TMP/state" "$TMP/log" "$TMP/spool"/n{1,2,3}
dd if=/dev/urandom of="$TMP/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 700 "$TMP/munge"; chmod 600 "$TMP/munge/munge.key"
/usr/sbin/munged --key-file="$TMP/munge/munge.key" --socket="$TMP/munge/sock" \
  --pid-file="$TMP/munge/pid" --log-file="$TMP/munge/log" --seed-file="$TMP/munge/seed" -f
PIDS+=("$TMP/munge/pid")
cat > "$TMP/slurm.conf" <<CONF
ClusterName=mt
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$BASE
SlurmdPort=$((BASE + 1))
AuthType=auth/munge
AuthInfo=socket=$TMP/munge/sock,cred_expire=5
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool/%n
SlurmctldPidFile=$TMP/ctld.pid
SlurmdPidFile=$TMP/slurmd.%n.pid
SlurmctldLogFile=$TMP/log/ctld.log
SlurmdLogFile=$TMP/log/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=n[1-3] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((BASE + 2))-$((BASE + 4))] CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$TMP/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF"; PIDS+=("$TMP/ctld.pid")
for n in n1 n2 n3; do /usr/sbin/slurmd -f "$SLURM_CONF" -N $n; PIDS+=("$TMP/slurmd.$n.pid"); done
for i in $(seq 30); do
  [ "$(sinfo -h -o '%D' -t idle 2>/dev/null)" = 3 ] && break
  sleep 1
done
[ "$(sinfo -h -o '%D' -t idle)" = 3 ] && ok "cluster up: 3 idle nodes (slurmctld :$BASE)" || { bad "cluster: $(sinfo 2>&1)"; exit 1; }

# --- plan --from-slurm ---------------------------------------------------------------------------
timeout 60 salloc -Q -N3 -n6 $MT plan --from-slurm --tp 2 --dp 2 --spares 1 --quiet --out "$TMP/rf" \
  > "$TMP/plan.log" 2>&1 || true
grep -q '^rank 0=n1 slot=0$' "$TMP/rf" && grep -q '^rank 3=n2 slot=1$' "$TMP/rf" && grep -q '^# spare n3$' "$TMP/rf" \
  && ok "plan --from-slurm: ranks on n1, n2 of the allocation; n3 spare" || bad "plan --from-slurm: $(cat "$TMP/plan.log" "$TMP/rf" 2>&1 | tail -5)"

# --- the supervisor drains a blamed node ---------------------------------------------------------
tiny_corpus 100000 "$TMP/data"
cat > "$TMP/tiny.ini" <<INI
data = $TMP/data
n_layer = 2
n_head = 2
d_model = 32
seq_len = 32
batch_size = 4
global_batch = 4
steps = 20
warmup_steps = 2
eval_every = 0
sample_tokens = 0
threads = 1
ckpt_every = 4
INI
set +e
MINITRAIN_SHM_DIR="$TMP/shm" timeout 200 salloc -Q -N2 -n2 $MT run --max-restarts 4 --backoff 0:0 \
  --run-dir "$TMP/run" -- $MT train --config "$TMP/tiny.ini" --run-dir "$TMP/run" \
  --fault exit@step=5,code=1 --fault exit@step=9,code=1 > "$TMP/run.log" 2>&1
rc=$?
set -e
grep -q '^n1 slots=' "$TMP/run/hostfile.slurm" 2>/dev/null && ok "run learned its hosts from SLURM_* (hostfile.slurm)" \
  || bad "hostfile.slurm: $(cat "$TMP/run/hostfile.slurm" 2>&1)"
reason=$(sinfo -h -R -o '%N|%E' | grep '^n1|' || true)
[[ "$reason" == "n1|minitrain: "* ]] && ok "n1 drained in Slurm: ${reason#n1|}" || bad "drain: sinfo -R '$reason'; $(grep -i 'drain\|cordon\|error' "$TMP/run.log" | tail -3)"
[ $rc = 0 ] && grep -q 'drained n1 in Slurm' "$TMP/run.log" && ok "job finished after the drain (exit 0)" \
  || bad "job: exit $rc: $(tail -3 "$TMP/run.log")"
n=$(/usr/bin/python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select count(*) from events where kind='slurm_drain'\").fetchone()[0])" "$TMP/run/run.db" 2>/dev/null || echo 0)
[ "$n" = 1 ] && ok "run.db records the slurm_drain event" || bad "run.db slurm_drain events: $n"
scontrol update nodename=n1 state=resume

# --- the self-healing loop: drain n2, re-plan onto the spare n3, relaunch, resume ----------------
PY=/usr/bin/python3
# Open MPI across "nodes" that are one machine: its shared-memory transport mixes up the ranks of
# different orteds (a crash in mca_btl_vader), so the Slurm jobs talk TCP
MPI_ARGS="--mca btl self,tcp"; [ "$(id -u)" = 0 ] && MPI_ARGS="--allow-run-as-root $MPI_ARGS"
sed -i 's/^steps = .*/steps = 30/; s/^global_batch = .*/global_batch = 8/' "$TMP/tiny.ini"
# an unfaulted reference: the same layout, outside Slurm
timeout 120 mpirun $MPI_ARGS --oversubscribe -np 4 $MT train --config "$TMP/tiny.ini" --tp 2 --dp 2 \
  --run-dir "$TMP/ref" > "$TMP/ref.log" 2>&1 || { bad "reference run: $(tail -3 "$TMP/ref.log")"; }
# node_watch NODE STEP HB_DIR OUT: every 50 ms, note (attempt, node, name) of each minitrain rank
# and Open MPI daemon (orted) of this test (from its environment: MINITRAIN_ATTEMPT,
# SLURMD_NODENAME), one "attempt node name" line each in OUT; the first time a heartbeat in
# HB_DIR passes STEP (STEP > 0) and (with FIRED N) the fault record FIRED holds N lines, SIGKILL
# the minitrain processes on NODE. Ends when STOP appears.
# node_watch NODE STEP HB_DIR OUT [FIRED N]
node_watch() {
  $PY - "$@" <<'PY' &
import glob, os, re, signal, sys, time
node, step, hb, out = sys.argv[1].encode(), int(sys.argv[2]), sys.argv[3], sys.argv[4]
fired, n_fired = (sys.argv[5], int(sys.argv[6])) if len(sys.argv) > 6 else (None, 0)
def recorded():  # the hang faults are durable in faults_fired before the ranks stop (sched/hooks.c)
    try: return fired is None or len(open(fired).read().splitlines()) >= n_fired
    except OSError: return False
mine = os.path.dirname(out).encode()
seen, killed, t0 = set(), step <= 0, time.time()
def procs():
    for d in os.listdir("/proc"):
        if not d.isdigit(): continue
        try:
            comm = open(f"/proc/{d}/comm").read().strip()
            if comm not in ("minitrain", "orted"): continue
            env = dict(e.split(b"=", 1) for e in open(f"/proc/{d}/environ", "rb").read().split(b"\0") if b"=" in e)
        except OSError: continue
        if env.get(b"MINITRAIN_HEARTBEAT_DIR", b"").startswith(mine) and b"SLURMD_NODENAME" in env:
            env[b"comm"] = comm.encode()
            yield int(d), env
while not os.path.exists(out + ".stop") and time.time() - t0 < 240:
    ps = list(procs())
    for pid, env in ps:
        seen.add((env.get(b"MINITRAIN_ATTEMPT", b"?").decode(), env[b"SLURMD_NODENAME"].decode(),
                  env[b"comm"].decode()))
    if not killed:
        steps = [int(m.group(1)) for f in glob.glob(hb + "/rank_*")
                 for m in [re.search(r"step=(\d+)", open(f).read())] if m]
        if steps and max(steps) >= step and recorded():
            victims = [pid for pid, env in ps
                       if env[b"SLURMD_NODENAME"] == node and env[b"comm"] == b"minitrain"]
            for pid in victims: os.kill(pid, signal.SIGKILL)
            killed = True
            open(out + ".kill", "w").write(f"{len(victims)} {max(steps)}\n")
    time.sleep(0.05)
open(out, "w").write("".join(f"{a} {n} {c}\n" for a, n, c in sorted(seen)))
PY
  echo $! > "$4.pid"; PIDS+=("$4.pid")
}
# n2's ranks (2 and 3 of the plan) hang at step 10 until the watch kills them: polling every 50 ms
# it once raced the 20 remaining steps, which a quiet machine trains in well under a second, and
# on a loaded one the watch is the one that waits (the job finished unkilled: "kill on n2: 0").
# The kill waits until both hangs are recorded in faults_fired: killed before rank 2 had fsynced its
# record, a hang re-armed after the re-plan and hung rank 2 again on n3 (CI: "giving up: host n3 is
# cordoned")
node_watch n2 10 "$TMP/heal/heartbeat" "$TMP/heal.nodes" "$TMP/heal/faults_fired" 2
set +e
MINITRAIN_SHM_DIR="$TMP/shm2" timeout 200 salloc -Q -N3 --ntasks-per-node=2 bash -c "
  $MT plan --from-slurm --tp 2 --dp 2 --spares 1 --quiet --out '$TMP/heal.rankfile' > /dev/null &&
  $MT run --rankfile '$TMP/heal.rankfile' --cordon-after 1 --backoff 0:0 --run-dir '$TMP/heal' -- \
    mpirun $MPI_ARGS --hostfile {hostfile} --rankfile {rankfile} -np 4 $MT train --config '$TMP/tiny.ini' \
    --rankfile {rankfile} --run-dir '$TMP/heal' --fault hang@step=10,rank=2 --fault hang@step=10,rank=3" \
  > "$TMP/heal.log" 2>&1
rc=$?
set -e
touch "$TMP/heal.nodes.stop"
for i in $(seq 50); do [ -f "$TMP/heal.nodes" ] && break; sleep 0.1; done
read -r nkilled kstep < "$TMP/heal.nodes.kill" 2>/dev/null || nkilled=0
[ "${nkilled:-0}" = 2 ] && ok "n2's 2 ranks SIGKILLed at step $kstep" || bad "kill on n2: ${nkilled:-none} ranks"
reason=$(sinfo -h -R -o '%N|%E' | grep '^n2|' || true)
[[ "$reason" == "n2|minitrain: crash of rank "* ]] && ok "n2 drained in Slurm: ${reason#n2|}" \
  || bad "n2 drain: sinfo -R '$reason'; $(grep -i 'drain\|cordon\|error' "$TMP/heal.log" | tail -3)"
grep -q 'update_node: node n2 reason set to: minitrain: ' "$TMP/log/ctld.log" \
  && grep -q 'update_node: node n2 state set to DRAINING' "$TMP/log/ctld.log" \
  && ok "Slurm's own log records the drain and its reason" || bad "ctld.log: $(grep n2 "$TMP/log/ctld.log" | tail -2)"
q() { $PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$TMP/heal/run.db" "$1" 2>/dev/null || echo "?"; }
drain=$(q "select json_extract(detail,'\$.host')||' '||json_extract(detail,'\$.ok') from events where kind='slurm_drain'")
replan=$(q "select json_extract(detail,'\$.hosts') from events where kind='replan'")
[ "$drain" = "n2 1" ] && [ "$replan" = "n1,n3" ] && ok "run.db records the drain of n2 and the re-plan onto n1,n3" \
  || bad "run.db: slurm_drain '$drain', replan '$replan'"
seen() { awk -v a="$1" -v c="$2" '$1 == a && $3 == c {print $2}' "$TMP/heal.nodes" | sort -u | tr '\n' ' '; }
a1=$(seen 1 minitrain); a2=$(seen 2 minitrain); d2=$(seen 2 orted)
[ "$a1" = "n1 n2 " ] && [ "$a2" = "n1 n3 " ] && [ "$d2" = "n1 n3 " ] \
  && ok "ranks ran on n1+n2, then on n1+n3 after the re-plan (Open MPI's daemons too: none on n2)" \
  || bad "nodes seen: attempt 1 ranks on '$a1', attempt 2 ranks on '$a2', daemons on '$d2'"
resumed=$(grep -o 'resumed from step [0-9]*' "$TMP/heal.log" | head -1) || true
if [ $rc = 0 ] && grep -q 'attempt 2: job finished cleanly' "$TMP/heal.log" && [ -n "$resumed" ] \
   && same_params "$TMP/heal" "$TMP/ref" 2> "$TMP/heal.cmp"; then
  ok "the job finished on n1+n3 ($resumed), final tensors bit-identical to the unfaulted run"
else
  bad "healed job: exit $rc, '$resumed': $(cat "$TMP/heal.cmp" 2>/dev/null | tail -1) $(tail -2 "$TMP/heal.log")"
fi
$MT report --run "$TMP/heal" > "$TMP/heal.report" 2>&1 || true
grep -q '^drained: *n2 in Slurm — minitrain: crash of rank ' "$TMP/heal.report" \
  && ok "report: $(grep '^drained:' "$TMP/heal.report" | cut -c1-90)..." || bad "report: $(grep -i drain "$TMP/heal.report")"
scontrol update nodename=n2 state=resume

# --- USR1: checkpoint now, requeue, resume (examples/slurm/minitrain.sbatch) ----------------------
# From step 10 on rank 0 runs at 1/40 of its speed (slow: 39 x its own step time after each step,
# so the margin grows with the load), until the USR1 checkpoint ends the attempt: the remaining
# steps can no longer finish before scancel's signal has made its way through slurmctld, slurmd,
# the batch shell and the supervisor. The slow fault fired once; the requeued job runs at speed.
job=$(MINITRAIN=$MT RUN_DIR=$TMP/usr1 TP=2 MPIRUN_ARGS="$MPI_ARGS" MINITRAIN_SHM_DIR=$TMP/shm3 \
  TRAIN_ARGS="--fault slow@step=10,rank=0,factor=40" \
  sbatch --parsable -N3 -o "$TMP/usr1-%j.out" -D "$TMP" examples/slurm/minitrain.sbatch "$TMP/tiny.ini" 2> "$TMP/sbatch.err") \
  || bad "sbatch: $(cat "$TMP/sbatch.err")"
for i in $(seq 300); do
  s=$(grep -ho "step=[0-9]*" "$TMP"/usr1/heartbeat/rank_* 2>/dev/null | cut -d= -f2 | sort -n | tail -1 || true)
  [ "${s:-0}" -ge 10 ] && break; sleep 0.2
done
scancel --signal=USR1 --batch "$job"
for i in $(seq 120); do
  scontrol show job "$job" 2>/dev/null | grep -q 'JobState=COMPLETED' && break; sleep 1
done
out="$TMP/usr1-$job.out"
asked=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select json_extract(detail,'\$.step') from events where kind='checkpoint_now' and run_id>0\").fetchone()[0])" "$TMP/usr1/run.db" 2>/dev/null || echo "?")
requeued=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select count(*) from events where kind='requeue' and json_extract(detail,'\$.ok')\").fetchone()[0])" "$TMP/usr1/run.db" 2>/dev/null || echo 0)
grep -q "checkpoint step $asked committed" "$out" 2>/dev/null && [ "$requeued" = 1 ] \
  && ok "USR1 at step ${s:-?}: checkpoint of step $asked written, job requeued (run.db: requeue)" \
  || bad "USR1: checkpoint_now step '$asked', requeue events '$requeued': $(grep -i 'usr1\|requeue' "$out" 2>/dev/null | tail -3)"
if scontrol show job "$job" | grep -q 'Restarts=1' && grep -q "(restart 1)" "$out" \
   && grep -q "resumed from step $asked " "$out" && same_params "$TMP/usr1" "$TMP/ref" 2> "$TMP/usr1.cmp"; then
  ok "the requeued job resumed from step $asked and finished bit-identical to the unfaulted run"
else
  bad "requeued job: $(scontrol show job "$job" | grep -o 'JobState=[A-Z]*\|Restarts=[0-9]*' | tr '\n' ' ') $(grep -o 'resumed from step [0-9]*' "$out" | head -1) $(cat "$TMP/usr1.cmp" 2>/dev/null | tail -1)"
fi

finish slurm "($(( $(date +%s) - t0 )) s)"
