/*
 * sched/doctor.c — the node health checks (sched/doctor.h): compute and memory probes against a
 * reference, disk write + fsync per tier root, tier-0 free space, and the pairwise network tests
 * under MPI.
 */
#include "sched/doctor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "core/check.h"
#include "core/events.h"
#include "core/fs.h"
#include "core/timer.h"
#include "ops/peak.h"

static doctor_check *add(doctor_result *r, const char *name, int ok, double value, double ref,
                         const char *unit) {
    if (r->n == DOCTOR_MAX_CHECKS) return &r->c[r->n - 1];
    doctor_check *c = &r->c[r->n++];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", name);
    snprintf(c->unit, sizeof(c->unit), "%s", unit);
    c->ok = ok;
    c->value = value;
    c->ref = ref;
    r->failed += !ok;
    return c;
}

/* ---- references ------------------------------------------------------------------------------ */

int doctor_read_baseline(const char *path, double *sgemm, double *bw, char *err, size_t errlen) {
    size_t n = 0;
    char *txt = NULL;
    if (fs_read_file(path, 1 << 20, &txt, &n, err, errlen) != 0) return -1;
    cJSON *o = cJSON_Parse(txt);
    free(txt);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "sgemm_gflops");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "bandwidth_gbs");
    if (!cJSON_IsNumber(s) || !(s->valuedouble > 0)) {
        mt_errf(err, errlen, "baseline %s: no positive \"sgemm_gflops\" (write one with "
                "`minitrain doctor --json > FILE` on a healthy machine)", path);
        cJSON_Delete(o);
        return -1;
    }
    *sgemm = s->valuedouble * 1e9;
    *bw = cJSON_IsNumber(b) && b->valuedouble > 0 ? b->valuedouble * 1e9 : 0;
    cJSON_Delete(o);
    return 0;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define FLEET_MAX 256

/* The doctor records of one run.db into the per-host table (newest per host wins). */
static void fleet_read(const char *db_path, const char *self, char host[][64], double *sg,
                       double *bw, double *t, int *n) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return;
    }
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "SELECT time, json_extract(detail, '$.host'), json_extract(detail,"
                           " '$.sgemm_gflops'), json_extract(detail, '$.bandwidth_gbs') FROM "
                           "events WHERE kind = '" EV_DOCTOR "'", -1, &q, NULL) == SQLITE_OK)
        while (sqlite3_step(q) == SQLITE_ROW) {
            const char *h = (const char *)sqlite3_column_text(q, 1);
            double s = sqlite3_column_double(q, 2), b = sqlite3_column_double(q, 3);
            double tm = sqlite3_column_double(q, 0);
            if (!h || !strcmp(h, self) || !(s > 0)) continue;
            int k = 0;
            while (k < *n && strcmp(host[k], h) != 0) k++;
            if (k == *n) {
                if (*n == FLEET_MAX) continue;
                snprintf(host[k], 64, "%s", h);
                t[k] = -INFINITY;
                (*n)++;
            }
            if (tm >= t[k]) t[k] = tm, sg[k] = s, bw[k] = b;
        }
    sqlite3_finalize(q);
    sqlite3_close(db);
}

int doctor_fleet_median(const char *dir, const char *self, double *sgemm, double *bw) {
    static char host[FLEET_MAX][64];
    double sg[FLEET_MAX], b[FLEET_MAX], t[FLEET_MAX];
    int n = 0;
    char p[4400];
    snprintf(p, sizeof(p), "%s/run.db", dir);
    fleet_read(p, self, host, sg, b, t, &n);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof(p), "%s/%s/run.db", dir, de->d_name);
        if (access(p, R_OK) == 0) fleet_read(p, self, host, sg, b, t, &n);
    }
    if (d) closedir(d);
    if (n == 0) return 0;
    double bws[FLEET_MAX];
    int nb = 0;
    for (int k = 0; k < n; k++)
        if (b[k] > 0) bws[nb++] = b[k];
    *sgemm = median(sg, n) * 1e9;
    *bw = nb ? median(bws, nb) * 1e9 : 0;
    return n;
}

/* ---- local checks -------------------------------------------------------------------------- */

static double slowdown(void) {
    const char *s = getenv("MINITRAIN_DOCTOR_SLOWDOWN");
    double f = s ? atof(s) : 1;
    return f > 1 ? f : 1;
}

/* A probe figure against its reference. */
static void probe(doctor_result *r, const doctor_opts *o, const char *name, double v, double ref,
                  double scale, const char *unit) {
    int ok = v > 0 && (!(ref > 0) || v >= o->tolerance * ref);
    doctor_check *c = add(r, name, ok, v / scale, ref > 0 ? ref / scale : NAN, unit);
    if (!(v > 0))
        snprintf(c->text, sizeof(c->text), "%s: the probe failed", name);
    else if (ref > 0)
        snprintf(c->text, sizeof(c->text), "%s %.1f %s = %.0f%% of the reference %.1f (%.120s; "
                 "needs >= %.0f%%)", name, v / scale, unit, 100 * v / ref, ref / scale,
                 r->ref_source, 100 * o->tolerance);
    else
        snprintf(c->text, sizeof(c->text), "%s %.1f %s (no reference to compare with)", name,
                 v / scale, unit);
}

/* Write 32 MiB into root/.doctor-<pid>, fsync, remove: MB/s, or a failed check. */
static void disk(doctor_result *r, const char *root, int tier) {
    char name[48], path[4300], msg[300];
    snprintf(name, sizeof(name), "disk tier %d", tier);
    if (fs_mkdir_p(root, msg, sizeof(msg)) != 0) {
        doctor_check *c = add(r, name, 0, NAN, NAN, "MB/s");
        snprintf(c->text, sizeof(c->text), "%s: cannot create %.150s: %.100s", name, root, msg);
        return;
    }
    snprintf(path, sizeof(path), "%s/.doctor-%d", root, (int)getpid());
    enum { MB = 1 << 20, N = 32 };
    char *buf = mallocCheck(MB);
    for (int i = 0; i < MB; i++) buf[i] = (char)(i * 131 + 7);
    double t0 = timer_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), ok = fd >= 0;
    for (int i = 0; ok && i < N; i++) ok = write(fd, buf, MB) == MB;
    ok = ok && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0) close(fd);
    double s = timer_now() - t0;
    unlink(path);
    free(buf);
    doctor_check *c = add(r, name, ok, ok ? N / s : NAN, NAN, "MB/s");
    if (ok)
        snprintf(c->text, sizeof(c->text), "%s %.200s: %d MiB written + fsync at %.0f MB/s", name,
                 root, N, N / s);
    else
        snprintf(c->text, sizeof(c->text), "%s %.200s: write + fsync failed: %.60s", name, root,
                 strerror(e));
}

static void free_space(doctor_result *r, const char *root, double min_mb) {
    char p[4200];
    snprintf(p, sizeof(p), "%s", root);
    struct statvfs sv;
    while (statvfs(p, &sv) != 0) { /* the nearest existing parent */
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) {
            snprintf(p, sizeof(p), "/");
            if (statvfs(p, &sv) != 0) return;
            break;
        }
        *slash = '\0';
    }
    double mb = (double)sv.f_bavail * sv.f_frsize / (1 << 20);
    doctor_check *c = add(r, "tier0_free", mb >= min_mb, mb, min_mb, "MiB");
    snprintf(c->text, sizeof(c->text), "tier0_free %.0f MiB free under %.200s (needs >= %.0f MiB)", mb,
             p, min_mb);
}

void doctor_run_local(const doctor_opts *o, doctor_result *r) {
    double f = slowdown();
    peak_stable st;
    double sg = peak_sgemm_stable(o->threads, o->probe_s, &st) / f;
    probe(r, o, "sgemm", sg, o->ref_sgemm, 1e9, "GFLOP/s");
    double bw = peak_bandwidth(o->threads, (size_t)256 << 20, o->probe_s, &st) / f;
    probe(r, o, "bandwidth", bw, o->ref_bw, 1e9, "GB/s");
    for (int k = 0; k < 4 && o->roots[k]; k++) disk(r, o->roots[k], o->root_tier[k]);
    if (o->tier0_root) free_space(r, o->tier0_root, o->min_free_mb);
}

/* ---- pairs under MPI ----------------------------------------------------------------------- */

void doctor_run_pairs(comm *world, doctor_result *r) {
    int n = comm_size(world), me = comm_rank(world);
    if (n < 2) return;
    enum { PINGS = 200, FLOATS = 4 << 20 };
    float *buf = mallocCheck((size_t)FLOATS * sizeof(float));
    for (int i = 0; i < FLOATS; i++) buf[i] = 1.0f;
    int np = n * (n - 1) / 2, k = 0;
    double *lat = mallocCheck((size_t)np * sizeof(double) * 2), *bw = lat + np;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++, k++) {
            int in = me == a || me == b;
            comm *pair = comm_split(world, in ? 0 : 1, me, "doctor pair");
            double v[2] = {0, 0};
            if (in) {
                float x = 0;
                comm_barrier(pair);
                double t0 = timer_now();
                for (int i = 0; i < PINGS; i++) {
                    if (me == a) comm_send(pair, &x, 1, 1, 7), comm_recv(pair, &x, 1, 1, 7);
                    else comm_recv(pair, &x, 1, 0, 7), comm_send(pair, &x, 1, 0, 7);
                }
                v[0] = (timer_now() - t0) / PINGS / 2 * 1e6; /* one way, µs */
                comm_all_reduce(pair, buf, FLOATS, COMM_SUM); /* warm-up */
                comm_barrier(pair);
                t0 = timer_now();
                for (int i = 0; i < 3; i++) comm_all_reduce(pair, buf, FLOATS, COMM_SUM);
                v[1] = 3.0 * FLOATS * sizeof(float) / (timer_now() - t0) / 1e9; /* GB/s */
                for (int i = 0; i < FLOATS; i++) buf[i] = 1.0f;
            }
            comm_free(pair);
            /* world rank 0 learns every pair's figures (the pair's first rank reports) */
            double all[2] = {me == a ? v[0] : 0, me == a ? v[1] : 0};
            comm_all_reduce_f64(world, all, 2, COMM_SUM);
            lat[k] = all[0];
            bw[k] = all[1];
        }
    if (me == 0) {
        double *m = mallocCheck((size_t)np * sizeof(double));
        memcpy(m, bw, (size_t)np * sizeof(double));
        double med = median(m, np);
        free(m);
        k = 0;
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++, k++) {
                char name[48];
                snprintf(name, sizeof(name), "pingpong %d-%d", a, b);
                doctor_check *c = add(r, name, 1, lat[k], NAN, "us");
                snprintf(c->text, sizeof(c->text), "%s: %.1f us one way (ranks %d and %d)", name,
                         lat[k], a, b);
                snprintf(name, sizeof(name), "allreduce %d-%d", a, b);
                c = add(r, name, bw[k] >= 0.5 * med, bw[k], med, "GB/s");
                snprintf(c->text, sizeof(c->text), "%s: %.2f GB/s for 16 MiB (median of the %d "
                         "pair%s %.2f; needs >= 50%%)", name, bw[k], np, np == 1 ? "" : "s", med);
            }
    }
    free(lat);
    free(buf);
}

/* ---- output -------------------------------------------------------------------------------- */

cJSON *doctor_json(const doctor_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "host", r->host);
    cJSON_AddBoolToObject(o, "ok", r->failed == 0);
    cJSON_AddNumberToObject(o, "failed", r->failed);
    cJSON_AddStringToObject(o, "reference", r->ref_source);
    cJSON *a = cJSON_AddArrayToObject(o, "checks");
    for (int i = 0; i < r->n; i++) {
        const doctor_check *c = &r->c[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", c->name);
        cJSON_AddBoolToObject(e, "ok", c->ok);
        if (isfinite(c->value)) cJSON_AddNumberToObject(e, "value", c->value);
        if (isfinite(c->ref)) cJSON_AddNumberToObject(e, "reference", c->ref);
        cJSON_AddStringToObject(e, "unit", c->unit);
        cJSON_AddStringToObject(e, "text", c->text);
        cJSON_AddItemToArray(a, e);
        if (!strcmp(c->name, "sgemm") && isfinite(c->value))
            cJSON_AddNumberToObject(o, "sgemm_gflops", c->value);
        if (!strcmp(c->name, "bandwidth") && isfinite(c->value))
            cJSON_AddNumberToObject(o, "bandwidth_gbs", c->value);
    }
    return o;
}
