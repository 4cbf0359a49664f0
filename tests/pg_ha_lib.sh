# tests/pg_ha_lib.sh — a real highly available PostgreSQL cluster on loopback for the database
# tests (issue 25): a 3-member etcd (the Raft store that holds Patroni's leader key) and three
# PostgreSQL 15 instances, each under its own Patroni, with synchronous replication. Sourced after
# tests/lib.sh (needs TMP). Nothing here depends on, or touches, the default cluster Debian's
# postgresql-15 package may have started on port 5432.
#
# Defines:
#   ha_have                0 when etcd, etcdctl, patroni, patronictl, psql and PostgreSQL 15's
#                          binaries are installed (else a test skips)
#   ha_start               etcd e1..e3, then Patroni pg1..pg3 (their configs under $TMP/ha), waits
#                          for a leader with both replicas streaming, creates database "minitrain".
#                          Sets HA_URL (the libpq multi-host URL, read-write) and HA_URL_ANY
#   ha_stop                SIGTERM to every Patroni by pid (it stops its postmaster), then SIGQUIT
#                          to any postmaster left and SIGTERM to each etcd; waits for each pid
#   ha_leader              the name (pg1..pg3) of the member whose REST API answers GET /leader 200
#   ha_wait_leader [NOT] [S]  waits up to S s (default 60) for a leader other than NOT; prints it
#   ha_healthy [BYTES]     one leader, both others streaming from it, replay <= BYTES behind (0)
#   ha_wait_healthy [S] [BYTES]   waits up to S s (default 90) for ha_healthy
#   ha_port NAME / ha_rest NAME   postgres / REST port of member NAME
#   ha_patroni_pid NAME / ha_postmaster_pid NAME   the pids (Patroni's from its pidfile,
#                          the postmaster's from the first line of its postmaster.pid)
#   ha_kill NAME           SIGKILL to NAME's Patroni and postmaster (a node that dies)
#   ha_freeze NAME / ha_thaw NAME   SIGSTOP / SIGCONT to NAME's Patroni, postmaster and backends
#                          (a node that hangs)
#   ha_restart NAME        starts NAME's Patroni again on its old data directory
#   ha_psql NAME SQL [DB]  psql -Atq as postgres against member NAME's database DB (minitrain)
#   ha_members_json        patronictl's view: GET /cluster of any live member's REST API
#
# Ports: the helper's fixed range 16510-16549 — etcd clients 16510-16512, etcd peers 16520-16522,
# postgres 16530-16532, Patroni REST 16540-16542. Timing is the issue's: ttl 20 (the leader key's
# lease), loop_wait 2, retry_timeout 5, so a dead primary is replaced within ttl + loop_wait.
# Patroni talks to etcd through the v2 API (`etcd:` in its config, python3-etcd; etcd 3.4 serves
# it with --enable-v2), not the v3 one (`etcd3:`): Debian 12's Patroni 3.0.2 has, in its etcd3
# client, a split brain that this test's frozen primary hit (issue 25): a leader frozen past the
# TTL wakes with its lease gone, takes a new one, and its _update_leader() then PUTs the leader
# key unconditionally over the member elected meanwhile — both run as primary, and the rows
# acknowledged by the other one are rewound away. Fixed upstream in Patroni 3.0.3 (pull request
# patroni/patroni#2689, "make sure the leader key isn't unconditionally overwritten"). The v2
# client renews the key with a compare-and-swap on its value (prevValue = own name), so a woken
# leader that lost the key fails the swap and demotes. HA_DCS=etcd3 selects the v3 client. Everything PostgreSQL runs as user postgres (runuser), since it
# refuses root; etcd runs as the test's user.
HA_ETCD_PORT=16510; HA_PEER_PORT=16520; HA_PG_PORT=16530; HA_REST_PORT=16540
HA_TTL=20; HA_LOOP_WAIT=2; HA_RETRY_TIMEOUT=5
HA_PGBIN=/usr/lib/postgresql/15/bin
HA_DCS=${HA_DCS:-etcd}   # Patroni's etcd v2 client (see above); etcd3 to try the v3 one
HA_MEMBERS=(pg1 pg2 pg3)
HA_ETCD_PIDS=()
HA_URL="postgresql://127.0.0.1:16530,127.0.0.1:16531,127.0.0.1:16532/minitrain?target_session_attrs=read-write&connect_timeout=2&user=postgres"
HA_URL_ANY="postgresql://127.0.0.1:16530,127.0.0.1:16531,127.0.0.1:16532/minitrain?connect_timeout=2&user=postgres"

ha_have() {
  command -v etcd >/dev/null && command -v etcdctl >/dev/null && command -v patroni >/dev/null &&
    command -v patronictl >/dev/null && command -v psql >/dev/null && [ -x "$HA_PGBIN/postgres" ] &&
    id postgres >/dev/null 2>&1
}

ha_idx()  { echo $(( ${1#pg} - 1 )); }
ha_port() { echo $(( HA_PG_PORT + $(ha_idx "$1") )); }
ha_rest() { echo $(( HA_REST_PORT + $(ha_idx "$1") )); }

ha_etcd_start() {
  local i cluster="" name
  for i in 0 1 2; do cluster+="${cluster:+,}e$((i+1))=http://127.0.0.1:$((HA_PEER_PORT+i))"; done
  for i in 0 1 2; do
    name=e$((i+1))
    # heartbeat/election a little above the defaults (100/1000 ms): the test machine is loaded
    etcd --name "$name" --data-dir "$HA_DIR/$name" \
      --listen-client-urls "http://127.0.0.1:$((HA_ETCD_PORT+i))" \
      --advertise-client-urls "http://127.0.0.1:$((HA_ETCD_PORT+i))" \
      --listen-peer-urls "http://127.0.0.1:$((HA_PEER_PORT+i))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((HA_PEER_PORT+i))" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token mt-ha \
      --heartbeat-interval 250 --election-timeout 2500 --enable-v2=true \
      >"$HA_DIR/$name.log" 2>&1 &
    HA_ETCD_PIDS+=($!)
  done
  local eps="127.0.0.1:16510,127.0.0.1:16511,127.0.0.1:16512"
  for _ in $(seq 120); do
    ETCDCTL_API=3 etcdctl --endpoints "$eps" --dial-timeout 1s endpoint health >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "etcd did not become healthy"; tail -5 "$HA_DIR"/e*.log; return 1
}

ha_config() {  # NAME: Patroni's YAML for member NAME
  local n=$1 d="$HA_DIR/$1"
  cat <<YAML
scope: minitrain-ha
namespace: /minitrain/
name: $n
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$(ha_rest "$n")
  connect_address: 127.0.0.1:$(ha_rest "$n")
$HA_DCS:
  hosts: 127.0.0.1:16510,127.0.0.1:16511,127.0.0.1:16512
bootstrap:
  dcs:
    ttl: $HA_TTL
    loop_wait: $HA_LOOP_WAIT
    retry_timeout: $HA_RETRY_TIMEOUT
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 40
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 64MB
        shared_buffers: 16MB
  initdb:
    - encoding: UTF8
    - data-checksums
  pg_hba:
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
    - local all all trust
postgresql:
  listen: 127.0.0.1:$(ha_port "$n")
  connect_address: 127.0.0.1:$(ha_port "$n")
  data_dir: $d/data
  bin_dir: $HA_PGBIN
  pgpass: $d/pgpass
  authentication:
    replication: {username: replicator, password: rep}
    superuser: {username: postgres, password: pg}
    rewind: {username: rewinder, password: rw}
  parameters:
    unix_socket_directories: '$d'
tags:
  nofailover: false
  noloadbalance: false
YAML
}

ha_patroni_start() {  # NAME: Patroni as postgres; its pid in $HA_DIR/NAME/patroni.pid
  local n=$1
  runuser -u postgres -- sh -c "echo \$\$ > '$HA_DIR/$n/patroni.pid'; exec patroni '$HA_DIR/$n/patroni.yml'" \
    >>"$HA_DIR/$n/patroni.log" 2>&1 &
  echo $! > "$HA_DIR/$n/runuser.pid"
  for _ in $(seq 50); do [ -s "$HA_DIR/$n/patroni.pid" ] && return 0; sleep 0.1; done
  echo "patroni $n wrote no pid"; return 1
}
ha_restart() { rm -f "$HA_DIR/$1/patroni.pid"; ha_patroni_start "$1"; }

ha_patroni_pid()    { cat "$HA_DIR/$1/patroni.pid" 2>/dev/null; }
ha_postmaster_pid() {  # empty when the file is stale (no process postgres with that pid)
  local p; p=$(head -1 "$HA_DIR/$1/data/postmaster.pid" 2>/dev/null) || return 0
  [ -n "$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = postgres ] && echo "$p"
  return 0
}

ha_rest_get() {  # NAME PATH: the HTTP status of GET PATH on NAME's REST API (000 when down)
  curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$(ha_rest "$1")$2" 2>/dev/null || true
}
ha_leader() {
  local n
  for n in "${HA_MEMBERS[@]}"; do
    [ "$(ha_rest_get "$n" /leader)" = 200 ] && { echo "$n"; return 0; }
  done
  return 1
}
ha_wait_leader() {  # [NOT] [SECONDS]
  local not=${1:-} s=${2:-60} l
  for _ in $(seq $((s * 2))); do
    l=$(ha_leader) && [ "$l" != "$not" ] && { echo "$l"; return 0; }
    sleep 0.5
  done
  return 1
}
ha_members_json() {
  local n
  for n in "${HA_MEMBERS[@]}"; do
    curl -sf -m 2 "http://127.0.0.1:$(ha_rest "$n")/cluster" 2>/dev/null && return 0
  done
  return 1
}
# ha_healthy [BYTES]: one leader, and on it both other members streaming (pg_stat_replication,
# by member name) with their replay at most BYTES (default 0) behind the leader's WAL; Patroni's
# own view (GET /cluster) is not enough: a woken primary reports itself "replica, running, lag 0"
# a moment after it demotes, before it has rewound and streams again
ha_healthy() {
  local l n
  l=$(ha_leader) || return 1
  n=$(ha_psql "$l" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'
        AND application_name IN ('pg1','pg2','pg3') AND application_name <> '$l'
        AND pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) <= ${1:-0}" postgres 2>/dev/null) || return 1
  [ "$n" = 2 ]
}
ha_wait_healthy() {  # [SECONDS] [BYTES]
  local s=${1:-90}
  for _ in $(seq $((s * 2))); do ha_healthy "${2:-0}" && return 0; sleep 0.5; done
  return 1
}

ha_psql() {  # NAME SQL [DB]
  runuser -u postgres -- psql -Atq -X -h 127.0.0.1 -p "$(ha_port "$1")" -d "${3:-minitrain}" -c "$2"
}

ha_start() {
  HA_DIR="$TMP/ha"
  chmod 755 "$TMP"
  mkdir -p "$HA_DIR"
  ha_etcd_start || return 1
  local n
  for n in "${HA_MEMBERS[@]}"; do
    mkdir -p "$HA_DIR/$n"
    ha_config "$n" > "$HA_DIR/$n/patroni.yml"
    chown -R postgres:postgres "$HA_DIR/$n"
  done
  # the first member bootstraps (initdb) alone, so that it wins the initialize key; the others
  # then clone it with pg_basebackup
  ha_patroni_start pg1 || return 1
  ha_wait_leader "" 90 >/dev/null || { echo "no leader"; tail -20 "$HA_DIR/pg1/patroni.log"; return 1; }
  ha_patroni_start pg2 && ha_patroni_start pg3 || return 1
  ha_wait_healthy 120 || { echo "cluster not healthy"; ha_members_json; return 1; }
  ha_psql "$(ha_leader)" "SELECT 1" >/dev/null 2>&1 ||
    runuser -u postgres -- psql -Atq -X -h 127.0.0.1 -p "$(ha_port "$(ha_leader)")" -d postgres \
      -c "CREATE DATABASE minitrain" >/dev/null
}

ha_signal() {  # SIG NAME: SIG to NAME's Patroni, its postmaster and every child of the postmaster
  local pm pp
  pp=$(ha_patroni_pid "$2"); pm=$(ha_postmaster_pid "$2")
  [ -n "$pp" ] && kill "-$1" "$pp" 2>/dev/null
  # runuser stops itself when its child (Patroni) stops, like su, and stays stopped: wake it too
  [ "$1" = CONT ] && kill -CONT "$(cat "$HA_DIR/$2/runuser.pid" 2>/dev/null)" 2>/dev/null
  if [ -n "$pm" ]; then
    [ "$1" = KILL ] || pkill "-$1" -P "$pm" 2>/dev/null
    kill "-$1" "$pm" 2>/dev/null
  fi
  return 0
}
ha_kill()   { ha_signal KILL "$1"; }
ha_freeze() { ha_signal STOP "$1"; }
ha_thaw()   { ha_signal CONT "$1"; }

ha_wait_gone() {  # PID [SECONDS]: waits until PID no longer exists (it is not our child)
  for _ in $(seq $((${2:-20} * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

ha_stop() {
  [ -n "${HA_DIR:-}" ] || return 0
  local n p pids=()
  for n in "${HA_MEMBERS[@]}"; do
    p=$(ha_patroni_pid "$n"); [ -n "$p" ] || continue
    kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null && pids+=("$p")
    p=$(ha_postmaster_pid "$n"); [ -n "$p" ] && { kill -CONT "$p" 2>/dev/null; pkill -CONT -P "$p" 2>/dev/null; }
  done
  for p in "${pids[@]}"; do ha_wait_gone "$p" 20 || kill -9 "$p" 2>/dev/null; done
  for n in "${HA_MEMBERS[@]}"; do   # each runuser (ours) reaps its Patroni and exits
    p=$(cat "$HA_DIR/$n/runuser.pid" 2>/dev/null) || continue
    kill -CONT "$p" 2>/dev/null; wait "$p" 2>/dev/null
  done
  for n in "${HA_MEMBERS[@]}"; do   # a postmaster whose Patroni was SIGKILLed runs on alone
    p=$(ha_postmaster_pid "$n")
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null && { kill -QUIT "$p"; ha_wait_gone "$p" 10 || kill -9 "$p"; }
  done
  for p in "${HA_ETCD_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${HA_ETCD_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  HA_ETCD_PIDS=()
  return 0
}
