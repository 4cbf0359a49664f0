/*
 * tests/fuzz/fuzz_admin.c — the gateway's admin API (`/admin/keys`, `/admin/audit`): the JSON
 * bodies an admin key may send, and the paths and query strings they go to.
 *
 * Input: "METHOD PATH\n" then the body (no such first line: POST /admin/keys with the whole input
 * as the body). "FIXTURE" in the path stands for the id of a key that exists. The caller is an
 * admin. Every answer must be a JSON text with a status in 200..599, an OpenAI error object on
 * 4xx/5xx, and a created key must check as valid. The key database lives in /dev/shm and is
 * recreated every 2000 inputs so it stays small (a crash found after many inputs can depend on
 * the rows before it: replay with -runs on the crash file, which starts from a fresh database).
 */
#include "fuzz_util.h"

#include <cjson/cJSON.h>

#include "gateway/gw_keys.h"

static gw_keys *g_keys;
static gw_key_row g_admin, g_fixture;
static int g_calls;

static void reset(void) {
    char path[256], p2[300], err[512], key[GW_KEY_LEN + 1];
    snprintf(path, sizeof(path), "%s/gateway.db", fuzz_dir());
    if (g_keys) gw_keys_close(g_keys);
    unlink(path);
    snprintf(p2, sizeof(p2), "%s-wal", path);
    unlink(p2);
    snprintf(p2, sizeof(p2), "%s-shm", path);
    unlink(p2);
    g_keys = gw_keys_open(path, err, sizeof(err));
    if (!g_keys) abort();
    gw_key_info a = {.role = GW_ROLE_ADMIN}, u = {.role = GW_ROLE_USER, .rpm = 60};
    if (gw_keys_create(g_keys, "fuzz", "admin", &a, key, &g_admin, err, sizeof(err)) != 0 ||
        gw_keys_create(g_keys, "fuzz", "fixture", &u, key, &g_fixture, err, sizeof(err)) != 0)
        abort();
    g_calls = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_keys || ++g_calls > 2000) reset();
    char method[16] = "POST", path[512] = "/admin/keys";
    const uint8_t *body = data;
    size_t blen = size;
    const uint8_t *nl = memchr(data, '\n', size < 600 ? size : 600);
    if (nl) {
        char line[600];
        size_t n = (size_t)(nl - data);
        memcpy(line, data, n);
        line[n] = '\0';
        char m[16], p[512];
        if (sscanf(line, "%15s %511s", m, p) == 2 && p[0] == '/') {
            snprintf(method, sizeof(method), "%s", m);
            char *fx = strstr(p, "FIXTURE");
            if (fx) { /* the id of a key that exists */
                *fx = '\0';
                snprintf(path, sizeof(path), "%s%s%s", p, g_fixture.info.id, fx + 7);
            } else {
                snprintf(path, sizeof(path), "%s", p);
            }
            body = nl + 1;
            blen = size - n - 1;
        }
    }
    char *b = strndup((const char *)body, blen); /* the HTTP layer hands over a NUL-ended copy */
    char *out = NULL;
    int st = gw_admin_handle(g_keys, &g_admin.info, method, path, b, strlen(b), &out);
    if (st < 200 || st > 599 || out == NULL) abort();
    cJSON *j = cJSON_Parse(out);
    if (j == NULL) abort();
    if (st >= 400) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        if (!cJSON_IsObject(e) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")))
            abort();
    }
    if (st == 201) { /* a created key is shown once and must authenticate (unless disabled/expired) */
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "key");
        if (!cJSON_IsString(k)) abort();
        char auth[128];
        snprintf(auth, sizeof(auth), "Bearer %s", k->valuestring);
        gw_key_info info;
        int a = gw_keys_check(g_keys, auth, &info);
        if (a != GW_AUTH_OK && a != GW_AUTH_DISABLED && a != GW_AUTH_EXPIRED) abort();
    }
    cJSON_Delete(j);
    free(out);
    free(b);
    return 0;
}
