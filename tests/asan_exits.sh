#!/usr/bin/env bash
# tests/asan_exits.sh — bad input keeps the product's exit code under the sanitizers: every case
# below must exit 2 (MT_EXIT_USAGE, one "minitrain: error:" line) with no AddressSanitizer,
# LeakSanitizer or UBSan report. Before issue 11 (finding 8), early-error paths of `train`
# returned without freeing the mesh's communicators and the half-built trainer, so LeakSanitizer
# turned exit 2 into exit 1. Run by `make asan` with the ASan build:
#   MT=build-asan/minitrain bash tests/asan_exits.sh
set -uo pipefail
MT=${MT:-build-asan/minitrain}
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/mt_asan_exits_XXXXXX)
HOLDER=
trap '[ -n "$HOLDER" ] && kill $HOLDER 2>/dev/null; rm -rf "$TMP"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export MINITRAIN_SHM_DIR="$TMP/shm"
head -c 50000 examples/data/tinyshakespeare.txt > "$TMP/small.txt"
$MT prepare --input "$TMP/small.txt" --out "$TMP/byte" > /dev/null 2>&1 || { echo "asan_exits: prepare failed"; exit 1; }
cat > "$TMP/tiny.ini" <<INI
data = $TMP/byte
n_layer = 1
n_head = 2
d_model = 32
seq_len = 32
batch_size = 4
global_batch = 4
steps = 4
threads = 1
eval_every = 0
sample_tokens = 0
INI
printf 'node-a slots=0\n' > "$TMP/bad_hosts"
# a run directory whose lock another process holds
mkdir -p "$TMP/busy"
$PY -c "import fcntl,os,sys,time; f=open(sys.argv[1],'w'); fcntl.flock(f, fcntl.LOCK_EX); f.write('pid=%d what=train host=h\n' % os.getpid()); f.flush(); time.sleep(600)" "$TMP/busy/.lock" &
HOLDER=$!
for _ in $(seq 50); do grep -qs pid= "$TMP/busy/.lock" && break; sleep 0.1; done
T=(train --config "$TMP/tiny.ini")
cases=(
  "train --data /nonexistent"
  "${T[*]} --run-dir $TMP/r1 --tp 2"
  "${T[*]} --run-dir $TMP/r2 --ep 2"
  "${T[*]} --run-dir $TMP/r3 --vocab-size 10"
  "${T[*]} --run-dir $TMP/r4 --seq-len 100000"
  "${T[*]} --run-dir $TMP/r5 --resume 40"
  "${T[*]} --run-dir $TMP/r6 --fault bogus@step=1"
  "${T[*]} --run-dir $TMP/r7 --fault kill@step=1,rank=5"
  "${T[*]} --run-dir $TMP/busy"
  "${T[*]} --n-head 3"
  "train --config /nonexistent.ini"
  "train --bogus-key 1"
  "train --steps 5 --lr 0.1 --frob 1"
  "gateway --port 5 --consecutive-failures 2 --frob 1"
  "gateway --upstream a=http://x --route m=a --redis-fail sometimes"
  "serve --max-body 1T"
  "run --run-dir $TMP/r8"
  "run --run-dir $TMP/r9 --hostfile $TMP/bad_hosts -- true"
  "run --run-dir $TMP/busy -- true"
  "report --run /nonexistent"
  "sample --run /nonexistent"
  "ckpt verify --run /nonexistent"
  "simulate --gpus 0 --mtbf-gpu-hours 1 --ckpt-save-s 1 --restart-s 1"
  "prepare --input /nonexistent --out $TMP/p"
)
pass=0; fail=0
for c in "${cases[@]}"; do
  # shellcheck disable=SC2086
  $MT $c > "$TMP/out" 2>&1; rc=$?
  if [ $rc = 2 ] && ! grep -qE "Sanitizer|runtime error:" "$TMP/out" && grep -q "minitrain: error:" "$TMP/out"; then
    pass=$((pass+1))
  else
    fail=$((fail+1))
    echo "  FAIL exit $rc: minitrain $c"
    grep -m3 -E "Sanitizer|runtime error:|minitrain: error" "$TMP/out" | sed 's/^/         /'
  fi
done
echo "asan_exits: $pass of ${#cases[@]} bad inputs exit 2 with no sanitizer report"
[ $fail = 0 ]
