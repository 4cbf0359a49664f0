/*
 * train/tokenizer.h — byte-level and byte-level BPE tokenizers, one file format (tokenizer.bin).
 *
 * Token ids 0..255 are the raw bytes, so any byte string (invalid UTF-8 and NULs included)
 * encodes and decodes exactly. A BPE tokenizer adds one id per learned merge: merge r joins the
 * pair (left, right) into id 256 + r. Text is first cut into chunks (words with their leading
 * space, runs of digits, runs of punctuation, runs of whitespace; at most TOK_MAX_CHUNK bytes)
 * and merges never cross a chunk boundary — the same rule in training and encoding, so the
 * learned merges and the encoder agree. docs/tokenizer.md gives the chunk rule and the file
 * format byte by byte.
 */
#ifndef MT_TOKENIZER_H
#define MT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define TOK_KIND_BYTE 0
#define TOK_KIND_BPE 1
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
} tok_tokenizer;

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

/* Read and validate a tokenizer file (size, magic, version, kind, vocab, checksum, every merge).
 * Treats *t as uninitialized; on error *t is left empty (tok_free is safe).
 * 0 ok, -1 with a one-line message naming the file in err. */
int tok_load(tok_tokenizer *t, const char *path, char *err, size_t errlen);

int tok_vocab_size(const tok_tokenizer *t);

/* Length (1..min(n, TOK_MAX_CHUNK)) of the first chunk of bytes[0..n), n >= 1; 0 when n == 0.
 * Public so that tests and tools can reproduce the chunking rule. */
size_t tok_next_chunk(const uint8_t *bytes, size_t n);

/* Encode bytes[0..n) into out (capacity >= n ids). Returns the token count (<= n).
 * Within each chunk merges apply lowest rank first, leftmost first among equal ranks
 * (identical to GPT-2's "merge the lowest-ranked pair everywhere, repeat"). Thread-safe,
 * allocation-free, O(n log TOK_MAX_CHUNK). */
size_t tok_encode(const tok_tokenizer *t, const uint8_t *bytes, size_t n, uint32_t *out);

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
