/*
 * model/model_json.c — the model shape (gpt_config) as one JSON object, on cJSON (model/model.h).
 *
 * Three files record a shape (model files, checkpoint shards, the checkpoint state); they used to
 * build it three ways, and two printf writers disagreed on whether the mixture-of-experts fields
 * belong to it. One field list here, read and written by both directions, so they cannot drift.
 * Floats are written through their %.9g text — the shortest that reads back as the same float —
 * so 0.01f is 0.00999999978, not the double 0.0099999997764825821.
 */
#include "model/model.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    size_t offset; /* into gpt_config */
    int is_float;  /* 0: int */
    int moe;       /* 1: one of the mixture-of-experts group */
} field;

#define FI(f, moe) {#f, offsetof(gpt_config, f), 0, moe}
#define FF(f) {#f, offsetof(gpt_config, f), 1, 1}

static const field FIELDS[] = {
    FI(n_layer, 0), FI(n_head, 0), FI(d_model, 0), FI(seq_len, 0), FI(vocab_size, 0),
    FI(moe_every, 1), FI(n_experts, 1), FI(top_k, 1),
    FF(capacity_factor), FF(aux_coef), FF(z_coef),
};
#define NFIELDS (sizeof(FIELDS) / sizeof(FIELDS[0]))

cJSON *gpt_config_to_json(const gpt_config *c) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < NFIELDS; i++) {
        const void *v = (const char *)c + FIELDS[i].offset;
        double x = *(const int *)v;
        if (FIELDS[i].is_float) {
            char num[32];
            snprintf(num, sizeof(num), "%.9g", (double)*(const float *)v);
            x = strtod(num, NULL);
        }
        if (!cJSON_AddNumberToObject(o, FIELDS[i].name, x)) {
            cJSON_Delete(o);
            o = NULL;
        }
    }
    return o;
}

int gpt_config_from_json(const cJSON *o, gpt_config *c, const char *what, char *err,
                         size_t errlen) {
    memset(c, 0, sizeof(*c));
    if (!cJSON_IsObject(o)) {
        snprintf(err, errlen, "%s: the model shape is not a JSON object", what);
        return -1;
    }
    int n_moe = 0;
    for (size_t i = 0; i < NFIELDS; i++)
        n_moe += FIELDS[i].moe && cJSON_GetObjectItemCaseSensitive(o, FIELDS[i].name) != NULL;
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &FIELDS[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f->name);
        if (v == NULL && f->moe && n_moe == 0) continue; /* a dense model from before MoE */
        if (v == NULL) {
            snprintf(err, errlen, "%s: model shape field '%s' is missing", what, f->name);
            return -1;
        }
        if (!cJSON_IsNumber(v)) {
            snprintf(err, errlen, "%s: model shape field '%s' must be a number", what,
                     f->name);
            return -1;
        }
        double d = v->valuedouble;
        void *dst = (char *)c + f->offset;
        if (f->is_float) {
            *(float *)dst = (float)d;
            continue;
        }
        /* (int) of a double outside int's range is undefined behaviour */
        if (!(d >= INT_MIN && d <= INT_MAX) || d != floor(d)) {
            snprintf(err, errlen, "%s: model shape field '%s' must be a whole number in int "
                     "range, got %.17g", what, f->name, d);
            return -1;
        }
        *(int *)dst = (int)d;
    }
    return 0;
}
