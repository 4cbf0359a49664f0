/*
 * gateway/gw_ledger.c — spend budgets, window counters and the spend ledger in the keys database
 * (SQLite), with atomic worst-case reservations (the contract: gateway/gw_ledger.h).
 *
 * Why it is shaped so:
 *   - Counters per (subject, period, window) in `spend`, next to the `ledger` rows: a budget check
 *     reads two rows by primary key instead of summing the month's ledger, so a reservation costs
 *     the same on the first and the millionth request of a month.
 *   - BEGIN IMMEDIATE takes SQLite's write lock before the first read, so check-and-add is one
 *     critical section for every connection on the file (threads of this gateway, other gateways,
 *     the CLI); a plain BEGIN would let two readers both see room and both add (a classic
 *     overspend). busy_timeout makes the others wait for the lock instead of failing.
 *   - The ledger row remembers the day and month it was reserved in, so settling after midnight
 *     corrects the window that holds the worst case, never the new one.
 *   - Windows are named by their UTC calendar date (gmtime_r), ends computed with timegm: month
 *     lengths, leap years and the year's end come from libc, not from our arithmetic.
 */
#define _GNU_SOURCE /* timegm */
#include "gateway/gw_ledger.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"

#define BUSY_TIMEOUT_MS 10000

struct gw_ledger {
    sqlite3 *db;
    pthread_mutex_t mu;
    long long (*now)(void *);
    void *now_ctx;
};

static const char *SCHEMA_SQL =
    "CREATE TABLE IF NOT EXISTS budgets("
    "  subject TEXT PRIMARY KEY, tokens_per_day INTEGER NOT NULL DEFAULT 0,"
    "  tokens_per_month INTEGER NOT NULL DEFAULT 0, cost_per_day REAL NOT NULL DEFAULT 0,"
    "  cost_per_month REAL NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS spend("
    "  subject TEXT NOT NULL, period TEXT NOT NULL, win TEXT NOT NULL,"
    "  tokens INTEGER NOT NULL DEFAULT 0, cost REAL NOT NULL DEFAULT 0,"
    "  requests INTEGER NOT NULL DEFAULT 0, open INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY(subject, period, win));"
    "CREATE TABLE IF NOT EXISTS ledger("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, key_id TEXT NOT NULL, role TEXT NOT NULL,"
    "  request_id TEXT NOT NULL, model TEXT NOT NULL, upstream TEXT NOT NULL DEFAULT '',"
    "  state TEXT NOT NULL CHECK(state IN ('reserved','settled','cut','released','cached')),"
    "  reserved_tokens INTEGER NOT NULL, reserved_cost REAL NOT NULL,"
    "  prompt_tokens INTEGER NOT NULL DEFAULT 0, completion_tokens INTEGER NOT NULL DEFAULT 0,"
    "  cost REAL NOT NULL DEFAULT 0, day TEXT NOT NULL, month TEXT NOT NULL,"
    "  at INTEGER NOT NULL, settled_at INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS ledger_by_key ON ledger(key_id, id);";

static long long now_s(gw_ledger *l) { return l->now ? l->now(l->now_ctx) : (long long)time(NULL); }

void gw_ledger_set_clock(gw_ledger *l, long long (*now)(void *ctx), void *ctx) {
    l->now = now;
    l->now_ctx = ctx;
}

void gw_ledger_windows(long long t, char day[16], char month[16], long long *day_end,
                       long long *month_end) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    /* years 0..9999 (a time past that is refused by gmtime_r's callers long before) */
    int y = (tm.tm_year + 1900) % 10000, mo = (tm.tm_mon + 1) % 100, d = tm.tm_mday % 100;
    snprintf(day, 16, "%04d-%02d-%02d", y, mo, d);
    snprintf(month, 16, "%04d-%02d", y, mo);
    struct tm e = {.tm_year = tm.tm_year, .tm_mon = tm.tm_mon, .tm_mday = tm.tm_mday + 1};
    if (day_end) *day_end = (long long)timegm(&e); /* timegm normalises day 32 → next month */
    struct tm m = {.tm_year = tm.tm_year, .tm_mon = tm.tm_mon + 1, .tm_mday = 1};
    if (month_end) *month_end = (long long)timegm(&m);
}

gw_ledger *gw_ledger_open(const char *path, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "cannot open the spend ledger in '%s': %s", path,
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    char *msg = NULL;
    rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, &msg);
    if (rc == SQLITE_OK) rc = sqlite3_exec(db, SCHEMA_SQL, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "cannot create the spend ledger in '%s': %s", path,
                msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        sqlite3_close(db);
        return NULL;
    }
    gw_ledger *l = callocCheck(1, sizeof(gw_ledger));
    l->db = db;
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void gw_ledger_close(gw_ledger *l) {
    if (!l) return;
    sqlite3_close(l->db);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* ---- small statement helpers (the caller holds l->mu) ---------------------------------------- */

static int exec1(gw_ledger *l, const char *sql) {
    return sqlite3_exec(l->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

static sqlite3_stmt *prep(gw_ledger *l, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(l->db, sql, -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

static void col_text(sqlite3_stmt *st, int i, char *out, size_t cap) {
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(out, cap, "%s", t ? (const char *)t : "");
}

static int read_budget(gw_ledger *l, const char *subject, gw_budget_limits *b) {
    memset(b, 0, sizeof(*b));
    sqlite3_stmt *st = prep(l, "SELECT tokens_per_day, tokens_per_month, cost_per_day, "
                               "cost_per_month FROM budgets WHERE subject = ?");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, subject, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st), found = rc == SQLITE_ROW;
    if (found) {
        b->tokens_per_day = sqlite3_column_int64(st, 0);
        b->tokens_per_month = sqlite3_column_int64(st, 1);
        b->cost_per_day = sqlite3_column_double(st, 2);
        b->cost_per_month = sqlite3_column_double(st, 3);
    }
    sqlite3_finalize(st);
    if (!found && rc != SQLITE_DONE) return -1;
    return found ? 0 : 1;
}

/* tokens, cost, requests, open of one window (zeros when it has no row yet) */
static int read_window(gw_ledger *l, const char *subject, const char *period, const char *win,
                       gw_usage_window *w) {
    sqlite3_stmt *st = prep(l, "SELECT tokens, cost, requests, open FROM spend WHERE subject = ? "
                               "AND period = ? AND win = ?");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, subject, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, win, -1, SQLITE_TRANSIENT);
    snprintf(w->window, sizeof(w->window), "%s", win);
    w->tokens = w->requests = 0;
    w->cost = 0;
    int rc = sqlite3_step(st), open = 0;
    if (rc == SQLITE_ROW) {
        w->tokens = sqlite3_column_int64(st, 0);
        w->cost = sqlite3_column_double(st, 1);
        w->requests = sqlite3_column_int64(st, 2);
        open = sqlite3_column_int(st, 3);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? open : -1;
}

/* add to one window's counters (creating its row) */
static int add_window(gw_ledger *l, const char *subject, const char *period, const char *win,
                      long long tokens, double cost, long long requests, long long open) {
    sqlite3_stmt *st = prep(l, "INSERT INTO spend(subject, period, win, tokens, cost, requests,"
                               " open) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                               " ON CONFLICT(subject, period, win)"
                               " DO UPDATE SET tokens = tokens + ?4, cost = cost + ?5,"
                               " requests = requests + ?6, open = open + ?7");
    if (!st) return -1;
    sqlite3_bind_text(st, 1, subject, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, win, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, tokens);
    sqlite3_bind_double(st, 5, cost);
    sqlite3_bind_int64(st, 6, requests);
    sqlite3_bind_int64(st, 7, open);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* ---- budgets --------------------------------------------------------------------------------- */

int gw_ledger_set_budget(gw_ledger *l, const char *subject, const gw_budget_limits *b, char *err,
                         size_t errlen) {
    if (b->tokens_per_day < 0 || b->tokens_per_month < 0 || b->cost_per_day < 0 ||
        b->cost_per_month < 0) {
        mt_errf(err, errlen, "budgets must be >= 0 (0 = none)");
        return -1;
    }
    pthread_mutex_lock(&l->mu);
    int none = !b->tokens_per_day && !b->tokens_per_month && !b->cost_per_day && !b->cost_per_month;
    sqlite3_stmt *st = prep(l, none ? "DELETE FROM budgets WHERE subject = ?1"
                                    : "INSERT OR REPLACE INTO budgets(subject, tokens_per_day, "
                                      "tokens_per_month, cost_per_day, cost_per_month) "
                                      "VALUES(?1, ?2, ?3, ?4, ?5)");
    int rc = -1;
    if (st) {
        sqlite3_bind_text(st, 1, subject, -1, SQLITE_TRANSIENT);
        if (!none) {
            sqlite3_bind_int64(st, 2, b->tokens_per_day);
            sqlite3_bind_int64(st, 3, b->tokens_per_month);
            sqlite3_bind_double(st, 4, b->cost_per_day);
            sqlite3_bind_double(st, 5, b->cost_per_month);
        }
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
        if (rc) mt_errf(err, errlen, "cannot write the budget: %s", sqlite3_errmsg(l->db));
        sqlite3_finalize(st);
    } else {
        mt_errf(err, errlen, "cannot write the budget: %s", sqlite3_errmsg(l->db));
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int gw_ledger_get_budget(gw_ledger *l, const char *subject, gw_budget_limits *b) {
    pthread_mutex_lock(&l->mu);
    int rc = read_budget(l, subject, b);
    pthread_mutex_unlock(&l->mu);
    return rc == 0 ? 0 : 1;
}

/* ---- reserve and settle ---------------------------------------------------------------------- */

/* Check one subject's budgets against the windows; 0 = room, GW_SPEND_REFUSED/TOO_LARGE with out
 * filled, -1 = database error. */
static int check_subject(gw_ledger *l, const char *subject, const char *day, const char *month,
                         long long day_end, long long month_end, long long tokens, double cost,
                         gw_spend_decision *out) {
    gw_budget_limits b;
    int r = read_budget(l, subject, &b);
    if (r < 0) return -1;
    if (r == 1) return 0;
    struct { const char *period, *win; long long end, tlim; double clim; } w[2] = {
        {"day", day, day_end, b.tokens_per_day, b.cost_per_day},
        {"month", month, month_end, b.tokens_per_month, b.cost_per_month}};
    for (int i = 0; i < 2; i++) {
        gw_usage_window u;
        if (read_window(l, subject, w[i].period, w[i].win, &u) < 0) return -1;
        int tok = w[i].tlim > 0 && u.tokens + tokens > w[i].tlim;
        int cst = !tok && w[i].clim > 0 && u.cost + cost > w[i].clim + 1e-12;
        if (!tok && !cst) continue;
        snprintf(out->subject, sizeof(out->subject), "%s", subject);
        snprintf(out->period, sizeof(out->period), "%s", w[i].period);
        snprintf(out->what, sizeof(out->what), "%s", tok ? "tokens" : "cost");
        out->limit = tok ? (double)w[i].tlim : w[i].clim;
        out->used = tok ? (double)u.tokens : u.cost;
        out->asked = tok ? (double)tokens : cost;
        out->reset_at = w[i].end;
        return out->asked > out->limit ? GW_SPEND_TOO_LARGE : GW_SPEND_REFUSED;
    }
    return 0;
}

int gw_ledger_reserve(gw_ledger *l, const char *key_id, const char *role, const char *request_id,
                      const char *model, long long tokens, double cost, gw_spend_decision *out) {
    memset(out, 0, sizeof(*out));
    char day[16], month[16], rsub[40];
    long long day_end, month_end, now;
    snprintf(rsub, sizeof(rsub), "role:%s", role ? role : "");
    pthread_mutex_lock(&l->mu);
    now = now_s(l);
    gw_ledger_windows(now, day, month, &day_end, &month_end);
    if (exec1(l, "BEGIN IMMEDIATE")) {
        pthread_mutex_unlock(&l->mu);
        return GW_SPEND_UNAVAILABLE;
    }
    int rc = check_subject(l, key_id, day, month, day_end, month_end, tokens, cost, out);
    if (rc == 0 && role && *role)
        rc = check_subject(l, rsub, day, month, day_end, month_end, tokens, cost, out);
    if (rc == 0) {
        const char *subs[2] = {key_id, rsub};
        for (int s = 0; s < (role && *role ? 2 : 1) && rc == 0; s++)
            if (add_window(l, subs[s], "day", day, tokens, cost, 1, 1) ||
                add_window(l, subs[s], "month", month, tokens, cost, 1, 1))
                rc = -1;
        sqlite3_stmt *st = rc ? NULL
                              : prep(l, "INSERT INTO ledger(key_id, role, request_id, model, "
                                        "state, "
                                        "reserved_tokens, reserved_cost, day, month, at) "
                                        "VALUES(?, ?, ?, ?, 'reserved', ?, ?, ?, ?, ?)");
        if (st) {
            sqlite3_bind_text(st, 1, key_id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 2, role ? role : "", -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 3, request_id ? request_id : "", -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 4, model ? model : "", -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(st, 5, tokens);
            sqlite3_bind_double(st, 6, cost);
            sqlite3_bind_text(st, 7, day, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 8, month, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 9, now);
            rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
            sqlite3_finalize(st);
            out->reservation = sqlite3_last_insert_rowid(l->db);
        } else {
            rc = -1;
        }
    }
    if (rc == 0 && exec1(l, "COMMIT") == 0) {
        pthread_mutex_unlock(&l->mu);
        return GW_SPEND_OK;
    }
    exec1(l, "ROLLBACK");
    pthread_mutex_unlock(&l->mu);
    return rc > 0 ? rc : GW_SPEND_UNAVAILABLE;
}

int gw_ledger_settle(gw_ledger *l, long long reservation, gw_settle_kind kind, const char *upstream,
                     long long prompt_tokens, long long completion_tokens, double cost) {
    static const char *const STATE[] = {"settled", "cut", "released", "cached"};
    if (kind == GW_SETTLE_RELEASE || kind == GW_SETTLE_CACHED) {
        prompt_tokens = completion_tokens = 0;
        cost = 0;
    }
    if (prompt_tokens < 0) prompt_tokens = 0;
    if (completion_tokens < 0) completion_tokens = 0;
    pthread_mutex_lock(&l->mu);
    if (exec1(l, "BEGIN IMMEDIATE")) {
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    int rc = -1;
    sqlite3_stmt *st = prep(l, "SELECT key_id, role, reserved_tokens, reserved_cost, day, month, "
                               "state FROM ledger WHERE id = ?");
    char key[40] = "", role[40] = "", day[16] = "", month[16] = "", state[16] = "";
    long long rt = 0;
    double rcst = 0;
    if (st) {
        sqlite3_bind_int64(st, 1, reservation);
        if (sqlite3_step(st) == SQLITE_ROW) {
            col_text(st, 0, key, sizeof(key));
            col_text(st, 1, role, sizeof(role));
            rt = sqlite3_column_int64(st, 2);
            rcst = sqlite3_column_double(st, 3);
            col_text(st, 4, day, sizeof(day));
            col_text(st, 5, month, sizeof(month));
            col_text(st, 6, state, sizeof(state));
            rc = 0;
        }
        sqlite3_finalize(st);
    }
    if (rc == 0 && strcmp(state, "reserved") != 0) { /* settled before: nothing to do */
        exec1(l, "ROLLBACK");
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    long long dt = prompt_tokens + completion_tokens - rt;
    double dc = cost - rcst;
    long long dreq = kind == GW_SETTLE_RELEASE ? -1 : 0; /* a released request was never served */
    char rsub[48];
    snprintf(rsub, sizeof(rsub), "role:%s", role);
    const char *subs[2] = {key, rsub};
    for (int s = 0; rc == 0 && s < (role[0] ? 2 : 1); s++)
        if (add_window(l, subs[s], "day", day, dt, dc, dreq, -1) ||
            add_window(l, subs[s], "month", month, dt, dc, dreq, -1))
            rc = -1;
    st = rc ? NULL : prep(l, "UPDATE ledger SET state = ?, upstream = ?, prompt_tokens = ?, "
                             "completion_tokens = ?, cost = ?, settled_at = ? WHERE id = ?");
    if (st) {
        sqlite3_bind_text(st, 1, STATE[kind], -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, upstream ? upstream : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, prompt_tokens);
        sqlite3_bind_int64(st, 4, completion_tokens);
        sqlite3_bind_double(st, 5, cost);
        sqlite3_bind_int64(st, 6, now_s(l));
        sqlite3_bind_int64(st, 7, reservation);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
        sqlite3_finalize(st);
    } else {
        rc = -1;
    }
    if (rc == 0 && exec1(l, "COMMIT") == 0) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    exec1(l, "ROLLBACK");
    pthread_mutex_unlock(&l->mu);
    return -1;
}

/* ---- reading --------------------------------------------------------------------------------- */

int gw_ledger_usage(gw_ledger *l, const char *subject, gw_usage *out) {
    memset(out, 0, sizeof(*out));
    char day[16], month[16];
    long long de, me;
    pthread_mutex_lock(&l->mu);
    gw_ledger_windows(now_s(l), day, month, &de, &me);
    int rc = read_budget(l, subject, &out->limits);
    out->has_limits = rc == 0;
    int od = rc < 0 ? -1 : read_window(l, subject, "day", day, &out->day);
    int om = od < 0 ? -1 : read_window(l, subject, "month", month, &out->month);
    out->day.reset_at = de;
    out->month.reset_at = me;
    out->open = om > 0 ? om : 0;
    sqlite3_stmt *st = om < 0 ? NULL : prep(l, "SELECT count(*) FROM ledger WHERE key_id = ?");
    if (st) {
        sqlite3_bind_text(st, 1, subject, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) out->ledger_rows = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&l->mu);
    return om < 0 ? -1 : 0;
}

int gw_ledger_rows(gw_ledger *l, const char *key_id, int limit, gw_ledger_row **rows) {
    *rows = NULL;
    pthread_mutex_lock(&l->mu);
    sqlite3_stmt *st = prep(l, "SELECT id, at, prompt_tokens, completion_tokens, reserved_tokens, "
                               "cost, reserved_cost, request_id, model, upstream, state FROM ledger"
                               " WHERE key_id = ? ORDER BY id DESC LIMIT ?");
    int n = 0, cap = 0;
    if (st) {
        sqlite3_bind_text(st, 1, key_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 2, limit);
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                gw_ledger_row *grown = realloc(*rows, (size_t)cap * sizeof(gw_ledger_row));
                mtCheck(grown != NULL, "out of memory reading the ledger");
                *rows = grown;
            }
            gw_ledger_row *r = &(*rows)[n++];
            r->id = sqlite3_column_int64(st, 0);
            r->at = sqlite3_column_int64(st, 1);
            r->prompt_tokens = sqlite3_column_int64(st, 2);
            r->completion_tokens = sqlite3_column_int64(st, 3);
            r->reserved_tokens = sqlite3_column_int64(st, 4);
            r->cost = sqlite3_column_double(st, 5);
            r->reserved_cost = sqlite3_column_double(st, 6);
            col_text(st, 7, r->request_id, sizeof(r->request_id));
            col_text(st, 8, r->model, sizeof(r->model));
            col_text(st, 9, r->upstream, sizeof(r->upstream));
            col_text(st, 10, r->state, sizeof(r->state));
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&l->mu);
    return n;
}
