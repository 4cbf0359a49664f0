/*
 * dash/dash_index.c — the dashboard's run index (dash/dash_impl.h): which run directories lie
 * under the roots, and the runs page's row of each, re-read only when its files changed.
 *
 * Why so shaped: the runs page must answer in well under 100 ms with a thousand runs, and a
 * report summary (report_load: medians over every metrics row, the ETTR accounting) costs a few
 * milliseconds per run. So each run keeps the stamp (device, inode, size, mtime) of run.db and
 * run.db-wal and whether RUN_DIR/.lock is held; a scan is one stat per file plus one read of
 * /proc/locks (the same test core/runlock.c's runlock_probe makes, done once for all runs), and
 * only a run whose stamp moved is summarised again. A new inode is a rotated database; a missing
 * run.db drops the run. Every read goes through report_load, which opens the file read-only.
 */
#include "dash/dash_impl.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "core/check.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/runlock.h"
#include "report/report.h"

void dash_index_init(dash_index *ix, const char *const *roots, int n_roots) {
    memset(ix, 0, sizeof(*ix));
    pthread_mutex_init(&ix->mu, NULL);
    ix->roots = callocCheck(n_roots > 0 ? (size_t)n_roots : 1, sizeof(char *));
    for (int i = 0; i < n_roots; i++) ix->roots[i] = strdup(roots[i]);
    ix->n_roots = n_roots;
}

static void run_clear(dash_run *r) {
    free(r->name);
    free(r->status);
    free(r->config);
    r->name = r->status = r->config = NULL;
}

void dash_index_free(dash_index *ix) {
    for (size_t i = 0; i < ix->n; i++) {
        run_clear(&ix->runs[i]);
        free(ix->runs[i].dir);
    }
    free(ix->runs);
    for (int i = 0; i < ix->n_roots; i++) free(ix->roots[i]);
    free(ix->roots);
    pthread_mutex_destroy(&ix->mu);
    memset(ix, 0, sizeof(*ix));
}

static dash_stamp stamp_of(const char *path) {
    struct stat sb;
    dash_stamp s = {0};
    if (stat(path, &sb) == 0)
        s = (dash_stamp){(uint64_t)sb.st_dev, (uint64_t)sb.st_ino, (uint64_t)sb.st_size,
                         (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec};
    return s;
}

static int stamp_eq(dash_stamp a, dash_stamp b) {
    return a.dev == b.dev && a.ino == b.ino && a.size == b.size && a.mtime_ns == b.mtime_ns;
}

/* The (device, inode) of every flock held on the machine now, from /proc/locks. */
typedef struct {
    uint64_t *dev, *ino;
    size_t n, cap;
} lockset;

static void lockset_read(lockset *ls) {
    ls->n = 0;
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        char type[16];
        unsigned maj, min;
        unsigned long long ino;
        if (sscanf(line, "%*s %15s %*s %*s %*d %x:%x:%llu", type, &maj, &min, &ino) != 4 ||
            strcmp(type, "FLOCK") != 0)
            continue;
        if (ls->n == ls->cap) {
            ls->cap = ls->cap ? 2 * ls->cap : 64;
            ls->dev = realloc(ls->dev, ls->cap * sizeof(uint64_t));
            ls->ino = realloc(ls->ino, ls->cap * sizeof(uint64_t));
            mtCheck(ls->dev && ls->ino, "out of memory");
        }
        ls->dev[ls->n] = (uint64_t)makedev(maj, min);
        ls->ino[ls->n++] = ino;
    }
    fclose(f);
}

static int lockset_has(const lockset *ls, const char *dir) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, RUNLOCK_FILE);
    dash_stamp s = stamp_of(path);
    if (!s.ino) return 0;
    for (size_t i = 0; i < ls->n; i++)
        if (ls->dev[i] == s.dev && ls->ino[i] == s.ino) return 1;
    return 0;
}

dash_run *dash_index_find(dash_index *ix, const char *dir) {
    for (size_t i = 0; i < ix->n; i++)
        if (strcmp(ix->runs[i].dir, dir) == 0) return &ix->runs[i];
    return NULL;
}

/* Read the summary of r again (report_load: read-only). */
static void summarise(dash_run *r) {
    run_clear(r);
    report_summary s;
    char err[8600];
    if (report_load(r->dir, &s, err, sizeof(err)) != 0) {
        r->ok = 0;
        snprintf(r->err, sizeof(r->err), "%.300s", err);
        return;
    }
    r->ok = 1;
    r->err[0] = '\0';
    r->name = strdup(s.name ? s.name : "(unnamed)");
    r->status = strdup(s.status ? s.status : "unknown");
    r->config = s.config ? strdup(s.config) : NULL;
    r->steps = s.steps;
    r->loss = s.final_train_loss;
    r->val = s.final_val_loss;
    r->tps = s.tokens_per_s;
    r->mfu = s.mfu;
    r->ettr = s.ettr.ettr;
    r->failures = s.ettr.failures;
    r->start = s.job_start;
    r->wall = s.wall_s;
    report_free(&s);
}

/* A run directory found at dir: add it, or mark it seen and re-read it when it changed. */
static void found(dash_index *ix, const char *dir, const lockset *ls) {
    char db[4200], wal[4300];
    snprintf(db, sizeof(db), "%s/run.db", dir);
    snprintf(wal, sizeof(wal), "%s-wal", db);
    dash_stamp sd = stamp_of(db), sw = stamp_of(wal);
    int locked = lockset_has(ls, dir);
    dash_run *r = dash_index_find(ix, dir);
    if (!r) {
        if (ix->n == ix->cap) {
            ix->cap = ix->cap ? 2 * ix->cap : 64;
            ix->runs = realloc(ix->runs, ix->cap * sizeof(dash_run));
            mtCheck(ix->runs != NULL, "out of memory");
        }
        r = &ix->runs[ix->n++];
        memset(r, 0, sizeof(*r));
        r->dir = strdup(dir);
    } else if (stamp_eq(r->db, sd) && stamp_eq(r->wal, sw) && r->locked == locked) {
        r->seen = ix->scan;
        return;
    }
    r->db = sd, r->wal = sw, r->locked = locked, r->seen = ix->scan;
    summarise(r);
    /* A read-only connection to a WAL database whose writer closed leaves an empty run.db-wal
     * behind (SQLite creates it to read): keep that stamp, or the next scan reads again for
     * nothing. Any other change during the read keeps the stamps from before it, so the next
     * scan reads the run again and misses nothing. */
    dash_stamp w2 = stamp_of(wal);
    if (!sw.ino && w2.ino && w2.size == 0 && stamp_eq(stamp_of(db), sd)) r->wal = w2;
}

static int is_file(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* dir is a run (holds run.db), or its subdirectories are searched, depth levels deeper. */
static void walk(dash_index *ix, const char *dir, int depth, const lockset *ls) {
    if (is_file(dir, "run.db")) {
        found(ix, dir, ls);
        return;
    }
    if (depth == 0) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ., .., hidden: never a run */
        if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN && e->d_type != DT_LNK) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof(char *));
            mtCheck(names != NULL, "out of memory");
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        char *sub = fs_join_alloc(dir, names[i]);
        struct stat sb;
        if (stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) walk(ix, sub, depth - 1, ls);
        free(sub);
        free(names[i]);
    }
    free(names);
}

void dash_index_refresh(dash_index *ix) {
    lockset ls = {0};
    lockset_read(&ls);
    ix->scan++;
    for (int i = 0; i < ix->n_roots; i++) walk(ix, ix->roots[i], 2, &ls);
    size_t k = 0; /* drop the runs this scan did not find (deleted, moved away) */
    for (size_t i = 0; i < ix->n; i++) {
        if (ix->runs[i].seen == ix->scan) {
            ix->runs[k++] = ix->runs[i];
        } else {
            run_clear(&ix->runs[i]);
            free(ix->runs[i].dir);
        }
    }
    ix->n = k;
    free(ls.dev);
    free(ls.ino);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ix->scanned_at = ts.tv_sec + ts.tv_nsec * 1e-9;
}

void dash_etag(dash_run *const *runs, int n, const char *salt, char *buf, size_t len) {
    uint64_t h = HASH_FNV64_BASIS;
    for (const char *p = salt ? salt : ""; *p; p++) h = (h ^ (uint8_t)*p) * HASH_FNV64_PRIME;
    for (int i = 0; i < n; i++) {
        const dash_run *r = runs[i];
        const void *parts[3] = {&r->db, &r->wal, &r->locked};
        const size_t sizes[3] = {sizeof(r->db), sizeof(r->wal), sizeof(r->locked)};
        for (int k = 0; k < 3; k++)
            for (size_t j = 0; j < sizes[k]; j++)
                h = (h ^ ((const uint8_t *)parts[k])[j]) * HASH_FNV64_PRIME;
        for (const char *p = r->dir; *p; p++) h = (h ^ (uint8_t)*p) * HASH_FNV64_PRIME;
    }
    snprintf(buf, len, "\"%016llx\"", (unsigned long long)h);
}
