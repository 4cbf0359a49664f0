/*
 * tests/fuzz/fuzz_tokenizer.c — the tokenizer file (tokenizer.bin) on untrusted bytes.
 *
 * tok_load validates size, magic, version, kind, vocab, checksum and every merge; a file that
 * passes must encode and decode without reading outside its tables. The loaded tokenizer encodes
 * the input bytes themselves and decodes the ids back (decode(encode(x)) == x is asserted).
 */
#include "fuzz_util.h"

#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("tokenizer.bin", data, size);
    tok_tokenizer t;
    char err[512];
    if (tok_load(&t, path, err, sizeof(err)) != 0) {
        tok_free(&t);
        return 0;
    }
    size_t n = size < 4096 ? size : 4096;
    uint32_t *ids = malloc((n ? n : 1) * sizeof(uint32_t));
    size_t nid = tok_encode(&t, data, n, ids);
    uint8_t *back = malloc(n ? n : 1);
    size_t pos = 0;
    for (size_t i = 0; i < nid; i++) {
        size_t len;
        const uint8_t *b = tok_token_bytes(&t, ids[i], &len);
        if (b == NULL || pos + len > n) abort();
        memcpy(back + pos, b, len);
        pos += len;
    }
    if (pos != n || (n && memcmp(back, data, n) != 0)) abort(); /* round trip broke */
    free(back);
    free(ids);
    tok_free(&t);
    return 0;
}
