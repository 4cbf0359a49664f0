/*
 * gateway/gw_limit.c — per-key rate limits (see gw_limit.h). STUB: refuses everything until the
 * implementation lands, so the proxy can compile against the header today.
 */
#include "gateway/gw_limit.h"

#include <stdio.h>
#include <string.h>

gw_limiter *gw_limiter_new(const char *redis, int fail_open, char *err, size_t errlen) {
    (void)redis; (void)fail_open;
    if (err && errlen) snprintf(err, errlen, "rate limiter is not implemented yet");
    return NULL;
}
void gw_limiter_free(gw_limiter *l) { (void)l; }
int gw_limiter_reserve(gw_limiter *l, const gw_key_info *key, long tokens, gw_admission *out) {
    (void)l; (void)key; (void)tokens;
    memset(out, 0, sizeof *out);
    return -1;
}
void gw_limiter_settle(gw_limiter *l, unsigned long long reservation, long used_tokens) {
    (void)l; (void)reservation; (void)used_tokens;
}
void gw_limiter_release(gw_limiter *l, unsigned long long reservation) { (void)l; (void)reservation; }
