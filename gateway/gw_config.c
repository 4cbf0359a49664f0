/*
 * gateway/gw_config.c — the gateway's configuration: the policy table, the INI file (inih), the
 * flag forms (--upstream a=URL, --route m=a,b) and validation.
 *
 * Why it is shaped so:
 *   - Every policy threshold is one row of gw_policy_keys (name, kind, default, range, help), in
 *     the manner of Envoy's outlier_detection/retry_policy blocks: the INI [policy] section, the
 *     command-line flags and the defaults all read the same rows, so they cannot drift apart.
 *   - Routes name upstreams that may be defined later in the file, so names are resolved only in
 *     gw_config_validate, once every source (file, then flags) has been applied.
 *   - Errors carry FILE:LINE. inih's handler is not told the line, so the file is fed through a
 *     line-counting reader (ini_parse_stream) and the handler reads the count.
 */
#include "gateway/gw_proxy.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define PK(field, type, def, lo, hi, help) \
    {#field, type, KEYTAB_OFF(gw_policy, field), lo, hi, "", help, def}

const keytab_key gw_policy_keys[] = {
    PK(consecutive_failures, KEYTAB_INT, "5", 1, 1000,
       "passive health: failures in a row that eject an upstream"),
    PK(ejection_base_s, KEYTAB_DOUBLE, "30", 0.01, 86400,
       "an ejected upstream rests base × times-ejected seconds"),
    PK(ejection_max_s, KEYTAB_DOUBLE, "300", 0.01, 86400, "cap on one ejection"),
    PK(health_interval_s, KEYTAB_DOUBLE, "5", 0, 3600,
       "active health: GET /health every this many seconds (0 = off)"),
    PK(health_timeout_s, KEYTAB_DOUBLE, "2", 0.01, 600, "an active check gives up after this"),
    PK(max_attempts, KEYTAB_INT, "4", 1, 32,
       "attempts per request, retries and fallbacks together"),
    PK(retries_per_target, KEYTAB_INT, "1", 0, 16,
       "extra attempts on the same upstream before falling back"),
    PK(backoff_base_s, KEYTAB_DOUBLE, "0.025", 0, 60,
       "retry n waits uniform(0, min(backoff_max_s, base × 2^n))"),
    PK(backoff_max_s, KEYTAB_DOUBLE, "1", 0, 600, "cap on one backoff"),
    PK(retry_after_max_s, KEYTAB_DOUBLE, "5", 0, 600,
       "an upstream's Retry-After is waited up to this; longer: fall back at once"),
    PK(retry_budget_ratio, KEYTAB_DOUBLE, "0.2", 0, 1,
       "retries in flight at most this fraction of requests in flight ..."),
    PK(retry_budget_min, KEYTAB_INT, "3", 0, 100000, "... but always this many"),
    PK(connect_timeout_s, KEYTAB_DOUBLE, "2", 0.01, 600, "TCP connect to an upstream"),
    PK(timeout_s, KEYTAB_DOUBLE, "120", 0.01, 86400, "a whole non-streamed attempt"),
    PK(first_token_timeout_s, KEYTAB_DOUBLE, "10", 0.01, 3600,
       "a stream's first event (a failure past it: the request falls back)"),
    PK(stream_idle_timeout_s, KEYTAB_DOUBLE, "60", 0.01, 86400, "between two events of a stream"),
    PK(client_timeout_s, KEYTAB_DOUBLE, "60", 1, 86400, "idle client connections are closed"),
    PK(max_body, KEYTAB_BYTES, "1M", 64, 1 << 30, "largest request body (413 above)"),
    PK(max_response, KEYTAB_BYTES, "16M", 1024, 1 << 30,
       "largest upstream body (larger is a failure)"),
    PK(max_tokens, KEYTAB_INT, "0", 0, 100000000,
       "cap on a request's max_tokens (0 = none; 400 above)"),
    PK(default_max_tokens, KEYTAB_INT, "16", 1, 100000000,
       "tokens a request without max_tokens reserves against its key's budget"),
    {NULL, 0, NULL, 0, 0, NULL, NULL, NULL},
};

void gw_policy_defaults(gw_policy *p) {
    char err[256];
    memset(p, 0, sizeof(*p));
    int rc = keytab_defaults(gw_policy_keys, p, err, sizeof(err));
    mtCheck(rc == 0, err); /* a default that does not parse is a bug in the table */
}

int gw_policy_set(gw_policy *p, const char *key, const char *value, char *err, size_t errlen) {
    const keytab_key *k = keytab_find(gw_policy_keys, key, strlen(key));
    if (!k) return 1;
    return keytab_parse(k, p, value, KEYTAB_KEY, err, errlen);
}

/* key with dashes read as underscores, into out */
static void norm_key(const char *key, char *out, size_t cap) {
    size_t i = 0;
    for (; key[i] && i + 1 < cap; i++) out[i] = key[i] == '-' ? '_' : key[i];
    out[i] = 0;
}

/* ---- small parsers ------------------------------------------------------------------------------ */

static int copy(char *dst, size_t cap, const char *src, const char *what, char *err,
                size_t errlen) {
    if (strlen(src) >= cap) {
        snprintf(err, errlen, "%s is too long (at most %zu bytes)", what, cap - 1);
        return -1;
    }
    snprintf(dst, cap, "%s", src);
    return 0;
}

/* names: 1..63 of [A-Za-z0-9._-] */
static int valid_name(const char *s, const char *what, char *err, size_t errlen) {
    size_t n = strlen(s);
    int ok = n > 0 && n < GW_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '_' || s[i] == '-';
    if (!ok)
        snprintf(err, errlen, "%s '%s' must be 1..%d characters of A-Z a-z 0-9 . _ -", what, s,
                 GW_NAME_MAX - 1);
    return ok ? 0 : -1;
}

/* public model names may also hold ':' and '/' (as OpenAI-style ids do); no quotes or blanks */
static int valid_model(const char *s, char *err, size_t errlen) {
    size_t n = strlen(s);
    int ok = n > 0 && n < 128;
    for (size_t i = 0; ok && i < n; i++)
        ok = (unsigned char)s[i] > ' ' && s[i] != '"' && s[i] != '\\' && s[i] != 127 &&
             s[i] != ',' && s[i] != '|';
    if (!ok)
        snprintf(err, errlen, "model name '%s' must be 1..127 characters without blanks, quotes, "
                              "',' or '|'", s);
    return ok ? 0 : -1;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* ---- gateway-level keys --------------------------------------------------------------------------- */

/* The [gateway] keys (redis, which must read HOST:PORT, is checked in gw_config_set). A word key's
 * words are its metavar, stored as lo + the word's index, so their order follows the GW_* enums. */
static const keytab_key GATEWAY_KEYS[] = {
    {"host", KEYTAB_CHARS, KEYTAB_OFF(gw_config, host), 0, sizeof(((gw_config *)0)->host), NULL,
     "bind address", "127.0.0.1"},
    {"port", KEYTAB_INT, KEYTAB_OFF(gw_config, port), 0, 65535, NULL, "TCP port", "8090"},
    {"keys_db", KEYTAB_CHARS, KEYTAB_OFF(gw_config, keys_db), 0,
     sizeof(((gw_config *)0)->keys_db), NULL, "API keys (SQLite)", ""},
    {"quiet", KEYTAB_BOOL, KEYTAB_OFF(gw_config, quiet), 0, 0, NULL, "no access log", "0"},
    /* docs/gateway.md: open = local buckets while Redis is away */
    {"redis_fail", KEYTAB_WORD, KEYTAB_OFF(gw_config, redis_fail_open), 0, 0, "closed|open",
     "while Redis is down", "open"},
    {"all_ejected", KEYTAB_WORD, KEYTAB_OFF(gw_config, all_ejected), GW_EJECTED_LONGEST, 0,
     "longest|refuse", "when every target is ejected", "longest"},
    {"pii", KEYTAB_WORD, KEYTAB_OFF(gw_config, pii), GW_PII_OFF, 0, "off|mask", "PII guard",
     "off"},
    {"pii_on", KEYTAB_WORD, KEYTAB_OFF(gw_config, pii_on), GW_ON_PROMPTS, 0,
     "prompts|completions|both", "what the PII guard reads", "both"},
    {NULL, 0, NULL, 0, 0, NULL, NULL, NULL},
};

void gw_config_init(gw_config *c) {
    char err[256];
    memset(c, 0, sizeof(*c));
    int rc = keytab_defaults(GATEWAY_KEYS, c, err, sizeof(err));
    mtCheck(rc == 0, err);
    gw_policy_defaults(&c->pol);
}

int gw_config_has_key(const char *key) {
    char k[64];
    norm_key(key, k, sizeof(k));
    if (!strcmp(k, "redis")) return 1;
    return keytab_find(GATEWAY_KEYS, k, strlen(k)) || keytab_find(gw_policy_keys, k, strlen(k));
}

int gw_config_set(gw_config *c, const char *key, const char *value, char *err, size_t errlen) {
    char k[64];
    norm_key(key, k, sizeof(k));
    const keytab_key *row = keytab_find(GATEWAY_KEYS, k, strlen(k));
    if (row) return keytab_parse(row, c, value, KEYTAB_KEY, err, errlen);
    if (!strcmp(k, "redis")) {
        const char *colon = strrchr(value, ':');
        if (*value && (!colon || colon == value || !colon[1])) {
            snprintf(err, errlen, "redis must be HOST:PORT, got '%s'", value);
            return -1;
        }
        return copy(c->redis, sizeof(c->redis), value, "redis", err, errlen);
    }
    return gw_policy_set(&c->pol, k, value, err, errlen);
}

/* The [rule NAME] and [upstream NAME] keys of one value type (the rest have words or checks of
 * their own, read in rule_set and on_key). */
static const keytab_key RULE_KEYS[] = {
    {"action", KEYTAB_WORD, KEYTAB_OFF(gw_rule_cfg, action), GW_ACT_BLOCK, 0, "block|redact", NULL,
     "block"},
    {"on", KEYTAB_WORD, KEYTAB_OFF(gw_rule_cfg, on), GW_ON_PROMPTS, 0, "prompts|completions|both",
     NULL, "both"},
    {"window", KEYTAB_INT, KEYTAB_OFF(gw_rule_cfg, window), 1, 65536, NULL, NULL, "64"},
    {"caseless", KEYTAB_BOOL, KEYTAB_OFF(gw_rule_cfg, caseless), 0, 0, NULL, NULL, "0"},
    {"replacement", KEYTAB_CHARS, KEYTAB_OFF(gw_rule_cfg, replacement), 0,
     sizeof(((gw_rule_cfg *)0)->replacement), NULL, NULL, "[REDACTED]"},
    {NULL, 0, NULL, 0, 0, NULL, NULL, NULL},
};
static const keytab_key UPSTREAM_KEYS[] = {
    {"api_key", KEYTAB_CHARS, KEYTAB_OFF(gw_upstream_cfg, api_key), 0,
     sizeof(((gw_upstream_cfg *)0)->api_key), NULL, NULL, ""},
    {"weight", KEYTAB_INT, KEYTAB_OFF(gw_upstream_cfg, weight), 1, 1000, NULL, NULL, "1"},
    {"max_concurrent", KEYTAB_INT, KEYTAB_OFF(gw_upstream_cfg, max_concurrent), 0, 1000000, NULL,
     NULL, "0"},
    {NULL, 0, NULL, 0, 0, NULL, NULL, NULL},
};

/* ---- upstreams and routes ----------------------------------------------------------------------- */

static gw_upstream_cfg *upstream_named(gw_config *c, const char *name, int create, char *err,
                                       size_t errlen) {
    for (int i = 0; i < c->n_up; i++)
        if (!strcmp(c->up[i].name, name)) return &c->up[i];
    if (!create) return NULL;
    if (valid_name(name, "upstream name", err, errlen)) return NULL;
    if (c->n_up == GW_MAX_UPSTREAMS) {
        snprintf(err, errlen, "too many upstreams (at most %d)", GW_MAX_UPSTREAMS);
        return NULL;
    }
    gw_upstream_cfg *u = &c->up[c->n_up++];
    memset(u, 0, sizeof(*u));
    memcpy(u->name, name, strlen(name) + 1); /* valid_name: shorter than GW_NAME_MAX */
    int rc = keytab_defaults(UPSTREAM_KEYS, u, err, errlen);
    mtCheck(rc == 0, err);
    return u;
}

static int set_url(gw_upstream_cfg *u, const char *url, char *err, size_t errlen) {
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
        snprintf(err, errlen, "upstream %s: url must start with http:// or https://, got '%s'",
                 u->name, url);
        return -1;
    }
    if (copy(u->url, sizeof(u->url), url, "url", err, errlen)) return -1;
    size_t n = strlen(u->url);
    while (n > 8 && u->url[n - 1] == '/') u->url[--n] = 0;
    return 0;
}

int gw_config_add_upstream(gw_config *c, const char *spec, char *err, size_t errlen) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec) {
        snprintf(err, errlen, "--upstream needs NAME=URL, got '%s'", spec);
        return -1;
    }
    char name[256];
    size_t n = (size_t)(eq - spec);
    if (n > sizeof(name) - 1) n = sizeof(name) - 1;
    memcpy(name, spec, n);
    name[n] = 0;
    gw_upstream_cfg *u = upstream_named(c, name, 1, err, errlen);
    return u ? set_url(u, eq + 1, err, errlen) : -1;
}

static gw_route_cfg *route_named(gw_config *c, const char *name, char *err, size_t errlen) {
    if (valid_model(name, err, errlen)) return NULL;
    for (int i = 0; i < c->n_routes; i++)
        if (!strcmp(c->routes[i].name, name)) return &c->routes[i];
    if (c->n_routes == GW_MAX_ROUTES) {
        snprintf(err, errlen, "too many models (at most %d)", GW_MAX_ROUTES);
        return NULL;
    }
    gw_route_cfg *r = &c->routes[c->n_routes++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    return r;
}

static int parse_targets_into(gw_route_cfg *r, const char *list, char *err, size_t errlen);

/* "a, b/name, c|d" into r (replacing its targets; r is unchanged on error) */
static int parse_targets(gw_route_cfg *r, const char *list, char *err, size_t errlen) {
    gw_route_cfg tmp = *r;
    if (parse_targets_into(&tmp, list, err, errlen)) return -1;
    *r = tmp;
    return 0;
}

static int parse_targets_into(gw_route_cfg *r, const char *list, char *err, size_t errlen) {
    char buf[2048];
    if (copy(buf, sizeof(buf), list, "targets", err, errlen)) return -1;
    r->n_targets = 0;
    for (const char *q = buf;; q++) { /* strtok would skip empty items: refuse them first */
        const char *e = q + strcspn(q, ",|");
        const char *k = q;
        while (k < e && (*k == ' ' || *k == '\t')) k++;
        if (k == e) {
            snprintf(err, errlen, "model %s: empty target in '%s'", r->name, list);
            return -1;
        }
        if (!*e) break;
        q = e;
    }
    int level = 0;
    char *save_l = NULL;
    for (char *lv = strtok_r(buf, ",", &save_l); lv; lv = strtok_r(NULL, ",", &save_l), level++) {
        char *save_t = NULL;
        int in_level = 0;
        for (char *t = strtok_r(lv, "|", &save_t); t; t = strtok_r(NULL, "|", &save_t)) {
            t = trim(t);
            if (!*t) continue;
            if (r->n_targets == GW_MAX_TARGETS) {
                snprintf(err, errlen, "model %s: too many targets (at most %d)", r->name,
                         GW_MAX_TARGETS);
                return -1;
            }
            gw_target *g = &r->t[r->n_targets];
            memset(g, 0, sizeof(*g));
            char *slash = strchr(t, '/');
            if (slash) {
                *slash = 0;
                if (valid_model(slash + 1, err, errlen)) return -1;
                snprintf(g->model, sizeof(g->model), "%s", slash + 1);
            }
            if (valid_name(t, "upstream name", err, errlen)) return -1;
            snprintf(g->upstream_name, sizeof(g->upstream_name), "%s", t);
            g->upstream = -1;
            g->level = level;
            r->n_targets++;
            in_level++;
        }
        if (!in_level) {
            snprintf(err, errlen, "model %s: empty target in '%s'", r->name, list);
            return -1;
        }
    }
    if (r->n_targets == 0) {
        snprintf(err, errlen, "model %s has no targets", r->name);
        return -1;
    }
    return 0;
}

int gw_config_add_route(gw_config *c, const char *spec, char *err, size_t errlen) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) {
        snprintf(err, errlen, "--route needs MODEL=UPSTREAM[,FALLBACK...], got '%s'", spec);
        return -1;
    }
    char name[128];
    size_t n = (size_t)(eq - spec);
    if (n >= sizeof(name)) n = sizeof(name) - 1;
    memcpy(name, spec, n);
    name[n] = 0;
    gw_route_cfg *r = route_named(c, name, err, errlen);
    return r ? parse_targets(r, eq + 1, err, errlen) : -1;
}

/* ---- rules -------------------------------------------------------------------------------------- */

static gw_rule_cfg *rule_named(gw_config *c, const char *name, char *err, size_t errlen) {
    for (int i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name)) return &c->rules[i];
    if (valid_name(name, "rule name", err, errlen)) return NULL;
    if (c->n_rules == GW_MAX_RULES) {
        snprintf(err, errlen, "too many rules (at most %d)", GW_MAX_RULES);
        return NULL;
    }
    gw_rule_cfg *r = &c->rules[c->n_rules++];
    memset(r, 0, sizeof(*r));
    memcpy(r->name, name, strlen(name) + 1); /* valid_name: shorter than GW_NAME_MAX */
    int rc = keytab_defaults(RULE_KEYS, r, err, errlen);
    mtCheck(rc == 0, err);
    return r;
}

static int rule_set(gw_rule_cfg *r, const char *k, const char *v, char *err, size_t errlen) {
    const keytab_key *row = keytab_find(RULE_KEYS, k, strlen(k));
    if (row) {
        char msg[512];
        if (keytab_parse(row, r, v, KEYTAB_KEY, msg, sizeof(msg)) == 0) return 0;
        snprintf(err, errlen, "rule %s: %s", r->name, msg);
        return -1;
    }
    if (!strcmp(k, "pattern")) {
        if (!*v) {
            snprintf(err, errlen, "rule %s: empty pattern", r->name);
            return -1;
        }
        return copy(r->pattern, sizeof(r->pattern), v, "pattern", err, errlen);
    }
    snprintf(err, errlen, "unknown key '%s' in [rule %s] (pattern, action, on, window, caseless, "
                          "replacement)", k, r->name);
    return -1;
}

/* ---- the INI file ------------------------------------------------------------------------------- */

typedef struct {
    gw_config *c;
    FILE *fp;
    int line;
    int failed;
    char *err;
    size_t errlen;
    char seen[GW_MAX_UPSTREAMS + GW_MAX_ROUTES + GW_MAX_RULES][GW_NAME_MAX + 136];
    int n_seen;
} ini_ctx;

static char *reader(char *str, int num, void *stream) {
    ini_ctx *x = stream;
    char *r = fgets(str, num, x->fp);
    if (r) x->line++;
    return r;
}

static int fail_at(ini_ctx *x, const char *msg) {
    snprintf(x->err, x->errlen, "%s:%d: %s", x->c->source, x->line, msg);
    x->failed = 1;
    return 0;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    ini_ctx *x = user;
    if (x->failed) return 0;
    char msg[900];
    gw_config *c = x->c;
    char sec[256];
    snprintf(sec, sizeof(sec), "%s", section);
    char *kind = trim(sec), *arg = NULL;
    char *sp = strpbrk(kind, " \t");
    if (sp) {
        *sp = 0;
        arg = trim(sp + 1);
        if (!*arg) arg = NULL;
    }
    if (!strcmp(kind, "gateway") || !strcmp(kind, "policy")) {
        if (arg) return fail_at(x, "[gateway] and [policy] take no name");
        int rc = !strcmp(kind, "policy") ? gw_policy_set(&c->pol, name, value, msg, sizeof(msg))
                                         : gw_config_set(c, name, value, msg, sizeof(msg));
        if (rc == 1) {
            snprintf(msg, sizeof(msg), "unknown key '%s' in [%s] (see `minitrain gateway --help`)",
                     name, kind);
            return fail_at(x, msg);
        }
        return rc ? fail_at(x, msg) : 1;
    }
    if (!strcmp(kind, "upstream") || !strcmp(kind, "model") || !strcmp(kind, "rule")) {
        if (!arg) {
            snprintf(msg, sizeof(msg), "[%s] needs a name: [%s NAME]", kind, kind);
            return fail_at(x, msg);
        }
    } else {
        snprintf(msg, sizeof(msg), "unknown section [%s] (sections: gateway, policy, upstream NAME, "
                                   "model NAME, rule NAME)", section);
        return fail_at(x, msg);
    }
    /* a repeated key within one named section is a mistake worth naming */
    char tag[GW_NAME_MAX + 136];
    snprintf(tag, sizeof(tag), "%s %s.%s", kind, arg, name);
    for (int i = 0; i < x->n_seen; i++)
        if (!strcmp(x->seen[i], tag)) {
            snprintf(msg, sizeof(msg), "'%s' is set twice in [%s %s]", name, kind, arg);
            return fail_at(x, msg);
        }
    if (x->n_seen < (int)(sizeof(x->seen) / sizeof(x->seen[0])))
        snprintf(x->seen[x->n_seen++], sizeof(x->seen[0]), "%s", tag);
    if (!strcmp(kind, "upstream")) {
        gw_upstream_cfg *u = upstream_named(c, arg, 1, msg, sizeof(msg));
        if (!u) return fail_at(x, msg);
        const keytab_key *row = keytab_find(UPSTREAM_KEYS, name, strlen(name));
        if (row) {
            if (keytab_parse(row, u, value, KEYTAB_KEY, msg, sizeof(msg))) return fail_at(x, msg);
        } else if (!strcmp(name, "url")) {
            if (set_url(u, value, msg, sizeof(msg))) return fail_at(x, msg);
        } else if (!strcmp(name, "api_key_env")) {
            const char *e = getenv(value);
            if (!e || !*e) {
                snprintf(msg, sizeof(msg), "upstream %s: environment variable %s is not set", arg,
                         value);
                return fail_at(x, msg);
            }
            if (copy(u->api_key, sizeof(u->api_key), e, "api_key", msg, sizeof(msg)))
                return fail_at(x, msg);
        } else {
            snprintf(msg, sizeof(msg), "unknown key '%s' in [upstream %s] (url, api_key, "
                                       "api_key_env, weight, max_concurrent)", name, arg);
            return fail_at(x, msg);
        }
        return 1;
    }
    if (!strcmp(kind, "model")) {
        gw_route_cfg *r = route_named(c, arg, msg, sizeof(msg));
        if (!r) return fail_at(x, msg);
        if (strcmp(name, "targets")) {
            snprintf(msg, sizeof(msg), "unknown key '%s' in [model %s] (targets)", name, arg);
            return fail_at(x, msg);
        }
        return parse_targets(r, value, msg, sizeof(msg)) ? fail_at(x, msg) : 1;
    }
    gw_rule_cfg *r = rule_named(c, arg, msg, sizeof(msg));
    if (!r) return fail_at(x, msg);
    return rule_set(r, name, value, msg, sizeof(msg)) ? fail_at(x, msg) : 1;
}

int gw_config_load(gw_config *c, const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(err, errlen, "cannot read config '%s': %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "config '%s' is not a regular file", path);
        return -1;
    }
    ini_ctx *x = callocCheck(1, sizeof(ini_ctx));
    x->fp = fopen(path, "r");
    if (!x->fp) {
        snprintf(err, errlen, "cannot read config '%s': %s", path, strerror(errno));
        free(x);
        return -1;
    }
    snprintf(c->source, sizeof(c->source), "%s", path);
    x->c = c;
    x->err = err;
    x->errlen = errlen;
    int rc = ini_parse_stream(reader, x, on_key, x);
    fclose(x->fp);
    int failed = x->failed;
    free(x);
    if (failed) return -1;
    if (rc != 0) {
        snprintf(err, errlen, "%s:%d: malformed line (expected 'key = value' or '[section]')",
                 path, rc);
        return -1;
    }
    for (int i = 0; i < c->n_rules; i++)
        if (!c->rules[i].pattern[0]) {
            snprintf(err, errlen, "%s: [rule %s] has no pattern", path, c->rules[i].name);
            return -1;
        }
    return 0;
}

int gw_config_validate(gw_config *c, char *err, size_t errlen) {
    const char *src = c->source[0] ? c->source : "gateway";
    if (c->n_up == 0) {
        snprintf(err, errlen, "%s: no upstreams (give --upstream NAME=URL or an [upstream NAME] "
                              "section)", src);
        return -1;
    }
    for (int i = 0; i < c->n_up; i++)
        if (!c->up[i].url[0]) {
            snprintf(err, errlen, "%s: upstream %s has no url", src, c->up[i].name);
            return -1;
        }
    if (c->n_routes == 0) {
        snprintf(err, errlen, "%s: no models (give --route MODEL=UPSTREAM[,FALLBACK] or a [model "
                              "NAME] section with targets = ...)", src);
        return -1;
    }
    for (int r = 0; r < c->n_routes; r++) {
        gw_route_cfg *rt = &c->routes[r];
        if (rt->n_targets == 0) {
            snprintf(err, errlen, "%s: model %s has no targets", src, rt->name);
            return -1;
        }
        for (int t = 0; t < rt->n_targets; t++) {
            gw_target *g = &rt->t[t];
            g->upstream = -1;
            for (int i = 0; i < c->n_up; i++)
                if (!strcmp(c->up[i].name, g->upstream_name)) g->upstream = i;
            if (g->upstream < 0) {
                snprintf(err, errlen, "%s: model %s routes to unknown upstream '%s' (known:", src,
                         rt->name, g->upstream_name);
                for (int i = 0; i < c->n_up; i++) {
                    size_t n = strlen(err);
                    snprintf(err + n, errlen - n, " %s", c->up[i].name);
                }
                size_t n = strlen(err);
                snprintf(err + n, errlen - n, ")");
                return -1;
            }
            for (int u = 0; u < t; u++)
                if (rt->t[u].upstream == g->upstream && !strcmp(rt->t[u].model, g->model)) {
                    snprintf(err, errlen, "%s: model %s lists target %s twice", src, rt->name,
                             g->upstream_name);
                    return -1;
                }
        }
    }
    if (c->pol.ejection_base_s > c->pol.ejection_max_s) {
        snprintf(err, errlen, "%s: ejection_base_s (%g) exceeds ejection_max_s (%g)", src,
                 c->pol.ejection_base_s, c->pol.ejection_max_s);
        return -1;
    }
    if (c->pol.backoff_base_s > c->pol.backoff_max_s) {
        snprintf(err, errlen, "%s: backoff_base_s (%g) exceeds backoff_max_s (%g)", src,
                 c->pol.backoff_base_s, c->pol.backoff_max_s);
        return -1;
    }
    if (c->redis[0] && !c->keys_db[0]) {
        snprintf(err, errlen, "%s: redis is set but keys_db is not (rate limits belong to keys)",
                 src);
        return -1;
    }
    return 0;
}
