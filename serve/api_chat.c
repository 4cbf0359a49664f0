/*
 * serve/api_chat.c — the OpenAI chat completions API as data: messages → one prompt by a
 * plain-text chat template, and the chat.completion / chat.completion.chunk bodies.
 *
 * The chat template. Our models are base models trained on plain text: they know no special
 * tokens and no role markup, so the conversation is written the way a transcript in their
 * training text would be, one line per message:
 *
 *     System: <content>\n          (role system or developer)
 *     User: <content>\n
 *     Assistant: <content>\n
 *     ...
 *     Assistant:                  ← the model continues from here
 *
 * and generation stops at "\nUser:" (API_CHAT_STOP, added after the client's own stops), where a
 * base model starts writing the user's next turn. The reply is the generated text as is (it
 * usually begins with the space after "Assistant:"), so a streamed reply concatenates to exactly
 * the non-streamed one. Content is inserted verbatim: a newline inside a message stays a
 * newline. The rendered prompt counts against the context like any prompt.
 *
 * Why separate from api.c: the completions file holds the JSON and UTF-8 machinery; this one only
 * what is chat-specific, reusing api_json_body / api_parse_sampling / api_prompt_fits from there.
 */
#include "serve/api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD "invalid_request_error"

static const char *const KNOWN_CHAT[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
    "seed", "stop", "stream", "stream_options", "n", "presence_penalty", "frequency_penalty",
    "logit_bias", "user", "logprobs", "top_logprobs", "response_format"};

/* Fields clients send for features we do not have: refused by name with a reason. */
static const char *const UNSUPPORTED_CHAT[] = {"tools", "tool_choice", "functions",
                                               "function_call", "parallel_tool_calls", "audio",
                                               "modalities", "prediction"};

/* Append one message's content (a string, or an array of {"type":"text","text":...} parts) to b. */
static int put_content(api_buf *b, const cJSON *c, int i, api_error *e) {
    if (cJSON_IsString(c)) {
        api_buf_puts(b, c->valuestring);
        return 0;
    }
    if (cJSON_IsArray(c)) {
        for (const cJSON *part = c->child; part; part = part->next) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
                !cJSON_IsString(text))
                return api_fail(e, 400, BAD, "messages", "unsupported_value",
                               "messages[%d].content: only text parts ({\"type\":\"text\", "
                               "\"text\":...}) are supported", i);
            api_buf_puts(b, text->valuestring);
        }
        return 0;
    }
    return api_fail(e, 400, BAD, "messages", "invalid_type",
                   "messages[%d].content must be a string or an array of text parts", i);
}

int api_chat_render(const struct cJSON *messages, api_buf *out, api_error *e) {
    if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0)
        return api_fail(e, 400, BAD, "messages", messages ? "invalid_type" : "missing_required_parameter",
                       "'messages' is required: a non-empty array of {\"role\", \"content\"}");
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m))
            return api_fail(e, 400, BAD, "messages", "invalid_type",
                           "messages[%d] must be an object {\"role\", \"content\"}", i);
        for (const cJSON *f = m->child; f; f = f->next)
            if (strcmp(f->string, "role") && strcmp(f->string, "content") && strcmp(f->string, "name"))
                return api_fail(e, 400, BAD, "messages", "unsupported_value",
                               "messages[%d].%.32s is not supported (tool and function calls are "
                               "not available on this server)", i, f->string);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        if (name && !cJSON_IsString(name))
            return api_fail(e, 400, BAD, "messages", "invalid_type",
                           "messages[%d].name must be a string", i);
        const char *label = NULL;
        if (cJSON_IsString(role)) {
            const char *r = role->valuestring;
            if (!strcmp(r, "system") || !strcmp(r, "developer")) label = "System: ";
            else if (!strcmp(r, "user")) label = "User: ";
            else if (!strcmp(r, "assistant")) label = "Assistant: ";
        }
        if (!label)
            return api_fail(e, 400, BAD, "messages", "invalid_value",
                           "messages[%d].role must be \"system\", \"developer\", \"user\" or "
                           "\"assistant\"", i);
        if (!content)
            return api_fail(e, 400, BAD, "messages", "missing_required_parameter",
                           "messages[%d].content is required", i);
        api_buf_puts(out, label);
        if (put_content(out, content, i, e)) return -1;
        api_buf_puts(out, "\n");
    }
    api_buf_puts(out, "Assistant:");
    return 0;
}

/* An integer field: absent/null → 0 return with *have = 0. */
static int opt_int(const cJSON *root, const char *name, double lo, double *out, int *have,
                   api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    *have = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return api_fail(e, 400, BAD, name, "invalid_type", "'%s' must be an integer", name);
    if (v->valuedouble < lo)
        return api_fail(e, 400, BAD, name, "invalid_value", "'%s' must be at least %.0f (got %.0f)",
                       name, lo, v->valuedouble);
    *out = v->valuedouble;
    *have = 1;
    return 0;
}

static int chat_neutral(const cJSON *root, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
        return api_fail(e, 400, BAD, "logprobs", "unsupported_value", "'logprobs' is not supported");
    v = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
    if (v && !cJSON_IsNull(v))
        return api_fail(e, 400, BAD, "top_logprobs", "unsupported_value",
                       "'top_logprobs' is not supported");
    v = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (v && !cJSON_IsNull(v)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            return api_fail(e, 400, BAD, "response_format", "unsupported_value",
                           "only response_format {\"type\": \"text\"} is supported");
    }
    return 0;
}

static int parse_chat_fields(const cJSON *root, const api_model_info *mi, api_request *r,
                             api_error *e) {
    for (size_t i = 0; i < sizeof(UNSUPPORTED_CHAT) / sizeof(UNSUPPORTED_CHAT[0]); i++)
        if (cJSON_GetObjectItemCaseSensitive(root, UNSUPPORTED_CHAT[i]))
            return api_fail(e, 400, BAD, UNSUPPORTED_CHAT[i], "unsupported_parameter",
                           "'%s' is not supported: this server's base models have no tool or "
                           "function calling", UNSUPPORTED_CHAT[i]);
    const char *unknown = api_unknown_field(root, KNOWN_CHAT, sizeof(KNOWN_CHAT) / sizeof(KNOWN_CHAT[0]));
    if (unknown)
        return api_fail(e, 400, BAD, unknown, "unknown_parameter",
                       "Unrecognized request argument supplied: %.64s", unknown);
    if (chat_neutral(root, e)) return -1;
    if (api_parse_sampling(root, mi, r, e)) return -1;
    /* max_completion_tokens: the newer name of max_tokens; one or the other */
    double d;
    int have_mct, have_mt;
    if (opt_int(root, "max_completion_tokens", 1, &d, &have_mct, e)) return -1;
    double dummy;
    if (opt_int(root, "max_tokens", 1, &dummy, &have_mt, e)) return -1;
    if (have_mct && have_mt)
        return api_fail(e, 400, BAD, "max_completion_tokens", "invalid_value",
                       "give 'max_completion_tokens' or 'max_tokens', not both");
    if (have_mct) r->max_tokens = d > 2147483647.0 ? 2147483647 : (int)d;
    api_buf text = {0};
    if (api_chat_render(cJSON_GetObjectItemCaseSensitive(root, "messages"), &text, e)) {
        api_buf_free(&text);
        return -1;
    }
    r->prompt_text = text.p; /* for --log-content */
    r->prompt_text_len = text.len;
    r->prompt = mallocCheck((text.len + 1) * sizeof(uint32_t));
    r->n_prompt = (int)tok_encode(mi->tok, (const uint8_t *)text.p, text.len, r->prompt);
    /* the template's stop, after the client's (which api_parse_sampling capped at API_MAX_STOP) */
    size_t sl = strlen(API_CHAT_STOP);
    r->stop[r->n_stop] = mallocCheck(sl + 1);
    memcpy(r->stop[r->n_stop], API_CHAT_STOP, sl + 1);
    r->stop_len[r->n_stop++] = sl;
    return api_prompt_fits(mi, r, e);
}

int api_parse_chat(const char *body, size_t len, const api_model_info *mi, api_request *req,
                  api_error *err) {
    memset(req, 0, sizeof(*req));
    req->chat = 1;
    cJSON *root = api_json_body(body, len, err);
    if (!root) return -1;
    int rc = parse_chat_fields(root, mi, req, err);
    cJSON_Delete(root);
    if (rc) api_request_free(req);
    return rc;
}

/* ---- response bodies ------------------------------------------------------------------------ */

static void head(api_buf *b, const char *id, long created, const char *model, const char *object) {
    api_buf_puts(b, "{\"id\":");
    api_buf_json_string(b, (const uint8_t *)id, strlen(id));
    api_buf_printf(b, ",\"object\":\"%s\",\"created\":%ld,\"model\":", object, created);
    api_buf_json_string(b, (const uint8_t *)model, strlen(model));
}

static void usage(api_buf *b, int prompt_tokens, int completion_tokens) {
    api_buf_printf(b, ",\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                  prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
}

static void finish_field(api_buf *b, const char *finish) {
    api_buf_puts(b, ",\"logprobs\":null,\"finish_reason\":");
    if (finish) api_buf_printf(b, "\"%s\"}", finish);
    else api_buf_puts(b, "null}");
}

void api_chat_json(api_buf *b, const char *id, long created, const char *model, const uint8_t *text,
                  size_t n, const char *finish, int prompt_tokens, int completion_tokens) {
    head(b, id, created, model, "chat.completion");
    api_buf_puts(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    api_buf_json_string(b, text, n);
    api_buf_puts(b, ",\"refusal\":null}");
    finish_field(b, finish);
    api_buf_puts(b, "]");
    usage(b, prompt_tokens, completion_tokens);
    api_buf_puts(b, "}");
}

void api_chat_chunk_sse(api_buf *b, const char *id, long created, const char *model, int first,
                       const uint8_t *text, size_t n, const char *finish) {
    api_buf_puts(b, "data: ");
    head(b, id, created, model, "chat.completion.chunk");
    api_buf_puts(b, ",\"choices\":[{\"index\":0,\"delta\":{");
    if (first) api_buf_puts(b, "\"role\":\"assistant\",\"content\":");
    else if (n) api_buf_puts(b, "\"content\":");
    if (first || n) api_buf_json_string(b, text, n);
    api_buf_puts(b, "}");
    finish_field(b, finish);
    api_buf_puts(b, "]}\n\n");
}

void api_chat_usage_sse(api_buf *b, const char *id, long created, const char *model,
                       int prompt_tokens, int completion_tokens) {
    api_buf_puts(b, "data: ");
    head(b, id, created, model, "chat.completion.chunk");
    api_buf_puts(b, ",\"choices\":[]");
    usage(b, prompt_tokens, completion_tokens);
    api_buf_puts(b, "}\n\n");
}
