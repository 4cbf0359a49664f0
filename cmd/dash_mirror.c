/*
 * cmd/dash_mirror.c — `dashboard --db URL`: the team's PostgreSQL database mirrored as run.db
 * files the dashboard reads like any other run directory.
 *
 * Why a mirror: the dashboard draws every picture from a run database through report_load (one
 * drawing path, report/report.h), and db/db.h's db_read_job already materialises one job of the
 * cluster as a run.db-shaped SQLite database for `report --db`. So a thread of the dashboard
 * polls the database (db_job_stamps: one query listing every job with a stamp of its rows), and
 * each job whose stamp moved is read again (one REPEATABLE READ copy) and written to
 * MIRROR/NAME-JOBID8/run.db through SQLite's online backup into a temporary file, then renamed:
 * the dashboard's index sees a new inode (a rotated database) and summarises it again. The mirror
 * is a private temporary directory, removed when the dashboard stops; the database itself is
 * only read (a prefer-standby URL sends the reads to a standby). An outage keeps the last mirror
 * and is said once, not once per poll; a job that left the database leaves the mirror.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cmd/cmd.h"
#include "core/check.h"
#include "core/fs.h"
#include "db/db.h"

typedef struct {
    char job_id[37];
    char stamp[33];
    char dir[FS_PATH_MAX];
    int seen; /* in the last listing */
} mirrored;

struct cmd_mirror {
    char url[2048];
    char root[1024]; /* a mkdtemp path: leaves room in FS_PATH_MAX for NAME-JOBID8/run.db */
    int period_ms;
    db_conn *conn;
    mirrored *jobs;
    int n, cap;
    int down; /* 1 while an outage lasts: said once */
    int stop;
    int started; /* the poller thread runs: cmd_mirror_stop joins it */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* MIRROR/NAME-JOBID8: the run's name with anything but [A-Za-z0-9._-] as '_'. */
static void job_dir(const cmd_mirror *m, const db_job_stamp *j, char *out, size_t len) {
    char safe[64];
    size_t k = 0;
    for (const char *p = j->name; *p && k + 1 < sizeof(safe); p++) {
        char ch = *p;
        int okc = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                  ch == '.' || ch == '_' || ch == '-';
        safe[k] = okc && !(k == 0 && ch == '.') ? ch : '_';
        k++;
    }
    if (k == 0) k = (size_t)snprintf(safe, sizeof(safe), "job");
    safe[k] = '\0';
    snprintf(out, len, "%s/%.*s-%.8s", m->root, (int)k, safe, j->job_id);
}

/* Write lite to dir/run.db: the online backup into run.db.tmp, then a rename. 0 or -1 (err). */
static int write_mirror(sqlite3 *lite, const char *dir, char *err, size_t errlen) {
    if (fs_mkdir_p(dir, err, errlen) != 0) return -1;
    char tmp[FS_PATH_MAX + 16], dst[FS_PATH_MAX + 16];
    snprintf(tmp, sizeof(tmp), "%s/run.db.tmp", dir);
    snprintf(dst, sizeof(dst), "%s/run.db", dir);
    unlink(tmp);
    sqlite3 *file = NULL;
    int rc = sqlite3_open(tmp, &file);
    sqlite3_backup *b = rc == SQLITE_OK ? sqlite3_backup_init(file, "main", lite, "main") : NULL;
    if (b) {
        sqlite3_backup_step(b, -1);
        sqlite3_backup_finish(b);
    }
    rc = b ? sqlite3_errcode(file) : SQLITE_ERROR;
    if (rc != SQLITE_OK) mt_errf(err, errlen, "writing %s: %s", tmp, sqlite3_errmsg(file));
    sqlite3_close(file);
    if (rc == SQLITE_OK && rename(tmp, dst) != 0) {
        mt_errf(err, errlen, "renaming %s: %s", tmp, strerror(errno));
        rc = SQLITE_ERROR;
    }
    if (rc != SQLITE_OK) unlink(tmp);
    return rc == SQLITE_OK ? 0 : -1;
}

static mirrored *find_mirrored(cmd_mirror *m, const char *job_id) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->jobs[i].job_id, job_id)) return &m->jobs[i];
    return NULL;
}

/* Bring one listed job's mirror up to date (read again only when its stamp moved). */
static void sync_job(cmd_mirror *m, const db_job_stamp *j) {
    mirrored *e = find_mirrored(m, j->job_id);
    if (e && !strcmp(e->stamp, j->stamp)) {
        e->seen = 1;
        return;
    }
    char err[1024], id[37];
    sqlite3 *lite = NULL;
    char dir[FS_PATH_MAX];
    job_dir(m, j, dir, sizeof(dir));
    if (db_read_job(m->conn, j->job_id, &lite, id, err, sizeof(err)) != 0 ||
        write_mirror(lite, dir, err, sizeof(err)) != 0) {
        if (!e) fprintf(stderr, "minitrain: dashboard: job %s not shown: %s\n", j->job_id, err);
        sqlite3_close(lite);
        if (e) e->seen = 1; /* keep the last good copy */
        return;
    }
    sqlite3_close(lite);
    if (!e) {
        if (m->n == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 16;
            mirrored *grown = realloc(m->jobs, (size_t)m->cap * sizeof(*m->jobs));
            mtCheck(grown != NULL, "out of memory growing the dashboard's mirror list");
            m->jobs = grown;
        }
        e = &m->jobs[m->n++];
        memset(e, 0, sizeof(*e));
        snprintf(e->job_id, sizeof(e->job_id), "%s", j->job_id);
        snprintf(e->dir, sizeof(e->dir), "%s", dir);
    }
    snprintf(e->stamp, sizeof(e->stamp), "%s", j->stamp);
    e->seen = 1;
}

/* Drop the mirrors of jobs the last listing did not name. */
static void drop_unseen(cmd_mirror *m) {
    int k = 0;
    char err[512];
    for (int i = 0; i < m->n; i++) {
        if (m->jobs[i].seen) m->jobs[k++] = m->jobs[i];
        else fs_remove_tree(m->jobs[i].dir, err, sizeof(err));
    }
    m->n = k;
}

/* One poll: (re)connect, list, sync. 0, or a db/db.h code with one line in err. */
static int sync_once(cmd_mirror *m, char *err, size_t errlen) {
    if (!m->conn) {
        int rc = db_connect(m->url, &m->conn, err, errlen);
        if (rc != 0) return rc;
    }
    db_job_stamp *jobs = NULL;
    int n = 0, rc = db_job_stamps(m->conn, &jobs, &n, err, errlen);
    if (rc != 0) {
        db_close(m->conn);
        m->conn = NULL; /* reconnect on the next poll (libpq tries the hosts in order) */
        return rc;
    }
    for (int i = 0; i < m->n; i++) m->jobs[i].seen = 0;
    for (int i = 0; i < n; i++) sync_job(m, &jobs[i]);
    drop_unseen(m);
    free(jobs);
    return 0;
}

static void *mirror_main(void *arg) {
    cmd_mirror *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(m->period_ms % 1000) * 1000000L;
        ts.tv_sec += m->period_ms / 1000 + ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        if (m->stop) break;
        pthread_mutex_unlock(&m->mu);
        char err[1024];
        int rc = sync_once(m, err, sizeof(err));
        if (rc != 0 && !m->down)
            fprintf(stderr, "minitrain: dashboard: database unavailable, showing the last copy "
                    "(%s)\n", err);
        else if (rc == 0 && m->down)
            fprintf(stderr, "minitrain: dashboard: database reachable again\n");
        m->down = rc != 0;
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

cmd_mirror *cmd_mirror_start(const char *url, int period_ms, char *err, size_t errlen) {
    cmd_mirror *m = callocCheck(1, sizeof(*m));
    snprintf(m->url, sizeof(m->url), "%s", url);
    m->period_ms = period_ms < 200 ? 200 : period_ms;
    const char *tmpdir = getenv("TMPDIR");
    snprintf(m->root, sizeof(m->root), "%s/minitrain-dash-XXXXXX",
             tmpdir && tmpdir[0] ? tmpdir : "/tmp");
    if (strlen(m->root) >= sizeof(m->root) - 1 || !mkdtemp(m->root)) {
        mt_errf(err, errlen, "cannot make the mirror directory %s: %s", m->root, strerror(errno));
        free(m);
        return NULL;
    }
    char e2[1024];
    if (sync_once(m, e2, sizeof(e2)) != 0) {
        mt_errf(err, errlen, "--db: %s", e2);
        cmd_mirror_stop(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->thread, NULL, mirror_main, m) != 0) {
        mt_errf(err, errlen, "cannot start the database poller thread");
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        cmd_mirror_stop(m);
        return NULL;
    }
    m->started = 1;
    return m;
}

const char *cmd_mirror_root(const cmd_mirror *m) { return m->root; }

void cmd_mirror_stop(cmd_mirror *m) {
    if (!m) return;
    if (m->started) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
    }
    db_close(m->conn);
    char err[512];
    fs_remove_tree(m->root, err, sizeof(err));
    free(m->jobs);
    free(m);
}
