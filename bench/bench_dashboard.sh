#!/usr/bin/env bash
# bench/bench_dashboard.sh — what a dashboard costs a training job: the same job's step time
# without and with `minitrain dashboard` watching 50 runs (the job + 49 synthetic runs of
# build/bench/bench_dashboard --make-only) while two open pages poll it — the runs page and the
# job's own page, every POLL_S seconds (default 1 s, twice the pages' own default rate), each poll
# sending If-None-Match as a browser does (the job's page changes at every log line, so most of
# its polls draw the whole page). Rounds alternate without / with (ROUNDS, default 3) so a noisy
# machine shifts both alike; each job's figure is the median step_ms of its metrics rows; the
# result is the median over rounds and the ratio with/without (target: < 1% slower). Because a
# shared 2-core machine moves a job's step time by more than 1% from round to round, it also
# prints the dashboard's own CPU time during the job (from /proc/PID/stat): the share of a core
# it takes, an upper bound on what it can take from a job that needs every core.
# Also prints the load average and the CPU. Needs: make, make bench. About 2 minutes.
#
#   bash bench/bench_dashboard.sh            STEPS=600 ROUNDS=3 POLL_S=1 bash bench/bench_dashboard.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MT=./minitrain
PY=/usr/bin/python3
STEPS=${STEPS:-600}; ROUNDS=${ROUNDS:-3}; POLL_S=${POLL_S:-1}
. tests/lib.sh
tmp_dir mt_bench_dash
PIDS=()
[ -x build/bench/bench_dashboard ] || make -s build/bench/bench_dashboard
tiny_corpus 400000 "$TMP/data"
build/bench/bench_dashboard --make-only --runs 49 --dir "$TMP/runs" | sed 's/^/  /'
cat > "$TMP/job.ini" <<INI
data = $TMP/data
seq_len = 64
n_head = 4
d_model = 64
n_layer = 2
lr = 3e-3
global_batch = 8
batch_size = 8
steps = $STEPS
log_every = 5
eval_every = 0
sample_tokens = 0
threads = 1
INI
median_step_ms() {
  $PY -c "import sqlite3,statistics,sys; c=sqlite3.connect('file:'+sys.argv[1]+'/run.db?mode=ro',uri=True); print('%.3f' % statistics.median(r[0] for r in c.execute('SELECT step_ms FROM metrics WHERE step > 20 AND step_ms IS NOT NULL')))" "$1"
}
poller() { # $1 = URL: the runs page and the job's page, each with its last ETag, every POLL_S
  local e1="" e2="" h
  while :; do
    h=$(curl -s -D - -o /dev/null -H "If-None-Match: $e1" "$1/" | tr -d '\r' | sed -n 's/^ETag: //Ip'); e1=${h:-$e1}
    h=$(curl -s -D - -o /dev/null -H "If-None-Match: $e2" "$1/run?dir=$TMP/runs/job" | tr -d '\r' | sed -n 's/^ETag: //Ip'); e2=${h:-$e2}
    sleep "$POLL_S"
  done
}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); CPU: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) online)"
without=(); with=(); shares=()
for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$TMP/runs/job"
  OMP_NUM_THREADS=1 $MT train --config "$TMP/job.ini" --run-dir "$TMP/runs/job" > "$TMP/a.log" 2>&1
  without+=("$(median_step_ms "$TMP/runs/job")")
  rm -rf "$TMP/runs/job"
  start_bg dash "listening on http://127.0.0.1:" $MT dashboard --runs "$TMP/runs" --port 0
  poller "$URL_dash" & POLLER=$!; PIDS+=("$POLLER")
  cpu0=$(awk '{print $14 + $15}' "/proc/$PID_dash/stat"); t0=$(date +%s.%N)
  OMP_NUM_THREADS=1 $MT train --config "$TMP/job.ini" --run-dir "$TMP/runs/job" > "$TMP/b.log" 2>&1
  cpu1=$(awk '{print $14 + $15}' "/proc/$PID_dash/stat"); t1=$(date +%s.%N)
  kill "$POLLER" 2>/dev/null || true; wait "$POLLER" 2>/dev/null || true
  stop_pid "$PID_dash" || true
  with+=("$(median_step_ms "$TMP/runs/job")")
  # the dashboard's own CPU time while the job trained (utime + stime, clock ticks): the share of
  # one core it took from the machine, what it can cost a job that has every core busy
  share=$($PY -c "import os,sys; c=(float(sys.argv[2])-float(sys.argv[1]))/os.sysconf('SC_CLK_TCK'); w=float(sys.argv[4])-float(sys.argv[3]); print(f'{c:.2f} CPU-s in {w:.1f} s = {100*c/w:.2f}% of one core')" "$cpu0" "$cpu1" "$t0" "$t1")
  shares+=("$share")
  echo "  round $r: median step ${without[-1]} ms without, ${with[-1]} ms with a dashboard polling (load $(cut -d' ' -f1 /proc/loadavg)); the dashboard used $share"
done
$PY - "${without[*]}" "${with[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"step time, median of {len(a)} rounds: {ma:.3f} ms without, {mb:.3f} ms with a dashboard "
      f"watching 50 runs and polled by 2 pages: {100 * (mb / ma - 1):+.2f}% (target < +1%)")
print(f"  per round, with/without: {', '.join(f'{100 * (y / x - 1):+.1f}%' for x, y in zip(a, b))}")
PY
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
