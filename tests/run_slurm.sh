#!/usr/bin/env bash
# tests/run_slurm.sh — minitrain against a REAL Slurm cluster started on this machine: munged with
# a test key, slurmctld on a loopback port and three slurmd (`slurmd -N n1..n3`, NodeAddr
# 127.0.0.1, one port each, per-node spool dirs), all started here and stopped by pid.
#   - `plan --from-slurm` inside `salloc -N3` places on the allocation's nodes (n1, n2; spare n3);
#   - `minitrain run` inside `salloc -N2` learns its hosts from SLURM_*; a failure blamed twice on
#     a host drains that node in Slurm with a "minitrain: ..." reason (sinfo -R), run.db records
#     it, and the job still finishes.
# Skips (exit 0, saying so) when slurm-wlm or munge are not installed (make test-deps installs them).
set -euo pipefail
for c in slurmctld slurmd munged salloc scontrol sinfo; do
  command -v $c >/dev/null 2>&1 || [ -x /usr/sbin/$c ] || { echo "slurm: SKIP ($c missing: make test-deps)"; exit 0; }
done
MT=./minitrain
TMP=$(mktemp -d /tmp/mt_slurm_XXXXXX)
cp ./minitrain "$TMP/minitrain"; MT=$TMP/minitrain
pass=0; fail=0
ok()  { echo "  ok   $1"; pass=$((pass+1)); }
bad() { echo "  FAIL $1"; fail=$((fail+1)); }
PIDS=()
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
AuthInfo=socket=$TMP/munge/sock
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
head -c 100000 examples/data/tinyshakespeare.txt > "$TMP/s.txt"
$MT prepare --input "$TMP/s.txt" --out "$TMP/data" >/dev/null
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

echo "slurm: $pass passed, $fail failed ($(( $(date +%s) - t0 )) s)"
[ $fail = 0 ]
