/*
 * text/data.c — llm.c token shards: writer, validating mmap loader, stateless window sampler.
 *
 * Why stateless: data_loader_get(seq_index) is a pure function, so data-parallel ranks slice the
 * global batch by arithmetic on seq_index, and a resumed run continues from the step number
 * alone — there is no cursor to checkpoint. The shuffle is a keyed Feistel network (6 rounds
 * of a splitmix64 round function, as in format-preserving encryption, Black & Rogaway 2002)
 * with cycle-walking to restrict it to [0, nwin): a bijection in O(1) memory per epoch.
 *
 * Shards are mapped with mmap over their whole size; sizes, offsets and token indices are
 * size_t/uint64_t/off_t throughout (the build is 64-bit), so files over 2 GiB are fine.
 */
#include "text/data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fs.h"
#include "core/rng.h" /* rng_mix64: the Feistel round function */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "text/data.c reads little-endian shards with native loads; port the token reads first"
#endif

#define FEISTEL_ROUNDS 6

static void put_i32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
}

static int32_t get_i32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* ---------------------------------------------------------------------------------------------
 * writer */

int data_write_shard(const char *path, const uint32_t *tokens, size_t n, int vocab_size, char *err,
                     size_t errlen) {
    if (vocab_size < 1) {
        snprintf(err, errlen, "shard '%s': vocab_size %d must be >= 1", path, vocab_size);
        return -1;
    }
    if (n > INT32_MAX) {
        snprintf(err, errlen, "shard '%s': %zu tokens exceed the format's int32 count; split it",
                 path, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= (uint32_t)vocab_size) {
            snprintf(err, errlen, "shard '%s': token %u at index %zu is >= vocab_size %d", path,
                     tokens[i], i, vocab_size);
            return -1;
        }
    }
    int version = vocab_size <= 65536 ? 1 : 2;
    size_t bpt = version == 1 ? 2 : 4;
    uint8_t header[DATA_HEADER_BYTES] = {0};
    put_i32(header, DATA_MAGIC);
    put_i32(header + 4, version);
    put_i32(header + 8, (int32_t)n);

    /* partial file + fsync + rename (core/fs.h): a crash never leaves a torn shard */
    fs_afile f;
    if (fs_afile_open(&f, path, err, errlen) != 0) return -1;
    if (fs_afile_write(&f, header, sizeof(header), err, errlen) != 0) return -1;
    enum { BLOCK = 1 << 16 };
    uint8_t *buf = mallocCheck(BLOCK * 4);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        for (size_t j = 0; j < m; j++) {
            uint32_t v = tokens[i + j];
            buf[bpt * j] = (uint8_t)v;
            buf[bpt * j + 1] = (uint8_t)(v >> 8);
            if (bpt == 4) {
                buf[bpt * j + 2] = (uint8_t)(v >> 16);
                buf[bpt * j + 3] = (uint8_t)(v >> 24);
            }
        }
        rc = fs_afile_write(&f, buf, bpt * m, err, errlen);
    }
    free(buf);
    if (rc == 0) rc = fs_afile_commit(&f, err, errlen);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * opening and validation */

/* The glob pattern for a split (see data.h). Returns a malloc'ed string. */
static char *split_pattern(const char *src, const char *split) {
    struct stat st;
    size_t ls = strlen(src), lsp = strlen(split);
    char *out = mallocCheck(ls + lsp + 16);
    if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) {
        /* minitrain's DIR/<split>_000.bin; else llm.c's names: tiny_shakespeare_train.bin,
         * fineweb_train_000001.bin */
        out = realloc(out, 2 * ls + 2 * lsp + 32);
        mtCheck(out != NULL, "out of memory");
        const char *sep = (ls > 0 && src[ls - 1] == '/') ? "" : "/";
        sprintf(out, "%s%s%s_*.bin", src, sep, split);
        glob_t g;
        if (glob(out, 0, NULL, &g) == 0) {
            globfree(&g);
            return out;
        }
        sprintf(out, "%s%s*_%s{,_*}.bin", src, sep, split);
        return out;
    }
    const char *hit = strstr(src, "{split}");
    size_t hitlen = 7;
    if (hit == NULL) { /* last "train" or "val" in the file-name part */
        const char *base = strrchr(src, '/');
        for (const char *p = base ? base + 1 : src; *p; p++) {
            if (strncmp(p, "train", 5) == 0)
                hit = p, hitlen = 5;
            else if (strncmp(p, "val", 3) == 0)
                hit = p, hitlen = 3;
        }
    }
    if (hit == NULL) {
        memcpy(out, src, ls + 1);
        return out;
    }
    size_t pre = (size_t)(hit - src);
    memcpy(out, src, pre);
    memcpy(out + pre, split, lsp);
    memcpy(out + pre + lsp, hit + hitlen, ls - pre - hitlen + 1);
    return out;
}

/* Validate and map one shard into *s. 0 ok, -1 with message. */
static int open_shard(data_shard *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof(*s));
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open shard '%s': %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) { /* a directory a pattern matched reads as 4096 bytes of nothing */
        snprintf(err, errlen, "shard '%s' is %s, not a token shard file", path,
                 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        close(fd);
        return -1;
    }
    off_t size = st.st_size;
    uint8_t header[DATA_HEADER_BYTES];
    if (size < DATA_HEADER_BYTES) {
        snprintf(err, errlen, "shard '%s': truncated (%lld bytes, the header alone is %d)", path,
                 (long long)size, DATA_HEADER_BYTES);
        close(fd);
        return -1;
    }
    if (pread(fd, header, sizeof(header), 0) != (ssize_t)sizeof(header)) {
        snprintf(err, errlen, "shard '%s': cannot read header: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    int32_t magic = get_i32(header), version = get_i32(header + 4), count = get_i32(header + 8);
    const char *bad = NULL;
    char detail[200];
    if (magic != DATA_MAGIC) {
        snprintf(detail, sizeof(detail), "bad magic %d (expected %d; not a token shard)", magic,
                 DATA_MAGIC);
        bad = detail;
    } else if (version != 1 && version != 2) {
        snprintf(detail, sizeof(detail),
                 "unsupported version %d (1 = uint16 tokens, 2 = uint32 tokens)", version);
        bad = detail;
    } else if (count < 0) {
        snprintf(detail, sizeof(detail), "negative token count %d in header", count);
        bad = detail;
    } else {
        uint64_t bpt = version == 1 ? 2 : 4;
        uint64_t body = (uint64_t)size - DATA_HEADER_BYTES;
        if (body != (uint64_t)count * bpt) {
            snprintf(detail, sizeof(detail),
                     "header says %d tokens but file holds %llu%s (%lld bytes, %llu per token)",
                     count, (unsigned long long)(body / bpt), body % bpt ? " and a fraction" : "",
                     (long long)size, (unsigned long long)bpt);
            bad = detail;
        }
    }
    if (bad) {
        snprintf(err, errlen, "shard '%s': %s", path, bad);
        close(fd);
        return -1;
    }
    s->version = version;
    s->ntokens = (uint64_t)count;
    if (count > 0) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            snprintf(err, errlen, "shard '%s': mmap of %lld bytes failed: %s", path,
                     (long long)size, strerror(errno));
            close(fd);
            return -1;
        }
        s->map = m;
        s->map_bytes = (size_t)size;
    }
    close(fd); /* the mapping stays valid */
    s->path = strdup(path);
    mtCheck(s->path != NULL, "out of memory");
    return 0;
}

void data_loader_describe(const data_loader *dl, char *out, size_t len) {
    if (dl->nfiles == 1)
        snprintf(out, len, "'%s'", dl->first_file);
    else
        snprintf(out, len, "'%s' (%d files, first '%s')", dl->source, dl->nfiles,
                 dl->first_file ? dl->first_file : "");
}

/* nwin and the Feistel half width from ntokens and T. */
static void set_windows(data_loader *dl) {
    dl->nwin = (dl->ntokens - 1) / (uint64_t)dl->T;
    int bits = 0;
    while (bits < 63 && ((uint64_t)1 << bits) < dl->nwin)
        bits++; /* 2^bits >= nwin */
    dl->half_bits = bits < 2 ? 1 : (bits + 1) / 2;
}

int data_loader_open(data_loader *dl, const char *dir_or_pattern, const char *split, int T,
                     uint64_t seed, int shuffle, char *err, size_t errlen) {
    memset(dl, 0, sizeof(*dl));
    if (T < 1) {
        snprintf(err, errlen, "data loader for '%s': sequence length T=%d must be >= 1",
                 dir_or_pattern, T);
        return -1;
    }
    if (strlen(split) == 0 || strlen(split) >= sizeof(dl->split) || strchr(split, '/')) {
        snprintf(err, errlen, "data loader for '%s': bad split name '%s'", dir_or_pattern, split);
        return -1;
    }
    char *pattern = split_pattern(dir_or_pattern, split);
    glob_t g;
    int grc = glob(pattern, GLOB_BRACE, NULL, &g);
    struct stat st;
    if (grc == GLOB_NOMATCH && strpbrk(dir_or_pattern, "*?[{") == NULL &&
        stat(dir_or_pattern, &st) != 0) { /* a plain path that is not there */
        snprintf(err, errlen, "no such data: '%s' (%s; give a directory written by `minitrain "
                 "prepare`, llm.c's shard directory or a shard file pattern)", dir_or_pattern,
                 strerror(errno));
        free(pattern);
        return -1;
    }
    if (grc != 0) {
        snprintf(err, errlen, "no '%s' shard files match '%s'%s", split, pattern,
                 grc == GLOB_NOMATCH ? " (run `minitrain prepare` or check the path)" : "");
        if (grc != GLOB_NOMATCH)
            globfree(&g);
        free(pattern);
        return -1;
    }
    strcpy(dl->split, split);
    dl->source = pattern;
    dl->T = T;
    dl->seed = seed;
    dl->shuffle = shuffle != 0;
    dl->nfiles = (int)g.gl_pathc;
    dl->first_file = strdup(g.gl_pathv[0]);
    mtCheck(dl->first_file != NULL, "out of memory");
    dl->shards = callocCheck(g.gl_pathc, sizeof(data_shard));
    for (size_t i = 0; i < g.gl_pathc; i++) { /* glob sorts names: shard order is name order */
        data_shard s;
        if (open_shard(&s, g.gl_pathv[i], err, errlen) != 0) {
            globfree(&g);
            data_loader_close(dl);
            return -1;
        }
        if (s.ntokens == 0) {
            free(s.path);
            continue;
        }
        s.first = dl->ntokens;
        dl->ntokens += s.ntokens;
        dl->shards[dl->nshards++] = s;
    }
    globfree(&g);
    if (dl->ntokens < (uint64_t)T + 1) {
        char where[700];
        data_loader_describe(dl, where, sizeof(where));
        snprintf(err, errlen,
                 "split '%s' in %s holds %llu tokens, fewer than T+1 = %llu for one sequence",
                 split, where, (unsigned long long)dl->ntokens, (unsigned long long)T + 1);
        data_loader_close(dl);
        return -1;
    }
    set_windows(dl);
    return 0;
}

int data_loader_open_source(data_loader *dl, const data_source *src, const char *source,
                            const char *const *names, const uint64_t *ntokens, const int *version,
                            int n, const char *split, int T, uint64_t seed, int shuffle,
                            char *err, size_t errlen) {
    memset(dl, 0, sizeof(*dl));
    if (T < 1 || n < 1 || strlen(split) == 0 || strlen(split) >= sizeof(dl->split)) {
        snprintf(err, errlen, "data loader for '%s': no '%s' shards (or T=%d < 1)", source, split,
                 T);
        return -1;
    }
    snprintf(dl->split, sizeof(dl->split), "%s", split);
    dl->src = src;
    dl->source = strdup(source);
    dl->first_file = strdup(names[0]);
    mtCheck(dl->source && dl->first_file, "out of memory");
    dl->T = T;
    dl->seed = seed;
    dl->shuffle = shuffle != 0;
    dl->nfiles = n;
    dl->shards = callocCheck((size_t)n, sizeof(data_shard));
    for (int k = 0; k < n; k++) {
        if (version[k] != 1 && version[k] != 2) {
            snprintf(err, errlen, "shard '%s': unsupported version %d", names[k], version[k]);
            data_loader_close(dl);
            return -1;
        }
        data_shard *s = &dl->shards[dl->nshards++];
        s->path = strdup(names[k]);
        mtCheck(s->path != NULL, "out of memory");
        s->version = version[k];
        s->ntokens = ntokens[k];
        s->first = dl->ntokens;
        dl->ntokens += ntokens[k];
    }
    if (dl->ntokens < (uint64_t)T + 1) {
        snprintf(err, errlen, "split '%s' in '%s' holds %llu tokens, fewer than T+1 = %llu for "
                 "one sequence", split, source, (unsigned long long)dl->ntokens,
                 (unsigned long long)T + 1);
        data_loader_close(dl);
        return -1;
    }
    set_windows(dl);
    return 0;
}

/* The tokens of shard k (after the header): its map, or the source's (pinned until unpin). */
static const uint8_t *pin(const data_loader *dl, int k) {
    const data_shard *s = &dl->shards[k];
    if (!dl->src) return s->map + DATA_HEADER_BYTES;
    char err[600];
    const uint8_t *m = dl->src->acquire(dl->src->user, k, err, sizeof(err));
    if (!m) mt_fail("data: %s", err);
    return m + DATA_HEADER_BYTES;
}

static void unpin(const data_loader *dl, int k) {
    if (dl->src) dl->src->release(dl->src->user, k);
}

int data_loader_check_fit(const data_loader *dl, int B, char *err, size_t errlen) {
    char where[700];
    data_loader_describe(dl, where, sizeof(where));
    if (B < 1) {
        snprintf(err, errlen, "split '%s' in %s: batch size B=%d must be >= 1", dl->split, where,
                 B);
        return -1;
    }
    uint64_t need = (uint64_t)B * (uint64_t)dl->T + 1;
    if (dl->ntokens < need) {
        snprintf(err, errlen,
                 "split '%s' in %s holds %llu tokens, fewer than B*T+1 = %llu (B=%d, T=%d); "
                 "lower batch_size or seq_len, or add data",
                 dl->split, where, (unsigned long long)dl->ntokens, (unsigned long long)need, B,
                 dl->T);
        return -1;
    }
    return 0;
}

int data_loader_check_vocab(const data_loader *dl, int vocab_size, char *err, size_t errlen) {
    for (int k = 0; k < dl->nshards; k++) {
        const data_shard *s = &dl->shards[k];
        const uint8_t *body = pin(dl, k);
        for (uint64_t i = 0; i < s->ntokens; i++) {
            uint32_t v =
                s->version == 1 ? ((const uint16_t *)body)[i] : ((const uint32_t *)body)[i];
            if (v >= (uint32_t)vocab_size) {
                snprintf(err, errlen,
                         "shard '%s': token %u at index %llu is >= vocab_size %d "
                         "(shards and tokenizer/model do not match)",
                         s->path, v, (unsigned long long)i, vocab_size);
                unpin(dl, k);
                return -1;
            }
        }
        unpin(dl, k);
    }
    return 0;
}

uint64_t data_loader_num_tokens(const data_loader *dl) { return dl->ntokens; }

uint64_t data_loader_num_windows(const data_loader *dl) { return dl->nwin; }

/* ---------------------------------------------------------------------------------------------
 * shuffle and reads */

/* One pass of the balanced Feistel network on 2*h bits with round keys rk. */
static uint64_t feistel(uint64_t x, int h, const uint64_t *rk) {
    uint64_t mask = h >= 32 ? 0xffffffffull : (((uint64_t)1 << h) - 1);
    uint64_t L = x >> h, R = x & mask;
    for (int r = 0; r < FEISTEL_ROUNDS; r++) {
        uint64_t nl = R;
        R = L ^ (rng_mix64(R ^ rk[r]) & mask);
        L = nl;
    }
    return (L << h) | R;
}

uint64_t data_loader_window(const data_loader *dl, uint64_t seq_index) {
    uint64_t w = seq_index % dl->nwin, epoch = seq_index / dl->nwin;
    if (!dl->shuffle || dl->nwin == 1)
        return w;
    uint64_t key = rng_mix64(dl->seed ^ rng_mix64(epoch + 0x9e3779b97f4a7c15ull));
    uint64_t rk[FEISTEL_ROUNDS];
    for (int r = 0; r < FEISTEL_ROUNDS; r++)
        rk[r] = rng_mix64(key + (uint64_t)(r + 1) * 0x632be59bd9b4e019ull);
    /* cycle-walk: the domain 4^h < 4*nwin, so ~4 passes at worst on average */
    do {
        w = feistel(w, dl->half_bits, rk);
    } while (w >= dl->nwin);
    return w;
}

/* shard holding token index pos (pos < ntokens) */
static int find_shard(const data_loader *dl, uint64_t pos) {
    int lo = 0, hi = dl->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->shards[mid].first <= pos)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void data_loader_get(const data_loader *dl, uint64_t seq_index, int count, int *inputs,
                     int *targets) {
    const int T = dl->T;
    for (int b = 0; b < count; b++) {
        uint64_t pos = data_loader_window(dl, seq_index + (uint64_t)b) * (uint64_t)T;
        int *inp = inputs + (size_t)b * T;  // (T)
        int *tgt = targets + (size_t)b * T; // (T)
        int k = find_shard(dl, pos);
        int j = 0; /* j-th token of the window, 0..T */
        while (j <= T) {
            const data_shard *s = &dl->shards[k];
            uint64_t local = pos + (uint64_t)j - s->first;
            uint64_t avail = s->ntokens - local;
            int take = (uint64_t)(T + 1 - j) < avail ? T + 1 - j : (int)avail;
            const uint8_t *body = pin(dl, k);
            for (int q = 0; q < take; q++, j++) {
                int v = s->version == 1 ? (int)((const uint16_t *)body)[local + (uint64_t)q]
                                        : (int)((const uint32_t *)body)[local + (uint64_t)q];
                if (j < T)
                    inp[j] = v;
                if (j > 0)
                    tgt[j - 1] = v;
            }
            unpin(dl, k);
            k++; /* window continues in the next shard */
        }
    }
}

void data_loader_close(data_loader *dl) {
    for (int k = 0; k < dl->nshards; k++) {
        if (dl->shards[k].map)
            munmap((void *)dl->shards[k].map, dl->shards[k].map_bytes);
        free(dl->shards[k].path);
    }
    free(dl->shards);
    free(dl->source);
    free(dl->first_file);
    memset(dl, 0, sizeof(*dl));
}
