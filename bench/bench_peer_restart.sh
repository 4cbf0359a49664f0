#!/usr/bin/env bash
# bench/bench_peer_restart.sh — restart time by the tier it loads from: own tier 0, peer tier 0 (the
# node's memory lost, rebuilt from the buddies), tier 1 (run dir) and tier 2 (durable), for the
# GPT-2 124M shape (n_layer 12, n_head 12, d_model 768, vocab 50257; seq_len 256 instead of 1024:
# the checkpoint loses 0.6M of 124M parameters (wpe), a rank its ~1.5 GB of T=1024 activations, so
# two ranks fit next to other work on a 24 GB machine).
#
# Two ranks under mpirun (pp = 2, one stage per fake node n1, n2; ckpt_replicas = 1, tier 0 per
# node in /dev/shm). One training step writes checkpoint step 1 into every tier, then each
# restart resumes from it and stops at once (--stop-after 1: no step is trained, tier 0 is kept).
#   own    tier 0 as saved
#   peer   n2's tier-0 directory deleted: rank 1 gets its copy from rank 0 (n1), CRC-verified
#   tier1  both nodes' tier 0 moved away; RUN_DIR/ckpt, its files evicted from the page cache
#          (posix_fadvise DONTNEED on our files only: a cold read, nobody else's cache touched)
#   tier2  tier 0 and RUN_DIR/ckpt moved away; ckpt_durable, evicted the same way
# The time is minitrain's own "resumed ... in X ms (verify V, load L)": choosing and verifying
# (CRC-32C of every file read; for peer also the transfer and re-commit) plus loading, median of
# REPEATS (default 3). Needs ~4 GB of /dev/shm, ~3 GB under /tmp, ~10 GB of RAM.
#
#   bash bench/bench_peer_restart.sh [REPEATS]      (after `make`, from the repository root)
set -euo pipefail
REPEATS=${1:-3}
MT=$PWD/minitrain
PY=/usr/bin/python3
MPI=(mpirun --oversubscribe -np 2)
[ "$(id -u)" = 0 ] && MPI=(mpirun --allow-run-as-root --oversubscribe -np 2)
TMP=$(mktemp -d /tmp/mt_bpeer_XXXXXX)
SHM=$(mktemp -d /dev/shm/mt_bpeer_XXXXXX)
trap 'rm -rf "$TMP" "$SHM"' EXIT
head -c 2000000 examples/data/tinyshakespeare.txt > "$TMP/text.txt" 2>/dev/null ||
  cp examples/data/tinyshakespeare.txt "$TMP/text.txt"
$MT prepare --input "$TMP/text.txt" --out "$TMP/data" >/dev/null
cat > "$TMP/node.sh" <<'SH'
#!/bin/sh
export MINITRAIN_NODE=n$(( ${OMPI_COMM_WORLD_RANK:-0} + 1 ))
exec "$@"
SH
chmod +x "$TMP/node.sh"
ARGS=(--data "$TMP/data" --run-dir "$TMP/run" --n-layer 12 --n-head 12 --d-model 768
      --seq-len 256 --vocab-size 50257 --batch-size 1 --global-batch 1 --pp 2 --steps 2
      --stop-after 1 --ckpt-every 1 --ckpt-keep 1 --ckpt-replicas 1 --ckpt-tier0-root "$SHM/%n"
      --ckpt-durable "$TMP/durable" --eval-every 0 --eval-batches 1 --sample-tokens 0 --warmup-steps 1
      --log-every 1)
train() { "${MPI[@]}" "$TMP/node.sh" "$MT" train "${ARGS[@]}" "$@"; }
evict() { find "$@" -type f -print0 | xargs -0 $PY -c "
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)"; }
ms() { sed -n 's/.*resumed from step 1 (\(.*\)) in \([0-9]*\) ms (verify \([0-9]*\), load \([0-9]*\)).*/\2 \3 \4/p' "$1"; }

echo "bench_peer_restart: training one step of the 124M shape on 2 ranks (pp = 2) ..."
train > "$TMP/save.log" 2>&1 || { tail -5 "$TMP/save.log"; exit 1; }
grep -E "checkpoint step 1 committed|tier 0 \(peer\): step 1" "$TMP/save.log" || true
bytes=$(du -sb "$TMP/run/ckpt/step_00000001" | cut -f1)
t0bytes=$(du -sb "$SHM/n2" | cut -f1)
: > "$TMP/results"
for i in $(seq "$REPEATS"); do
  for tier in own peer tier1 tier2; do
    case $tier in
      peer)  rm -rf "$SHM/n2" ;;
      tier1) mv "$SHM" "$SHM.off"; evict "$TMP/run/ckpt" ;;
      tier2) mv "$SHM" "$SHM.off"; mv "$TMP/run/ckpt" "$TMP/run/ckpt.off"; evict "$TMP/durable" ;;
    esac
    train > "$TMP/$tier.$i.log" 2>&1 || { tail -5 "$TMP/$tier.$i.log"; exit 1; }
    case $tier in
      own)   grep -q "tier 0 (own memory" "$TMP/$tier.$i.log" ;;
      peer)  grep -q "tier 0 (peer): 1 of 2 ranks" "$TMP/$tier.$i.log" ;;
      tier1) grep -q "(tier 1," "$TMP/$tier.$i.log"; rm -rf "$SHM"; mv "$SHM.off" "$SHM" ;;
      tier2) grep -q "(tier 2," "$TMP/$tier.$i.log"; rm -rf "$SHM" "$TMP/run/ckpt"
             mv "$SHM.off" "$SHM"; mv "$TMP/run/ckpt.off" "$TMP/run/ckpt" ;;
    esac
    echo "$tier $(ms "$TMP/$tier.$i.log")" >> "$TMP/results"
  done
done
$PY - "$TMP/results" "$bytes" "$t0bytes" "$REPEATS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
names = {"own": "tier 0, own memory", "peer": "tier 0 (peer), n2 lost",
         "tier1": "tier 1, run dir (cold)", "tier2": "tier 2, durable (cold)"}
print(f"\nrestart of the GPT-2 124M shape, 2 ranks (pp 2) on 2 fake nodes; checkpoint "
      f"{int(sys.argv[2]) / 1e9:.2f} GB in tier 1, {int(sys.argv[3]) / 1e9:.2f} GB in one node's "
      f"tier 0 (own + peer copy); median of {sys.argv[4]}")
print(f"| {'loaded from':26} | {'restart ms':>10} | {'verify ms':>9} | {'load ms':>7} |")
print(f"|{'-' * 28}|{'-' * 11}:|{'-' * 10}:|{'-' * 8}:|")
for k in ["own", "peer", "tier1", "tier2"]:
    v = [list(map(float, r[1:])) for r in rows if r[0] == k and len(r) == 4]
    if not v: continue
    med = [statistics.median(x[j] for x in v) for j in range(3)]
    print(f"| {names[k]:26} | {med[0]:10.0f} | {med[1]:9.0f} | {med[2]:7.0f} |")
PY
