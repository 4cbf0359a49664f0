#!/usr/bin/env bash
# tests/run_db_ha.sh — the real highly available PostgreSQL cluster of issue 25 (tests/pg_ha_lib.sh:
# 3 etcd, 3 PostgreSQL 15 under Patroni, synchronous_mode, ttl 20) survives the two faults a
# database node has while a 4-rank training job under the supervisor ships its run.db to it
# (`--db` at the multi-host URL) and a psql writer inserts numbered rows the whole time:
#   a. the primary dies (SIGKILL to its Patroni and postmaster): a replica is promoted; the write
#      outage (the longest gap between two acknowledged inserts) is measured, printed, and held to
#      ttl + loop_wait + 18 s; every acknowledged row is on the new primary exactly once; the old
#      primary, restarted, rejoins as a replica through pg_rewind with lag 0;
#   b. the new primary freezes (SIGSTOP): another leader is elected; after SIGCONT the frozen node
#      demotes itself and rejoins through pg_rewind; no acknowledged row lost; rows equal on all 3;
#   c. the job (with a rank killed once, so the supervisor restarts it) completes with parameters
#      bit-identical to the same run without --db, and every row of its run.db is on the final
#      primary and on both standbys exactly once (count, rowids and content per table), with
#      nothing left for a later `minitrain db ship` to do.
# The psql writer sends one numbered row per transaction, INSERT … ON CONFLICT DO NOTHING on the
# number (as the shipper keys its rows): a row is "acknowledged" when COMMIT returned, which
# under synchronous_mode means it is on the primary and on a synchronous standby. A failed or
# timed-out insert is retried with the same number until acknowledged.
# Skips (exit 0) when etcd, Patroni, PostgreSQL 15 or mpirun is missing, or minitrain was built
# without libpq. ~3 min on the loaded 2-core machine (the two failovers wait out ttl 20 s each).
set -euo pipefail
. tests/lib.sh
. tests/pg_ha_lib.sh
. tests/timing_lib.sh
if ! ha_have || ! command -v mpirun >/dev/null 2>&1; then
  echo "  skip etcd/patroni/postgresql-15/mpirun not installed (make test-deps)"
  finish db_ha "(skipped)"; exit 0
fi
if ! ./minitrain db --help 2>&1 | grep -q "db ship"; then
  echo "  skip this minitrain has no 'db ship' (built without db/)"; finish db_ha "(skipped)"; exit 0
fi
tmp_dir mt_db_ha
JOB_PID=""; REF_PID=""; W_PID=""
on_exit() {
  local p
  for p in "$JOB_PID" "$REF_PID" "$W_PID"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null; done
  ha_stop
}
OUTAGE_MAX=$((HA_TTL + HA_LOOP_WAIT + 18))  # 40 s: the lease, one Patroni loop, a loaded machine
export MINITRAIN_SHM_DIR="$TMP/shm"          # tier-0 checkpoints stay in $TMP
cp ./minitrain "$TMP/minitrain"              # every relaunch execs the same binary
MT=$TMP/minitrain
MPI=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none -np 4)

now_ms() { date +%s%3N; }
quiet() { "$@" > "$TMP/quiet.out" 2>&1 || { sed 's/^/     /' "$TMP/quiet.out"; return 1; }; }

# --- the training job: steps calibrated so that it spans both failovers -------------------------
tiny_corpus 200000 "$TMP/byte"
train_ini() {  # STEPS
  cat <<INI
data = $TMP/byte
n_layer = 1
n_head = 2
d_model = 32
seq_len = 32
batch_size = 2
global_batch = 8
steps = $1
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
threads = 1
log_every = 1
eval_every = 100
eval_batches = 2
sample_every = 0
sample_tokens = 0
ckpt_every = 50
dp = 4
comm_timeout = 120
INI
}
train_ini 200 > "$TMP/cal.ini"
"${MPI[@]}" "$MT" train --config "$TMP/cal.ini" --run-dir "$TMP/cal" > "$TMP/cal.log" 2>&1 ||
  { bad "calibration run: $(tail -2 "$TMP/cal.log")"; finish db_ha; exit 1; }
# the calibration's own step rate (run.db's wall_s: without mpirun's start-up); the job gets 65 s
# of it. The reference runs beside the job and the cluster shares the cores, so the job takes
# ~1.5x that (measured): the kill comes at ~+5 s, the freeze at ~+45 s, its election at ~+70 s
CAL_S=$(sqlite3 "$TMP/cal/run.db" "SELECT max(wall_s) - min(wall_s) FROM metrics")
STEPS=$(awk -v s="$CAL_S" 'BEGIN { n = int(65 * 199 / s / 50) * 50
                                 print (n < 400 ? 400 : n > 8000 ? 8000 : n) }')
KILL_STEP=$((STEPS / 3 + 7))                 # a rank killed once: the supervisor restarts the job
train_ini "$STEPS" > "$TMP/train.ini"
echo "  .. 4-rank job (dp 4): $STEPS steps, rank 1 killed at step $KILL_STEP (calibration: 200 steps in $CAL_S s)"
"${MPI[@]}" "$MT" train --config "$TMP/train.ini" --run-dir "$TMP/ref" > "$TMP/ref.log" 2>&1 &
REF_PID=$!

# --- the cluster ------------------------------------------------------------------------------
t0=$(now_ms)
if ! ha_start; then bad "cluster up (3 etcd, 3 Patroni)"; finish db_ha; exit 1; fi
ok "cluster up in $(( ($(now_ms) - t0) / 1000 )) s: leader $(ha_leader), 2 replicas streaming, lag 0"
L1=$(ha_leader)
psql "$HA_URL" -Atq -c "CREATE TABLE ha_rows (n bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"
check "multi-host URL reaches the leader ($L1, port $(ha_port "$L1"))" \
  test "$(psql "$HA_URL" -Atq -c 'SELECT inet_server_port()')" = "$(ha_port "$L1")"
sync_named() { [ -n "$(ha_psql "$L1" 'SHOW synchronous_standby_names' | tr -d '"')" ]; }
wait_sync() { for _ in $(seq 150); do sync_named && return 0; sleep 0.2; done; return 1; }
wait_sync || true  # Patroni names the standby a loop or two after it streams
check "synchronous_mode: the leader names a synchronous standby ($(ha_psql "$L1" 'SHOW synchronous_standby_names'))" sync_named

# --- the writer: one line per attempt in $TMP/w.log: N ok|fail MS PORT -------------------------
# `timeout 8`: a frozen server keeps its TCP connection open (its kernel still answers), so only a
# client-side limit ends an insert that hangs on it; connect_timeout=2 in the URL does the same
# for each host while connecting. (statement_timeout would be wrong: a cancelled wait for the
# synchronous standby reports COMMIT as success with only a warning.)
writer() {
  local n=1 out
  while [ ! -e "$TMP/w.stop" ]; do
    if out=$(timeout 8 psql "$HA_URL" -Atq -X -v ON_ERROR_STOP=1 \
               -c "INSERT INTO ha_rows (n) VALUES ($n) ON CONFLICT (n) DO NOTHING" \
               -c "SELECT inet_server_port()" 2>/dev/null); then
      echo "$n ok $(now_ms) $out" >> "$TMP/w.log"; n=$((n + 1))
    else
      echo "$n fail $(now_ms) -" >> "$TMP/w.log"; sleep 0.2
    fi
  done
}
: > "$TMP/w.log"
writer & W_PID=$!
acked() { awk '$2 == "ok"' "$TMP/w.log" | wc -l; }
wait_acks() {  # N SECONDS: until at least N more rows are acknowledged than now
  local want=$(( $(acked) + $1 ))
  for _ in $(seq $(( $2 * 5 ))); do [ "$(acked)" -ge "$want" ] && return 0; sleep 0.2; done
  return 1
}
# outage FAULT_MS: the write outage the fault caused, in s (3 decimals): the longest gap between
# two consecutive acknowledged rows from 1 s before the fault on (an insert in flight at the fault
# may still be acknowledged just after it); then the first failed attempt to the ack ending that gap
outage() {
  awk -v f="$1" '$2 == "fail" && $3 > f && !ff { ff = $3 }
                 $2 == "ok" { if (prev && $3 > f - 1000 && $3 - prev > gap) { gap = $3 - prev; end = $3 }
                              prev = $3 }
                 END { if (!gap) { print "none"; exit }
                       printf "%.3f %.3f\n", gap / 1000, ff && ff < end ? (end - ff) / 1000 : 0 }' "$TMP/w.log"
}
within() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "none" && a + 0 <= b + 0) }'; }

# rows_ok NAME: every acknowledged number is on NAME, once, and nothing else. The writer goes on
# to N+1 only after N is acknowledged, so the rows must be exactly 1..hi, where hi is at least the
# last row acknowledged before the query and at most one more than the last acknowledged after it
# (one more: an insert whose COMMIT landed but whose reply was lost, retried since)
last_ack() { awk '$2 == "ok" { k = $1 } END { print k + 0 }' "$TMP/w.log"; }
rows_ok() {
  local got before after cnt dist lo hi
  before=$(last_ack)
  got=$(ha_psql "$1" "SELECT count(*), count(DISTINCT n), coalesce(min(n),0), coalesce(max(n),0) FROM ha_rows")
  after=$(last_ack)
  IFS='|' read -r cnt dist lo hi <<< "$got"
  ROWS_MSG="$cnt rows, $dist distinct, $lo..$hi; last acknowledged $before before the query, $after after"
  [ "$cnt" = "$dist" ] && [ "$lo" = 1 ] && [ "$hi" = "$cnt" ] &&
    [ "$hi" -ge "$before" ] && [ "$hi" -le $((after + 1)) ]
}

check "writer acknowledges rows before any fault" wait_acks 20 30

check "minitrain db init on the cluster" quiet "$MT" db init --db "$HA_URL"
"$MT" run --heartbeat-timeout 120 --backoff 0.5:2 --grace 2 --max-restarts 3 -- \
  "${MPI[@]}" "$MT" train --config "$TMP/train.ini" --run-dir "$TMP/job" --db "$HA_URL" \
  --fault "kill@step=$KILL_STEP,rank=1" > "$TMP/job.log" 2>&1 &
JOB_PID=$!
job_id() { sqlite3 "$TMP/job/run.db" "SELECT value FROM meta WHERE key = 'job_id'" 2>/dev/null; }
pg_metrics() { psql "$HA_URL" -Atq -X -c "SELECT count(*) FROM metrics WHERE job_id = '$(job_id)'" 2>/dev/null; }
shipping() { [ -n "$(job_id)" ] && [ "$(pg_metrics)" -gt 10 ] 2>/dev/null; }
check "the job ships its metrics to the cluster before the fault" mt_wait_for 60 shipping
running() { kill -0 "$JOB_PID" 2>/dev/null; }

# --- a. the primary dies ----------------------------------------------------------------------
PM1=$(ha_postmaster_pid "$L1"); SHIPPED1=$(pg_metrics)
F1=$(now_ms); ha_kill "$L1"
ha_wait_gone "$PM1" 10 || true
echo "  .. SIGKILL $L1 (Patroni $(ha_patroni_pid "$L1"), postmaster $PM1) at +$(( (F1 - t0) / 1000 )) s"
check "the job is training when the primary dies (metrics rows shipped so far: $SHIPPED1)" running
if L2=$(ha_wait_leader "$L1" 60); then ok "a replica promoted: $L2"; else bad "no new leader within 60 s"; L2=""; fi
check "writer acknowledges rows on the new primary" wait_acks 10 60
read -r OUT1 FIRSTFAIL1 <<< "$(outage "$F1")"
echo "  .. write outage after SIGKILL of the primary: $OUT1 s (first failed insert to first acknowledged: $FIRSTFAIL1 s)"
check "write outage $OUT1 s <= $OUTAGE_MAX s (ttl $HA_TTL + loop_wait $HA_LOOP_WAIT + margin)" within "$OUT1" "$OUTAGE_MAX"
check "acknowledged rows on $L2 exactly once (after SIGKILL)" rows_ok "$L2"; echo "  .. $ROWS_MSG"

ha_restart "$L1"
check "old primary $L1 rejoins: one leader, two replicas streaming, lag 0" ha_wait_healthy 90
is_replica() { [ "$(ha_rest_get "$1" /replica)" = 200 ]; }
check "$L1 rejoined as a replica (GET /replica 200)" mt_wait_for 30 is_replica "$L1"
rewound() { grep -q "pg_rewind exit code=0" "$HA_DIR/$1/patroni.log"; }
check "$L1 rejoined through pg_rewind (its log: pg_rewind exit code=0)" rewound "$L1"

# --- b. the new primary freezes ---------------------------------------------------------------
wait_acks 10 30 || true
F2=$(now_ms); ha_freeze "$L2"
echo "  .. SIGSTOP $L2 (Patroni, postmaster and its backends) at +$(( (F2 - t0) / 1000 )) s"
check "the job is training when the primary freezes" running
if L3=$(ha_wait_leader "$L2" 60); then ok "another leader elected while $L2 is frozen: $L3"; else bad "no leader while $L2 frozen"; L3=""; fi
if running; then ok "the job is still training when $L3 takes over"; else echo "  .. (the job had finished when $L3 took over)"; fi
check "writer acknowledges rows on $L3" wait_acks 5 60
read -r OUT2 FIRSTFAIL2 <<< "$(outage "$F2")"
echo "  .. write outage after SIGSTOP of the primary: $OUT2 s (first failed insert to first acknowledged: $FIRSTFAIL2 s)"
check "write outage $OUT2 s <= $OUTAGE_MAX s" within "$OUT2" "$OUTAGE_MAX"
ha_thaw "$L2"; T2=$(now_ms)
check "frozen $L2, after SIGCONT, demotes itself and rejoins (lag 0)" ha_wait_healthy 90
echo "  .. $L2 streams again $(( ($(now_ms) - T2) / 1000 )) s after SIGCONT"
check "$L2 is a replica now (GET /replica 200)" mt_wait_for 30 is_replica "$L2"
check "exactly one leader, $L3" test "$(ha_leader)" = "$L3"
check "$L2 rejoined through pg_rewind (its log: pg_rewind exit code=0)" rewound "$L2"

# --- the end: stop the writer, compare all members ----------------------------------------------
wait_acks 5 30 || true
touch "$TMP/w.stop"; wait "$W_PID" 2>/dev/null || true; W_PID=""
ha_wait_healthy 30 || true
check "no acknowledged row lost on the final primary $L3" rows_ok "$L3"; echo "  .. $ROWS_MSG"
LEADER_SUM=$(ha_psql "$L3" "SELECT count(*) || ' ' || sum(n) FROM ha_rows")
standby_same() {  # NAME SQL: NAME answers SQL as the leader does (waits for it to replay)
  local want; want=$(ha_psql "$L3" "$2")
  for _ in $(seq 50); do [ "$(ha_psql "$1" "$2" 2>/dev/null)" = "$want" ] && return 0; sleep 0.2; done
  return 1
}
for n in "${HA_MEMBERS[@]}"; do
  [ "$n" = "$L3" ] && continue
  check "standby $n holds the same rows as the primary ($LEADER_SUM)" \
    standby_same "$n" "SELECT count(*) || ' ' || sum(n) FROM ha_rows"
done

# --- c. the job: completed, the same model, every run.db row on the cluster once ----------------
rc=0; wait "$JOB_PID" || rc=$?; JOB_PID=""
check "the supervised job with --db completes (exit $rc; $(grep -c 'restart' "$TMP/job.log" || true) restart lines)" test "$rc" = 0
rc=0; wait "$REF_PID" || rc=$?; REF_PID=""
check "the reference job without --db completes (exit $rc)" test "$rc" = 0
check "parameters bit-identical with and without --db" same_params "$TMP/ref" "$TMP/job"
check "the supervisor restarted the job once (rank 1 killed at step $KILL_STEP)" \
  test "$(sqlite3 "$TMP/job/run.db" "SELECT count(*) FROM runs")" -ge 2
JOB=$(job_id)
# per table: count, rowids and a content fingerprint; the same SQL runs on run.db and on PostgreSQL
# (there filtered by the job id); checkpoints and runs are updated in place, so their state/status
# columns are compared too
fingerprint() {  # TABLE -> the SELECT list
  case $1 in
    metrics) echo "count(*) || ' ' || coalesce(sum(rowid),0) || ' ' || coalesce(sum(step),0)";;
    checkpoints) echo "count(*) || ' ' || coalesce(sum(rowid),0) || ' ' || coalesce(sum(step),0) || ' ' || sum(CASE WHEN state = 'committed' THEN 1 ELSE 0 END)";;
    runs) echo "count(*) || ' ' || coalesce(sum(rowid),0) || ' ' || sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END)";;
    *) echo "count(*) || ' ' || coalesce(sum(rowid),0)";;
  esac
}
lite_fp() { sqlite3 "$TMP/job/run.db" "SELECT $(fingerprint "$1") FROM $1"; }
pg_fp() { ha_psql "$2" "SELECT $(fingerprint "$1") FROM $1 WHERE job_id = '$JOB'"; }
pg_dups() { ha_psql "$L3" "SELECT count(*) - count(DISTINCT (node, rowid)) FROM $1 WHERE job_id = '$JOB'"; }
for t in runs metrics events checkpoints evals; do
  [ "$(lite_fp "$t")" = "$(pg_fp "$t" "$L3")" ] ||
    echo "  .. $t before the sidecar pass: run.db $(lite_fp "$t"), primary $(pg_fp "$t" "$L3")"
done
# what the job's own shippers did not send (rows the supervisor wrote after the last trainer
# exited) a sidecar `db ship` sends now: it must find the rest, and send nothing twice
check "minitrain db ship --run (a sidecar's pass after the job)" quiet "$MT" db ship --run "$TMP/job" --db "$HA_URL"
for t in runs metrics events checkpoints evals; do
  want=$(lite_fp "$t")
  check "$t: run.db ($want) = primary $L3, no duplicate" \
    test "$(pg_fp "$t" "$L3") dups=$(pg_dups "$t")" = "$want dups=0"
  for n in "${HA_MEMBERS[@]}"; do
    [ "$n" = "$L3" ] && continue
    check "$t: standby $n = primary" standby_same "$n" "SELECT $(fingerprint "$t") FROM $t WHERE job_id = '$JOB'"
  done
done
med() { sqlite3 "$1/run.db" "SELECT printf('%.2f', step_ms) FROM metrics ORDER BY step_ms LIMIT 1 OFFSET (SELECT count(*)/2 FROM metrics)"; }
echo "  .. median step time: $(med "$TMP/job") ms with --db, $(med "$TMP/ref") ms without (the two ran side by side)"

RETRIES=$(awk '$2 == "fail"' "$TMP/w.log" | wc -l)
finish db_ha "(outages: kill $OUT1 s, freeze $OUT2 s; $(acked) rows acknowledged, $RETRIES failed attempts retried)"
