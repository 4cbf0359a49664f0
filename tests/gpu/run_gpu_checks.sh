#!/usr/bin/env bash
# tests/gpu/run_gpu_checks.sh — the whole device check of issue 16 in one command, for one lent
# GPU (written for the `nvidia-h200` kind: one H200, 16 cores), at most ~5 minutes:
#
#   1. the machine: nvidia-smi (read only), nvcc, the binaries (carried or built here)
#   2. op parity CUDA vs CPU: fp32 (test_ops.c tolerances, reruns bit-identical), tf32, bf16
#      (<= 1e-2 relative, gradient cosine >= 0.99)                       — gpu_parity parity
#   3. training (the backend table's `device = cuda`): 20 steps on the
#      GPU vs the CPU golden run (fp32 losses 1e-5 relative), a bit-identical GPU rerun, a GPU
#      checkpoint resumed on the CPU and a CPU checkpoint resumed on the GPU
#   4. MFU: the measured bf16 GEMM peak, then the GPT-2 124M step at T = 1024, B = 16 and 32,
#      fp32 / tf32 / bf16: tokens/s, MFU vs 989 TFLOP/s and vs the measured peak
#
# How a session runs it (no device here? nothing to do: see docs/gpu-results.md):
#   here:   bash tests/gpu/pack_carry.sh           (builds, packs binaries + libraries: .gpucarry/)
#   device: run(command="bash tests/gpu/run_gpu_checks.sh", carry=[".gpucarry"], timeout_s=420)
# Results go to $OUT (at most 8 files come back): summary.txt, checks.log, machine.txt,
# parity.txt, train.txt, bench.txt. Exit status 0 only if every check that ran passed.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
START=$(date +%s)
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
exec > >(tee -a "$OUT/checks.log") 2>&1

fails=0
note() { echo "$*" | tee -a "$SUMMARY"; }
pass() { note "PASS $*"; }
fail() { note "FAIL $*"; fails=$((fails + 1)); }
skip() { note "SKIP $*"; }
elapsed() { echo $(($(date +%s) - START)); }

# ---- 1. machine ----------------------------------------------------------------------------
{
  echo "== date"; date -u
  echo "== nvidia-smi"; nvidia-smi 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
    --format=csv 2>&1
  echo "== nvcc"; (command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2>&1; nvcc --version 2>&1 | tail -2
  echo "== cpu"; nproc; uname -a
  echo "== compilers"; command -v gcc cc g++ 2>&1
} > "$OUT/machine.txt" 2>&1
note "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"

# binaries: carried (tests/gpu/pack_carry.sh) or built here
CARRY=/tmp/mt-carry
if [ -f .gpucarry/carry.tar.gz ]; then
  rm -rf "$CARRY"; mkdir -p "$CARRY"
  tar -xzf .gpucarry/carry.tar.gz -C "$CARRY"
  MT=$CARRY/bin/minitrain
  GP=$CARRY/bin/gpu_parity
  export LD_LIBRARY_PATH="$CARRY/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "binaries: carried ($(cat "$CARRY/BUILD_INFO" 2>/dev/null || echo 'no BUILD_INFO'))"
else
  note "binaries: none carried; building here with make GPU=1 (needs the Debian libraries)"
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  if make -j"$(nproc)" GPU=1 BUILD=build-gpu-dev BIN=build-gpu-dev/minitrain \
       build-gpu-dev/minitrain build-gpu-dev/tests/gpu/gpu_parity > "$OUT/build.txt" 2>&1; then
    MT=$ROOT/build-gpu-dev/minitrain
    GP=$ROOT/build-gpu-dev/tests/gpu/gpu_parity
  else
    tail -20 "$OUT/build.txt"
    fail "build on the device (see build.txt); carry binaries: bash tests/gpu/pack_carry.sh"
    exit 1
  fi
fi
# CUDA's own libraries (cuBLAS, cudart, NCCL) come from the image: the toolkit or PyTorch's wheels
for lib in $(ldd "$GP" "$MT" 2>&1 | awk '/not found/ {print $1}' | sort -u); do
  dir=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda*/lib64 /opt /usr/lib /usr/local/lib -name "$lib" 2>/dev/null | head -1)")
  [ "$dir" != . ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
done
missing=$(ldd "$GP" "$MT" 2>&1 | grep 'not found' | sort -u)
if [ -n "$missing" ]; then
  echo "$missing"
  fail "libraries missing on the device: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
  exit 1
fi

if info=$("$GP" info 2>&1); then
  note "$info"
else
  fail "no usable CUDA device: $info"
  exit 1
fi

# ---- 2. op parity --------------------------------------------------------------------------
: > "$OUT/parity.txt"
for p in fp32 tf32 bf16; do
  if timeout 120 "$GP" parity --precision "$p" >> "$OUT/parity.txt" 2>&1; then
    pass "parity $p ($(grep -c PASS "$OUT/parity.txt") PASS lines so far)"
  else
    fail "parity $p: $( (grep -E 'FAIL|error' "$OUT/parity.txt" || tail -2 "$OUT/parity.txt") | head -5 | tr '\n' ';')"
  fi
done
note "after parity: $(elapsed) s"

# ---- 3. training: GPU vs CPU, rerun, checkpoints across devices ----------------------------
: > "$OUT/train.txt"
# the device is chosen by MINITRAIN_DEVICE (gpu-backend's ops_select: it overrides the `device`
# key); a build without the backend table has neither the key nor --device on sample
if "$MT" train --help 2>&1 | grep -qE '^  device ' || "$MT" sample --help 2>&1 | grep -q -- '--device'; then
  T=/tmp/mt-train; rm -rf "$T"; mkdir -p "$T"
  head -c 400000 examples/data/tinyshakespeare.txt > "$T/small.txt"
  "$MT" prepare --input "$T/small.txt" --out "$T/data" >> "$OUT/train.txt" 2>&1
  cat > "$T/tiny.ini" <<'INI'
n_layer = 4
n_head = 4
d_model = 128
seq_len = 128
batch_size = 16
global_batch = 16
steps = 20
lr = 3e-3
warmup_steps = 3
threads = 16
log_every = 5
eval_every = 0
eval_batches = 2
sample_tokens = 0
ckpt_every = 10
ckpt_keep = 10
ckpt_tier0 = 0
INI
  train() { # train DEVICE [--key value ...]
    local dev=$1; shift
    MINITRAIN_DEVICE=$dev timeout 120 "$MT" train --config "$T/tiny.ini" --data "$T/data" "$@" >> "$OUT/train.txt" 2>&1; }
  losses() { python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1] + '/run.db')
for s, l in c.execute('SELECT step, train_loss FROM metrics WHERE train_loss IS NOT NULL ORDER BY rowid'):
    print(s, repr(l))" "$1"; }
  close() { python3 -c "
import sys
a = [l.split() for l in open(sys.argv[1])]; b = [l.split() for l in open(sys.argv[2])]
tol = float(sys.argv[3])
bad = [(x, y) for x, y in zip(a, b) if x[0] != y[0] or abs(float(x[1]) - float(y[1])) > tol * abs(float(x[1]))]
print('rows', len(a), len(b), 'worst', max([abs(float(x[1]) - float(y[1])) / abs(float(x[1])) for x, y in zip(a, b)] or [0]))
sys.exit(0 if len(a) == len(b) == 20 and not bad else 1)" <(losses "$1") <(losses "$2") "$3"; }
  train cpu --run-dir "$T/cpu" || fail "train on cpu"
  train cuda --run-dir "$T/gpu" || fail "train on cuda"
  train cuda --run-dir "$T/gpu2" || fail "train on cuda (rerun)"
  out=$(close "$T/cpu" "$T/gpu" 1e-5) && pass "20 steps cuda vs cpu golden, losses 1e-5 rel ($out)" \
    || fail "20 steps cuda vs cpu golden ($out)"
  diff <(losses "$T/gpu") <(losses "$T/gpu2") > /dev/null && pass "fp32 cuda rerun: losses bit-identical" \
    || fail "fp32 cuda rerun differs"
  cmp -s "$T/gpu/model.safetensors" "$T/gpu2/model.safetensors" && pass "fp32 cuda rerun: model.safetensors bit-identical" \
    || fail "fp32 cuda rerun: model.safetensors differs"
  # a checkpoint saved on the GPU resumes on the CPU, and the other way round
  train cuda --run-dir "$T/g2c" --stop-after 10 && train cpu --run-dir "$T/g2c"
  grep -q "resumed from step 10" "$OUT/train.txt" && out=$(close "$T/cpu" "$T/g2c" 1e-5) \
    && pass "cuda checkpoint -> cpu resume: losses 1e-5 rel of the cpu run ($out)" || fail "cuda -> cpu resume ($out)"
  train cpu --run-dir "$T/c2g" --stop-after 10 && train cuda --run-dir "$T/c2g"
  out=$(close "$T/cpu" "$T/c2g" 1e-5) && pass "cpu checkpoint -> cuda resume: losses 1e-5 rel ($out)" \
    || fail "cpu -> cuda resume ($out)"
  for r in cpu gpu; do echo "== losses $r"; losses "$T/$r"; done >> "$OUT/train.txt"
else
  skip "training checks: this minitrain has no device selection (gpu-backend's backend table is not merged in this build)"
fi
note "after training: $(elapsed) s"

# ---- 4. MFU bench --------------------------------------------------------------------------
: > "$OUT/bench.txt"
peak=$(timeout 60 "$GP" peak 2>&1 | tee -a "$OUT/bench.txt" | awk '/peak:/ {print $(NF-1)}')
note "bf16 GEMM peak (8192^3, cuBLAS): ${peak:-?} TFLOP/s"
for B in 16 32; do
  for p in bf16 tf32 fp32; do
    if [ "$(elapsed)" -gt 270 ]; then skip "bench B=$B $p: time budget spent"; continue; fi
    line=$(timeout 90 "$GP" bench "$B" 1024 --precision "$p" --steps 5 --peak "${peak:-0}" 2>&1 | tee -a "$OUT/bench.txt" | grep '^bench')
    if [ -n "$line" ]; then note "$line"; else fail "bench B=$B $p: $(tail -2 "$OUT/bench.txt" | tr '\n' ' ')"; fi
  done
done

# the trainer's own step on cuda at the same shape (needs the backend table): tokens/s and MFU as
# the trainer logs them (run.db), fp32 and bf16 (MINITRAIN_PRECISION, read by ops_cuda_init)
if [ -n "${T:-}" ] && [ -d "${T:-/nonexistent}/data" ]; then
  for p in bf16 fp32; do
    if [ "$(elapsed)" -gt 285 ]; then skip "trainer step $p: time budget spent"; continue; fi
    rd=$T/gpt2-$p
    MINITRAIN_DEVICE=cuda MINITRAIN_PRECISION=$p timeout 60 "$MT" train --data "$T/data" --run-dir "$rd" \
      --n-layer 12 --n-head 12 --d-model 768 --seq-len 1024 --vocab-size 50257 --batch-size 16 \
      --global-batch 16 --steps 6 --warmup-steps 1 --log-every 1 --eval-every 0 --eval-batches 1 \
      --sample-tokens 0 >> "$OUT/bench.txt" 2>&1
    r=$(python3 -c "
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1] + '/run.db').execute('SELECT tokens_per_s, mfu, step_ms FROM metrics WHERE train_loss IS NOT NULL ORDER BY rowid').fetchall()[2:]
if rows:
    rows.sort(); t, m, s = rows[len(rows) // 2]
    print('tokens_per_s=%.0f mfu=%.3f step_ms=%.1f' % (t, m or float('nan'), s))" "$rd" 2>&1)
    if [ -n "$r" ]; then note "trainer GPT-2 124M B=16 T=1024 $p on cuda (median of steps 3-6): $r"; else fail "trainer step $p (see bench.txt)"; fi
  done
fi

note "total: $(elapsed) s, failures: $fails"
exit $((fails > 0))
