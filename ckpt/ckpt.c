/*
 * ckpt/ckpt.c — the directory commit protocol for one checkpoint step: begin, commit (manifest +
 * atomic rename), verify, list, newest verified step, retention.
 *
 * Why this shape: a checkpoint is many files written by many ranks, and the job can die at any
 * instant (OOM kill, node loss, full disk). A single atomic act must separate "not a checkpoint" from
 * "a checkpoint": we use rename(step_N.tmp -> step_N) of the directory, after every file and the
 * manifest are fsynced (the scheme of e.g. Orbax/TensorStore and PyTorch DCP, reduced to POSIX).
 * The manifest (sizes + CRC-32C) turns silent corruption afterwards — bit rot, a truncated copy, a
 * half-synced network file system — into a verified skip instead of a training run resumed from
 * garbage: loaders only ever take a step through ckpt_latest_verified(). ROOT/latest is a pointer for
 * humans and shell scripts; the directory rename is the commit point, so a crash between the rename
 * and the latest update loses nothing. Format details: docs/formats.md.
 */
#include "ckpt/ckpt.h"

#include "ckpt/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define MANIFEST_MAX_BYTES ((size_t)64 << 20)
#define ERR_LEN 1024

int ckpt_step_path(char *buf, size_t len, const char *root, int64_t step, const char *suffix) {
    int w = snprintf(buf, len, "%s/step_%08" PRId64 "%s", root, step, suffix ? suffix : "");
    return (w < 0 || (size_t)w >= len) ? -1 : 0;
}

int ckpt_write_json(const char *dir, const char *name, const char *json, char *err,
                    size_t errlen) {
    char path[CKPT_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        mt_errf(err, errlen, "path too long: '%s/%s'", dir, name);
        return -1;
    }
    if (json == NULL) {
        mt_errf(err, errlen, "%s: no JSON text given", path);
        return -1;
    }
    const char *end = NULL;
    cJSON *parsed = cJSON_ParseWithOpts(json, &end, 1);
    if (parsed == NULL) {
        const char *at = cJSON_GetErrorPtr();
        mt_errf(err, errlen, "%s: refusing to write invalid JSON (error near byte %ld)", path,
                at ? (long)(at - json) : -1L);
        return -1;
    }
    cJSON_Delete(parsed);
    size_t n = strlen(json);
    fs_afile a;
    if (fs_afile_open(&a, path, err, errlen) != 0) return -1;
    if (fs_afile_write(&a, json, n, err, errlen) != 0) return -1;
    if ((n == 0 || json[n - 1] != '\n') && fs_afile_write(&a, "\n", 1, err, errlen) != 0)
        return -1;
    return fs_afile_commit(&a, err, errlen);
}

static void warn_msg(ckpt_warn_fn warn, void *user, const char *msg) {
    if (warn != NULL) warn(user, msg);
    else mt_warn("%s", msg);
}

static int is_dir(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A file name from a manifest that cannot escape the step directory. */
static int safe_name(const char *name) {
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0 && strcmp(name, CKPT_MANIFEST_NAME) != 0;
}

int ckpt_begin(const char *root, int64_t step, char *dir, size_t dirlen, char *err,
               size_t errlen) {
    char tmp[CKPT_PATH_MAX];
    if (root == NULL || step < 0) {
        mt_errf(err, errlen, "ckpt_begin: invalid root or step %" PRId64, step);
        return -1;
    }
    if (ckpt_step_path(tmp, sizeof tmp, root, step, ".tmp") != 0) {
        mt_errf(err, errlen, "checkpoint path too long under '%s'", root);
        return -1;
    }
    if (fs_mkdir_p(root, err, errlen) != 0) return -1;
    if (fs_remove_tree(tmp, err, errlen) != 0) return -1; /* stale save of a crashed run */
    if (mkdir(tmp, 0755) != 0) {
        mt_errf(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    if (fs_fsync_dir(root, err, errlen) != 0) return -1;
    if (dir != NULL && snprintf(dir, dirlen, "%s", tmp) >= (int)dirlen) {
        mt_errf(err, errlen, "buffer too small for '%s'", tmp);
        return -1;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Regular files of dir except the manifest, sorted. Refuses sub-directories, other non-regular
 * entries and partial files ("*.part.*": a writer has not finished). */
static int list_files(const char *dir, char ***out, int *count, char *err, size_t errlen) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        mt_errf(err, errlen, "cannot open '%s': %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *e;
    char path[CKPT_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strcmp(e->d_name, CKPT_MANIFEST_NAME) == 0)
            continue;
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
            lstat(path, &st) != 0) {
            mt_errf(err, errlen, "cannot stat '%s/%s': %s", dir, e->d_name, strerror(errno));
            rc = -1;
            break;
        }
        if (!S_ISREG(st.st_mode) || strstr(e->d_name, ".part.") != NULL) {
            mt_errf(err, errlen, "%s: %s; a checkpoint step holds only finished regular files",
                    path, S_ISREG(st.st_mode) ? "partial file (a writer has not finished)"
                                                : "not a regular file");
            rc = -1;
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, sizeof *names * (size_t)cap);
            if (grown == NULL) {
                mt_errf(err, errlen, "out of memory listing %s", dir);
                rc = -1;
                break;
            }
            names = grown;
        }
        if ((names[n] = strdup(e->d_name)) == NULL) {
            mt_errf(err, errlen, "out of memory listing %s", dir);
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc != 0) {
        free_names(names, n);
        return -1;
    }
    if (n > 0) qsort(names, (size_t)n, sizeof *names, cmp_cstr);
    *out = names;
    *count = n;
    return 0;
}

static cJSON *raw_u64(uint64_t v) {
    char num[32];
    snprintf(num, sizeof num, "%" PRIu64, v);
    return cJSON_CreateRaw(num);
}

/* The CRC of file `name` of `bytes` bytes when the writer computed it while writing, else NULL. */
static const ckpt_known_file *known_crc(const ckpt_known_file *known, int n_known,
                                        const char *name, uint64_t bytes) {
    for (int i = 0; i < n_known; i++)
        if (known[i].bytes == bytes && strcmp(known[i].name, name) == 0) return &known[i];
    return NULL;
}

/* fsync + size + CRC of each file (from `known` when the writer computed it while writing the
 * same name and size, else by reading the file), then manifest.json written last (durably). */
static int write_manifest(const char *tmp, int64_t step, const ckpt_known_file *known,
                          int n_known, char *err, size_t errlen) {
    char **names;
    int n;
    if (list_files(tmp, &names, &n, err, errlen) != 0) return -1;
    cJSON *root = cJSON_CreateObject(), *files = NULL;
    char *text = NULL;
    int rc = -1;
    uint64_t total = 0;
    char path[CKPT_PATH_MAX];
    if (root == NULL) goto oom;
    cJSON_AddStringToObject(root, "format", CKPT_MANIFEST_FORMAT);
    cJSON_AddItemToObject(root, "version", raw_u64(CKPT_MANIFEST_VERSION));
    cJSON_AddItemToObject(root, "step", raw_u64((uint64_t)step));
    cJSON_AddItemToObject(root, "created_unix", raw_u64((uint64_t)time(NULL)));
    cJSON_AddStringToObject(root, "checksum", "crc32c");
    if ((files = cJSON_AddArrayToObject(root, "files")) == NULL) goto oom;
    for (int i = 0; i < n; i++) {
        if (fs_join(path, sizeof path, tmp, names[i], err, errlen) != 0) goto out;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fsync(fd) != 0 || fstat(fd, &st) != 0) { /* synced already; make sure */
            mt_errf(err, errlen, "cannot fsync '%s': %s", path, strerror(errno));
            if (fd >= 0) close(fd);
            goto out;
        }
        close(fd);
        if (ends_with(names[i], ".safetensors")) { /* never commit a torn tensor file */
            st_file sf;
            char msg[ERR_LEN];
            if (st_open(&sf, path, msg, sizeof msg) != 0) {
                mt_errf(err, errlen, "refusing to commit: %s", msg);
                goto out;
            }
            st_close(&sf);
        }
        uint32_t crc;
        uint64_t bytes = (uint64_t)st.st_size;
        const ckpt_known_file *k = known_crc(known, n_known, names[i], bytes);
        if (k != NULL) crc = k->crc; /* no second read of what was just written */
        else if (ckpt_crc32c_file(path, &crc, &bytes, err, errlen) != 0) goto out;
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON *f = cJSON_CreateObject();
        if (f == NULL) goto oom;
        cJSON_AddItemToArray(files, f);
        cJSON_AddStringToObject(f, "name", names[i]);
        cJSON_AddItemToObject(f, "bytes", raw_u64(bytes));
        cJSON_AddStringToObject(f, "crc32c", hex);
        total += bytes;
    }
    cJSON_AddItemToObject(root, "total_bytes", raw_u64(total));
    if ((text = cJSON_Print(root)) == NULL) goto oom;
    rc = ckpt_write_json(tmp, CKPT_MANIFEST_NAME, text, err, errlen); /* fsyncs file and dir */
    goto out;
oom:
    mt_errf(err, errlen, "out of memory building the manifest of %s", tmp);
out:
    free(text);
    cJSON_Delete(root);
    free_names(names, n);
    return rc;
}

int ckpt_commit(const char *root, int64_t step, char *err, size_t errlen) {
    return ckpt_commit_known(root, step, NULL, 0, err, errlen);
}

int ckpt_commit_known(const char *root, int64_t step, const ckpt_known_file *known, int n_known,
                      char *err, size_t errlen) {
    char tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX], old[CKPT_PATH_MAX];
    if (root == NULL || step < 0 || ckpt_step_path(tmp, sizeof tmp, root, step, ".tmp") != 0 ||
        ckpt_step_path(fin, sizeof fin, root, step, "") != 0 ||
        ckpt_step_path(old, sizeof old, root, step, ".old") != 0) {
        mt_errf(err, errlen, "ckpt_commit: invalid root or step %" PRId64, step);
        return -1;
    }
    if (!is_dir(tmp)) {
        mt_errf(err, errlen, "%s: no save in progress to commit (call ckpt_begin first)", tmp);
        return -1;
    }
    if (write_manifest(tmp, step, known, n_known, err, errlen) != 0) return -1;
    int replaced = 0;
    struct stat st;
    if (lstat(fin, &st) == 0) { /* a step saved again (e.g. its first copy failed verification) */
        if (fs_remove_tree(old, err, errlen) != 0) return -1;
        if (rename(fin, old) != 0) {
            mt_errf(err, errlen, "rename '%s' -> '%s' failed: %s", fin, old, strerror(errno));
            return -1;
        }
        replaced = 1;
    }
    if (rename(tmp, fin) != 0) { /* THE commit point */
        mt_errf(err, errlen, "rename '%s' -> '%s' failed: %s", tmp, fin, strerror(errno));
        if (replaced) rename(old, fin);
        return -1;
    }
    if (fs_fsync_dir(root, err, errlen) != 0) return -1;
    if (replaced) {
        char ignored[ERR_LEN];
        fs_remove_tree(old, ignored, sizeof ignored); /* leftovers are ignored by ckpt_list */
    }
    int64_t *steps = NULL;
    int n = 0;
    if (ckpt_list(root, &steps, &n, err, errlen) != 0) return -1;
    int64_t newest = n > 0 ? steps[n - 1] : step;
    free(steps);
    char path[CKPT_PATH_MAX], line[64];
    snprintf(line, sizeof line, "step_%08" PRId64 "\n", newest);
    if (snprintf(path, sizeof path, "%s/%s", root, CKPT_LATEST_NAME) >= (int)sizeof path) {
        mt_errf(err, errlen, "path too long under '%s'", root);
        return -1;
    }
    return fs_write_atomic(path, line, strlen(line), err, errlen); /* fsyncs ROOT after rename */
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d < 9007199254740992.0) || (double)(uint64_t)d != d) return -1;
    *out = (uint64_t)d;
    return 0;
}

typedef struct {
    const char *name;
    uint64_t bytes;
    uint32_t crc;
} manifest_entry;

/* Parse and check manifest.json of dir; fills entries (pointing into *doc). */
static int read_manifest(const char *dir, int64_t step, cJSON **doc, manifest_entry **entries,
                         int *count, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX], *text = NULL;
    *doc = NULL;
    *entries = NULL;
    *count = 0;
    if (fs_join(path, sizeof path, dir, CKPT_MANIFEST_NAME, err, errlen) != 0) return -1;
    struct stat st;
    if (lstat(path, &st) != 0) {
        mt_errf(err, errlen, "%s: missing (%s; the save was torn or never committed)", path,
                strerror(errno));
        return -1;
    }
    if (fs_read_file(path, MANIFEST_MAX_BYTES, &text, NULL, err, errlen) != 0) return -1;
    cJSON *m = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
    uint64_t version = 0, mstep = 0;
    if (m == NULL || !cJSON_IsObject(m) || !cJSON_IsString(fmt) ||
        strcmp(fmt->valuestring, CKPT_MANIFEST_FORMAT) != 0 || !cJSON_IsArray(files) ||
        json_u64(cJSON_GetObjectItemCaseSensitive(m, "version"), &version) != 0 ||
        json_u64(cJSON_GetObjectItemCaseSensitive(m, "step"), &mstep) != 0) {
        mt_errf(err, errlen, "%s: not a valid manifest (invalid JSON or missing format/version/"
                "step/files)", path);
        cJSON_Delete(m);
        return -1;
    }
    if (version != CKPT_MANIFEST_VERSION || mstep != (uint64_t)step) {
        mt_errf(err, errlen, "%s: %s (version %" PRIu64 ", step %" PRIu64 "; expected version "
                "%d, step %" PRId64 ")", path, version != CKPT_MANIFEST_VERSION
                ? "unsupported manifest version" : "manifest belongs to another step",
                version, mstep, CKPT_MANIFEST_VERSION, step);
        cJSON_Delete(m);
        return -1;
    }
    int n = cJSON_GetArraySize(files), i = 0;
    manifest_entry *e = calloc((size_t)(n > 0 ? n : 1), sizeof *e);
    if (e == NULL) {
        cJSON_Delete(m);
        mt_errf(err, errlen, "out of memory reading %s", path);
        return -1;
    }
    for (const cJSON *f = files->child; f != NULL; f = f->next, i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *crc = cJSON_GetObjectItemCaseSensitive(f, "crc32c");
        char *end = NULL;
        if (!cJSON_IsString(name) || !safe_name(name->valuestring) ||
            json_u64(cJSON_GetObjectItemCaseSensitive(f, "bytes"), &e[i].bytes) != 0 ||
            !cJSON_IsString(crc) || strlen(crc->valuestring) != 8 ||
            (e[i].crc = (uint32_t)strtoul(crc->valuestring, &end, 16), *end != '\0')) {
            mt_errf(err, errlen, "%s: files[%d] is malformed (need a plain file name, bytes and "
                    "an 8-hex-digit crc32c)", path, i);
            free(e);
            cJSON_Delete(m);
            return -1;
        }
        e[i].name = name->valuestring;
        for (int k = 0; k < i; k++) {
            if (strcmp(e[k].name, e[i].name) == 0) {
                mt_errf(err, errlen, "%s: file '%s' listed twice", path, e[i].name);
                free(e);
                cJSON_Delete(m);
                return -1;
            }
        }
    }
    *doc = m;
    *entries = e;
    *count = n;
    return 0;
}

/* ckpt_verify; with_crc = 0 skips the CRC pass (sizes, manifest and safetensors headers only). */
static int verify_step(const char *root, int64_t step, int with_crc, char *err, size_t errlen) {
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    if (root == NULL || step < 0 || ckpt_step_path(dir, sizeof dir, root, step, "") != 0) {
        mt_errf(err, errlen, "ckpt_verify: invalid root or step %" PRId64, step);
        return -1;
    }
    if (!is_dir(dir)) {
        mt_errf(err, errlen, "%s: no such committed checkpoint directory", dir);
        return -1;
    }
    cJSON *doc;
    manifest_entry *e;
    int n, rc = -1;
    if (read_manifest(dir, step, &doc, &e, &n, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i++) { /* cheap pass first: presence and sizes */
        struct stat st;
        if (fs_join(path, sizeof path, dir, e[i].name, err, errlen) != 0) goto out;
        if (lstat(path, &st) != 0) {
            mt_errf(err, errlen, "%s: listed in %s but %s", path, CKPT_MANIFEST_NAME,
                    errno == ENOENT ? "missing" : strerror(errno));
            goto out;
        }
        if (!S_ISREG(st.st_mode)) {
            mt_errf(err, errlen, "%s: listed in %s but not a regular file", path,
                    CKPT_MANIFEST_NAME);
            goto out;
        }
        if ((uint64_t)st.st_size != e[i].bytes) {
            mt_errf(err, errlen, "%s: size %lld bytes, %s says %" PRIu64 " (%s)", path,
                    (long long)st.st_size, CKPT_MANIFEST_NAME, e[i].bytes,
                    (uint64_t)st.st_size < e[i].bytes ? "truncated" : "extended");
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        if (fs_join(path, sizeof path, dir, e[i].name, err, errlen) != 0) goto out;
        uint32_t crc = e[i].crc;
        uint64_t bytes = e[i].bytes;
        if (with_crc && ckpt_crc32c_file(path, &crc, &bytes, err, errlen) != 0) goto out;
        if (bytes != e[i].bytes || crc != e[i].crc) {
            mt_errf(err, errlen, "%s: CRC32C %08x over %" PRIu64 " bytes, %s says %08x over %"
                    PRIu64 " (corrupted)", path, crc, bytes, CKPT_MANIFEST_NAME, e[i].crc,
                    e[i].bytes);
            goto out;
        }
        if (ends_with(e[i].name, ".safetensors")) { /* structure too: a torn write can be CRC'd */
            st_file f;
            char msg[ERR_LEN];
            if (st_open(&f, path, msg, sizeof msg) != 0) {
                mt_errf(err, errlen, "%s", msg);
                goto out;
            }
            st_close(&f);
        }
    }
    rc = 0;
out:
    free(e);
    cJSON_Delete(doc);
    return rc;
}

int ckpt_verify(const char *root, int64_t step, char *err, size_t errlen) {
    return verify_step(root, step, 1, err, errlen);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int ckpt_list_all(const char *root, int64_t **steps, int **partial, int *count) {
    *steps = NULL;
    *partial = NULL;
    *count = 0;
    DIR *d = opendir(root);
    if (!d) return -1;
    /* collect step_N and step_N.tmp, sort by step */
    int64_t *st = NULL;
    int *tmp = NULL, n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, "step_", 5) != 0) continue;
        size_t len = strspn(s + 5, "0123456789");
        int is_tmp = strcmp(s + 5 + len, ".tmp") == 0;
        if (len == 0 || len > 18 || (s[5 + len] != 0 && !is_tmp)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            st = realloc(st, sizeof(*st) * (size_t)cap);
            tmp = realloc(tmp, sizeof(*tmp) * (size_t)cap);
            mtCheck(st && tmp, "out of memory");
        }
        st[n] = strtoll(s + 5, NULL, 10);
        tmp[n++] = is_tmp;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort by (step, tmp) */
        for (int j = i; j > 0 && (st[j] < st[j - 1] || (st[j] == st[j - 1] && tmp[j] < tmp[j - 1]));
             j--) {
            int64_t v = st[j];
            st[j] = st[j - 1];
            st[j - 1] = v;
            int t = tmp[j];
            tmp[j] = tmp[j - 1];
            tmp[j - 1] = t;
        }
    *steps = st;
    *partial = tmp;
    *count = n;
    return 0;
}

int ckpt_list(const char *root, int64_t **steps, int *count, char *err, size_t errlen) {
    *steps = NULL;
    *count = 0;
    DIR *d = opendir(root);
    if (d == NULL) {
        if (errno == ENOENT) return 0; /* no checkpoint yet */
        mt_errf(err, errlen, "cannot open checkpoint root '%s': %s", root, strerror(errno));
        return -1;
    }
    int64_t *v = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    char path[CKPT_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, "step_", 5) != 0) continue;
        size_t len = strspn(s + 5, "0123456789");
        if (len == 0 || len > 18 || s[5 + len] != '\0') continue; /* .tmp / .old / .del / other */
        if (snprintf(path, sizeof path, "%s/%s", root, s) >= (int)sizeof path || !is_dir(path))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(v, sizeof *v * (size_t)cap);
            if (grown == NULL) {
                free(v);
                closedir(d);
                mt_errf(err, errlen, "out of memory listing '%s'", root);
                return -1;
            }
            v = grown;
        }
        v[n++] = strtoll(s + 5, NULL, 10);
    }
    closedir(d);
    if (n > 0) qsort(v, (size_t)n, sizeof *v, cmp_i64);
    *steps = v;
    *count = n;
    return 0;
}

int ckpt_read_latest(const char *root, int64_t *step, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX], *text = NULL;
    if (snprintf(path, sizeof path, "%s/%s", root, CKPT_LATEST_NAME) >= (int)sizeof path) {
        mt_errf(err, errlen, "path too long under '%s'", root);
        return -1;
    }
    if (access(path, F_OK) != 0 && errno == ENOENT) return 0;
    if (fs_read_file(path, 256, &text, NULL, err, errlen) != 0) return -1;
    size_t len = strspn(text + (strncmp(text, "step_", 5) == 0 ? 5 : 0), "0123456789");
    int ok = strncmp(text, "step_", 5) == 0 && len > 0 && len <= 18 &&
             (text[5 + len] == '\0' || strcmp(text + 5 + len, "\n") == 0);
    if (ok) *step = strtoll(text + 5, NULL, 10);
    else mt_errf(err, errlen, "%s: malformed (expected \"step_%%08d\\n\")", path);
    free(text);
    return ok ? 1 : -1;
}

int ckpt_latest_verified(const char *root, int64_t *step, ckpt_warn_fn warn, void *user,
                         char *err, size_t errlen) {
    int64_t *steps;
    int n;
    if (ckpt_list(root, &steps, &n, err, errlen) != 0) return -1;
    int found = 0;
    char msg[ERR_LEN], line[ERR_LEN + 128];
    for (int i = n - 1; i >= 0 && !found; i--) {
        if (ckpt_verify(root, steps[i], msg, sizeof msg) == 0) {
            *step = steps[i];
            found = 1;
        } else {
            snprintf(line, sizeof line, "skipping checkpoint step_%08" PRId64 " in %s: %s",
                     steps[i], root, msg);
            warn_msg(warn, user, line);
        }
    }
    free(steps);
    int64_t latest;
    int have = ckpt_read_latest(root, &latest, msg, sizeof msg);
    if (have < 0) {
        warn_msg(warn, user, msg);
    } else if (found && have == 1 && latest != *step) {
        snprintf(line, sizeof line, "%s/%s names step_%08" PRId64 " but the newest verified "
                 "checkpoint is step_%08" PRId64, root, CKPT_LATEST_NAME, latest, *step);
        warn_msg(warn, user, line);
    }
    return found;
}

/* Uncommit (rename to .del: atomic, so a half-deleted step never looks committed) then delete. */
static int remove_step(const char *root, int64_t step, char *err, size_t errlen) {
    char fin[CKPT_PATH_MAX], del[CKPT_PATH_MAX];
    if (ckpt_step_path(fin, sizeof fin, root, step, "") != 0 ||
        ckpt_step_path(del, sizeof del, root, step, ".del") != 0) {
        mt_errf(err, errlen, "path too long under '%s'", root);
        return -1;
    }
    if (fs_remove_tree(del, err, errlen) != 0) return -1;
    if (rename(fin, del) != 0) {
        mt_errf(err, errlen, "rename '%s' -> '%s' failed: %s", fin, del, strerror(errno));
        return -1;
    }
    if (fs_fsync_dir(root, err, errlen) != 0) return -1;
    return fs_remove_tree(del, err, errlen);
}

int ckpt_retain(const char *root, int keep_last, int64_t keep_every, int *n_removed,
                ckpt_warn_fn warn, void *user, char *err, size_t errlen) {
    return ckpt_retain_fresh(root, keep_last, keep_every, -1, n_removed, warn, user, err, errlen);
}

int ckpt_retain_fresh(const char *root, int keep_last, int64_t keep_every, int64_t fresh,
                      int *n_removed, ckpt_warn_fn warn, void *user, char *err, size_t errlen) {
    int64_t *steps;
    int n, removed = 0, rc = 0;
    if (n_removed) *n_removed = 0;
    if (ckpt_list(root, &steps, &n, err, errlen) != 0) return -1;
    char *keep = calloc((size_t)(n > 0 ? n : 1), 1);
    if (keep == NULL) {
        free(steps);
        mt_errf(err, errlen, "out of memory");
        return -1;
    }
    int doomed = 0;
    for (int i = 0; i < n; i++) {
        keep[i] = (i == n - 1) || (keep_last > 0 && i >= n - keep_last) ||
                  (keep_every > 0 && steps[i] % keep_every == 0);
        doomed += !keep[i];
    }
    if (doomed > 0) { /* keep the newest step that verifies, whatever K and M say */
        char msg[ERR_LEN], line[ERR_LEN + 128];
        int i;
        for (i = n - 1; i >= 0; i--) {
            if (verify_step(root, steps[i], steps[i] != fresh, msg, sizeof msg) == 0) break;
            snprintf(line, sizeof line, "retention: step_%08" PRId64 " does not verify: %s",
                     steps[i], msg);
            warn_msg(warn, user, line);
        }
        if (i >= 0) keep[i] = 1;
        else warn_msg(warn, user, "retention: no committed checkpoint verifies");
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (keep[i]) continue;
        if (remove_step(root, steps[i], err, errlen) != 0) rc = -1;
        else removed++;
    }
    free(keep);
    free(steps);
    if (n_removed) *n_removed = removed;
    return rc;
}
