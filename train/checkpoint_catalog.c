/*
 * train/checkpoint_catalog.c — the checkpoints of a finished (or running) run directory as
 * `minitrain ckpt ls|verify|export` sees them: its tier roots, the catalog state of a step, and
 * the newest step that verifies (see train/checkpoint.h).
 *
 * Tier 1 is always RUN_DIR/ckpt; tiers 0 (memory) and 2 (durable) are found in the run.db
 * catalog that train/checkpoint.c writes (a save records its directory there before writing), so
 * a reader finds them without the run's config. A tier-0 root is taken only when its hash names
 * this run directory (ckpt_tier0_owned): a copied run directory's catalog names the original's
 * tier 0. run.db is opened read-only; nothing here writes. Kept apart from checkpoint.c because
 * that file saves and resumes inside a training job, and this one reads from outside it.
 */
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/tiers.h"
#include "core/check.h"
#include "core/fs.h"
#include "train/checkpoint.h"

void checkpoint_catalog_open(checkpoint_catalog *c, const char *run_dir) {
    struct stat st;
    memset(c, 0, sizeof(*c));
    c->roots[0].tier = 1;
    snprintf(c->roots[0].root, sizeof(c->roots[0].root), "%.4000s/ckpt", run_dir);
    c->n_roots = 1;
    char dbpath[CKPT_PATH_MAX];
    snprintf(dbpath, sizeof(dbpath), "%.4000s/run.db", run_dir);
    if (stat(dbpath, &st) != 0 ||
        sqlite3_open_v2(dbpath, &c->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        if (c->db) sqlite3_close(c->db);
        c->db = NULL;
        return;
    }
    sqlite3_busy_timeout(c->db, 5000);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(c->db, "SELECT DISTINCT tier, path FROM checkpoints WHERE tier <> 1 "
                           "AND tier < 3 ORDER BY tier", -1, &q, NULL) != SQLITE_OK)
        return; /* no catalog yet */
    while (sqlite3_step(q) == SQLITE_ROW && c->n_roots < CHECKPOINT_MAX_ROOTS) {
        char root[CKPT_PATH_MAX];
        snprintf(root, sizeof(root), "%s", (const char *)sqlite3_column_text(q, 1));
        char *slash = strrchr(root, '/');
        if (!slash) continue;
        *slash = 0;
        if (sqlite3_column_int(q, 0) == 0 && !ckpt_tier0_owned(run_dir, root)) continue;
        int dup = 0;
        for (int r = 0; r < c->n_roots; r++) dup |= strcmp(c->roots[r].root, root) == 0;
        if (dup) continue;
        c->roots[c->n_roots].tier = sqlite3_column_int(q, 0);
        snprintf(c->roots[c->n_roots].root, CKPT_PATH_MAX, "%s", root);
        c->n_roots++;
    }
    sqlite3_finalize(q);
    /* fastest tier first */
    for (int i = 1; i < c->n_roots; i++)
        for (int j = i; j > 0 && c->roots[j].tier < c->roots[j - 1].tier; j--) {
            checkpoint_tier_root t = c->roots[j];
            c->roots[j] = c->roots[j - 1];
            c->roots[j - 1] = t;
        }
}

const char *checkpoint_catalog_state(const checkpoint_catalog *c, const char *path, char *buf,
                                     size_t len) {
    if (!c->db) return NULL;
    sqlite3_stmt *q = NULL;
    const char *res = NULL;
    if (sqlite3_prepare_v2(c->db, "SELECT state FROM checkpoints WHERE path = ?", -1, &q, NULL) !=
        SQLITE_OK)
        return NULL;
    sqlite3_bind_text(q, 1, path, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)) {
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(q, 0));
        res = buf;
    }
    sqlite3_finalize(q);
    return res;
}

int64_t checkpoint_catalog_newest_verified(const checkpoint_catalog *c, int64_t want, char *dir,
                                           size_t dirlen, char *last_err, size_t errlen) {
    char msg[2048];
    int64_t best = -1;
    if (errlen) last_err[0] = 0;
    for (int r = 0; r < c->n_roots; r++) {
        int64_t *steps = NULL;
        int n = 0;
        if (ckpt_list(c->roots[r].root, &steps, &n, msg, sizeof(msg)) != 0) continue;
        for (int i = n - 1; i >= 0; i--) {
            if ((want >= 0 && steps[i] != want) || steps[i] <= best) continue;
            if (ckpt_verify(c->roots[r].root, steps[i], msg, sizeof(msg)) != 0) {
                mt_warn("skipping checkpoint step %" PRId64 " (tier %d): %s", steps[i],
                        c->roots[r].tier, msg);
                snprintf(last_err, errlen, "%s", msg);
                continue;
            }
            best = steps[i];
            ckpt_step_path(dir, dirlen, c->roots[r].root, steps[i], "");
            break;
        }
        free(steps);
    }
    return best;
}

int checkpoint_catalog_archived(const checkpoint_catalog *c, checkpoint_archived **out) {
    *out = NULL;
    sqlite3_stmt *q = NULL;
    if (!c->db || sqlite3_prepare_v2(c->db, "SELECT step, bytes, path FROM checkpoints WHERE "
                                     "tier = 3 AND state = 'archived' ORDER BY step", -1, &q,
                                     NULL) != SQLITE_OK)
        return 0;
    int n = 0, cap = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            checkpoint_archived *grown = realloc(*out, (size_t)cap * sizeof(**out));
            mtCheck(grown != NULL, "out of memory listing the tier-3 catalog");
            *out = grown;
        }
        checkpoint_archived *a = &(*out)[n++];
        a->step = sqlite3_column_int64(q, 0);
        a->bytes = sqlite3_column_type(q, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 1);
        snprintf(a->path, sizeof(a->path), "%s", (const char *)sqlite3_column_text(q, 2));
    }
    sqlite3_finalize(q);
    return n;
}

void checkpoint_catalog_close(checkpoint_catalog *c) {
    if (c->db) sqlite3_close(c->db);
    c->db = NULL;
}

int checkpoint_catalog_check_output(const checkpoint_catalog *c, const char *run_dir,
                                    const char *path, int flags, char *err, size_t errlen) {
    static const char *const own[] = {"run.db", "run.db-wal", "run.db-shm", "model.safetensors",
                                      "tokenizer.bin"};
    enum { N_OWN = sizeof(own) / sizeof(own[0]) };
    char files[N_OWN + CHECKPOINT_MAX_ROOTS][CKPT_PATH_MAX];
    const char *protect[N_OWN + CHECKPOINT_MAX_ROOTS + 1];
    int n = 0;
    for (int k = 0; k < N_OWN; k++, n++) {
        snprintf(files[n], CKPT_PATH_MAX, "%.4000s/%s", run_dir, own[k]);
        protect[n] = files[n];
    }
    for (int r = 0; r < c->n_roots; r++, n++) protect[n] = c->roots[r].root;
    protect[n] = NULL;
    return fs_check_output(path, protect, flags, err, errlen);
}
