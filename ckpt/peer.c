/*
 * ckpt/peer.c — peer-replicated tier 0: node names, per-node roots, buddy choice, and one
 * committed step moved as bytes and re-committed on arrival (see ckpt/peer.h).
 *
 * Why this shape: a node's memory dies with the node, so each rank's tier-0 step also lives in
 * the memory of a rank on another node (preferably behind another leaf switch, so one switch
 * failure does not take both copies). The copy is the committed directory itself, manifest
 * included: the receiver writes the files, commits them with the same ckpt_commit as any tier,
 * and then demands that its freshly computed manifest list exactly the sender's names, sizes and
 * CRC-32C, so a copy is either bit-identical to what the sender committed or it does not exist.
 */
#include "ckpt/peer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fs.h"

#define PEER_MAGIC "MTPEER01"
#define PEER_NAME 128

/* ---- nodes and roots --------------------------------------------------------------------------- */

void ckpt_peer_node_name(char *buf, size_t len) {
    const char *e = getenv("MINITRAIN_NODE");
    if (e == NULL || e[0] == 0) e = getenv("SLURMD_NODENAME");
    if (e && e[0]) {
        snprintf(buf, len, "%s", e);
        return;
    }
    if (gethostname(buf, len) != 0 || buf[0] == 0) snprintf(buf, len, "localhost");
    buf[len - 1] = 0;
}

int ckpt_peer_expand(char *buf, size_t len, const char *tmpl, const char *node, char *err,
                     size_t errlen) {
    static const char *VARS[] = {"${SLURMD_NODENAME}", "$SLURMD_NODENAME", "${MINITRAIN_NODE}",
                                 "$MINITRAIN_NODE", "%n"};
    size_t o = 0;
    int named = 0;
    for (const char *p = tmpl; *p;) {
        const char *put = NULL;
        size_t skip = 0;
        for (size_t v = 0; v < sizeof(VARS) / sizeof(VARS[0]) && !put; v++)
            if (strncmp(p, VARS[v], strlen(VARS[v])) == 0) put = node, skip = strlen(VARS[v]);
        if (!put && p[0] == '%' && p[1] == '%') put = "%", skip = 2;
        if (!put && p[0] == '%') {
            mt_errf(err, errlen, "ckpt_tier0_root '%s': unknown '%%%c' (only %%n, the node name, "
                    "and %%%% are expanded)", tmpl, p[1] ? p[1] : ' ');
            return -1;
        }
        if (put) {
            named |= put == node;
            size_t n = strlen(put);
            if (o + n >= len) goto too_long;
            memcpy(buf + o, put, n);
            o += n;
            p += skip;
        } else {
            if (o + 1 >= len) goto too_long;
            buf[o++] = *p++;
        }
    }
    buf[o] = 0;
    return named;
too_long:
    mt_errf(err, errlen, "ckpt_tier0_root '%s' is too long once the node name is expanded", tmpl);
    return -1;
}

int ckpt_peer_root(char *buf, size_t len, const char *t0, int rank, int own) {
    int w = snprintf(buf, len, "%s/%srank_%05d", t0, own ? "" : "peer/", rank);
    return (w < 0 || (size_t)w >= len) ? -1 : 0;
}

/* ---- buddies ----------------------------------------------------------------------------------- */

int ckpt_peer_buddies(int world, const int *node, const int *leaf, int *buddy) {
    /* ring[i]: the lowest rank of the i-th distinct node; local[r]: r's index among its node's
     * ranks; count[i]: ranks on ring node i; ring_of[r]: r's ring node */
    int *ring = mallocCheck(sizeof(int) * (size_t)world);
    int *ring_of = mallocCheck(sizeof(int) * (size_t)world);
    int *local = mallocCheck(sizeof(int) * (size_t)world);
    int *count = callocCheck((size_t)world, sizeof(int));
    int k = 0;
    for (int r = 0; r < world; r++) {
        int i = 0;
        while (i < k && node[ring[i]] != node[r]) i++;
        if (i == k) ring[k++] = r;
        ring_of[r] = i;
        local[r] = count[i]++;
    }
    int with = 0;
    for (int r = 0; r < world; r++) {
        buddy[r] = -1;
        if (k < 2) continue;
        int i = ring_of[r], j = -1;
        for (int s = 1; s < k && j < 0; s++) {
            int c = (i + s) % k;
            if (leaf == NULL || leaf[ring[c]] != leaf[r]) j = c;
        }
        if (j < 0 || leaf == NULL) j = (i + 1) % k; /* one leaf: the next node */
        int want = local[r] % count[j];             /* the want-th rank of node j */
        for (int q = 0; q < world; q++)
            if (ring_of[q] == j && local[q] == want) buddy[r] = q;
        with++;
    }
    free(ring);
    free(ring_of);
    free(local);
    free(count);
    return with;
}

/* ---- one step as bytes ------------------------------------------------------------------------- */

static cJSON *read_manifest(const char *dir, char **text, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX];
    if (fs_join(path, sizeof(path), dir, CKPT_MANIFEST_NAME, err, errlen) != 0) return NULL;
    if (fs_read_file(path, (size_t)64 << 20, text, NULL, err, errlen) != 0) return NULL;
    cJSON *m = cJSON_Parse(*text);
    const cJSON *files = m ? cJSON_GetObjectItemCaseSensitive(m, "files") : NULL;
    if (!cJSON_IsArray(files)) {
        mt_errf(err, errlen, "%s: not a checkpoint manifest (no \"files\" array)", path);
        cJSON_Delete(m);
        free(*text);
        *text = NULL;
        return NULL;
    }
    return m;
}

int ckpt_peer_pack(const char *root, int64_t step, void **out, size_t *len, char *err,
                   size_t errlen) {
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    *out = NULL;
    *len = 0;
    if (ckpt_step_path(dir, sizeof(dir), root, step, "") != 0) {
        mt_errf(err, errlen, "%s: path too long", root);
        return -1;
    }
    char *mtext = NULL;
    cJSON *m = read_manifest(dir, &mtext, err, errlen);
    if (!m) return -1;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files"), *f;
    int n = cJSON_GetArraySize(files) + 1; /* + manifest.json, last */
    char (*names)[PEER_NAME] = callocCheck((size_t)n, PEER_NAME);
    uint64_t *sizes = callocCheck((size_t)n, sizeof(uint64_t));
    int i = 0, rc = 0;
    cJSON_ArrayForEach(f, files) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        if (!cJSON_IsString(nm) || !cJSON_IsNumber(sz) || strlen(nm->valuestring) >= PEER_NAME ||
            strchr(nm->valuestring, '/')) {
            mt_errf(err, errlen, "%s/%s: malformed file entry", dir, CKPT_MANIFEST_NAME);
            rc = -1;
            break;
        }
        snprintf(names[i], PEER_NAME, "%s", nm->valuestring);
        sizes[i++] = (uint64_t)sz->valuedouble;
    }
    snprintf(names[i], PEER_NAME, "%s", CKPT_MANIFEST_NAME);
    sizes[i] = strlen(mtext);
    size_t head = 8 + 4 + (size_t)n * (PEER_NAME + 8), total = head;
    for (int j = 0; j < n; j++) total += sizes[j];
    total = (total + 3) & ~(size_t)3;
    char *b = NULL;
    if (rc == 0) {
        b = callocCheck(total, 1);
        memcpy(b, PEER_MAGIC, 8);
        uint32_t nn = (uint32_t)n;
        memcpy(b + 8, &nn, 4);
        size_t at = head;
        for (int j = 0; j < n && rc == 0; j++) {
            char *h = b + 12 + (size_t)j * (PEER_NAME + 8);
            memcpy(h, names[j], PEER_NAME);
            memcpy(h + PEER_NAME, &sizes[j], 8);
            if (j == n - 1) {
                memcpy(b + at, mtext, sizes[j]); /* the manifest as read, not re-serialised */
                break;
            }
            /* straight into the buffer: a shard is never held twice */
            FILE *fp = NULL;
            size_t got = 0;
            if (fs_join(path, sizeof(path), dir, names[j], err, errlen) != 0) {
                rc = -1;
                break;
            }
            if ((fp = fopen(path, "rb")) == NULL) {
                mt_errf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
                rc = -1;
                break;
            }
            got = fread(b + at, 1, (size_t)sizes[j], fp);
            int extra = fgetc(fp) != EOF; /* longer than the manifest says */
            fclose(fp);
            if (got != sizes[j] || extra) {
                mt_errf(err, errlen, "%s: size differs from the manifest's %" PRIu64 " bytes", path,
                        sizes[j]);
                rc = -1;
            }
            at += got;
        }
    }
    free(names);
    free(sizes);
    free(mtext);
    cJSON_Delete(m);
    if (rc != 0) {
        free(b);
        return -1;
    }
    *out = b;
    *len = total;
    return 0;
}

/* The "files" arrays of the sender's manifest text and of committed dir's manifest are equal. */
static int same_files(const char *sent, size_t sent_len, const char *dir, char *err,
                      size_t errlen) {
    char *text = NULL, *copy = mallocCheck(sent_len + 1);
    memcpy(copy, sent, sent_len);
    copy[sent_len] = 0;
    cJSON *a = cJSON_Parse(copy), *b = read_manifest(dir, &text, err, errlen);
    int same = a && b &&
               cJSON_Compare(cJSON_GetObjectItemCaseSensitive(a, "files"),
                             cJSON_GetObjectItemCaseSensitive(b, "files"), 1);
    if (b && !same)
        mt_errf(err, errlen, "%s: the copy differs from the sender's manifest (names, sizes or "
                "CRC-32C): torn or corrupted in flight", dir);
    else if (!a)
        mt_errf(err, errlen, "%s: the sender's manifest is not JSON", dir);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(text);
    free(copy);
    return same ? 0 : -1;
}

int ckpt_peer_unpack(const char *root, int64_t step, const void *buf, size_t len, char *err,
                     size_t errlen) {
    const char *b = buf;
    uint32_t n = 0;
    if (len < 12 || memcmp(b, PEER_MAGIC, 8) != 0) {
        mt_errf(err, errlen, "peer copy of step %" PRId64 " for %s: not a packed step", step, root);
        return -1;
    }
    memcpy(&n, b + 8, 4);
    size_t head = 12 + (size_t)n * (PEER_NAME + 8), at = head;
    if (n < 1 || n > 100000 || head > len) {
        mt_errf(err, errlen, "peer copy of step %" PRId64 " for %s: bad header", step, root);
        return -1;
    }
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], path[CKPT_PATH_MAX], ignored[256];
    if (ckpt_begin(root, step, tmp, sizeof(tmp), err, errlen) != 0) return -1;
    const char *manifest = NULL;
    size_t manifest_len = 0;
    int rc = 0;
    for (uint32_t j = 0; j < n && rc == 0; j++) {
        const char *h = b + 12 + (size_t)j * (PEER_NAME + 8);
        char name[PEER_NAME];
        uint64_t size;
        memcpy(name, h, PEER_NAME);
        name[PEER_NAME - 1] = 0;
        memcpy(&size, h + PEER_NAME, 8);
        if (size > len - at || name[0] == 0 || name[0] == '.' || strchr(name, '/')) {
            mt_errf(err, errlen, "peer copy of step %" PRId64 " for %s: file %u is torn or "
                    "misnamed", step, root, j);
            rc = -1;
            break;
        }
        if (j == n - 1) {
            manifest = b + at, manifest_len = (size_t)size;
        } else if (fs_join(path, sizeof(path), tmp, name, err, errlen) != 0 ||
                   fs_write_atomic(path, b + at, (size_t)size, err, errlen) != 0) {
            rc = -1;
        }
        at += (size_t)size;
    }
    if (rc == 0 && manifest == NULL) {
        mt_errf(err, errlen, "peer copy of step %" PRId64 " for %s: no manifest", step, root);
        rc = -1;
    }
    if (rc != 0) {
        fs_remove_tree(tmp, ignored, sizeof(ignored));
        return -1;
    }
    if (ckpt_commit(root, step, err, errlen) != 0) {
        fs_remove_tree(tmp, ignored, sizeof(ignored));
        return -1;
    }
    ckpt_step_path(fin, sizeof(fin), root, step, "");
    if (same_files(manifest, manifest_len, fin, err, errlen) != 0) {
        fs_remove_tree(fin, ignored, sizeof(ignored));
        return -1;
    }
    return 0;
}

int ckpt_peer_retain(const char *root, int keep, char *err, size_t errlen) {
    int64_t *steps = NULL;
    int n = 0, rc = 0;
    if (ckpt_list(root, &steps, &n, err, errlen) != 0) return -1;
    for (int i = 0; i + (keep > 1 ? keep : 1) < n && rc == 0; i++) {
        char dir[CKPT_PATH_MAX], del[CKPT_PATH_MAX];
        if (ckpt_step_path(dir, sizeof(dir), root, steps[i], "") != 0 ||
            ckpt_step_path(del, sizeof(del), root, steps[i], ".del") != 0) {
            mt_errf(err, errlen, "%s: path too long", root);
            rc = -1;
        } else if (rename(dir, del) != 0) { /* atomic: no longer a committed step */
            mt_errf(err, errlen, "cannot rename '%s': %s", dir, strerror(errno));
            rc = -1;
        } else {
            rc = fs_remove_tree(del, err, errlen);
        }
    }
    free(steps);
    return rc;
}
