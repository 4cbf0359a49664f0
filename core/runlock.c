/*
 * core/runlock.c — the run directory's lock (core/runlock.h): flock(2) on RUN_DIR/.lock.
 *
 * flock rather than fcntl record locks: a flock belongs to the open file description, so it is
 * not dropped when some library in the process closes another descriptor of the same file, and
 * it is inherited across fork/exec (a supervisor's lock stays held while any process it launched
 * still holds the descriptor: the job is over only when every part of it is). Whether a lock is
 * held is read from /proc/locks (dev:inode of the file), which never takes the lock itself.
 */
#define _GNU_SOURCE
#include "core/runlock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core/check.h"

void runlock_init(runlock *l) {
    memset(l, 0, sizeof(*l));
    l->fd = -1;
}

/* mkdir -p; sets *created when the last component did not exist. */
static int mkdir_p(const char *path, int *created) {
    char buf[4096];
    *created = 0;
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) == 0) {
        *created = 1;
        return 0;
    }
    if (errno != EEXIST) return -1;
    struct stat sb;
    if (stat(buf, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static void read_holder(int fd, char *buf, size_t len) {
    buf[0] = '\0';
    if (len < 2) return;
    ssize_t n = pread(fd, buf, len - 1, 0);
    if (n <= 0) {
        buf[0] = '\0';
        return;
    }
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

/* "pid=4242 what=run host=h" -> a phrase for a message. */
static void describe(const char *line, char *out, size_t len) {
    int pid = 0;
    char what[32] = "?", host[128] = "?";
    const char *p = strstr(line, "pid=");
    if (p) pid = atoi(p + 4);
    if ((p = strstr(line, "what="))) sscanf(p + 5, "%31s", what);
    if ((p = strstr(line, "host="))) sscanf(p + 5, "%127s", host);
    if (pid > 0)
        snprintf(out, len, "pid %d (minitrain %s on host %s)", pid, what, host);
    else
        snprintf(out, len, "another process");
}

int runlock_acquire(runlock *l, const char *run_dir, const char *what, char *err, size_t errlen) {
    runlock_init(l);
    if (snprintf(l->dir, sizeof(l->dir), "%s", run_dir) >= (int)sizeof(l->dir) ||
        snprintf(l->path, sizeof(l->path), "%s/%s", run_dir, RUNLOCK_FILE) >= (int)sizeof(l->path)) {
        snprintf(err, errlen, "run directory path too long: %.200s...", run_dir);
        return -1;
    }
    if (mkdir_p(run_dir, &l->created_dir) != 0) {
        snprintf(err, errlen, "cannot create run directory '%s': %s", run_dir,
                 errno == ENOTDIR || errno == EEXIST ? "it, or a directory above it, exists as a "
                                                       "file" : strerror(errno));
        return -1;
    }
    int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open the run directory's lock file %s: %s", l->path,
                 strerror(errno));
        runlock_release(l);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char line[256], who[256];
        read_holder(fd, line, sizeof(line));
        close(fd);
        if (e != EWOULDBLOCK) {
            snprintf(err, errlen, "cannot lock %s: %s", l->path, strerror(e));
            return -1;
        }
        describe(line, who, sizeof(who));
        snprintf(err, errlen, "run directory %s is in use by %s; wait for it to finish, stop it, "
                 "or choose another --run-dir", run_dir, who);
        return 1;
    }
    l->fd = fd;
    char host[128] = "?", line[256];
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    int n = snprintf(line, sizeof(line), "pid=%d what=%s host=%s\n", (int)getpid(), what, host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        /* the lock is held all the same; only the holder's name is missing */
        mt_warn("cannot write the holder into %s: %s", l->path, strerror(errno));
    }
    return 0;
}

int runlock_held_above(const char *run_dir) {
    const char *env = getenv(RUNLOCK_ENV);
    if (!env || !env[0]) return 0;
    char mine[4200];
    snprintf(mine, sizeof(mine), "%s/%s", run_dir, RUNLOCK_FILE);
    struct stat a, b;
    if (stat(env, &a) != 0 || stat(mine, &b) != 0) return 0;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* 1 when the run directory holds nothing but the lock file. */
static int only_lock_left(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int other = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, RUNLOCK_FILE))
            other = 1;
    closedir(d);
    return !other;
}

void runlock_release(runlock *l) {
    if (l->fd >= 0 && l->created_dir && only_lock_left(l->dir)) {
        unlink(l->path); /* while still held: nobody can have locked this inode meanwhile */
        rmdir(l->dir);
    }
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
    l->created_dir = 0;
}

int runlock_probe(const char *run_dir, char *buf, size_t len) {
    char path[4200];
    if (len) buf[0] = '\0';
    snprintf(path, sizeof(path), "%s/%s", run_dir, RUNLOCK_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return -1;
    }
    if (len) read_holder(fd, buf, len);
    close(fd);
    /* /proc/locks: "1: FLOCK  ADVISORY  WRITE 4242 08:01:131075 0 EOF" (dev in hex) */
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    char line[512];
    int held = 0;
    while (!held && fgets(line, sizeof(line), f)) {
        char type[16];
        unsigned maj, min;
        unsigned long long ino;
        if (sscanf(line, "%*s %15s %*s %*s %*d %x:%x:%llu", type, &maj, &min, &ino) != 4) continue;
        held = !strcmp(type, "FLOCK") && makedev(maj, min) == sb.st_dev &&
               (ino_t)ino == sb.st_ino;
    }
    fclose(f);
    return held;
}
