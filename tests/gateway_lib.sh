# tests/gateway_lib.sh — shared scaffolding of tests/run_gateway.sh and bench/bench_gateway.sh:
# start and stop real `minitrain serve` upstreams and `minitrain gateway`s on loopback (--port 0:
# the kernel picks; the process prints it), read Prometheus metrics, count statuses.
# Sourced, not run. Needs: MT (the binary), TMP (a scratch directory), PIDS (an array).

# start_serve NAME ARGS... : URL_<NAME>, PID_<NAME>, PORT_<NAME>; waits for /health 200
start_serve() {
  local name=$1; shift
  rm -f "$TMP/$name.out" "$TMP/$name.err" # a restarted NAME must not be read from its old output
  "$MT" serve --port "${SERVE_PORT:-0}" ${SERVE_QUIET---quiet} "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$! port=""
  PIDS+=("$pid")
  for _ in $(seq 1200); do # 60 s: start-up on a loaded machine
    port=$(grep -o 'serving.*http://127.0.0.1:[0-9]*' "$TMP/$name.out" 2>/dev/null | grep -o '[0-9]*$' | head -1) || true
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$TMP/$name.err"; echo "serve $name died"; exit 1; }
    sleep 0.05
  done
  [ -n "$port" ] || { echo "serve $name did not start"; cat "$TMP/$name.err"; exit 1; }
  printf -v "URL_$name" '%s' "http://127.0.0.1:$port"
  printf -v "PID_$name" '%s' "$pid"
  printf -v "PORT_$name" '%s' "$port"
}

# start_gw NAME ARGS... : URL_<NAME>, PID_<NAME>; waits until it listens
start_gw() {
  local name=$1; shift
  rm -f "$TMP/$name.out" "$TMP/$name.err"
  "$MT" gateway --port 0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$! port=""
  PIDS+=("$pid")
  for _ in $(seq 1200); do # 60 s: start-up on a loaded machine
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$TMP/$name.out" 2>/dev/null | grep -o '[0-9]*$' | head -1) || true
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$TMP/$name.err"; echo "gateway $name died"; exit 1; }
    sleep 0.05
  done
  [ -n "$port" ] || { echo "gateway $name did not start"; cat "$TMP/$name.err"; exit 1; }
  printf -v "URL_$name" '%s' "http://127.0.0.1:$port"
  printf -v "PID_$name" '%s' "$pid"
}

# stop NAME : SIGTERM and wait; returns the exit code
stop() {
  local v="PID_$1"; local pid=${!v}
  kill -TERM "$pid" 2>/dev/null || true
  local rc=0; wait "$pid" 2>/dev/null || rc=$?
  return $rc
}
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
