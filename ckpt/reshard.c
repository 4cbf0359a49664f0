/*
 * ckpt/reshard.c — box reads of logical tensors across shard files (see ckpt/reshard.h).
 *
 * For each piece of the tensor: intersect the piece's box with the requested box, then copy the
 * intersection run by run. A run is the longest stretch that is contiguous in both the piece and
 * the requested box: trailing dimensions that the intersection covers fully in both are merged
 * into the run, so a row-split (tp) piece is read in one or a few preads. Coverage of the
 * requested box is tracked with a byte mask (one byte per element, only when the box is not one
 * whole piece), so overlapping pieces are harmless and a hole is reported, not left as garbage.
 */
#include "ckpt/reshard.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int ckpt_fileset_open(ckpt_fileset *fs, const char *dir, const char *prefix, char *err,
                      size_t errlen) {
    fs->files = NULL;
    fs->n = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        mt_errf(err, errlen, "cannot open checkpoint directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || !ends_with(e->d_name, ".safetensors"))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **grown = realloc(names, sizeof(*names) * (size_t)cap);
            mtCheck(grown != NULL, "out of memory listing checkpoint files");
            names = grown;
        }
        names[n] = strdup(e->d_name);
        mtCheck(names[n] != NULL, "out of memory listing checkpoint files");
        n++;
    }
    closedir(d);
    if (n == 0) {
        mt_errf(err, errlen, "%s: no %s*.safetensors files", dir, prefix);
        free(names);
        return -1;
    }
    qsort(names, (size_t)n, sizeof(*names), cmp_cstr);
    fs->files = callocCheck((size_t)n, sizeof(st_file));
    int rc = 0;
    char path[CKPT_PATH_MAX];
    for (int i = 0; i < n; i++) {
        if (rc == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
            if (st_open(&fs->files[fs->n], path, err, errlen) != 0) rc = -1;
            else fs->n++;
        }
        free(names[i]);
    }
    free(names);
    if (rc != 0) ckpt_fileset_close(fs);
    return rc;
}

void ckpt_fileset_close(ckpt_fileset *fs) {
    for (int i = 0; i < fs->n; i++) st_close(&fs->files[i]);
    free(fs->files);
    fs->files = NULL;
    fs->n = 0;
}

int ckpt_fileset_global(const ckpt_fileset *fs, const char *name, st_shard *global,
                        st_dtype *dtype, char *err, size_t errlen) {
    for (int i = 0; i < fs->n; i++) {
        const st_info *info = st_find(&fs->files[i], name);
        if (info == NULL) continue;
        if (st_shard_get(&fs->files[i], name, global, err, errlen) < 0) return -1;
        if (dtype) *dtype = info->dtype;
        return 1;
    }
    return 0;
}

/* pread exactly n bytes at off, looping over short reads and EINTR. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO; /* end of file: truncated after open */
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static void fmt_dims(char *buf, size_t len, int ndim, const int64_t *v) {
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, d ? "," : "", v[d]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* Copy the intersection of one piece (shape p, offset po, data at file byte `base`) with the box
 * (offset bo, extent be) into dst; mark covered elements in mask (may be NULL). Returns 0/-1. */
static int copy_piece(const st_file *f, const st_info *info, const st_shard *sh, int ndim,
                      const int64_t *bo, const int64_t *be, size_t esz, char *dst,
                      unsigned char *mask, const char *name, char *err, size_t errlen) {
    int64_t lo[ST_MAX_DIMS], hi[ST_MAX_DIMS], ps[ST_MAX_DIMS], bs[ST_MAX_DIMS];
    const int64_t *p = info->shape, *po = sh->offset;
    for (int d = 0; d < ndim; d++) {
        lo[d] = po[d] > bo[d] ? po[d] : bo[d];
        hi[d] = po[d] + p[d] < bo[d] + be[d] ? po[d] + p[d] : bo[d] + be[d];
        if (lo[d] >= hi[d]) return 0; /* no overlap */
    }
    int64_t sp = 1, sb = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        ps[d] = sp;
        bs[d] = sb;
        sp *= p[d];
        sb *= be[d];
    }
    /* run = dims k.. ; dims after k are full in piece and box */
    int k = ndim - 1;
    int64_t run = ndim > 0 ? hi[k] - lo[k] : 1;
    while (k > 0 && hi[k] - lo[k] == p[k] && hi[k] - lo[k] == be[k]) {
        k--;
        run *= hi[k] - lo[k];
    }
    int64_t idx[ST_MAX_DIMS] = {0};
    for (;;) {
        int64_t src = 0, dsto = 0;
        for (int d = 0; d < ndim; d++) {
            int64_t i = d < k ? idx[d] : 0;
            src += (lo[d] + i - po[d]) * ps[d];
            dsto += (lo[d] + i - bo[d]) * bs[d];
        }
        if (pread_all(f->fd, dst + (size_t)dsto * esz, (size_t)run * esz,
                      info->offset + (uint64_t)src * esz) != 0) {
            mt_errf(err, errlen, "%s: tensor '%s': read failed: %s", f->path, name,
                    strerror(errno));
            return -1;
        }
        if (mask) memset(mask + dsto, 1, (size_t)run);
        int d = k - 1; /* odometer over the outer dims [0, k) */
        while (d >= 0 && ++idx[d] == hi[d] - lo[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    return 0;
}

int ckpt_read_region(const ckpt_fileset *fs, const char *name, st_dtype dtype, int ndim,
                     const int64_t *global, const int64_t *offset, const int64_t *extent,
                     void *dst, char *err, size_t errlen) {
    char g1[128], g2[128];
    size_t esz = st_dtype_size(dtype);
    if (esz == 0 || ndim < 0 || ndim > ST_MAX_DIMS) {
        mt_errf(err, errlen, "tensor '%s': invalid dtype or rank %d requested", name, ndim);
        return -1;
    }
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (offset[d] < 0 || extent[d] < 0 || offset[d] + extent[d] > global[d]) {
            fmt_dims(g1, sizeof(g1), ndim, offset);
            fmt_dims(g2, sizeof(g2), ndim, extent);
            mt_errf(err, errlen, "tensor '%s': box at %s of extent %s lies outside the global "
                    "shape", name, g1, g2);
            return -1;
        }
        numel *= extent[d];
    }
    /* pass 1: check every piece; find one that is exactly the box (the common case) */
    int found = 0, exact = -1;
    for (int i = 0; i < fs->n; i++) {
        const st_info *info = st_find(&fs->files[i], name);
        if (info == NULL) continue;
        found = 1;
        st_shard sh;
        if (st_shard_get(&fs->files[i], name, &sh, err, errlen) < 0) return -1;
        int same = info->dtype == dtype && sh.ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = sh.global[d] == global[d];
        if (!same) {
            fmt_dims(g1, sizeof(g1), sh.ndim, sh.global);
            fmt_dims(g2, sizeof(g2), ndim, global);
            mt_errf(err, errlen, "%s: tensor '%s' is %s %s in the checkpoint, expected %s %s "
                    "(the checkpoint belongs to a different model)", fs->files[i].path, name,
                    st_dtype_name(info->dtype), g1, st_dtype_name(dtype), g2);
            return -1;
        }
        int is_box = 1;
        for (int d = 0; d < ndim; d++)
            is_box = is_box && sh.offset[d] == offset[d] && info->shape[d] == extent[d];
        if (is_box && exact < 0) exact = i;
    }
    if (!found) {
        mt_errf(err, errlen, "tensor '%s' is in none of the %d checkpoint file(s)%s%s", name,
                fs->n, fs->n ? ", e.g. " : "", fs->n ? fs->files[0].path : "");
        return -1;
    }
    if (numel == 0) return 0;
    if (exact >= 0) {
        const st_file *f = &fs->files[exact];
        const st_info *info = st_find(f, name);
        if (pread_all(f->fd, dst, (size_t)numel * esz, info->offset) != 0) {
            mt_errf(err, errlen, "%s: tensor '%s': read failed: %s", f->path, name,
                    strerror(errno));
            return -1;
        }
        return 0;
    }
    unsigned char *mask = callocCheck((size_t)numel, 1);
    int rc = 0;
    for (int i = 0; i < fs->n && rc == 0; i++) {
        const st_info *info = st_find(&fs->files[i], name);
        if (info == NULL) continue;
        st_shard sh;
        if (st_shard_get(&fs->files[i], name, &sh, err, errlen) < 0) rc = -1;
        else rc = copy_piece(&fs->files[i], info, &sh, ndim, offset, extent, esz, dst, mask, name,
                             err, errlen);
    }
    if (rc == 0) {
        const unsigned char *hole = memchr(mask, 0, (size_t)numel);
        if (hole != NULL) {
            fmt_dims(g1, sizeof(g1), ndim, offset);
            fmt_dims(g2, sizeof(g2), ndim, extent);
            mt_errf(err, errlen, "tensor '%s': the checkpoint files cover only part of the box "
                    "at %s of extent %s (first missing element %td; is a shard file missing?)",
                    name, g1, g2, hole - mask);
            rc = -1;
        }
    }
    free(mask);
    return rc;
}
