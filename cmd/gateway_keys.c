/*
 * cmd/gateway_keys.c — `minitrain gateway keys add|ls|revoke|disable|enable|audit`: the key
 * manager of the gateway (gateway/gw_keys.h), run by `minitrain gateway keys ...`.
 *
 * The CLI works on gateway.db directly: whoever may write that file is trusted (that is how the
 * first admin key comes to exist), and a running gateway sees every change on its next request
 * (it reads the database per check). Actions are audited as "cli:<login>".
 *
 * `add` prints what it made on stdout and the key, alone, on the LAST stdout line, so scripts can
 * take it with `| tail -n1`. Errors are one "minitrain: error:" line and exit 2; nothing here
 * calls exit(), so tests drive cmd_gateway_keys() in-process. Each command has its own option
 * table (cmd/args.h); revoke, disable and enable also take the key id as a plain word.
 */
#define _GNU_SOURCE /* timegm, strptime */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "gateway/gw_keys.h"
#include "gateway/gw_ledger.h"

static const char *USAGE =
    "usage: minitrain gateway keys <command> --keys-db FILE [options]\n\n"
    "API keys of the gateway (stored as SHA-256 hashes in FILE, SQLite):\n"
    "  add      create a key; prints it ONCE, alone on the last stdout line\n"
    "  ls       list keys (--all: revoked ones too; --json)\n"
    "  revoke   revoke a key for good:   revoke ID|KEY\n"
    "  disable  stop a key until enabled: disable ID   (enable ID undoes it)\n"
    "  audit    the audit trail, newest first (--limit N)\n"
    "  budget   set spend budgets:       budget ID|role:NAME --tokens-per-day N ...\n"
    "  usage    spend in today's and this month's UTC windows: usage ID|KEY [--json]\n"
    "`minitrain gateway keys <command> --help` lists the command's options.\n\n"
    "example:\n"
    "  minitrain gateway keys add --keys-db gateway.db --role admin --name ops\n"
    "  minitrain gateway keys add --keys-db gateway.db --models shakespeare --rpm 60 --tpm 20000\n"
    "See docs/gateway-keys.md.\n";

/* WHEN → unix seconds (0 = never). Returns 0 or an exit code. */
static int parse_expires(const char *s, long long now, long long *out) {
    if (!strcmp(s, "never") || !strcmp(s, "0")) {
        *out = 0;
        return 0;
    }
    char *end;
    errno = 0;
    if (s[0] == '@') {
        long long v = strtoll(s + 1, &end, 10);
        if (end == s + 1 || *end || errno || v <= 0) goto bad;
        *out = v;
        return 0;
    }
    long long v = strtoll(s, &end, 10);
    if (end != s && !errno && v > 0 && end[0] && !end[1] && strchr("smhdw", end[0])) {
        long long mul = end[0] == 's' ? 1 : end[0] == 'm' ? 60 : end[0] == 'h' ? 3600
                      : end[0] == 'd' ? 86400 : 604800;
        if (v > 100LL * 365 * 86400 / mul) goto bad;
        *out = now + v * mul;
        return 0;
    }
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *rest = strptime(s, "%Y-%m-%d", &tm);
    if (rest && *rest == 'T') {
        const char *r2 = strptime(rest + 1, "%H:%M:%S", &tm);
        if (!r2) r2 = strptime(rest + 1, "%H:%M", &tm);
        rest = r2;
        if (rest && *rest == 'Z') rest++;
    }
    if (rest && *rest == 0) {
        *out = (long long)timegm(&tm);
        return 0;
    }
bad:
    return mt_error("--expires '%s' is not a time (use 30d, 12h, 90m, 3600s, 2w, 2026-01-31, "
                    "2026-01-31T12:00:00Z, @UNIXSECONDS or never)", s);
}

static void actor_name(char *out, size_t cap) {
    struct passwd *pw = getpwuid(getuid());
    snprintf(out, cap, "cli:%s", pw && pw->pw_name ? pw->pw_name : "?");
}

static void fmt_time(long long t, char *out, size_t cap) {
    if (t == 0) {
        snprintf(out, cap, "never");
        return;
    }
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void print_limits(const gw_key_info *i, char *out, size_t cap) {
    snprintf(out, cap, "rpm %ld, tpm %ld, max concurrent %d, max_tokens %d", i->rpm, i->tpm,
             i->max_concurrent, i->max_tokens);
}

typedef struct {
    const char *db, *name, *models, *role, *expires;
    long long rpm, tpm;
    int maxc, maxtok, limit, all, json;
    long long tpd, tpmo;  /* budget: tokens per day / per month */
    double cpd, cpmo;     /* budget: cost per day / per month */
} cli_opts;

static int cmd_add(gw_keys *k, const cli_opts *o, const char *actor) {
    gw_key_info spec;
    memset(&spec, 0, sizeof(spec));
    spec.role = GW_ROLE_USER;
    if (o->role && gw_role_parse(o->role, &spec.role))
        return mt_error("--role must be admin, user or viewer (got '%s')", o->role);
    if (o->models) {
        if (strlen(o->models) >= sizeof(spec.models))
            return mt_error("--models is longer than %zu bytes", sizeof(spec.models) - 1);
        snprintf(spec.models, sizeof(spec.models), "%s", o->models);
    }
    spec.rpm = (long)o->rpm;
    spec.tpm = (long)o->tpm;
    spec.max_concurrent = o->maxc;
    spec.max_tokens = o->maxtok;
    if (o->expires) {
        int rc = parse_expires(o->expires, gw_keys_now(k), &spec.expires_at);
        if (rc) return rc;
    }
    char key[GW_KEY_LEN + 1], err[256], lim[160], exp[40];
    gw_key_row row;
    if (gw_keys_create(k, actor, o->name, &spec, key, &row, err, sizeof(err)) != 0)
        return mt_error("%s", err);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "role", gw_role_name(row.info.role));
    cJSON_AddStringToObject(d, "via", "cli");
    char *detail = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    gw_keys_audit(k, actor, "key.create", row.info.id, 201, detail);
    cJSON_free(detail);
    print_limits(&row.info, lim, sizeof(lim));
    fmt_time(row.info.expires_at, exp, sizeof(exp));
    printf("minitrain: created key %s (role %s, models %s, %s, expires %s)%s%s\n", row.info.id,
           gw_role_name(row.info.role), row.info.models[0] ? row.info.models : "*", lim, exp,
           row.name[0] ? ", name " : "", row.name);
    printf("minitrain: the key is shown only this once and is stored as a hash; keep it safe:\n");
    printf("%s\n", key);
    fflush(stdout);
    memset(key, 0, sizeof(key));
    return MT_EXIT_OK;
}

static int cmd_ls(gw_keys *k, const cli_opts *o, const char *actor) {
    gw_key_row *rows;
    int n = gw_keys_list(k, o->all, &rows);
    gw_keys_audit(k, actor, "key.list", NULL, 200, NULL);
    long long now = gw_keys_now(k);
    cJSON *list = o->json ? cJSON_CreateArray() : NULL;
    if (!o->json && n) printf("%-16s  %-6s  %-7s %-20s %8s %10s %5s %8s  %-20s  %s\n", "ID", "ROLE",
                       "STATE", "MODELS", "RPM", "TPM", "CONC", "MAX_TOK", "EXPIRES", "NAME");
    for (int i = 0; i < n; i++) {
        const gw_key_row *r = &rows[i];
        const char *state = r->revoked_at ? "revoked" : r->info.disabled ? "disabled"
                          : (r->info.expires_at && now >= r->info.expires_at) ? "expired" : "active";
        char exp[40];
        fmt_time(r->info.expires_at, exp, sizeof(exp));
        if (o->json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "id", r->info.id);
            cJSON_AddStringToObject(j, "role", gw_role_name(r->info.role));
            cJSON_AddStringToObject(j, "state", state);
            cJSON_AddStringToObject(j, "models", r->info.models[0] ? r->info.models : "*");
            cJSON_AddNumberToObject(j, "rpm", (double)r->info.rpm);
            cJSON_AddNumberToObject(j, "tpm", (double)r->info.tpm);
            cJSON_AddNumberToObject(j, "max_concurrent", r->info.max_concurrent);
            cJSON_AddNumberToObject(j, "max_tokens", r->info.max_tokens);
            cJSON_AddNumberToObject(j, "expires_at", (double)r->info.expires_at);
            cJSON_AddNumberToObject(j, "created_at", (double)r->created_at);
            cJSON_AddStringToObject(j, "name", r->name);
            cJSON_AddItemToArray(list, j);
        } else {
            printf("%-16s  %-6s  %-7s %-20.20s %8ld %10ld %5d %8d  %-20s  %s\n", r->info.id,
                   gw_role_name(r->info.role), state, r->info.models[0] ? r->info.models : "*",
                   r->info.rpm, r->info.tpm, r->info.max_concurrent, r->info.max_tokens, exp,
                   r->name);
        }
    }
    if (o->json) {
        char *text = cJSON_PrintUnformatted(list);
        mtCheck(text != NULL, "out of memory");
        printf("%s\n", text);
        cJSON_free(text);
        cJSON_Delete(list);
    } else if (n == 0) printf("minitrain: no keys%s in %s (create one: minitrain gateway keys add "
                            "--keys-db %s --role admin)\n", o->all ? "" : " (active)", o->db, o->db);
    free(rows);
    return MT_EXIT_OK;
}

/* ID, or a whole key (its id is derived from its hash, exactly as a check would). */
static int resolve_id(gw_keys *k, const char *arg, char id[24]) {
    if (!strncmp(arg, "mt-", 3)) {
        char auth[GW_KEY_LEN + 16];
        snprintf(auth, sizeof(auth), "Bearer %s", arg);
        gw_key_info info;
        int rc = gw_keys_check(k, auth, &info);
        if (rc == GW_AUTH_OK || rc == GW_AUTH_EXPIRED || rc == GW_AUTH_DISABLED) {
            snprintf(id, 24, "%s", info.id);
            return 0;
        }
        return mt_error("that key is not in the database (or is already revoked)");
    }
    gw_key_row r;
    if (gw_keys_get(k, arg, &r) != 0)
        return mt_error("no key with id '%s' (see `minitrain gateway keys ls --all`)", arg);
    snprintf(id, 24, "%s", arg);
    return 0;
}

static int cmd_revoke(gw_keys *k, const char *arg, const char *actor) {
    char id[24];
    int rc = resolve_id(k, arg, id);
    if (rc) return rc;
    rc = gw_keys_revoke(k, id);
    gw_keys_audit(k, actor, "key.revoke", id, rc < 0 ? 404 : 200, NULL);
    if (rc < 0) return mt_error("no key with id '%s'", id);
    printf("minitrain: key %s %s\n", id, rc == 1 ? "was already revoked" : "revoked");
    return MT_EXIT_OK;
}

static int cmd_enable(gw_keys *k, const char *arg, int disable, const char *actor) {
    char id[24];
    int rc = resolve_id(k, arg, id);
    if (rc) return rc;
    gw_key_row r;
    gw_keys_get(k, id, &r);
    r.info.disabled = disable;
    rc = gw_keys_put(k, &r);
    gw_keys_audit(k, actor, disable ? "key.disable" : "key.enable", id, rc == 0 ? 200 : 409, NULL);
    if (rc == 1) return mt_error("key %s is revoked; revoked keys cannot be changed", id);
    if (rc < 0) return mt_error("no key with id '%s'", id);
    printf("minitrain: key %s %s\n", id, disable ? "disabled" : "enabled");
    return MT_EXIT_OK;
}

static int cmd_audit(gw_keys *k, const cli_opts *o, const char *actor) {
    gw_audit_row *rows;
    int n = gw_keys_audit_list(k, o->limit, &rows);
    gw_keys_audit(k, actor, "audit.read", NULL, 200, NULL);
    for (int i = 0; i < n; i++) {
        char t[40];
        fmt_time(rows[i].at, t, sizeof(t));
        printf("%s  %-28s %-14s %-16s %3d  %s\n", t, rows[i].actor, rows[i].action,
               rows[i].target[0] ? rows[i].target : "-", rows[i].status, rows[i].detail);
    }
    free(rows);
    return MT_EXIT_OK;
}

/* ---- budgets and usage (gateway/gw_ledger.h) ------------------------------------------------- */

/* ID|KEY|role:NAME → the ledger subject. Returns 0 or an exit code. */
static int resolve_subject(gw_keys *k, const char *arg, char out[40]) {
    if (!strncmp(arg, "role:", 5)) {
        gw_role r;
        if (gw_role_parse(arg + 5, &r))
            return mt_error("'%s': the role must be admin, user or viewer", arg);
        snprintf(out, 40, "%s", arg);
        return 0;
    }
    char id[24];
    int rc = resolve_id(k, arg, id);
    if (!rc) snprintf(out, 40, "%s", id);
    return rc;
}

static int cmd_budget(gw_keys *k, gw_ledger *l, const char *arg, const cli_opts *o,
                      const char *actor) {
    char subject[40], err[200], detail[200];
    int rc = resolve_subject(k, arg, subject);
    if (rc) return rc;
    gw_budget_limits b = {o->tpd, o->tpmo, o->cpd, o->cpmo};
    rc = gw_ledger_set_budget(l, subject, &b, err, sizeof(err));
    snprintf(detail, sizeof(detail), "{\"tokens_per_day\":%lld,\"tokens_per_month\":%lld,"
             "\"cost_per_day\":%g,\"cost_per_month\":%g}", b.tokens_per_day, b.tokens_per_month,
             b.cost_per_day, b.cost_per_month);
    gw_keys_audit(k, actor, "budget.set", subject, rc ? 500 : 200, detail);
    if (rc) return mt_error("%s", err);
    printf("minitrain: budgets of %s: %s\n", subject, detail);
    return MT_EXIT_OK;
}

static int cmd_usage(gw_keys *k, gw_ledger *l, const char *arg, const cli_opts *o,
                     const char *actor) {
    char subject[40], dr[40], mr[40];
    int rc = resolve_subject(k, arg, subject);
    if (rc) return rc;
    gw_usage u;
    if (gw_ledger_usage(l, subject, &u)) return mt_error("cannot read the spend ledger");
    gw_keys_audit(k, actor, "usage.read", subject, 200, NULL);
    fmt_time(u.day.reset_at, dr, sizeof(dr));
    fmt_time(u.month.reset_at, mr, sizeof(mr));
    const gw_budget_limits *b = &u.limits;
    if (o->json) {
        printf("{\"subject\":\"%s\",\"budgets\":{\"tokens_per_day\":%lld,"
               "\"tokens_per_month\":%lld,\"cost_per_day\":%.17g,\"cost_per_month\":%.17g},"
               "\"day\":{\"window\":\"%s\",\"tokens\":%lld,\"cost\":%.17g,\"requests\":%lld,"
               "\"resets_at\":\"%s\"},\"month\":{\"window\":\"%s\",\"tokens\":%lld,"
               "\"cost\":%.17g,\"requests\":%lld,\"resets_at\":\"%s\"},\"open\":%lld,"
               "\"ledger\":[", subject, b->tokens_per_day, b->tokens_per_month, b->cost_per_day,
               b->cost_per_month, u.day.window, u.day.tokens, u.day.cost, u.day.requests, dr,
               u.month.window, u.month.tokens, u.month.cost, u.month.requests, mr, u.open);
        gw_ledger_row *rows;
        int n = strncmp(subject, "role:", 5) ? gw_ledger_rows(l, subject, o->limit, &rows) : 0;
        for (int i = 0; i < n; i++) /* ids, states and model names are checked ASCII */
            printf("%s{\"id\":%lld,\"at\":%lld,\"request_id\":\"%s\",\"model\":\"%s\","
                   "\"upstream\":\"%s\",\"state\":\"%s\",\"reserved_tokens\":%lld,"
                   "\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"cost\":%.17g}",
                   i ? "," : "", rows[i].id, rows[i].at, rows[i].request_id, rows[i].model,
                   rows[i].upstream, rows[i].state, rows[i].reserved_tokens,
                   rows[i].prompt_tokens, rows[i].completion_tokens, rows[i].cost);
        if (n) free(rows);
        printf("]}\n");
        return MT_EXIT_OK;
    }
    printf("%s: %s\n", subject, u.has_limits ? "budgets below" : "no budgets (usage only)");
    printf("  day   %s  tokens %lld%s%lld  cost %.6g%s%.6g  requests %lld  resets %s\n",
           u.day.window, u.day.tokens, b->tokens_per_day ? " of " : "", b->tokens_per_day,
           u.day.cost, b->cost_per_day ? " of " : "", b->cost_per_day, u.day.requests, dr);
    printf("  month %s     tokens %lld%s%lld  cost %.6g%s%.6g  requests %lld  resets %s\n",
           u.month.window, u.month.tokens, b->tokens_per_month ? " of " : "",
           b->tokens_per_month, u.month.cost, b->cost_per_month ? " of " : "", b->cost_per_month,
           u.month.requests, mr);
    printf("  open reservations %lld (counted at their worst case until settled); ledger rows "
           "%lld\n", u.open, u.ledger_rows);
    return MT_EXIT_OK;
}

/* The one plain word (the key id) of revoke/disable/enable, taken out of argv so the option table
 * sees options only. Words that are the values of options are skipped. Returns the word or NULL;
 * *argc shrinks by one when found. */
static const char *take_word(const args_opt *opts, int *argc, char **argv) {
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--", 2)) {
            if (strchr(a, '=')) continue;
            for (const args_opt *o = opts; o->name; o++)
                if (!strcmp(a + 2, o->name) && o->type != KEYTAB_FLAG) i++;
            continue;
        }
        for (int j = i; j + 1 < *argc; j++) argv[j] = argv[j + 1];
        (*argc)--;
        return a;
    }
    return NULL;
}

/* Command number k (the order of cmds in cmd_gateway_keys) on the open database. */
static int run_command(int k, gw_keys *keys, const char *db, const char *id_arg,
                       const cli_opts *o, const char *actor) {
    char err[700];
    gw_ledger *ledger = NULL;
    if (k >= 6 && !(ledger = gw_ledger_open(db, err, sizeof(err)))) return mt_error("%s", err);
    int rc;
    switch (k) {
    case 0: rc = cmd_add(keys, o, actor); break;
    case 1: rc = cmd_ls(keys, o, actor); break;
    case 2: rc = cmd_revoke(keys, id_arg, actor); break;
    case 3: rc = cmd_enable(keys, id_arg, 1, actor); break;
    case 4: rc = cmd_enable(keys, id_arg, 0, actor); break;
    case 5: rc = cmd_audit(keys, o, actor); break;
    case 6: rc = cmd_budget(keys, ledger, id_arg, o, actor); break;
    default: rc = cmd_usage(keys, ledger, id_arg, o, actor);
    }
    gw_ledger_close(ledger);
    return rc;
}

int cmd_gateway_keys(int argc, char **argv) {
    /* argv[0] = "keys", argv[1] = the command */
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? MT_EXIT_USAGE : MT_EXIT_OK;
    }
    const char *cmd = argv[1];
    static const char *const cmds[] = {"add",   "ls",    "revoke", "disable",
                                       "enable", "audit", "budget", "usage"};
    int k = -1;
    for (int i = 0; i < 8; i++)
        if (!strcmp(cmd, cmds[i])) k = i;
    if (k < 0)
        return mt_error("unknown keys command '%s' (add, ls, revoke, disable, enable, audit, "
                        "budget, usage; see "
                        "`minitrain gateway keys --help`)", cmd);
    cli_opts o = {.limit = 50};
    const args_opt db = {"keys-db", KEYTAB_STRING, &o.db, 0, 0, "FILE", "the gateway's key database "
                         "(SQLite; add creates it)", ""};
    const args_opt add_opts[] = {
        db,
        {"name", KEYTAB_STRING, &o.name, 0, 0, "NAME", "a label for humans", ""},
        {"role", KEYTAB_STRING, &o.role, 0, 0, "R", "admin | user | viewer", "user"},
        {"models", KEYTAB_STRING, &o.models, 0, 0, "M,...", "public model names it may call", "all"},
        {"rpm", KEYTAB_I64, &o.rpm, 0, 1e9, "N", "requests per minute (0 = unlimited)", NULL},
        {"tpm", KEYTAB_I64, &o.tpm, 0, 1e12, "N", "tokens per minute (0 = unlimited)", NULL},
        {"max-concurrent", KEYTAB_INT, &o.maxc, 0, 1e6, "N", "requests in flight at once (0 = "
         "unlimited)", NULL},
        {"max-tokens", KEYTAB_INT, &o.maxtok, 0, 1e9, "N", "cap on a request's max_tokens (0 = none)",
         NULL},
        {"expires", KEYTAB_STRING, &o.expires, 0, 0, "WHEN", "30d, 12h, 90m, 3600s, 2w, 2026-01-31,\n"
         "2026-01-31T12:00:00Z, @UNIXSECONDS or never", "never"},
        {0},
    };
    const args_opt ls_opts[] = {
        db,
        {"all", KEYTAB_FLAG, &o.all, 0, 0, NULL, "revoked keys too", NULL},
        {"json", KEYTAB_FLAG, &o.json, 0, 0, NULL, "one JSON array", NULL},
        {0},
    };
    const args_opt id_opts[] = {db, {0}};
    const args_opt audit_opts[] = {
        db,
        {"limit", KEYTAB_INT, &o.limit, 1, 100000, "N", "rows to show", NULL},
        {0},
    };
    const args_opt budget_opts[] = {
        db,
        {"tokens-per-day", KEYTAB_I64, &o.tpd, 0, 1e15, "N", "tokens per UTC day (0 = none)", NULL},
        {"tokens-per-month", KEYTAB_I64, &o.tpmo, 0, 1e15, "N", "tokens per UTC month (0 = none)",
         NULL},
        {"cost-per-day", KEYTAB_DOUBLE, &o.cpd, 0, 1e12, "X", "cost per UTC day at the config's "
         "model prices (0 = none)", NULL},
        {"cost-per-month", KEYTAB_DOUBLE, &o.cpmo, 0, 1e12, "X", "cost per UTC month (0 = none)",
         NULL},
        {0},
    };
    const args_opt usage_opts[] = {
        db,
        {"json", KEYTAB_FLAG, &o.json, 0, 0, NULL, "one JSON object, with the newest ledger rows",
         NULL},
        {"limit", KEYTAB_INT, &o.limit, 1, 100000, "N", "ledger rows in --json", NULL},
        {0},
    };
    static const char *const synopsis[] = {
        "usage: minitrain gateway keys add --keys-db FILE [options]",
        "usage: minitrain gateway keys ls --keys-db FILE [--all] [--json]",
        "usage: minitrain gateway keys revoke --keys-db FILE ID|KEY",
        "usage: minitrain gateway keys disable --keys-db FILE ID|KEY",
        "usage: minitrain gateway keys enable --keys-db FILE ID|KEY",
        "usage: minitrain gateway keys audit --keys-db FILE [--limit N]",
        ("usage: minitrain gateway keys budget --keys-db FILE ID|KEY|role:NAME [--tokens-per-day N]"
         " [--tokens-per-month N] [--cost-per-day X] [--cost-per-month X]"),
        "usage: minitrain gateway keys usage --keys-db FILE ID|KEY|role:NAME [--json]"};
    static const char *const about[] = {
        "Create a key. It is printed once, alone on the last stdout line, and stored as a hash.",
        "List the keys (ids, roles, limits, states); never the keys themselves.",
        "Revoke a key for good (its hash is erased; the row stays for the audit trail).",
        "Stop a key until `keys enable`.", "Let a disabled key work again.",
        "Show the audit trail of admin actions, newest first.",
        ("Set the spend budgets of a key or a role (all omitted: remove them); they apply to the\n"
         "next request, in calendar windows (UTC days and months)."),
        "Show the spend of a key or role in the current UTC day and month, from the ledger."};
    const args_opt *opts = k == 0 ? add_opts : k == 1 ? ls_opts : k == 5 ? audit_opts
                         : k == 6 ? budget_opts : k == 7 ? usage_opts : id_opts;
    char name[32];
    snprintf(name, sizeof(name), "gateway keys %s", cmd);
    const args_spec spec = {.cmd = name, .synopsis = synopsis[k], .about = about[k], .opts = opts,
                            .epilog = "See docs/gateway-keys.md."};
    int sub_argc = argc - 1;
    char *sub_argv[64];
    if (sub_argc > 63) return mt_error("too many arguments");
    memcpy(sub_argv, argv + 1, (size_t)sub_argc * sizeof(char *));
    sub_argv[sub_argc] = NULL;
    int takes_id = (k >= 2 && k <= 4) || k >= 6;
    const char *id_arg = takes_id ? take_word(opts, &sub_argc, sub_argv) : NULL;
    int rc = args_parse(&spec, sub_argc, sub_argv, NULL);
    if (rc != ARGS_CONTINUE) return rc;
    if (takes_id && !id_arg) return mt_error("`keys %s` needs a key id (see `keys ls`)", cmd);
    if (!o.db) return mt_error("--keys-db FILE is required (the gateway's key database)");
    struct stat sb;
    if (k != 0 && stat(o.db, &sb) != 0)
        return mt_error("key database '%s' does not exist (`keys add` creates it)", o.db);
    char err[700], actor[64];
    gw_keys *keys = gw_keys_open(o.db, err, sizeof(err));
    if (!keys) return mt_error("%s", err);
    actor_name(actor, sizeof(actor));
    rc = run_command(k, keys, o.db, id_arg, &o, actor);
    gw_keys_close(keys);
    return rc;
}
