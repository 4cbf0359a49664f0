# tests/swift_lib.sh — a one-box OpenStack Swift with the S3 API (s3api + tempauth) on loopback,
# for the object-store tests (issue 27). Sourced after tests/lib.sh (needs TMP and PIDS), or run as
#
#   bash tests/swift_lib.sh run CMD ARGS...   start Swift in a fresh temp dir, run CMD with the
#                                             MT_S3_* / AWS_* variables below set, stop Swift,
#                                             exit with CMD's status (test_objstore re-execs itself
#                                             through this when MT_S3_ENDPOINT is unset)
#
# Defines:
#   swift_have             0 when Debian's swift packages are installed (else a test skips)
#   swift_start            rings (swift-ring-builder, one replica, one device each) and configs under
#                          $TMP/swift, then the account, container, object and proxy servers as
#                          four processes (workers = 0: the pid is the server), their pids in PIDS
#                          and SWIFT_PIDS; waits for the proxy's /healthcheck. Sets
#                          MT_S3_ENDPOINT=http://127.0.0.1:$SWIFT_PORT, AWS_ACCESS_KEY_ID=test:tester,
#                          AWS_SECRET_ACCESS_KEY=testing, AWS_REGION=us-east-1 (exported)
#   swift_stop             SIGTERM to each server by pid, then wait
#   swift_stop_proxy / swift_start_proxy   only the S3 front end (the storage servers keep their
#                          data): what "the server dies mid-upload" means in the tests
#
# Ports: the helper's fixed range 16400-16499 (proxy 16400, object 16410, container 16411, account
# 16412); SWIFT_PORT_BASE moves all four. Storage is $TMP/swift/srv/d1 (ext4 or tmpfs: Swift needs
# user xattrs). Swift reads the hash-path salt from /etc/swift/swift.conf (installed by the
# package); everything else is in $TMP/swift/etc. Logs go to syslog; the servers' stderr to
# $TMP/swift/<server>.err.
SWIFT_PORT_BASE=${SWIFT_PORT_BASE:-16400}
SWIFT_PORT=$SWIFT_PORT_BASE
SWIFT_PIDS=()

swift_have() {
  command -v swift-proxy-server >/dev/null && command -v swift-object-server >/dev/null &&
    command -v swift-container-server >/dev/null && command -v swift-account-server >/dev/null &&
    command -v swift-ring-builder >/dev/null && [ -r /etc/swift/swift.conf ]
}

swift_conf_common() {  # NAME PORT: the [DEFAULT] section of a storage server
  cat <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $2
workers = 0
user = $(id -un)
swift_dir = $SWIFT_DIR/etc
devices = $SWIFT_DIR/srv
mount_check = false
disable_fallocate = true
log_name = mt-$1

[pipeline:main]
pipeline = $1-server

[app:$1-server]
use = egg:swift#$1
CONF
}

swift_rings() {
  local kind port
  for kind in object container account; do
    case $kind in object) port=$((SWIFT_PORT_BASE+10));; container) port=$((SWIFT_PORT_BASE+11));;
                  account) port=$((SWIFT_PORT_BASE+12));; esac
    swift-ring-builder "$SWIFT_DIR/etc/$kind.builder" create 6 1 0 >/dev/null
    swift-ring-builder "$SWIFT_DIR/etc/$kind.builder" add "r1z1-127.0.0.1:$port/d1" 1 >/dev/null
    swift-ring-builder "$SWIFT_DIR/etc/$kind.builder" rebalance >/dev/null || true
    [ -s "$SWIFT_DIR/etc/$kind.ring.gz" ] || { echo "swift_lib: no $kind ring"; return 1; }
  done
}

swift_proxy_conf() {
  cat <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $SWIFT_PORT
workers = 0
user = $(id -un)
swift_dir = $SWIFT_DIR/etc
log_name = mt-proxy

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true

[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$((SWIFT_PORT_BASE+99))
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
CONF
}

swift_wait_port() {  # PORT PID NAME: until something answers on 127.0.0.1:PORT (20 s)
  for _ in $(seq 400); do
    kill -0 "$2" 2>/dev/null || { echo "swift_lib: $3 died:"; tail -5 "$SWIFT_DIR/$3.err"; return 1; }
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "swift_lib: $3 did not listen on $1"; return 1
}

swift_spawn() {  # NAME: start swift-NAME-server on its config, record the pid
  "swift-$1-server" "$SWIFT_DIR/etc/$1-server.conf" >"$SWIFT_DIR/$1.out" 2>"$SWIFT_DIR/$1.err" &
  local pid=$!
  PIDS+=("$pid"); SWIFT_PIDS+=("$pid")
  printf -v "SWIFT_PID_$1" '%s' "$pid"
}

swift_start() {
  SWIFT_DIR=$TMP/swift
  mkdir -p "$SWIFT_DIR/etc" "$SWIFT_DIR/srv/d1"
  swift_rings || return 1
  swift_conf_common object $((SWIFT_PORT_BASE+10)) >"$SWIFT_DIR/etc/object-server.conf"
  swift_conf_common container $((SWIFT_PORT_BASE+11)) >"$SWIFT_DIR/etc/container-server.conf"
  swift_conf_common account $((SWIFT_PORT_BASE+12)) >"$SWIFT_DIR/etc/account-server.conf"
  swift_proxy_conf >"$SWIFT_DIR/etc/proxy-server.conf"
  local s
  for s in account container object proxy; do swift_spawn "$s"; done
  swift_wait_port $((SWIFT_PORT_BASE+12)) "$SWIFT_PID_account" account || return 1
  swift_wait_port $((SWIFT_PORT_BASE+11)) "$SWIFT_PID_container" container || return 1
  swift_wait_port $((SWIFT_PORT_BASE+10)) "$SWIFT_PID_object" object || return 1
  swift_wait_port "$SWIFT_PORT" "$SWIFT_PID_proxy" proxy || return 1
  export MT_S3_ENDPOINT=http://127.0.0.1:$SWIFT_PORT AWS_ACCESS_KEY_ID=test:tester \
         AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
}

swift_stop_proxy() { kill -TERM "$SWIFT_PID_proxy" 2>/dev/null || true; wait "$SWIFT_PID_proxy" 2>/dev/null || true; }
swift_start_proxy() {
  swift_spawn proxy
  swift_wait_port "$SWIFT_PORT" "$SWIFT_PID_proxy" proxy
}

swift_stop() {
  local p
  for p in "${SWIFT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${SWIFT_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  SWIFT_PIDS=()
}

if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = run ]; then
  shift
  set -u
  . "$(dirname "$0")/lib.sh"
  swift_have || { echo "swift_lib: OpenStack Swift not installed (make test-deps)"; exit 77; }
  tmp_dir mt_swift
  t0=$(date +%s.%N)
  swift_start || exit 1
  echo "swift_lib: Swift with s3api up on $MT_S3_ENDPOINT in $(echo "$(date +%s.%N) - $t0" | bc) s"
  rc=0; "$@" || rc=$?
  swift_stop
  exit $rc
fi
