/*
 * train/checkpoint_object.c — checkpoint tier 3 in the trainer (train/checkpoint_object.h): the
 * glue between the checkpointer's catalog and objstore/archive.h. The commit-point rule is the
 * writer's: only a step whose tier-1 commit was reported ("committed") is ever queued.
 */
#include "train/checkpoint_object.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/events.h"
#include "core/log.h"
#include "objstore/archive.h"

struct ckpt_object_tr {
    objstore_archiver *arch;
    s3_client c; /* the resume path's own connection */
    char url[512], bucket[64], prefix[1024], root[4096];
};

ckpt_object_tr *ckpt_object_tr_create(const mt_config *cfg, const char *tier1_root) {
    if (!cfg->ckpt_object[0]) return NULL;
    ckpt_object_tr *o = callocCheck(1, sizeof(*o));
    s3_config s3;
    s3_config_default(&s3);
    if (cfg->s3_endpoint[0]) snprintf(s3.endpoint, sizeof s3.endpoint, "%s", cfg->s3_endpoint);
    if (cfg->s3_region[0]) snprintf(s3.region, sizeof s3.region, "%s", cfg->s3_region);
    s3.part_mb = cfg->s3_part_mb;
    s3.max_mb_s = cfg->s3_max_mb_s;
    s3.max_get_mb_s = cfg->s3_get_mb_s;
    snprintf(o->url, sizeof o->url, "%s", cfg->ckpt_object);
    snprintf(o->root, sizeof o->root, "%s", tier1_root);
    char err[OBJSTORE_MSG];
    o->arch = objstore_archiver_start(&s3, cfg->ckpt_object, cfg->keep_object, tier1_root, err,
                                      sizeof err);
    if (!o->arch) mt_fail("%s", err);
    s3_parse_url(cfg->ckpt_object, o->bucket, sizeof o->bucket, o->prefix, sizeof o->prefix);
    if (s3_client_init(&o->c, &s3)) mt_fail("ckpt_object: %s", o->c.err);
    /* the bucket and the credentials checked now, not at the first archive: a LIST of one key
     * answers NoSuchBucket, InvalidAccessKeyId, SignatureDoesNotMatch or RequestTimeTooSkewed */
    char probe[1100];
    snprintf(probe, sizeof probe, "%s%slatest", o->prefix, o->prefix[0] ? "/" : "");
    s3_object *l = NULL;
    int nl = 0;
    if (s3_list(&o->c, o->bucket, probe, &l, &nl))
        mt_fail("ckpt_object = %s: the object store refuses or cannot be reached: %s", o->url,
                o->c.err);
    free(l);
    return o;
}

void ckpt_object_tr_committed(ckpt_object_tr *o, int64_t step) {
    if (o) objstore_archiver_enqueue(o->arch, step);
}

static void report(ckpt_object_tr *o, const ckpt_sink *sink, const objstore_result *r) {
    char path[1200];
    snprintf(path, sizeof path, "%s/step_%08" PRId64, o->url, r->step);
    if (!r->ok) {
        mt_warn("%s", r->msg);
        ckpt_sink_event(sink, EV_CKPT_WARNING, r->step, CKPT_TIER_OBJECT, EVK_WARNING, r->msg);
        return;
    }
    if (sink->catalog) {
        ckpt_record row = {CKPT_TIER_OBJECT, r->step, path, "archived", r->bytes, NULL, 0, r->ms};
        sink->catalog(sink->user, &row);
        for (int i = 0; i < r->n_deleted; i++) {
            char dp[1200];
            snprintf(dp, sizeof dp, "%s/step_%08" PRId64, o->url, r->deleted[i]);
            ckpt_record del = {CKPT_TIER_OBJECT, r->deleted[i], dp, "deleted", -1, NULL, 0, 0};
            sink->catalog(sink->user, &del);
        }
    }
    char what[160];
    snprintf(what, sizeof what, "archived %.1f MB in %.0f ms (%d retries)", r->bytes / 1e6, r->ms,
             r->retries);
    ckpt_sink_event(sink, EV_CHECKPOINT, r->step, CKPT_TIER_OBJECT, EVK_PATH, path);
    log_info("tier 3: step %" PRId64 " %s -> %s", r->step, what, path);
}

void ckpt_object_tr_poll(ckpt_object_tr *o, const ckpt_sink *sink) {
    if (!o) return;
    objstore_result r[8];
    int n = objstore_archiver_poll(o->arch, r, 8);
    for (int i = 0; i < n; i++) report(o, sink, &r[i]);
}

void ckpt_object_tr_finish(ckpt_object_tr *o, const ckpt_sink *sink) {
    if (!o) return;
    objstore_archiver_drain(o->arch);
    ckpt_object_tr_poll(o, sink);
    objstore_archiver_stop(o->arch);
    s3_client_free(&o->c);
    free(o);
}

int ckpt_object_tr_fetch(ckpt_object_tr *o, int64_t want, int64_t *step, char *err, size_t errlen) {
    if (!o) return 0;
    if (want < 0) {
        int rc = objstore_newest(&o->c, o->bucket, o->prefix, &want, err, errlen);
        if (rc <= 0) return rc;
    }
    log_info("resume: fetching step %" PRId64 " from tier 3 (%s)", want, o->url);
    if (objstore_fetch_step(&o->c, o->bucket, o->prefix, o->root, want, err, errlen)) return -1;
    *step = want;
    return 1;
}
