#!/usr/bin/env bash
# bench/bench_sdc.sh — the silent-corruption check's cost (sched/sdc.h) on the Shakespeare model
# (examples/shakespeare.ini: 4 layers, d_model 192, global batch 16 x T 128) under dp 2 (B 8; the
# check needs replicas; 1 thread per rank), --sdc-check-every 10 against no checks.
# Two figures: the cost measured directly (each check's ms from its sdc_ok event — hashing, and
# the all-gather including any wait for the slower rank — over 10 median step times: the
# acceptance figure, target <= 1%), and the difference of the two runs' median step times (noisy
# on a shared machine: both runs' step times are printed with the load average).
#
#   make && bash bench/bench_sdc.sh [STEPS=40] [MINITRAIN=./minitrain]
set -euo pipefail
STEPS=${1:-40}
BIN=${2:-./minitrain}
cd "$(dirname "$0")/.."
[ -x "$BIN" ] || { echo "bench_sdc: $BIN missing (run: make)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_sdc: needs mpirun" >&2; exit 2; }
TMP=$(mktemp -d /tmp/mt_bsdc_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export MINITRAIN_SHM_DIR="$TMP/shm"
[ -f examples/data/shakespeare_byte/train_000.bin ] || \
  "$BIN" prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null
M=(mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none -np 2)
COMMON=(--config examples/shakespeare.ini --dp 2 --batch-size 8 --threads 1 --steps "$STEPS" --eval-every 0
        --sample-every 0 --sample-tokens 0 --ckpt-every 0 --log-every 1000 --eval-batches 1)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"${M[@]}" "$BIN" train "${COMMON[@]}" --run-dir "$TMP/off" > "$TMP/off.log" 2>&1
"${M[@]}" "$BIN" train "${COMMON[@]}" --run-dir "$TMP/on" --sdc-check-every 10 > "$TMP/on.log" 2>&1
/usr/bin/python3 - "$TMP" <<'PY'
import json, sqlite3, statistics, sys
t = sys.argv[1]
def steps(run):  # median step time after the first 5 (warm-up), ms
    db = sqlite3.connect(f"{t}/{run}/run.db")
    return statistics.median(r[0] for r in db.execute("SELECT step_ms FROM metrics WHERE step > 5 AND step_ms IS NOT NULL"))
off, on = steps("off"), steps("on")
db = sqlite3.connect(f"{t}/on/run.db")
ev = [json.loads(r[0]) for r in db.execute(
    "SELECT detail FROM events WHERE kind = 'sdc_ok' AND json_extract(detail, '$.step') > 0")]
ms = statistics.mean(e["ms"] for e in ev)
hms = statistics.mean(e["hash_ms"] for e in ev)
print(f"median step: {off:.1f} ms without checks, {on:.1f} ms with --sdc-check-every 10")
print(f"checks: {len(ev)}, {ms:.2f} ms each (hashing {hms:.2f} ms, all-gather {ms - hms:.2f} ms)")
print(f"cost at --sdc-check-every 10: {100 * ms / (10 * on):.3f}% of training "
      f"({100 * ms / on:.2f}% of one step, at the checked run's step time); step-time difference of the runs: "
      f"{100 * (on - off) / off:+.2f}% (noise included)")
PY
grep "sdc: .* checks" "$TMP/on.log" | sed 's/^/log: /'
