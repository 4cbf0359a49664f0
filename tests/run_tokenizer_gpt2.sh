#!/usr/bin/env bash
# tests/run_tokenizer_gpt2.sh — GPT-2's tokenizer in minitrain against js-tiktoken (issue #19).
#
# The reference is the npm registry's js-tiktoken (getEncoding("gpt2"): pure JavaScript, MIT,
# ranks bundled), installed into build/node and run with the machine's Node.js
# (tests/reference/tiktoken_ref.mjs). It writes GPT-2's ranks as a tiktoken rank file (so no copy
# of the ranks is committed), the corpus (Shakespeare, Chinese, emoji, whitespace runs, digits,
# contractions, mixed scripts, random code points of every plane) and its ids for each file.
# tests/reference/gpt2_tokenizer_files.py writes the same tokenizer as Hugging Face and llm.c
# files. Checks:
#   - ids identical to js-tiktoken on every corpus file; decode(encode(x)) == x on the corpus and
#     on 3000 random byte strings (invalid UTF-8 included, which JavaScript strings cannot hold)
#   - the regex's character classes (PCRE2 vs JavaScript) on all 1,112,064 code points: they may
#     differ only where one engine's Unicode tables are older, or in \s at U+0085/U+180E/U+FEFF
#   - tokenizer.json (string and pair merges), vocab.json + merges.txt (either named, or their
#     directory) and prepare's tokenizer.bin give the same ids; llm.c's gpt2_tokenizer.bin the
#     same decode table
#   - prepare --tokenizer RANKS --doc-separator '\n\n' on Shakespeare = llm.c's
#     dev/data/tinyshakespeare.py stream computed with js-tiktoken (338,028 tokens)
#   - a tokenizer file of another kind, or broken: one clear line, exit 2
# About 20 s.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/interop_lib.sh
interop_setup mt_tokgpt2
SHAK=examples/data/tinyshakespeare.txt
node tests/reference/tiktoken_ref.mjs corpus "$SHAK" "$TMP/corpus" >/dev/null
node tests/reference/tiktoken_ref.mjs classes "$TMP/classes.bin" >/dev/null
$PY tests/reference/gpt2_tokenizer_files.py "$RANKS" "$TMP/hf" >/dev/null

echo "-- ids vs js-tiktoken"
check "tiktoken rank file: ids identical to js-tiktoken on the corpus" "$DRV" tok-parity "$RANKS" "$TMP/corpus"
check "decode(encode(x)) == x for random byte strings" "$DRV" roundtrip "$RANKS" 3000
check "regex classes: PCRE2 vs JavaScript on every code point" "$DRV" classes "$TMP/classes.bin"

echo "-- the same tokenizer from every format"
for f in hf/tokenizer.json hf/tokenizer_pairs.json hf/vocab.json hf/merges.txt hf; do
  check "Hugging Face $f encodes like the rank file" "$DRV" same-ids "$RANKS" "$TMP/$f" "$TMP/corpus"
done
check "llm.c gpt2_tokenizer.bin: the same decode table and <|endoftext|>" "$DRV" same-ids "$RANKS" "$TMP/hf/gpt2_tokenizer.bin" "$TMP/corpus"

echo "-- prepare with the GPT-2 encoder"
$MT prepare --input "$SHAK" --out "$TMP/shak" --tokenizer "$RANKS" --doc-separator '\n\n' >"$TMP/prep.log"
check "prepare's tokenizer.bin (version 2) encodes like the rank file" "$DRV" same-ids "$RANKS" "$TMP/shak/tokenizer.bin" "$TMP/corpus"
node tests/reference/tiktoken_ref.mjs llmc-shakespeare "$SHAK" "$TMP/llmc.ids" >/dev/null
check "prepare --doc-separator '\\n\\n' = llm.c's tinyshakespeare.py token stream" $PY - "$TMP/shak" "$TMP/llmc.ids" <<'PY'
import sys, numpy as np
d, ref = sys.argv[1], np.loadtxt(sys.argv[2], dtype=np.int64)
def shard(p):
    return np.fromfile(p, dtype=np.int32, count=3), np.fromfile(p, dtype=np.uint16)[512:]
(ht, t), (hv, v) = shard(d + "/train_000.bin"), shard(d + "/val_000.bin")
assert ht[0] == 20240520 and ht[1] == 1 and ht[2] == len(t) and hv[2] == len(v), (ht, hv)
ours = np.concatenate([t, v]).astype(np.int64)
assert len(ours) == len(ref) and (ours == ref).all(), (len(ours), len(ref))
print(f"{len(ours)} tokens identical (uint16 shards, version 1)")
PY
for f in tokenizer.json vocab.json; do
  $MT prepare --input "$TMP/corpus/01_chinese.txt" --out "$TMP/p_$f" --tokenizer "$TMP/hf/$f" --val-fraction 0.5 >/dev/null
done
check "prepare with tokenizer.json and vocab.json writes the same shards" cmp "$TMP/p_tokenizer.json/train_000.bin" "$TMP/p_vocab.json/train_000.bin"

echo "-- bad tokenizer files: one line, exit 2"
printf 'hello world\nthis is text\n' > "$TMP/text.txt"
head -c 3000 /dev/urandom > "$TMP/garbage.bin"
printf '{"a": [1, 2]}' > "$TMP/other.json"
printf '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}, "pre_tokenizer": {"type": "Metaspace"}}' > "$TMP/unigram.json"
mkdir -p "$TMP/lonely"; cp "$TMP/hf/vocab.json" "$TMP/lonely/"
head -c 5000 "$TMP/hf/gpt2_tokenizer.bin" > "$TMP/llmc_trunc.bin"
head -c 2000 "$RANKS" > "$TMP/ranks_cut.tiktoken"; printf 'not base64 !!\n' >> "$TMP/ranks_cut.tiktoken"
$PY - "$TMP" <<'PY'
import struct, sys
d = sys.argv[1]
h = [0] * 256; h[:8] = [20240326, 3, 8, 10, 1, 1, 4, 128]
open(d + "/model.bin", "wb").write(struct.pack("<256i", *h))
h = [0] * 256; h[:3] = [20240520, 1, 4]
open(d + "/shard.bin", "wb").write(struct.pack("<256i", *h) + struct.pack("<4H", 1, 2, 3, 4))
j = b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
open(d + "/weights.safetensors", "wb").write(struct.pack("<Q", len(j)) + j + b"\0\0\0\0")
PY
inp=$TMP/corpus/04_digits.txt
expect_fail "an llm.c model file"      $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/model.bin"
expect_fail "a token shard"            $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/shard.bin"
expect_fail "a safetensors file"       $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/weights.safetensors"
expect_fail "plain text"               $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/text.txt"
expect_fail "random bytes"             $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/garbage.bin"
expect_fail "JSON that is no tokenizer" $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/other.json"
expect_fail "a Unigram tokenizer.json" $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/unigram.json"
expect_fail "vocab.json without merges.txt" $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/lonely/vocab.json"
expect_fail "a truncated llm.c tokenizer" $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/llmc_trunc.bin"
expect_fail "a rank file with a bad line" $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/ranks_cut.tiktoken"
expect_fail "llm.c's tokenizer cannot encode" $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/hf/gpt2_tokenizer.bin"
expect_fail "a missing tokenizer file" $MT prepare --input "$inp" --out "$TMP/x" --tokenizer "$TMP/nope.json"
expect_fail "--doc-separator without <|endoftext|>" $MT prepare --input "$inp" --out "$TMP/x" --doc-separator '\n'
finish "tokenizer gpt2"
