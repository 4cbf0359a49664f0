# tests/layout_lib.sh — shared scaffolding of the layout-parity scripts (run_parallel.sh,
# run_pipeline.sh, run_moe_train.sh, run_guard.sh, run_robust.sh); sourced, not run. On top of
# tests/lib.sh (ok/bad counters, finish LABEL, tmp_dir, tiny_corpus):
#
#   layout_setup PREFIX   temp dir $TMP (kept when KEEP=1), tiny data in $TMP/data, and $CONFIG
#                         started with the keys every parity run shares (the script appends its
#                         model and batch keys)
#   run NAME NP [flags]   train $CONFIG into $TMP/NAME (NP = 1: one process, else under mpirun)
#   check NAME BASE [--exact]   compare two runs with tests/reference/compare_runs.py (replaces
#                         lib.sh's check)
MT=./minitrain
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

layout_setup() {
  tmp_dir "$1"
  tiny_corpus 200000 "$TMP/data"
  CONFIG="$TMP/config.ini"
  cat > "$CONFIG" <<INI
data = $TMP/data
seq_len = 32
steps = 8
lr = 3e-3
min_lr = 3e-4
warmup_steps = 2
; AdamW eps 1e-6 (not 1e-8): an element whose gradient is pure rounding noise (~1e-9) would
; otherwise take a full +-lr step in a direction set by summation order, which is exactly what
; differs between layouts. With 1e-6 such elements barely move and the comparison tests the
; layouts' math, not Adam's amplification of rounding.
eps = 1e-6
log_every = 1
eval_every = 4
sample_tokens = 0
threads = 1
INI
}

run() {
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then
    $MT train --config "$CONFIG" --run-dir "$TMP/$name" "$@" > "$TMP/$name.log" 2>&1
  else
    $MPI -np "$np" $MT train --config "$CONFIG" --run-dir "$TMP/$name" "$@" > "$TMP/$name.log" 2>&1
  fi
}

check() {
  local out
  if out=$(/usr/bin/python3 tests/reference/compare_runs.py "$TMP/$2" "$TMP/$1" ${3:-} 2>&1); then
    ok "$1: $out"
  else
    bad "$1: $out | $(grep -m1 -i error "$TMP/$1.log" || true)"
  fi
}
