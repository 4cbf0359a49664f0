# tests/gateway_lib.sh — shared scaffolding of tests/run_gateway.sh and bench/bench_gateway.sh:
# start and stop real `minitrain serve` upstreams and `minitrain gateway`s on loopback (--port 0:
# the kernel picks; the process prints it), read Prometheus metrics, count statuses.
# Sourced, not run; sources tests/lib.sh (counters, tmp_dir, start_bg). Needs: MT (the binary),
# TMP (a scratch directory: tmp_dir).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# start_serve NAME ARGS... : URL_<NAME>, PID_<NAME>, PORT_<NAME>; waits until it listens
start_serve() {
  local name=$1; shift
  start_bg "$name" 'serving.*http://127.0.0.1:' \
    "$MT" serve --port "${SERVE_PORT:-0}" ${SERVE_QUIET---quiet} "$@"
}

# start_gw NAME ARGS... : URL_<NAME>, PID_<NAME>; waits until it listens
start_gw() {
  local name=$1; shift
  start_bg "$name" 'listening on http://127.0.0.1:' "$MT" gateway --port 0 "$@"
}

# stopgw NAME : stop a gateway; anything but exit 0 after SIGTERM (under ASan: a leak, a report)
# is a failed check
stopgw() { local rc=0; stop "$1" || rc=$?; [ "$rc" = 0 ] || bad "gateway $1: exit $rc after SIGTERM"; }

# gw_models : $TMP/m (tiny: fast answers) and $TMP/slow (slow enough to cut a stream), random
# weights, byte-level tokenizer (bench/serve_mkmodel)
gw_models() {
  [ -x build/bench/serve_mkmodel ] || make -s build/bench/serve_mkmodel >/dev/null
  build/bench/serve_mkmodel "$TMP/m" 2 2 64 128 256 >/dev/null
  build/bench/serve_mkmodel "$TMP/slow" 4 4 256 1024 256 >/dev/null
}

# stop NAME : SIGTERM and wait; returns the exit code
stop() { local v="PID_$1"; stop_pid "${!v}"; }
# kill9 NAME : SIGKILL and reap
kill9() { local v="PID_$1"; kill -9 "${!v}" 2>/dev/null || true; wait "${!v}" 2>/dev/null || true; }

# metric URL 'name{labels}' [KEY] : the value of one Prometheus sample (0 if absent)
metric() {
  local url=$1 series=$2 key=${3:-}
  local auth=(); [ -n "$key" ] && auth=(-H "Authorization: Bearer $key")
  curl -s "${auth[@]}" "$url/metrics" | awk -v s="$series" '$1 == s {v = $2} END {print v == "" ? 0 : v}'
}

# post URL PATH JSON [KEY] : prints the status; the body lands in $TMP/body, headers in $TMP/hdr
post() {
  local url=$1 path=$2 body=$3 key=${4:-}
  local auth=(); [ -n "$key" ] && auth=(-H "Authorization: Bearer $key")
  curl -s -o "$TMP/body" -D "$TMP/hdr" -w '%{http_code}' "${auth[@]}" \
    -H 'Content-Type: application/json' --data-binary "$body" "$url$path"
}

# header NAME : a header of the last post (case-insensitive), without CR
header() { tr -d '\r' < "$TMP/hdr" | awk -v h="$(echo "$1" | tr A-Z a-z)" 'BEGIN{FS=": "} tolower($1) == h {print $2}' | tail -1; }

# the checks run their conditions in `bash -c`: give them the helpers
export -f metric header post
