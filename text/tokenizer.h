/*
 * text/tokenizer.h — byte-level and byte-level BPE tokenizers behind one interface: minitrain's
 * own (trained by `prepare`, one file format, tokenizer.bin) and GPT-2's published ones.
 *
 * Token ids 0..255 are the raw bytes, so any byte string (invalid UTF-8 and NULs included)
 * encodes and decodes exactly. A BPE tokenizer adds one id per learned merge: merge r joins the
 * pair (left, right) into id 256 + r. Text is first cut into chunks (words with their leading
 * space, runs of digits, runs of punctuation, runs of whitespace; at most TOK_MAX_CHUNK bytes)
 * and merges never cross a chunk boundary — the same rule in training and encoding, so the
 * learned merges and the encoder agree. docs/tokenizer.md gives the chunk rule and the file
 * format byte by byte.
 *
 * GPT-2's tokenizer (TOK_KIND_RANKED, text/tok_ranked.c) is a different shape: a table of
 * token byte strings with ranks, GPT-2's pre-tokenizer regex (run by libpcre2 with Unicode
 * properties), and tiktoken's encoder (within each regex piece, repeatedly merge the adjacent
 * pair whose concatenation has the lowest rank). It is read, by content, from a tiktoken rank
 * file, Hugging Face tokenizer.json or vocab.json + merges.txt (text/tok_formats.c), and saved
 * as version 2 of tokenizer.bin. llm.c's gpt2_tokenizer.bin holds the bytes of every id but no
 * merges or ranks: it loads as TOK_KIND_DECODE (decode only; tok_can_encode() is 0).
 * docs/interop.md says which file comes from where.
 */
#ifndef MT_TOKENIZER_H
#define MT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define TOK_KIND_BYTE 0
#define TOK_KIND_BPE 1
#define TOK_KIND_RANKED 2 /* GPT-2 / tiktoken byte-level BPE: ranked byte strings + a regex */
#define TOK_KIND_DECODE 3 /* id -> bytes only (llm.c's gpt2_tokenizer.bin): cannot encode */
#define TOK_MAX_CHUNK 256       /* longest chunk in bytes; also the longest token */
#define TOK_MAX_VOCAB (1 << 20) /* library limit; the prepare CLI allows up to 65536 */

/* A tokenizer. Callers may read the fields; only the tok_ functions write them. */
typedef struct tok_tokenizer {
    int kind;       /* TOK_KIND_BYTE or TOK_KIND_BPE */
    int vocab_size; /* 256 + n_merges */
    int n_merges;
    uint32_t *merges;   /* (n_merges, 2): merge r joins (merges[2r], merges[2r+1]) into 256+r */
    uint32_t *tok_off;  /* (vocab_size + 1): token id's bytes are tok_bytes[tok_off[id]..[id+1]) */
    uint8_t *tok_bytes; /* concatenated bytes of all tokens */
    uint64_t *rank_key; /* open-addressing map (left<<32 | right) -> rank, for encoding */
    uint32_t *rank_val;
    size_t rank_cap; /* power of two, or 0 for the byte tokenizer */
    /* TOK_KIND_RANKED / TOK_KIND_DECODE (text/tok_ranked.c); zero for the kinds above */
    uint32_t *id_rank;   /* (vocab_size) merge rank of each id; TOK_NO_RANK = not a BPE token
                          * (special tokens, ids absent from the source file) */
    uint8_t *id_special; /* (vocab_size) 1 for special tokens such as <|endoftext|> */
    uint32_t *span_ids;  /* open-addressing map: token bytes -> id (ranked ids only) */
    size_t span_cap;     /* power of two */
    uint32_t max_token_len; /* longest ranked token in bytes */
    int eot;             /* id of <|endoftext|>, or -1 */
    char *pattern;       /* the pre-tokenizer regex (PCRE2 syntax, UTF-8) */
    void *re;            /* its compiled pcre2_code (JIT when available) */
    char source[32];     /* the format it was read from, for messages ("tiktoken rank file") */
} tok_tokenizer;

#define TOK_NO_RANK UINT32_MAX

/* GPT-2's pre-tokenizer (openai/gpt-2 encoder.py; tiktoken's r50k_base/gpt2 pat_str). */
#define TOK_GPT2_PATTERN \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"


/* The byte-level tokenizer: vocab 256, id = byte value. Treats *t as uninitialized.
 * Returns 0. */
int tok_init_byte(tok_tokenizer *t);

/* Train byte-level BPE on text[0..n) until vocab_size ids exist (257..TOK_MAX_VOCAB).
 * Standard BPE: repeatedly merge the most frequent adjacent pair within chunks (counts over
 * unique chunks weighted by occurrence); ties go to the smallest (left, right). Training stops
 * early, with a warning, when no pair occurs at least twice — tok_vocab_size() then reports the
 * size reached. verbose != 0 prints progress every ~10% of merges to stderr.
 * Treats *t as uninitialized. Returns 0, or -1 if vocab_size is out of range. */
int tok_train_bpe(tok_tokenizer *t, const uint8_t *text, size_t n, int vocab_size, int verbose);

/* Write the tokenizer to path, durably and atomically (core/fs.h). 0 ok, -1 with a message in
 * err. */
int tok_save(const tok_tokenizer *t, const char *path, char *err, size_t errlen);

/* Read a tokenizer, detecting its format by content (never by file name):
 *   - minitrain's tokenizer.bin (magic "MTOK"; version 1: byte/bpe, version 2: ranked/decode),
 *     validated fully (size, magic, version, kind, vocab, checksum, every merge);
 *   - llm.c's gpt2_tokenizer.bin (magic 20240328, versions 1 and 2): TOK_KIND_DECODE;
 *   - a tiktoken rank file ("<base64 token> <rank>" per line; GPT-2's r50k ranks), with
 *     <|endoftext|> added at id max_rank + 1 as tiktoken's gpt2 encoding does;
 *   - Hugging Face GPT-2 files: tokenizer.json (BPE model, ByteLevel pre-tokenizer), or vocab.json
 *     with merges.txt beside it (either file may be named), or a directory holding them.
 * Other files (an llm.c model, a safetensors file, a token shard, text, garbage) are refused.
 * Treats *t as uninitialized; on error *t is left empty (tok_free is safe).
 * 0 ok, -1 with a one-line message naming the file in err. */
int tok_load(tok_tokenizer *t, const char *path, char *err, size_t errlen);

/* 1 if the tokenizer can encode text (every kind except TOK_KIND_DECODE). */
int tok_can_encode(const tok_tokenizer *t);

/* Id of the end-of-text token <|endoftext|>, or -1 when the tokenizer has none. */
int tok_eot(const tok_tokenizer *t);

/* A short name of the tokenizer for logs: "byte", "bpe", "gpt2 (tiktoken rank file)", ... */
const char *tok_describe(const tok_tokenizer *t, char *buf, size_t len);

int tok_vocab_size(const tok_tokenizer *t);

/* Does tokenizer t (read from path) fit a model with model_vocab embedding rows? More tokens than
 * rows is always refused (ids past the table); with exact = 1 (a tokenizer the user named for a
 * model, e.g. `serve --tokenizer`) any other size is refused too (a 265-token tokenizer for a
 * 50,257-row GPT-2 decodes nothing it generates). 0, or -1 with one line in err naming both. */
int tok_check_vocab(const tok_tokenizer *t, const char *path, int model_vocab, int exact,
                    char *err, size_t errlen);

/* Length (1..min(n, TOK_MAX_CHUNK)) of the first chunk of bytes[0..n), n >= 1; 0 when n == 0.
 * Public so that tests and tools can reproduce the chunking rule. */
size_t tok_next_chunk(const uint8_t *bytes, size_t n);

/* Encode bytes[0..n) into out (capacity >= n ids). Returns the token count (<= n).
 * Within each chunk merges apply lowest rank first, leftmost first among equal ranks
 * (identical to GPT-2's "merge the lowest-ranked pair everywhere, repeat"). Thread-safe,
 * allocation-free, O(n log TOK_MAX_CHUNK).
 * TOK_KIND_RANKED: chunks are the matches of the pre-tokenizer regex (invalid UTF-8 bytes,
 * which no regex item matches, form chunks of their own), each encoded by tiktoken's rule; text
 * that spells a special token ("<|endoftext|>") is encoded as ordinary text, like tiktoken's
 * encode_ordinary and GPT-2's encoder.py, so a prompt cannot inject one. Thread-safe; allocates
 * only for chunks over TOK_MAX_CHUNK bytes. TOK_KIND_DECODE: returns 0 (see tok_can_encode). */
size_t tok_encode(const tok_tokenizer *t, const uint8_t *bytes, size_t n, uint32_t *out);

/* Encode text[0..n) as documents: the text is cut after every occurrence of sep[0..seplen)
 * (seplen 0: one document), and each document is encoded with <|endoftext|> before it — the
 * token stream GPT-2's data pipelines and llm.c's dev/data scripts write. Without an end-of-text
 * token it is tok_encode. Returns a malloc'd array (caller frees) of *count ids. */
uint32_t *tok_encode_documents(const tok_tokenizer *t, const uint8_t *text, size_t n,
                               const uint8_t *sep, size_t seplen, size_t *count);

/* Bytes of one token (not NUL-terminated), *len set. NULL and *len = 0 for an id >= vocab. */
const uint8_t *tok_token_bytes(const tok_tokenizer *t, uint32_t id, size_t *len);

/* Decode ids[0..n) into out[0..cap). Returns the full decoded length; if that exceeds cap only
 * the first cap bytes were written. Ids >= vocab (e.g. padded model vocab) decode to nothing. */
size_t tok_decode(const tok_tokenizer *t, const uint32_t *ids, size_t n, uint8_t *out, size_t cap);

/* Free everything and zero *t. Safe on a zeroed or freed tokenizer. */
void tok_free(tok_tokenizer *t);

/* tok_train_bpe, with each of atomic[0..n_atomic) (NUL-terminated, 1..64 bytes; e.g. the PII
 * placeholders "<EMAIL>", or "<EMAIL:" for keyed-hash tokens) built by the first merges, so that
 * it encodes as one token wherever it stands as one chunk (placeholders do: see tok_next_chunk
 * and docs/tokenizer.md). Returns -1 also when vocab_size cannot hold those merges. */
int tok_train_bpe_atomic(tok_tokenizer *t, const uint8_t *text, size_t n, int vocab_size,
                         const char *const *atomic, int n_atomic, int verbose);

#endif /* MT_TOKENIZER_H */
