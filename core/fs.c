/*
 * core/fs.c — durable, atomic file writes and the directory operations around them (core/fs.h).
 *
 * Why this shape: a file a user keeps (a checkpoint shard, a tokenizer, a token shard that took
 * minutes to prepare) must survive a crash or a full disk at any instant without losing what was
 * already there. The classic recipe — write under a temporary name, fsync, rename over the final
 * name, fsync the directory — is implemented once here and used by every writer. Errors are
 * returned (path + strerror, errno kept), never turned into exits.
 */
#define _GNU_SOURCE /* nftw(3) */
#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

/* mt_errf that leaves errno as the failing call set it (callers may format their own message) */
#define fail_errf(err, errlen, ...)                                                                \
    do {                                                                                           \
        int saved_errno_ = errno;                                                                  \
        mt_errf(err, errlen, __VA_ARGS__);                                                         \
        errno = saved_errno_;                                                                      \
    } while (0)

int fs_join(char *buf, size_t len, const char *dir, const char *name, char *err, size_t errlen) {
    int w = snprintf(buf, len, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= len) {
        errno = ENAMETOOLONG;
        fail_errf(err, errlen, "path too long: '%s/%s'", dir, name);
        return -1;
    }
    return 0;
}

/* Parent directory of path into buf ("." when path has no slash, "/" for "/x"). */
static int parent_dir(char *buf, size_t len, const char *path) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) return snprintf(buf, len, ".") < (int)len ? 0 : -1;
    size_t n = (slash == path) ? 1 : (size_t)(slash - path);
    if (n + 1 > len) return -1;
    memcpy(buf, path, n);
    buf[n] = '\0';
    return 0;
}

int fs_fsync_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fail_errf(err, errlen, "cannot open directory '%s' to fsync it: %s", dir, strerror(errno));
        return -1;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        fail_errf(err, errlen, "fsync of directory '%s' failed: %s", dir, strerror(e));
        return -1;
    }
    close(fd);
    return 0;
}

/* ---- atomic files ------------------------------------------------------------------------------ */

void fs_afile_abort(fs_afile *a) {
    int e = errno;
    if (a->fd >= 0) {
        close(a->fd);
        a->fd = -1;
    }
    if (a->tmp[0] != '\0') {
        unlink(a->tmp);
        a->tmp[0] = '\0';
    }
    errno = e;
}

int fs_afile_open(fs_afile *a, const char *path, char *err, size_t errlen) {
    static atomic_uint counter; /* distinct partial names for concurrent writers in one process */
    a->fd = -1;
    a->bytes = 0;
    a->tmp[0] = '\0';
    if (path == NULL || path[0] == '\0') {
        errno = ENOENT;
        fail_errf(err, errlen, "empty output path");
        return -1;
    }
    unsigned k = atomic_fetch_add(&counter, 1u);
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path ||
        snprintf(a->tmp, sizeof a->tmp, "%s.part.%ld.%u", path, (long)getpid(), k) >=
            (int)sizeof a->tmp) {
        a->tmp[0] = '\0';
        errno = ENAMETOOLONG;
        fail_errf(err, errlen, "path too long: '%s'", path);
        return -1;
    }
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        fail_errf(err, errlen, "cannot create '%s': %s", a->tmp, strerror(errno));
        a->tmp[0] = '\0';
        return -1;
    }
    return 0;
}

int fs_afile_write(fs_afile *a, const void *buf, size_t n, char *err, size_t errlen) {
    const unsigned char *p = buf;
    const size_t max_chunk = (size_t)1 << 30; /* Linux transfers at most ~2 GiB per write() */
    while (n > 0) {
        size_t want = n < max_chunk ? n : max_chunk;
        ssize_t put = write(a->fd, p, want);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            int e = (put == 0) ? ENOSPC : errno;
            errno = e;
            fail_errf(err, errlen, "write to '%s' failed at byte %llu: %s", a->path,
                      (unsigned long long)a->bytes, strerror(e));
            fs_afile_abort(a);
            return -1;
        }
        p += put;
        n -= (size_t)put;
        a->bytes += (uint64_t)put;
    }
    return 0;
}

int fs_afile_commit(fs_afile *a, char *err, size_t errlen) {
    if (fsync(a->fd) != 0) {
        fail_errf(err, errlen, "fsync of '%s' failed: %s", a->path, strerror(errno));
        fs_afile_abort(a);
        return -1;
    }
    int rc = close(a->fd);
    a->fd = -1;
    if (rc != 0) { /* e.g. EIO/ENOSPC reported late by network file systems */
        fail_errf(err, errlen, "close of '%s' failed: %s", a->path, strerror(errno));
        fs_afile_abort(a);
        return -1;
    }
    if (rename(a->tmp, a->path) != 0) {
        fail_errf(err, errlen, "rename '%s' -> '%s' failed: %s", a->tmp, a->path, strerror(errno));
        fs_afile_abort(a);
        return -1;
    }
    a->tmp[0] = '\0';
    char dir[FS_PATH_MAX];
    if (parent_dir(dir, sizeof dir, a->path) != 0) {
        errno = ENAMETOOLONG;
        fail_errf(err, errlen, "path too long: '%s'", a->path);
        return -1;
    }
    return fs_fsync_dir(dir, err, errlen);
}

FILE *fs_stream_open(fs_afile *a, const char *path, char *err, size_t errlen) {
    if (fs_afile_open(a, path, err, errlen) != 0) return NULL;
    int fd = dup(a->fd);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (f == NULL) {
        fail_errf(err, errlen, "cannot open a stream on '%s': %s", a->tmp, strerror(errno));
        if (fd >= 0) close(fd);
        fs_afile_abort(a);
    }
    return f;
}

int fs_stream_commit(fs_afile *a, FILE *f, char *err, size_t errlen) {
    int flushed = fflush(f) == 0 && !ferror(f);
    int e = errno;
    if (fclose(f) != 0 && flushed) flushed = 0, e = errno;
    if (!flushed) {
        errno = e;
        fail_errf(err, errlen, "write to '%s' failed: %s", a->path, strerror(e));
        fs_afile_abort(a);
        return -1;
    }
    return fs_afile_commit(a, err, errlen);
}

void fs_stream_abort(fs_afile *a, FILE *f) {
    if (f) fclose(f);
    fs_afile_abort(a);
}

int fs_write_atomic(const char *path, const void *buf, size_t n, char *err, size_t errlen) {
    fs_afile a;
    if (fs_afile_open(&a, path, err, errlen) != 0) return -1;
    if (fs_afile_write(&a, buf, n, err, errlen) != 0) return -1;
    return fs_afile_commit(&a, err, errlen);
}

int fs_copy_file(const char *src, const char *dst, char *err, size_t errlen) {
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail_errf(err, errlen, "cannot open '%s': %s", src, strerror(errno));
        return -1;
    }
    fs_afile a;
    if (fs_afile_open(&a, dst, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    size_t cap = (size_t)4 << 20;
    char *buf = mallocCheck(cap);
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            fail_errf(err, errlen, "cannot read '%s': %s", src, strerror(errno));
            fs_afile_abort(&a);
            rc = -1;
            break;
        }
        if (n == 0) break;
        if (fs_afile_write(&a, buf, (size_t)n, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0) rc = fs_afile_commit(&a, err, errlen);
    free(buf);
    close(fd);
    return rc;
}

int fs_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err,
                 size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail_errf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        mt_errf(err, errlen, "'%s' is not a readable regular file%s%s", path, e ? ": " : "",
                e ? strerror(e) : "");
        errno = e ? e : EINVAL;
        return -1;
    }
    if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
        close(fd);
        errno = EFBIG;
        fail_errf(err, errlen, "'%s' is %lld bytes, more than the %zu allowed", path,
                  (long long)st.st_size, max_bytes);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (buf == NULL) {
        close(fd);
        errno = ENOMEM;
        fail_errf(err, errlen, "out of memory reading '%s'", path);
        return -1;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = (r == 0) ? 0 : errno;
            free(buf);
            close(fd);
            mt_errf(err, errlen, "short read of '%s' (%zu of %zu bytes)%s%s", path, got, size,
                    e ? ": " : "", e ? strerror(e) : "");
            errno = e ? e : EIO;
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = '\0';
    *out = buf;
    if (len) *len = size;
    return 0;
}

/* ---- directories ------------------------------------------------------------------------------- */

int fs_mkdir_p(const char *dir, char *err, size_t errlen) {
    char buf[FS_PATH_MAX];
    if (dir == NULL || dir[0] == '\0') {
        errno = ENOENT;
        fail_errf(err, errlen, "empty directory path");
        return -1;
    }
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        fail_errf(err, errlen, "path too long: '%s'", dir);
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                fail_errf(err, errlen, "cannot create directory '%s': %s", buf, strerror(errno));
                return -1;
            }
            *p = saved;
            if (saved == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        fail_errf(err, errlen, "cannot create directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        fail_errf(err, errlen, "'%s' exists and is not a directory", dir);
        return -1;
    }
    return 0;
}

/* nftw has no user pointer: the failing entry of this thread's walk is kept here */
static _Thread_local struct {
    char path[FS_PATH_MAX];
    int err;
} tl_rm;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    if (flag == FTW_NS || flag == FTW_DNR) { /* cannot stat / read: report, unless it vanished */
        if (errno == ENOENT) return 0;
        tl_rm.err = errno;
        snprintf(tl_rm.path, sizeof tl_rm.path, "%s", path);
        return 1;
    }
    int rc = (flag == FTW_DP) ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT) {
        tl_rm.err = errno;
        snprintf(tl_rm.path, sizeof tl_rm.path, "%s", path);
        return 1;
    }
    return 0;
}

int fs_remove_tree(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        fail_errf(err, errlen, "cannot stat '%s': %s", path, strerror(errno));
        return -1;
    }
    tl_rm.err = 0;
    tl_rm.path[0] = '\0';
    int rc = nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc == 0) return 0;
    if (rc > 0) {
        errno = tl_rm.err;
        fail_errf(err, errlen, "cannot remove '%s': %s", tl_rm.path, strerror(tl_rm.err));
    } else {
        fail_errf(err, errlen, "cannot walk '%s' to remove it: %s", path, strerror(errno));
    }
    return -1;
}

int fs_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return strcmp(a, b) == 0;
}

/* 1 when the directory dir (a real path) is root or lies under it */
static int dir_within(const char *dir, const char *root) {
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/') return 1;
    return strncmp(dir, root, n) == 0 && (dir[n] == '\0' || dir[n] == '/');
}

int fs_check_output(const char *path, const char *const *protect, int flags, char *err,
                    size_t errlen) {
    char dir[FS_PATH_MAX], real_dir[FS_PATH_MAX];
    struct stat st, sd;
    if (parent_dir(dir, sizeof(dir), path) != 0) {
        mt_errf(err, errlen, "output path too long: '%.200s...'", path);
        return -1;
    }
    if (flags & FS_OUT_MAKE_DIR) /* the nearest ancestor that exists stands for dir */
        while (stat(dir, &sd) != 0 && errno == ENOENT && strcmp(dir, ".") && strcmp(dir, "/")) {
            char up[FS_PATH_MAX];
            snprintf(up, sizeof(up), "%s", dir);
            if (parent_dir(dir, sizeof(dir), up) != 0) break;
        }
    int why = stat(dir, &sd) != 0 ? errno : !S_ISDIR(sd.st_mode) ? ENOTDIR
              : access(dir, W_OK) != 0 ? errno : 0;
    if (why) {
        mt_errf(err, errlen, "%s: cannot write into directory '%s' (%s)", path, dir,
                strerror(why));
        return -1;
    }
    int answer = FS_OUT_ATOMIC;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode)) {
            char target[FS_PATH_MAX];
            ssize_t n = readlink(path, target, sizeof(target) - 1);
            target[n > 0 ? n : 0] = '\0';
            mt_errf(err, errlen, "%s is a symbolic link (to '%s'): writing would replace the link, "
                    "not its target; name the target itself", path, target);
            return -1;
        }
        if (S_ISDIR(st.st_mode)) {
            mt_errf(err, errlen, "%s is a directory; name a file inside it", path);
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            if (!(flags & FS_OUT_ALLOW_IN_PLACE)) {
                mt_errf(err, errlen, "%s is not a regular file (%s): this output is written "
                        "under a temporary name and renamed over, which would replace it; name a "
                        "regular file", path, S_ISFIFO(st.st_mode) ? "a FIFO"
                        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device node" : "a socket");
                return -1;
            }
            answer = FS_OUT_IN_PLACE;
        }
    }
    if (realpath(dir, real_dir) == NULL) {
        mt_errf(err, errlen, "%s: cannot resolve directory '%s' (%s)", path, dir, strerror(errno));
        return -1;
    }
    for (int k = 0; protect && protect[k]; k++) {
        struct stat sp;
        char real_p[FS_PATH_MAX];
        if (stat(protect[k], &sp) != 0) continue;
        if (S_ISDIR(sp.st_mode)) {
            if (realpath(protect[k], real_p) && dir_within(real_dir, real_p)) {
                mt_errf(err, errlen, "%s lies inside %s, whose files an output must not "
                        "replace; write the output elsewhere",
                        path, protect[k]);
                return -1;
            }
        } else if (fs_same_file(path, protect[k])) {
            mt_errf(err, errlen, "%s is %s, which minitrain keeps; write the output elsewhere",
                    path, protect[k]);
            return -1;
        }
    }
    return answer;
}
