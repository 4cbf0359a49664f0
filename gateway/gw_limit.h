/*
 * gateway/gw_limit.h — per-key rate limits for `minitrain gateway`: requests per minute, tokens
 * per minute, concurrent requests.
 *
 * Token buckets (capacity = the per-minute limit, refilled continuously at limit/60 per second).
 * A request reserves 1 request + (prompt tokens + max_tokens) and one concurrency slot at
 * admission, before any work; when it ends it settles (the unused part of the token reservation
 * goes back) or, on error/cancel/disconnect, releases everything. In-process buckets sit behind
 * one mutex; with a Redis address the buckets live in Redis and one Lua script does the
 * check-and-take atomically, so several gateway processes share one budget.
 *
 * This header is the seam with the gateway proxy (see notes/GATEWAY_CONTRACT.md).
 */
#ifndef MT_GATEWAY_GW_LIMIT_H
#define MT_GATEWAY_GW_LIMIT_H

#include <stddef.h>

#include "gateway/gw_keys.h"

typedef struct gw_limiter gw_limiter;
/* redis: "HOST:PORT" or NULL for in-process buckets. fail_open: what to do when Redis is down. */
gw_limiter *gw_limiter_new(const char *redis, int fail_open, char *err, size_t errlen);
void gw_limiter_free(gw_limiter *l);
typedef struct {
    int admitted;                 /* 1 admitted, 0 rate-limited (→ 429) */
    double retry_after_s;         /* when not admitted */
    long limit_requests, remaining_requests, limit_tokens, remaining_tokens; /* x-ratelimit-* */
    unsigned long long reservation;  /* handle for settle/release when admitted */
} gw_admission;
/* Reserve 1 request + `tokens` (prompt tokens + max_tokens) and one concurrency slot for key. */
int gw_limiter_reserve(gw_limiter *l, const gw_key_info *key, long tokens, gw_admission *out);
/* After the response: charge the real usage, return the rest, free the concurrency slot. */
void gw_limiter_settle(gw_limiter *l, unsigned long long reservation, long used_tokens);
/* On error, cancel or client disconnect: give back the tokens and the slot. */
void gw_limiter_release(gw_limiter *l, unsigned long long reservation);

#endif
