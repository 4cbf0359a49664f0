/*
 * gateway/gw_keys.h — API keys for `minitrain gateway`: issue, store, check, revoke, audit.
 *
 * A key is 256 random bits from getrandom(2), shown once as "mt-" + 64 hex digits. gateway.db
 * (SQLite, WAL) stores only its SHA-256 (OpenSSL libcrypto), so a copy of the database yields no
 * usable key. A check hashes the presented key, finds the row by the hash's first 8 bytes (the
 * key id, public: safe in logs and metric labels) and compares all 32 bytes with CRYPTO_memcmp,
 * whose time does not depend on where the bytes differ. Each key carries a role, the models it
 * may call, its rate limits (enforced by gw_limit.c), a cap on max_tokens, an expiry and a
 * disabled flag. Every admin action — allowed or refused, by the HTTP admin API or the CLI —
 * writes an audit row (who, what, when, outcome; never a key or a hash).
 *
 * Roles (what gw_admin_handle enforces, and what the gateway is asked to enforce on /v1):
 *   viewer  read-only: GET /v1/models, GET /admin/keys[/ID], GET /admin/audit; no generation
 *   user    generation (POST /v1/completions, /v1/chat/completions) on its allowed models;
 *           every /admin path is 403
 *   admin   everything, including creating, updating and revoking keys
 * A revoked key keeps its row (for ls and the audit trail) but loses its hash, so it can never
 * match again: it reads GW_AUTH_INVALID, exactly like a key that never existed.
 *
 * The first part of this header is what the gateway proxy calls on every request (authenticate,
 * account); the store operations below it serve the admin API, the CLI and the tests.
 */
#ifndef MT_GATEWAY_GW_KEYS_H
#define MT_GATEWAY_GW_KEYS_H

#include <stddef.h>

typedef enum { GW_ROLE_VIEWER = 0, GW_ROLE_USER = 1, GW_ROLE_ADMIN = 2 } gw_role;
typedef struct gw_keys gw_keys; /* an open gateway.db (SQLite, WAL); thread-safe */
typedef struct {
    char id[24];          /* public key id (hex prefix of the hash): safe to log and to label metrics */
    gw_role role;
    char models[512];     /* comma-separated public model names; "" or "*" = all */
    long rpm, tpm;        /* requests / tokens per minute; 0 = unlimited */
    int max_concurrent;   /* 0 = unlimited */
    int max_tokens;       /* cap on a request's max_tokens; 0 = no cap */
    long long expires_at; /* unix seconds; 0 = never */
    int disabled;
} gw_key_info;
/* GW_AUTH_UNAVAILABLE: the database could not be read (locked past the busy timeout, I/O
 * error): answer 503, not 401 — the key may well be valid. */
enum { GW_AUTH_OK = 0, GW_AUTH_MISSING = 1, GW_AUTH_INVALID = 2, GW_AUTH_EXPIRED = 3, GW_AUTH_DISABLED = 4,
       GW_AUTH_UNAVAILABLE = 5 };

/* Open (creating it, mode 0600, if missing) the key database at db_path, in WAL mode. NULL + one
 * line in err on failure (unwritable path, a file that is not a gateway keys database, ...). */
gw_keys *gw_keys_open(const char *db_path, char *err, size_t errlen);
void gw_keys_close(gw_keys *k);
/* Authenticate the raw "Authorization" header value ("Bearer <key>", scheme case-insensitive per
 * RFC 7235 §2.1) or NULL. Returns GW_AUTH_*: MISSING for NULL/empty; INVALID for another scheme,
 * a malformed, unknown or revoked key; EXPIRED once now >= expires_at; DISABLED. *out is filled
 * on OK, EXPIRED and DISABLED (so the caller can log which key), zeroed otherwise. */
int gw_keys_check(gw_keys *k, const char *authorization, gw_key_info *out);
/* 1 if the key may call public model name `model`, else 0 ("" or "*" in key->models = all;
 * otherwise an exact match of one comma-separated name). */
int gw_key_allows_model(const gw_key_info *key, const char *model);
/* 1 if the key's role may generate (user or admin), 0 for a viewer. */
int gw_key_can_generate(const gw_key_info *key);
/* Admin API for method + path under /admin/ (caller already authenticated, any role: the
 * function enforces the role itself → 403; caller NULL → 401). Returns the HTTP status; *out_json
 * is a malloc'd body (OpenAI-shaped error object on errors). Audits every action. Paths:
 *   GET    /admin/keys         list (viewer, admin)        POST /admin/keys       create (admin) 201
 *   GET    /admin/keys/ID      one key (viewer, admin)     POST /admin/keys/ID    update (admin)
 *   DELETE /admin/keys/ID      revoke (admin)              GET  /admin/audit[?limit=N] (viewer, admin)
 * Bodies and fields: docs/gateway-keys.md. The created key appears once, in the 201 body. */
int gw_admin_handle(gw_keys *k, const gw_key_info *caller, const char *method, const char *path,
                    const char *body, size_t body_len, char **out_json);
/* The CLI (`minitrain gateway keys add|ls|revoke|...`) is cmd_gateway_keys() in cmd/cmd.h: since
 * the cmd/ floor landed, option parsing lives there (cmd/args.h), above this module. */

/* ---- store operations (admin API, CLI, tests) ------------------------------------------------ */

#define GW_KEY_LEN 67 /* "mt-" + 64 hex digits */

typedef struct {
    gw_key_info info;
    char name[64];        /* a label for humans ("" if none) */
    char created_by[64];  /* actor that created it */
    long long created_at; /* unix seconds */
    long long revoked_at; /* 0 = not revoked */
} gw_key_row;

typedef struct {
    long long at;       /* unix seconds */
    char actor[64];     /* "key:<id>" (admin API) or "cli:<user>" */
    char action[32];    /* key.create, key.list, key.get, key.update, key.revoke, audit.read, ... */
    char target[24];    /* the key id acted on, or "" */
    int status;         /* HTTP status of the outcome (403 for a refused attempt) */
    char detail[512];   /* non-secret fields as JSON, or "" */
} gw_audit_row;

/* "viewer" | "user" | "admin" (NULL for an unknown value); parse returns 0, or -1. */
const char *gw_role_name(gw_role r);
int gw_role_parse(const char *s, gw_role *out);
/* Test hook: seconds since the epoch from now(ctx) instead of time(2) (expiry, created_at). */
void gw_keys_set_clock(gw_keys *k, long long (*now)(void *ctx), void *ctx);
/* The store's notion of now (unix seconds): the injected clock, else time(2). */
long long gw_keys_now(gw_keys *k);
/* Validate the settable fields of spec (role, models names [A-Za-z0-9._:/-]{1,64}, limits >= 0,
 * expires_at 0 or in the future when require_future). 0, or -1 with one line in err. */
int gw_key_spec_check(const gw_key_info *spec, long long now, int require_future, char *err,
                      size_t errlen);
/* Create a key with spec's settings (spec->id, spec->disabled ignored) and name; actor goes into
 * created_by. Writes the key ("mt-..." NUL-terminated) into key_out and the stored row into *out
 * (may be NULL). 0, or -1 with err (invalid spec: a user error). Does not audit: its callers (the
 * admin API, the CLI) do, with the outcome. */
int gw_keys_create(gw_keys *k, const char *actor, const char *name, const gw_key_info *spec,
                   char key_out[GW_KEY_LEN + 1], gw_key_row *out, char *err, size_t errlen);
/* The row of key id (revoked ones too). 0, or -1 if there is none. */
int gw_keys_get(gw_keys *k, const char *id, gw_key_row *out);
/* Every key (revoked ones too when include_revoked), oldest first; *rows malloc'd. Returns n. */
int gw_keys_list(gw_keys *k, int include_revoked, gw_key_row **rows);
/* Write back the mutable fields of row (name, role, models, limits, expiry, disabled) for
 * row->info.id. 0, -1 if no such key, 1 if it is revoked (revoked keys are frozen). */
int gw_keys_put(gw_keys *k, const gw_key_row *row);
/* Revoke key id: its hash is erased. 0, -1 if no such key, 1 if already revoked. */
int gw_keys_revoke(gw_keys *k, const char *id);
/* Append one audit row (target, detail may be NULL). Never pass a key or a hash. */
void gw_keys_audit(gw_keys *k, const char *actor, const char *action, const char *target,
                   int status, const char *detail);
/* The newest `limit` audit rows, newest first; *rows malloc'd. Returns n. */
int gw_keys_audit_list(gw_keys *k, int limit, gw_audit_row **rows);

#endif
