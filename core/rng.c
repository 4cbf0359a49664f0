/*
 * core/rng.c — xoshiro256** with splitmix64 seeding (see core/rng.h).
 */
#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) { return rng_mix64(*x += 0x9E3779B97F4A7C15ULL); }

void rng_seed(rng_state *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(rng_state *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float rng_uniform(rng_state *r) { return (rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float rng_normal(rng_state *r) {
    /* Box–Muller; u1 in (0, 1] so log is finite. */
    float u1 = 1.0f - rng_uniform(r);
    float u2 = rng_uniform(r);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}
