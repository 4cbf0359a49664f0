#!/usr/bin/env bash
# tests/run_cp.sh — context parallelism (cp): ring attention equals the unsharded attention.
#
# 1. tests/cp_ring_driver.c under mpirun with cp = 1, 2, 4: each rank's rows of the output,
#    probabilities and dq/dk/dv against ops_cpu_attention_forward/backward on the whole
#    sequence, and central finite differences through the ring (tolerances in the driver).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make -s "$BUILD/libminitrain.a" >/dev/null
. tests/layout_lib.sh
blas_env
BIN="$BUILD/tests/cp_ring_driver"
mkdir -p "$BUILD/tests"
${CC:-gcc} -std=gnu11 -O3 -march=native -fno-math-errno -fopenmp -Wall -Wextra -Werror -I. \
  -I"$BLAS_INC" -DMT_HAVE_MPI $(mpicc --showme:compile) tests/cp_ring_driver.c "$BUILD/libminitrain.a" \
  -o "$BIN" -L"$BLAS_LIB" -Wl,-rpath,"$BLAS_LIB" -lopenblas $(mpicc --showme:link) \
  -lsqlite3 -linih -lcjson -lmicrohttpd -lpcre2-8 -lpthread -lm
for np in 1 2 4; do
  if out=$(OMP_NUM_THREADS=1 timeout 120 $MPI -np $np "$BIN" 2>&1); then ok "ring attention: $out"
  else bad "ring attention cp $np: $(echo "$out" | tail -3)"; fi
done
finish "cp"
