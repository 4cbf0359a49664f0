/*
 * db/db_nolibpq.c — db/db.h in a minitrain built without libpq (libpq-dev absent at build time):
 * every entry point fails with the one line below, so `--db` and `minitrain db` say what is
 * missing and everything else works as before (run.db alone).
 */
#ifndef MT_HAVE_LIBPQ
#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "db/db.h"

#define NO_LIBPQ "this minitrain was built without libpq: install libpq-dev (make deps) and rebuild to use --db"

int db_available(void) { return 0; }

const char *db_url_pick(const char *opt, const char *cfg) {
    if (opt != NULL && opt[0] != '\0') return opt;
    if (cfg != NULL && cfg[0] != '\0') return cfg;
    const char *e = getenv(DB_ENV_URL);
    return e != NULL && e[0] != '\0' ? e : NULL;
}

int db_connect(const char *url, db_conn **out, char *err, size_t errlen) {
    (void)url;
    *out = NULL;
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}

void db_close(db_conn *c) { (void)c; }

int db_server_info(db_conn *c, db_server *s, char *err, size_t errlen) {
    (void)c;
    *s = (db_server){.lag_s = NAN};
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}

int db_schema_migrate(db_conn *c, int *from, int *to, char *err, size_t errlen) {
    (void)c, (void)from, (void)to;
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}

int db_schema_version(db_conn *c, int *version, char *err, size_t errlen) {
    (void)c;
    *version = 0;
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}

int db_ship_pass(db_conn *c, const char *run_dir, int batch, db_ship_stats *st, char *err,
                 size_t errlen) {
    (void)c, (void)run_dir, (void)batch, (void)st;
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}

int db_ship_run(const char *url, const char *run_dir, int follow, double poll_s, double drain_s,
                int verbose, char *err, size_t errlen) {
    (void)url, (void)run_dir, (void)follow, (void)poll_s, (void)drain_s, (void)verbose;
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}

db_shipper *db_shipper_start(const char *url, const char *run_dir, char *err, size_t errlen) {
    (void)url, (void)run_dir;
    mt_errf(err, errlen, NO_LIBPQ);
    return NULL;
}

void db_shipper_stop(db_shipper *s, double drain_s) { (void)s, (void)drain_s; }

int db_read_job(db_conn *c, const char *job, sqlite3 **out, char job_id[37], char *err,
                size_t errlen) {
    (void)c, (void)job, (void)job_id;
    *out = NULL;
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}

int db_list_runs(db_conn *c, double since, const char *status, int json, FILE *out, char *err,
                 size_t errlen) {
    (void)c, (void)since, (void)status, (void)json, (void)out;
    mt_errf(err, errlen, NO_LIBPQ);
    return DB_EUSAGE;
}
#endif /* MT_HAVE_LIBPQ */
