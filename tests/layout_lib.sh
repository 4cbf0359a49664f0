# tests/layout_lib.sh — shared scaffolding of the layout-parity scripts (run_parallel.sh,
# run_pipeline.sh, run_moe_train.sh); sourced, not run.
#
#   layout_setup PREFIX   temp dir $TMP (kept when KEEP=1), tiny data in $TMP/data, ok/bad counters,
#                         and $CONFIG started with the keys every parity run shares (the script
#                         appends its model and batch keys)
#   run NAME NP [flags]   train $CONFIG into $TMP/NAME (NP = 1: one process, else under mpirun)
#   check NAME BASE [--exact]   compare two runs with tests/reference/compare_runs.py
#   layout_finish LABEL   print "LABEL: N passed, M failed" and fail if any failed
MT=./minitrain
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
pass=0; fail=0
ok()  { echo "  ok   $1"; pass=$((pass+1)); }
bad() { echo "  FAIL $1"; fail=$((fail+1)); }

layout_setup() {
  TMP=$(mktemp -d "/tmp/$1_XXXXXX")
  [ -n "${KEEP:-}" ] || trap 'rm -rf "$TMP"' EXIT
  head -c 200000 examples/data/tinyshakespeare.txt > "$TMP/small.txt"
  $MT prepare --input "$TMP/small.txt" --out "$TMP/data" >/dev/null
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

layout_finish() {
  echo "$1: $pass passed, $fail failed"
  [ "$fail" = 0 ]
}
