/*
 * ckpt/st_shard.c — safetensors __metadata__ builder and minitrain's shard description.
 *
 * A tensor saved by one (tp, pp) rank is often a slice of a logical tensor (e.g. a column-parallel
 * weight split by rows across TP ranks). To reshard a checkpoint to another layout, a loader needs,
 * for every stored tensor, the global shape and where the slice starts. Safetensors has no field for
 * that, but its __metadata__ is a free string->string map that every reader preserves, so we store
 *     "shard:<tensor name>" = "global=[g0,g1,...];offset=[o0,o1,...]"
 * (the slice's extent is the stored tensor's own shape). The format is deliberately trivial to parse
 * from Python: value.split(';'), json.loads of each bracketed list. Reading a shard description
 * from an opened file (st_shard_get) lives with the file reader in ckpt/safetensors.c.
 */
#include "ckpt/st_shard.h"

#include "core/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

void st_meta_init(st_meta *m) { m->obj = NULL; }

int st_meta_set(st_meta *m, const char *key, const char *value, char *err, size_t errlen) {
    if (key == NULL || key[0] == '\0' || value == NULL) {
        mt_errf(err, errlen, "metadata key must be non-empty and value non-NULL");
        return -1;
    }
    if (m->obj == NULL && (m->obj = cJSON_CreateObject()) == NULL) goto oom;
    cJSON *v = cJSON_CreateString(value);
    if (v == NULL) goto oom;
    cJSON *obj = m->obj;
    if (cJSON_GetObjectItemCaseSensitive(obj, key) != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v);
    else
        cJSON_AddItemToObject(obj, key, v);
    return 0;
oom:
    mt_errf(err, errlen, "out of memory setting metadata '%s'", key);
    return -1;
}

static int shard_valid(const st_shard *s) {
    if (s->ndim < 0 || s->ndim > ST_MAX_DIMS) return 0;
    for (int d = 0; d < s->ndim; d++)
        if (s->global[d] < 0 || s->offset[d] < 0) return 0;
    return 1;
}

int st_meta_set_shard(st_meta *m, const char *tensor, const st_shard *s, char *err,
                      size_t errlen) {
    char key[1024], value[512];
    if (tensor == NULL || tensor[0] == '\0' || !shard_valid(s)) {
        mt_errf(err, errlen, "shard of tensor '%s': ndim must be in [0, %d] and global/offset "
                ">= 0", tensor ? tensor : "(null)", ST_MAX_DIMS);
        return -1;
    }
    if (snprintf(key, sizeof key, "shard:%s", tensor) >= (int)sizeof key ||
        st_shard_format(value, sizeof value, s) != 0) {
        mt_errf(err, errlen, "shard of tensor '%s': name or shape too long", tensor);
        return -1;
    }
    return st_meta_set(m, key, value, err, errlen);
}

char *st_meta_json(const st_meta *m) {
    if (m->obj == NULL || ((cJSON *)m->obj)->child == NULL) return NULL;
    return cJSON_PrintUnformatted((cJSON *)m->obj);
}

void st_meta_free(st_meta *m) {
    cJSON_Delete((cJSON *)m->obj);
    m->obj = NULL;
}

static int format_list(char *buf, size_t len, size_t *at, int n, const int64_t *v) {
    int w = snprintf(buf + *at, len - *at, "[");
    for (int i = 0; i < n && w >= 0 && *at + (size_t)w < len; i++) {
        *at += (size_t)w;
        w = snprintf(buf + *at, len - *at, i ? ",%" PRId64 : "%" PRId64, v[i]);
    }
    if (w < 0 || *at + (size_t)w >= len) return -1;
    *at += (size_t)w;
    w = snprintf(buf + *at, len - *at, "]");
    if (w < 0 || *at + (size_t)w >= len) return -1;
    *at += (size_t)w;
    return 0;
}

int st_shard_format(char *buf, size_t len, const st_shard *s) {
    size_t at = 0;
    if (len == 0 || !shard_valid(s)) return -1;
    int w = snprintf(buf, len, "global=");
    if (w < 0 || (size_t)w >= len) return -1;
    at = (size_t)w;
    if (format_list(buf, len, &at, s->ndim, s->global) != 0) return -1;
    w = snprintf(buf + at, len - at, ";offset=");
    if (w < 0 || at + (size_t)w >= len) return -1;
    at += (size_t)w;
    return format_list(buf, len, &at, s->ndim, s->offset);
}

/* Parse "[a,b,...]" of non-negative integers at *p; advances *p. Returns the count or -1. */
static int parse_list(const char **p, int64_t *v) {
    const char *s = *p;
    int n = 0;
    if (*s++ != '[') return -1;
    while (*s == ' ') s++;
    if (*s == ']') {
        *p = s + 1;
        return 0;
    }
    for (;;) {
        if (n == ST_MAX_DIMS || *s < '0' || *s > '9') return -1;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno != 0 || x < 0) return -1;
        v[n++] = (int64_t)x;
        s = end;
        while (*s == ' ') s++;
        if (*s == ']') break;
        if (*s++ != ',') return -1;
        while (*s == ' ') s++;
    }
    *p = s + 1;
    return n;
}

int st_shard_parse(const char *value, st_shard *s, char *err, size_t errlen) {
    const char *p = value;
    memset(s, 0, sizeof *s);
    int ng = -1, no = -1;
    if (p != NULL && strncmp(p, "global=", 7) == 0) {
        p += 7;
        ng = parse_list(&p, s->global);
        if (ng >= 0 && strncmp(p, ";offset=", 8) == 0) {
            p += 8;
            no = parse_list(&p, s->offset);
        }
    }
    if (ng < 0 || no < 0 || *p != '\0') {
        mt_errf(err, errlen, "malformed shard value '%s' (expected "
                "\"global=[3072,768];offset=[1536,0]\")", value ? value : "(null)");
        return -1;
    }
    if (ng != no) {
        mt_errf(err, errlen, "shard value '%s': global has %d dims but offset has %d", value, ng,
                no);
        return -1;
    }
    s->ndim = ng;
    return 0;
}
