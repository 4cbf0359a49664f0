/*
 * gateway/gw_limit.h — per-key rate limits for `minitrain gateway`: requests per minute, tokens
 * per minute, requests in flight.
 *
 * Token buckets: a key's request bucket holds up to rpm, its token bucket up to tpm, each refilled
 * continuously at limit/60 per second (so a full minute's budget may be spent in a burst, and an
 * idle key is full again after 60 s). A request reserves 1 request + `tokens` (prompt tokens +
 * max_tokens) and one concurrency slot at admission, all or nothing, before any upstream work;
 * when it ends it settles (the unused part of the token reservation goes back; the request stays
 * counted) or, on error/cancel/disconnect, releases (all reserved tokens and the slot go back).
 * Check-and-take is one critical section — a mutex in process, one Lua script in Redis — so N
 * parallel reservations of cost c against a budget B admit exactly ⌊B/c⌋.
 *
 * With a Redis address the buckets live in Redis, so every gateway process sharing that Redis
 * shares one budget per key (Redis's clock, TIME, is the one clock). When Redis is unreachable:
 *   fail_open = 1: keep serving, with this process's own in-process buckets (each replica then
 *                  enforces the full limits by itself: together at most N × limit);
 *   fail_open = 0: refuse every limited request (admitted = 0) until Redis answers again.
 * Reconnection is tried at most once a second. The process must ignore SIGPIPE (serve and the
 * gateway do): hiredis writes to a socket that a dead Redis may have closed. Details and the
 * reasoning: docs/gateway-keys.md.
 *
 * The first part of this header is the seam with the gateway proxy (notes/GATEWAY_CONTRACT.md).
 */
#ifndef MT_GATEWAY_GW_LIMIT_H
#define MT_GATEWAY_GW_LIMIT_H

#include <stddef.h>

#include "gateway/gw_keys.h"

typedef struct gw_limiter gw_limiter;
/* redis: "HOST:PORT" or NULL for in-process buckets. fail_open: what to do when Redis is down.
 * NULL + err only for a malformed address; an unreachable Redis is not an error here (a warning
 * is printed and the fail_open policy applies until it answers). */
gw_limiter *gw_limiter_new(const char *redis, int fail_open, char *err, size_t errlen);
void gw_limiter_free(gw_limiter *l);
typedef struct {
    int admitted;                 /* 1 admitted, 0 rate-limited (→ 429) */
    double retry_after_s;         /* when not admitted: seconds until it could be (> 0) */
    /* x-ratelimit-* values after this decision; -1 where the key has no such limit (omit the
     * header). remaining_* are whole units, never negative. */
    long limit_requests, remaining_requests, limit_tokens, remaining_tokens;
    unsigned long long reservation;  /* handle for settle/release when admitted */
    double reset_requests_s, reset_tokens_s; /* seconds until the bucket is full again */
} gw_admission;
/* Return codes of gw_limiter_reserve. */
enum {
    GW_LIMIT_OK = 0,           /* decided: see out->admitted */
    GW_LIMIT_TOO_LARGE = 1,    /* tokens > the key's tpm: never admissible (answer 400/429
                                  without Retry-After); admitted = 0 */
    GW_LIMIT_UNAVAILABLE = -1, /* Redis unreachable: out->admitted already holds the fail_open
                                  decision (1 = admitted on local buckets, 0 = refused) */
};
/* Reserve 1 request + `tokens` (prompt tokens + max_tokens) and one concurrency slot for key. */
int gw_limiter_reserve(gw_limiter *l, const gw_key_info *key, long tokens, gw_admission *out);
/* After the response: charge the real usage, return the rest, free the concurrency slot. */
void gw_limiter_settle(gw_limiter *l, unsigned long long reservation, long used_tokens);
/* On error, cancel or client disconnect: give back the tokens and the slot. */
void gw_limiter_release(gw_limiter *l, unsigned long long reservation);

/* ---- beyond the contract ---------------------------------------------------------------------- */

/* 1 when configured with Redis and the last contact succeeded; 0 otherwise. */
int gw_limiter_redis_up(gw_limiter *l);
/* 1 when a Redis outage falls back to in-process buckets (fail_open), 0 when it refuses. */
int gw_limiter_fails_open(gw_limiter *l);
/* Reservations not yet settled or released (in this process). */
int gw_limiter_open_reservations(gw_limiter *l);
/* Test hook: seconds from now(ctx) instead of the monotonic clock (in-process) or Redis TIME. */
void gw_limiter_set_clock(gw_limiter *l, double (*now)(void *ctx), void *ctx);
/* Seconds a concurrency slot held in Redis survives a process that died holding it. */
#define GW_LIMIT_LEASE_S 600

#endif
