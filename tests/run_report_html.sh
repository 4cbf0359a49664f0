#!/usr/bin/env bash
# tests/run_report_html.sh — `minitrain report --svg/--html` for a pp + MoE run and a faulted run,
# checked in a real browser.
#
# Three jobs on the tiny Shakespeare slice: (1) 4 ranks, pp 2 × dp 2 with ep 2, a MoE block every
# second layer, 4 microbatches (1F1B), checkpoints and one robustness evaluation; (1b) pp 2 under
# GPipe; (2) one process under the supervisor with a kill fault at step 25 (a crash, a restart
# from the newest committed checkpoint).
# For each: report --svg writes the ETTR plot and the pictures that apply (each parsed as XML
# here), report --html the page, which tests/report_html_check.py opens in headless Chromium
# (Debian's; `make test-deps` installs it — this script installs nothing) and checks from the
# DOM: sections, SVG element counts derived from the run's own layout (P·M pipeline boxes, one
# rank cell per rank), each stage's measured box order = its schedule's (1F1B's warm-up /
# steady state / cool-down, GPipe's all-forwards-first), the failure in the ETTR picture and
# events, no console errors, nothing loaded from outside the file. Screenshots go to
# $REPORT_SHOTS (default: a temporary directory, removed unless KEEP=1). About 40 s.
set -euo pipefail
cd "$(dirname "$0")/.."
MT=./minitrain
PY=/usr/bin/python3
MPI="mpirun --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none"
. tests/lib.sh
tmp_dir mt_report_html
SHOTS=${REPORT_SHOTS:-$TMP/shots}

if ! command -v chromium >/dev/null 2>&1; then
  echo "run_report_html: chromium is not installed — run: make test-deps"; exit 1
fi
tiny_corpus 200000 "$TMP/data"
cat > "$TMP/base.ini" <<INI
data = $TMP/data
seq_len = 32
n_head = 4
d_model = 32
lr = 3e-3
warmup_steps = 2
eval_batches = 2
sample_tokens = 0
threads = 1
INI

# --- 1. pp + MoE: P = 2 stages, M = 4 microbatches, 4 ranks ---------------------------------
P=2; M=4; WORLD=4
cp "$TMP/base.ini" "$TMP/pp.ini"
cat >> "$TMP/pp.ini" <<INI
n_layer = 4
global_batch = 16
batch_size = 2
steps = 20
log_every = 5
eval_every = 5
moe_every = 2
n_experts = 4
top_k = 2
capacity_factor = 1.0
aux_loss_coef = 0.01
ckpt_every = 10
robust_every = 20
robust_eps = 0,0.03,0.1
INI
OMP_NUM_THREADS=1 timeout 120 $MPI -np $WORLD $MT train --config "$TMP/pp.ini" --run-dir "$TMP/pp" \
  --pp $P --dp 2 --ep 2 --microbatches $M > "$TMP/pp.log" 2>&1 \
  && ok "pp 2 x dp 2 (ep 2) MoE run trained" || bad "pp+MoE run: $(tail -2 "$TMP/pp.log")"
n_tl=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT COUNT(*) FROM events WHERE kind='pp_timeline'\").fetchone()[0])" "$TMP/pp/run.db")
# logging steps 5, 10, 15, 20: one event per stage each
[ "$n_tl" = $((4 * P)) ] && ok "pp_timeline: one event per stage per logging step ($n_tl)" \
  || bad "pp_timeline events: $n_tl, expected $((4 * P))"
$MT report --run "$TMP/pp" --svg "$TMP/pp/plot.svg" --html "$TMP/pp/report.html" > "$TMP/pp_report.log" 2>&1 \
  && ok "report --svg --html (pp + MoE)" || bad "report: $(tail -2 "$TMP/pp_report.log")"
for pic in plot plot-metrics plot-pipeline plot-moe plot-layout plot-robustness; do
  $PY -c "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); assert d.documentElement.tagName == 'svg'" \
    "$TMP/pp/$pic.svg" 2>/dev/null && ok "$pic.svg is well-formed SVG" || bad "$pic.svg missing or not XML"
done
cat > "$TMP/pp_expect.json" <<JSON
{"sections": ["summary", "config", "ettr", "metrics", "pipeline", "moe", "robustness",
              "checkpoints", "events"],
 "counts": {"#pic-pipeline g.pp-forward": $((P * M)), "#pic-pipeline g.pp-backward": $((P * M)),
            "#pic-layout g.layout-rank": $WORLD, "#pic-pipeline g.pp-stage": $P,
            "#pic-layout rect.layout-ep": $((P * 1 * (2 / 2)))},
 "at_least": {"#pic-moe rect.moe-cell": 8, "#pic-metrics polyline.series": 3,
              "table.checkpoints tr": 3, "table.events tr": 3, "#pic-robustness polyline": 1},
 "texts": {"#pic-pipeline title": "$P stages × $M microbatches", "#pic-moe title": "2 layers × 4 experts",
           "#pic-layout title": "tp 1 × pp 2 × dp 2"},
 "pipeline_order": true, "stages": $P, "micro": $M, "schedule": "1f1b"}
JSON
mkdir -p "$SHOTS"
if timeout 60 $PY tests/report_html_check.py "$TMP/pp/report.html" "$TMP/pp_expect.json" "$SHOTS/pp_moe" \
   > "$TMP/pp_check.log" 2>&1; then ok "chromium: the pp + MoE page ($(grep -c '  ok ' "$TMP/pp_check.log") DOM checks)"
else bad "chromium, pp + MoE page:"; grep -v '  ok ' "$TMP/pp_check.log" || true; fi

# --- 1b. the same pipeline under GPipe (dense, 2 ranks): all forwards, then all backwards -------
cp "$TMP/base.ini" "$TMP/gp.ini"
cat >> "$TMP/gp.ini" <<INI
n_layer = 2
global_batch = 8
batch_size = 2
steps = 10
log_every = 2
eval_every = 10
INI
OMP_NUM_THREADS=1 timeout 120 $MPI -np $P $MT train --config "$TMP/gp.ini" --run-dir "$TMP/gpipe" \
  --pp $P --pp-schedule gpipe --microbatches $M > "$TMP/gpipe.log" 2>&1 \
  && ok "pp 2 GPipe run trained" || bad "GPipe run: $(tail -2 "$TMP/gpipe.log")"
$MT report --run "$TMP/gpipe" --html "$TMP/gpipe/report.html" > /dev/null 2>&1 || bad "report --html (GPipe)"
cat > "$TMP/gp_expect.json" <<JSON
{"sections": ["pipeline"], "absent": ["moe"],
 "counts": {"#pic-pipeline g.pp-forward": $((P * M)), "#pic-layout g.layout-rank": $P},
 "texts": {"#pic-pipeline title": "GPipe, $P stages × $M microbatches"},
 "pipeline_order": true, "stages": $P, "micro": $M, "schedule": "gpipe"}
JSON
if timeout 60 $PY tests/report_html_check.py "$TMP/gpipe/report.html" "$TMP/gp_expect.json" "$SHOTS/gpipe" \
   > "$TMP/gp_check.log" 2>&1; then ok "chromium: the GPipe page ($(grep -c '  ok ' "$TMP/gp_check.log") DOM checks)"
else bad "chromium, GPipe page:"; grep -v '  ok ' "$TMP/gp_check.log" || true; fi

# --- 1c. ZB-H1 (dense, 2 ranks): B and W boxes apart, in the schedule's order -----------------
OMP_NUM_THREADS=1 timeout 120 $MPI -np $P $MT train --config "$TMP/gp.ini" --run-dir "$TMP/zb" \
  --pp $P --pp-schedule zb-h1 --microbatches $M > "$TMP/zb.log" 2>&1 \
  && ok "pp 2 ZB-H1 run trained" || bad "ZB-H1 run: $(tail -2 "$TMP/zb.log")"
$MT report --run "$TMP/zb" --html "$TMP/zb/report.html" > /dev/null 2>&1 || bad "report --html (ZB-H1)"
cat > "$TMP/zb_expect.json" <<JSON
{"sections": ["pipeline"], "absent": ["moe"],
 "counts": {"#pic-pipeline g.pp-forward": $((P * M)), "#pic-pipeline g.pp-backward": $((P * M)),
            "#pic-pipeline g.pp-weight": $((P * M))},
 "texts": {"#pic-pipeline title": "ZB-H1, $P stages × $M microbatches"},
 "pipeline_order": true, "stages": $P, "micro": $M, "schedule": "zb-h1"}
JSON
if timeout 60 $PY tests/report_html_check.py "$TMP/zb/report.html" "$TMP/zb_expect.json" "$SHOTS/zb" \
   > "$TMP/zb_check.log" 2>&1; then ok "chromium: the ZB-H1 page ($(grep -c '  ok ' "$TMP/zb_check.log") DOM checks)"
else bad "chromium, ZB-H1 page:"; grep -v '  ok ' "$TMP/zb_check.log" || true; fi

# --- 2. a faulted run: kill at step 25 under the supervisor, resume from step 20 --------------
cp "$TMP/base.ini" "$TMP/f.ini"
cat >> "$TMP/f.ini" <<INI
n_layer = 2
global_batch = 8
batch_size = 8
steps = 40
log_every = 5
eval_every = 10
ckpt_every = 10
INI
timeout 120 $MT run --heartbeat-timeout 60 --backoff 0.1:0.5 --grace 2 -- \
  $MT train --config "$TMP/f.ini" --run-dir "$TMP/fault" --fault kill@step=25 > "$TMP/fault.log" 2>&1 \
  && ok "supervised run with a kill fault completed" || bad "faulted run: $(tail -2 "$TMP/fault.log")"
$MT report --run "$TMP/fault" --svg "$TMP/fault/plot.svg" --html "$TMP/fault/report.html" > "$TMP/f_report.log" 2>&1 \
  && ok "report --svg --html (faulted)" || bad "report: $(tail -2 "$TMP/f_report.log")"
[ ! -e "$TMP/fault/plot-pipeline.svg" ] && [ ! -e "$TMP/fault/plot-moe.svg" ] \
  && ok "no pipeline or MoE picture for a dense single-stage run" || bad "pictures that do not apply were drawn"
cat > "$TMP/f_expect.json" <<JSON
{"sections": ["summary", "config", "ettr", "metrics", "checkpoints", "events"],
 "absent": ["pipeline", "moe", "robustness"],
 "counts": {"#pic-layout g.layout-rank": 1, "table.events tr.ev-failure": 1,
            "table.events tr.ev-recovered": 1},
 "at_least": {"#pic-ettr polyline": 2, "table.checkpoints tr": 4},
 "texts": {"#pic-ettr": "crash", "table.ettr-summary": "failures: crash", "#summary": "completed"}}
JSON
if timeout 60 $PY tests/report_html_check.py "$TMP/fault/report.html" "$TMP/f_expect.json" "$SHOTS/fault" \
   > "$TMP/f_check.log" 2>&1; then ok "chromium: the faulted run's page ($(grep -c '  ok ' "$TMP/f_check.log") DOM checks)"
else bad "chromium, faulted page:"; grep -v '  ok ' "$TMP/f_check.log" || true; fi

finish "report html" "(screenshots: $SHOTS)"
