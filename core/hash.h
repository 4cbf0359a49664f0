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

#endif /* MT_HASH_H */
