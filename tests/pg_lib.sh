# tests/pg_lib.sh — one throwaway PostgreSQL 15 on loopback, for tests/run_db.sh and
# bench/bench_db_ship.sh (the Patroni cluster of tests/run_db_ha.sh has its own harness).
#
#   pg_have                 PostgreSQL 15's server binaries and psql are installed
#   pg_init DIR PORT        initdb into DIR/data (as the postgres user when run as root: PostgreSQL
#                           refuses root), sockets in DIR/sock; sets PG_DIR, PG_PORT
#   pg_start                start the server on 127.0.0.1:PG_PORT (fsync off: a test's data) and
#                           wait until it answers; PG_PID = the postmaster's pid
#   pg_kill                 SIGKILL the postmaster and every backend, by pid (a crashed machine)
#   pg_stop                 fast shutdown (SIGINT) by pid, SIGKILL after 10 s
#   pg_q SQL [DB]           psql -At -c SQL as postgres (DB default minitrain)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_PID=""
PG_RUN=()
[ "$(id -u)" = 0 ] && PG_RUN=(runuser -u postgres --)
pg_have() { [ -x "$PGBIN/postgres" ] && [ -x "$PGBIN/initdb" ] && command -v psql >/dev/null; }
pg_init() {
  PG_DIR=$1 PG_PORT=$2
  chmod 711 "$(dirname "$PG_DIR")"
  mkdir -p "$PG_DIR/sock"
  [ "$(id -u)" = 0 ] && chown postgres "$PG_DIR" "$PG_DIR/sock"
  "${PG_RUN[@]}" "$PGBIN/initdb" -D "$PG_DIR/data" -U postgres -A trust --no-sync >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log"; echo "initdb failed"; exit 1; }
}
pg_start() {
  "${PG_RUN[@]}" "$PGBIN/postgres" -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR/sock" \
    -c listen_addresses=127.0.0.1 -c fsync=off >>"$PG_DIR/pg.log" 2>&1 &
  for _ in $(seq 400); do
    if psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -Atc "SELECT 1" postgres >/dev/null 2>&1; then
      PG_PID=$(head -1 "$PG_DIR/data/postmaster.pid"); return 0
    fi
    sleep 0.05
  done
  tail -5 "$PG_DIR/pg.log"; echo "postgres did not start"; exit 1
}
pg_kill() {
  [ -n "$PG_PID" ] || return 0
  local kids
  kids=$(ps -o pid= --ppid "$PG_PID" 2>/dev/null || true)
  kill -9 "$PG_PID" $kids 2>/dev/null || true
  for _ in $(seq 200); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.05; done
  PG_PID=""
}
pg_stop() {
  [ -n "$PG_PID" ] || return 0
  kill -INT "$PG_PID" 2>/dev/null || true
  for _ in $(seq 200); do kill -0 "$PG_PID" 2>/dev/null || { PG_PID=""; return 0; }; sleep 0.05; done
  pg_kill
}
pg_q() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -Atc "$1" "${2:-minitrain}"; }
