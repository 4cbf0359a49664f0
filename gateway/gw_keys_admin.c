/*
 * gateway/gw_keys_admin.c — the two faces of the key store: the HTTP admin API (/admin/keys,
 * /admin/audit) and the CLI (`minitrain gateway keys add|ls|revoke|disable|enable|audit`).
 *
 * Why it is shaped so:
 *   - The admin API is a pure function of (caller, method, path, body) → (status, JSON body), so
 *     the gateway only routes /admin/ here and every role decision is unit-tested without sockets.
 *   - The role is checked before the path is resolved: a user key learns nothing about which admin
 *     paths or key ids exist (403 for all of them).
 *   - Every call is audited, including refused ones: a user key probing /admin is exactly what the
 *     audit trail is for. Audit details carry the non-secret settings only.
 *   - The CLI works on the database file directly (whoever can write gateway.db is trusted: that
 *     is how the first admin key is made) and audits as "cli:<login>". It returns exit codes
 *     rather than exiting, so tests can drive it in-process.
 */
#define _GNU_SOURCE /* timegm */
#include "gateway/gw_keys.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "serve/api.h"

#define BAD "invalid_request_error"

/* ---- JSON helpers ----------------------------------------------------------------------------- */

static char *json_take(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    mtCheck(s != NULL, "out of memory writing JSON");
    return s;
}

static int error_body(char **out, int status, const char *type, const char *param,
                      const char *code, const char *fmt, ...) MT_PRINTF(6, 7);
static int error_body(char **out, int status, const char *type, const char *param,
                      const char *code, const char *fmt, ...) {
    api_error e;
    va_list ap;
    va_start(ap, fmt);
    api_vfail(&e, status, type, param, code, fmt, ap);
    va_end(ap);
    api_buf b = {0};
    api_error_json(&b, &e);
    *out = b.p;
    return status;
}

static cJSON *models_array(const char *models) {
    cJSON *a = cJSON_CreateArray();
    const char *m = models;
    if (*m == 0 || !strcmp(m, "*")) {
        cJSON_AddItemToArray(a, cJSON_CreateString("*"));
        return a;
    }
    for (;;) {
        const char *e = strchr(m, ',');
        size_t n = e ? (size_t)(e - m) : strlen(m);
        char tmp[128];
        snprintf(tmp, sizeof(tmp), "%.*s", (int)(n < 127 ? n : 127), m);
        cJSON_AddItemToArray(a, cJSON_CreateString(tmp));
        if (!e) break;
        m = e + 1;
    }
    return a;
}

static cJSON *key_json(const gw_key_row *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "api_key");
    cJSON_AddStringToObject(o, "id", r->info.id);
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddStringToObject(o, "role", gw_role_name(r->info.role));
    cJSON_AddItemToObject(o, "models", models_array(r->info.models));
    cJSON_AddNumberToObject(o, "rpm", (double)r->info.rpm);
    cJSON_AddNumberToObject(o, "tpm", (double)r->info.tpm);
    cJSON_AddNumberToObject(o, "max_concurrent", r->info.max_concurrent);
    cJSON_AddNumberToObject(o, "max_tokens", r->info.max_tokens);
    if (r->info.expires_at) cJSON_AddNumberToObject(o, "expires_at", (double)r->info.expires_at);
    else cJSON_AddNullToObject(o, "expires_at");
    cJSON_AddBoolToObject(o, "disabled", r->info.disabled);
    cJSON_AddBoolToObject(o, "revoked", r->revoked_at != 0);
    if (r->revoked_at) cJSON_AddNumberToObject(o, "revoked_at", (double)r->revoked_at);
    else cJSON_AddNullToObject(o, "revoked_at");
    cJSON_AddNumberToObject(o, "created_at", (double)r->created_at);
    cJSON_AddStringToObject(o, "created_by", r->created_by);
    return o;
}

/* The non-secret settings of a key, for audit details. */
static char *settings_detail(const gw_key_row *r) {
    cJSON *o = key_json(r);
    cJSON_DeleteItemFromObject(o, "object");
    cJSON_DeleteItemFromObject(o, "id");
    cJSON_DeleteItemFromObject(o, "created_by");
    cJSON_DeleteItemFromObject(o, "created_at");
    return json_take(o);
}

/* ---- request bodies: create and update -------------------------------------------------------- */

/* Apply the fields of JSON object `body` to *r. create: disabled is not settable. Returns 0, or
 * an HTTP status with *out_json set. */
static int apply_fields(const cJSON *body, gw_key_row *r, int create, long long now,
                        char **out_json) {
    static const char *const known[] = {"name", "role", "models", "rpm", "tpm", "max_concurrent",
                                        "max_tokens", "expires_at", "expires_in", "disabled"};
    for (const cJSON *it = body->child; it; it = it->next) {
        int ok = 0;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            ok |= !strcmp(it->string, known[i]);
        if (!ok || (create && !strcmp(it->string, "disabled")))
            return error_body(out_json, 400, BAD, it->string, "unknown_parameter",
                              "unknown field '%.64s' (fields: name, role, models, rpm, tpm, "
                              "max_concurrent, max_tokens, expires_at, expires_in%s)",
                              it->string, create ? "" : ", disabled");
    }
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(body, "name")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof(r->name))
            return error_body(out_json, 400, BAD, "name", "invalid_type",
                              "'name' must be a string of at most %zu bytes", sizeof(r->name) - 1);
        snprintf(r->name, sizeof(r->name), "%s", v->valuestring);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(body, "role")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || gw_role_parse(v->valuestring, &r->info.role))
            return error_body(out_json, 400, BAD, "role", "invalid_value",
                              "'role' must be \"admin\", \"user\" or \"viewer\"");
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(body, "models")) && !cJSON_IsNull(v)) {
        char buf[sizeof(r->info.models)] = "";
        size_t len = 0;
        if (cJSON_IsString(v)) {
            len = strlen(v->valuestring);
            if (len < sizeof(buf)) memcpy(buf, v->valuestring, len + 1);
        } else if (cJSON_IsArray(v)) {
            for (const cJSON *m = v->child; m; m = m->next) {
                if (!cJSON_IsString(m))
                    return error_body(out_json, 400, BAD, "models", "invalid_type",
                                      "'models' must be an array of model names");
                size_t n = strlen(m->valuestring);
                if (len + n + 2 > sizeof(buf)) { len = sizeof(buf); break; }
                if (len) buf[len++] = ',';
                memcpy(buf + len, m->valuestring, n + 1);
                len += n;
            }
        } else {
            return error_body(out_json, 400, BAD, "models", "invalid_type",
                              "'models' must be an array of model names (or \"*\")");
        }
        if (len >= sizeof(buf))
            return error_body(out_json, 400, BAD, "models", "invalid_value",
                              "'models' is longer than %zu bytes", sizeof(buf) - 1);
        memcpy(r->info.models, buf, sizeof(buf));
    }
    struct { const char *name; double lo, hi; } ints[] = {
        {"rpm", 0, 1e9}, {"tpm", 0, 1e12}, {"max_concurrent", 0, 1e6}, {"max_tokens", 0, 1e9},
        {"expires_at", 0, 1e13}, {"expires_in", 1, 1e11}};
    double val[6];
    int have[6] = {0};
    for (int i = 0; i < 6; i++) {
        v = cJSON_GetObjectItemCaseSensitive(body, ints[i].name);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
            v->valuedouble < ints[i].lo || v->valuedouble > ints[i].hi)
            return error_body(out_json, 400, BAD, ints[i].name, "invalid_value",
                              "'%s' must be an integer in [%.0f, %.0f]%s", ints[i].name,
                              ints[i].lo, ints[i].hi, i < 4 ? " (0 = unlimited)" : "");
        val[i] = v->valuedouble;
        have[i] = 1;
    }
    if (have[0]) r->info.rpm = (long)val[0];
    if (have[1]) r->info.tpm = (long)val[1];
    if (have[2]) r->info.max_concurrent = (int)val[2];
    if (have[3]) r->info.max_tokens = (int)val[3];
    if (have[4] && have[5])
        return error_body(out_json, 400, BAD, "expires_in", "invalid_value",
                          "give 'expires_at' (unix seconds) or 'expires_in' (seconds), not both");
    if (have[4]) r->info.expires_at = (long long)val[4];
    if (have[5]) r->info.expires_at = now + (long long)val[5];
    /* "expires_at": null on update = never expires */
    if ((v = cJSON_GetObjectItemCaseSensitive(body, "expires_at")) && cJSON_IsNull(v))
        r->info.expires_at = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(body, "disabled")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v))
            return error_body(out_json, 400, BAD, "disabled", "invalid_type",
                              "'disabled' must be true or false");
        r->info.disabled = cJSON_IsTrue(v);
    }
    char err[256];
    if (gw_key_spec_check(&r->info, now, have[4] || have[5], err, sizeof(err)))
        return error_body(out_json, 400, BAD, NULL, "invalid_value", "%s", err);
    return 0;
}

static cJSON *parse_object(const char *body, size_t len, char **out_json, int *status) {
    cJSON *o = NULL;
    if (len == 0) o = cJSON_CreateObject();
    else if (api_utf8_valid((const uint8_t *)body, len)) o = cJSON_ParseWithLength(body, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        *status = error_body(out_json, 400, BAD, NULL, "invalid_json",
                             "the body must be a JSON object (UTF-8)");
        return NULL;
    }
    return o;
}

/* ---- the admin API ---------------------------------------------------------------------------- */

typedef struct {
    gw_keys *k;
    char actor[64];
    char action[32];
    char target[24];
    char *detail; /* malloc'd or NULL */
} audit_ctx;

static int finish(audit_ctx *a, int status) {
    gw_keys_audit(a->k, a->actor, a->action, a->target, status, a->detail);
    free(a->detail);
    return status;
}

/* 1 if id looks like a key id (16 lowercase hex digits). */
static int id_ok(const char *id) {
    size_t n = strlen(id);
    if (n != 16) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return 0;
    return 1;
}

static int admin_create(audit_ctx *a, const char *body, size_t len, long long now, char **out) {
    snprintf(a->action, sizeof(a->action), "key.create");
    int st = 0;
    cJSON *o = parse_object(body, len, out, &st);
    if (!o) return finish(a, st);
    gw_key_row r;
    memset(&r, 0, sizeof(r));
    r.info.role = GW_ROLE_USER;
    st = apply_fields(o, &r, 1, now, out);
    cJSON_Delete(o);
    if (st) return finish(a, st);
    char key[GW_KEY_LEN + 1], err[256];
    gw_key_row made;
    if (gw_keys_create(a->k, a->actor, r.name, &r.info, key, &made, err, sizeof(err)) != 0)
        return finish(a, error_body(out, 400, BAD, NULL, "invalid_value", "%s", err));
    snprintf(a->target, sizeof(a->target), "%s", made.info.id);
    a->detail = settings_detail(&made);
    cJSON *j = key_json(&made);
    cJSON_AddStringToObject(j, "key", key); /* the one and only time it is shown */
    *out = json_take(j);
    memset(key, 0, sizeof(key));
    return finish(a, 201);
}

static int admin_update(audit_ctx *a, const char *id, const char *body, size_t len, long long now,
                        char **out) {
    snprintf(a->action, sizeof(a->action), "key.update");
    gw_key_row r;
    if (gw_keys_get(a->k, id, &r) != 0)
        return finish(a, error_body(out, 404, BAD, NULL, "key_not_found", "no key with id %s", id));
    if (r.revoked_at)
        return finish(a, error_body(out, 409, BAD, NULL, "key_revoked",
                                    "key %s is revoked; revoked keys cannot be changed", id));
    int st = 0;
    cJSON *o = parse_object(body, len, out, &st);
    if (!o) return finish(a, st);
    st = apply_fields(o, &r, 0, now, out);
    cJSON_Delete(o);
    if (st) return finish(a, st);
    if (gw_keys_put(a->k, &r) != 0)
        return finish(a, error_body(out, 500, "server_error", NULL, NULL, "the update failed"));
    a->detail = settings_detail(&r);
    *out = json_take(key_json(&r));
    return finish(a, 200);
}

static int admin_list(audit_ctx *a, char **out) {
    snprintf(a->action, sizeof(a->action), "key.list");
    gw_key_row *rows;
    int n = gw_keys_list(a->k, 1, &rows);
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "object", "list");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(d, key_json(&rows[i]));
    cJSON_AddItemToObject(o, "data", d);
    free(rows);
    *out = json_take(o);
    return finish(a, 200);
}

static int admin_audit(audit_ctx *a, const char *query, char **out) {
    snprintf(a->action, sizeof(a->action), "audit.read");
    int limit = 100;
    const char *q = query ? strstr(query, "limit=") : NULL;
    if (q) {
        char *end;
        long v = strtol(q + 6, &end, 10);
        if (end == q + 6 || v < 1 || v > 10000)
            return finish(a, error_body(out, 400, BAD, "limit", "invalid_value",
                                        "'limit' must be an integer in [1, 10000]"));
        limit = (int)v;
    }
    gw_audit_row *rows;
    int n = gw_keys_audit_list(a->k, limit, &rows);
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "object", "list");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "at", (double)rows[i].at);
        cJSON_AddStringToObject(e, "actor", rows[i].actor);
        cJSON_AddStringToObject(e, "action", rows[i].action);
        cJSON_AddStringToObject(e, "target", rows[i].target);
        cJSON_AddNumberToObject(e, "status", rows[i].status);
        cJSON *det = rows[i].detail[0] ? cJSON_Parse(rows[i].detail) : NULL;
        cJSON_AddItemToObject(e, "detail", det ? det : cJSON_CreateNull());
        cJSON_AddItemToArray(d, e);
    }
    cJSON_AddItemToObject(o, "data", d);
    free(rows);
    *out = json_take(o);
    return finish(a, 200);
}

int gw_admin_handle(gw_keys *k, const gw_key_info *caller, const char *method, const char *path,
                    const char *body, size_t body_len, char **out_json) {
    *out_json = NULL;
    if (!caller)
        return error_body(out_json, 401, BAD, NULL, "invalid_api_key",
                          "the admin API needs a key (send 'Authorization: Bearer KEY')");
    audit_ctx a = {.k = k};
    snprintf(a.actor, sizeof(a.actor), "key:%s", caller->id);
    /* split "/admin/<what>[/<id>][?query]" */
    char p[256];
    snprintf(p, sizeof(p), "%s", path ? path : "");
    char *query = strchr(p, '?');
    if (query) *query++ = 0;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    const char *id = NULL;
    int is_keys = 0, is_audit = 0;
    if (!strcmp(p, "/admin/keys")) is_keys = 1;
    else if (!strncmp(p, "/admin/keys/", 12)) is_keys = 1, id = p + 12;
    else if (!strcmp(p, "/admin/audit")) is_audit = 1;
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int needs_admin = !is_get;
    if (id) snprintf(a.target, sizeof(a.target), "%.16s", id);
    snprintf(a.action, sizeof(a.action), "%s", is_audit ? "audit.read"
                                              : !is_keys ? "admin.unknown"
                                              : is_get ? (id ? "key.get" : "key.list")
                                              : !strcmp(method, "DELETE") ? "key.revoke"
                                              : id ? "key.update" : "key.create");
    /* roles first: a user key learns nothing about what exists under /admin */
    int allowed = caller->role == GW_ROLE_ADMIN || (caller->role == GW_ROLE_VIEWER && !needs_admin);
    if (!allowed) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "method", method);
        cJSON_AddStringToObject(d, "path", p);
        cJSON_AddStringToObject(d, "role", gw_role_name(caller->role) ? gw_role_name(caller->role) : "?");
        a.detail = json_take(d);
        return finish(&a, error_body(out_json, 403, "permission_error", NULL, "insufficient_role",
                                     "a %s key cannot %s %s (%s)",
                                     gw_role_name(caller->role) ? gw_role_name(caller->role) : "?",
                                     method, p,
                                     caller->role == GW_ROLE_USER
                                         ? "user keys have no access to /admin"
                                         : "viewer keys are read-only; this needs an admin key"));
    }
    if (!is_keys && !is_audit)
        return finish(&a, error_body(out_json, 404, BAD, NULL, "unknown_url",
                                     "unknown admin path %.64s (paths: /admin/keys, "
                                     "/admin/keys/ID, /admin/audit)", p));
    if (id && !id_ok(id))
        return finish(&a, error_body(out_json, 404, BAD, NULL, "key_not_found",
                                     "no key with id '%.32s' (ids are 16 hex digits)", id));
    long long now = gw_keys_now(k);
    if (is_audit) {
        if (!is_get) goto method;
        return admin_audit(&a, query, out_json);
    }
    if (!id) {
        if (is_get) return admin_list(&a, out_json);
        if (!strcmp(method, "POST")) return admin_create(&a, body, body_len, now, out_json);
        goto method;
    }
    if (is_get) {
        gw_key_row r;
        if (gw_keys_get(k, id, &r) != 0)
            return finish(&a, error_body(out_json, 404, BAD, NULL, "key_not_found",
                                         "no key with id %s", id));
        *out_json = json_take(key_json(&r));
        return finish(&a, 200);
    }
    if (!strcmp(method, "DELETE")) {
        int rc = gw_keys_revoke(k, id);
        if (rc < 0)
            return finish(&a, error_body(out_json, 404, BAD, NULL, "key_not_found",
                                         "no key with id %s", id));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "object", "api_key.revoked");
        cJSON_AddBoolToObject(o, "revoked", 1);
        cJSON_AddBoolToObject(o, "already_revoked", rc == 1);
        *out_json = json_take(o);
        return finish(&a, 200);
    }
    if (!strcmp(method, "POST") || !strcmp(method, "PATCH"))
        return admin_update(&a, id, body, body_len, now, out_json);
method:
    return finish(&a, error_body(out_json, 405, BAD, NULL, "method_not_allowed",
                                 "method %.16s is not allowed on %s", method, p));
}
