#!/usr/bin/env bash
# bench/bench_cp.sh — context parallelism at T = 1024 on the Shakespeare model (examples/
# shakespeare.ini: 4 layers, 4 heads, d_model 192), microbatch 2 sequences, 2 steps.
#
# For cp = 1 (one process), 2 and 4 prints: the activation memory each rank allocates (the
# trainer's start-up line: gpt_activation_floats of this rank's shard, against one process
# holding the whole sequence), the peak resident memory of each rank (/usr/bin/time), the
# ring volume sent per rank in one step against the formula (6·cp − 4)·B·(T/cp)·d per layer
# (parallel/cp.h), and the step time. On the 2-core machine cp 4 oversubscribes the cores, so
# its step time is not a speed-up figure. Then tp 2 with and without sequence parallelism
# (sp = 1): activation memory per rank, peak RSS and the step time.
#
#   bash bench/bench_cp.sh            (after `make`, from the repository root)
set -euo pipefail
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none --mca mpi_yield_when_idle 1"
TMP=$(mktemp -d /tmp/mt_bcp_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
[ -f examples/data/shakespeare_byte/train_000.bin ] || \
  ./minitrain prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null
BASE="--config examples/shakespeare.ini --seq-len 1024 --batch-size 2 --global-batch 2 --steps 2 --warmup-steps 1 --eval-every 0 --eval-batches 1 --sample-tokens 0 --log-every 1 --threads 1"
for cp in 1 2 4; do
  if [ $cp = 1 ]; then
    /usr/bin/time -f "maxrss %M KiB" ./minitrain train $BASE --run-dir "$TMP/cp1" > "$TMP/cp1.log" 2>&1
  else
    $MPI -np $cp /usr/bin/time -f "maxrss %M KiB" ./minitrain train $BASE --cp $cp --run-dir "$TMP/cp$cp" > "$TMP/cp$cp.log" 2>&1
  fi
  echo "== cp $cp"
  grep -h "activation memory per rank" "$TMP/cp$cp.log" | sed 's/.*| activation/  activation/' || true
  grep -h "cp ring: step 2" "$TMP/cp$cp.log" | sed 's/.*cp ring:/  ring:/' || true
  grep -h "^.*step 2/2" "$TMP/cp$cp.log" | grep -o "loss [0-9.]* .*ms" | sed 's/^/  /' | head -1
  grep -h "maxrss" "$TMP/cp$cp.log" | sed 's/^/  rank peak RSS: /'
done
for flags in "--tp 2" "--tp 2 --sp 1"; do
  name=$(tr -d ' -' <<< "$flags")
  $MPI -np 2 /usr/bin/time -f "maxrss %M KiB" ./minitrain train $BASE $flags --run-dir "$TMP/$name" > "$TMP/$name.log" 2>&1
  echo "== $flags"
  grep -h "sequence parallel:" "$TMP/$name.log" | sed 's/.*| activation/  activation/' || true
  grep -h "^.*step 2/2" "$TMP/$name.log" | grep -o "loss [0-9.]* .*ms" | sed 's/^/  /' | head -1
  grep -h "maxrss" "$TMP/$name.log" | sed 's/^/  rank peak RSS: /'
done
