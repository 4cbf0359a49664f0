#!/usr/bin/env bash
# tests/run_dashboard.sh — `minitrain dashboard` (dash/dash.h) against a job while it trains,
# checked in a real browser, plus its refusals, its token, and a database rotated and deleted
# under it.
#
# A supervised job (about 25-50 s on 2 cores) trains with a kill fault at step 1600 (a crash, a
# restart from the step-1500 checkpoint); a second, finished run differs in lr. The dashboard on
# --port 0 watches both; tests/dashboard_check.py drives Debian's Chromium headless over the
# DevTools pipe: the runs page lists the job as running, its page's loss plot gains points
# between two reads without a reload, the crash shows in the events table and the ETTR picture,
# the status flips to completed at the end, compare draws both runs and marks lr; no console
# error, no request off the host, no page wider than a phone (390 px). Then with curl: a run's
# page holds exactly the <main> that `report --html` writes (one drawing path); a run.db
# is never written by the dashboard (same bytes after every page), a rotated run.db is read anew,
# a garbage run.db is listed as unreadable, a deleted run leaves the list and its page is 404;
# --bind elsewhere needs --token; the token in header, cookie and ?token=; --db at an unreachable database (tests/run_db.sh runs --db against a real one).
# Screenshots go to $DASH_SHOTS (default: a temporary directory, removed unless KEEP=1).
set -euo pipefail
cd "$(dirname "$0")/.."
MT=./minitrain
PY=/usr/bin/python3
. tests/lib.sh
tmp_dir mt_dashboard
SHOTS=${DASH_SHOTS:-$TMP/shots}
PIDS=()

if ! command -v chromium >/dev/null 2>&1; then
  echo "run_dashboard: chromium is not installed — run: make test-deps"; exit 1
fi
tiny_corpus 200000 "$TMP/data"
mkdir -p "$TMP/runs"
cat > "$TMP/base.ini" <<INI
data = $TMP/data
seq_len = 32
n_head = 4
d_model = 32
n_layer = 2
lr = 3e-3
warmup_steps = 2
eval_batches = 2
sample_tokens = 0
threads = 1
global_batch = 8
batch_size = 8
INI

# --- the refusals, before anything runs ------------------------------------------------------
expect_exit 0 "dashboard --help" $MT dashboard --help
grep -q -- "--token" "$TMP/out" && ok "--help names --token" || bad "--help lacks --token"
ONE_ERROR_LINE=1 expect_exit 2 "--db at a database that cannot be reached: one line" $MT dashboard --runs "$TMP/runs" --db "postgresql://127.0.0.1:1/y?connect_timeout=2"
grep -q "dashboard: --db: cannot connect" "$TMP/err" && ok "... says it cannot connect" || bad "--db message: $(cat "$TMP/err")"
ONE_ERROR_LINE=1 expect_exit 2 "--bind 0.0.0.0 without --token is refused" $MT dashboard --runs "$TMP/runs" --bind 0.0.0.0 --port 0
grep -q "token" "$TMP/err" && ok "the refusal says why (token)" || bad "bind message: $(cat "$TMP/err")"
ONE_ERROR_LINE=1 expect_exit 2 "--runs of a missing directory is refused" $MT dashboard --runs "$TMP/nope" --port 0

# --- a finished run to compare with, then the live job --------------------------------------
cp "$TMP/base.ini" "$TMP/other.ini"; printf 'steps = 300\nlog_every = 10\neval_every = 50\n' >> "$TMP/other.ini"
$MT train --config "$TMP/other.ini" --run-dir "$TMP/runs/other" --lr 1e-3 > "$TMP/other.log" 2>&1 \
  && ok "the run to compare with trained" || bad "other run: $(tail -2 "$TMP/other.log")"
cp "$TMP/base.ini" "$TMP/live.ini"
printf 'steps = 5000\nlog_every = 10\neval_every = 100\nckpt_every = 500\n' >> "$TMP/live.ini"
$MT run --heartbeat-timeout 60 --backoff 0.1:0.5 --grace 2 -- \
  $MT train --config "$TMP/live.ini" --run-dir "$TMP/runs/live" --fault kill@step=1600 \
  > "$TMP/live.log" 2>&1 &
JOB=$!; PIDS+=("$JOB")
start_bg dash "listening on http://127.0.0.1:" $MT dashboard --runs "$TMP/runs" --port 0 --poll-ms 500
URL=$URL_dash
mkdir -p "$SHOTS"
if timeout 200 $PY tests/dashboard_check.py "$URL" "$TMP/runs/live" "$TMP/runs/other" "$SHOTS" > "$TMP/check.log" 2>&1
then ok "chromium: the live job through the dashboard ($(grep -c '  ok ' "$TMP/check.log") DOM checks)"
else bad "chromium:"; grep -v '  ok ' "$TMP/check.log" || true; fi
grep '  ok ' "$TMP/check.log" | sed 's/^/    /' || true
rc=0; wait "$JOB" || rc=$?
check "the supervised job completed (exit $rc)" test "$rc" = 0
n_fail=$($PY -c "import sqlite3,sys; print(sqlite3.connect('file:'+sys.argv[1]+'?mode=ro', uri=True).execute(\"SELECT COUNT(*) FROM events WHERE kind='failure' AND detail LIKE '%crash%'\").fetchone()[0])" "$TMP/runs/live/run.db")
[ "$n_fail" = 1 ] && ok "run.db holds the crash the page showed" || bad "no failure event in run.db"

# --- read-only, rotation, deletion, garbage ---------------------------------------------------
sum0=$(sha256sum "$TMP/runs/other/run.db" | cut -d' ' -f1)
for p in "/" "/run?dir=$TMP/runs/other" "/compare?run=$TMP/runs/other&run=$TMP/runs/live"; do
  code=$(curl -s -o "$TMP/page.html" -w '%{http_code}' "$URL$p")
  check "GET ${p%%\?*}: 200 ($code)" test "$code" = 200
done
# one drawing path: the run page's <main> is byte for byte what report --html writes
$MT report --run "$TMP/runs/other" --html "$TMP/other_report.html" > /dev/null 2>&1 || bad "report --html of the other run"
curl -s -o "$TMP/other_dash.html" "$URL/run?dir=$TMP/runs/other"
$PY - "$TMP/other_report.html" "$TMP/other_dash.html" <<'PY' && ok "the run page's <main> equals report --html's (one drawing path)" || bad "run page and report --html differ"
import sys
a, b = (open(p, encoding="utf-8").read() for p in sys.argv[1:3])
main = lambda t: t[t.index("<main>"):t.index("</main>")]
sys.exit(0 if len(main(a)) > 10000 and main(a) == main(b) else 1)
PY
check "the dashboard never wrote run.db (same SHA-256 after every page)" \
  test "$(sha256sum "$TMP/runs/other/run.db" | cut -d' ' -f1)" = "$sum0"
etag=$(curl -sI "$URL/run?dir=$TMP/runs/other" | tr -d '\r' | sed -n 's/^ETag: //Ip')
code=$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $etag" "$URL/run?dir=$TMP/runs/other")
check "an unchanged run's page answers 304 to its ETag ($etag: $code)" test "$code" = 304
# rotate: a new run.db (another job's) moved over the old one; the page must show the new job
mkdir -p "$TMP/rot"
cp "$TMP/base.ini" "$TMP/rot.ini"; printf 'steps = 20\nlog_every = 5\nname = rotated_job\n' >> "$TMP/rot.ini"
$MT train --config "$TMP/rot.ini" --run-dir "$TMP/rot/x" > "$TMP/rot.log" 2>&1 || bad "rotation run: $(tail -2 "$TMP/rot.log")"
cp "$TMP/rot/x/run.db" "$TMP/runs/other/run.db.new" && mv "$TMP/runs/other/run.db.new" "$TMP/runs/other/run.db"
rm -f "$TMP/runs/other/run.db-wal" "$TMP/runs/other/run.db-shm"
sleep 0.3
code=$(curl -s -o "$TMP/page.html" -w '%{http_code}' -H "If-None-Match: $etag" "$URL/run?dir=$TMP/runs/other")
check "a rotated run.db is read anew (200, not 304: $code)" test "$code" = 200
grep -q "rotated_job" "$TMP/page.html" && ok "the page shows the rotated database's job" || bad "rotated page lacks rotated_job"
# garbage: a run.db that is not a database is listed as unreadable, the page still answers
mkdir -p "$TMP/runs/junk" && head -c 5000 /dev/urandom > "$TMP/runs/junk/run.db"
sleep 0.3 # the index rescans at most every 0.25 s (dash/dash_http.c: DASH_RESCAN_S)
curl -s -o "$TMP/runs.html" "$URL/"
grep -q 'data-status="unreadable" data-dir="'"$TMP/runs/junk"'"' "$TMP/runs.html" \
  && ok "a garbage run.db is listed as unreadable" || bad "garbage run.db not listed as unreadable"
# delete: gone from the list, its page 404, the server alive
rm -rf "$TMP/runs/junk" "$TMP/runs/other"
sleep 0.3
curl -s -o "$TMP/runs.html" "$URL/"
! grep -q "data-dir=\"$TMP/runs/other\"" "$TMP/runs.html" && grep -q "data-dir=\"$TMP/runs/live\"" "$TMP/runs.html" \
  && ok "a deleted run leaves the runs page, the others stay" || bad "deleted run still listed (or live gone)"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/run?dir=$TMP/runs/other")
check "a deleted run's page is 404 ($code)" test "$code" = 404
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/run?dir=/etc")
check "a directory the index did not find is 404, never read ($code)" test "$code" = 404
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/")
check "POST is 405: read-only ($code)" test "$code" = 405
kill -0 "$PID_dash" 2>/dev/null && ok "the dashboard survived all of it" || bad "the dashboard died"
stop_pid "$PID_dash" && ok "SIGTERM stops it cleanly (exit 0)" || bad "dashboard exit status on SIGTERM"

# --- the token ---------------------------------------------------------------------------------
start_bg tok "listening on http://127.0.0.1:" $MT dashboard --runs "$TMP/runs" --port 0 --bind 127.0.0.1 --token s3cret-T
U=$URL_tok
check "no token: 401" test "$(curl -s -o /dev/null -w '%{http_code}' "$U/")" = 401
check "wrong token: 401" test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret-X' "$U/")" = 401
check "a prefix of the token: 401" test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret' "$U/")" = 401
check "bearer token: 200" test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer s3cret-T' "$U/")" = 200
hdr=$(curl -s -D - -o /dev/null "$U/?token=s3cret-T" | tr -d '\r')
echo "$hdr" | grep -q '^HTTP/1.1 303' && echo "$hdr" | grep -qi '^Set-Cookie: mt_dash_token=s3cret-T; Path=/; HttpOnly; SameSite=Strict' \
  && ok "?token= sets an HttpOnly cookie and redirects (303)" || bad "?token= login: $hdr"
check "the cookie alone: 200" test "$(curl -s -o /dev/null -w '%{http_code}' -b 'mt_dash_token=s3cret-T' "$U/")" = 200
stop_pid "$PID_tok" || true

finish "run_dashboard" "(screenshots: $SHOTS)"
