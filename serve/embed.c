/*
 * serve/embed.c — POST /v1/embeddings: OpenAI's embeddings API on the served GPT.
 *
 * An input's embedding is the mean over its tokens of the last hidden states (the final
 * LayerNorm's output, what the LM head reads), L2-normalised — mean pooling, the usual sentence
 * embedding of a decoder-only model when it was not trained for embeddings (Sentence-BERT,
 * Reimers & Gurevych 2019, §3, found mean pooling the best of the simple poolings). A causal
 * model's hidden state at token t has seen tokens 0..t only, so the mean gives the early tokens
 * more weight than the last state alone would; that is the known price of pooling a decoder.
 *
 * Request (https://platform.openai.com/docs/api-reference/embeddings/create): model, input (a
 * string, an array of strings, an array of token ids, or an array of such arrays),
 * encoding_format "float" (default) or "base64" (the little-endian float32 bytes, base64, as the
 * npm and Python clients decode them), user (ignored). dimensions is refused: this model's width
 * is fixed. Every input must be 1..seq_len tokens. The tokens are run through the KV-cache decode
 * (model/decode.c), one state the caller keeps and serialises.
 */
#include "serve/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

/* One input's token ids into ids (capacity cap): the count, or -1 with *e. */
static int input_tokens(const cJSON *it, const api_model_info *mi, int index, uint32_t *ids,
                        int cap, api_error *e) {
    const tok_tokenizer *tok = mi->tok;
    if (cJSON_IsString(it)) {
        const uint8_t *b = (const uint8_t *)it->valuestring;
        size_t n = strlen(it->valuestring);
        if (n == 0)
            return api_fail(e, 400, "invalid_request_error", "input", "invalid_value",
                            "input[%d] is empty", index);
        if (!tok_can_encode(tok))
            return api_fail(e, 400, "invalid_request_error", "input", "invalid_value",
                            "this model's tokenizer cannot encode text: send token ids");
        if (n > (size_t)cap * 16)
            return api_fail(e, 400, "invalid_request_error", "input", "context_length_exceeded",
                            "input[%d] is longer than this model's context of %d tokens", index,
                            mi->ctx);
        uint32_t *tmp = mallocCheck(n * sizeof(uint32_t));
        size_t k = tok_encode(tok, b, n, tmp);
        int over = k > (size_t)cap;
        if (!over) memcpy(ids, tmp, k * sizeof(uint32_t));
        free(tmp);
        if (over)
            return api_fail(e, 400, "invalid_request_error", "input", "context_length_exceeded",
                            "input[%d] is %zu tokens, over this model's context of %d", index, k,
                            mi->ctx);
        return (int)k;
    }
    int n = cJSON_GetArraySize(it), k = 0;
    if (!cJSON_IsArray(it) || n == 0)
        return api_fail(e, 400, "invalid_request_error", "input", "invalid_value",
                        "input[%d] must be a non-empty string or array of token ids", index);
    if (n > cap)
        return api_fail(e, 400, "invalid_request_error", "input", "context_length_exceeded",
                        "input[%d] is %d tokens, over this model's context of %d", index, n,
                        mi->ctx);
    const cJSON *t;
    cJSON_ArrayForEach(t, it) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= mi->n_vocab)
            return api_fail(e, 400, "invalid_request_error", "input", "invalid_value",
                            "input[%d] holds a token id outside 0..%d", index, mi->n_vocab - 1);
        ids[k++] = (uint32_t)t->valuedouble;
    }
    return k;
}

/* The embedding of ids[0..n) into out (C floats): mean of the last hidden states, L2-normalised. */
static void embed(const gpt_model *m, gpt_decode_state *st, const uint32_t *ids, int n,
                  float *out, float *h) {
    int C = m->cfg.d_model;
    double *acc = callocCheck((size_t)C, sizeof(double));
    gpt_decode_reset(st);
    for (int t = 0; t < n; t++) {
        gpt_decode_step(m, st, (int)ids[t]);
        gpt_decode_hidden(m, st, h);
        for (int i = 0; i < C; i++) acc[i] += h[i];
    }
    double norm = 0;
    for (int i = 0; i < C; i++) {
        acc[i] /= n;
        norm += acc[i] * acc[i];
    }
    norm = sqrt(norm);
    for (int i = 0; i < C; i++) out[i] = (float)(norm > 0 ? acc[i] / norm : 0);
    free(acc);
}

static void put_vector(api_buf *b, const float *v, int C, int base64) {
    if (base64) { /* little-endian float32 (x86 and arm64 are), RFC 4648 base64 */
        int len = 4 * ((4 * C + 2) / 3) + 1;
        unsigned char *enc = mallocCheck((size_t)len);
        EVP_EncodeBlock(enc, (const unsigned char *)v, 4 * C);
        api_buf_printf(b, "\"%s\"", enc);
        free(enc);
        return;
    }
    api_buf_puts(b, "[");
    for (int i = 0; i < C; i++) api_buf_printf(b, "%s%.9g", i ? "," : "", v[i]);
    api_buf_puts(b, "]");
}

int srv_embeddings(const gpt_model *m, const api_model_info *mi, gpt_decode_state *st,
                   const char *body, size_t n, api_buf *out, api_error *e) {
    if (!api_utf8_valid((const uint8_t *)body, n))
        return api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                        "the request body is not valid UTF-8");
    cJSON *req = cJSON_ParseWithLength(body, n);
    int rc = -1;
    if (!cJSON_IsObject(req)) {
        api_fail(e, 400, "invalid_request_error", NULL, "invalid_json",
                 "the request body is not a JSON object");
        goto done;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(req, "input");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(req, "encoding_format");
    if (!cJSON_IsString(model)) {
        api_fail(e, 400, "invalid_request_error", "model", "missing_model",
                 "'model' (a string) is required");
        goto done;
    }
    if (strcmp(model->valuestring, mi->model_name)) {
        api_fail(e, 404, "invalid_request_error", "model", "model_not_found",
                 "The model '%.64s' does not exist (this server serves '%s')", model->valuestring,
                 mi->model_name);
        goto done;
    }
    if (fmt && !cJSON_IsNull(fmt) &&
        (!cJSON_IsString(fmt) ||
         (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64")))) {
        api_fail(e, 400, "invalid_request_error", "encoding_format", "invalid_value",
                 "'encoding_format' must be \"float\" or \"base64\"");
        goto done;
    }
    if (cJSON_GetObjectItemCaseSensitive(req, "dimensions")) {
        api_fail(e, 400, "invalid_request_error", "dimensions", "unsupported_parameter",
                 "'dimensions' is not supported: this model's embeddings have %d dimensions",
                 m->cfg.d_model);
        goto done;
    }
    int base64 = fmt && cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "base64");
    /* one input (a string, or one array of ids) or a list of them */
    int one = cJSON_IsString(input) ||
              (cJSON_IsArray(input) && cJSON_IsNumber(cJSON_GetArrayItem(input, 0)));
    int count = one ? 1 : cJSON_GetArraySize(input);
    if (!input || (!one && (!cJSON_IsArray(input) || count == 0 || count > 2048))) {
        api_fail(e, 400, "invalid_request_error", "input", "invalid_value",
                 "'input' must be a string, an array of token ids, or an array of 1..2048 of "
                 "those");
        goto done;
    }
    int C = m->cfg.d_model, T = m->cfg.seq_len;
    uint32_t *ids = mallocCheck((size_t)T * sizeof(uint32_t));
    float *v = mallocCheck((size_t)C * sizeof(float)), *h = mallocCheck((size_t)C * sizeof(float));
    api_buf b = {0};
    api_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
    long total = 0;
    for (int i = 0; i < count; i++) {
        const cJSON *it = one ? input : cJSON_GetArrayItem(input, i);
        int k = input_tokens(it, mi, i, ids, T, e);
        if (k < 0) {
            api_buf_free(&b);
            goto free_bufs;
        }
        embed(m, st, ids, k, v, h);
        total += k;
        api_buf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "",
                       i);
        put_vector(&b, v, C, base64);
        api_buf_puts(&b, "}");
    }
    api_buf_puts(&b, "],\"model\":");
    api_buf_json_string(&b, (const uint8_t *)mi->model_name, strlen(mi->model_name));
    api_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%ld,\"total_tokens\":%ld}}", total, total);
    *out = b;
    rc = 0;
free_bufs:
    free(ids);
    free(v);
    free(h);
done:
    cJSON_Delete(req);
    return rc;
}
