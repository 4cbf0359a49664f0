# tests/interop_lib.sh — shared scaffolding of run_tokenizer_gpt2.sh and run_interop.sh; sourced.
# On top of tests/lib.sh (ok/bad counters, finish LABEL, tmp_dir: PIDS killed at exit):
#
#   interop_setup PREFIX   temp dir $TMP (kept when KEEP=1), the test driver
#                          ($DRV, built from tests/interop_driver.c), js-tiktoken installed into
#                          build/node from the npm registry (make js-tiktoken) and GPT-2's ranks
#                          written from it to $RANKS
#   expect_fail WHAT CMD...   CMD exits 2 with exactly one "minitrain: error:" line on stderr
#   check WHAT CMD...      ok when CMD succeeds (its output is shown indented on failure; replaces
#                          lib.sh's check)
MT=${MT:-./minitrain}
PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

interop_setup() {
  tmp_dir "$1"
  BUILD=${BUILD:-build}
  make -s "$BUILD/libminitrain.a" "$MT" >/dev/null
  make -s js-tiktoken >/dev/null
  export JS_TIKTOKEN_DIR=$PWD/$BUILD/node/node_modules
  blas_env
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
