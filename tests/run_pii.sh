#!/usr/bin/env bash
# tests/run_pii.sh — `minitrain scrub` and `prepare --scrub-pii` end to end: the CJK examples
# through the CLI, the three modes, keyed hashes stable across runs and keys, the counts-only
# report, user errors (one line, exit 2), and malformed input streamed in bounded memory: a 2 GiB
# sparse file with PII planted around the 1 GiB and 2 GiB marks, a 100 MB line without a newline
# (piped, never on disk), random bytes with NULs and invalid UTF-8. Peak memory is measured with
# /usr/bin/time. Then prepare --scrub-pii with BPE: the shards decode (Python, from the format in
# docs/tokenizer.md) to text with placeholders and no PII, each placeholder one token.
# Runs from the repository root in well under a minute.
set -euo pipefail
MT=${MT:-./minitrain}
. tests/lib.sh
tmp_dir mt_pii
ONE_ERROR_LINE=1 # expect_exit 2: exactly one "minitrain: error:" line
# json FILE EXPR: evaluate a Python expression on the parsed JSON object j
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# peak_kb CMD...: run CMD, print its peak resident set in KiB (stdout of CMD is discarded)
peak_kb() { /usr/bin/time -f "%M" -o "$TMP/time" "$@" >/dev/null 2>"$TMP/err.time" && cat "$TMP/time"; }

# --- the CLI on known text --------------------------------------------------------------------
printf '手机13812345678号\n卡号4111111111111111谢谢\nmail john@example.com now\nplain line\n' > "$TMP/a.txt"
$MT scrub --input "$TMP/a.txt" --out "$TMP/a.out" --report "$TMP/a.json" --quiet
want=$'手机<PHONE>号\n卡号<CARD>谢谢\nmail <EMAIL> now\nplain line'
[ "$(cat "$TMP/a.out")" = "$want" ] && ok "mask: CJK neighbours and an email" || bad "mask output: $(cat "$TMP/a.out")"
[ "$(json "$TMP/a.json" 'j["counts"]["phone"], j["counts"]["card"], j["counts"]["email"], j["total"]')" = "1 1 1 3" ] \
  && ok "report counts per type" || bad "report counts: $(cat "$TMP/a.json")"
! grep -q -e 13812345678 -e 4111 -e john "$TMP/a.json" && ok "report holds no matched text" || bad "report leaks text"
[ ! -e "$TMP/a.out.tmp" ] && ok "no .tmp left behind" || bad ".tmp left"

$MT scrub --input "$TMP/a.txt" --out "$TMP/d.out" --mode drop-line --quiet
[ "$(cat "$TMP/d.out")" = "plain line" ] && ok "drop-line keeps only the clean line" || bad "drop-line: $(cat "$TMP/d.out")"
$MT scrub --input - --out - --types email --quiet < "$TMP/a.txt" > "$TMP/e.out"
grep -q '13812345678' "$TMP/e.out" && grep -q '<EMAIL>' "$TMP/e.out" && ok "--types email, stdin to stdout" \
  || bad "--types/stdin: $(cat "$TMP/e.out")"

head -c 32 /dev/urandom > "$TMP/key1"; head -c 32 /dev/urandom > "$TMP/key2"
$MT scrub --input "$TMP/a.txt" --out "$TMP/h1" --mode hash --hash-key-file "$TMP/key1" --quiet
$MT scrub --input "$TMP/a.txt" --out "$TMP/h2" --mode hash --hash-key-file "$TMP/key1" --quiet
$MT scrub --input "$TMP/a.txt" --out "$TMP/h3" --mode hash --hash-key-file "$TMP/key2" --quiet
grep -qE '<EMAIL:[0-9a-f]{8}>' "$TMP/h1" && cmp -s "$TMP/h1" "$TMP/h2" && ! cmp -s "$TMP/h1" "$TMP/h3" \
  && ok "hash: <EMAIL:8hex>, same key same tokens, other key other tokens" || bad "hash mode"

# --- user errors ------------------------------------------------------------------------------
expect_exit 2 "missing --out" $MT scrub --input "$TMP/a.txt"
expect_exit 2 "bad --mode" $MT scrub --input "$TMP/a.txt" --out "$TMP/x" --mode blur
expect_exit 2 "bad --types" $MT scrub --input "$TMP/a.txt" --out "$TMP/x" --types email,dna
expect_exit 2 "hash without a key" $MT scrub --input "$TMP/a.txt" --out "$TMP/x" --mode hash
: > "$TMP/empty"
expect_exit 2 "empty key file" $MT scrub --input "$TMP/a.txt" --out "$TMP/x" --mode hash --hash-key-file "$TMP/empty"
expect_exit 2 "missing input" $MT scrub --input "$TMP/nope" --out "$TMP/x"
expect_exit 2 "--out is --input" $MT scrub --input "$TMP/a.txt" --out "$TMP/a.txt"
expect_exit 2 "prepare: bad --scrub-pii mode" $MT prepare --input "$TMP/a.txt" --out "$TMP/p" --scrub-pii blur
expect_exit 2 "prepare: --pii-types without --scrub-pii" $MT prepare --input "$TMP/a.txt" --out "$TMP/p" --pii-types email

# --- a 2 GiB file (sparse: NUL bytes) with PII at the 1 GiB and 2 GiB marks -------------------
G=$((1 << 30))
truncate -s $((2 * G + 4096)) "$TMP/big"
plant() { printf '%s' "$2" | dd of="$TMP/big" bs=1 seek="$1" conv=notrunc status=none; }
plant $((G - 7)) " 4111 1111 1111 1111 "        # a card across the 1 GiB mark
plant $((2 * G - 9)) " john.doe@example.com "    # an email across the 2 GiB mark
plant $((2 * G + 100)) " +86 138 1234 5678 "     # a phone past it
kb=$(peak_kb $MT scrub --input "$TMP/big" --out /dev/null --report "$TMP/big.json" --quiet) || bad "2 GiB scrub failed: $(cat "$TMP/err.time")"
got=$(json "$TMP/big.json" 'j["counts"]["card"], j["counts"]["email"], j["counts"]["phone"], j["bytes_in"], j["bytes_in"] - j["bytes_out"]')
want_delta=$(( (19 - 6) + (20 - 7) + (17 - 7) ))
[ "$got" = "1 1 1 $((2 * G + 4096)) $want_delta" ] && ok "2 GiB sparse file: the 3 planted values found, sizes add up" \
  || bad "2 GiB file: got '$got'"
[ "${kb:-999999}" -lt 65536 ] && ok "2 GiB file in ${kb} KiB peak RSS (< 64 MiB)" || bad "2 GiB file peak RSS ${kb:-?} KiB"

# --- a 100 MB line without a newline, piped ---------------------------------------------------
gen_line() { python3 - <<'PY'
import sys
w = sys.stdout.buffer
chunk = (b"lorem ipsum dolor sit amet " * 40000)[:1000000]
for i in range(100):
    w.write(chunk)
    if i % 10 == 5:
        w.write(b" ping 10.0.%d.1 or mail x%d@example.org " % (i, i))
PY
}
gen_line | /usr/bin/time -f "%M" -o "$TMP/time" $MT scrub --input - --out - --quiet --report "$TMP/line.json" \
  > /dev/null || bad "100 MB line scrub failed"
kb=$(cat "$TMP/time")
n_line=$(gen_line | wc -c)
[ "$(json "$TMP/line.json" 'j["counts"]["ipv4"], j["counts"]["email"], j["bytes_in"]')" = "10 10 $n_line" ] \
  && ok "100 MB line: 10 IPs and 10 emails found" || bad "100 MB line: $(cat "$TMP/line.json")"
[ "${kb:-999999}" -lt 65536 ] && ok "100 MB line in ${kb} KiB peak RSS (< 64 MiB)" || bad "100 MB line peak RSS ${kb:-?} KiB"
gen_line | $MT scrub --input - --out - --mode drop-line --quiet --report "$TMP/line2.json" | wc -c > "$TMP/line2.n"
[ "$(json "$TMP/line2.json" 'j["lines_dropped"], j["long_lines_masked"]')" = "0 1" ] && [ "$(cat "$TMP/line2.n")" -gt 99000000 ] \
  && ok "drop-line on an over-long line: written, its matches masked and counted" || bad "drop-line long line: $(cat "$TMP/line2.json")"

# --- random bytes: NULs, invalid UTF-8 --------------------------------------------------------
head -c 5000000 /dev/urandom > "$TMP/rand"
for m in mask drop-line; do
  $MT scrub --input "$TMP/rand" --out "$TMP/rand.out" --mode $m --quiet --report "$TMP/rand.json" \
    && [ "$(json "$TMP/rand.json" 'j["bytes_in"]')" = 5000000 ] && ok "random bytes, $m" || bad "random bytes, $m"
done

# --- prepare --scrub-pii with a BPE tokenizer -------------------------------------------------
python3 tests/pii_corpus.py --out "$TMP/corpus" --seed 5 --per-type 60 --negatives 300 > /dev/null
$MT prepare --input "$TMP/corpus/corpus.txt" --out "$TMP/prep" --tokenizer bpe --vocab-size 512 \
  --scrub-pii >"$TMP/prep.log" 2>&1 || bad "prepare --scrub-pii: $(tail -3 "$TMP/prep.log")"
[ "$(json "$TMP/prep/pii_report.json" 'j["mode"], j["total"] >= 540')" = "mask True" ] \
  && ok "prepare --scrub-pii writes pii_report.json beside the shards" || bad "prepare report"
python3 - "$TMP/prep" "$TMP/corpus/corpus.txt" <<'PY' && ok "shards decode to scrubbed text; every placeholder is one token" || bad "prepare --scrub-pii shards"
import struct, sys, re
d, src = sys.argv[1], open(sys.argv[2], "rb").read()
b = open(d + "/tokenizer.bin", "rb").read()
magic, ver, kind, V, nm, maxc, csum, _ = struct.unpack_from("<8I", b, 0)
vocab = {i: bytes([i]) for i in range(256)}
for r in range(nm):
    a, c = struct.unpack_from("<2I", b, 32 + 8 * r)
    vocab[256 + r] = vocab[a] + vocab[c]
ids = []
for split in ("train", "val"):
    s = open("%s/%s_000.bin" % (d, split), "rb").read()
    n = struct.unpack_from("<i", s, 8)[0]
    ids += list(struct.unpack_from("<%dH" % n, s, 1024))
text = b"".join(vocab[i] for i in ids)
assert b"<EMAIL>" in text and b"<CARD>" in text and b"<CNID>" in text
assert b"@example.com" not in text and b"-----BEGIN" not in text
whole = set(vocab[i] for i in ids if vocab[i].startswith(b"<") and vocab[i].endswith(b">"))
tags = set(re.findall(rb"<[A-Z0-9]+>", text))
assert tags <= whole, (tags - whole)
PY

finish run_pii
