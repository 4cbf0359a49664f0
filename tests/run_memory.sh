#!/usr/bin/env bash
# tests/run_memory.sh — the memory wall: activation recompute, ZeRO-2/3 and the memory budget.
#
# 8 steps of a tiny GPT from one seed. recompute = selective | full must give bit-identical losses
# and final parameters to recompute = none (the same ops on the same inputs), alone and with
# tp 2 / pp 2 / dp 2 and MoE with ep 2. The memory budget is printed before step 1, and a budget
# over memory_limit is refused with exit 2 before any work.
set -euo pipefail
. tests/layout_lib.sh
layout_setup mt_mem
cat >> "$CONFIG" <<INI
n_layer = 4
n_head = 4
d_model = 32
batch_size = 2
global_batch = 8
eval_batches = 2
seed = 11
INI
MOE="--moe-every 2 --n-experts 4 --top-k 2"

# --- recompute: bit-identical to none, in every layout ---------------------------------------
for layout in "one:1:" "tp2:2:--tp 2" "pp2:2:--pp 2 --microbatches 4" "dp2:2:--dp 2" \
              "ep2:2:--dp 2 --ep 2 $MOE"; do
  IFS=: read -r name np flags <<< "$layout"
  run "rc_${name}_none" "$np" $flags || bad "rc_${name}_none: $(tail -2 "$TMP/rc_${name}_none.log")"
  for rc in selective full; do
    run "rc_${name}_$rc" "$np" $flags --recompute $rc || bad "rc_${name}_$rc: $(tail -2 "$TMP/rc_${name}_$rc.log")"
    check "rc_${name}_$rc" "rc_${name}_none" --exact
  done
done

finish memory
