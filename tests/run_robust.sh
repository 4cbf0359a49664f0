#!/usr/bin/env bash
# tests/run_robust.sh — adversarial robustness end to end (safety/robust.h).
#
#   - the robust_every hook changes nothing in training (bit for bit) and writes evals rows;
#     dp2 / tp2 / pp2 (and MoE ep2) training runs log the same evals as one process;
#   - `minitrain robust --json` on one saved model: one process vs dp2 / tp2 / pp2 (PGD with a
#     random start, HotFlip beam search) give the same rows; eps = 0 equals clean exactly,
#     adv >= clean at every eps > 0, PGD stays in the ball;
#   - report prints the newest robustness table, --json carries it, --svg draws the panel;
#   - adversarial training: pgd at eps 0 trains exactly the plain model, freelb at eps 0 the same
#     within fp32, pgd at eps 0.1 trains the same model under dp2 and tp2 as in one process;
#   - bad input: one clear line, exit 2.
# Losses are compared within 1e-5 relative (1e-6 for the CLI: same weights); accuracies and the
# success rate within one position of n_tokens (a near-tie argmax may flip under another layout's
# rounding).
set -euo pipefail
. tests/layout_lib.sh
layout_setup mt_robust
cat >> "$CONFIG" <<INI
n_layer = 2
n_head = 4
d_model = 32
batch_size = 2
global_batch = 4
seed = 7
robust_eps = 0,0.03,0.1
robust_steps = 3
INI

# ---- the training hook ---------------------------------------------------------------------------
run plain 1
run base 1 --robust-every 4
check base plain --exact
for layout in "dp2:--dp 2" "tp2:--tp 2" "pp2:--pp 2"; do
  IFS=: read -r name flags <<< "$layout"
  run "$name" 2 --robust-every 4 $flags || bad "$name: $(tail -2 "$TMP/$name.log" | cut -c1-200)"
done

# compare evals tables: python3 tests ... BASE OTHER REL
cmp_evals() {
  /usr/bin/python3 - "$TMP/$1/run.db" "$TMP/$2/run.db" <<'PY'
import sqlite3, sys
q = ("SELECT step, eps_rel, k, clean_loss, adv_loss, clean_acc, adv_acc, success_rate, n_tokens"
     " FROM evals ORDER BY step, eps_rel")
a = list(sqlite3.connect(sys.argv[1]).execute(q)); b = list(sqlite3.connect(sys.argv[2]).execute(q))
assert len(a) == len(b) == 6, (len(a), len(b))
worst = 0
for x, y in zip(a, b):
    assert x[:3] == y[:3] and x[8] == y[8], (x, y)
    for i in (3, 4):
        d = abs(x[i] - y[i]) / abs(x[i]); worst = max(worst, d)
        assert d <= 1e-5, (x, y)
    for i in (5, 6, 7):
        assert abs(x[i] - y[i]) <= 1.0 / x[8] + 1e-12, (x, y)
    if x[1] == 0: assert y[3] == y[4] and y[7] == 0, y
    else: assert y[4] >= y[3], y
print(f"6 evals rows, losses within {worst:.1e}")
PY
}
for name in dp2 tp2 pp2; do
  if out=$(cmp_evals base "$name" 2>&1); then ok "robust hook $name = one process: $out"
  else bad "robust hook $name: $(echo "$out" | tail -1)"; fi
done
# expert parallelism: an EP group concatenates its ranks' microbatches, so ep2 x batch 2 (robust
# batches 2) attacks the same groups of tokens as one process with batch 4 (robust batches 1)
MOE="--moe-every 2 --n-experts 4 --top-k 2 --capacity-factor 1.25"
run moe 1 --robust-every 4 $MOE --batch-size 4 --robust-batches 1
run moe_ep2 2 --robust-every 4 $MOE --batch-size 2 --robust-batches 2 --dp 2 --ep 2 \
  || bad "moe_ep2: $(tail -2 "$TMP/moe_ep2.log" | cut -c1-200)"
if out=$(cmp_evals moe moe_ep2 2>&1); then ok "robust hook MoE ep2 = one process: $out"
else bad "robust hook MoE ep2: $(echo "$out" | tail -1)"; fi
grep -q "robust pgd l2: eps 0 adv" "$TMP/base.log" && ok "hook logs the robustness line" \
  || bad "no robustness log line"

# ---- minitrain robust, one saved model in four layouts ------------------------------------------
R="$TMP/base"
RB=(--run "$R" --json --threads 1 --eps 0,0.03,0.1 --steps 3 --random-start --batches 3)
$MT robust "${RB[@]}" > "$TMP/cli1.json" 2> "$TMP/cli1.err" || bad "robust 1 process: $(tail -1 "$TMP/cli1.err")"
for l in "dp2:--dp 2" "tp2:--tp 2" "pp2:--pp 2"; do
  IFS=: read -r name flags <<< "$l"
  $MPI -np 2 $MT robust "${RB[@]}" --no-db $flags > "$TMP/cli_$name.json" 2> "$TMP/cli_$name.err" \
    || bad "robust $name: $(tail -1 "$TMP/cli_$name.err")"
done
HF=(--run "$R" --json --threads 1 --no-db --attack hotflip --flips 2 --beam 3)
$MT robust "${HF[@]}" > "$TMP/hf1.json" 2>/dev/null || bad "robust hotflip"
$MPI -np 2 $MT robust "${HF[@]}" --pp 2 > "$TMP/hf_pp2.json" 2>/dev/null || bad "robust hotflip pp2"
$MPI -np 2 $MT robust "${HF[@]}" --tp 2 > "$TMP/hf_tp2.json" 2>/dev/null || bad "robust hotflip tp2"
cmp_json() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["rows"] and len(a["rows"]) == len(b["rows"]), "row counts"
for k in ("step", "attack", "norm", "sequences", "seq_len"): assert a[k] == b[k], k
assert abs(a["embed_norm"] - b["embed_norm"]) <= 1e-6 * a["embed_norm"]
worst = 0
for x, y in zip(a["rows"], b["rows"]):
    n = x["n_tokens"]; assert n == y["n_tokens"] and n > 0
    for k in ("eps_abs", "clean_loss", "adv_loss", "clean_ppl", "adv_ppl"):
        d = abs(x[k] - y[k]) / max(abs(x[k]), 1e-30); worst = max(worst, d)
        assert d <= 1e-6, (k, x[k], y[k])
    for k in ("clean_acc", "adv_acc", "success_rate"):
        assert abs(x[k] - y[k]) <= 1.0 / n + 1e-12, (k, x[k], y[k])
    for r in (x, y):
        assert r["max_ball"] <= 1 + 1e-6, r
        if a["attack"] != "hotflip" and r["eps_rel"] == 0:
            assert r["adv_loss"] == r["clean_loss"] and r["success_rate"] == 0, r
        elif a["attack"] != "hotflip":
            assert r["adv_loss"] >= r["clean_loss"] and r["max_ball"] > 0.99, r
print(f"{len(a['rows'])} rows, losses within {worst:.1e}")
PY
}
for name in dp2 tp2 pp2; do
  if out=$(cmp_json "$TMP/cli1.json" "$TMP/cli_$name.json" 2>&1); then ok "robust --json $name = one process: $out"
  else bad "robust --json $name: $(echo "$out" | tail -1)"; fi
done
for name in pp2 tp2; do
  if out=$(cmp_json "$TMP/hf1.json" "$TMP/hf_$name.json" 2>&1); then ok "robust hotflip beam $name = one process: $out"
  else bad "robust hotflip $name: $(echo "$out" | tail -1)"; fi
done
grep -q "robust: batch 2/2" <($MT robust --run "$R" --threads 1 --no-db --steps 1 2>&1) \
  && ok "robust prints progress" || bad "robust progress lines"

# ---- report --------------------------------------------------------------------------------------
$MT report --run "$R" > "$TMP/report.txt" 2>&1 || bad "report: $(tail -1 "$TMP/report.txt")"
grep -q "robustness (newest evaluation: step 8, minitrain robust, pgd l2, k 3)" "$TMP/report.txt" \
  && ok "report prints the newest robustness table" || bad "report: $(grep -A2 robustness "$TMP/report.txt" | head -3)"
$MT report --run "$R" --json > "$TMP/report.json"
/usr/bin/python3 -c "
import json, sys; o = json.load(open(sys.argv[1]))['robustness']
assert o['kind'] == 'cli' and len(o['rows']) == 3 and o['rows'][0]['adv_loss'] == o['rows'][0]['clean_loss'], o" \
  "$TMP/report.json" && ok "report --json carries the robustness rows" || bad "report --json robustness"
$MT report --run "$TMP/pp2" --svg "$TMP/plot.svg" > /dev/null
lines=$(grep -c '<polyline fill="none" stroke="#[0-9a-f]*" stroke-width="2"' "$TMP/plot.svg" || true)
grep -q "adversarial loss vs eps: pgd l2, k 3" "$TMP/plot.svg" && [ "$lines" = 2 ] \
  && ok "report --svg draws adversarial loss vs eps beside the loss plot (2 steps)" \
  || bad "svg panel: $lines lines"

# ---- adversarial training ------------------------------------------------------------------------
run adv0 1 --adv-train pgd --adv-eps 0
check adv0 plain --exact
run freelb0 1 --adv-train freelb --adv-eps 0 --adv-steps 2
check freelb0 plain
grep -q "adversarial training: pgd, l2 ball, eps_rel 0" "$TMP/adv0.log" \
  && ok "adversarial training logs its extra passes" || bad "no adversarial training log line"
run adv 1 --adv-train pgd --adv-eps 0.1 --adv-steps 2
run adv_dp2 2 --adv-train pgd --adv-eps 0.1 --adv-steps 2 --dp 2
run adv_tp2 2 --adv-train pgd --adv-eps 0.1 --adv-steps 2 --tp 2
check adv_dp2 adv
check adv_tp2 adv
/usr/bin/python3 - "$TMP/adv/run.db" "$TMP/plain/run.db" <<'PY' && ok "pgd training at eps 0.1 trains on a higher (perturbed) loss" || bad "adv train loss"
import sqlite3, sys
q = "SELECT train_loss FROM metrics WHERE train_loss IS NOT NULL ORDER BY step"
a = [r[0] for r in sqlite3.connect(sys.argv[1]).execute(q)]; b = [r[0] for r in sqlite3.connect(sys.argv[2]).execute(q)]
assert a[0] > b[0], (a[0], b[0])  # step 1: the same weights, the perturbed batch costs more
PY

# ---- bad input -----------------------------------------------------------------------------------
expect_fail() { # expect_fail PATTERN CMD...: exit 2 and one line matching PATTERN
  local pat=$1; shift
  set +e; local out; out=$("$@" 2>&1); local rc=$?; set -e
  if [ $rc = 2 ] && echo "$out" | grep -q -- "$pat"; then ok "refused: $pat"
  else bad "expected exit 2 with '$pat', got $rc: $(echo "$out" | head -2)"; fi
}
expect_fail "--run DIR is required" $MT robust
expect_fail "eps must be a comma list" $MT robust --run "$R" --eps 0,-1
expect_fail "unknown attack 'foo'" $MT robust --run "$R" --attack foo
expect_fail "not a run directory\|no model at" $MT robust --run "$TMP/nope"
expect_fail "adv_train = pgd with pp = 2 is not supported" $MT train --config "$CONFIG" --run-dir "$TMP/bad" --adv-train pgd --pp 2
expect_fail "'robust_attack' must be" $MT train --config "$CONFIG" --run-dir "$TMP/bad" --robust-attack x

finish robust
