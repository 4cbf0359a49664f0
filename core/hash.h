/*
 * core/hash.h — FNV-1a, the one non-cryptographic hash of the house: hash tables keyed by byte
 * strings (tokenizer vocabularies, BPE chunk counts, topology leaf names, rate-limit keys) and
 * the checksums of the small binary records minitrain writes (tokenizer.bin's body, heartbeat
 * records, the host id). Prefix hash_.
 *
 * FNV-1a (Fowler, Noll, Vo; draft-eastlake-fnv, "The FNV Non-Cryptographic Hash Algorithm"): for
 * each byte b, h = (h XOR b) * prime, starting from the offset basis. 32 bit: basis 2166136261,
 * prime 16777619; 64 bit: basis 14695981039346656037, prime 1099511628211. The values are part of
 * file formats (tokenizer.bin, heartbeat records): never change them. Not for anything an
 * adversary chooses the keys of where collisions would matter (keys, signatures): that is
 * OpenSSL's SHA-256 (gateway/gw_keys.c).
 */
#ifndef MT_HASH_H
#define MT_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HASH_FNV32_BASIS 2166136261u
#define HASH_FNV32_PRIME 16777619u
#define HASH_FNV64_BASIS 0xcbf29ce484222325ull /* 14695981039346656037 */
#define HASH_FNV64_PRIME 0x100000001b3ull      /* 1099511628211 */

/* FNV-1a 32 of the n bytes at p (n = 0: the offset basis). */
static inline uint32_t hash_fnv1a32(const void *p, size_t n) {
    const uint8_t *b = p;
    uint32_t h = HASH_FNV32_BASIS;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * HASH_FNV32_PRIME;
    return h;
}

/* FNV-1a 64 of the n bytes at p (n = 0: the offset basis). */
static inline uint64_t hash_fnv1a64(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = HASH_FNV64_BASIS;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * HASH_FNV64_PRIME;
    return h;
}

/* FNV-1a 32 / 64 of the bytes of a NUL-terminated string (the NUL not included). */
static inline uint32_t hash_fnv1a32_str(const char *s) {
    uint32_t h = HASH_FNV32_BASIS;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * HASH_FNV32_PRIME;
    return h;
}
static inline uint64_t hash_fnv1a64_str(const char *s) {
    uint64_t h = HASH_FNV64_BASIS;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * HASH_FNV64_PRIME;
    return h;
}

/* A 64-bit hash of n_words 64-bit words at p (8-byte aligned) for large buffers (the parameters'
 * silent-corruption check, sched/sdc.h): FNV-1a applied to whole words instead of bytes, in four
 * interleaved lanes (word i goes to lane i % 4, so the multiplications of the lanes overlap),
 * each lane h = (h XOR w) * HASH_FNV64_PRIME from the 64-bit basis, and the four lane values
 * then hashed as bytes by hash_fnv1a64. Each lane step is a bijection of h (XOR with w, then a
 * product with an odd constant mod 2^64), so two buffers that differ in exactly one word — one
 * flipped bit — always hash differently. A trailing n_bytes % 8 is hashed into lane 0 as one
 * zero-padded word. p needs no alignment (words are read with memcpy). Not the byte-wise FNV-1a
 * of the same bytes: its values are not a file format. */
static inline uint64_t hash_words64(const void *p, size_t n_bytes) {
    const uint8_t *b = p;
    size_t n = n_bytes / 8, i = 0;
    uint64_t l[4] = {HASH_FNV64_BASIS, HASH_FNV64_BASIS, HASH_FNV64_BASIS, HASH_FNV64_BASIS}, w;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) {
            memcpy(&w, b + 8 * (i + k), 8);
            l[k] = (l[k] ^ w) * HASH_FNV64_PRIME;
        }
    for (; i < n; i++) {
        memcpy(&w, b + 8 * i, 8);
        l[i % 4] = (l[i % 4] ^ w) * HASH_FNV64_PRIME;
    }
    if (n_bytes % 8) {
        uint64_t t = 0;
        b += n * 8;
        for (size_t k = 0; k < n_bytes % 8; k++) t |= (uint64_t)b[k] << (8 * k);
        l[0] = (l[0] ^ t) * HASH_FNV64_PRIME;
    }
    return hash_fnv1a64(l, sizeof(l));
}

#endif /* MT_HASH_H */
