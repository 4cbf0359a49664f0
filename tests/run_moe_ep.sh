#!/usr/bin/env bash
# tests/run_moe_ep.sh — the MoE layer under expert parallelism equals one process.
#
# Builds tests/moe_ep_driver.c against build/libminitrain.a with the Makefile's flags and runs it
# under mpirun with ep = 1, 2, 4 (one EP group) and ep = 2 on 4 ranks (two groups). In each run
# every rank compares, case by case, its outputs, input gradients, expert gradients, the summed
# router gradient and the statistics with a single-process run: over the group's whole batch
# (group scope) or over each rank's slice in turn (per-rank scope). Cases: top-1/top-2; dropless,
# capacity factor 1.0 and 0.5 (with drops); even, uneven and empty token slices. Tolerances in
# the driver's header. Exit status non-zero if any case fails on any rank. About 2 s.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
make -s "$BUILD/libminitrain.a" >/dev/null
. tests/lib.sh
blas_env
BIN="$BUILD/tests/moe_ep_driver"
mpi_driver tests/moe_ep_driver.c "$BIN"
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
export OMP_NUM_THREADS=1
fail=0
for spec in "1 1" "2 2" "4 4" "4 2"; do
  set -- $spec
  echo "-- $1 ranks, ep=$2"
  if ! timeout 120 $MPI -np "$1" "$BIN" "$2"; then fail=1; fi
done
if [ "$fail" = 0 ]; then echo "moe ep: all layouts match the single process"; else echo "moe ep: FAILED"; exit 1; fi
