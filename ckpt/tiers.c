/*
 * ckpt/tiers.c — the storage tiers of a run's checkpoints: roots, commit + retention per tier,
 * the verified durable copy, the resume choice across tiers, and reports (see ckpt/tiers.h).
 *
 * Why this shape: the tiers trade speed for safety (RAM, local disk, a durable store), so each
 * step is committed in every tier by the same ckpt_commit, and the only tier copied from another
 * is tier 2: it gets the committed tier-1 files, so what reaches the durable store has already
 * been checksummed once and is checksummed again on arrival. The commit and copy functions write
 * only their ckpt_tier_result, so the writer can run them on its background thread and report on
 * the main thread afterwards (ckpt/writer.c).
 */
#include "ckpt/tiers.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/events.h"
#include "core/fs.h"

/* ---- reports ----------------------------------------------------------------------------------- */

void ckpt_sink_log(const ckpt_sink *s, const char *kind, cJSON *d) {
    if (s != NULL && s->event != NULL) s->event(s->user, kind, d);
    else cJSON_Delete(d);
}

void ckpt_sink_event(const ckpt_sink *s, const char *kind, int64_t step, int tier,
                     const char *key, const char *text) {
    if (s == NULL || s->event == NULL) return;
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, (double)step);
    if (tier >= 0) ev_num(d, EVK_TIER, tier);
    if (key && text) ev_str(d, key, text);
    ckpt_sink_log(s, kind, d);
}

void ckpt_tiers_report(const ckpt_tiers *t, const ckpt_sink *sink, int tier, int64_t step,
                       const char *state, int64_t bytes, const char *checksum,
                       double snapshot_ms, double write_ms) {
    if (sink == NULL || sink->catalog == NULL || t->root[tier][0] == 0) return;
    char path[CKPT_PATH_MAX];
    if (ckpt_step_path(path, sizeof(path), t->root[tier], step, "") != 0) return;
    ckpt_record r = {tier, step, path, state, bytes, checksum, snapshot_ms, write_ms};
    sink->catalog(sink->user, &r);
}

/* ---- roots ------------------------------------------------------------------------------------- */

int ckpt_tier0_root(char *buf, size_t len, const char *run_dir, const char *name) {
    char real[PATH_MAX], safe[128];
    if (realpath(run_dir, real) == NULL) return -1;
    uint32_t h = ckpt_crc32c(0, real, strlen(real));
    const char *base = getenv("MINITRAIN_SHM_DIR");
    if (base == NULL || base[0] == 0) base = "/dev/shm/minitrain";
    snprintf(safe, sizeof(safe), "%s", name && name[0] ? name : "run");
    for (char *p = safe; *p; p++)
        if (*p == '/') *p = '_';
    int w = snprintf(buf, len, "%s/%s-%08x/ckpt", base, safe, h);
    return (w < 0 || (size_t)w >= len) ? -1 : 0;
}

int ckpt_tier0_owned(const char *run_dir, const char *root) {
    char real[CKPT_PATH_MAX], want[16];
    if (realpath(run_dir, real) == NULL) return 0;
    snprintf(want, sizeof(want), "-%08x/ckpt", ckpt_crc32c(0, real, strlen(real)));
    size_t a = strlen(root), b = strlen(want);
    return a >= b && strcmp(root + a - b, want) == 0;
}

int ckpt_tiers_init(ckpt_tiers *t, const char *run_dir, const char *name, int memory,
                    const char *durable, int keep_last, int64_t keep_every) {
    memset(t, 0, sizeof(*t));
    t->keep_last = keep_last;
    t->keep_every = keep_every;
    snprintf(t->root[1], sizeof(t->root[1]), "%s/ckpt", run_dir);
    t->on[1] = 1;
    int rc = 0;
    if (ckpt_tier0_root(t->root[0], sizeof(t->root[0]), run_dir, name) != 0) {
        t->root[0][0] = 0;
        rc = memory ? -1 : 0;
    }
    t->on[0] = memory && t->root[0][0];
    if (durable && durable[0]) {
        snprintf(t->root[2], sizeof(t->root[2]), "%s", durable);
        t->on[2] = 1;
    }
    return rc;
}

const char *ckpt_tiers_root(const ckpt_tiers *t, int tier) {
    return tier >= 0 && tier < CKPT_TIERS && t->on[tier] ? t->root[tier] : NULL;
}

/* ---- commit, retention, durable copy (background-safe: they write only r) ---------------------- */

/* Total bytes of the files of a committed step and "crc32c:<hex>" of its manifest. */
static void step_stats(const char *dir, int64_t *bytes, char *checksum, size_t len) {
    *bytes = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[CKPT_PATH_MAX];
        struct stat st;
        while ((e = readdir(d)) != NULL) {
            if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
                continue;
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) *bytes += st.st_size;
        }
        closedir(d);
    }
    char path[CKPT_PATH_MAX], msg[256];
    uint32_t crc = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_MANIFEST_NAME);
    if (ckpt_crc32c_file(path, &crc, NULL, msg, sizeof(msg)) == 0)
        snprintf(checksum, len, "crc32c:%08x", crc);
    else
        checksum[0] = 0;
}

static void retain_warn(void *user, const char *msg) {
    ckpt_tier_result *r = user;
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
}

/* Retention of one tier; records the steps it removed. Failures are warnings (in r->msg). */
static void retain_tier(const ckpt_tiers *t, int tier, int64_t fresh, ckpt_tier_result *r) {
    int64_t *before = NULL, *after = NULL;
    int nb = 0, na = 0;
    char err[CKPT_MSG];
    if (ckpt_list(t->root[tier], &before, &nb, err, sizeof(err)) != 0) return;
    int64_t every = tier == 0 ? 0 : t->keep_every; /* memory keeps no "major" steps */
    if (ckpt_retain_fresh(t->root[tier], t->keep_last, every, fresh, NULL, retain_warn, r, err,
                          sizeof(err)) != 0)
        mt_errf(r->msg, sizeof(r->msg), "retention: %s", err);
    if (ckpt_list(t->root[tier], &after, &na, err, sizeof(err)) == 0) {
        for (int i = 0, j = 0; i < nb; i++) {
            while (j < na && after[j] < before[i]) j++;
            if ((j >= na || after[j] != before[i]) && r->n_deleted < CKPT_MAX_DELETED)
                r->deleted[r->n_deleted++] = before[i];
        }
    }
    free(before);
    free(after);
}

void ckpt_tiers_commit(const ckpt_tiers *t, int tier, int64_t step, ckpt_tier_result *r) {
    ckpt_tiers_commit_known(t, tier, step, NULL, 0, r);
}

void ckpt_tiers_commit_known(const ckpt_tiers *t, int tier, int64_t step,
                             const ckpt_known_file *known, int n_known, ckpt_tier_result *r) {
    r->attempted = 1;
    if (ckpt_commit_known(t->root[tier], step, known, n_known, r->msg, sizeof(r->msg)) != 0)
        return;
    r->ok = 1;
    char dir[CKPT_PATH_MAX];
    ckpt_step_path(dir, sizeof(dir), t->root[tier], step, "");
    step_stats(dir, &r->bytes, r->checksum, sizeof(r->checksum));
    retain_tier(t, tier, n_known > 0 ? step : -1, r); /* CRCs computed while writing: step is fresh */
}

/* The "files" arrays of two manifests are equal (names, sizes, CRCs). */
static int same_manifest_files(const char *dir_a, const char *dir_b, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX];
    char *ta = NULL, *tb = NULL;
    if (fs_join(path, sizeof(path), dir_a, CKPT_MANIFEST_NAME, err, errlen) != 0) return -1;
    if (fs_read_file(path, (size_t)64 << 20, &ta, NULL, err, errlen) != 0) return -1;
    if (fs_join(path, sizeof(path), dir_b, CKPT_MANIFEST_NAME, err, errlen) != 0 ||
        fs_read_file(path, (size_t)64 << 20, &tb, NULL, err, errlen) != 0) {
        free(ta);
        return -1;
    }
    cJSON *a = cJSON_Parse(ta), *b = cJSON_Parse(tb);
    int same = a && b &&
               cJSON_Compare(cJSON_GetObjectItemCaseSensitive(a, "files"),
                             cJSON_GetObjectItemCaseSensitive(b, "files"), 1);
    if (!same) mt_errf(err, errlen, "%s: copy differs from %s (sizes or CRC-32C)", dir_b, dir_a);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(ta);
    free(tb);
    return same ? 0 : -1;
}

void ckpt_tiers_copy_durable(const ckpt_tiers *t, int64_t step, ckpt_tier_result *r) {
    r->attempted = 1;
    char src[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX];
    ckpt_step_path(src, sizeof(src), t->root[1], step, "");
    if (ckpt_begin(t->root[2], step, tmp, sizeof(tmp), r->msg, sizeof(r->msg)) != 0) return;
    DIR *d = opendir(src);
    if (d == NULL) {
        mt_errf(r->msg, sizeof(r->msg), "cannot open '%s': %s", src, strerror(errno));
        return;
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, CKPT_MANIFEST_NAME) == 0) continue;
        char a[CKPT_PATH_MAX], b[CKPT_PATH_MAX];
        rc = fs_join(a, sizeof(a), src, e->d_name, r->msg, sizeof(r->msg));
        if (rc == 0) rc = fs_join(b, sizeof(b), tmp, e->d_name, r->msg, sizeof(r->msg));
        if (rc == 0) rc = fs_copy_file(a, b, r->msg, sizeof(r->msg));
    }
    closedir(d);
    if (rc != 0 || ckpt_commit(t->root[2], step, r->msg, sizeof(r->msg)) != 0) return;
    ckpt_step_path(fin, sizeof(fin), t->root[2], step, "");
    if (same_manifest_files(src, fin, r->msg, sizeof(r->msg)) != 0) {
        char ignored[256];
        fs_remove_tree(fin, ignored, sizeof(ignored));
        return;
    }
    r->ok = 1;
    step_stats(fin, &r->bytes, r->checksum, sizeof(r->checksum));
    retain_tier(t, 2, -1, r);
}

/* ---- choosing the step to resume from ---------------------------------------------------------- */

typedef struct {
    int64_t step;
    int tier;
} candidate;

static int cmp_candidate(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1; /* newest first */
    return x->tier - y->tier;                                     /* then fastest tier */
}

int ckpt_tiers_choose(const ckpt_tiers *t, int64_t want, int *tier, int64_t *step,
                      const ckpt_sink *sink, char *err, size_t errlen) {
    candidate *c = NULL;
    int n = 0;
    char msg[CKPT_MSG], last[CKPT_MSG] = "";
    for (int k = 0; k < CKPT_TIERS; k++) {
        if (!t->on[k]) continue;
        int64_t *steps = NULL;
        int m = 0;
        if (ckpt_list(t->root[k], &steps, &m, msg, sizeof(msg)) != 0) {
            ckpt_sink_event(sink, EV_CKPT_SKIP, -1, k, EVK_WARNING, msg);
            mt_warn("%s", msg);
            continue;
        }
        c = realloc(c, sizeof(*c) * (size_t)(n + m + 1));
        mtCheck(c != NULL, "out of memory");
        for (int i = 0; i < m; i++) c[n++] = (candidate){steps[i], k};
        free(steps);
    }
    if (n > 0) qsort(c, (size_t)n, sizeof(*c), cmp_candidate);
    char have[256] = ""; /* the steps there are, oldest first, each once: for a missing --resume N */
    size_t hl = 0;
    for (int i = n - 1; i >= 0 && hl < sizeof(have) - 24; i--)
        if (i == n - 1 || c[i].step != c[i + 1].step)
            hl += (size_t)snprintf(have + hl, sizeof(have) - hl, "%s%" PRId64, hl ? ", " : "",
                                   c[i].step);
    int found = 0, seen = 0;
    for (int i = 0; i < n && !found; i++) {
        if (want >= 0 && c[i].step != want) continue;
        seen++;
        if (ckpt_verify(t->root[c[i].tier], c[i].step, msg, sizeof(msg)) == 0) {
            *tier = c[i].tier;
            *step = c[i].step;
            found = 1;
            break;
        }
        snprintf(last, sizeof(last), "%s", msg);
        mt_warn("skipping checkpoint step %" PRId64 " in tier %d: %s", c[i].step, c[i].tier, msg);
        ckpt_sink_event(sink, EV_CKPT_SKIP, c[i].step, c[i].tier, EVK_WARNING, msg);
        ckpt_tiers_report(t, sink, c[i].tier, c[i].step, "corrupt", -1, NULL, NAN, NAN);
    }
    free(c);
    if (!found && want >= 0) {
        if (seen == 0)
            mt_errf(err, errlen, "no committed checkpoint of step %" PRId64 " under %s%s%s "
                    "(committed steps: %s)", want, t->root[1], t->on[0] ? " or tier 0 " : "",
                    t->on[0] ? t->root[0] : "", n ? have : "none");
        else
            mt_errf(err, errlen, "checkpoint does not verify: %s", last);
        return -1;
    }
    return found;
}

void ckpt_tiers_drop_memory(const ckpt_tiers *t, const ckpt_sink *sink) {
    struct stat sb;
    if (t->root[0][0] == 0 || stat(t->root[0], &sb) != 0) return;
    int64_t *steps = NULL;
    int n = 0;
    char err[CKPT_MSG];
    if (ckpt_list(t->root[0], &steps, &n, err, sizeof(err)) == 0) {
        for (int i = 0; i < n; i++)
            ckpt_tiers_report(t, sink, 0, steps[i], "deleted", -1, NULL, NAN, NAN);
    }
    free(steps);
    char parent[CKPT_PATH_MAX];
    snprintf(parent, sizeof(parent), "%s", t->root[0]);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0; /* .../<name>-<hash>/ckpt -> .../<name>-<hash> */
    if (fs_remove_tree(parent, err, sizeof(err)) != 0) mt_warn("%s", err);
}
