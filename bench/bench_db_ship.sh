#!/usr/bin/env bash
# bench/bench_db_ship.sh — rows shipped per second from run.db into PostgreSQL, from 1, 4 and 16
# jobs shipping at once (`minitrain db ship`, one process per job, as sidecars would).
# One throwaway PostgreSQL 15 on 127.0.0.1:16501 (tests/pg_lib.sh; fsync off, so this measures
# minitrain's batching and the server's CPU, not a disk). A 5-step train makes a template run.db;
# each job is a copy with its own job id and ROWS metrics rows added by SQLite. Printed per job
# count: the wall time of all the ships, rows/s in total and per job, and a check that the
# server holds every row once. The machine may be shared: the load average is printed.
#
#   make && bash bench/bench_db_ship.sh [ROWS=20000] [MINITRAIN=./minitrain]
set -euo pipefail
ROWS=${1:-20000}
BIN=${2:-./minitrain}
cd "$(dirname "$0")/.."
[ -x "$BIN" ] || { echo "bench_db_ship: $BIN missing (run: make)" >&2; exit 2; }
. tests/pg_lib.sh
pg_have || { echo "bench_db_ship: PostgreSQL 15 missing (apt-get install postgresql-15)" >&2; exit 2; }
TMP=$(mktemp -d /tmp/mt_bdb_XXXXXX)
cleanup() { pg_stop; rm -rf "$TMP"; }
trap cleanup EXIT
pg_init "$TMP/pg" 16501
pg_start
pg_q "CREATE DATABASE minitrain" postgres >/dev/null
U="postgresql://postgres@127.0.0.1:16501/minitrain"
"$BIN" db init --db "$U" >/dev/null
head -c 100000 examples/data/tinyshakespeare.txt > "$TMP/small.txt"
"$BIN" prepare --input "$TMP/small.txt" --out "$TMP/byte" >/dev/null
"$BIN" train --data "$TMP/byte" --run-dir "$TMP/template" --steps 5 --n-layer 1 --n-head 1 \
  --d-model 16 --seq-len 16 --batch-size 2 --global-batch 2 --threads 1 >/dev/null 2>&1
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $ROWS metrics rows per job, batches of 500"
printf "%5s  %8s  %12s  %12s  %s\n" jobs wall_s rows_per_s per_job_per_s check
for n in 1 4 16; do
  for i in $(seq "$n"); do
    d="$TMP/j$n-$i"
    mkdir -p "$d"
    cp "$TMP/template/run.db" "$d/run.db"
    sqlite3 "$d/run.db" "DELETE FROM meta WHERE key = 'job_id';
      INSERT INTO meta VALUES('job_id', lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) ||
        '-4' || substr(hex(randomblob(2)), 2) || '-a' || substr(hex(randomblob(2)), 2) || '-' ||
        hex(randomblob(6))));
      WITH RECURSIVE k(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM k WHERE x < $ROWS)
      INSERT INTO metrics(run_id, step, train_loss, lr, grad_norm, tokens_per_s, mfu, step_ms, wall_s)
        SELECT 1, x, 3.0 + 1.0 / x, 1e-3, 0.5, 12345.6, 0.4, 12.5, x * 0.0125 FROM k;"
  done
  total=$(( n * $(sqlite3 "$TMP/j$n-1/run.db" "SELECT (SELECT COUNT(*) FROM runs) + (SELECT COUNT(*) FROM metrics) + (SELECT COUNT(*) FROM events) + (SELECT COUNT(*) FROM checkpoints)") ))
  t0=$(date +%s.%N)
  pids=()
  for i in $(seq "$n"); do "$BIN" db ship --run "$TMP/j$n-$i" --db "$U" >/dev/null & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  on_server=0
  for i in $(seq "$n"); do
    j=$(sqlite3 "$TMP/j$n-$i/run.db" "SELECT value FROM meta WHERE key = 'job_id'")
    on_server=$(( on_server + $(pg_q "SELECT (SELECT COUNT(*) FROM runs WHERE job_id = '$j') + (SELECT COUNT(*) FROM metrics WHERE job_id = '$j') + (SELECT COUNT(*) FROM events WHERE job_id = '$j') + (SELECT COUNT(*) FROM checkpoints WHERE job_id = '$j')") ))
  done
  awk -v n="$n" -v r="$total" -v a="$t0" -v b="$t1" -v s="$on_server" 'BEGIN {
    w = b - a; printf "%5d  %8.2f  %12.0f  %12.0f  %s\n", n, w, r / w, r / w / n,
    (s == r ? "every row once" : "MISMATCH " s " of " r) }'
done
