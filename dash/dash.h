/*
 * dash/dash.h — `minitrain dashboard`: a small read-only web server over the run databases under
 * some directories, the page people keep open while a job trains (docs/dashboard.md).
 *
 * It serves the runs page (every run: status, steps, newest losses, tokens/s, MFU, ETTR,
 * failures, start, duration; sortable and filterable), a run's page (the very page `report
 * --html` writes, report/report.h: report_html_write — one drawing path), and a compare page (the
 * loss curves of two or more runs on one picture, report/svg.h: svg_compare, and their configs
 * side by side). Pages poll for changes (a small inline script; nothing is fetched from outside
 * the host) and the server answers an unchanged page with 304 from the files' sizes and times
 * alone, so a dashboard watching many runs costs a training job nearly nothing.
 *
 * Read-only: every database is opened SQLITE_OPEN_READONLY for one request and closed again, so a
 * database written, rotated (a new inode) or deleted under the dashboard is seen as such on the
 * next request. Loopback by default; any other bind address needs a bearer token, checked in
 * constant time (OpenSSL CRYPTO_memcmp over SHA-256 digests, as the gateway checks keys).
 */
#ifndef MT_DASH_H
#define MT_DASH_H

#include <stddef.h>

#include <sqlite3.h>

#include "report/report.h"

/* Sections another module contributes to a run's page (cmd/dashboard.c wires safety's
 * robustness, as cmd/report.c does for report --html): fill out[0..max) for the run's open
 * database and return how many. */
typedef int (*dash_sections_fn)(sqlite3 *db, report_section *out, int max);

typedef struct {
    const char *const *roots; /* directories holding run directories (or being one) */
    int n_roots;
    const char *bind; /* address to listen on: "127.0.0.1" when NULL */
    int port;         /* 0 = the kernel picks one (dash_start returns it) */
    const char *token; /* bearer token every request must carry, or NULL (loopback only) */
    int poll_ms;       /* how often the pages ask for changes; 0 = 2000 */
    dash_sections_fn sections; /* may be NULL */
} dash_opts;

typedef struct dash_server dash_server;

/* 1 when host names a loopback address (127.0.0.0/8, ::1, localhost): the only addresses the
 * dashboard serves without a token. */
int dash_is_loopback(const char *host);

/* Check o (roots exist and are directories; a non-loopback bind has a token), then listen.
 * Returns the server with *port the bound port, or NULL with err (one line for a person). */
dash_server *dash_start(const dash_opts *o, int *port, char *err, size_t errlen);

/* Stop listening and free everything. NULL is a no-op. */
void dash_stop(dash_server *s);

#endif /* MT_DASH_H */
