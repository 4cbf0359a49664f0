/*
 * ckpt/crc32c.c — CRC-32C (Castagnoli) for checkpoint checksums.
 *
 * Why CRC-32C: it is the checksum of iSCSI (RFC 3720), ext4 metadata and many storage systems, it
 * detects all burst errors up to 32 bits, and x86-64 CPUs compute it in hardware (SSE4.2 `crc32`
 * instruction), so checksumming a multi-GB checkpoint costs far less than writing it.
 *
 * Definition (RFC 3720 §12.1, B.4): reflected polynomial 0x82F63B78, initial value 0xFFFFFFFF,
 * final XOR 0xFFFFFFFF. CRC32C("123456789") = 0xE3069283.
 *
 * Shape of the code: the public `crc` argument/result is the finished CRC (zlib's convention), so
 * incremental use composes: ckpt_crc32c(ckpt_crc32c(0, a, na), b, nb) == CRC32C(a || b). Inside,
 * the state is inverted once on entry and once on exit. Two engines share that state:
 *   - portable slice-by-8 (eight 256-entry tables, 8 bytes per step; Intel's "slicing-by-8",
 *     Kounavis & Berry 2005), tables built once under pthread_once;
 *   - SSE4.2 `_mm_crc32_u64`, chosen at run time with __builtin_cpu_supports("sse4.2") so a binary
 *     built on a new CPU still runs (slower) on an old one.
 * ckpt_crc32c_sw() is public so tests can hold the two engines against each other.
 */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define CKPT_CRC_HAVE_X86 1
#else
#define CKPT_CRC_HAVE_X86 0
#endif

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */

static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_build(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            uint32_t prev = crc_table[t - 1][i];
            crc_table[t][i] = (prev >> 8) ^ crc_table[0][prev & 0xffu];
        }
    }
}

/* Slice-by-8 on the inverted state `c`; returns the new inverted state. Little-endian host. */
static uint32_t crc_sw_raw(uint32_t c, const unsigned char *p, size_t n) {
    while (n > 0 && ((uintptr_t)p & 7u) != 0) { /* align so the 8-byte loads are aligned */
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xffu];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = crc_table[7][w & 0xffu] ^ crc_table[6][(w >> 8) & 0xffu] ^
            crc_table[5][(w >> 16) & 0xffu] ^ crc_table[4][(w >> 24) & 0xffu] ^
            crc_table[3][(w >> 32) & 0xffu] ^ crc_table[2][(w >> 40) & 0xffu] ^
            crc_table[1][(w >> 48) & 0xffu] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xffu];
    return c;
}

uint32_t ckpt_crc32c_sw(uint32_t crc, const void *buf, size_t n) {
    pthread_once(&crc_table_once, crc_table_build);
    return ~crc_sw_raw(~crc, (const unsigned char *)buf, n);
}

#if CKPT_CRC_HAVE_X86
/* Hardware engine: the crc32 instruction implements exactly the reflected 0x82F63B78 update on
 * the inverted state, 8 bytes per instruction. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw_raw(uint32_t c, const unsigned char *p,
                                                             size_t n) {
    while (n > 0 && ((uintptr_t)p & 7u) != 0) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n-- > 0) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

int ckpt_crc32c_hw_available(void) {
#if CKPT_CRC_HAVE_X86
    static atomic_int have = -1; /* every thread computes the same value; relaxed is enough */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
#else
    return 0;
#endif
}

uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t n) {
#if CKPT_CRC_HAVE_X86
    if (ckpt_crc32c_hw_available()) return ~crc_hw_raw(~crc, (const unsigned char *)buf, n);
#endif
    return ckpt_crc32c_sw(crc, buf, n);
}

int ckpt_crc32c_file(const char *path, uint32_t *crc_out, uint64_t *bytes_out, char *err,
                     size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        mt_errf(err, errlen, "cannot open '%s' for checksum: %s", path, strerror(errno));
        return -1;
    }
    const size_t chunk = (size_t)1 << 20; /* 1 MiB: large enough to stream at disk speed */
    unsigned char *buf = malloc(chunk);
    if (buf == NULL) {
        close(fd);
        mt_errf(err, errlen, "out of memory checksumming '%s'", path);
        return -1;
    }
    uint32_t crc = 0;
    uint64_t total = 0;
    for (;;) {
        ssize_t got = read(fd, buf, chunk);
        if (got < 0) {
            if (errno == EINTR) continue;
            mt_errf(err, errlen, "read error in '%s' at byte %llu: %s", path,
                    (unsigned long long)total, strerror(errno));
            free(buf);
            close(fd);
            return -1;
        }
        if (got == 0) break;
        crc = ckpt_crc32c(crc, buf, (size_t)got);
        total += (uint64_t)got;
    }
    free(buf);
    close(fd);
    if (crc_out) *crc_out = crc;
    if (bytes_out) *bytes_out = total;
    return 0;
}
