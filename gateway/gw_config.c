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

#define PK(field, kind, def, lo, hi, help) {#field, kind, offsetof(gw_policy, field), def, lo, hi, help}

const gw_policy_key gw_policy_keys[] = {
    PK(consecutive_failures, GW_PK_INT, 5, 1, 1000,
       "passive health: failures in a row that eject an upstream"),
    PK(ejection_base_s, GW_PK_DOUBLE, 30, 0.01, 86400,
       "an ejected upstream rests base × times-ejected seconds"),
    PK(ejection_max_s, GW_PK_DOUBLE, 300, 0.01, 86400, "cap on one ejection"),
    PK(health_interval_s, GW_PK_DOUBLE, 5, 0, 3600,
       "active health: GET /health every this many seconds (0 = off)"),
    PK(health_timeout_s, GW_PK_DOUBLE, 2, 0.01, 600, "an active check gives up after this"),
    PK(max_attempts, GW_PK_INT, 4, 1, 32,
       "attempts per request, retries and fallbacks together"),
    PK(retries_per_target, GW_PK_INT, 1, 0, 16,
       "extra attempts on the same upstream before falling back"),
    PK(backoff_base_s, GW_PK_DOUBLE, 0.025, 0, 60,
       "retry n waits uniform(0, min(backoff_max_s, base × 2^n))"),
    PK(backoff_max_s, GW_PK_DOUBLE, 1, 0, 600, "cap on one backoff"),
    PK(retry_after_max_s, GW_PK_DOUBLE, 5, 0, 600,
       "an upstream's Retry-After is waited up to this; longer: fall back at once"),
    PK(retry_budget_ratio, GW_PK_DOUBLE, 0.2, 0, 1,
       "retries in flight at most this fraction of requests in flight ..."),
    PK(retry_budget_min, GW_PK_INT, 3, 0, 100000, "... but always this many"),
    PK(connect_timeout_s, GW_PK_DOUBLE, 2, 0.01, 600, "TCP connect to an upstream"),
    PK(timeout_s, GW_PK_DOUBLE, 120, 0.01, 86400, "a whole non-streamed attempt"),
    PK(first_token_timeout_s, GW_PK_DOUBLE, 10, 0.01, 3600,
       "a stream's first event (a failure past it: the request falls back)"),
    PK(stream_idle_timeout_s, GW_PK_DOUBLE, 60, 0.01, 86400, "between two events of a stream"),
    PK(client_timeout_s, GW_PK_DOUBLE, 60, 1, 86400, "idle client connections are closed"),
    PK(max_body, GW_PK_BYTES, 1 << 20, 64, 1 << 30, "largest request body (413 above)"),
    PK(max_response, GW_PK_BYTES, 16 << 20, 1024, 1 << 30,
       "largest upstream body (larger is a failure)"),
    PK(max_tokens, GW_PK_INT, 0, 0, 100000000,
       "cap on a request's max_tokens (0 = none; 400 above)"),
    PK(default_max_tokens, GW_PK_INT, 16, 1, 100000000,
       "tokens a request without max_tokens reserves against its key's budget"),
    {NULL, 0, 0, 0, 0, 0, NULL},
};

void gw_policy_defaults(gw_policy *p) {
    memset(p, 0, sizeof(*p));
    for (const gw_policy_key *k = gw_policy_keys; k->name; k++) {
        char *f = (char *)p + k->offset;
        switch (k->kind) {
        case GW_PK_INT: *(int *)f = (int)k->def; break;
        case GW_PK_LONG:
        case GW_PK_BYTES: *(long *)f = (long)k->def; break;
        case GW_PK_DOUBLE: *(double *)f = k->def; break;
        }
    }
}

/* key with dashes read as underscores, into out */
static void norm_key(const char *key, char *out, size_t cap) {
    size_t i = 0;
    for (; key[i] && i + 1 < cap; i++) out[i] = key[i] == '-' ? '_' : key[i];
    out[i] = 0;
}

int gw_policy_set(gw_policy *p, const char *key, const char *value, char *err, size_t errlen) {
    char k[64];
    norm_key(key, k, sizeof(k));
    const gw_policy_key *d = NULL;
    for (const gw_policy_key *q = gw_policy_keys; q->name; q++)
        if (!strcmp(q->name, k)) d = q;
    if (!d) return 1;
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (d->kind == GW_PK_BYTES && end != value) {
        if (*end == 'k' || *end == 'K') v *= 1024, end++;
        else if (*end == 'm' || *end == 'M') v *= 1048576, end++;
        else if (*end == 'g' || *end == 'G') v *= 1073741824.0, end++;
    }
    if (end == value || *end != 0 || errno || !isfinite(v)) {
        snprintf(err, errlen, "%s needs a number, got '%s'", d->name, value);
        return -1;
    }
    if ((d->kind != GW_PK_DOUBLE) && v != floor(v)) {
        snprintf(err, errlen, "%s needs an integer, got '%s'", d->name, value);
        return -1;
    }
    if (v < d->lo || v > d->hi) {
        snprintf(err, errlen, "%s = %s is out of range [%g, %g]", d->name, value, d->lo, d->hi);
        return -1;
    }
    char *f = (char *)p + d->offset;
    switch (d->kind) {
    case GW_PK_INT: *(int *)f = (int)v; break;
    case GW_PK_LONG:
    case GW_PK_BYTES: *(long *)f = (long)v; break;
    case GW_PK_DOUBLE: *(double *)f = v; break;
    }
    return 0;
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

static int parse_int(const char *what, const char *v, long lo, long hi, long *out, char *err,
                     size_t errlen) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || errno) {
        snprintf(err, errlen, "%s needs an integer, got '%s'", what, v);
        return -1;
    }
    if (x < lo || x > hi) {
        snprintf(err, errlen, "%s = %ld is out of range [%ld, %ld]", what, x, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_bool(const char *what, const char *v, int *out, char *err, size_t errlen) {
    if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
        !strcasecmp(v, "on"))
        return *out = 1, 0;
    if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
        !strcasecmp(v, "off"))
        return *out = 0, 0;
    snprintf(err, errlen, "%s needs true or false, got '%s'", what, v);
    return -1;
}

static int parse_on(const char *what, const char *v, int *out, char *err, size_t errlen) {
    if (!strcmp(v, "prompts")) return *out = GW_ON_PROMPTS, 0;
    if (!strcmp(v, "completions")) return *out = GW_ON_COMPLETIONS, 0;
    if (!strcmp(v, "both")) return *out = GW_ON_BOTH, 0;
    snprintf(err, errlen, "%s must be prompts, completions or both, got '%s'", what, v);
    return -1;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

/* ---- gateway-level keys --------------------------------------------------------------------------- */

void gw_config_init(gw_config *c) {
    memset(c, 0, sizeof(*c));
    snprintf(c->host, sizeof(c->host), "127.0.0.1");
    c->port = 8090;
    c->all_ejected = GW_EJECTED_LONGEST;
    c->redis_fail_open = 1; /* docs/gateway.md: local buckets while Redis is away */
    c->pii = GW_PII_OFF;
    c->pii_on = GW_ON_BOTH;
    gw_policy_defaults(&c->pol);
}

static const char *const GATEWAY_KEYS[] = {"host", "port", "keys_db", "redis", "redis_fail",
                                            "all_ejected", "quiet", "pii", "pii_on", "lb",
                                            "cache_bytes", "cache_shared", "cache_ttl_s",
                                            "hedge_after", NULL};

/* ---- issue 31: load balancing, the response cache, model prices ------------------------------- */

static const char *const LB_NAMES[] = {"ordered", "round_robin", "least_busy", "ewma_latency",
                                       "p2c"};

const char *gw_lb_name(int lb) { return lb >= 0 && lb <= GW_LB_P2C ? LB_NAMES[lb] : NULL; }

static int parse_lb(const char *v, int *out, char *err, size_t errlen) {
    for (int i = 0; i <= GW_LB_P2C; i++)
        if (!strcmp(v, LB_NAMES[i])) return *out = i, 0;
    snprintf(err, errlen, "lb must be ordered, round_robin, least_busy, ewma_latency or p2c, got "
                          "'%s'", v);
    return -1;
}

static int parse_price(const char *what, const char *v, double *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < 0 || x > 1e9) {
        snprintf(err, errlen, "%s needs a price >= 0 per million tokens, got '%s'", what, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* hedge_after = off | MS | pNN (a quantile of the route's time to first token, p50..p99.9) */
static int parse_hedge(const char *v, double *ms, double *q, char *err, size_t errlen) {
    char *end;
    errno = 0;
    if (!strcmp(v, "off") || !strcmp(v, "0")) return *ms = 0, *q = 0, 0;
    if (v[0] == 'p') {
        double x = strtod(v + 1, &end);
        if (end != v + 1 && !*end && !errno && x >= 50 && x < 100) return *ms = 0, *q = x / 100, 0;
    } else {
        double x = strtod(v, &end);
        if (end != v && (!*end || !strcmp(end, "ms")) && !errno && x >= 1 && x <= 600000)
            return *ms = x, *q = 0, 0;
    }
    snprintf(err, errlen, "hedge_after must be off, a delay in ms (1..600000) or a quantile of the "
                          "time to first token (p50..p99.9), got '%s'", v);
    return -1;
}

/* the [gateway] keys of this block: 0, 1 = not one of them, -1 = bad value */
static int config_set_ext(gw_config *c, const char *k, const char *value, char *err,
                          size_t errlen) {
    if (!strcmp(k, "lb")) return parse_lb(value, &c->lb, err, errlen);
    if (!strcmp(k, "hedge_after"))
        return parse_hedge(value, &c->hedge_after_ms, &c->hedge_quantile, err, errlen);
    if (!strcmp(k, "cache_ttl_s")) {
        long x;
        if (parse_int("cache_ttl_s", value, 0, 30L * 86400, &x, err, errlen)) return -1;
        c->cache_ttl_s = (int)x;
        return 0;
    }
    if (!strcmp(k, "cache_shared"))
        return parse_bool("cache_shared", value, &c->cache_shared, err, errlen);
    if (!strcmp(k, "cache_bytes")) {
        char v[64]; /* the byte-count syntax of the policy table: 64K, 1M, 1G */
        snprintf(v, sizeof(v), "%s", value);
        size_t n = strlen(v);
        double mul = 1;
        if (n && strchr("kKmMgG", v[n - 1])) {
            mul = strchr("kK", v[n - 1]) ? 1024 : strchr("mM", v[n - 1]) ? 1048576 : 1073741824.0;
            v[--n] = 0;
        }
        char *end;
        errno = 0;
        double x = strtod(v, &end) * mul;
        if (!n || *end || errno || x < 0 || x > 1e12 || x != floor(x)) {
            snprintf(err, errlen, "cache_bytes needs a byte count (0 = off, 64M, ...), got '%s'",
                     value);
            return -1;
        }
        c->cache_bytes = (long)x;
        return 0;
    }
    return 1;
}

/* the [model NAME] keys besides targets: 0, 1 = not one of them, -1 = bad value */
static int route_set_ext(gw_route_cfg *r, const char *k, const char *v, char *err, size_t errlen) {
    if (!strcmp(k, "lb")) return parse_lb(v, &r->lb, err, errlen);
    if (!strcmp(k, "price_input")) return parse_price(k, v, &r->price_input, err, errlen);
    if (!strcmp(k, "price_output")) return parse_price(k, v, &r->price_output, err, errlen);
    if (!strcmp(k, "hedge_after"))
        return parse_hedge(v, &r->hedge_after_ms, &r->hedge_quantile, err, errlen);
    return 1;
}

int gw_config_has_key(const char *key) {
    char k[64];
    norm_key(key, k, sizeof(k));
    for (int i = 0; GATEWAY_KEYS[i]; i++)
        if (!strcmp(GATEWAY_KEYS[i], k)) return 1;
    for (const gw_policy_key *q = gw_policy_keys; q->name; q++)
        if (!strcmp(q->name, k)) return 1;
    return 0;
}

int gw_config_set(gw_config *c, const char *key, const char *value, char *err, size_t errlen) {
    char k[64];
    norm_key(key, k, sizeof(k));
    long x;
    if (!strcmp(k, "host")) return copy(c->host, sizeof(c->host), value, "host", err, errlen);
    if (!strcmp(k, "port")) {
        if (parse_int("port", value, 0, 65535, &x, err, errlen)) return -1;
        c->port = (int)x;
        return 0;
    }
    if (!strcmp(k, "keys_db"))
        return copy(c->keys_db, sizeof(c->keys_db), value, "keys_db", err, errlen);
    if (!strcmp(k, "redis")) {
        const char *colon = strrchr(value, ':');
        if (*value && (!colon || colon == value || !colon[1])) {
            snprintf(err, errlen, "redis must be HOST:PORT, got '%s'", value);
            return -1;
        }
        return copy(c->redis, sizeof(c->redis), value, "redis", err, errlen);
    }
    if (!strcmp(k, "redis_fail")) {
        if (!strcmp(value, "open")) return c->redis_fail_open = 1, 0;
        if (!strcmp(value, "closed")) return c->redis_fail_open = 0, 0;
        snprintf(err, errlen, "redis_fail must be open or closed, got '%s'", value);
        return -1;
    }
    if (!strcmp(k, "all_ejected")) {
        if (!strcmp(value, "longest")) return c->all_ejected = GW_EJECTED_LONGEST, 0;
        if (!strcmp(value, "refuse")) return c->all_ejected = GW_EJECTED_REFUSE, 0;
        snprintf(err, errlen, "all_ejected must be longest or refuse, got '%s'", value);
        return -1;
    }
    if (!strcmp(k, "quiet")) return parse_bool("quiet", value, &c->quiet, err, errlen);
    if (!strcmp(k, "pii")) {
        if (!strcmp(value, "off")) return c->pii = GW_PII_OFF, 0;
        if (!strcmp(value, "mask")) return c->pii = GW_PII_MASK, 0;
        snprintf(err, errlen, "pii must be off or mask, got '%s'", value);
        return -1;
    }
    if (!strcmp(k, "pii_on")) return parse_on("pii_on", value, &c->pii_on, err, errlen);
    int ext = config_set_ext(c, k, value, err, errlen);
    if (ext != 1) return ext;
    return gw_policy_set(&c->pol, k, value, err, errlen);
}

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
    u->weight = 1;
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
    r->lb = GW_LB_DEFAULT;
    r->hedge_after_ms = -1;
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
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->action = GW_ACT_BLOCK;
    r->on = GW_ON_BOTH;
    r->window = 64;
    snprintf(r->replacement, sizeof(r->replacement), "[REDACTED]");
    return r;
}

static int rule_set(gw_rule_cfg *r, const char *k, const char *v, char *err, size_t errlen) {
    long x;
    if (!strcmp(k, "pattern")) {
        if (!*v) {
            snprintf(err, errlen, "rule %s: empty pattern", r->name);
            return -1;
        }
        return copy(r->pattern, sizeof(r->pattern), v, "pattern", err, errlen);
    }
    if (!strcmp(k, "action")) {
        if (!strcmp(v, "block")) return r->action = GW_ACT_BLOCK, 0;
        if (!strcmp(v, "redact")) return r->action = GW_ACT_REDACT, 0;
        snprintf(err, errlen, "rule %s: action must be block or redact, got '%s'", r->name, v);
        return -1;
    }
    if (!strcmp(k, "on")) return parse_on("on", v, &r->on, err, errlen);
    if (!strcmp(k, "window")) {
        if (parse_int("window", v, 1, 65536, &x, err, errlen)) return -1;
        r->window = (int)x;
        return 0;
    }
    if (!strcmp(k, "caseless")) return parse_bool("caseless", v, &r->caseless, err, errlen);
    if (!strcmp(k, "replacement"))
        return copy(r->replacement, sizeof(r->replacement), v, "replacement", err, errlen);
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
        long v;
        if (!strcmp(name, "url")) {
            if (set_url(u, value, msg, sizeof(msg))) return fail_at(x, msg);
        } else if (!strcmp(name, "api_key")) {
            if (copy(u->api_key, sizeof(u->api_key), value, "api_key", msg, sizeof(msg)))
                return fail_at(x, msg);
        } else if (!strcmp(name, "api_key_env")) {
            const char *e = getenv(value);
            if (!e || !*e) {
                snprintf(msg, sizeof(msg), "upstream %s: environment variable %s is not set", arg,
                         value);
                return fail_at(x, msg);
            }
            if (copy(u->api_key, sizeof(u->api_key), e, "api_key", msg, sizeof(msg)))
                return fail_at(x, msg);
        } else if (!strcmp(name, "weight")) {
            if (parse_int("weight", value, 1, 1000, &v, msg, sizeof(msg))) return fail_at(x, msg);
            u->weight = (int)v;
        } else if (!strcmp(name, "max_concurrent")) {
            if (parse_int("max_concurrent", value, 0, 1000000, &v, msg, sizeof(msg)))
                return fail_at(x, msg);
            u->max_concurrent = (int)v;
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
        int ext = route_set_ext(r, name, value, msg, sizeof(msg));
        if (ext == 0) return 1;
        if (ext < 0) return fail_at(x, msg);
        if (strcmp(name, "targets")) {
            snprintf(msg, sizeof(msg), "unknown key '%s' in [model %s] (targets, lb, price_input, "
                                       "price_output, hedge_after)", name, arg);
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
    if (c->cache_ttl_s > 0 && (!c->redis[0] || c->cache_bytes <= 0)) {
        snprintf(err, errlen, "%s: cache_ttl_s puts the response cache in Redis: it needs redis = "
                              "HOST:PORT and cache_bytes > 0", src);
        return -1;
    }
    if (c->redis[0] && !c->keys_db[0]) {
        snprintf(err, errlen, "%s: redis is set but keys_db is not (rate limits belong to keys)",
                 src);
        return -1;
    }
    return 0;
}
