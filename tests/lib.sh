# tests/lib.sh — the scaffolding every tests/run_*.sh shares (tests/*_lib.sh build on it);
# sourced, not run: `. tests/lib.sh` from the repository root. It starts nothing and defines:
#
#   ok WHAT / bad WHAT      one passed / failed check: prints "  ok   WHAT" / "  FAIL WHAT" and
#                           counts it in $pass / $fail
#   check WHAT CMD...       ok WHAT when CMD succeeds, else bad WHAT
#   finish LABEL [MORE]     prints "LABEL: N passed, M failed[ MORE]"; fails when any check failed
#                           (a script's last line, so its exit status says the same)
#   expect_exit CODE WHAT CMD...   CMD exits with CODE, and for 2 prints a "minitrain: error:"
#                           line (exactly one stderr line when ONE_ERROR_LINE=1); stdout and stderr
#                           land in $TMP/out and $TMP/err
#   tmp_dir NAME            TMP=/tmp/NAME_XXXXXX and an EXIT trap that kills (-9) every pid in
#                           PIDS, runs the script's on_exit when it defines one, and removes TMP
#                           (kept when KEEP=1)
#   tiny_corpus BYTES OUT [FLAGS...]   the first BYTES of examples/data/tinyshakespeare.txt in
#                           $TMP/small.txt, prepared into OUT (`minitrain prepare FLAGS`, quiet)
#   start_bg NAME PATTERN CMD...   starts CMD in the background (stdout $TMP/NAME.out, stderr
#                           $TMP/NAME.err, its pid in PIDS and PID_NAME) and waits until its stdout
#                           shows PATTERN followed by a port number (a server on --port 0 prints
#                           the port the kernel chose): PORT_NAME, URL_NAME=http://127.0.0.1:PORT.
#                           Exits the script when CMD dies first or no port shows within 30 s
#   stop_pid PID            SIGTERM, then wait for it; returns its exit status
#   same_tensors A B        two safetensors files hold the same tensors, bit for bit
#                           (tests/reference/same_tensors.py; what differs goes to stderr)
#   same_params A B         the same for the runs A and B (their model.safetensors)
#   blas_env                BLAS_INC and BLAS_LIB (Debian's OpenMP OpenBLAS) and, as the Makefile
#                           does, OPENBLAS_CORETYPE: for test drivers compiled against
#                           build/libminitrain.a
#
# Needs: MT (the minitrain binary) for tiny_corpus; TMP for expect_exit and start_bg.
MT_TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pass=0; fail=0
PIDS=()

ok()  { echo "  ok   $1"; pass=$((pass+1)); }
bad() { echo "  FAIL $1"; fail=$((fail+1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
finish() {
  echo "$1: $pass passed, $fail failed${2:+ $2}"
  [ "$fail" = 0 ]
}

expect_exit() {
  local code=$1 what=$2; shift 2
  local rc=0; "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  if [ "$rc" != "$code" ]; then bad "$what (exit $rc, wanted $code): $(head -c 300 "$TMP/err")"; return; fi
  if [ "$code" = 2 ] && ! grep -q "minitrain: error:" "$TMP/err"; then bad "$what (no error line)"; return; fi
  if [ "$code" = 2 ] && [ -n "${ONE_ERROR_LINE:-}" ] && [ "$(wc -l <"$TMP/err")" -gt 1 ]; then
    bad "$what (not one error line: $(head -c 300 "$TMP/err"))"; return
  fi
  ok "$what"
}

tmp_dir() {
  TMP=$(mktemp -d "/tmp/$1_XXXXXX")
  trap lib_cleanup EXIT
}
lib_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if declare -F on_exit >/dev/null; then on_exit || true; fi
  # a test may leave read-only directories (a checkpoint dir made unwritable on purpose)
  [ -n "${KEEP:-}" ] || { chmod -R u+w "$TMP" 2>/dev/null || true; rm -rf "$TMP"; }
}

tiny_corpus() {
  local bytes=$1 out=$2; shift 2
  head -c "$bytes" examples/data/tinyshakespeare.txt > "$TMP/small.txt"
  $MT prepare --input "$TMP/small.txt" --out "$out" "$@" >/dev/null
}

start_bg() {
  local name=$1 pattern=$2; shift 2
  rm -f "$TMP/$name.out" "$TMP/$name.err" # a restarted NAME must not be read from its old output
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  local pid=$! port=""
  PIDS+=("$pid")
  printf -v "PID_$name" '%s' "$pid"
  for _ in $(seq 600); do
    port=$(grep -o "$pattern[0-9]*" "$TMP/$name.out" 2>/dev/null | head -1 | grep -o '[0-9]*$') || true
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$TMP/$name.err"; echo "$name died"; exit 1; }
    sleep 0.05
  done
  [ -n "$port" ] || { echo "$name did not start"; cat "$TMP/$name.err"; exit 1; }
  printf -v "PORT_$name" '%s' "$port"
  printf -v "URL_$name" '%s' "http://127.0.0.1:$port"
}

stop_pid() {
  kill -TERM "$1" 2>/dev/null || true
  local rc=0; wait "$1" 2>/dev/null || rc=$?
  return $rc
}

same_tensors() { /usr/bin/python3 "$MT_TESTS/reference/same_tensors.py" "$1" "$2"; }
same_params() { same_tensors "$1/model.safetensors" "$2/model.safetensors"; }

blas_env() {
  BLAS_INC=$(ls -d /usr/include/*-linux-gnu/openblas-openmp 2>/dev/null | head -1)
  BLAS_LIB=$(ls -d /usr/lib/*-linux-gnu/openblas-openmp 2>/dev/null | head -1)
  if [ -z "${OPENBLAS_CORETYPE:-}" ]; then   # Debian's OpenBLAS 0.3.21 does not know newer CPUs
    if grep -m1 -qow avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -m1 -qow avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
  fi
}

# mpi_driver SRC BIN: build an MPI test driver (tests/*_driver.c) against $BUILD/libminitrain.a
# with the Makefile's flags (-Werror), after blas_env.
mpi_driver() {
  mkdir -p "$(dirname "$2")"
  ${CC:-gcc} -std=gnu11 -O3 -march=native -fno-math-errno -fopenmp -Wall -Wextra -Werror -I. \
    -I"$BLAS_INC" -DMT_HAVE_MPI $(mpicc --showme:compile) "$1" "${BUILD:-build}/libminitrain.a" \
    -o "$2" -L"$BLAS_LIB" -Wl,-rpath,"$BLAS_LIB" -lopenblas $(mpicc --showme:link) \
    -lsqlite3 -linih -lcjson -lmicrohttpd -lpcre2-8 -lpthread -lm
}
