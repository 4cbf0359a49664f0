# tests/interop_lib.sh — shared scaffolding of run_tokenizer_gpt2.sh and run_interop.sh; sourced.
#
#   interop_setup PREFIX   temp dir $TMP (kept when KEEP=1), ok/bad counters, the test driver
#                          ($DRV, built from tests/interop_driver.c), js-tiktoken installed into
#                          build/node from the npm registry (make js-tiktoken) and GPT-2's ranks
#                          written from it to $RANKS
#   expect_fail WHAT CMD...   CMD exits 2 with exactly one "minitrain: error:" line on stderr
#   check WHAT CMD...      ok when CMD succeeds (its output is shown indented on failure)
#   interop_finish LABEL   "LABEL: N passed, M failed"; non-zero when any failed
MT=${MT:-./minitrain}
PY=/usr/bin/python3
pass=0; fail=0
ok()  { echo "  ok   $1"; pass=$((pass+1)); }
bad() { echo "  FAIL $1"; fail=$((fail+1)); }

interop_setup() {
  TMP=$(mktemp -d "/tmp/$1_XXXXXX")
  [ -n "${KEEP:-}" ] || trap 'interop_cleanup' EXIT
  BUILD=${BUILD:-build}
  make -s "$BUILD/libminitrain.a" "$MT" >/dev/null
  make -s js-tiktoken >/dev/null
  export JS_TIKTOKEN_DIR=$PWD/$BUILD/node/node_modules
  BLAS_INC=$(ls -d /usr/include/*-linux-gnu/openblas-openmp 2>/dev/null | head -1)
  BLAS_LIB=$(ls -d /usr/lib/*-linux-gnu/openblas-openmp 2>/dev/null | head -1)
  if [ -z "${OPENBLAS_CORETYPE:-}" ]; then   # as the Makefile does (Debian's OpenBLAS 0.3.21)
    if grep -m1 -qow avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -m1 -qow avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
  fi
  DRV="$BUILD/tests/interop_driver"
  mkdir -p "$BUILD/tests"
  local mpi_c="" mpi_l=""
  if command -v mpicc >/dev/null; then mpi_c="-DMT_HAVE_MPI $(mpicc --showme:compile)"; mpi_l=$(mpicc --showme:link); fi
  # shellcheck disable=SC2086
  ${CC:-gcc} -std=gnu11 -O2 -march=native -fopenmp -Wall -Wextra -Werror -I. -I"$BLAS_INC" $mpi_c \
    tests/interop_driver.c "$BUILD/libminitrain.a" -o "$DRV" -L"$BLAS_LIB" -Wl,-rpath,"$BLAS_LIB" \
    -lopenblas $mpi_l -lsqlite3 -linih -lcjson -lmicrohttpd -lpcre2-8 -lpthread -lm
  RANKS="$TMP/gpt2.tiktoken"
  node tests/reference/tiktoken_ref.mjs ranks "$RANKS" >/dev/null
}

PIDS=()
interop_cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}

check() {
  local what=$1; shift
  if "$@" >"$TMP/check.out" 2>&1; then ok "$what"; { grep -av '^ *$' "$TMP/check.out" || true; } | sed 's/^/       /' | tail -4
  else bad "$what"; sed 's/^/       /' "$TMP/check.out" | tail -12; fi
}

expect_fail() {
  local what=$1; shift
  set +e; "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?; set -e
  local lines; lines=$(grep -c . "$TMP/err" || true)
  if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -q "^minitrain: error: " "$TMP/err"; then
    ok "$what: $(cut -c1-150 "$TMP/err")"
  else
    bad "$what (exit $rc, $lines stderr lines): $(head -c 400 "$TMP/err")"
  fi
}

interop_finish() {
  echo "$1: $pass passed, $fail failed"
  [ "$fail" = 0 ]
}
