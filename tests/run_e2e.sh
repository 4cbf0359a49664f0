#!/usr/bin/env bash
# tests/run_e2e.sh — end to end on a small slice of Shakespeare: prepare (byte and BPE), a short
# train that writes run.db and whose loss falls, report --json, sample, and the user errors of
# every subcommand (one clear line, exit 2). Runs from the repository root in about 30 s.
set -euo pipefail
MT=./minitrain
. tests/lib.sh
tmp_dir mt_e2e

tiny_corpus 300000 "$TMP/byte"
$MT prepare --input "$TMP/small.txt" --out "$TMP/bpe" --tokenizer bpe --vocab-size 512 >/dev/null 2>&1
[ -f "$TMP/byte/train_000.bin" ] && [ -f "$TMP/byte/val_000.bin" ] && [ -f "$TMP/byte/tokenizer.bin" ] \
  && ok "prepare writes shards + tokenizer" || bad "prepare outputs"

cat > "$TMP/tiny.ini" <<INI
[model]
n_layer = 2
n_head = 2
d_model = 64
seq_len = 64
[train]
batch_size = 8
global_batch = 16
steps = 60
lr = 3e-3
min_lr = 3e-4
warmup_steps = 5
[run]
threads = 2
log_every = 20
eval_every = 30
eval_batches = 4
sample_every = 0
sample_tokens = 32
INI
$MT train --config "$TMP/tiny.ini" --data "$TMP/byte" --run-dir "$TMP/run" > "$TMP/train.log"
[ -f "$TMP/run/run.db" ] && ok "train writes run.db" || bad "run.db missing"
[ -f "$TMP/run/model.safetensors" ] && ok "train saves the model" || bad "model missing"
$MT report --run "$TMP/run" --json > "$TMP/report.json"
/usr/bin/python3 - "$TMP/report.json" <<'PY' && ok "report --json: loss falls, val loss recorded" || bad "report --json checks"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["steps"] == 60, r["steps"]
assert r["first_train_loss"] > 5.0 and r["final_train_loss"] < 0.75 * r["first_train_loss"], r
assert r["final_val_loss"] is not None and r["final_val_loss"] < 4.0, r
assert r["tokens_per_s"] > 0 and r["mfu"] > 0, r
PY
$MT report --run "$TMP/run" | grep "steps" >/dev/null && ok "report text" || bad "report text"
# BPE run: vocab comes from the tokenizer
$MT train --config "$TMP/tiny.ini" --data "$TMP/bpe" --run-dir "$TMP/runbpe" --steps 10 --eval-every 0 > "$TMP/bpe.log"
grep -q "vocab 512" "$TMP/bpe.log" && ok "BPE data trains with vocab from the tokenizer" || bad "BPE vocab"

# sampling: greedy is deterministic; seed reproduces; stays within the context
a=$($MT sample --run "$TMP/run" --prompt "ROMEO:" --max-tokens 20 --temperature 0)
b=$($MT sample --run "$TMP/run" --prompt "ROMEO:" --max-tokens 20 --temperature 0)
[ "$a" = "$b" ] && [ "${a:0:6}" = "ROMEO:" ] && ok "greedy sample is deterministic" || bad "greedy sample"
a=$($MT sample --run "$TMP/run" --prompt "A" --max-tokens 30 --seed 5)
b=$($MT sample --run "$TMP/run" --prompt "A" --max-tokens 30 --seed 5)
[ "$a" = "$b" ] && ok "same seed, same sample" || bad "seeded sample"
long=$(head -c 200 /dev/zero | tr '\0' 'x')
expect_exit 2 "prompt longer than the context is refused" $MT sample --run "$TMP/run" --prompt "$long"

# user errors
expect_exit 2 "unknown config key" $MT train --config "$TMP/tiny.ini" --data "$TMP/byte" --n-layerz 3
expect_exit 2 "out-of-range value" $MT train --config "$TMP/tiny.ini" --data "$TMP/byte" --n-head 0
expect_exit 2 "d_model not divisible by n_head" $MT train --config "$TMP/tiny.ini" --data "$TMP/byte" --n-head 3
expect_exit 2 "missing data directory" $MT train --config "$TMP/tiny.ini" --data "$TMP/nope"
expect_exit 2 "missing config file" $MT train --config "$TMP/nope.ini"
printf 'n_layer = 2\nthis is not ini\n' > "$TMP/broken.ini"
expect_exit 2 "malformed config line" $MT train --config "$TMP/broken.ini" --data "$TMP/byte"
expect_exit 2 "batch larger than the data" $MT train --config "$TMP/tiny.ini" --data "$TMP/byte" --batch-size 100000 --global-batch 100000
printf 'abc' > "$TMP/byte_trunc.bin"; mkdir -p "$TMP/trunc"; cp "$TMP/byte/tokenizer.bin" "$TMP/trunc/"
cp "$TMP/byte_trunc.bin" "$TMP/trunc/train_000.bin"; cp "$TMP/byte/val_000.bin" "$TMP/trunc/"
expect_exit 2 "truncated shard" $MT train --config "$TMP/tiny.ini" --data "$TMP/trunc"
expect_exit 2 "sample without a run" $MT sample --run "$TMP/nope"
expect_exit 2 "sample bad temperature" $MT sample --run "$TMP/run" --temperature hot
expect_exit 2 "report without run.db" $MT report --run "$TMP/nope"
expect_exit 2 "prepare without input" $MT prepare --input "$TMP/nope.txt" --out "$TMP/x"
expect_exit 2 "prepare bad vocab" $MT prepare --input "$TMP/small.txt" --out "$TMP/x" --tokenizer bpe --vocab-size 3
expect_exit 2 "unknown subcommand" $MT frobnicate
for c in prepare train sample report bench; do expect_exit 0 "$c --help" $MT $c --help; done
expect_exit 0 "top-level --help" $MT --help

finish e2e
