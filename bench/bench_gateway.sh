#!/usr/bin/env bash
# bench/bench_gateway.sh — what `minitrain gateway` costs and what it saves (issue #13):
#   1. overhead: wrk against `minitrain serve` directly, then through the gateway (same server,
#      same body: a tiny model, max_tokens 1, so HTTP and proxying dominate), REPEATS times each,
#      interleaved so both see the same machine noise. Reported: medians of p50, p99 and req/s,
#      the added p50/p99, the spread (min..max over repeats: how noisy the machine was), and the
#      CPU the gateway process burned per request (utime+stime from /proc) next to serve's;
#   2. max req/s: the same with more connections (CONNS_MAX), direct vs through the gateway;
#   3. failover: wrk through a gateway with a primary and a fallback; the primary is killed with
#      SIGKILL mid-run. Reported: client-visible errors, time from the kill to the primary's
#      ejection (the gateway's log), and the worst latency any client saw. FAILOVERS times.
#
#   bash bench/bench_gateway.sh                   # about 2 minutes
#   REPEATS=3 DURATION=3 bash bench/bench_gateway.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${MT:-./minitrain}
PY=/usr/bin/python3
REPEATS=${REPEATS:-5}
DURATION=${DURATION:-4}
CONNS=${CONNS:-4}
CONNS_MAX=${CONNS_MAX:-32}
FAILOVERS=${FAILOVERS:-3}
. tests/gateway_lib.sh # (sources tests/lib.sh)
tmp_dir mt_bench_gw
export TMP

make -s minitrain build/bench/serve_mkmodel >/dev/null
build/bench/serve_mkmodel "$TMP/m" 2 2 64 128 256 >/dev/null
cat > "$TMP/wrk.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","prompt":"hello","max_tokens":1}'
function done(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_us=%d p99_us=%d max_us=%d requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    latency.max, summary.requests, summary.errors.status + summary.errors.connect +
    summary.errors.read + summary.errors.write + summary.errors.timeout))
end
EOF
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run_wrk() { # URL CONNS -> RESULT line
  wrk -t2 -c"$2" -d"${DURATION}s" -s "$TMP/wrk.lua" "$1/v1/completions" | grep RESULT
}
field() { echo "$1" | sed "s/.* $2=\([0-9.]*\).*/\1/"; }

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (shared: expect noise)"
start_serve S --run "$TMP/m" --model-name m --slots 2 --queue 256
start_gw G --upstream "s=$URL_S" --route m=s --quiet
post "$URL_G" /v1/completions '{"model":"m","prompt":"warm","max_tokens":1}' >/dev/null

echo "-- overhead: $REPEATS × ${DURATION}s per side, $CONNS connections, max_tokens 1"
: > "$TMP/direct"; : > "$TMP/gw"
for r in $(seq "$REPEATS"); do
  run_wrk "$URL_S" "$CONNS" >> "$TMP/direct"
  g0=$(cpu_ticks "$PID_G"); s0=$(cpu_ticks "$PID_S")
  res=$(run_wrk "$URL_G" "$CONNS"); echo "$res" >> "$TMP/gw"
  g1=$(cpu_ticks "$PID_G"); s1=$(cpu_ticks "$PID_S")
  echo "$(field "$res" requests) $((g1 - g0)) $((s1 - s0))" >> "$TMP/cpu"
done
$PY - "$TMP/direct" "$TMP/gw" "$TMP/cpu" "$(getconf CLK_TCK)" <<'PYEOF'
import re, statistics as st, sys
def load(p):
    rows = [dict((k, float(v)) for k, v in re.findall(r"(\w+)=([0-9.]+)", l)) for l in open(p)]
    return {k: [r[k] for r in rows] for k in rows[0]}
d, g = load(sys.argv[1]), load(sys.argv[2])
med = lambda xs: st.median(xs)
spread = lambda xs: f"{min(xs):.0f}..{max(xs):.0f}"
print(f"   direct : p50 {med(d['p50_us'])/1e3:.3f} ms  p99 {med(d['p99_us'])/1e3:.3f} ms  "
      f"{med(d['rps']):.0f} req/s   (p50 spread {spread(d['p50_us'])} us, req/s {spread(d['rps'])})")
print(f"   gateway: p50 {med(g['p50_us'])/1e3:.3f} ms  p99 {med(g['p99_us'])/1e3:.3f} ms  "
      f"{med(g['rps']):.0f} req/s   (p50 spread {spread(g['p50_us'])} us, req/s {spread(g['rps'])})")
dp50 = [b - a for a, b in zip(d['p50_us'], g['p50_us'])]
dp99 = [b - a for a, b in zip(d['p99_us'], g['p99_us'])]
print(f"   added by the gateway: p50 {med(dp50)/1e3:+.3f} ms (per-repeat {spread(dp50)} us), "
      f"p99 {med(dp99)/1e3:+.3f} ms (per-repeat {spread(dp99)} us)")
tck = float(sys.argv[4])
cpu = [l.split() for l in open(sys.argv[3])]
gw_us = med([int(c[1]) / tck * 1e6 / max(1.0, float(c[0])) for c in cpu])
sv_us = med([int(c[2]) / tck * 1e6 / max(1.0, float(c[0])) for c in cpu])
print(f"   CPU per request: gateway {gw_us:.0f} us, serve {sv_us:.0f} us "
      f"(the gateway {'is not' if gw_us < sv_us else 'IS'} the heavier process)")
PYEOF

echo "-- max req/s with $CONNS_MAX connections (median of $REPEATS)"
: > "$TMP/dmax"; : > "$TMP/gmax"
for r in $(seq "$REPEATS"); do
  run_wrk "$URL_S" "$CONNS_MAX" >> "$TMP/dmax"; run_wrk "$URL_G" "$CONNS_MAX" >> "$TMP/gmax"
done
$PY - "$TMP/dmax" "$TMP/gmax" <<'PYEOF'
import re, statistics as st, sys
rps = lambda p: [float(re.search(r"rps=([0-9.]+)", l).group(1)) for l in open(p)]
d, g = rps(sys.argv[1]), rps(sys.argv[2])
print(f"   direct {st.median(d):.0f} req/s ({min(d):.0f}..{max(d):.0f}), through the gateway "
      f"{st.median(g):.0f} req/s ({min(g):.0f}..{max(g):.0f}): {100*st.median(g)/st.median(d):.0f}% of direct")
PYEOF
stop G || true

echo "-- failover: SIGKILL the primary during a ${DURATION}s wrk run ($FAILOVERS times)"
start_serve F --run "$TMP/m" --model-name m --slots 2 --queue 256
for r in $(seq "$FAILOVERS"); do
  start_serve K --run "$TMP/m" --model-name m --slots 2 --queue 256
  start_gw GF --upstream "k=$URL_K" --upstream "f=$URL_F" --route m=k,f --quiet
  wrk -t2 -c8 -d"${DURATION}s" -s "$TMP/wrk.lua" "$URL_GF/v1/completions" > "$TMP/wrk.out" &
  W=$!; PIDS+=($W)
  sleep "$($PY -c "print($DURATION / 2)")"
  tk=$(date +%s.%N); kill9 K
  wait "$W" || true
  res=$(grep RESULT "$TMP/wrk.out")
  te=$(grep -o '\[[0-9.]*\] upstream k ejected' "$TMP/GF.err" | head -1 | grep -o '[0-9.]*' | head -1 || true)
  fo=$($PY -c "print(f'{($te - $tk) * 1e3:.0f}')" 2>/dev/null || echo "never")
  echo "   run $r: $(field "$res" requests) requests, $(field "$res" errors) client errors, kill → ejection $fo ms, worst latency $($PY -c "print(f'{$(field "$res" max_us)/1e3:.1f}')") ms"
  stop GF || true
done
stop F || true; stop S || true
