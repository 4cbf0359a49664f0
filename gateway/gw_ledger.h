/*
 * gateway/gw_ledger.h — spend budgets and the spend ledger of `minitrain gateway`.
 *
 * Every request of a key leaves one ledger row in the keys database (gateway.db, SQLite): key,
 * request id, model, upstream, prompt and completion tokens, cost, time and how it ended. A key
 * (and a role, as the subject "role:NAME") may carry budgets: tokens per day / per month and a
 * cost per day / per month (cost = tokens × the model's prices in the gateway's config, per
 * million tokens). The windows are calendar windows in UTC: a day is YYYY-MM-DD, a month YYYY-MM,
 * so a window "resets" by being a new row — there is no reset job that could be missed, and spend
 * from the old window cannot carry over (the failure class LiteLLM's trackers are full of).
 *
 * A request reserves its worst case (prompt tokens + max_tokens, and the cost of that) before it
 * is sent, in one BEGIN IMMEDIATE transaction: read the window counters, check every budget, add
 * the worst case, insert the ledger row. SQLite's write lock serialises that transaction across
 * threads AND processes sharing the file, so N concurrent reservations of cost c against a budget
 * B admit exactly ⌊B/c⌋, whether they come through one gateway or several on one store. After the
 * answer the reservation settles in the window it was reserved in (a request that straddles
 * midnight charges the day it started): complete answers to the upstream's usage, cut streams to
 * what was produced, failures to nothing.
 *
 * The clock is injectable (gw_ledger_set_clock), so the calendar reset is tested without waiting
 * for a month to end (tests/test_gw_ledger.c). Thread-safe: one connection behind one mutex.
 */
#ifndef MT_GATEWAY_GW_LEDGER_H
#define MT_GATEWAY_GW_LEDGER_H

#include <stddef.h>

typedef struct gw_ledger gw_ledger;

/* Budgets of one subject (a key id, or "role:NAME"); 0 = no such budget. Costs in the currency
 * of the config's prices. */
typedef struct {
    long long tokens_per_day, tokens_per_month;
    double cost_per_day, cost_per_month;
} gw_budget_limits;

/* Open the ledger tables in the keys database at path (created if missing: budgets, spend,
 * ledger). NULL + one line in err on failure. */
gw_ledger *gw_ledger_open(const char *path, char *err, size_t errlen);
void gw_ledger_close(gw_ledger *l);
/* Test hook: unix seconds from now(ctx) instead of time(2). */
void gw_ledger_set_clock(gw_ledger *l, long long (*now)(void *ctx), void *ctx);

/* Set (all zero: remove) the budgets of subject. 0, or -1 with err. */
int gw_ledger_set_budget(gw_ledger *l, const char *subject, const gw_budget_limits *b, char *err,
                         size_t errlen);
/* The budgets of subject: 0 (filled), 1 = none set (zeroed). */
int gw_ledger_get_budget(gw_ledger *l, const char *subject, gw_budget_limits *b);

enum { GW_SPEND_OK = 0, GW_SPEND_REFUSED = 1, GW_SPEND_TOO_LARGE = 2, GW_SPEND_UNAVAILABLE = -1 };

typedef struct {
    long long reservation;  /* the ledger row, for gw_ledger_settle (when OK) */
    /* when refused: the first budget that said no */
    char subject[40], period[8], what[8]; /* "KEYID"|"role:user", "day"|"month", "tokens"|"cost" */
    double limit, used, asked;
    long long reset_at;     /* unix seconds when that window ends */
} gw_spend_decision;

/* Reserve the worst case (tokens, cost) of one request of key_id (role: its role name, whose
 * "role:NAME" budget applies too) in today's and this month's windows. GW_SPEND_OK (*out
 * ->reservation set), GW_SPEND_REFUSED (a budget would be exceeded: out says which, and when it
 * resets), GW_SPEND_TOO_LARGE (asked alone is over a budget: never admissible), or
 * GW_SPEND_UNAVAILABLE (the database could not be written: answer 503). */
int gw_ledger_reserve(gw_ledger *l, const char *key_id, const char *role, const char *request_id,
                      const char *model, long long tokens, double cost, gw_spend_decision *out);

/* How a reservation ends (the ledger row's state). */
typedef enum {
    GW_SETTLE_DONE = 0,    /* answered completely: the upstream's usage */
    GW_SETTLE_CUT = 1,     /* a stream cut short (client gone, upstream broke): what was produced */
    GW_SETTLE_RELEASE = 2, /* nothing was produced (refused, failed): nothing is charged */
    GW_SETTLE_CACHED = 3,  /* answered from the response cache: nothing is charged */
} gw_settle_kind;
/* Settle reservation: the windows it was reserved in are corrected from the worst case to
 * prompt + completion tokens and cost. Idempotent (a settled row stays as it is). 0, or -1. */
int gw_ledger_settle(gw_ledger *l, long long reservation, gw_settle_kind kind, const char *upstream,
                     long long prompt_tokens, long long completion_tokens, double cost);

typedef struct {
    char window[16];       /* "2026-12-02" or "2026-12" */
    long long tokens, requests;
    double cost;
    long long reset_at;    /* unix seconds when the window ends */
} gw_usage_window;

typedef struct {
    gw_budget_limits limits; /* the key's own budgets */
    int has_limits;
    gw_usage_window day, month;
    long long open;          /* reservations not yet settled (worst cases still counted) */
    long long ledger_rows;   /* rows of this key, all time */
} gw_usage;

/* The usage of subject in the current windows (by the ledger's clock). 0, or -1. */
int gw_ledger_usage(gw_ledger *l, const char *subject, gw_usage *out);

/* One ledger row, for `gateway keys usage --json` and the tests. */
typedef struct {
    long long id, at, prompt_tokens, completion_tokens, reserved_tokens;
    double cost, reserved_cost;
    char request_id[48], model[128], upstream[64], state[12];
} gw_ledger_row;
/* The newest `limit` rows of key_id, newest first; *rows malloc'd. Returns n (≥ 0). */
int gw_ledger_rows(gw_ledger *l, const char *key_id, int limit, gw_ledger_row **rows);

/* The calendar windows of unix time t (UTC): "YYYY-MM-DD" and "YYYY-MM", and when they end. */
void gw_ledger_windows(long long t, char day[16], char month[16], long long *day_end,
                       long long *month_end);

#endif
