/*
 * tests/test_gw_chat.c — /v1/chat/completions without sockets: the plain-text chat template,
 * request validation (every refusal names its field), and the chat.completion and
 * chat.completion.chunk bodies.
 *
 * References: the template's expected text is written out by hand from its documented form
 * (docs/serve.md); the prompt ids are compared with the byte tokenizer's own encoding of that
 * text; every body is read back with cJSON and held to OpenAI's published field names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "serve/api.h"

static tok_tokenizer TOK;
static api_model_info MI;

static void setup_mi(int ctx) {
    static int have;
    if (have) tok_free(&TOK);
    have = 1;
    tok_init_byte(&TOK);
    MI.tok = &TOK;
    MI.n_vocab = 256;
    MI.ctx = ctx;
    MI.model_name = "tiny";
}

static int parse(const char *body, api_request *r, api_error *e) {
    return api_parse_chat(body, strlen(body), &MI, r, e);
}

static void expect_error(const char *body, int status, const char *param) {
    api_request r;
    api_error e;
    if (parse(body, &r, &e) == 0) fail_msg("accepted: %s", body);
    if (e.status != status || strcmp(e.param, param ? param : ""))
        fail_msg("%s -> %d param '%s' (%s); wanted %d '%s'", body, e.status, e.param, e.message,
                 status, param ? param : "");
    assert_null(r.prompt);
    assert_int_equal(r.n_stop, 0);
}

static void test_template(void **state) {
    (void)state;
    setup_mi(1024);
    api_request r;
    api_error e;
    const char *body =
        "{\"model\":\"tiny\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":\"Who art thou?\"},"
        "{\"role\":\"assistant\",\"content\":\"A player.\\nNo more.\"},"
        "{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"Rhyme\"},{\"type\":\"text\",\"text\":\"!\"}]},"
        "{\"role\":\"user\",\"content\":\"Speak.\",\"name\":\"romeo\"}],"
        "\"max_tokens\":20,\"stop\":[\"END\"]}";
    assert_int_equal(parse(body, &r, &e), 0);
    const char *want = "System: Be brief.\n"
                       "User: Who art thou?\n"
                       "Assistant: A player.\nNo more.\n"
                       "System: Rhyme!\n"
                       "User: Speak.\n"
                       "Assistant:";
    assert_int_equal(r.prompt_text_len, strlen(want));
    assert_memory_equal(r.prompt_text, want, strlen(want));
    uint32_t ids[512];
    size_t n = tok_encode(&TOK, (const uint8_t *)want, strlen(want), ids);
    assert_int_equal(r.n_prompt, (int)n);
    assert_memory_equal(r.prompt, ids, n * sizeof(uint32_t));
    assert_true(r.chat);
    assert_int_equal(r.max_tokens, 20);
    /* the client's stop first, then the template's */
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "END");
    assert_string_equal(r.stop[1], "\nUser:");
    assert_int_equal(r.stop_len[1], 6);
    api_request_free(&r);
    /* four client stops still leave room for the template's: five in all */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                           "\"stop\":[\"a\",\"b\",\"c\",\"d\"]}", &r, &e), 0);
    assert_int_equal(r.n_stop, 5);
    assert_int_equal(r.max_tokens, API_DEFAULT_MAX_TOKENS);
    api_request_free(&r);
    /* max_completion_tokens is max_tokens' newer name; neutral fields are accepted */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                           "\"max_completion_tokens\":7,\"n\":1,\"logprobs\":false,"
                           "\"top_logprobs\":null,\"response_format\":{\"type\":\"text\"},"
                           "\"presence_penalty\":0,\"user\":\"u\",\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true},\"seed\":3,"
                           "\"temperature\":0}", &r, &e), 0);
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.stream && r.include_usage && r.has_seed);
    api_request_free(&r);
    /* the rendered conversation is clamped to the context like any prompt */
    setup_mi(40);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],"
                           "\"max_tokens\":1000}", &r, &e), 0);
    assert_int_equal(r.max_tokens, 40 - (int)strlen("User: hello\nAssistant:"));
    api_request_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    setup_mi(64);
    expect_error("{}", 400, "messages");
    expect_error("{\"messages\":[]}", 400, "messages");
    expect_error("{\"messages\":\"hi\"}", 400, "messages");
    expect_error("{\"messages\":[\"hi\"]}", 400, "messages");
    expect_error("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "messages");
    expect_error("{\"messages\":[{\"role\":\"user\"}]}", 400, "messages");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}]}", 400, "messages");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[]}", 400, "tools");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frob\":1}", 400, "frob");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prompt\":\"x\"}", 400, "prompt");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}", 400, "logprobs");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
                 400, "response_format");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,"
                 "\"max_completion_tokens\":5}", 400, "max_completion_tokens");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":0}",
                 400, "max_completion_tokens");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", 400, "temperature");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"gpt-4o\"}", 404, "model");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
                 400, "stop");
    char big[200];
    snprintf(big, sizeof(big), "{\"messages\":[{\"role\":\"user\",\"content\":\"%060d\"}]}", 0);
    expect_error(big, 400, "messages"); /* the rendered conversation does not fit in 64 */
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"\\u0000\"}]}", 400, NULL);
    expect_error("[1]", 400, NULL);
}

static cJSON *event(const char *sse) {
    assert_int_equal(strncmp(sse, "data: ", 6), 0);
    size_t n = strlen(sse);
    assert_true(n > 8 && !strcmp(sse + n - 2, "\n\n"));
    char *tmp = strndup(sse + 6, n - 8);
    cJSON *j = cJSON_Parse(tmp);
    free(tmp);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion.chunk");
    return j;
}

static void test_shapes(void **state) {
    (void)state;
    api_buf b = {0};
    api_chat_json(&b, "chatcmpl-1", 77, "tiny", (const uint8_t *)" Hark \"who\"", 11, "stop", 20, 4);
    cJSON *j = cJSON_Parse(b.p);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
    assert_string_equal(cJSON_GetObjectItem(j, "id")->valuestring, "chatcmpl-1");
    assert_int_equal(cJSON_GetObjectItem(j, "created")->valueint, 77);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_int_equal(cJSON_GetObjectItem(c, "index")->valueint, 0);
    cJSON *m = cJSON_GetObjectItem(c, "message");
    assert_string_equal(cJSON_GetObjectItem(m, "role")->valuestring, "assistant");
    assert_string_equal(cJSON_GetObjectItem(m, "content")->valuestring, " Hark \"who\"");
    assert_string_equal(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "stop");
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valueint, 24);
    cJSON_Delete(j);
    api_buf_free(&b);
    /* opening chunk: the role, content "" */
    api_chat_chunk_sse(&b, "chatcmpl-1", 77, "tiny", 1, (const uint8_t *)"", 0, NULL);
    j = event(b.p);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cJSON *d = cJSON_GetObjectItem(c, "delta");
    assert_string_equal(cJSON_GetObjectItem(d, "role")->valuestring, "assistant");
    assert_string_equal(cJSON_GetObjectItem(d, "content")->valuestring, "");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c, "finish_reason")));
    cJSON_Delete(j);
    api_buf_free(&b);
    /* a content chunk: no role */
    api_chat_chunk_sse(&b, "chatcmpl-1", 77, "tiny", 0, (const uint8_t *)"o\xff", 2, NULL);
    j = event(b.p);
    d = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "delta");
    assert_null(cJSON_GetObjectItem(d, "role"));
    assert_string_equal(cJSON_GetObjectItem(d, "content")->valuestring, "o\xEF\xBF\xBD");
    cJSON_Delete(j);
    api_buf_free(&b);
    /* the closing chunk: empty delta, finish reason */
    api_chat_chunk_sse(&b, "chatcmpl-1", 77, "tiny", 0, NULL, 0, "length");
    j = event(b.p);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_null(cJSON_GetObjectItem(c, "delta")->child);
    assert_string_equal(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "length");
    cJSON_Delete(j);
    api_buf_free(&b);
    api_chat_usage_sse(&b, "chatcmpl-1", 77, "tiny", 5, 6);
    j = event(b.p);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 0);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 6);
    cJSON_Delete(j);
    api_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_shapes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tok_free(&TOK);
    return rc;
}
