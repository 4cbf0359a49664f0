/*
 * sched/heartbeat.c — heartbeat records: writer (each rank) and scanner (the supervisor).
 * Format and rationale in sched/heartbeat.h.
 */
#include "sched/heartbeat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/timer.h"

unsigned hb_node_id(void) {
    static unsigned id;
    static int done;
    if (!done) {
        char host[256] = "";
        gethostname(host, sizeof(host) - 1);
        id = hash_fnv1a32(host, strlen(host));
        done = 1;
    }
    return id;
}

unsigned long long hb_proc_start(int pid) {
    char p[64], buf[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t got = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (got <= 0) return 0;
    buf[got] = '\0';
    char *rp = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
    char state = 0;
    unsigned long long start = 0;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
     * stime cutime cstime priority nice threads itrealvalue starttime(22) */
    if (!rp || sscanf(rp + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                      "%*d %*d %*d %llu", &state, &start) != 2)
        return 0;
    if (state == 'Z' || state == 'X') return 0; /* exited, not yet reaped */
    return start ? start : 1;
}

int hb_proc_alive(int pid) { return pid > 0 && hb_proc_start(pid) != 0; }

int hb_sup_write(const char *path, int pid, unsigned long long start) {
    char tmp[4300], line[160];
    int n = snprintf(line, sizeof(line), "MTSUP1 pid=%d node=%08x start=%llu time=%.6f\n", pid,
                     hb_node_id(), start, timer_unix());
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int ok = write(fd, line, (size_t)n) == n;
    close(fd);
    return ok && rename(tmp, path) == 0 ? 0 : -1; /* a reader sees the old or the new record */
}

int hb_sup_alive(const char *path, double stale_s, double now) {
    char line[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t got = read(fd, line, sizeof(line) - 1);
    close(fd);
    if (got <= 0) return -1;
    line[got] = '\0';
    int pid = 0;
    unsigned node = 0;
    unsigned long long start = 0;
    double t = 0;
    if (sscanf(line, "MTSUP1 pid=%d node=%8x start=%llu time=%lf", &pid, &node, &start, &t) != 4)
        return -1;
    if (node == hb_node_id()) /* same machine: the process itself answers, at once */
        return hb_proc_alive(pid) && (start == 0 || hb_proc_start(pid) == start);
    return now - t <= stale_s;
}

void hb_format(char *buf, const hb_record *r) {
    char body[HB_RECORD_BYTES];
    int n = snprintf(body, sizeof(body),
                     "MTHB1 rank=%d pid=%d node=%08x start=%d step=%d step_ms=%.3f busy_ms=%.3f "
                     "time=%.6f state=%.15s", r->rank, r->pid, r->node, r->start, r->step, r->step_ms, r->busy_ms, r->time, r->state);
    if (n < 0 || n > HB_RECORD_BYTES - 20) n = HB_RECORD_BYTES - 20; /* cannot happen: bounded */
    int m = snprintf(buf, HB_RECORD_BYTES + 1, "%.*s sum=%08x", n, body, hash_fnv1a32(body, (size_t)n));
    memset(buf + m, ' ', (size_t)(HB_RECORD_BYTES - 1 - m));
    buf[HB_RECORD_BYTES - 1] = '\n';
    buf[HB_RECORD_BYTES] = '\0';
}

int hb_parse(const char *buf, size_t len, hb_record *out) {
    char tmp[HB_RECORD_BYTES + 1];
    if (len < HB_RECORD_BYTES || strncmp(buf, "MTHB1 ", 6) != 0) return -1;
    memcpy(tmp, buf, HB_RECORD_BYTES);
    tmp[HB_RECORD_BYTES] = '\0';
    char *sum = strstr(tmp, " sum=");
    if (!sum) return -1;
    unsigned int want = 0;
    if (sscanf(sum, " sum=%8x", &want) != 1) return -1;
    if (hash_fnv1a32(tmp, (size_t)(sum - tmp)) != want) return -1;
    *sum = '\0';
    hb_record r;
    memset(&r, 0, sizeof(r));
    if (sscanf(tmp, "MTHB1 rank=%d pid=%d node=%8x start=%d step=%d step_ms=%lf busy_ms=%lf "
               "time=%lf state=%15s", &r.rank, &r.pid, &r.node, &r.start, &r.step, &r.step_ms,
               &r.busy_ms, &r.time, r.state) != 9)
        return -1;
    *out = r;
    return 0;
}

int hb_open(hb_writer *w, const char *dir, int rank, char *err, size_t errlen) {
    w->fd = -1;
    w->rank = rank;
    w->start = -1;
    w->path[0] = '\0';
    if (!dir || !dir[0]) return 0;
    mkdir(dir, 0755); /* normally made by the supervisor */
    snprintf(w->path, sizeof(w->path), "%s/rank_%05d.hb", dir, rank);
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "cannot create heartbeat file %s: %s", w->path, strerror(errno));
        return -1;
    }
    return 0;
}

void hb_write(hb_writer *w, int step, double step_ms, double busy_ms, const char *state) {
    if (w->fd < 0) return;
    if (w->start < 0) w->start = step; /* the first record: the step this process starts at */
    hb_record r = {.rank = w->rank, .pid = (int)getpid(), .node = hb_node_id(),
                   .start = w->start, .step = step,
                   .step_ms = step_ms,
                   .busy_ms = busy_ms, .time = timer_unix()};
    snprintf(r.state, sizeof(r.state), "%s", state);
    char buf[HB_RECORD_BYTES + 1];
    hb_format(buf, &r);
    if (pwrite(w->fd, buf, HB_RECORD_BYTES, 0) != HB_RECORD_BYTES) { /* ignored, see header */
    }
}

void hb_close(hb_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
}

static int cmp_rank(const void *a, const void *b) {
    const hb_record *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int hb_scan(const char *dir, hb_record *out, int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < max) {
        if (strncmp(de->d_name, "rank_", 5) != 0) continue;
        size_t L = strlen(de->d_name);
        if (L < 4 || strcmp(de->d_name + L - 3, ".hb") != 0) continue;
        char p[4200], buf[HB_RECORD_BYTES];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t got = pread(fd, buf, HB_RECORD_BYTES, 0);
        close(fd);
        if (got == HB_RECORD_BYTES && hb_parse(buf, (size_t)got, &out[n]) == 0) n++;
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof(hb_record), cmp_rank);
    return n;
}
