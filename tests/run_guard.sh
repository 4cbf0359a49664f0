#!/usr/bin/env bash
# tests/run_guard.sh — device = guard computes exactly what device = cpu computes.
#
# The guard device (ops/ops_guard.c) keeps every model buffer PROT_NONE outside the ops and the
# memory API, so a run that completes on it touched parameters, gradients, activations and AdamW
# state only through ops/ops.h, and every multi-rank run exercised the comm split (device
# buffers staged through host memory for MPI, parallel/comm_dev.c). Here each layout trains
# 8 steps on cpu and on guard and must agree BIT FOR BIT (losses in run.db, every tensor of
# model.safetensors): one process, dp=2, dp=2 ZeRO-1, tp=2, pp=2, ep=2 (MoE), and 4D
# tp2 x pp2 x dp2 x ep2 on 8 ranks. Also: a checkpoint written on guard and resumed on guard equals
# the uninterrupted cpu run; greedy `sample` on guard prints cpu's text; `device = cuda` in a build
# without CUDA and an unknown device exit 2 with one line. (The negative test — a stray host
# access must fault — is tests/test_guard.c.)
set -euo pipefail
. tests/layout_lib.sh
layout_setup mt_guard
cat >> "$CONFIG" <<INI
n_layer = 2
n_head = 2
d_model = 32
batch_size = 2
global_batch = 8
eval_batches = 2
seed = 11
INI

pair() { # pair NAME NP [flags]: the same run on cpu and on guard, compared exactly
  local name=$1 np=$2; shift 2
  run "${name}_cpu" "$np" --device cpu "$@" || bad "$name cpu: $(tail -2 "$TMP/${name}_cpu.log")"
  run "${name}_guard" "$np" --device guard "$@" ||
    bad "$name guard: $(grep -a -m2 'guard:\|error' "$TMP/${name}_guard.log" | cut -c1-300)"
  check "${name}_guard" "${name}_cpu" --exact
}
MOE="--moe-every 1 --n-experts 4 --top-k 2"
pair single 1
pair dp2 2 --dp 2
pair zero1 2 --dp 2 --zero 1
pair tp2 2 --tp 2
pair pp2 2 --pp 2
pair ep2 2 --dp 2 --ep 2 $MOE
pair 4d 8 --tp 2 --pp 2 --dp 2 --ep 2 $MOE

# checkpoint on guard at step 4, stop, resume on guard: the same 8 steps as cpu without a stop
run resume_guard 2 --device guard --dp 2 --ckpt-every 4 --stop-after 4 ||
  bad "resume: first half: $(tail -2 "$TMP/resume_guard.log")"
run resume_guard 2 --device guard --dp 2 --ckpt-every 4 > /dev/null ||
  bad "resume: second half: $(tail -2 "$TMP/resume_guard.log")"
grep -q "resum" "$TMP/resume_guard.log" && ok "second run resumed from the checkpoint" ||
  bad "second run did not resume: $(grep -m2 -i 'ckpt\|resum' "$TMP/resume_guard.log")"
check resume_guard dp2_cpu --exact

# sampling reads the logits back through the memory API
a=$($MT sample --run "$TMP/single_cpu" --device cpu --max-tokens 40 --temperature 0 2>/dev/null)
b=$($MT sample --run "$TMP/single_cpu" --device guard --max-tokens 40 --temperature 0 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "greedy sample on guard equals cpu" || bad "sample differs"

# user errors: one clear line, exit 2
expect2() {
  local what=$1; shift
  set +e; "$@" > "$TMP/out" 2> "$TMP/err"; local rc=$?; set -e
  if [ "$rc" = 2 ] && [ "$(grep -c 'minitrain: error:' "$TMP/err")" = 1 ]; then ok "$what"
  else bad "$what (exit $rc): $(head -c 300 "$TMP/err")"; fi
}
if ! command -v nvidia-smi > /dev/null; then # no GPU here: cuda must be refused, not crash
  expect2 "device = cuda on a machine without a GPU" env -u MINITRAIN_DEVICE $MT train \
    --config "$CONFIG" --run-dir "$TMP/cuda" --device cuda
fi
expect2 "unknown device" env -u MINITRAIN_DEVICE $MT train --config "$CONFIG" --run-dir "$TMP/x" \
  --device tpu
expect2 "sample --device tpu" env -u MINITRAIN_DEVICE $MT sample --run "$TMP/single_cpu" --device tpu
finish guard
