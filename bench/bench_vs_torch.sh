#!/usr/bin/env bash
# bench/bench_vs_torch.sh — minitrain's CPU training step against PyTorch's on the same shape, in
# the same run: GPT-2 124M, B=4 T=64, fp32, the same thread count, and OPENBLAS_CORETYPE as
# minitrain picks it (SkylakeX with AVX-512, else Haswell with AVX2; a value already set wins),
# so both get the same OpenBLAS kernels (Debian's torch links Debian's OpenBLAS).
# The machine may be shared: the two alternate ROUNDS times, each figure is the median of its
# steps, the ratio is of the medians over all rounds, and the load average is printed.
#
#   make bench && [VERBOSE=1] bash bench/bench_vs_torch.sh [THREADS=2] [STEPS=4] [ROUNDS=1]
# (VERBOSE=1 also prints both full outputs: bench_step's time per op kind and its limits)
set -euo pipefail
THREADS=${1:-2}
STEPS=${2:-4}
ROUNDS=${3:-1}
cd "$(dirname "$0")/.."
[ -x build/bench/bench_step ] || { echo "bench_vs_torch: build/bench/bench_step missing (run: make bench)" >&2; exit 2; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "bench_vs_torch: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 2; }
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d /tmp/mt_bvt_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
echo "bench_vs_torch: GPT-2 124M, B=4 T=64, $THREADS threads, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, $STEPS steps x $ROUNDS rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  /usr/bin/python3 bench/torch_step.py "$THREADS" "$STEPS" > "$TMP/torch_$r.txt"
  grep '^torch tok/s' "$TMP/torch_$r.txt" | sed "s/^/round $r: /"
  build/bench/bench_step --threads "$THREADS" --steps "$STEPS" > "$TMP/mt_$r.txt"
  grep '^tokens/s' "$TMP/mt_$r.txt" | sed "s/^/round $r: minitrain /"
  [ -z "${VERBOSE:-}" ] || cat "$TMP/torch_$r.txt" "$TMP/mt_$r.txt"
done
/usr/bin/python3 - "$TMP" "$ROUNDS" <<'PY'
import re, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
tt, mt = [], []
for r in range(1, rounds + 1):
    for line in open(f"{d}/torch_{r}.txt"):
        m = re.match(r"torch step (\d+): .*\| (\d+) ms", line)
        if m and int(m.group(1)) > 0: tt.append(float(m.group(2)))
    for line in open(f"{d}/mt_{r}.txt"):
        m = re.match(r"step (\d+)(?: \(profiled\))?: .*?\| (\d+) ms", line)
        if m and int(m.group(1)) > 0: mt.append(float(m.group(2)))
tok = 4 * 64
t, m = tok / (statistics.median(tt) / 1e3), tok / (statistics.median(mt) / 1e3)
tb, mb = tok / (min(tt) / 1e3), tok / (min(mt) / 1e3)
print(f"torch      {t:7.1f} tok/s (median of {len(tt)} steps), best {tb:.1f}")
print(f"minitrain  {m:7.1f} tok/s (median of {len(mt)} steps), best {mb:.1f}")
print(f"ratio      {m / t:.2f}x (medians), {mb / tb:.2f}x (best steps); target >= 2.5x")
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
