#!/usr/bin/env bash
# tests/run_peer_ckpt.sh — peer-replicated tier 0 end to end (ckpt_replicas = 1): 6 ranks under
# mpirun (pp = 3, dp = 2) on three fake nodes n1..n3 (MINITRAIN_NODE per rank, 2 ranks each),
# tier 0 per node (ckpt_tier0_root = $TMP/shm/%n). Checks:
#   - every rank's step is in its own node's tier 0 and, as a committed copy, in its buddy's on
#     the next node (peer/rank_R), with the same manifest;
#   - node n2 lost: both its ranks SIGKILLed after step 12 (fault injection) and its tier-0
#     directory deleted; the restart rebuilds n2's tier 0 from the buddies' copies ("tier 0
#     (peer)" in the log, CRC verified) and the final parameters are bit-identical to an
#     unfaulted run;
#   - a rank's own copy corrupted (no node lost): that rank alone is restored from its buddy;
#   - the corrupt-ckpt fault damages the buddy's replica too (resume falls back past the step),
#     torn-ckpt only the own copy (resume restores it from the verified replica);
#   - node n2 lost AND the buddies' copies of its ranks flipped / torn: the restart refuses them
#     and falls back to tier 1, still bit-identical;
#   - one node only: ckpt_replicas = 1 warns that there is no other node;
#   - leaf switches from $MINITRAIN_LEAF, and from the placement (train --topology FILE: the
#     host's leaf in the plan's topology file): copies go behind the other leaf.
# Runs from the repository root in about 45 s on 2 cores; skipped without mpirun.
set -euo pipefail
MT=$PWD/minitrain
PY=/usr/bin/python3
if ! command -v mpirun >/dev/null; then echo "  skip run_peer_ckpt (no mpirun)"; exit 0; fi
. tests/lib.sh
tmp_dir mt_peer

tiny_corpus 120000 "$TMP/data"
cat > "$TMP/tiny.ini" <<INI
n_layer = 3
n_head = 2
d_model = 64
seq_len = 32
batch_size = 2
global_batch = 8
steps = 20
lr = 3e-3
min_lr = 3e-4
warmup_steps = 3
threads = 1
log_every = 100
eval_every = 0
eval_batches = 2
sample_tokens = 0
ckpt_every = 5
ckpt_keep = 2
ckpt_replicas = 1
ckpt_tier0_root = $TMP/shm/%n
INI
# world rank r runs on fake node n(r/2 + 1); exec keeps the pid mpirun knows
cat > "$TMP/node.sh" <<'SH'
#!/bin/sh
node=$(( ${OMPI_COMM_WORLD_RANK:-0} / ${RANKS_PER_NODE:-2} + 1 ))
export MINITRAIN_NODE=n$node
# LEAF_A_NODES=k: nodes 1..k behind leaf A, the others behind leaf B
if [ -n "${LEAF_A_NODES:-}" ]; then
  if [ "$node" -le "$LEAF_A_NODES" ]; then export MINITRAIN_LEAF=A; else export MINITRAIN_LEAF=B; fi
fi
exec "$@"
SH
chmod +x "$TMP/node.sh"
MPI=(mpirun --oversubscribe -np 6)
[ "$(id -u)" = 0 ] && MPI=(mpirun --allow-run-as-root --oversubscribe -np 6)
train() { timeout 120 "${MPI[@]}" "$TMP/node.sh" "$MT" train --config "$TMP/tiny.ini" \
            --data "$TMP/data" --pp 3 "$@"; }
# flip one byte in the middle of a file, in place
flip() { $PY -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0x40
open(p, 'wb').write(b)" "$1"; }
t0dir() { echo "$TMP/shm/$1"/tiny-*/ckpt; } # the run's tier 0 on a fake node
# a run killed like a lost node: ranks 2 and 3 (node n2) SIGKILL themselves after step 12
crash() { if train --run-dir "$1" --fault kill@step=12,rank=2 --fault kill@step=12,rank=3 \
             > "$1.crash.log" 2>&1; then return 1; fi; return 0; }

# ---- reference: the same job, never faulted ------------------------------------------------------
train --run-dir "$TMP/U" > "$TMP/U.log" 2>&1
check "unfaulted run completes" test -f "$TMP/U/model.safetensors"
check "buddies: every rank on the next node" grep -q "0@n1->2@n2 1@n1->3@n2 2@n2->4@n3 3@n2->5@n3 4@n3->0@n1 5@n3->1@n1" "$TMP/U.log"
check "a completed run leaves no tier 0 behind" test -z "$(find "$TMP/shm" -name 'step_*' 2>/dev/null)"

# ---- node n2 lost: killed with its ranks, its memory gone ----------------------------------------
rm -rf "$TMP/shm"
check "the run with n2's ranks killed fails" crash "$TMP/A"
N1=$(t0dir n1); N2=$(t0dir n2); N3=$(t0dir n3)
check "own tier 0 of rank 2 on n2 holds step 10" test -f "$N2/rank_00002/step_00000010/local.safetensors"
check "rank 2's copy is on n3 (its buddy rank 4), committed" test -f "$N3/peer/rank_00002/step_00000010/manifest.json"
check "rank 5's copy is on n1 (its buddy rank 1)" test -f "$N1/peer/rank_00005/step_00000010/manifest.json"
check "the copy lists the same files, sizes and CRCs" $PY -c "
import json, sys
f = lambda p: json.load(open(p + '/step_00000010/manifest.json'))['files']
sys.exit(0 if f(sys.argv[1]) == f(sys.argv[2]) else 1)" "$N2/rank_00002" "$N3/peer/rank_00002"
rm -rf "$TMP/shm/n2"
train --run-dir "$TMP/A" > "$TMP/A.log" 2>&1
check "restart names tier 0 (peer)" grep -q "resumed from step 10 (tier 0 (peer): 2 of 6 ranks" "$TMP/A.log"
check "rank 2 restored from rank 4 on n3, CRC verified" grep -q "rank 2 (node n2): step 10 restored from tier 0 (peer) of rank 4 (node n3).*CRC-32C verified" "$TMP/A.log"
check "rank 3 restored from rank 5 on n3" grep -q "rank 3 (node n2): step 10 restored from tier 0 (peer) of rank 5" "$TMP/A.log"
check "final parameters bit-identical to the unfaulted run" same_tensors "$TMP/U/model.safetensors" "$TMP/A/model.safetensors"

# ---- a rank's own copy corrupted, nothing else lost ----------------------------------------------
rm -rf "$TMP/shm"
check "crash again" crash "$TMP/B"
flip "$(t0dir n1)/rank_00000/step_00000010/local.safetensors"
train --run-dir "$TMP/B" > "$TMP/B.log" 2>&1
check "corrupt own copy: rank 0 alone restored from its buddy" grep -q "resumed from step 10 (tier 0 (peer): 1 of 6 ranks" "$TMP/B.log"
check "... the corruption was named" grep -q "rank 0's own step 10 is unusable" "$TMP/B.log"
check "... bit-identical" same_tensors "$TMP/U/model.safetensors" "$TMP/B/model.safetensors"

# ---- the corrupt-ckpt / torn-ckpt faults reach every copy, the buddy's replica included -------
# corrupt-ckpt damages rank 0's own copy (n1), the replica its buddy rank 2 holds (n2) and tier 1,
# so the resume must fall back past step 10; torn-ckpt tears the own copy only, so the resume
# restores step 10 from the verified replica. (Before, the fault looked for step 10 in the shared
# tier-0 layout, found nothing under a per-node root, and never fired its kill.)
fault_copies() { $PY - "$1/run.db" "$1" <<'PY'
import json, sqlite3, sys
ev = [json.loads(d) for (d,) in sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM events WHERE kind = 'fault' ORDER BY rowid")]
def where(f):  # tier 0: NODE/rank_R or NODE/peer/rank_R; else the run directory
    if "/shm/" not in f: return "run" if f.startswith(sys.argv[2] + "/ckpt/step_") else f
    node, rest = f.split("/shm/", 1)[1].split("/", 1)
    return node + "/" + rest.split("/ckpt/", 1)[1].split("/step_")[0]
print(" ".join(sorted(f"{e['tier']}:{where(e['file'])}" for e in ev if "file" in e)))
PY
}
rm -rf "$TMP/shm"
# killed DIR FAULT: the faulted run fails (its log in DIR.crash.log)
killed() { if train --run-dir "$1" --fault "$2" > "$1.crash.log" 2>&1; then return 1; fi
          grep -q "every copy of step 10 damaged; killing this rank" "$1.crash.log"; }
check "corrupt-ckpt@step=10,kill=1: the run is killed" killed "$TMP/P" corrupt-ckpt@step=10,kill=1
got=$(fault_copies "$TMP/P" 2>&1 || true)
check "... it damaged rank 0's own tier-0 copy, rank 2's replica of it, and tier 1 ($got)" \
  test "$got" = "0:n1/rank_00000 0:n2/peer/rank_00000 1:run"
check "... the buddy names the replica it damaged" grep -q "rank 2: fault 'corrupt-ckpt@step=10,kill=1': damaged the replica of rank 0's step 10" "$TMP/P.crash.log"
train --run-dir "$TMP/P" > "$TMP/P.log" 2>&1
check "... the resume falls back past step 10 (to step 5)" grep -q "resumed from step 5 " "$TMP/P.log"
check "... not to the damaged replica" bash -c "! grep -q 'step 10 restored from tier 0 (peer)' '$TMP/P.log'"
check "... bit-identical" same_tensors "$TMP/U/model.safetensors" "$TMP/P/model.safetensors"
rm -rf "$TMP/shm"
check "torn-ckpt@step=10,kill=1: the run is killed" killed "$TMP/T" torn-ckpt@step=10,kill=1
got=$(fault_copies "$TMP/T" 2>&1 || true)
check "... it tore rank 0's own tier-0 copy only ($got)" test "$got" = "0:n1/rank_00000"
train --run-dir "$TMP/T" > "$TMP/T.log" 2>&1
check "... the resume restores step 10 from the buddy's verified replica" grep -q "rank 0 (node n1): step 10 restored from tier 0 (peer) of rank 2 (node n2).*CRC-32C verified" "$TMP/T.log"
check "... and resumes there" grep -q "resumed from step 10 (tier 0 (peer): 1 of 6 ranks" "$TMP/T.log"
check "... bit-identical" same_tensors "$TMP/U/model.safetensors" "$TMP/T/model.safetensors"

# ---- n2 lost and the buddies' copies damaged: tier 1 -------------------------------------------
rm -rf "$TMP/shm"
check "crash again" crash "$TMP/C"
N3=$(t0dir n3)
flip "$N3/peer/rank_00002/step_00000010/local.safetensors"
flip "$N3/peer/rank_00002/step_00000005/local.safetensors"
f=$N3/peer/rank_00003/step_00000010/local.safetensors; truncate -s $(( $(stat -c %s "$f") / 2 )) "$f"
f=$N3/peer/rank_00003/step_00000005/local.safetensors; truncate -s $(( $(stat -c %s "$f") / 2 )) "$f"
rm -rf "$TMP/shm/n2"
train --run-dir "$TMP/C" > "$TMP/C.log" 2>&1
check "flipped + torn peer copies are refused" grep -q "rank 4's copy of rank 2's step 10 is unusable" "$TMP/C.log"
check "... the torn one too" grep -q "rank 5's copy of rank 3's step 10 is unusable" "$TMP/C.log"
check "... and the restart falls back to tier 1" grep -Eq "resumed from step (5|10) \(tier 1" "$TMP/C.log"
check "... not to tier 0" bash -c "! grep -q 'tier 0 (peer):.*ranks restored' '$TMP/C.log'"
check "... bit-identical" same_tensors "$TMP/U/model.safetensors" "$TMP/C/model.safetensors"

# ---- one node: nothing to replicate to -----------------------------------------------------------
RANKS_PER_NODE=6 timeout 60 "${MPI[@]}" -x RANKS_PER_NODE "$TMP/node.sh" "$MT" train \
  --config "$TMP/tiny.ini" --data "$TMP/data" --pp 3 --steps 5 --run-dir "$TMP/D" > "$TMP/D.log" 2>&1
check "one node: warns that tier 0 is not replicated" grep -q "every rank runs on node 'n1'" "$TMP/D.log"
check "... and still completes" test -f "$TMP/D/model.safetensors"

# ---- leaves: n1, n2 behind leaf A, n3 behind leaf B -> copies cross to the other leaf ------------
# (not a permutation: n3's ranks hold two copies each, so the copies go one pair at a time)
rm -rf "$TMP/shm"
LEAF_A_NODES=2 train --run-dir "$TMP/E" --stop-after 5 > "$TMP/E.log" 2>&1 || true
check "leaves: n1 and n2 copy to n3, n3 to n1" grep -q "0@n1->4@n3 1@n1->5@n3 2@n2->4@n3 3@n2->5@n3 4@n3->0@n1 5@n3->1@n1" "$TMP/E.log"
N3=$(t0dir n3)
check "... rank 4 on n3 holds the copies of ranks 0 and 2" test -f "$N3/peer/rank_00000/step_00000005/manifest.json" -a -f "$N3/peer/rank_00002/step_00000005/manifest.json"

# ---- leaves from the placement: train --topology (4 nodes, n1 n2 on rackA, n3 n4 on rackB) -------
# no MINITRAIN_LEAF: the leaf of each rank's host comes from the topology file; without it the
# ring would copy n1 -> n2 (same leaf). Then the override ($MINITRAIN_LEAF wins over the file),
# a topology that does not load (exit 2) and a host it does not list (a warning).
cat > "$TMP/topo.ini" <<'TOPO'
[node n1]
gpus = 1
leaf = rackA
[node n2]
gpus = 1
leaf = rackA
[node n3]
gpus = 1
leaf = rackB
[node n4]
gpus = 1
leaf = rackB
TOPO
MPI4=(mpirun --oversubscribe -np 4 -x RANKS_PER_NODE)
[ "$(id -u)" = 0 ] && MPI4=(mpirun --allow-run-as-root --oversubscribe -np 4 -x RANKS_PER_NODE)
rm -rf "$TMP/shm"
RANKS_PER_NODE=1 timeout 60 "${MPI4[@]}" "$TMP/node.sh" "$MT" train --config "$TMP/tiny.ini" \
  --data "$TMP/data" --pp 2 --steps 5 --topology "$TMP/topo.ini" --run-dir "$TMP/F" \
  > "$TMP/F.log" 2>&1 || true
check "topology: leaves named from the file" grep -q "leaf switches (topology $TMP/topo.ini) n1=rackA n2=rackA n3=rackB n4=rackB" "$TMP/F.log"
check "... every copy crosses to the other leaf" grep -q "0@n1->2@n3 1@n2->2@n3 2@n3->0@n1 3@n4->0@n1" "$TMP/F.log"
check "... and the run completes" test -f "$TMP/F/model.safetensors"
rm -rf "$TMP/shm"
LEAF_A_NODES=3 RANKS_PER_NODE=1 timeout 60 "${MPI4[@]}" -x LEAF_A_NODES "$TMP/node.sh" "$MT" train \
  --config "$TMP/tiny.ini" --data "$TMP/data" --pp 2 --steps 1 --topology "$TMP/topo.ini" \
  --run-dir "$TMP/G" > "$TMP/G.log" 2>&1 || true
check "MINITRAIN_LEAF overrides the topology" grep -q "leaf switches (\$MINITRAIN_LEAF) n1=A n2=A n3=A n4=B" "$TMP/G.log"
check "... and picks the buddies" grep -q "0@n1->3@n4 1@n2->3@n4 2@n3->3@n4 3@n4->0@n1" "$TMP/G.log"
rc=0; MINITRAIN_NODE=n9 "$MT" train --config "$TMP/tiny.ini" --data "$TMP/data" --steps 1 \
  --topology "$TMP/nope.ini" --run-dir "$TMP/H" > "$TMP/H.log" 2>&1 || rc=$?
check "a topology that does not load: usage error naming it" \
  bash -c "[ $rc = 2 ] && grep -q 'topology: cannot read topology $TMP/nope.ini' '$TMP/H.log'"
MINITRAIN_NODE=n9 "$MT" train --config "$TMP/tiny.ini" --data "$TMP/data" --steps 1 \
  --topology "$TMP/topo.ini" --run-dir "$TMP/H" > "$TMP/H.log" 2>&1 || true
check "a host the topology does not list: warned" grep -q "does not list this rank's node 'n9'" "$TMP/H.log"

finish run_peer_ckpt
