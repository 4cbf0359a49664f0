#!/usr/bin/env bash
# bench/bench_serve.sh — serving throughput of `minitrain serve` (issue #7): for the Shakespeare
# model and a GPT-2 124M-shaped model (random weights: speed depends on the shape only), at
# --slots 1, 2 and 4:
#   - 1-stream decode tok/s: one streamed request alone; tokens after the first divided by the time
#     from the first token event to the last (pure decode, prefill excluded);
#   - aggregate tok/s: wrk with one connection per slot (every slot busy, nobody queued) for
#     DURATION seconds; completed requests × max_tokens / wrk's run time;
#   - p50 / p99: wrk's latency percentiles of whole (non-streamed) requests.
# Threads per slot are the server default: cores / slots (at least 1).
#
#   bash bench/bench_serve.sh                 # ~3 minutes on 2 cores
#   DURATION=5 SLOTS="1 2" bash bench/bench_serve.sh
#   SHAKESPEARE_RUN=runs/shakespeare          # default; trained briefly if missing
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${MT:-./minitrain}
PY=/usr/bin/python3
DURATION=${DURATION:-10}
GPT2_DURATION=${GPT2_DURATION:-20}
SLOTS=${SLOTS:-"1 2 4"}
SHAKESPEARE_RUN=${SHAKESPEARE_RUN:-runs/shakespeare}
WORK=$(mktemp -d /tmp/mt_bench_serve_XXXXXX)
SRV=""
cleanup() { [ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

make -s minitrain build/bench/serve_mkmodel >/dev/null
if [ ! -f "$SHAKESPEARE_RUN/model.safetensors" ]; then
  echo "training a Shakespeare model briefly (examples/shakespeare.ini, 30 steps) ..."
  [ -f examples/data/shakespeare_byte/tokenizer.bin ] || \
    "$MT" prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null
  SHAKESPEARE_RUN=$WORK/shakespeare
  "$MT" train --config examples/shakespeare.ini --steps 30 --warmup-steps 5 --eval-every 0 \
    --sample-every 0 --run-dir "$SHAKESPEARE_RUN" >/dev/null
fi
echo "writing a GPT-2 124M-shaped model (12 layers, d_model 768, context 1024, vocab 50257) ..."
build/bench/serve_mkmodel "$WORK/gpt2" 12 12 768 1024 50257 >/dev/null

cat > "$WORK/bench.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("BODY")
function done(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.status))
end
LUA

start() { # RUN SLOTS
  "$MT" serve --run "$1" --slots "$2" --queue 64 --port 0 --quiet >"$WORK/srv.out" 2>"$WORK/srv.err" &
  SRV=$!
  for _ in $(seq 600); do grep -q serving "$WORK/srv.out" && break; sleep 0.1; done
  URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/srv.out" | head -1)
  THREADS=$(grep -o 'threads/slot [0-9]*' "$WORK/srv.out" | awk '{print $2}')
}
stop() { kill -TERM "$SRV"; wait "$SRV" || true; SRV=""; }

one_stream() { # URL PROMPT MAX_TOKENS -> decode tok/s
  $PY - "$@" <<'PY'
import json, sys, time, urllib.request
u, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0.8, "seed": 1,
                   "stream": True}).encode()
r = urllib.request.urlopen(urllib.request.Request(u + "/v1/completions", body))
times = []
for line in r:
    if line.startswith(b"data: {"):
        ch = json.loads(line[6:])
        if ch["choices"] and ch["choices"][0]["text"]:
            times.append(time.perf_counter())
print("%.1f" % ((len(times) - 1) / (times[-1] - times[0])))
PY
}

rows=()
bench_model() { # LABEL RUN PROMPT STREAM_TOKENS WRK_TOKENS DURATION
  local label=$1 run=$2 prompt=$3 ntok=$4 wtok=$5 dur=$6
  for s in $SLOTS; do
    start "$run" "$s"
    curl -s "$URL/v1/completions" -d "{\"prompt\":\"$prompt\",\"max_tokens\":4}" >/dev/null # warm
    local single; single=$(one_stream "$URL" "$prompt" "$ntok")
    BODY="{\"prompt\":\"$prompt\",\"max_tokens\":$wtok,\"temperature\":0.8}" \
      wrk -t1 -c"$s" -d"${dur}s" --timeout 60s -s "$WORK/bench.lua" "$URL/v1/completions" \
      >"$WORK/wrk.out" 2>&1 || true
    local res; res=$(grep RESULT "$WORK/wrk.out" || echo "RESULT requests=0 duration_us=1 p50_us=0 p99_us=0 non2xx=0")
    stop
    rows+=("$($PY - "$label" "$s" "$THREADS" "$single" "$wtok" "$res" <<'PY'
import re, sys
label, s, th, single, wtok, res = sys.argv[1:7]
v = dict(re.findall(r"(\w+)=(\d+)", res))
req, dur = int(v["requests"]), int(v["duration_us"]) / 1e6
agg = req * int(wtok) / dur
print(f"{label:<22} {s:>5} {th:>8} {float(single):>14.1f} {agg:>14.1f} {req/dur:>8.2f} "
      f"{int(v['p50_us'])/1e3:>10.1f} {int(v['p99_us'])/1e3:>10.1f} {v['non2xx']:>6}")
PY
)")
    echo "  ${rows[-1]}"
  done
}

hdr=$(printf "%-22s %5s %8s %14s %14s %8s %10s %10s %6s" model slots thr/slot "1-stream tok/s" \
  "aggregate tok/s" "req/s" "p50 ms" "p99 ms" "non2xx")
echo "$hdr"
bench_model "shakespeare (4L d192)" "$SHAKESPEARE_RUN" "ROMEO:" 100 64 "$DURATION"
bench_model "gpt2-124M shape" "$WORK/gpt2" "Hello" 48 16 "$GPT2_DURATION"
echo
echo "minitrain serve benchmark — $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "wrk: one connection per slot, non-streamed requests of 64 (Shakespeare) / 16 (GPT-2) tokens"
echo "$hdr"
printf '%s\n' "${rows[@]}"
