/*
 * core/rng.h — a small deterministic random number generator (xoshiro256**, Blackman & Vigna
 * 2018, seeded through splitmix64). Its whole state is four uint64 so a checkpoint can save and
 * restore it exactly; the same seed gives the same weights, data order and samples everywhere.
 */
#ifndef MT_RNG_H
#define MT_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rng_state;

/* Seed the generator (any seed, including 0, is fine). */
void rng_seed(rng_state *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t rng_u64(rng_state *r);
/* Uniform float in [0, 1) with 24 random bits. */
float rng_uniform(rng_state *r);
/* Standard normal (Box–Muller), mean 0, std 1. */
float rng_normal(rng_state *r);

/* The splitmix64 finalizer (Steele, Lea, Flood 2014): a cheap bijective 64-bit mix with full
 * avalanche. The seeding above runs it on a Weyl sequence; train/ uses it alone as a hash
 * (tokenizer tables) and as the round function of the data order's Feistel permutation. */
static inline uint64_t rng_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif /* MT_RNG_H */
