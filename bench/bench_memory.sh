#!/usr/bin/env bash
# bench/bench_memory.sh — the memory wall, measured: bytes per rank under ZeRO 0..3, the
# predicted budget against the measured peak RSS, and the time ZeRO-3 and activation recompute
# cost. The figures in docs/parallel.md come from it.
#
#   bash bench/bench_memory.sh [memory|time|all]   (from the repository root after `make`)
#
# memory: the GPT-2 124M shape (12 layers, 12 heads, d_model 768, vocab 50257; context 64 to keep
#         the activations small) at dp 4, one step each under zero 0 and zero 3: params + grads +
#         optimizer bytes per rank against 16Ψ and 16Ψ/4, and every rank's peak RSS (VmHWM)
#         against its prediction. Then a memory_limit between the two: zero 0 refused, zero 3
#         trains. About 9 GB of RAM at zero 0.
# time:   step-time ratios in one run: zero 3 vs zero 1 at dp 2 and dp 4, and recompute
#         selective / full vs none on the Shakespeare model (examples/shakespeare.ini).
set -euo pipefail
WHAT=${1:-all}
MT=./minitrain
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
TMP=$(mktemp -d /tmp/mt_bmem_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
[ -f examples/data/shakespeare_byte/train_000.bin ] || \
  $MT prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte >/dev/null

# the memory and memory_peak events of a run: one line per rank
mem_table() {
  /usr/bin/python3 - "$1/run.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
b = json.loads(db.execute("SELECT detail FROM events WHERE kind='memory'").fetchone()[0])
p = json.loads(db.execute("SELECT detail FROM events WHERE kind='memory_peak'").fetchone()[0])
M = 2 ** 20
for r, (pa, g, o, t, pk) in enumerate(zip(b["params"], b["grads"], b["optimizer"], b["total"], p["peak_rss"])):
    print(f"  rank {r}: params+grads+optimizer {(pa+g+o)/M:8.1f} MiB | predicted total {t/M:8.1f} MiB"
          f" | peak RSS {pk/M:8.1f} MiB ({100*(pk/t-1):+.1f}%)")
PY
}

if [ "$WHAT" = memory ] || [ "$WHAT" = all ]; then
  G="--data examples/data/shakespeare_byte --vocab-size 50257 --n-layer 12 --n-head 12 --d-model 768
     --seq-len 64 --batch-size 1 --global-batch 4 --steps 1 --warmup-steps 0 --eval-every 0
     --sample-tokens 0 --threads 1 --dp 4"
  echo "GPT-2 124M shape, dp 4 (Ψ = parameters; fp32 AdamW: 16 B/param unsharded)"
  for z in 0 3; do
    $MPI -np 4 $MT train $G --zero $z --run-dir "$TMP/g$z" > "$TMP/g$z.log" 2>&1 || { tail -3 "$TMP/g$z.log"; exit 1; }
    n=$(grep -o "| [0-9.]*M parameters" "$TMP/g$z.log" | grep -o "[0-9.]*")
    echo "zero $z (Ψ = ${n}M: 16Ψ = $(/usr/bin/python3 -c "print(f'{16*$n*1e6/2**20:.1f}')") MiB, 16Ψ/4 = $(/usr/bin/python3 -c "print(f'{4*$n*1e6/2**20:.1f}')") MiB):"
    mem_table "$TMP/g$z"
  done
  lim=$(/usr/bin/python3 - "$TMP/g0/run.db" "$TMP/g3/run.db" <<'PY'
import json, sqlite3, sys
t = [max(json.loads(sqlite3.connect(a).execute("SELECT detail FROM events WHERE kind='memory'").fetchone()[0])["total"]) for a in sys.argv[1:]]
print(int(sum(t) / 2))
PY
)
  set +e
  $MPI -np 4 $MT train $G --zero 0 --memory-limit "$lim" --run-dir "$TMP/l0" > "$TMP/l0.log" 2>&1; rc0=$?
  $MPI -np 4 $MT train $G --zero 3 --memory-limit "$lim" --run-dir "$TMP/l3" > "$TMP/l3.log" 2>&1; rc3=$?
  set -e
  echo "memory_limit $((lim / 1048576)) MiB per rank: zero 0 exit $rc0 ($(grep -o 'exceeds memory_limit.*' "$TMP/l0.log" | head -1 | cut -c1-60)), zero 3 exit $rc3"
fi

if [ "$WHAT" = time ] || [ "$WHAT" = all ]; then
  S="--config examples/shakespeare.ini --steps 10 --warmup-steps 2 --eval-every 0 --sample-tokens 0 --log-every 1"
  med() { # median step ms over steps 3.. of a log
    /usr/bin/python3 - "$1" <<'PY'
import re, statistics, sys
ms = [float(m.group(2)) for m in (re.match(r"step (\d+)/\d+ \| loss .*?\| ([0-9.]+) ms", l) for l in open(sys.argv[1])) if m and int(m.group(1)) > 2]
print(f"{statistics.median(ms):.0f}")
PY
  }
  echo "step time, Shakespeare model (median over 3 interleaved rounds of the median of steps 3-10, ms):"
  rounds() { # rounds NAME CMD...: 3 runs, interleaved by the caller's loop order; prints nothing
    local name=$1; shift
    "$@" --run-dir "$TMP/$name" > "$TMP/$name.log" 2>&1; med "$TMP/$name.log" >> "$TMP/$name.ms"; rm -rf "$TMP/$name"
  }
  mid() { sort -n "$TMP/$1.ms" | sed -n 2p; }
  for i in 1 2 3; do
    for rc in none selective full; do rounds "r_$rc" $MT train $S --threads 1 --recompute $rc; done
  done
  n=$(mid r_none); s=$(mid r_selective); f=$(mid r_full)
  echo "  recompute none $n | selective $s ($(/usr/bin/python3 -c "print(f'{100*($s/$n-1):+.0f}%')")) | full $f ($(/usr/bin/python3 -c "print(f'{100*($f/$n-1):+.0f}%')")) — one process, 1 thread"
  for dp in 2 4; do
    for i in 1 2 3; do
      for z in 1 3; do
        rounds "z${z}_$dp" $MPI -np $dp $MT train $S --threads 1 --dp $dp --batch-size $((16 / dp)) --zero $z
      done
    done
    a=$(mid "z1_$dp"); b=$(mid "z3_$dp")
    echo "  dp $dp: zero 1 $a | zero 3 $b ($(/usr/bin/python3 -c "print(f'{$b/$a:.2f}')")x) — 1 thread per rank"
  done
fi
