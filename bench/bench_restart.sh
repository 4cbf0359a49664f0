#!/usr/bin/env bash
# bench/bench_restart.sh — restart to first step of the GPT-2 124M shape (B=4 T=64, 2 threads)
# from a tier-0 checkpoint, as the supervisor relaunches a job (MINITRAIN_ATTEMPT=2: the sgemm
# peak of the attempt before is reused).
# A first run trains 2 steps and commits a checkpoint; then ROUNDS relaunches each resume from it
# and train STEPS steps. Every output line is timestamped from the relaunch's exec, so a relaunch
# reports: start-up (exec → "resumed" line, minus the resume), the resume itself (as minitrain
# logs it), the first step, the median of the steady steps after it, and the acceptance figure
#   restart to first step = exec → end of the first step, against resume + 2 × steady step.
# The machine may be shared: the load average is printed; figures are medians over ROUNDS.
#
#   make && bash bench/bench_restart.sh [ROUNDS=2] [STEPS=4] [MINITRAIN=./minitrain]
set -euo pipefail
ROUNDS=${1:-2}
STEPS=${2:-4}
BIN=${3:-./minitrain}
cd "$(dirname "$0")/.."
[ -x "$BIN" ] || { echo "bench_restart: $BIN missing (run: make)" >&2; exit 2; }
TMP=$(mktemp -d /tmp/mt_brs_XXXXXX)
NAME=brs$$
cleanup() { rm -rf "$TMP"; rm -rf /dev/shm/minitrain/"$NAME"-* 2>/dev/null || true; }
trap cleanup EXIT
[ -f examples/data/shakespeare_byte/train_000.bin ] || \
  "$BIN" prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null
cat > "$TMP/m124.ini" <<INI
[data]
data = examples/data/shakespeare_byte
[model]
n_layer = 12
n_head = 12
d_model = 768
seq_len = 64
vocab_size = 50257
[train]
batch_size = 4
global_batch = 4
steps = 1000
lr = 1e-4
warmup_steps = 1
[run]
name = $NAME
threads = 2
log_every = 1
eval_every = 0
sample_every = 0
sample_tokens = 0
INI
echo "bench_restart: 124M, B=4 T=64, 2 threads, $ROUNDS relaunches x $STEPS steps; load $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" train --config "$TMP/m124.ini" --run-dir "$TMP/run" --stop-after 2 --ckpt-every 2 \
  --ckpt-keep 1 >"$TMP/first.txt" 2>&1 || { cat "$TMP/first.txt" >&2; exit 1; }
for r in $(seq 1 "$ROUNDS"); do
  MINITRAIN_ATTEMPT=2 /usr/bin/python3 - "$STEPS" "$BIN" train --config "$TMP/m124.ini" --run-dir "$TMP/run" \
    --resume 2 --stop-after $((2 + STEPS)) --ckpt-every 0 >"$TMP/r$r.txt" <<'PY'
import re, subprocess, sys, time
want = int(sys.argv[1])
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
seen = 0
for line in p.stdout:
    print(f"{time.monotonic() - t0:.3f} {line}", end="", flush=True)
    seen += re.match(r"step \d+/\d+ \| loss", line) is not None
    if seen == want:  # the steps are measured: skip the final eval and save
        p.kill()
        break
p.wait()
PY
done
/usr/bin/python3 - "$TMP" "$ROUNDS" <<'PY'
import re, statistics as st, sys
d, rounds = sys.argv[1], int(sys.argv[2])
rows = []
for r in range(1, rounds + 1):
    res = first = None
    steps = []
    for line in open(f"{d}/r{r}.txt"):
        ts, _, text = line.partition(" ")
        m = re.search(r"resumed from step \d+ .* in (\d+) ms", text)
        if m: res = (float(ts), float(m.group(1)) / 1e3)
        m = re.match(r"step (\d+)/\d+ \| loss .*?\| (\d+) ms", text)
        if m:
            steps.append(float(m.group(2)) / 1e3)
            if first is None: first = float(ts)
    if res is None or first is None or len(steps) < 2:
        sys.exit(f"bench_restart: relaunch {r} did not resume and step:\n" + open(f"{d}/r{r}.txt").read())
    steady = st.median(steps[1:])
    rows.append((first, res[0] - res[1], res[1], steps[0], steady))
    print(f"relaunch {r}: restart to first step {first:.2f} s = start-up {res[0] - res[1]:.2f} + "
          f"resume {res[1]:.2f} + first step {steps[0]:.2f} (+ logging); steady step {steady:.2f} s")
f, su, rs, fs, sd = (st.median(x) for x in zip(*rows))
print(f"median: restart to first step {f:.2f} s (start-up {su:.2f}, resume {rs:.2f}, first step "
      f"{fs:.2f} = {fs / sd:.1f}x steady {sd:.2f})")
print(f"target: first step <= 2 x steady: {'met' if fs <= 2 * sd else 'NOT met'} "
      f"(resume + first step {rs + fs:.2f} s vs resume + 2 x steady {rs + 2 * sd:.2f} s)")
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
