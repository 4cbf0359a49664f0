/*
 * tests/enospc_shim.c — a full disk on demand, for tests: an LD_PRELOAD library whose write(2)
 * family fails with ENOSPC on chosen files.
 *
 *   cc -shared -fPIC -O2 -o enospc.so tests/enospc_shim.c -ldl
 *   MT_ENOSPC_MATCH=model.safetensors LD_PRELOAD=./enospc.so minitrain train ...
 *
 *   MT_ENOSPC_MATCH  a substring of the path (as /proc/self/fd/N names it) of the files whose
 *                    writes fail; unset = the shim does nothing
 *   MT_ENOSPC_AFTER  bytes the process may still write to such files before they fail (default 0),
 *                    so a failure can strike in the middle of a file
 *   MT_ENOSPC_ONCE   a marker path: the first failure creates it, and while it exists the shim is
 *                    inert — the disk is full for one process (one attempt of a supervised job),
 *                    then "freed", as an operator would
 *
 * Why a shim and not a small tmpfs: mounting needs privileges a CI container may not have, and
 * the shim can fail one file of a checkpoint while the rest of the run directory works. Every file
 * minitrain keeps is written with write(2) (core/fs, ckpt/), which an LD_PRELOAD library
 * interposes; stdio's internal writes are not interposed and minitrain does not use them for files.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long long g_budget = -2; /* -2 = not read yet, -1 = inert */

/* 1 when a write of n bytes to fd must fail now. */
static int must_fail(int fd, size_t n) {
    const char *match = getenv("MT_ENOSPC_MATCH");
    if (!match || !match[0]) return 0;
    const char *once = getenv("MT_ENOSPC_ONCE");
    if (once && once[0] && access(once, F_OK) == 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, sizeof(path) - 1);
    if (k <= 0) return 0;
    path[k] = '\0';
    if (!strstr(path, match)) return 0;
    if (g_budget == -2) {
        const char *a = getenv("MT_ENOSPC_AFTER");
        g_budget = a ? atoll(a) : 0;
    }
    if (g_budget >= (long long)n) {
        g_budget -= (long long)n;
        return 0;
    }
    if (once && once[0]) {
        int m = open(once, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (m >= 0) close(m);
    }
    fprintf(stderr, "enospc_shim: failing a write of %zu bytes to %s with ENOSPC\n", n, path);
    errno = ENOSPC;
    return 1;
}

typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwrite64_fn)(int, const void *, size_t, off64_t);
typedef ssize_t (*writev_fn)(int, const struct iovec *, int);

#define REAL(name)                     \
    static name##_fn real_##name;      \
    if (!real_##name) real_##name = (name##_fn)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write);
    if (must_fail(fd, n)) return -1;
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite);
    if (must_fail(fd, n)) return -1;
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    REAL(pwrite64);
    if (must_fail(fd, n)) return -1;
    return real_pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    REAL(writev);
    size_t n = 0;
    for (int i = 0; i < cnt; i++) n += iov[i].iov_len;
    if (must_fail(fd, n)) return -1;
    return real_writev(fd, iov, cnt);
}
