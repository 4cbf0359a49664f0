/*
 * ckpt/fsutil.c — durable, atomic file writes and the few directory operations checkpoints need.
 *
 * Why this shape: a checkpoint must survive a crash or a full disk at any instant without losing
 * what was already saved. The classic recipe (used by e.g. SQLite and LevelDB) is: write a new file
 * under a temporary name, fsync it, rename it over the final name (atomic on POSIX), and fsync the
 * directory so the rename itself is on disk. Every failing call is reported as an error return with
 * the path and strerror(errno), never an exit: the caller (a trainer mid-run) decides what to do.
 */
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

void ckpt_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
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

int ckpt_fsync_dir(const char *dir, char *err, size_t errlen) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        ckpt_errf(err, errlen, "cannot open directory '%s' to fsync it: %s", dir, strerror(errno));
        return -1;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        ckpt_errf(err, errlen, "fsync of directory '%s' failed: %s", dir, strerror(e));
        return -1;
    }
    close(fd);
    return 0;
}

void ckpt_afile_abort(ckpt_afile *a) {
    if (a->fd >= 0) {
        close(a->fd);
        a->fd = -1;
    }
    if (a->tmp[0] != '\0') {
        unlink(a->tmp);
        a->tmp[0] = '\0';
    }
}

int ckpt_afile_open(ckpt_afile *a, const char *path, char *err, size_t errlen) {
    static atomic_uint counter; /* distinct partial names for concurrent writers in one process */
    a->fd = -1;
    a->bytes = 0;
    a->tmp[0] = '\0';
    if (path == NULL || path[0] == '\0') {
        ckpt_errf(err, errlen, "empty output path");
        return -1;
    }
    unsigned k = atomic_fetch_add(&counter, 1u);
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path ||
        snprintf(a->tmp, sizeof a->tmp, "%s.part.%ld.%u", path, (long)getpid(), k) >=
            (int)sizeof a->tmp) {
        a->tmp[0] = '\0';
        ckpt_errf(err, errlen, "path too long: '%s'", path);
        return -1;
    }
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        ckpt_errf(err, errlen, "cannot create '%s': %s", a->tmp, strerror(errno));
        a->tmp[0] = '\0';
        return -1;
    }
    return 0;
}

int ckpt_afile_write(ckpt_afile *a, const void *buf, size_t n, char *err, size_t errlen) {
    const unsigned char *p = buf;
    const size_t max_chunk = (size_t)1 << 30; /* Linux transfers at most ~2 GiB per write() */
    while (n > 0) {
        size_t want = n < max_chunk ? n : max_chunk;
        ssize_t put = write(a->fd, p, want);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            int e = (put == 0) ? ENOSPC : errno;
            ckpt_errf(err, errlen, "write to '%s' failed at byte %llu: %s", a->path,
                      (unsigned long long)a->bytes, strerror(e));
            ckpt_afile_abort(a);
            return -1;
        }
        p += put;
        n -= (size_t)put;
        a->bytes += (uint64_t)put;
    }
    return 0;
}

int ckpt_afile_commit(ckpt_afile *a, char *err, size_t errlen) {
    if (fsync(a->fd) != 0) {
        ckpt_errf(err, errlen, "fsync of '%s' failed: %s", a->path, strerror(errno));
        ckpt_afile_abort(a);
        return -1;
    }
    int rc = close(a->fd);
    a->fd = -1;
    if (rc != 0) { /* e.g. EIO/ENOSPC reported late by network file systems */
        ckpt_errf(err, errlen, "close of '%s' failed: %s", a->path, strerror(errno));
        ckpt_afile_abort(a);
        return -1;
    }
    if (rename(a->tmp, a->path) != 0) {
        ckpt_errf(err, errlen, "rename '%s' -> '%s' failed: %s", a->tmp, a->path, strerror(errno));
        ckpt_afile_abort(a);
        return -1;
    }
    a->tmp[0] = '\0';
    char dir[CKPT_PATH_MAX];
    if (parent_dir(dir, sizeof dir, a->path) != 0) {
        ckpt_errf(err, errlen, "path too long: '%s'", a->path);
        return -1;
    }
    return ckpt_fsync_dir(dir, err, errlen);
}

int ckpt_write_file(const char *path, const void *buf, size_t n, char *err, size_t errlen) {
    ckpt_afile a;
    if (ckpt_afile_open(&a, path, err, errlen) != 0) return -1;
    if (ckpt_afile_write(&a, buf, n, err, errlen) != 0) return -1;
    return ckpt_afile_commit(&a, err, errlen);
}

int ckpt_write_json(const char *dir, const char *name, const char *json, char *err,
                    size_t errlen) {
    char path[CKPT_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        ckpt_errf(err, errlen, "path too long: '%s/%s'", dir, name);
        return -1;
    }
    if (json == NULL) {
        ckpt_errf(err, errlen, "%s: no JSON text given", path);
        return -1;
    }
    const char *end = NULL;
    cJSON *parsed = cJSON_ParseWithOpts(json, &end, 1);
    if (parsed == NULL) {
        const char *at = cJSON_GetErrorPtr();
        ckpt_errf(err, errlen, "%s: refusing to write invalid JSON (error near byte %ld)", path,
                  at ? (long)(at - json) : -1L);
        return -1;
    }
    cJSON_Delete(parsed);
    size_t n = strlen(json);
    ckpt_afile a;
    if (ckpt_afile_open(&a, path, err, errlen) != 0) return -1;
    if (ckpt_afile_write(&a, json, n, err, errlen) != 0) return -1;
    if ((n == 0 || json[n - 1] != '\n') && ckpt_afile_write(&a, "\n", 1, err, errlen) != 0)
        return -1;
    return ckpt_afile_commit(&a, err, errlen);
}

int ckpt_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err,
                   size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ckpt_errf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        ckpt_errf(err, errlen, "'%s' is not a readable regular file%s%s", path, e ? ": " : "",
                  e ? strerror(e) : "");
        return -1;
    }
    if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
        close(fd);
        ckpt_errf(err, errlen, "'%s' is %lld bytes, more than the %zu allowed", path,
                  (long long)st.st_size, max_bytes);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (buf == NULL) {
        close(fd);
        ckpt_errf(err, errlen, "out of memory reading '%s'", path);
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
            ckpt_errf(err, errlen, "short read of '%s' (%zu of %zu bytes)%s%s", path, got, size,
                      e ? ": " : "", e ? strerror(e) : "");
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

int ckpt_mkdir_p(const char *dir, char *err, size_t errlen) {
    char buf[CKPT_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        ckpt_errf(err, errlen, "path too long: '%s'", dir);
        return -1;
    }
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                ckpt_errf(err, errlen, "cannot create directory '%s': %s", buf, strerror(errno));
                return -1;
            }
            *p = saved;
            if (saved == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ckpt_errf(err, errlen, "'%s' exists and is not a directory", dir);
        return -1;
    }
    return 0;
}

int ckpt_remove_tree(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        ckpt_errf(err, errlen, "cannot stat '%s': %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0 && errno != ENOENT) {
            ckpt_errf(err, errlen, "cannot remove '%s': %s", path, strerror(errno));
            return -1;
        }
        return 0;
    }
    DIR *d = opendir(path);
    if (d == NULL) {
        ckpt_errf(err, errlen, "cannot open directory '%s': %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    char child[CKPT_PATH_MAX];
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= (int)sizeof child) {
            ckpt_errf(err, errlen, "path too long under '%s'", path);
            rc = -1;
            break;
        }
        rc = ckpt_remove_tree(child, err, errlen);
    }
    closedir(d);
    if (rc != 0) return -1;
    if (rmdir(path) != 0 && errno != ENOENT) {
        ckpt_errf(err, errlen, "cannot remove directory '%s': %s", path, strerror(errno));
        return -1;
    }
    return 0;
}
