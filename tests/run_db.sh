#!/usr/bin/env bash
# tests/run_db.sh — the team's database (issue 25, db/): run.db shipped to a real PostgreSQL 15.
#
# Starts one PostgreSQL 15 on 127.0.0.1:16500 from this test's temp dir (initdb + postgres as the
# postgres user: PostgreSQL refuses root) and checks:
#   - db init twice: the schema created once, the second run changes nothing;
#   - a train with --db ships every row of every table exactly once (run.db's count = the
#     server's), its parameters bit-identical to the same run without --db; db ship after it
#     adds nothing;
#   - the server SIGKILLed mid-run (postmaster and backends, by pid): the job trains on and
#     completes bit-identical, says "database unavailable" once, the server holds fewer rows
#     than run.db; after a restart `db ship --run` brings every row exactly once, and again
#     nothing;
#   - the server frozen (SIGSTOP) under `db ship --follow`: the statement deadline drops the
#     connection, one message, every row once after the thaw;
#   - the supervisor with --db (a rank killed, one restart) ships both runs and its own events;
#   - the sidecar `db ship --follow` beside a train without --db ships it all and exits 0;
#   - report --db --run JOB_ID equals report --run DIR (--json, field by field), names the
#     server (primary, port 16500), and finds the job by name too; db runs lists the jobs;
#   - dashboard --db: the runs page lists every job, a job's page draws the loss curve report
#     --html draws from its run.db, a job shipped later appears live, the mirror is removed;
#   - a bad URL, a refused connection, a read-only server, a schema from a newer minitrain, no
#     run.db: one line each.
# Skips only when the PostgreSQL 15 server binaries or psql are absent. About 2 min on the loaded
# 2-core VM.
set -euo pipefail
cd "$(dirname "$0")/.."
MT=./minitrain
. tests/lib.sh
. tests/pg_lib.sh
PORT=16500
if ! pg_have; then
  echo "  skip PostgreSQL 15 server binaries ($PGBIN) or psql missing (apt-get install postgresql-15)"
  finish db
  exit 0
fi
probe=$($MT db init --db "postgresql://127.0.0.1:1/x?connect_timeout=1" 2>&1 || true)
if [[ "$probe" == *"built without libpq"* ]]; then
  echo "  skip this minitrain was built without libpq (libpq-dev)"
  finish db
  exit 0
fi
tmp_dir mt_db
on_exit() { pg_stop; }
pg_init "$TMP/pg" "$PORT"
pg_start
psql -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE DATABASE minitrain" postgres
U="postgresql://postgres@127.0.0.1:$PORT/minitrain"
q() { pg_q "$1"; }
job_of() { sqlite3 "$1/run.db" "SELECT value FROM meta WHERE key='job_id'"; }
TABLES="runs metrics events checkpoints evals"
# every table: run.db's row count equals the server's for that job (the keys forbid duplicates,
# so equal counts are every row once)
same_rows() {
  local dir=$1 job t a b
  job=$(job_of "$dir")
  for t in $TABLES; do
    a=$(sqlite3 "$dir/run.db" "SELECT COUNT(*) FROM $t")
    b=$(q "SELECT COUNT(*) FROM $t WHERE job_id = '$job'")
    [ "$a" = "$b" ] || { echo "    $t: run.db $a rows, server $b" >&2; return 1; }
  done
}

# ---- schema ------------------------------------------------------------------------------------
$MT db init --db "$U" >"$TMP/init1" 2>&1 || true
$MT db init --db "$U" >"$TMP/init2" 2>&1 || true
check "db init creates the schema (0 -> 1)" grep -q "migrated from version 0 to 1" "$TMP/init1"
check "db init again changes nothing" grep -q "already at version 1" "$TMP/init2"
check "one schema_version row, one cluster id" [ "$(q "SELECT COUNT(*) FROM schema_version")/$(q "SELECT COUNT(*) FROM cluster")" = 1/1 ]

# ---- a clean run with --db, against the same run without --db ----------------------------------
tiny_corpus 200000 "$TMP/byte"
cat > "$TMP/tiny.ini" <<INI
[model]
n_layer = 2
n_head = 2
d_model = 32
seq_len = 32
[train]
batch_size = 4
global_batch = 8
steps = 400
lr = 3e-3
warmup_steps = 5
[run]
threads = 1
log_every = 50
eval_every = 200
eval_batches = 2
sample_every = 0
ckpt_every = 100
INI
TRAIN=($MT train --config "$TMP/tiny.ini" --data "$TMP/byte")
"${TRAIN[@]}" --run-dir "$TMP/ref" >"$TMP/ref.log" 2>&1
"${TRAIN[@]}" --run-dir "$TMP/a" --db "$U" >"$TMP/a.log" 2>"$TMP/a.err"
check "train --db: every row of every table on the server once" same_rows "$TMP/a"
check "train --db: parameters bit-identical to the run without --db" same_params "$TMP/ref" "$TMP/a"
check "train --db: no database warning" [ "$(grep -c "database unavailable" "$TMP/a.err" || true)" = 0 ]
$MT db ship --run "$TMP/a" --db "$U" >"$TMP/ship_a" 2>&1
check "db ship after the trainer's shipper adds nothing" grep -q "^shipped 0 rows" "$TMP/ship_a"
check "... and the counts still agree" same_rows "$TMP/a"

# ---- the server killed mid-run -----------------------------------------------------------------
"${TRAIN[@]}" --run-dir "$TMP/b" --db "$U" >"$TMP/b.log" 2>"$TMP/b.err" &
B_PID=$!
PIDS+=("$B_PID")
shipped_some=0
for _ in $(seq 600); do
  if [ -f "$TMP/b/run.db" ] && JB=$(job_of "$TMP/b" 2>/dev/null) && [ -n "$JB" ] &&
     [ "$(q "SELECT COUNT(*) FROM metrics WHERE job_id = '$JB'" 2>/dev/null || echo 0)" -ge 10 ]; then
    shipped_some=1; break
  fi
  kill -0 "$B_PID" 2>/dev/null || break
  sleep 0.1
done
check "run b: rows reach the server while it trains" [ "$shipped_some" = 1 ]
check "run b: still training when the server is killed" kill -0 "$B_PID"
pg_kill
B_RC=0; wait "$B_PID" || B_RC=$?
check "run b: the job completes with the server down (exit 0)" [ "$B_RC" = 0 ]
check "run b: parameters bit-identical to the run without --db" same_params "$TMP/ref" "$TMP/b"
check "run b: says 'database unavailable' once" [ "$(grep -c "database unavailable" "$TMP/b.err" || true)" = 1 ]
check "run b: names the way out (db ship)" grep -q "minitrain db ship --run" "$TMP/b.err"
pg_start
m_lite=$(sqlite3 "$TMP/b/run.db" "SELECT COUNT(*) FROM metrics")
m_srv=$(q "SELECT COUNT(*) FROM metrics WHERE job_id = '$(job_of "$TMP/b")'")
check "run b: the server missed rows during the outage ($m_srv of $m_lite metrics)" [ "$m_srv" -lt "$m_lite" ]
$MT db ship --run "$TMP/b" --db "$U" >"$TMP/ship_b1" 2>&1 || cat "$TMP/ship_b1"
check "db ship after the restart: every row exactly once" same_rows "$TMP/b"
$MT db ship --run "$TMP/b" --db "$U" >"$TMP/ship_b2" 2>&1
check "db ship again adds nothing" grep -q "^shipped 0 rows" "$TMP/ship_b2"

# ---- the server frozen mid-run (SIGSTOP: its TCP connection stays open) -------------------------
# A frozen server answers nothing and closes nothing; the shipper's statement deadline (here 2 s,
# MINITRAIN_DB_DEADLINE_S) drops the connection instead of waiting for the thaw.
"${TRAIN[@]}" --steps 1500 --run-dir "$TMP/f" >"$TMP/f.log" 2>&1 &
FT_PID=$!
PIDS+=("$FT_PID")
for _ in $(seq 600); do [ -n "$(job_of "$TMP/f" 2>/dev/null)" ] && break; sleep 0.05; done
MINITRAIN_DB_DEADLINE_S=2 $MT db ship --run "$TMP/f" --follow --poll 0.2 --db "$U" \
  >"$TMP/fz.out" 2>"$TMP/fz.err" &
FZ_PID=$!
PIDS+=("$FZ_PID")
for _ in $(seq 600); do
  [ -f "$TMP/f/run.db" ] && JF=$(job_of "$TMP/f" 2>/dev/null) && [ -n "$JF" ] &&
    [ "$(q "SELECT COUNT(*) FROM events WHERE job_id = '$JF'" 2>/dev/null || echo 0)" -ge 1 ] && break
  sleep 0.1
done
frozen=$(ps -o pid= --ppid "$PG_PID" 2>/dev/null | tr '\n' ' ')
kill -STOP "$PG_PID" $frozen
sleep 6
kill -CONT "$PG_PID" $frozen
FT_RC=0; wait "$FT_PID" || FT_RC=$?
FZ_RC=0; wait "$FZ_PID" || FZ_RC=$?
sed 's/^/    db ship: /' "$TMP/fz.err" | head -4
check "frozen server: db ship --follow gives up on the statement after the deadline" \
  grep -q "no answer from the server within 2 s" "$TMP/fz.err"
check "frozen server: said once for the outage" [ "$(grep -c "database unavailable" "$TMP/fz.err" || true)" = 1 ]
check "frozen server: --follow exits 0 after the thaw (train exit $FT_RC)" [ "$FZ_RC" = 0 ]
check "frozen server: every row of the run once" same_rows "$TMP/f"

# ---- the supervisor ships (a rank killed, one restart) -----------------------------------------
$MT run --backoff 0.1:0.3 --grace 2 --max-restarts 3 --db "$U" -- "${TRAIN[@]}" --steps 40 \
  --run-dir "$TMP/sup" --fault kill@step=25 >"$TMP/sup.log" 2>&1 || true
check "run --db: both runs and the supervisor's events shipped once" same_rows "$TMP/sup"
check "run --db: the server has its supervisor_end" [ "$(q "SELECT COUNT(*) FROM events WHERE job_id = '$(job_of "$TMP/sup")' AND kind = 'supervisor_end'")" = 1 ]

# ---- the sidecar: db ship --follow beside a train without --db ------------------------------------
"${TRAIN[@]}" --run-dir "$TMP/c" >"$TMP/c.log" 2>&1 &
C_PID=$!
PIDS+=("$C_PID")
for _ in $(seq 600); do [ -f "$TMP/c/run.db" ] && break; sleep 0.05; done
$MT db ship --run "$TMP/c" --follow --poll 0.2 --db "$U" >"$TMP/follow.out" 2>"$TMP/follow.err" &
F_PID=$!
PIDS+=("$F_PID")
C_RC=0; wait "$C_PID" || C_RC=$?
F_RC=0; wait "$F_PID" || F_RC=$?
check "db ship --follow: exits 0 once the run has ended (train exit $C_RC)" [ "$F_RC" = 0 ]
check "db ship --follow: every row of the finished run once" same_rows "$TMP/c"
check "db ship --follow: the run's end row (completed) shipped" [ "$(q "SELECT status FROM runs WHERE job_id = '$(job_of "$TMP/c")'")" = completed ]

# ---- reads ---------------------------------------------------------------------------------------
JB=$(job_of "$TMP/b")
$MT report --run "$TMP/b" --json >"$TMP/rep_lite.json"
$MT report --db "$U" --run "$JB" --json >"$TMP/rep_pg.json"
cmp_reports() {
  /usr/bin/python3 - "$TMP/rep_lite.json" "$TMP/rep_pg.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
src = b.pop("source", None)
diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
if diff or src is None:
    print("    differing keys:", diff, "source:", src, file=sys.stderr)
    sys.exit(1)
PY
}
check "report --db --json equals report from run.db, field by field" cmp_reports
src=$(/usr/bin/python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["source"]; print(s["port"], s["in_recovery"], s["job_id"])' "$TMP/rep_pg.json")
check "report --db names the server: port $PORT, a primary, the job" [ "$src" = "$PORT False $JB" ]
$MT report --db "$U" --run tiny >"$TMP/rep_name.txt" 2>&1 || true
check "report --db --run NAME: the newest job of that name, server line first" \
  grep -q "^database: *127.0.0.1:$PORT (primary), job $(job_of "$TMP/c")" "$TMP/rep_name.txt"
$MT db runs --db "$U" --json >"$TMP/runs.json"
check "db runs lists the five jobs" [ "$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$TMP/runs.json")" = 5 ]
check "db runs --status completed --since 1h" [ "$($MT db runs --db "$U" --status completed --since 1h | tail -n +2 | wc -l)" = 5 ]
check "db runs --since tomorrow: none" [ "$($MT db runs --db "$U" --since "$(date -u -d tomorrow +%F)" | tail -n +2 | wc -l)" = 0 ]

# ---- the dashboard on the database (dashboard --db: the jobs mirrored as run.db files) ----------
mkdir -p "$TMP/dtmp" # the mirror's temporary directory, to see it removed
start_bg dash "listening on http://127.0.0.1:" env TMPDIR="$TMP/dtmp" $MT dashboard --db "$U" --port 0 --poll-ms 300
curl -s -o "$TMP/dash_runs.html" "$URL_dash/"
dash_dir() { grep -o "data-dir=\"[^\"]*-${1:0:8}\"" "$TMP/dash_runs.html" | head -1 | cut -d'"' -f2; }
DB_DIR=$(dash_dir "$JB")
check "dashboard --db: the runs page lists every job of the database (5)" \
  [ "$(grep -o 'data-dir="[^"]*"' "$TMP/dash_runs.html" | sort -u | wc -l)" = 5 ]
check "dashboard --db: job $JB's row reads completed" grep -q "data-status=\"completed\" data-dir=\"$DB_DIR\"" "$TMP/dash_runs.html"
code=$(curl -s -o "$TMP/dash_run.html" -w '%{http_code}' -G "$URL_dash/run" --data-urlencode "dir=$DB_DIR")
$MT report --run "$TMP/b" --html "$TMP/b_report.html" >/dev/null 2>&1
same_loss_picture() { # the run page draws the loss picture report --html draws from run.db
  /usr/bin/python3 - "$TMP/b_report.html" "$TMP/dash_run.html" <<'PY'
import re, sys
a, b = (open(p).read() for p in sys.argv[1:3])
pa, pb = (re.findall(r'<polyline[^>]*points="([^"]+)"', x) for x in (a, b))
sys.exit(0 if pa and pa[0] in pb else 1)
PY
}
same_page() { [ "$code" = 200 ] && same_loss_picture; }
check "dashboard --db: the job's page (HTTP $code) draws the same loss curve as report --html of its run.db" same_page
"$MT" train --config "$TMP/tiny.ini" --data "$TMP/byte" --steps 5 --run-dir "$TMP/late" --db "$U" >/dev/null 2>&1
JL=$(job_of "$TMP/late")
seen=0
for _ in $(seq 50); do
  curl -s -o "$TMP/dash_runs.html" "$URL_dash/"
  [ -n "$(dash_dir "$JL")" ] && { seen=1; break; }
  sleep 0.2
done
check "dashboard --db: a job shipped after the dashboard started appears within 10 s" [ "$seen" = 1 ]
stop_pid "$PID_dash" && dash_rc=0 || dash_rc=$?
check "dashboard --db: SIGTERM stops it (exit $dash_rc) and removes its mirror" \
  [ "$dash_rc" = 0 ] && [ -z "$(ls -A "$TMP/dtmp")" ]
ONE_ERROR_LINE=1 expect_exit 2 "dashboard --db at a refused port" $MT dashboard --db "postgresql://postgres@127.0.0.1:16501/minitrain" --port 0

# ---- bad input and faults: one line each -------------------------------------------------------
ONE_ERROR_LINE=1 expect_exit 2 "db init with a URL libpq cannot parse" $MT db init --db "postgresql://[oops"
check "... says 'bad database URL'" grep -q "bad database URL" "$TMP/err"
expect_exit 1 "db ship to a refused port" $MT db ship --run "$TMP/a" --db "postgresql://postgres@127.0.0.1:16501/minitrain"
one_line_saying() { [ "$(wc -l <"$TMP/err")" = 1 ] && grep -q "$1" "$TMP/err"; }
check "... one line, 'cannot connect'" one_line_saying "cannot connect"
"$MT" train --config "$TMP/tiny.ini" --data "$TMP/byte" --steps 5 --run-dir "$TMP/ro" >/dev/null 2>&1
q "ALTER DATABASE minitrain SET default_transaction_read_only = on" >/dev/null
expect_exit 1 "db ship to a read-only server" $MT db ship --run "$TMP/ro" --db "$U"
check "... one line, SQLSTATE 25006" one_line_saying "read-only transaction (SQLSTATE 25006)"
PGOPTIONS="-c default_transaction_read_only=off" q "ALTER DATABASE minitrain SET default_transaction_read_only = off" >/dev/null
q "INSERT INTO schema_version(version, minitrain) VALUES (99, 'future')" >/dev/null
ONE_ERROR_LINE=1 expect_exit 2 "db init on a schema from a newer minitrain" $MT db init --db "$U"
check "... says so" grep -q "newer minitrain" "$TMP/err"
expect_exit 2 "db ship on a schema from a newer minitrain" $MT db ship --run "$TMP/a" --db "$U"
q "DELETE FROM schema_version WHERE version = 99" >/dev/null
ONE_ERROR_LINE=1 expect_exit 2 "db ship without run.db" $MT db ship --run "$TMP/nothing" --db "$U"
ONE_ERROR_LINE=1 expect_exit 2 "report --db of an unknown job" $MT report --db "$U" --run no-such-job
ONE_ERROR_LINE=1 expect_exit 2 "db runs --status bogus" $MT db runs --db "$U" --status bogus
finish db
