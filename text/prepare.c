/*
 * text/prepare.c — the train/val split of a tokenized text and the dataset directory it is
 * written to (see text/prepare.h). Out of cmd/prepare.c so that the command only parses options,
 * reads and scrubs the input, calls the modules and prints.
 */
#include "text/prepare.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fs.h"
#include "text/data.h"

/* Warn about shards from an earlier run that the loader would also pick up. */
static void warn_stale(const char *dir, const char *split) {
    char pat[4096];
    snprintf(pat, sizeof(pat), "%s/%s_*.bin", dir, split);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *base = strrchr(g.gl_pathv[i], '/');
        base = base ? base + 1 : g.gl_pathv[i];
        char mine[32];
        snprintf(mine, sizeof(mine), "%s_000.bin", split);
        if (strcmp(base, mine) != 0)
            mt_warn("prepare: '%s' is left from an earlier run; the loader will read it too "
                    "(delete it if unwanted)",
                    g.gl_pathv[i]);
    }
    globfree(&g);
}

int prepare_split(size_t ntok, double val_fraction, size_t *ntrain, size_t *nval) {
    size_t nv = (size_t)((double)ntok * val_fraction + 0.5);
    if (nv < 2)
        nv = 2;
    *nval = nv;
    *ntrain = ntok >= nv ? ntok - nv : 0;
    return ntok < nv + 2 ? -1 : 0;
}

int prepare_write(const char *out, const tok_tokenizer *tok, const uint32_t *ids, size_t ntrain,
                  size_t nval, prepare_paths *p, char *err, size_t errlen) {
    int V = tok_vocab_size(tok);
    p->tok_path = fs_join_alloc(out, "tokenizer.bin");
    p->train_path = fs_join_alloc(out, "train_000.bin");
    p->val_path = fs_join_alloc(out, "val_000.bin");
    if (tok_save(tok, p->tok_path, err, errlen) != 0)
        return -1;
    if (data_write_shard(p->train_path, ids, ntrain, V, err, errlen) != 0)
        return -1;
    if (data_write_shard(p->val_path, ids + ntrain, nval, V, err, errlen) != 0)
        return -1;
    warn_stale(out, "train");
    warn_stale(out, "val");
    return 0;
}

void prepare_paths_free(prepare_paths *p) {
    free(p->tok_path);
    free(p->train_path);
    free(p->val_path);
    memset(p, 0, sizeof(*p));
}
