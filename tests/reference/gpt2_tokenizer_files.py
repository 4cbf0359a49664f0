#!/usr/bin/python3
"""tests/reference/gpt2_tokenizer_files.py — GPT-2's tokenizer in the other ecosystems' files.

From a tiktoken rank file (written from js-tiktoken's bundled ranks by tiktoken_ref.mjs), writes
into OUT_DIR the files a user of those ecosystems has, built the way those projects build them:
  vocab.json + merges.txt    Hugging Face / OpenAI GPT-2 (encoder.json + vocab.bpe): token strings
                             in GPT-2's bytes_to_unicode() alphabet; merges recovered from the
                             ranks as tiktoken's converters do (BPE the token's bytes with the
                             lower ranks only: exactly two parts remain, the merge)
  tokenizer.json             Hugging Face tokenizers: BPE model + ByteLevel pre-tokenizer, merges
                             as "left right" strings; tokenizer_pairs.json the same with merges as
                             [left, right] arrays (tokenizers >= 0.20)
  gpt2_tokenizer.bin         llm.c's train_gpt2.py write_tokenizer(): 256 x uint32 header
                             (20240328, version 2, vocab size, eot id), then per id a uint8 length
                             and the bytes
Run with Debian's interpreter: /usr/bin/python3 gpt2_tokenizer_files.py RANKS OUT_DIR
"""
import base64
import json
import os
import struct
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def bpe(ranks, token, max_rank):
    parts = [bytes([b]) for b in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return parts
        i = best[1]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def main():
    ranks_path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    ranks = {}
    for line in open(ranks_path, "rb"):
        if line.strip():
            tok, r = line.split()
            ranks[base64.b64decode(tok)] = int(r)
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    eot = len(by_rank)
    b2u = bytes_to_unicode()
    s = lambda b: "".join(b2u[x] for x in b)
    vocab = {s(tok): r for tok, r in by_rank}
    vocab["<|endoftext|>"] = eot
    merges = []
    for tok, r in by_rank:
        if len(tok) == 1:
            continue
        parts = bpe(ranks, tok, r)
        assert len(parts) == 2, (tok, parts)
        merges.append((s(parts[0]), s(parts[1])))
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    for name, form in (("tokenizer.json", lambda a, b: f"{a} {b}"),
                       ("tokenizer_pairs.json", lambda a, b: [a, b])):
        tj = {
            "version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": True,
                              "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": True, "use_regex": True},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": True,
                               "trim_offsets": False, "use_regex": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "",
                      "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": [form(a, b) for a, b in merges]},
        }
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out, "gpt2_tokenizer.bin"), "wb") as f:
        header = [0] * 256
        header[0:4] = [20240328, 2, eot + 1, eot]
        f.write(struct.pack("<256I", *header))
        for tok, _ in by_rank:
            f.write(struct.pack("<B", len(tok)) + tok)
        f.write(struct.pack("<B", 13) + b"<|endoftext|>")
    print(f"{len(by_rank)} ranks, {len(merges)} merges -> {out}")


if __name__ == "__main__":
    main()
