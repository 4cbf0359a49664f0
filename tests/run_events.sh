#!/usr/bin/env bash
# tests/run_events.sh — the run.db event log is valid JSON and says what ran, whatever the path.
#
# A supervised job (`minitrain run`) in a run directory whose name holds a double quote, a
# backslash and a tab trains a tiny model with checkpoints and two injected faults:
#   corrupt-ckpt@step=20,kill=1  damages every copy of checkpoint 20 (its file path, inside the run
#                                directory, goes into the fault event) and kills the rank;
#   nan@step=25                  makes step 25's loss NaN (a non-finite number in an event).
# So the log holds launch, failure, teardown, backoff, recovered, resume, ckpt_skip, fault,
# nonfinite, checkpoint, eval and end events. Then /usr/bin/python3 (sqlite3 + json) asserts:
#   - every events.detail parses as JSON and is an object (end and error too);
#   - every kind is one of the EV_* names of core/events.h;
#   - each launch event's argv equals, byte for byte, the argv its process really received (the
#     launch goes through a wrapper that writes its arguments NUL-separated before exec);
#   - paths (fault file, resume path) come back byte for byte; `report --json` is valid JSON and
#     counts the two failures.
# Runs from the repository root in about 10 s.
set -euo pipefail
PY=/usr/bin/python3
. tests/lib.sh
tmp_dir mt_events
export MINITRAIN_SHM_DIR="$TMP/shm" # tier-0 checkpoints of this test stay in $TMP
cp ./minitrain "$TMP/minitrain" # every relaunch execs the same binary even if ./minitrain changes
MT=$TMP/minitrain

RUN=$(printf '%s/run "quoted" back\\slash\ttab' "$TMP")
tiny_corpus 120000 "$TMP/data"
cat > "$TMP/tiny.ini" <<INI
data = $TMP/data
n_layer = 2
n_head = 2
d_model = 32
seq_len = 32
batch_size = 4
global_batch = 4
steps = 30
lr = 3e-3
min_lr = 3e-4
warmup_steps = 3
threads = 1
log_every = 10
eval_every = 15
eval_batches = 1
sample_tokens = 0
ckpt_every = 10
INI
# the wrapper records the argv it was started with (one file per attempt), then becomes the trainer
cat > "$TMP/wrap.sh" <<'SH'
#!/bin/bash
printf '%s\0' "$@" > "$(dirname "$0")/argv.$MINITRAIN_ATTEMPT"
exec "$@"
SH
chmod +x "$TMP/wrap.sh"

set +e
$MT run --heartbeat-timeout 60 --backoff 0.1:0.2 --grace 2 --max-restarts 3 -- \
  "$TMP/wrap.sh" "$MT" train --config "$TMP/tiny.ini" --run-dir "$RUN" \
  --fault "corrupt-ckpt@step=20,kill=1" --fault "nan@step=25" > "$TMP/sup.log" 2>&1
rc=$?
set -e
[ $rc = 0 ] && ok "supervised job in a run directory named $(printf %q "$(basename "$RUN")") completed" \
  || bad "supervisor exit $rc: $(grep minitrain "$TMP/sup.log" | tail -3)"

set +e
$MT report --run "$RUN" --json > "$TMP/report.json" 2> "$TMP/report.err"
rrc=$?
set -e
[ $rrc = 0 ] || bad "report --json exit $rrc: $(cat "$TMP/report.err")"

if $PY - "$RUN" "$TMP" core/events.h "$TMP/report.json" <<'PY'; then
import json, os, re, sqlite3, sys
run, tmp, header, report = sys.argv[1:5]
kinds = set(re.findall(r'^#define EV_[A-Z_]+ "([a-z_]+)"', open(header).read(), re.M))
db = sqlite3.connect(os.path.join(run, "run.db"))
db.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
rows = db.execute("SELECT run_id, kind, rank, detail FROM events ORDER BY rowid").fetchall()
assert rows, "no events"
ev = []
for run_id, kind, rank, detail in rows:
    assert kind in kinds, f"kind {kind!r} is not in core/events.h"
    try:
        d = json.loads(detail)
    except Exception as e:
        raise AssertionError(f"{kind} detail is not JSON ({e}): {detail!r}")
    assert isinstance(d, dict), f"{kind} detail is not a JSON object: {detail!r}"
    ev.append((run_id, kind, d))
by = lambda k: [d for _, kind, d in ev if kind == k]
# the launch command, byte for byte: the argv the wrapper received is argv[1:] of the event
launches = by("launch")
assert len(launches) == 3, [l.get("attempt") for l in launches]
for l in launches:
    raw = open(os.path.join(tmp, f"argv.{l['attempt']}"), "rb").read()
    got = [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0")[:-1]]
    assert l["argv"][0] == os.path.join(tmp, "wrap.sh"), l["argv"][0]
    assert l["argv"][1:] == got, (l["argv"], got)
    assert l["argv"][l["argv"].index("--run-dir") + 1] == run
    assert l["resume"] == (l["attempt"] > 1) and (l["argv"][-2:] == ["--resume", "auto"]) == l["resume"]
# paths survive byte for byte
files = {f["tier"]: f["file"] for f in by("fault") if "file" in f}  # tier 1 is in the run dir
assert files.get(1, "").startswith(run + "/ckpt/step_00000020/"), files
resumes = by("resume")
assert resumes and all(r["path"].startswith((run + "/", tmp + "/shm/")) for r in resumes), resumes
assert any(s.get("step") == 20 for s in by("ckpt_skip")), by("ckpt_skip")
# a NaN loss is a string, not invalid JSON
assert [n["loss"] for n in by("nonfinite")] == ["nan"], by("nonfinite")
kinds_seen = sorted(f["kind"] for f in by("failure"))
assert kinds_seen == ["crash", "nonfinite"], kinds_seen
ends = by("end")
assert ends and ends[-1]["status"] == "completed" and ends[-1]["step"] == 30, ends
assert by("supervisor_end")[-1]["status"] == "completed"
r = json.load(open(report))
assert r["failures"] == 2 and r["restarts"] == 2, (r["failures"], r["restarts"])
assert r["config"]["run_dir"] == run, r["config"]["run_dir"]
print(f"  ({len(rows)} events of {len({k for _, k, _ in ev})} kinds checked)")
PY
  ok "every event detail is a JSON object, kinds from core/events.h, launch argv byte for byte, report --json valid"
else
  bad "run.db events (see above)"
fi

finish run_events
