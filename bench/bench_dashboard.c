/*
 * bench/bench_dashboard.c — how fast the dashboard (dash/dash.h) answers its runs page with many
 * runs, and (with --make-only) the synthetic runs bench/bench_dashboard.sh watches while it
 * measures a training job's step time with and without a dashboard polling.
 *
 *   make bench && build/bench/bench_dashboard [--runs 1000] [--rows 200] [--repeat 30] [--dir D]
 *   build/bench/bench_dashboard --make-only --runs 49 --dir D
 *
 * Makes N run directories under D (default /tmp/minitrain_bench_dash, removed at the end unless
 * given) through core/rundb.h, as a trainer writes them: a runs row, `rows` metrics rows, a start
 * event, the row ended completed. Then starts the dashboard in this process on 127.0.0.1:0 and
 * times GET / over HTTP (libcurl, a new connection each time, as a browser's poll):
 *   cold   the first request: every run summarised (report_load of each run.db);
 *   warm   a full page again, nothing changed: a stat per file, one /proc/locks read, the page
 *          drawn from the index — the figure the < 100 ms target is about;
 *   304    the browser's revalidation (If-None-Match): what an open page's polling costs;
 *   one changed  a full page after one run's run.db changed (one summary read again).
 * Medians over --repeat requests, with the load average before and after; the physical floor
 * beside them: the same number of stat() calls alone.
 */
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/rundb.h"
#include "core/stats.h"
#include "core/timer.h"
#include "dash/dash.h"

static void make_run(const char *root, int i, int rows) {
    char dir[4200], name[64], err[512];
    snprintf(dir, sizeof(dir), "%s/run_%04d", root, i);
    snprintf(name, sizeof(name), "synthetic_%04d", i);
    rundb *db = rundb_open(dir, err, sizeof(err));
    if (!db) {
        fprintf(stderr, "bench_dashboard: %s\n", err);
        exit(1);
    }
    rundb_begin_batch(db);
    char cfg[128];
    snprintf(cfg, sizeof(cfg), "{\"lr\": %g, \"steps\": %d, \"d_model\": 64}", 1e-3 * (1 + i % 7), rows);
    int64_t id = rundb_run_begin(db, name, cfg, "bench", 1);
    rundb_log_event(db, id, "start", 0, "{}");
    for (int s = 1; s <= rows; s++) {
        rundb_metric m = {s, 4.0 * exp(-s / 80.0) + 1.5, s % 50 ? NAN : 4.0 * exp(-s / 80.0) + 1.6,
                          1e-3, 1.0, 50000 + i, 0.2, 0.1, 20.0, s * 0.02};
        rundb_log_metric(db, id, &m);
    }
    rundb_run_end(db, id, "completed");
    rundb_commit_batch(db);
    rundb_close(db);
}

static size_t sink(char *p, size_t s, size_t n, void *u) {
    (void)p;
    *(size_t *)u += s * n;
    return s * n;
}

/* One GET; returns seconds, *code the status, *bytes the body size; etag filled when given. */
static double get(const char *url, const char *inm, long *code, size_t *bytes) {
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char line[128];
    if (inm) {
        snprintf(line, sizeof(line), "If-None-Match: %s", inm);
        h = curl_slist_append(h, line);
    }
    *bytes = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, bytes);
    double t0 = timer_now();
    curl_easy_perform(c);
    double dt = timer_now() - t0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return dt;
}

static size_t header_cb(char *p, size_t s, size_t n, void *u) {
    if (n * s > 6 && !strncasecmp(p, "ETag: ", 6)) {
        char *e = u;
        snprintf(e, 64, "%.*s", (int)(n * s - 8), p + 6); /* drop "\r\n" */
    }
    return s * n;
}

static void etag_of(const char *url, char *etag) {
    CURL *c = curl_easy_init();
    size_t bytes = 0;
    etag[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &bytes);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, etag);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
}

static double loadavg(void) {
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1) l = NAN;
    if (f) fclose(f);
    return l;
}

int main(int argc, char **argv) {
    int n = 1000, rows = 200, repeat = 30, make_only = 0;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--make-only")) make_only = 1;
        else {
            fprintf(stderr, "usage: bench_dashboard [--runs N] [--rows R] [--repeat K] [--dir D] "
                    "[--make-only]\n");
            return 2;
        }
    }
    if (n < 1 || rows < 1 || repeat < 3) {
        fprintf(stderr, "bench_dashboard: --runs, --rows >= 1, --repeat >= 3\n");
        return 2;
    }
    const char *root = dir ? dir : "/tmp/minitrain_bench_dash";
    char err[512];
    double t0 = timer_now();
    for (int i = 0; i < n; i++) make_run(root, i, rows);
    printf("made %d synthetic runs of %d metrics rows under %s in %.1f s\n", n, rows, root,
           timer_now() - t0);
    if (make_only) return 0;
    double load0 = loadavg();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *roots[1] = {root};
    dash_opts o = {roots, 1, "127.0.0.1", 0, NULL, 2000, NULL};
    int port = 0;
    dash_server *s = dash_start(&o, &port, err, sizeof(err));
    if (!s) {
        fprintf(stderr, "bench_dashboard: %s\n", err);
        return 1;
    }
    char url[64], etag[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
    long code;
    size_t bytes;
    double cold = get(url, NULL, &code, &bytes);
    printf("cold   (every run.db summarised): %8.1f ms  (HTTP %ld, %zu bytes)\n", cold * 1e3, code,
           bytes);
    double *w = calloc((size_t)repeat, sizeof(double)), *v = calloc((size_t)repeat, sizeof(double));
    double *c1 = calloc((size_t)repeat, sizeof(double)), *st = calloc((size_t)repeat, sizeof(double));
    for (int k = 0; k < repeat; k++) {
        usleep(300000); /* past the index's rescan window: each request scans */
        w[k] = get(url, NULL, &code, &bytes);
        if (code != 200) fprintf(stderr, "bench_dashboard: warm GET answered %ld\n", code);
    }
    etag_of(url, etag);
    for (int k = 0; k < repeat; k++) {
        usleep(300000);
        v[k] = get(url, etag, &code, &bytes);
        if (code != 304) fprintf(stderr, "bench_dashboard: revalidation answered %ld\n", code);
    }
    for (int k = 0; k < repeat; k++) { /* one run changes between requests */
        char d[4200], e2[512];
        snprintf(d, sizeof(d), "%s/run_%04d", root, k % n);
        rundb *db = rundb_open(d, e2, sizeof(e2));
        rundb_log_event(db, 1, "eval", 0, "{}");
        rundb_close(db);
        usleep(300000);
        c1[k] = get(url, NULL, &code, &bytes);
    }
    for (int k = 0; k < repeat; k++) { /* the floor: the stats a scan makes, alone */
        double a = timer_now();
        for (int i = 0; i < n; i++) {
            char p[4300];
            struct stat sb;
            snprintf(p, sizeof(p), "%s/run_%04d/run.db", root, i);
            stat(p, &sb);
            snprintf(p, sizeof(p), "%s/run_%04d/run.db-wal", root, i);
            stat(p, &sb);
            snprintf(p, sizeof(p), "%s/run_%04d/.lock", root, i);
            stat(p, &sb);
        }
        st[k] = timer_now() - a;
    }
    printf("warm   (nothing changed, full page):  %8.2f ms median of %d  (target < 100 ms; %zu "
           "bytes)\n", 1e3 * stats_median(w, (size_t)repeat), repeat, bytes);
    printf("304    (a page's poll, If-None-Match): %8.2f ms median\n", 1e3 * stats_median(v, (size_t)repeat));
    printf("one run changed, full page:           %8.2f ms median\n", 1e3 * stats_median(c1, (size_t)repeat));
    printf("floor: %d x 3 stat() alone:          %8.2f ms median\n", n, 1e3 * stats_median(st, (size_t)repeat));
    printf("load average %.2f before, %.2f after; %ld online CPUs\n", load0, loadavg(),
           sysconf(_SC_NPROCESSORS_ONLN));
    dash_stop(s);
    curl_global_cleanup();
    if (!dir) fs_remove_tree(root, err, sizeof(err));
    free(w), free(v), free(c1), free(st);
    return 0;
}
