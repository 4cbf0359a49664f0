/*
 * gateway/gw_keys.c — API keys (see gw_keys.h). STUB: every call fails until the implementation
 * lands, so the proxy can compile against the header today.
 */
#include "gateway/gw_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gw_keys *gw_keys_open(const char *db_path, char *err, size_t errlen) {
    (void)db_path;
    if (err && errlen) snprintf(err, errlen, "gateway keys are not implemented yet");
    return NULL;
}
void gw_keys_close(gw_keys *k) { (void)k; }
int gw_keys_check(gw_keys *k, const char *authorization, gw_key_info *out) {
    (void)k; (void)out;
    return authorization ? GW_AUTH_INVALID : GW_AUTH_MISSING;
}
int gw_key_allows_model(const gw_key_info *key, const char *model) { (void)key; (void)model; return 0; }
int gw_admin_handle(gw_keys *k, const gw_key_info *caller, const char *method, const char *path,
                    const char *body, size_t body_len, char **out_json) {
    (void)k; (void)caller; (void)method; (void)path; (void)body; (void)body_len;
    *out_json = strdup("{\"error\":{\"message\":\"not implemented\",\"type\":\"server_error\","
                       "\"param\":null,\"code\":null}}");
    return 501;
}
int gw_keys_cli(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "minitrain: error: gateway keys are not implemented yet\n");
    return 1;
}
