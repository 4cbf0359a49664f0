/*
 * ckpt/bulkio.c — one large checkpoint file written at disk speed (see ckpt/bulkio.h).
 *
 * Where the time of a save went before (bench/bench_ckpt, GPT-2 124M, 1.49 GB): st_write handed
 * each tensor to one write() and fsynced at the end, so 1.5 GB of dirty pages piled up in the page
 * cache before the disk was asked for most of them, and ckpt_commit then read every file back to
 * checksum it. Here, per chunk of CKPT_IO_CHUNK bytes:
 *   1. CRC-32C of the chunk (hardware crc32; the chunk is then hot in cache for the copy);
 *   2. write() of the chunk — or, with O_DIRECT, a copy into an aligned bounce buffer written
 *      with pwrite at an aligned offset (the page cache is bypassed entirely);
 *   3. buffered path, every CKPT_IO_WINDOW bytes: sync_file_range(WRITE) starts the writeback of
 *      the window just written, sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER) waits for the
 *      window before it, and posix_fadvise(DONTNEED) drops those now-clean pages — the disk is
 *      kept busy from the first window on and the final fsync finds almost nothing dirty (the
 *      streaming-write recipe Linus Torvalds described on LKML, 2010).
 * The durability contract is untouched: fs_afile's partial file, fsync (which also covers the
 * inode and the O_DIRECT extents), rename, parent fsync. sync_file_range is only a hint, but an
 * error it returns is a write error: it consumes the file's error state (errseq), so the later
 * fsync might not report it again. On tmpfs (tier 0) there is no writeback: plain writes.
 */
#define _GNU_SOURCE /* sync_file_range, O_DIRECT */
#include "ckpt/bulkio.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "core/check.h"
#include "core/fs.h"
#include "core/timer.h"

#define IO_ALIGN 4096u

typedef struct {
    fs_afile a;
    const char *path;
    int dfd;                 /* O_DIRECT descriptor of the partial file, or -1 */
    int writeback;           /* buffered path on a real disk: manage writeback windows */
    size_t chunk, window;
    unsigned char *bounce;   /* O_DIRECT: aligned buffer of `chunk` bytes */
    size_t fill;
    uint64_t off;            /* bytes handed to the file so far */
    uint64_t started;        /* writeback started up to here */
    uint64_t waited;         /* writeback waited for (and pages dropped) up to here */
    uint32_t crc;
    ckpt_io_stats st;
    char *err;
    size_t errlen;
} io_sink;

void ckpt_io_stats_add(ckpt_io_stats *a, const ckpt_io_stats *b) {
    a->header_ms += b->header_ms;
    a->write_ms += b->write_ms;
    a->crc_ms += b->crc_ms;
    a->sync_ms += b->sync_ms;
    a->bytes += b->bytes;
    a->files += b->files;
}

static int io_fail(io_sink *s, const char *what) {
    int e = errno;
    mt_errf(s->err, s->errlen, "%s of '%s' failed at byte %llu: %s", what, s->path,
            (unsigned long long)s->off, strerror(e));
    if (s->dfd >= 0) close(s->dfd);
    s->dfd = -1;
    fs_afile_abort(&s->a);
    errno = e;
    return -1;
}

/* sync_file_range, where "not supported here" turns the windows off instead of failing. */
static int io_range(io_sink *s, uint64_t from, uint64_t to, unsigned flags) {
    if (to <= from) return 0;
    if (sync_file_range(s->a.fd, (off64_t)from, (off64_t)(to - from), flags) == 0) return 0;
    if (errno == EINVAL || errno == ENOSYS || errno == ESPIPE) {
        s->writeback = 0;
        return 0;
    }
    return io_fail(s, "sync_file_range");
}

/* Buffered path: after a write, start the window just filled and retire the one before it. */
static int io_windows(io_sink *s) {
    while (s->writeback && s->off - s->started >= s->window) {
        uint64_t end = s->started + s->window;
        double t = timer_now();
        if (io_range(s, s->started, end, SYNC_FILE_RANGE_WRITE) != 0) return -1;
        s->started = end;
        if (s->started >= 2 * s->window) {
            uint64_t to = s->started - s->window;
            if (io_range(s, s->waited, to, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                               SYNC_FILE_RANGE_WAIT_AFTER) != 0)
                return -1;
            posix_fadvise(s->a.fd, (off_t)s->waited, (off_t)(to - s->waited), POSIX_FADV_DONTNEED);
            s->waited = to;
        }
        s->st.sync_ms += (timer_now() - t) * 1e3;
    }
    return 0;
}

static int pwrite_all(int fd, const unsigned char *p, size_t n, uint64_t off) {
    while (n > 0) {
        ssize_t put = pwrite(fd, p, n, (off_t)off);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            if (put == 0) errno = ENOSPC;
            return -1;
        }
        p += put;
        n -= (size_t)put;
        off += (uint64_t)put;
    }
    return 0;
}

/* O_DIRECT path: write the first `n` bytes of the bounce buffer (a multiple of IO_ALIGN) at
 * s->off, which is aligned by construction. */
static int io_flush_bounce(io_sink *s, size_t n) {
    double t = timer_now();
    int rc = pwrite_all(s->dfd, s->bounce, n, s->off);
    if (rc != 0 && errno == EINVAL && s->off == 0) {
        /* a file system that opens O_DIRECT but refuses its writes: buffered from here on */
        close(s->dfd);
        s->dfd = -1;
        rc = pwrite_all(s->a.fd, s->bounce, n, s->off);
    }
    s->st.write_ms += (timer_now() - t) * 1e3;
    if (rc != 0) return io_fail(s, s->dfd >= 0 ? "O_DIRECT write" : "write");
    s->off += n;
    s->a.bytes = s->off;
    return 0;
}

/* Append n bytes of p: CRC, then write (buffered) or copy into the bounce buffer (direct). */
static int io_put(io_sink *s, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        size_t len;
        if (s->dfd >= 0) {
            len = s->chunk - s->fill < n ? s->chunk - s->fill : n;
            double t = timer_now();
            s->crc = ckpt_crc32c(s->crc, p, len);
            double t1 = timer_now();
            memcpy(s->bounce + s->fill, p, len);
            s->st.crc_ms += (t1 - t) * 1e3;
            s->st.write_ms += (timer_now() - t1) * 1e3;
            s->fill += len;
            if (s->fill == s->chunk) {
                if (io_flush_bounce(s, s->fill) != 0) return -1;
                s->fill = 0;
            }
        } else {
            len = s->chunk < n ? s->chunk : n;
            double t = timer_now();
            s->crc = ckpt_crc32c(s->crc, p, len);
            double t1 = timer_now();
            int rc = pwrite_all(s->a.fd, p, len, s->off);
            s->st.crc_ms += (t1 - t) * 1e3;
            s->st.write_ms += (timer_now() - t1) * 1e3;
            if (rc != 0) return io_fail(s, "write");
            s->off += len;
            s->a.bytes = s->off;
            if (io_windows(s) != 0) return -1;
        }
        p += len;
        n -= len;
    }
    return 0;
}

/* Direct path: the aligned part of what is left goes direct, the last < IO_ALIGN bytes buffered
 * (they are covered by the final fsync like the rest). */
static int io_finish(io_sink *s) {
    if (s->dfd >= 0) {
        size_t aligned = s->fill & ~(size_t)(IO_ALIGN - 1);
        if (aligned > 0 && io_flush_bounce(s, aligned) != 0) return -1;
        size_t tail = s->fill - aligned;
        if (tail > 0) {
            double t = timer_now();
            int rc = pwrite_all(s->a.fd, s->bounce + aligned, tail, s->off);
            s->st.write_ms += (timer_now() - t) * 1e3;
            if (rc != 0) return io_fail(s, "write");
            s->off += tail;
            s->a.bytes = s->off;
        }
        close(s->dfd);
        s->dfd = -1;
    }
    double t = timer_now();
    int rc = fs_afile_commit(&s->a, s->err, s->errlen); /* fsync, close, rename, fsync dir */
    s->st.sync_ms += (timer_now() - t) * 1e3;
    return rc;
}

static int on_tmpfs(int fd) {
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
}

int ckpt_io_write_st(const char *path, const st_tensor *tensors, int n, const char *metadata_json,
                     const ckpt_io_opts *o, uint32_t *crc, uint64_t *bytes, ckpt_io_stats *stats,
                     char *err, size_t errlen) {
    io_sink s;
    memset(&s, 0, sizeof(s));
    s.path = path;
    s.dfd = -1;
    s.err = err;
    s.errlen = errlen;
    s.chunk = o && o->chunk ? o->chunk : CKPT_IO_CHUNK;
    s.chunk = (s.chunk + IO_ALIGN - 1) & ~(size_t)(IO_ALIGN - 1);
    s.window = o && o->window ? o->window : CKPT_IO_WINDOW;
    double t0 = timer_now();
    size_t hbytes = 0;
    char *head = st_header_block(path, tensors, n, metadata_json, &hbytes, err, errlen);
    s.st.header_ms = (timer_now() - t0) * 1e3;
    if (head == NULL) return -1;
    if (fs_afile_open(&s.a, path, err, errlen) != 0) {
        free(head);
        return -1;
    }
    int tmpfs = on_tmpfs(s.a.fd);
    s.writeback = !tmpfs;
    if (o && o->direct && !tmpfs) {
        s.dfd = open(s.a.tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
        if (s.dfd >= 0 && posix_memalign((void **)&s.bounce, IO_ALIGN, s.chunk) != 0) {
            close(s.dfd);
            s.dfd = -1;
            s.bounce = NULL;
        }
        /* no O_DIRECT here (EINVAL): the buffered path */
    }
    int rc = io_put(&s, head, hbytes);
    for (int i = 0; rc == 0 && i < n; i++) {
        uint64_t b = 0;
        if (st_tensor_bytes(&tensors[i], &b) != 0) {
            mt_errf(err, errlen, "%s: tensor '%s' too large", path, tensors[i].name);
            if (s.dfd >= 0) close(s.dfd);
            fs_afile_abort(&s.a);
            rc = -1;
            break;
        }
        rc = io_put(&s, tensors[i].data, (size_t)b);
    }
    if (rc == 0) rc = io_finish(&s);
    free(head);
    free(s.bounce);
    if (rc != 0) return -1;
    s.st.bytes = s.off;
    s.st.files = 1;
    if (crc) *crc = s.crc;
    if (bytes) *bytes = s.off;
    if (stats) ckpt_io_stats_add(stats, &s.st);
    return 0;
}
