#!/usr/bin/env bash
# tests/run_gpu_script.sh — the device check's scripts are ready before a device is asked for:
# tests/gpu/run_gpu_checks.sh and tests/gpu/pack_carry.sh parse (bash -n) and pass shellcheck
# (warnings and errors) when shellcheck is installed; the CUDA kernels compile with -Werror where
# nvcc is installed; the script's results go to $OUT and it
# names every stage of issue 16. Nothing here needs a GPU (about a minute of nvcc on a fresh tree, a second after).
set -u
cd "$(dirname "$0")/.." || exit 1
fail=0
ok() { echo "  ok   $1"; }
bad() { echo "  FAIL $1"; fail=$((fail + 1)); }
for s in tests/gpu/run_gpu_checks.sh tests/gpu/pack_carry.sh; do
  bash -n "$s" && ok "bash -n $s" || bad "bash -n $s"
  if command -v shellcheck >/dev/null 2>&1; then
    shellcheck -S warning "$s" && ok "shellcheck $s" || bad "shellcheck $s"
  else
    echo "  skip shellcheck (not installed)"
  fi
done
for stage in 'nvidia-smi' 'parity --precision' 'MINITRAIN_DEVICE' 'train cuda' 'stop-after 10' ' peak' 'bench "\$B" 1024'; do
  grep -q -- "$stage" tests/gpu/run_gpu_checks.sh && ok "run_gpu_checks.sh has stage: $stage" \
    || bad "run_gpu_checks.sh lacks stage: $stage"
done
# every kernel compiles under -Werror (nvcc, host compiler, ptxas spills) where the CUDA toolkit
# is installed (/usr/local/cuda: every machine of this project; the kernels' objects only)
if [ -x /usr/local/cuda/bin/nvcc ]; then
  objs=$(for f in train/ops_cuda*.cu; do echo "build-gpu/${f%.cu}.o"; done)
  # shellcheck disable=SC2086
  make -s -j2 GPU=1 $objs >/dev/null && ok "CUDA kernels compile (sm_90, sm_80) with warnings and spills as errors" \
    || bad "CUDA kernels do not compile cleanly (make GPU=1)"
else
  echo "  skip CUDA compile (no /usr/local/cuda/bin/nvcc)"
fi
exit $((fail > 0))
