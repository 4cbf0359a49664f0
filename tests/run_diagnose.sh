#!/usr/bin/env bash
# tests/run_diagnose.sh — a hung rank is found by its stack, not guessed from its heartbeat
# (sched/stacks.h; issue 26's aggregated stack traces).
#
#   - dp 4, the hang injected on rank 1, 2 and 3 in turn (hang@step=5,rank=R): the supervisor's
#     verdict names exactly that rank as the outlier, the frame it hangs in (sched_fault_hook)
#     with its file:line, the healthy ranks' shared frame, and blames that rank's host; the
#     failure is blamed on it and run.db holds an EV_STACKS event whose outliers are [R]; the
#     verdict comes within the heartbeat timeout + 5 s of the last progress;
#   - tp 2 × pp 2 × dp 2 (8 ranks), hang on rank 5: outlier 5, blamed group = its TP group (4, 5);
#   - `minitrain diagnose --run DIR` on a live hung single process: its stack, JSON with frames,
#     an event in run.db (and none with --no-record); `report` and `report --json` show it;
#   - bad input: no --run, not a directory, no heartbeat records — one line each, exit 2 or 1.
# Needs ptrace (root here) and eu-stack (elfutils). About a minute on 2 cores.
set -euo pipefail
PY=/usr/bin/python3
. tests/lib.sh
tmp_dir mt_diagnose
export MINITRAIN_SHM_DIR="$TMP/shm"
cp ./minitrain "$TMP/minitrain"
MT=$TMP/minitrain
M="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && M="$M --allow-run-as-root"
tiny_corpus 60000 "$TMP/data"
TRAIN=(train --data "$TMP/data" --n-layer 2 --n-head 2 --d-model 32 --seq-len 32 --batch-size 2
       --global-batch 8 --steps 5000 --threads 1 --log-every 100)
HB=10

# supervised RUN NP HANG_RANK [LAYOUT...]: run until the hang is detected; output in $TMP/RUN.log
supervised() {
  local run=$1 np=$2 r=$3; shift 3
  "$MT" run --max-restarts 0 --heartbeat-timeout $HB --run-dir "$TMP/$run" -- \
    $M -np "$np" "$MT" "${TRAIN[@]}" --run-dir "$TMP/$run" --fault "hang@step=5,rank=$r" "$@" \
    > "$TMP/$run.log" 2>&1 || true
}
# event_field RUN EXPR: EXPR over the newest stacks event's detail d (python)
event_field() {
  $PY - "$TMP/$1/run.db" "$2" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT time, detail FROM events WHERE kind='stacks' ORDER BY rowid").fetchall()
last = db.execute("SELECT detail FROM events WHERE kind='failure' ORDER BY rowid").fetchall()
if not rows: print("none"); sys.exit()
t, d = rows[-1][0], json.loads(rows[-1][1])
f = json.loads(last[-1][0]) if last else {}
print(eval(sys.argv[2]))
PY
}

for r in 1 2 3; do
  supervised "dp4_$r" 4 "$r"
  L=$TMP/dp4_$r.log
  v=$(grep -m1 "stacks: " "$L" || true)
  check "dp4 hang on rank $r: the verdict names rank $r first" grep -q "stacks: rank $r (tp 0 pp 0 dp $r) in sched_fault_hook" <<<"$v"
  check "dp4 hang on rank $r: the frame's file:line" grep -Eq "sched_fault_hook[^(]*\(sched/hooks\.c:[0-9]+\)" <<<"$v"
  others=$(echo 0 1 2 3 | tr ' ' '\n' | grep -vx "$r" | paste -sd,)
  check "dp4 hang on rank $r: ranks $others share one stack" grep -q "ranks $others in " <<<"$v"
  check "dp4 hang on rank $r: blamed on rank $r" grep -q "Blamed: rank $r on .* 1 machine evicted" <<<"$v"
  check "dp4 hang on rank $r: the failure is blamed on rank $r" grep -q "failed: hang .*rank $r in sched_fault_hook" "$L"
  check "dp4 hang on rank $r: run.db event outliers = [$r]" [ "$(event_field "dp4_$r" 'd["outliers"]')" = "[$r]" ]
  lag=$(event_field "dp4_$r" 'round(min(x["stuck_s"] for x in d["ranks"] if "stuck_s" in x), 1)')
  check "dp4 hang on rank $r: verdict within heartbeat timeout + 5 s of the last progress ($lag s)" \
    $PY -c "import sys; sys.exit(not ($HB <= $lag <= $HB + 5))"
done

supervised tp2pp2dp2 8 5 --tp 2 --pp 2 --dp 2
v=$(grep -m1 "stacks: " "$TMP/tp2pp2dp2.log" || true)
check "tp2 pp2 dp2 hang on rank 5: rank 5 named with its coordinates" grep -q "stacks: rank 5 (tp 1 pp 1 dp 0) in sched_fault_hook" <<<"$v"
check "tp2 pp2 dp2: its TP group (ranks 4,5) is blamed" grep -q "Blamed: its tp group (ranks 4,5)" <<<"$v"
check "tp2 pp2 dp2: run.db blame = [4, 5], kind tp" [ "$(event_field tp2pp2dp2 '(d["blame"], d["blame_kind"])')" = "([4, 5], 'tp')" ]

# diagnose on a live process (no supervisor: the heartbeat directory set by hand)
D=$TMP/live
mkdir -p "$D/heartbeat"
MINITRAIN_HEARTBEAT_DIR="$D/heartbeat" "$MT" "${TRAIN[@]}" --global-batch 2 --run-dir "$D" \
  --fault hang@step=3 > "$TMP/live.log" 2>&1 &
LIVE=$!; PIDS+=("$LIVE")
for _ in $(seq 100); do grep -q "injecting fault" "$TMP/live.log" && break; sleep 0.2; done
"$MT" diagnose --run "$D" > "$TMP/diag.txt" 2>&1 && rc=0 || rc=$?
check "diagnose: exit 0" [ "$rc" = 0 ]
check "diagnose: names the hung frame" grep -q "rank 0 (tp 0 pp 0 dp 0) in sched_fault_hook" "$TMP/diag.txt"
"$MT" diagnose --run "$D" --json --no-record > "$TMP/diag.json"
check "diagnose --json: frames with func and file:line, outermost cmd_train" $PY -c "
import json; d = json.load(open('$TMP/diag.json')); f = d['ranks'][0]['frames']
assert f[0]['func'] == 'sched_fault_hook' and f[0]['where'].startswith('sched/hooks.c:'), f[0]
assert f[-1]['func'] == 'cmd_train', f[-1]
assert d['ranks'][0]['pid'] == $LIVE and d['outliers'] == [] and d['groups'] == 1"
n=$($PY -c "import sqlite3; print(sqlite3.connect('$D/run.db').execute(\"select count(*) from events where kind='stacks'\").fetchone()[0])")
check "diagnose logs one event, --no-record none (got $n)" [ "$n" = 1 ]
"$MT" report --run "$D" > "$TMP/rep.txt"
check "report shows the capture" grep -q "^stacks: .*sched_fault_hook.*(diagnose)" "$TMP/rep.txt"
"$MT" report --run "$D" --json > "$TMP/rep.json"
check "report --json: stacks[0].source = diagnose" $PY -c "
import json; s = json.load(open('$TMP/rep.json'))['stacks']; assert s[0]['source'] == 'diagnose', s"
kill -9 "$LIVE"; wait "$LIVE" 2>/dev/null || true

expect_exit 2 "diagnose without --run" "$MT" diagnose
expect_exit 2 "diagnose --run on a file" "$MT" diagnose --run "$TMP/live.log"
mkdir -p "$TMP/empty"
expect_exit 1 "diagnose of a directory without heartbeats" "$MT" diagnose --run "$TMP/empty"
check "… says there are no heartbeat records" grep -q "no heartbeat" "$TMP/err"
finish diagnose
