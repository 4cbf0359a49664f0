/*
 * tests/fuzz/fuzz_completion.c — the JSON body of POST /v1/completions.
 *
 * The body comes straight from the network. api_parse_completion must answer every input with a
 * request or an OpenAI-shaped error (400/404), whatever the bytes: invalid UTF-8, deep nesting,
 * wrong types, huge numbers, token ids out of range. Byte-level tokenizer, a 64-token context.
 */
#include "fuzz_util.h"

#include "serve/api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tok_tokenizer tok;
    static int ready;
    if (!ready) {
        tok_init_byte(&tok);
        ready = 1;
    }
    api_model_info mi = {.tok = &tok, .n_vocab = 256, .ctx = 64, .model_name = "tiny"};
    api_request req;
    api_error e;
    if (api_parse_completion((const char *)data, size, &mi, &req, &e) == 0) {
        if (req.n_prompt < 1 || req.n_prompt >= mi.ctx || req.max_tokens < 1 ||
            req.n_prompt + req.max_tokens > mi.ctx)
            abort(); /* the parser's own contract */
        api_request_free(&req);
    } else {
        api_buf b = {0};
        api_error_json(&b, &e);
        api_buf_free(&b);
    }
    return 0;
}
