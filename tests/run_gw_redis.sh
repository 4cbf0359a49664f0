#!/usr/bin/env bash
# tests/run_gw_redis.sh — rate limits shared through a real redis-server.
#
# Builds tests/gw_limit_driver.c (one "gateway process": a gw_limiter and bursts of parallel
# reservations) against build/libminitrain.a, starts redis-server on a free loopback port, and
# checks:
#   - two processes x 50 parallel reservations against one key's budget for 10 admit exactly 10
#     together (tokens, requests and concurrency slots alike);
#   - settle and release in one process give tokens back to the other;
#   - Redis killed mid-run: a fail-closed limiter refuses, a fail-open one serves on its own
#     in-process buckets (still limited), and both go back to Redis once it is restarted.
# Every process is stopped by pid. About 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
command -v redis-server >/dev/null || { echo "redis-server missing (make deps)"; exit 1; }
make -s "$BUILD/libminitrain.a" >/dev/null
BIN="$BUILD/tests/gw_limit_driver"
mkdir -p "$BUILD/tests"
${CC:-gcc} -std=gnu11 -O2 -Wall -Wextra -Werror -I. tests/gw_limit_driver.c "$BUILD/libminitrain.a" \
  -o "$BIN" -lhiredis -lcrypto -lsqlite3 -lcjson -lpthread -lm

. tests/lib.sh
tmp_dir mt_redis
REDIS_PID=""
on_exit() { [ -z "$REDIS_PID" ] || kill -9 "$REDIS_PID" 2>/dev/null; }

PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_redis() {
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >"$TMP/redis.log" 2>&1 &
  REDIS_PID=$!
  for _ in $(seq 600); do
    redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  echo "redis-server did not start"; cat "$TMP/redis.log"; exit 1
}
stop_redis() { kill -9 "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""; }
start_redis
R="127.0.0.1:$PORT"

# together NAME ARGS... : two drivers with the same args, released at the same instant; sets
# SUM (admitted by both) and OUT_A / OUT_B
together() {
  local name=$1; shift
  mkdir -p "$TMP/$name.a" "$TMP/$name.b"
  "$BIN" --redis "$R" --dir "$TMP/$name.a" "$@" >"$TMP/$name.a.out" 2>"$TMP/$name.a.err" & local pa=$!
  "$BIN" --redis "$R" --dir "$TMP/$name.b" "$@" >"$TMP/$name.b.out" 2>"$TMP/$name.b.err" & local pb=$!
  PIDS+=("$pa" "$pb")
  # (deadlines of minutes, not seconds: a loop ends as soon as its files exist, and one that gave
  # up early on a loaded machine released the drivers unready or told them to exit half done)
  for _ in $(seq 12000); do [ -e "$TMP/$name.a/ready.0" ] && [ -e "$TMP/$name.b/ready.0" ] && break; sleep 0.01; done
  touch "$TMP/$name.a/go.0" "$TMP/$name.b/go.0"
  for _ in $(seq 12000); do [ -e "$TMP/$name.a/done.0" ] && [ -e "$TMP/$name.b/done.0" ] && break; sleep 0.01; done
  touch "$TMP/$name.a/exit.0" "$TMP/$name.b/exit.0"
  wait "$pa" "$pb"
  OUT_A=$(cat "$TMP/$name.a.out"); OUT_B=$(cat "$TMP/$name.b.out")
  local a b
  a=$(sed -n 's/.*admitted=\([0-9]*\).*/\1/p' "$TMP/$name.a.out")
  b=$(sed -n 's/.*admitted=\([0-9]*\).*/\1/p' "$TMP/$name.b.out")
  SUM=$((a + b))
}

echo "-- two processes share one budget through Redis ($R)"
together tok --key two-tok --tpm 1000 --cost 100 --threads 50
if [ "$SUM" = 10 ]; then ok "tokens: 2 x 50 reservations of 100 against tpm 1000 -> 10 admitted ($OUT_A | $OUT_B)"
else bad "tokens: $SUM admitted, want 10 ($OUT_A | $OUT_B)"; fi
left=$(redis-cli -p "$PORT" --raw HGET 'mt:rl:{two-tok}' t)
if /usr/bin/python3 -c "import sys; sys.exit(0 if 0 <= float('$left') < 100 else 1)"; then
  ok "the bucket lives in Redis (mt:rl:{two-tok} t = $left)"
else bad "bucket level in Redis: '$left'"; fi
together req --key two-req --rpm 10 --threads 50
if [ "$SUM" = 10 ]; then ok "requests: 2 x 50 against rpm 10 -> 10 admitted"; else bad "requests: $SUM admitted, want 10"; fi
together conc --key two-conc --max-concurrent 10 --threads 50
if [ "$SUM" = 10 ]; then ok "concurrency: 2 x 50 held against max_concurrent 10 -> 10 admitted"; else bad "concurrency: $SUM, want 10"; fi
if [ "$(redis-cli -p "$PORT" ZCARD 'mt:rl:{two-conc}:c')" = 0 ]; then
  bad "concurrency slots should still be leased after a process ended holding them"
else ok "slots of a process that ended holding them stay leased (they expire after the lease)"; fi

echo "-- settle and release give tokens back across processes"
a=$("$BIN" --redis "$R" --key set --tpm 1000 --cost 100 --threads 20 --then settle:40)
b=$("$BIN" --redis "$R" --key set --tpm 1000 --cost 100 --threads 20)
if [[ "$a" == *admitted=10* && "$b" == *admitted=6* ]]; then
  ok "settle: 10 x (reserve 100, use 40) returns 600 -> the next process gets 6 ($a | $b)"
else bad "settle: $a | $b (want 10 then 6)"; fi
a=$("$BIN" --redis "$R" --key rel --tpm 1000 --cost 100 --threads 20 --then release)
b=$("$BIN" --redis "$R" --key rel --tpm 1000 --cost 100 --threads 20)
if [[ "$a" == *admitted=10* && "$b" == *admitted=10* ]]; then ok "release: every token comes back ($a | $b)"
else bad "release: $a | $b (want 10 then 10)"; fi
c=$("$BIN" --redis "$R" --key conc2 --max-concurrent 3 --threads 10 --then release)
d=$("$BIN" --redis "$R" --key conc2 --max-concurrent 3 --threads 10)
if [[ "$c" == *admitted=3* && "$d" == *admitted=3* ]]; then ok "release frees concurrency slots in Redis"
else bad "slots: $c | $d"; fi

echo "-- Redis killed and restarted: fail-closed vs fail-open"
mkdir -p "$TMP/fc" "$TMP/fo"
"$BIN" --redis "$R" --dir "$TMP/fc" --phases 3 --key fc --tpm 1000 --cost 100 --threads 8 --then release \
  >"$TMP/fc.out" 2>"$TMP/fc.err" & pfc=$!
"$BIN" --redis "$R" --dir "$TMP/fo" --phases 3 --fail-open --key fo --tpm 1000 --cost 100 --threads 15 \
  >"$TMP/fo.out" 2>"$TMP/fo.err" & pfo=$!
PIDS+=("$pfc" "$pfo")
phase() {  # run phase $1 in both drivers and wait until both printed it
  for _ in $(seq 12000); do [ -e "$TMP/fc/ready.$1" ] && [ -e "$TMP/fo/ready.$1" ] && break; sleep 0.01; done
  touch "$TMP/fc/go.$1" "$TMP/fo/go.$1"
  for _ in $(seq 12000); do
    grep -q "^phase $1 " "$TMP/fc.out" 2>/dev/null && grep -q "^phase $1 " "$TMP/fo.out" 2>/dev/null && return 0
    sleep 0.01
  done
}
phase 0
stop_redis
phase 1
start_redis
sleep 1.3   # the limiters try to reconnect at most once a second
phase 2
for _ in $(seq 12000); do [ -e "$TMP/fc/done.0" ] && [ -e "$TMP/fo/done.0" ] && break; sleep 0.01; done
touch "$TMP/fc/exit.0" "$TMP/fo/exit.0"
wait "$pfc" "$pfo"
fc=$(tr '\n' ' ' < "$TMP/fc.out"); fo=$(tr '\n' ' ' < "$TMP/fo.out")
[[ "$fc" == *"phase 0 admitted=8 refused=0 unavailable=0"* ]] && ok "fail-closed, Redis up: 8 of 8 admitted" || bad "fail-closed phase 0: $fc"
[[ "$fc" == *"phase 1 admitted=0 refused=8 unavailable=8"* ]] && ok "fail-closed, Redis killed: all 8 refused (unavailable)" || bad "fail-closed phase 1: $fc"
[[ "$fc" == *"phase 2 admitted=8 refused=0 unavailable=0"* ]] && ok "fail-closed, Redis restarted: back to normal" || bad "fail-closed phase 2: $fc"
[[ "$fo" == *"phase 0 admitted=10 refused=5 unavailable=0"* ]] && ok "fail-open, Redis up: 10 of 15 (tpm 1000 / 100)" || bad "fail-open phase 0: $fo"
[[ "$fo" == *"phase 1 admitted=10 refused=5 unavailable=15"* ]] && ok "fail-open, Redis killed: served on in-process buckets, still limited (10 of 15)" || bad "fail-open phase 1: $fo"
[[ "$fo" == *"phase 2 admitted=10 refused=5 unavailable=0"* ]] && ok "fail-open, Redis restarted: Redis buckets again (fresh after the restart)" || bad "fail-open phase 2: $fo"
grep -q "failing CLOSED" "$TMP/fc.err" && grep -q "failing OPEN" "$TMP/fo.err" && grep -q "answers again" "$TMP/fo.err" \
  && ok "each limiter said so on stderr (down, policy, back)" || bad "stderr: $(cat "$TMP/fc.err" "$TMP/fo.err")"
stop_redis

finish "redis limits"
