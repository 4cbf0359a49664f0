#!/usr/bin/env bash
# tests/run_peak.sh — the per-machine sgemm peak (ops/peak_stable.c, docs/mfu.md "A stable peak")
# through the product: a training run probes when the cache has no line for its key and writes
# one; the next run reads it instead of probing; a malformed cache is ignored (the run still
# trains and rewrites it); a peak far below the machine's (planted in the cache) is beaten by
# the first step, and the trainer says so, re-probes, never prints MFU above 100% and raises the
# cached figure; `minitrain bench gemm` prints the stable peak, its spread and the read bandwidth.
# The cache lives in this test's temporary directory (MINITRAIN_PEAK_CACHE). About 20 s.
set -euo pipefail
MT=./minitrain
. tests/lib.sh
tmp_dir mt_peak
export MINITRAIN_PEAK_CACHE="$TMP/cache/peak"

tiny_corpus 100000 "$TMP/byte"
cat > "$TMP/tiny.ini" <<INI
[model]
n_layer = 2
n_head = 2
d_model = 64
seq_len = 32
[train]
batch_size = 4
global_batch = 4
steps = 4
[run]
threads = 2
log_every = 1
eval_every = 0
sample_every = 0
INI
train() { $MT train --config "$TMP/tiny.ini" --data "$TMP/byte" --run-dir "$TMP/$1" --resume no 2>&1; }

# 1. no cache: probe, then one line for this machine
train r1 > "$TMP/r1.log"
check "first run probes (rounds until two agree, or capped)" grep -q "sgemm peak: .* probed in [0-9]* rounds" "$TMP/r1.log"
check "and writes one cache line for (cpu, threads=2, ranks=1)" \
  test "$(grep -c '^v1 threads=2 ranks=1 sgemm=' "$MINITRAIN_PEAK_CACHE")" = 1
g1=$(sed -n 's/^v1 threads=2 ranks=1 sgemm=\([^ ]*\) .*/\1/p' "$MINITRAIN_PEAK_CACHE")
check "the cached peak is a plausible sgemm rate ($g1 FLOP/s > 1e9)" \
  /usr/bin/python3 -c "import sys; sys.exit(0 if float('$g1') > 1e9 else 1)"

# 2. the next run reads it: same figure, no probe
train r2 > "$TMP/r2.log"
check "second run uses the cached figure" grep -q "this machine's cached figure" "$TMP/r2.log"
check "and does not probe" bash -c "! grep -q 'probed in' '$TMP/r2.log'"

# 3. a malformed cache is ignored: the run trains, probes and rewrites a good line
printf 'garbage\nv1 threads=2 ranks=1 sgemm=banana\n' > "$MINITRAIN_PEAK_CACHE"
train r3 > "$TMP/r3.log"
check "malformed cache: the run still trains" grep -q "step 4/4" "$TMP/r3.log"
check "malformed cache: probed and rewritten without the junk" \
  bash -c "grep -q 'probed in' '$TMP/r3.log' && ! grep -q garbage '$MINITRAIN_PEAK_CACHE' && grep -q '^v1 threads=2 ranks=1 sgemm=[0-9]' '$MINITRAIN_PEAK_CACHE'"

# 4. a planted peak of 1 MFLOP/s: the first step beats it -> warning, re-probe, MFU <= 100%
cpu=$(sed -n 's/.* cpu=//p' "$MINITRAIN_PEAK_CACHE" | head -1)
echo "v1 threads=2 ranks=1 sgemm=1.0e+06 bw=0 spread=0 cpu=$cpu" > "$MINITRAIN_PEAK_CACHE"
train r4 > "$TMP/r4.log"
check "a step faster than the peak is reported and re-probed" grep -q "above the sgemm peak of 0.0 GFLOP/s: the peak was measured low; re-probed" "$TMP/r4.log"
mfus=$(grep -o "MFU [0-9.]*%" "$TMP/r4.log" | tr -dc '0-9.\n' | sort -g | tail -1)
check "no MFU above 100% is printed (largest: ${mfus}%)" \
  /usr/bin/python3 -c "import sys; sys.exit(0 if float('$mfus') <= 100 else 1)"
g4=$(sed -n 's/^v1 threads=2 ranks=1 sgemm=\([^ ]*\) .*/\1/p' "$MINITRAIN_PEAK_CACHE")
check "the cache was raised from 1e6 to the re-probe ($g4)" \
  /usr/bin/python3 -c "import sys; sys.exit(0 if float('$g4') > 1e9 else 1)"

# 5. bench gemm: stable peak with rounds and spread, read bandwidth, cached
$MT bench gemm --threads 1 --seconds 0.3 > "$TMP/bench.log" 2>&1
check "bench gemm prints the stable peak and its spread" grep -qE "stable sgemm peak: [0-9.]+ GFLOP/s .* spread [0-9.]+%" "$TMP/bench.log"
check "bench gemm prints the read bandwidth" grep -qE "read bandwidth: [0-9.]+ GB/s" "$TMP/bench.log"
check "bench gemm caches threads=1 with a measured bandwidth" \
  grep -qE "^v1 threads=1 ranks=1 sgemm=[0-9.e+]+ bw=[1-9]" "$MINITRAIN_PEAK_CACHE"
check "and keeps the threads=2 line" grep -q "^v1 threads=2 ranks=1" "$MINITRAIN_PEAK_CACHE"

finish peak
