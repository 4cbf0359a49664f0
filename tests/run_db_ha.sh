#!/usr/bin/env bash
# tests/run_db_ha.sh — the real highly available PostgreSQL cluster of issue 25 (tests/pg_ha_lib.sh:
# 3 etcd members, 3 PostgreSQL 15 under Patroni, synchronous_mode, ttl 20) survives the two faults
# a database node has, with a client writing through the libpq multi-host URL the whole time:
#   a. the primary dies (SIGKILL to its Patroni and postmaster): a replica is promoted; the write
#      outage (last acknowledged insert before the fault to the first after it) is measured,
#      printed, and held to ttl + loop_wait + 18 s; every acknowledged row is on the new primary
#      exactly once; the old primary, restarted, rejoins as a replica (pg_rewind) with lag 0;
#   b. the new primary freezes (SIGSTOP): another leader is elected; after SIGCONT the frozen node
#      demotes itself and rejoins; no acknowledged row lost; row counts equal on all three.
# The writer is a psql loop (one numbered row per transaction, INSERT … ON CONFLICT DO NOTHING on
# the row's number, as the outbox shipper keys its rows): a row is "acknowledged" when COMMIT
# returned, which under synchronous_mode means it is on the primary and on a synchronous standby.
# A failed or timed-out insert is retried with the same number until acknowledged.
# Skips (exit 0) when etcd, Patroni or PostgreSQL 15 is not installed. ~2 min on a quiet machine.
set -euo pipefail
. tests/lib.sh
. tests/pg_ha_lib.sh
if ! ha_have; then
  echo "  skip etcd/patroni/postgresql-15 not installed (make test-deps)"
  finish db_ha "(skipped)"; exit 0
fi
tmp_dir mt_db_ha
on_exit() { [ -n "${W_PID:-}" ] && kill "$W_PID" 2>/dev/null; ha_stop; }
OUTAGE_MAX=$((HA_TTL + HA_LOOP_WAIT + 18))  # 40 s: the lease, one Patroni loop, a loaded machine

now_ms() { date +%s%3N; }

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
role_of() {
  ha_members_json | /usr/bin/python3 -c "import json,sys
print(*[m['role'] + '/' + m['state'] + '/lag=' + str(m.get('lag', '-')) for m in json.load(sys.stdin)['members'] if m['name'] == '$1'])"
}

check "writer acknowledges rows before any fault" wait_acks 20 30

# --- a. the primary dies ----------------------------------------------------------------------
PM1=$(ha_postmaster_pid "$L1")
F1=$(now_ms); ha_kill "$L1"
ha_wait_gone "$PM1" 10 || true
echo "  .. SIGKILL $L1 (Patroni $(ha_patroni_pid "$L1"), postmaster $PM1) at +$(( (F1 - t0) / 1000 )) s"
if L2=$(ha_wait_leader "$L1" 60); then ok "a replica promoted: $L2"; else bad "no new leader within 60 s"; L2=""; fi
check "writer acknowledges rows on the new primary" wait_acks 10 60
read -r OUT1 FIRSTFAIL1 <<< "$(outage "$F1")"
echo "  .. write outage after SIGKILL of the primary: $OUT1 s (first failed insert to first acknowledged: $FIRSTFAIL1 s)"
check "write outage $OUT1 s <= $OUTAGE_MAX s (ttl $HA_TTL + loop_wait $HA_LOOP_WAIT + margin)" within "$OUT1" "$OUTAGE_MAX"
check "acknowledged rows on $L2 exactly once (after SIGKILL)" rows_ok "$L2"; echo "  .. $ROWS_MSG"

ha_restart "$L1"
check "old primary $L1 rejoins: one leader, two replicas streaming, lag 0" ha_wait_healthy 90
echo "  .. $L1 is $(role_of "$L1")"
check "$L1 rejoined as a replica" test "$(ha_rest_get "$L1" /replica)" = 200
rewound() { grep -q "pg_rewind exit code=0" "$HA_DIR/$1/patroni.log"; }
check "$L1 rejoined through pg_rewind (its log: pg_rewind exit code=0)" rewound "$L1"

# --- b. the new primary freezes ---------------------------------------------------------------
wait_acks 10 30 || true
F2=$(now_ms); ha_freeze "$L2"
echo "  .. SIGSTOP $L2 (Patroni, postmaster and its backends) at +$(( (F2 - t0) / 1000 )) s"
if L3=$(ha_wait_leader "$L2" 60); then ok "another leader elected while $L2 is frozen: $L3"; else bad "no leader while $L2 frozen"; L3=""; fi
check "writer acknowledges rows on $L3" wait_acks 5 60
read -r OUT2 FIRSTFAIL2 <<< "$(outage "$F2")"
echo "  .. write outage after SIGSTOP of the primary: $OUT2 s (first failed insert to first acknowledged: $FIRSTFAIL2 s)"
check "write outage $OUT2 s <= $OUTAGE_MAX s" within "$OUT2" "$OUTAGE_MAX"
ha_thaw "$L2"; T2=$(now_ms)
check "frozen $L2, after SIGCONT, demotes itself and rejoins (lag 0)" ha_wait_healthy 90
echo "  .. $L2 rejoined $(( ($(now_ms) - T2) / 1000 )) s after SIGCONT: $(role_of "$L2")"
check "$L2 is a replica now" test "$(ha_rest_get "$L2" /replica)" = 200
check "exactly one leader, $L3" test "$(ha_leader)" = "$L3"
check "$L2 rejoined through pg_rewind (its log: pg_rewind exit code=0)" rewound "$L2"

# --- the end: stop the writer, compare all members ----------------------------------------------
wait_acks 5 30 || true
touch "$TMP/w.stop"; wait "$W_PID" 2>/dev/null || true; W_PID=""
ha_wait_healthy 30 || true
check "no acknowledged row lost on the final primary $L3" rows_ok "$L3"; echo "  .. $ROWS_MSG"
LEADER_SUM=$(ha_psql "$L3" "SELECT count(*) || ' ' || sum(n) FROM ha_rows")
for n in "${HA_MEMBERS[@]}"; do
  [ "$n" = "$L3" ] && continue
  # a standby replays what the primary committed within its lag; wait for the last row to arrive
  for _ in $(seq 50); do [ "$(ha_psql "$n" "SELECT count(*) || ' ' || sum(n) FROM ha_rows" 2>/dev/null)" = "$LEADER_SUM" ] && break; sleep 0.2; done
  check "standby $n holds the same rows as the primary ($LEADER_SUM)" \
    test "$(ha_psql "$n" "SELECT count(*) || ' ' || sum(n) FROM ha_rows")" = "$LEADER_SUM"
done
RETRIES=$(awk '$2 == "fail"' "$TMP/w.log" | wc -l)
finish db_ha "(outages: kill $OUT1 s, freeze $OUT2 s; $(acked) rows acknowledged, $RETRIES failed attempts retried)"
