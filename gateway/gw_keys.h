/*
 * gateway/gw_keys.h — API keys for `minitrain gateway`: issue, store, check, revoke, audit.
 *
 * A key is 256 random bits (getrandom) shown once, as "mt-" + 64 hex digits; gateway.db (SQLite,
 * WAL) stores only its SHA-256 (OpenSSL libcrypto), so a stolen database yields no usable key.
 * Checking hashes the presented key and compares it to the stored hash with CRYPTO_memcmp
 * (constant time). Each key carries a role (viewer < user < admin), the models it may call, its
 * rate limits (enforced by gw_limit.c), a cap on max_tokens, an expiry and a disabled flag. Every
 * admin action writes an audit row (who, what, when; never a key or a hash).
 *
 * This header is the seam with the gateway proxy (see notes/GATEWAY_CONTRACT.md): the names and
 * meanings below must not change without a note there.
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
enum { GW_AUTH_OK = 0, GW_AUTH_MISSING = 1, GW_AUTH_INVALID = 2, GW_AUTH_EXPIRED = 3, GW_AUTH_DISABLED = 4 };

/* Open (creating if needed) the key database at db_path in WAL mode. NULL + one line in err on
 * failure (unwritable path, not a gateway.db, ...). */
gw_keys *gw_keys_open(const char *db_path, char *err, size_t errlen);
void gw_keys_close(gw_keys *k);
/* Authenticate the raw "Authorization" header value ("Bearer <key>") or NULL. Returns GW_AUTH_*;
 * on GW_AUTH_OK (and on EXPIRED/DISABLED, so the caller can log which key) fills *out. A revoked
 * key is gone from the table and so reads GW_AUTH_INVALID. */
int gw_keys_check(gw_keys *k, const char *authorization, gw_key_info *out);
/* 1 if the key may call public model name `model`, else 0 ("" or "*" in key->models = all). */
int gw_key_allows_model(const gw_key_info *key, const char *model);
/* Admin API for method + path under /admin/keys (caller already authenticated, any role: the
 * function enforces the role itself → 403). Returns the HTTP status; *out_json is a malloc'd
 * body (OpenAI-shaped error object on errors). Audits every action. */
int gw_admin_handle(gw_keys *k, const gw_key_info *caller, const char *method, const char *path,
                    const char *body, size_t body_len, char **out_json);
/* CLI: minitrain gateway keys add|ls|revoke ... (argv starts at "keys"); returns an exit code. */
int gw_keys_cli(int argc, char **argv);

#endif
