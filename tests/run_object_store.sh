#!/usr/bin/env bash
# tests/run_object_store.sh — checkpoint tier 3 end to end against a real S3 server: a one-box
# OpenStack Swift with s3api (tests/swift_lib.sh, ~15 s to start), set up and checked through an
# independent client (tests/s3_tool.py: botocore, not objstore/s3.c). On a tiny model (2 layers,
# d_model 64, T 32, checkpoints every 5 steps):
#   - bad input: a missing bucket, wrong credentials, a bad URL: one clear line, exit 2, no training
#   - archive: --stop-after 10 with ckpt_object: step 10's objects and objects.json in the bucket,
#     every object's size + SHA-256 equal to the local step's (botocore + hashlib), the run.db
#     catalog's tier-3 row 'archived', `ckpt ls` shows it
#   - tiers 0-2 wiped, --resume auto fetches step 10 from tier 3: losses and final parameters bit
#     for bit those of a run that was never stopped; keep_object 2 leaves the two newest manifests
#     and no orphan object, and the catalog agrees with the bucket
#   - a flipped byte in an archived object: refused by SHA-256, fetched once more, then a loud
#     failure; nothing under the step's name; restoring the byte makes the same resume succeed
#   - the Swift proxy killed in the middle of an upload (upload capped by s3_max_mb_s): training is
#     unharmed; every manifest in the bucket verifies (the cut step is archived after retries, or
#     has no manifest), the next step is archived, no orphans
#   - the proxy killed in the middle of a download (s3_get_mb_s): a clear failure, nothing under
#     the step's name; the next resume keeps the objects already fetched and verified, fetches
#     the rest, and ends bit for bit equal to the unstopped run
#   - a dataset: prepare --out s3:// (index.json: tokens and SHA-256 of each shard, checked against
#     a local prepare) and train --data s3:// with cache_limit at 25% of it: losses and parameters
#     bit for bit those of training on the local files; the cache stays within its limit, evicts,
#     and is emptied at the end; a flipped shard is refused by SHA-256, fetched again, then a loud
#     failure; a cache_limit below prefetch + 2 shards is one clear line
# Skips (exit 0) only when Swift or python3-botocore is not installed. About 60-90 s on 2 cores.
set -uo pipefail
MT=$PWD/minitrain
PY=/usr/bin/python3
. tests/lib.sh
. tests/swift_lib.sh
if ! swift_have || ! $PY -c "import botocore" 2>/dev/null; then
  echo "  skip: OpenStack Swift or python3-botocore not installed (make test-deps)"
  finish object_store "(skipped)"; exit 0
fi
tmp_dir mt_objstore
export MINITRAIN_SHM_DIR=$TMP/shm
on_exit() { swift_stop; }
S3="$PY tests/s3_tool.py"
BK=mtckpt

tiny_corpus 120000 "$TMP/data"
cat > "$TMP/tiny.ini" <<INI
n_layer = 2
n_head = 2
d_model = 64
seq_len = 32
batch_size = 4
global_batch = 8
steps = 20
lr = 3e-3
min_lr = 3e-4
warmup_steps = 3
threads = 1
log_every = 100
eval_every = 0
eval_batches = 2
sample_tokens = 0
ckpt_every = 5
ckpt_keep = 10
ckpt_tier0 = 0
INI
# the kill tests need transfers longer than a socket buffer: a 1.8M-parameter model (22 MB a
# step), 5 MiB parts (a multipart upload, ranged parallel GETs)
sed 's/^n_layer = 2/n_layer = 4/;s/^n_head = 2/n_head = 4/;s/^d_model = 64/d_model = 192/' "$TMP/tiny.ini" > "$TMP/big.ini"
train() { $MT train --config "$TMP/tiny.ini" --data "$TMP/data" "$@"; }
train_big() { $MT train --config "$TMP/big.ini" --data "$TMP/data" --s3_part_mb 5 "$@"; }
losses() { $PY -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1] + '/run.db')
for s, l in c.execute('SELECT step, train_loss FROM metrics WHERE train_loss IS NOT NULL ORDER BY step'):
    print(s, repr(l))" "$1"; }
sql() { $PY -c "import sqlite3, sys; [print(*r, sep='|') for r in sqlite3.connect(sys.argv[1] + '/run.db').execute(sys.argv[2])]" "$1" "$2"; }
manifests() { $S3 ls $BK "$1/step_" | grep -o 'step_[0-9]*/objects.json' | grep -o '[1-9][0-9]*' | tr '\n' ' '; }
wait_line() { # FILE PATTERN SECONDS
  for _ in $(seq $(($3 * 20))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1
}

t0=$(date +%s.%N)
swift_start || { bad "Swift did not start"; finish object_store; exit 1; }
echo "  (Swift with s3api up in $(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)") s on $MT_S3_ENDPOINT)"
check "botocore creates the bucket" $S3 mb $BK

# ---- the reference: 20 steps, never stopped, no object store ------------------------------------
train --run-dir "$TMP/A" > "$TMP/A.log" 2>&1 || bad "reference run failed: $(tail -2 "$TMP/A.log")"

# ---- bad input: one clear line, exit 2, before any step --------------------------------------------
ONE_ERROR_LINE=1 expect_exit 2 "a missing bucket: one clear line" train --run-dir "$TMP/X1" --ckpt_object s3://nosuchbucket/p
grep -q "NoSuchBucket" "$TMP/err" && ok "... naming NoSuchBucket" || bad "missing bucket: $(cat "$TMP/err")"
[ ! -d "$TMP/X1/ckpt/step_00000005" ] && ok "... and no step trained" || bad "missing bucket: it trained"
AWS_SECRET_ACCESS_KEY=wrong ONE_ERROR_LINE=1 expect_exit 2 "wrong credentials: one clear line" \
  train --run-dir "$TMP/X2" --ckpt_object s3://$BK/x2
grep -q "SignatureDoesNotMatch\|InvalidAccessKeyId\|credentials" "$TMP/err" && ok "... naming the signature" || bad "wrong key: $(cat "$TMP/err")"
ONE_ERROR_LINE=1 expect_exit 2 "ckpt_object not s3://bucket/prefix: one clear line" train --run-dir "$TMP/X3" --ckpt_object /tmp/x

# ---- archive, wipe tiers 0-2, resume from tier 3 ---------------------------------------------------
train --run-dir "$TMP/B" --ckpt_object s3://$BK/B --keep_object 2 --ckpt_durable "$TMP/Bdur" --stop-after 10 \
  > "$TMP/B1.log" 2>&1 || bad "B (stop after 10) failed: $(tail -2 "$TMP/B1.log")"
check "step 10 archived (log)" grep -q "tier 3: step 10 archived" "$TMP/B1.log"
check "objects.json of step 10: every object's size and SHA-256 are the local step's" \
  $S3 verify $BK B 10 "$TMP/B/ckpt/step_00000010"
[ "$($S3 get $BK B/latest)" = 10 ] && ok "latest names step 10" || bad "latest: $($S3 get $BK B/latest)"
[ "$(sql "$TMP/B" "SELECT state FROM checkpoints WHERE tier = 3 AND step = 10")" = archived ] \
  && ok "run.db: tier 3, step 10, state archived" || bad "run.db tier 3: $(sql "$TMP/B" "SELECT * FROM checkpoints WHERE tier = 3")"
$MT ckpt ls --run "$TMP/B" > "$TMP/ls1.txt"
grep -qE "^3 +10 +archived .*s3://$BK/B/step_00000010" "$TMP/ls1.txt" && ok "ckpt ls: tier 3 step 10 archived" \
  || bad "ckpt ls: $(cat "$TMP/ls1.txt")"
rm -rf "$TMP/B/ckpt" "$TMP/Bdur" "$TMP/shm"
train --run-dir "$TMP/B" --ckpt_object s3://$BK/B --keep_object 2 --ckpt_durable "$TMP/Bdur" \
  > "$TMP/B2.log" 2>&1 || bad "B resume failed: $(tail -2 "$TMP/B2.log")"
check "tiers 0-2 empty: --resume auto fetches step 10 from tier 3" grep -q "resumed from step 10 (tier 3" "$TMP/B2.log"
check "... losses bit for bit those of the unstopped run" diff <(losses "$TMP/A") <(losses "$TMP/B")
check "... final parameters bit for bit" same_params "$TMP/A" "$TMP/B"
m=$(manifests B)
[ "$(echo $m | wc -w)" = 2 ] && [ "$(echo $m | awk '{print $NF}')" = 20 ] \
  && ok "keep_object 2: the two newest manifests left ($m)" || bad "keep_object 2: manifests $m"
check "... no object of a removed step left, latest has its manifest" $S3 orphans $BK B
cat_arch=$(sql "$TMP/B" "SELECT step FROM checkpoints WHERE tier = 3 AND state = 'archived' ORDER BY step" | tr '\n' ' ')
[ "$cat_arch" = "$m" ] && ok "run.db's archived tier-3 rows are the bucket's manifests ($cat_arch)" || bad "catalog '$cat_arch' vs bucket '$m'"
[ "$(sql "$TMP/B" "SELECT COUNT(*) FROM checkpoints WHERE tier = 3 AND state = 'deleted'")" -ge 1 ] \
  && ok "run.db: retention's tier-3 rows 'deleted'" || bad "no deleted tier-3 rows"

# ---- a flipped byte in an archived object -------------------------------------------------------
train --run-dir "$TMP/C" --ckpt_object s3://$BK/C --stop-after 10 > "$TMP/C1.log" 2>&1 || bad "C failed"
SHARD=C/step_00000010/model-tp00-pp00.safetensors
check "botocore flips byte 4000 of step 10's model shard" $S3 flip $BK $SHARD 4000
rm -rf "$TMP/C/ckpt" "$TMP/shm"
rc=0; train --run-dir "$TMP/C" --ckpt_object s3://$BK/C > "$TMP/C2.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && ok "resume from the flipped step fails (exit $rc)" || bad "flipped step: resume exit 0"
check "... refused by SHA-256 and fetched once more" grep -q "SHA-256.*refused, fetching it again" "$TMP/C2.log"
check "... then a loud failure naming the object" grep -q "error:.*corrupt in the object store.*model-tp00-pp00" "$TMP/C2.log"
! grep -q "resumed from" "$TMP/C2.log" && [ ! -e "$TMP/C/ckpt/step_00000010" ] \
  && ok "... not loaded, nothing under step_00000010" || bad "flipped step was loaded or left as step_00000010"
check "botocore flips the byte back" $S3 flip $BK $SHARD 4000
train --run-dir "$TMP/C" --ckpt_object s3://$BK/C > "$TMP/C3.log" 2>&1 || bad "C resume after repair failed: $(tail -2 "$TMP/C3.log")"
grep -q "resumed from step 10 (tier 3" "$TMP/C3.log" && same_params "$TMP/A" "$TMP/C" \
  && ok "byte restored: the same resume loads step 10, parameters bit for bit" || bad "repaired resume"

# ---- a dataset in the object store, streamed through a cache of 25% of its size -------------------
head -c 400000 examples/data/tinyshakespeare.txt > "$TMP/ds.txt"
$MT prepare --input "$TMP/ds.txt" --out "$TMP/dsl" --shard-tokens 20000 --val-fraction 0.05 > /dev/null || bad "local prepare"
$MT prepare --input "$TMP/ds.txt" --out s3://$BK/ds --shard-tokens 20000 --val-fraction 0.05 > "$TMP/prep.log" 2>&1 \
  && ok "prepare --out s3://: uploaded" || bad "prepare --out s3://: $(tail -2 "$TMP/prep.log")"
$S3 get $BK ds/index.json > "$TMP/index.json"
$PY - "$TMP/index.json" "$TMP/dsl" <<'PYEOF' && ok "index.json: every shard's tokens and SHA-256 are the local prepare's ($(ls "$TMP/dsl" | grep -c bin) shards)" || bad "index.json vs local"
import hashlib, json, os, struct, sys
idx = json.load(open(sys.argv[1])); d = sys.argv[2]
names = sorted(f for f in os.listdir(d) if f.endswith(".bin") and "_" in f)
assert [s["name"] for s in idx["shards"]] == names, (names, idx["shards"])
for s in idx["shards"]:
    b = open(os.path.join(d, s["name"]), "rb").read()
    assert s["sha256"] == hashlib.sha256(b).hexdigest() and s["bytes"] == len(b), s
    assert s["tokens"] == struct.unpack("<3i", b[:12])[2], s
PYEOF
total=$(du -cb "$TMP"/dsl/*_*.bin | tail -1 | cut -f1)
limit=$(echo "$total / 4 / 1000000" | bc -l)
train --run-dir "$TMP/L" --data "$TMP/dsl" > "$TMP/L.log" 2>&1 || bad "local-data run: $(tail -2 "$TMP/L.log")"
train --run-dir "$TMP/S" --data s3://$BK/ds --cache_limit "$limit" --prefetch 2 > "$TMP/S.log" 2>&1 \
  || bad "s3-data run: $(tail -2 "$TMP/S.log")"
check "train --data s3:// with cache_limit 25% of the data: losses bit for bit those on the local files" \
  diff <(losses "$TMP/L") <(losses "$TMP/S")
check "... final parameters bit for bit" same_params "$TMP/L" "$TMP/S"
$PY -c "
import re, sys
m = re.search(r'data cache: (\d+) shard fetches.* (\d+) evicted.*largest ([0-9.]+) MB', open(sys.argv[1]).read())
f, e, mx = int(m.group(1)), int(m.group(2)), float(m.group(3))
print('  (cache: %d fetches, %d evicted, largest %.3f MB of limit %.3f MB, data %.3f MB)' % (f, e, mx, float(sys.argv[2]), float(sys.argv[3]) / 1e6))
sys.exit(0 if e > 0 and mx <= float(sys.argv[2]) + 1e-9 else 1)" "$TMP/S.log" "$limit" "$total" \
  && ok "... the cache stayed within cache_limit and evicted" || bad "cache: $(grep 'data cache' "$TMP/S.log")"
[ -z "$(ls "$TMP/S/data_cache" 2>/dev/null | grep -v tokenizer)" ] && ok "... and is emptied at the end" || bad "cache left: $(ls "$TMP/S/data_cache")"
ONE_ERROR_LINE=1 expect_exit 2 "cache_limit below prefetch + 2 shards: one clear line" \
  train --run-dir "$TMP/S2" --data s3://$BK/ds --cache_limit 0.1 --prefetch 2
check "botocore flips a byte of shard train_003.bin" $S3 flip $BK ds/train_003.bin 2000
rc=0; train --run-dir "$TMP/S3" --data s3://$BK/ds --cache_limit "$limit" > "$TMP/S3.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "dataset.*train_003.bin.*refused, fetching it again" "$TMP/S3.log" \
  && grep -q "error:.*train_003.bin.*corrupt in the object store" "$TMP/S3.log" \
  && ok "a flipped shard: refused by SHA-256, fetched again, then a loud failure (exit $rc)" \
  || bad "flipped shard: exit $rc: $(grep -m2 'train_003\|error' "$TMP/S3.log")"
$S3 flip $BK ds/train_003.bin 2000 || bad "flip back"


# ---- the proxy killed in the middle of an upload --------------------------------------------------
train_big --run-dir "$TMP/A2" > "$TMP/A2.log" 2>&1 || bad "big reference run failed: $(tail -2 "$TMP/A2.log")"
train_big --run-dir "$TMP/D" --ckpt_object s3://$BK/D --s3_max_mb_s 8 --stop-after 10 > "$TMP/D1.log" 2>&1 &
PID_D=$!; PIDS+=("$PID_D")
if wait_line "$TMP/D1.log" "checkpoint step 5 committed" 60; then
  sleep 1; swift_stop_proxy; sleep 1; swift_start_proxy || bad "proxy restart"
else bad "D never committed step 5"; fi
rc=0; wait "$PID_D" || rc=$?
[ "$rc" = 0 ] && ok "proxy killed mid-upload: training finishes (exit 0)" || bad "D exit $rc: $(tail -2 "$TMP/D1.log")"
m=$(manifests D)
all=1; for s in $m; do $S3 verify $BK D "$s" >/dev/null || { all=0; bad "D step $s: $($S3 verify $BK D "$s" 2>&1)"; }; done
[ "$all" = 1 ] && ok "every manifest in the bucket verifies (steps $m)"
if echo " $m " | grep -q " 5 "; then ok "... step 5 was retried and archived"
else grep -q "step 5 not archived" "$TMP/D1.log" && ok "... step 5 not archived, said so" || bad "step 5 neither archived nor warned"; fi
echo " $m " | grep -q " 10 " && ok "... step 10 archived after the restart" || bad "step 10 not archived: $(grep 'tier 3' "$TMP/D1.log")"
check "... no orphan objects" $S3 orphans $BK D
[ -z "$(sql "$TMP/D" "SELECT step FROM checkpoints WHERE tier = 3 AND state = 'archived' AND step NOT IN ($(echo $m | tr ' ' ','))")" ] \
  && ok "... the catalog claims no step the bucket lacks" || bad "catalog claims more than the bucket"

# ---- the proxy killed in the middle of a download -------------------------------------------------
rm -rf "$TMP/D/ckpt" "$TMP/shm"
train_big --run-dir "$TMP/D" --ckpt_object s3://$BK/D --s3_get_mb_s 8 > "$TMP/D2.log" 2>&1 &
PID_D=$!; PIDS+=("$PID_D")
if wait_line "$TMP/D2.log" "fetching step 10 from tier 3" 60; then
  sleep 1.5; swift_stop_proxy
else bad "D2 never started fetching"; fi
rc=0; wait "$PID_D" || rc=$?
swift_start_proxy || bad "proxy restart"
[ "$rc" != 0 ] && grep -q "error:.*tier 3: step 10.*no answer" "$TMP/D2.log" \
  && ok "proxy killed mid-download: a clear failure (exit $rc)" || bad "D2 exit $rc: $(tail -2 "$TMP/D2.log")"
[ ! -e "$TMP/D/ckpt/step_00000010" ] && [ -d "$TMP/D/ckpt/step_00000010.fetch" ] \
  && ok "... nothing under step_00000010, the partial fetch kept aside" || bad "D2 left $(ls "$TMP/D/ckpt")"
train_big --run-dir "$TMP/D" --ckpt_object s3://$BK/D > "$TMP/D3.log" 2>&1 || bad "D3 failed: $(tail -2 "$TMP/D3.log")"
check "the next resume keeps what was fetched and verified" grep -q "fetch resumed, [1-9][0-9]* of [0-9]* objects already here" "$TMP/D3.log"
grep -q "resumed from step 10 (tier 3" "$TMP/D3.log" && same_params "$TMP/A2" "$TMP/D" \
  && ok "... and ends bit for bit equal to the unstopped run" || bad "D3 resume"
grep -h "fetch resumed\|archived .* MB in" "$TMP"/D*.log | sed 's/^/  (/;s/$/)/' | head -4

finish object_store
