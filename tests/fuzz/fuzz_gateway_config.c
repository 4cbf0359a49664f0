/*
 * tests/fuzz/fuzz_gateway_config.c — the gateway's INI config and its command-line flags
 * (`minitrain gateway --config gw.ini --upstream N=URL --route M=T,... --KEY VALUE`).
 *
 * Input: an INI file, optionally followed by a NUL byte and flag lines "upstream=NAME=URL",
 * "route=MODEL=TARGETS" or "key=value" (gw_config_set). Every path ends in gw_config_validate,
 * which resolves targets, then gw_rules_new, which compiles the content rules (PCRE2, JIT), and
 * a whole-text and a streamed pass of the rules over a fixed text (the gateway's start, then one
 * request and one streamed completion).
 */
#include "fuzz_util.h"

#include "gateway/gw_proxy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t nini = nul ? (size_t)(nul - data) : size;
    const char *path = fuzz_write("gw.ini", data, nini);
    static gw_config c; /* large; static keeps it off the fuzzer's stack */
    char err[1024];
    gw_config_init(&c);
    if (gw_config_load(&c, path, err, sizeof(err)) != 0) return 0;
    if (nul) {
        char *rest = strndup((const char *)nul + 1, size - nini - 1);
        for (char *save = NULL, *line = strtok_r(rest, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            int rc = 0;
            if (!strncmp(line, "upstream=", 9)) rc = gw_config_add_upstream(&c, line + 9, err, sizeof(err));
            else if (!strncmp(line, "route=", 6)) rc = gw_config_add_route(&c, line + 6, err, sizeof(err));
            else {
                char *eq = strchr(line, '=');
                if (eq == NULL) continue;
                *eq = 0;
                (void)gw_config_has_key(line);
                rc = gw_config_set(&c, line, eq + 1, err, sizeof(err));
            }
            if (rc != 0) break;
        }
        free(rest);
    }
    if (gw_config_validate(&c, err, sizeof(err)) != 0) return 0;
    gw_rules *r = gw_rules_new(&c, err, sizeof(err));
    if (r == NULL) return 0;
    static const char text[] = "the launch codes are 1234 5678 9012 3456; mail a@b.example now";
    api_buf out = {0};
    const char *rule = NULL;
    size_t at = 0;
    for (int on = GW_ON_PROMPTS; on <= GW_ON_COMPLETIONS; on++) {
        (void)gw_rules_active(r, on);
        (void)gw_rules_window(r, on);
        gw_rules_apply(r, on, text, sizeof(text) - 1, &out, &rule, &at);
    }
    gw_filter f;
    gw_filter_init(&f, r);
    for (size_t i = 0; i < sizeof(text) - 1; i += 7) /* a stream of 7-byte pieces */
        if (gw_filter_push(&f, text + i, sizeof(text) - 1 - i < 7 ? sizeof(text) - 1 - i : 7,
                           i + 7 >= sizeof(text) - 1, &out))
            break;
    gw_filter_free(&f);
    api_buf_free(&out);
    gw_rules_free(r);
    return 0;
}
