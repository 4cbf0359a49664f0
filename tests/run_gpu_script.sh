#!/usr/bin/env bash
# tests/run_gpu_script.sh — the device check's scripts are ready before a device is asked for:
# tests/gpu/run_gpu_checks.sh and tests/gpu/pack_carry.sh parse (bash -n) and pass shellcheck
# (warnings and errors) when shellcheck is installed; the CUDA kernels compile with -Werror where
# nvcc is installed, and so does the whole binary without MPI (`make GPU=1 MPICC=`) into
# build-gpu-nompi/, while `make GPU=1` links build-gpu/minitrain (never ./minitrain); the
# script's results go to $OUT and it names every stage of issue 16. Nothing here needs a GPU
# (about two minutes of nvcc on a fresh tree, seconds after).
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
  objs=$(for f in ops/ops_cuda*.cu; do echo "build-gpu/${f%.cu}.o"; done)
  # shellcheck disable=SC2086
  make -s -j2 GPU=1 $objs >/dev/null && ok "CUDA kernels compile (sm_90, sm_80) with warnings and spills as errors" \
    || bad "CUDA kernels do not compile cleanly (make GPU=1)"
  # a GPU node without Open MPI: `make GPU=1 MPICC=` builds the whole binary (one process, NCCL
  # without MPI). The kernels' objects are the ones just built (nvcc's flags carry no MPI), copied
  # when newer, so only the C files compile again (about a minute on a fresh tree)
  B=build-gpu-nompi
  mkdir -p $B/ops && cp -pu build-gpu/ops/ops_cuda*.o $B/ops/
  if make -s -j2 GPU=1 MPICC= BUILD=$B "$B/minitrain" > "$B.log" 2>&1 && "$B/minitrain" train --help >/dev/null \
     && ! ldd "$B/minitrain" | grep -q libmpi; then ok "make GPU=1 MPICC= builds $B/minitrain without libmpi"
  else bad "make GPU=1 MPICC=: $(grep -m3 -i 'error' "$B.log")"; fi
  rm -f "$B.log"
  # `make GPU=1` writes build-gpu/minitrain, never the CPU build's ./minitrain (make -n: nothing built)
  links=$(make -n -B GPU=1 2>/dev/null | grep -o -- ' -o [^ ]*minitrain ' | sort -u | tr -d '\n')
  [ "$links" = " -o build-gpu/minitrain " ] && ok "make GPU=1 links build-gpu/minitrain, not ./minitrain" \
    || bad "make GPU=1 links '$links'"
else
  echo "  skip CUDA compile (no /usr/local/cuda/bin/nvcc)"
fi
exit $((fail > 0))
