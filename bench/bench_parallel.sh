#!/usr/bin/env bash
# bench/bench_parallel.sh — tokens/s of the Shakespeare model on one process vs dp=2 vs tp=2
# (2 ranks), threads per rank set so the cores are not oversubscribed, and the share of step
# time spent in blocking communication (printed by the trainer as "comm N%").
#
#   bash bench/bench_parallel.sh [STEPS]        (run from the repository root after `make`)
set -euo pipefail
STEPS=${1:-40}
CORES=$(nproc)
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
TMP=$(mktemp -d /tmp/mt_bpar_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
[ -f examples/data/shakespeare_byte/train_000.bin ] || \
  ./minitrain prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null
COMMON="--config examples/shakespeare.ini --steps $STEPS --warmup-steps 2 --eval-every 0 --sample-tokens 0 --log-every 1 --batch-size 8"

summ() { # median tokens/s over steps 6.. and median comm share, from a log
  /usr/bin/python3 - "$1" <<'PY'
import re, statistics, sys
tps, comm = [], []
for line in open(sys.argv[1]):
    m = re.match(r"step (\d+)/\d+ \| loss .*?\| ([0-9]+) tok/s", line)
    if m and int(m.group(1)) > 5:
        tps.append(float(m.group(2)))
        c = re.search(r"comm ([0-9]+)%", line)
        comm.append(float(c.group(1)) if c else 0.0)
print(f"{statistics.median(tps):.0f} {statistics.median(comm):.0f}")
PY
}

./minitrain train $COMMON --threads "$CORES" --run-dir "$TMP/dp1" > "$TMP/dp1.log"
read -r t1 c1 < <(summ "$TMP/dp1.log")
T=$(( CORES / 2 > 0 ? CORES / 2 : 1 ))
$MPI -np 2 ./minitrain train $COMMON --threads "$T" --dp 2 --run-dir "$TMP/dp2" > "$TMP/dp2.log"
read -r t2 c2 < <(summ "$TMP/dp2.log")
$MPI -np 2 ./minitrain train $COMMON --threads "$T" --tp 2 --run-dir "$TMP/tp2" > "$TMP/tp2.log"
read -r t3 c3 < <(summ "$TMP/tp2.log")

printf "\nShakespeare model (examples/shakespeare.ini), %d steps, %d cores\n" "$STEPS" "$CORES"
printf "%-22s %12s %10s %14s\n" layout "tokens/s" "vs dp=1" "comm share"
printf "%-22s %12s %10s %13s%%\n" "1 process, $CORES threads" "$t1" "1.00" "$c1"
printf "%-22s %12s %10.2f %13s%%\n" "dp=2, $T thread(s)/rank" "$t2" "$(awk "BEGIN{print $t2/$t1}")" "$c2"
printf "%-22s %12s %10.2f %13s%%\n" "tp=2, $T thread(s)/rank" "$t3" "$(awk "BEGIN{print $t3/$t1}")" "$c3"
