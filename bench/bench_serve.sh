#!/usr/bin/env bash
# bench/bench_serve.sh — serving throughput of `minitrain serve` with continuous batching (issues
# #7, #14): for the Shakespeare model and a GPT-2 124M-shaped model (random weights: speed depends
# on the shape only), at --slots 1, 2, 4 and 8, with as many clients as slots sending streamed
# requests back to back (bench/serve_load.py):
#   - aggregate tok/s: completion tokens of every request / wall time of the run;
#   - p50 / p99 latency of whole requests, p50 / p99 time to first token (prefill + queueing);
#   - ratio: aggregate tok/s at N slots / at 1 slot, same model, same invocation.
# Each configuration runs REPEATS times; the table shows medians (the machine may be shared:
# the load average is printed before and after). Threads: the server default (all cores).
#
#   bash bench/bench_serve.sh                 # ~8 minutes on 2 cores
#   DURATION=5 GPT2_DURATION=10 REPEATS=1 SLOTS="1 4" bash bench/bench_serve.sh
#   SHAKESPEARE_RUN=runs/shakespeare          # default; trained briefly if missing
#   MODELS="gpt2"                             # only the GPT-2 shape ("shakespeare gpt2" default)
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${MT:-./minitrain}
PY=/usr/bin/python3
DURATION=${DURATION:-10}
GPT2_DURATION=${GPT2_DURATION:-20}
REPEATS=${REPEATS:-3}
SLOTS=${SLOTS:-"1 2 4 8"}
MODELS=${MODELS:-"shakespeare gpt2"}
SHAKESPEARE_RUN=${SHAKESPEARE_RUN:-runs/shakespeare}
WORK=$(mktemp -d /tmp/mt_bench_serve_XXXXXX)
SRV=""
cleanup() { [ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

make -s minitrain build/bench/serve_mkmodel >/dev/null
load0=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ " $MODELS " == *" shakespeare "* && ! -f "$SHAKESPEARE_RUN/model.safetensors" ]]; then
  echo "training a Shakespeare model briefly (examples/shakespeare.ini, 30 steps) ..."
  [ -f examples/data/shakespeare_byte/tokenizer.bin ] || \
    "$MT" prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null
  SHAKESPEARE_RUN=$WORK/shakespeare
  "$MT" train --config examples/shakespeare.ini --steps 30 --warmup-steps 5 --eval-every 0 \
    --sample-every 0 --run-dir "$SHAKESPEARE_RUN" >/dev/null
fi
if [[ " $MODELS " == *" gpt2 "* ]]; then
  echo "writing a GPT-2 124M-shaped model (12 layers, d_model 768, context 1024, vocab 50257) ..."
  build/bench/serve_mkmodel "$WORK/gpt2" 12 12 768 1024 50257 >/dev/null
fi

start() { # RUN SLOTS
  "$MT" serve --run "$1" --slots "$2" --queue 64 --port 0 --quiet >"$WORK/srv.out" 2>"$WORK/srv.err" &
  SRV=$!
  for _ in $(seq 600); do grep -q serving "$WORK/srv.out" && break; sleep 0.1; done
  URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$WORK/srv.out" | head -1)
  THREADS=$(grep -o 'threads [0-9]*' "$WORK/srv.out" | awk '{print $2}')
}
stop() { kill -TERM "$SRV"; wait "$SRV" || true; SRV=""; }

rows=()
bench_model() { # LABEL RUN PROMPT MAX_TOKENS DURATION
  local label=$1 run=$2 prompt=$3 ntok=$4 dur=$5 base=""
  for s in $SLOTS; do
    start "$run" "$s"
    curl -s "$URL/v1/completions" -d "{\"prompt\":\"$prompt\",\"max_tokens\":4}" >/dev/null # warm
    : >"$WORK/res"
    for _ in $(seq "$REPEATS"); do
      $PY bench/serve_load.py "$URL" "$s" "$dur" "$prompt" "$ntok" | grep RESULT >>"$WORK/res"
    done
    stop
    local row; row=$($PY - "$label" "$s" "$THREADS" "${base:-0}" "$WORK/res" <<'PY'
import re, statistics, sys
label, s, th, base, path = sys.argv[1:6]
runs = [dict((k, float(v)) for k, v in re.findall(r"(\w+)=([-\d.na]+)", l)) for l in open(path)]
med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
all_agg = " ".join("%.1f" % r["agg_tok_s"] for r in runs)
ratio = med["agg_tok_s"] / float(base) if float(base) > 0 else 1.0
print(f"{label:<22} {s:>5} {th:>7} {med['agg_tok_s']:>10.1f} {ratio:>6.2f}x {med['p50_ms']:>9.0f} "
      f"{med['p99_ms']:>9.0f} {med['ttft_p50_ms']:>9.0f} {med['ttft_p99_ms']:>9.0f} "
      f"{int(sum(r['errors'] for r in runs)):>4}   [{all_agg}]|{med['agg_tok_s']}")
PY
)
    [ -z "$base" ] && base=${row##*|}
    rows+=("${row%|*}")
    echo "  ${rows[-1]}"
  done
}

hdr=$(printf "%-22s %5s %7s %10s %7s %9s %9s %9s %9s %4s   %s" model slots threads "agg tok/s" \
  "vs 1" "p50 ms" "p99 ms" "ttft p50" "ttft p99" err "runs (agg tok/s)")
echo "$hdr"
[[ " $MODELS " == *" shakespeare "* ]] && bench_model "shakespeare (4L d192)" "$SHAKESPEARE_RUN" "ROMEO:" 64 "$DURATION"
[[ " $MODELS " == *" gpt2 "* ]] && bench_model "gpt2-124M shape" "$WORK/gpt2" "Hello" 16 "$GPT2_DURATION"
echo
echo "minitrain serve benchmark — $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "load average before: $load0, after: $(cut -d' ' -f1-3 /proc/loadavg); medians of $REPEATS runs"
echo "clients = slots, streamed requests of 64 (Shakespeare) / 16 (GPT-2) tokens, back to back"
echo "$hdr"
printf '%s\n' "${rows[@]}"
