/*
 * train/checkpoint_hash.c — the parameter hashes of a checkpoint record and their check after a
 * resume (train/checkpoint_hash.h).
 */
#include "train/checkpoint_hash.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/param_hash.h"
#include "parallel/comm.h"

static void layout_text(const mesh *m, char *out, size_t n) {
    snprintf(out, n, "tp%d cp%d pp%d dp%d ep%d", m->tp, m->cp, m->pp, m->dp, m->ep);
}

cJSON *checkpoint_hash_record(trainer *tr) {
    if (tr->cfg.sdc_check_every <= 0 || tr->cfg.zero >= 3) return NULL;
    const mesh *ms = tr->mesh;
    uint64_t mine[2];
    gpt_params_hash(&tr->model, mine);
    float *buf = mallocCheck((size_t)ms->world_size * 4 * sizeof(float)); // (world, 2) u64
    memcpy(buf + 4 * ms->rank, mine, sizeof(mine));
    comm_host_all_gather(ms->world, buf + 4 * ms->rank, buf, 4);
    cJSON *o = cJSON_CreateObject();
    char layout[96];
    layout_text(ms, layout, sizeof(layout));
    cJSON_AddStringToObject(o, "layout", layout);
    cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
    for (int r = 0; r < ms->world_size; r++) {
        uint64_t h[2];
        memcpy(h, buf + 4 * r, sizeof(h));
        char hex[40];
        snprintf(hex, sizeof(hex), "%016" PRIx64 ":%016" PRIx64, h[0], h[1]);
        cJSON_AddItemToArray(ranks, cJSON_CreateString(hex));
    }
    free(buf);
    return o;
}

int checkpoint_hash_verify(trainer *tr, const cJSON *state, const char *dir, char *err,
                           size_t errlen) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(state, "params_hash");
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(ph, "layout");
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(ph, "ranks");
    char layout[96];
    layout_text(tr->mesh, layout, sizeof(layout));
    if (tr->cfg.zero >= 3 || !cJSON_IsString(lay) || strcmp(lay->valuestring, layout) != 0 ||
        !cJSON_IsArray(ranks) || cJSON_GetArraySize(ranks) != tr->mesh->world_size)
        return 0; /* no record, or saved under another layout (resharded: other shards) */
    const cJSON *want = cJSON_GetArrayItem(ranks, tr->mesh->rank);
    uint64_t h[2];
    gpt_params_hash(&tr->model, h);
    char got[40];
    snprintf(got, sizeof(got), "%016" PRIx64 ":%016" PRIx64, h[0], h[1]);
    if (cJSON_IsString(want) && !strcmp(want->valuestring, got)) return 0;
    mt_errf(err, errlen, "%s: rank %d's parameters after loading hash to %s, but the checkpoint "
            "records %s for the step it holds", dir, tr->mesh->rank, got,
            cJSON_IsString(want) ? want->valuestring : "(nothing readable)");
    return -1;
}
