/*
 * ckpt/safetensors.c — safetensors writer and validating reader (format: ckpt/safetensors.h and
 * docs/formats.md; reference implementation: huggingface/safetensors, Rust crate).
 *
 * Why this shape:
 *   - The writer streams: 8-byte length, the JSON header, then each tensor's bytes directly from the
 *     caller's pointer, through fs_afile (partial file + fsync + rename), so a multi-GB shard never
 *     needs a second copy in memory and a full disk can never clobber an older file.
 *   - The header is built with cJSON, but every integer (shape, offsets) is inserted as raw text
 *     printed with PRId64/PRIu64: cJSON stores numbers as doubles and would print 10^15 as "1e+15",
 *     which the Rust reader refuses as a usize.
 *   - The reader trusts nothing: a file from disk may be truncated, bit-flipped or hostile. It
 *     checks what the Rust reference checks (header size cap, UTF-8, '{' start, shape x dtype ==
 *     span, contiguous offsets that exactly fill the buffer) and reports the file and tensor.
 *     Data is reachable both as an mmap pointer (zero copy) and through pread (st_read_tensor), which
 *     turns a file truncated after opening into an error instead of a SIGBUS.
 * The shard convention and the metadata builder live in ckpt/st_shard.c.
 */
#include "ckpt/safetensors.h"

#include "core/check.h"
#include "core/fs.h"
#include "core/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this library supports little-endian hosts only"
#endif

#define ST_MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers lose precision in cJSON */

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_I16] = {"I16", 2},   [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},   [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

size_t st_dtype_size(st_dtype d) {
    return ((int)d >= 0 && d < ST_DTYPE_COUNT) ? st_dtypes[d].size : 0;
}

const char *st_dtype_name(st_dtype d) {
    return ((int)d >= 0 && d < ST_DTYPE_COUNT) ? st_dtypes[d].name : "?";
}

int st_dtype_from_name(const char *name, st_dtype *d) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(name, st_dtypes[i].name) == 0) {
            *d = (st_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* numel and byte size of a shape; -1 on a negative dimension or overflow past INT64_MAX. */
static int shape_size(int ndim, const int64_t *shape, st_dtype dt, int64_t *numel,
                      uint64_t *bytes) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return -1;
    }
    uint64_t b;
    if (n > (uint64_t)INT64_MAX || __builtin_mul_overflow(n, (uint64_t)st_dtype_size(dt), &b) ||
        b > (uint64_t)INT64_MAX)
        return -1;
    *numel = (int64_t)n;
    *bytes = b;
    return 0;
}

/* "[3,4]" into buf (for messages). */
static const char *shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? ",%" PRId64 : "%" PRId64, shape[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
    return buf;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ---- writer ----------------------------------------------------------------------------------- */

/* Validate and parse the caller's metadata text; checks "shard:" keys against the tensors (whose
 * names are given sorted in `sorted`). Returns the cJSON object (possibly NULL for no metadata). */
static int writer_metadata(const char *path, const char *text, const st_tensor *t, int n,
                           const char **sorted, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    if (text == NULL) return 0;
    cJSON *m = cJSON_Parse(text);
    if (m == NULL || !cJSON_IsObject(m)) {
        mt_errf(err, errlen, "%s: metadata is not a JSON object", path);
        cJSON_Delete(m);
        return -1;
    }
    for (cJSON *kv = m->child; kv != NULL; kv = kv->next) {
        if (!cJSON_IsString(kv) || utf8_invalid_at((const uint8_t *)kv->string,
                                                   strlen(kv->string)) >= 0 ||
            utf8_invalid_at((const uint8_t *)kv->valuestring,
                            strlen(kv->valuestring)) >= 0) {
            mt_errf(err, errlen, "%s: metadata key '%s' must map to a UTF-8 string", path,
                    kv->string);
            cJSON_Delete(m);
            return -1;
        }
        for (cJSON *o = m->child; o != kv; o = o->next) {
            if (strcmp(o->string, kv->string) == 0) {
                mt_errf(err, errlen, "%s: metadata key '%s' appears twice", path, kv->string);
                cJSON_Delete(m);
                return -1;
            }
        }
        if (strncmp(kv->string, "shard:", 6) != 0) continue;
        const char *tname = kv->string + 6;
        const char **hit = n > 0 ? bsearch(&tname, sorted, (size_t)n, sizeof *sorted, cmp_str_ptr)
                                 : NULL;
        if (hit == NULL) {
            mt_errf(err, errlen, "%s: metadata '%s' names no tensor of this file", path,
                    kv->string);
            cJSON_Delete(m);
            return -1;
        }
        const st_tensor *tt = NULL;
        for (int i = 0; i < n && tt == NULL; i++)
            if (strcmp(t[i].name, tname) == 0) tt = &t[i];
        st_shard s;
        char msg[256];
        if (st_shard_parse(kv->valuestring, &s, msg, sizeof msg) != 0) {
            mt_errf(err, errlen, "%s: tensor '%s': %s", path, tname, msg);
            cJSON_Delete(m);
            return -1;
        }
        int bad = s.ndim != tt->ndim;
        for (int d = 0; d < s.ndim && !bad; d++)
            bad = s.offset[d] > s.global[d] || tt->shape[d] > s.global[d] - s.offset[d];
        if (bad) {
            mt_errf(err, errlen, "%s: tensor '%s': shard '%s' does not fit its global shape "
                    "(ndim %d, need offset + shape <= global in every dimension)",
                    path, tname, kv->valuestring, tt->ndim);
            cJSON_Delete(m);
            return -1;
        }
    }
    *out = m;
    return 0;
}

static int add_raw_ints(cJSON *obj, const char *key, int n, const int64_t *v) {
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    if (arr == NULL) return -1;
    for (int i = 0; i < n; i++) {
        char num[32];
        snprintf(num, sizeof num, "%" PRId64, v[i]);
        cJSON *r = cJSON_CreateRaw(num);
        if (r == NULL) return -1;
        cJSON_AddItemToArray(arr, r);
    }
    return 0;
}

/* Check the tensor list and build the compact header text (unpadded). Returns malloc'd text. */
static char *writer_header(const char *path, const st_tensor *t, int n, const char *metadata,
                           char *err, size_t errlen) {
    const char **sorted = malloc(sizeof *sorted * (size_t)(n > 0 ? n : 1));
    cJSON *root = cJSON_CreateObject(), *meta = NULL;
    char *text = NULL;
    if (sorted == NULL || root == NULL) {
        mt_errf(err, errlen, "%s: out of memory building the header", path);
        goto done;
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *x = &t[i];
        int64_t numel;
        uint64_t bytes;
        char sh[160];
        if (x->name == NULL || x->name[0] == '\0' || strcmp(x->name, "__metadata__") == 0 ||
            utf8_invalid_at((const uint8_t *)x->name, strlen(x->name)) >= 0) {
            mt_errf(err, errlen, "%s: tensor #%d has an invalid name (empty, not UTF-8 or "
                    "\"__metadata__\")", path, i);
            goto done;
        }
        if (st_dtype_size(x->dtype) == 0) {
            mt_errf(err, errlen, "%s: tensor '%s': invalid dtype %d", path, x->name,
                    (int)x->dtype);
            goto done;
        }
        if (x->ndim < 0 || x->ndim > ST_MAX_DIMS) {
            mt_errf(err, errlen, "%s: tensor '%s': ndim %d outside [0, %d]", path, x->name,
                    x->ndim, ST_MAX_DIMS);
            goto done;
        }
        if (shape_size(x->ndim, x->shape, x->dtype, &numel, &bytes) != 0 ||
            offset + bytes < offset) {
            mt_errf(err, errlen, "%s: tensor '%s': invalid shape %s (negative or too large)",
                    path, x->name, shape_str(sh, sizeof sh, x->ndim, x->shape));
            goto done;
        }
        if (bytes > 0 && x->data == NULL) {
            mt_errf(err, errlen, "%s: tensor '%s': data is NULL for %" PRIu64 " bytes", path,
                    x->name, bytes);
            goto done;
        }
        sorted[i] = x->name;
        offset += bytes;
    }
    if (n > 0) qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
    for (int i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            mt_errf(err, errlen, "%s: tensor name '%s' appears twice", path, sorted[i]);
            goto done;
        }
    }
    if (writer_metadata(path, metadata, t, n, sorted, &meta, err, errlen) != 0) goto done;
    if (meta != NULL && meta->child != NULL) {
        cJSON_AddItemToObject(root, "__metadata__", meta);
        meta = NULL;
    }
    offset = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 0;
        uint64_t bytes = 0;
        shape_size(t[i].ndim, t[i].shape, t[i].dtype, &numel, &bytes);
        int64_t offs[2] = {(int64_t)offset, (int64_t)(offset + bytes)};
        cJSON *e = cJSON_CreateObject();
        if (e == NULL) goto oom;
        cJSON_AddItemToObject(root, t[i].name, e);
        if (cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dtype)) == NULL ||
            add_raw_ints(e, "shape", t[i].ndim, t[i].shape) != 0 ||
            add_raw_ints(e, "data_offsets", 2, offs) != 0)
            goto oom;
        offset += bytes;
    }
    text = cJSON_PrintUnformatted(root);
    if (text == NULL) goto oom;
    goto done;
oom:
    mt_errf(err, errlen, "%s: out of memory building the header", path);
done:
    cJSON_Delete(meta);
    cJSON_Delete(root);
    free(sorted);
    return text;
}

char *st_header_block(const char *path, const st_tensor *tensors, int n,
                      const char *metadata_json, size_t *len_out, char *err, size_t errlen) {
    if (path == NULL || n < 0 || (n > 0 && tensors == NULL)) {
        mt_errf(err, errlen, "st_write: invalid arguments (path %s, n %d)",
                path ? path : "(null)", n);
        return NULL;
    }
    char *json = writer_header(path, tensors, n, metadata_json, err, errlen);
    if (json == NULL) return NULL;
    size_t len = strlen(json);
    uint64_t hlen = ((uint64_t)len + 7u) & ~(uint64_t)7u; /* pad so 8 + N is a multiple of 8 */
    if (hlen > ST_MAX_HEADER_BYTES) {
        mt_errf(err, errlen, "%s: header would be %" PRIu64 " bytes, over the %llu limit", path,
                hlen, ST_MAX_HEADER_BYTES);
        free(json);
        return NULL;
    }
    unsigned char *block = malloc(8 + (size_t)hlen);
    if (block == NULL) {
        mt_errf(err, errlen, "%s: out of memory building the header", path);
        free(json);
        return NULL;
    }
    for (int i = 0; i < 8; i++) block[i] = (unsigned char)(hlen >> (8 * i)); /* little-endian */
    memcpy(block + 8, json, len);
    memset(block + 8 + len, ' ', (size_t)hlen - len);
    free(json);
    *len_out = 8 + (size_t)hlen;
    return (char *)block;
}

int st_tensor_bytes(const st_tensor *t, uint64_t *bytes) {
    int64_t numel = 0;
    *bytes = 0;
    return shape_size(t->ndim, t->shape, t->dtype, &numel, bytes) == 0 && *bytes <= SIZE_MAX ? 0
                                                                                              : -1;
}

int st_write(const char *path, const st_tensor *tensors, int n, const char *metadata_json,
             char *err, size_t errlen) {
    size_t hbytes = 0;
    char *head = st_header_block(path, tensors, n, metadata_json, &hbytes, err, errlen);
    if (head == NULL) return -1;
    fs_afile a;
    int rc = -1;
    if (fs_afile_open(&a, path, err, errlen) != 0) goto out;
    if (fs_afile_write(&a, head, hbytes, err, errlen) != 0) goto out;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = 0;
        if (st_tensor_bytes(&tensors[i], &bytes) != 0) {
            mt_errf(err, errlen, "%s: tensor '%s' too large", path, tensors[i].name);
            fs_afile_abort(&a);
            goto out;
        }
        if (fs_afile_write(&a, tensors[i].data, (size_t)bytes, err, errlen) != 0) goto out;
    }
    rc = fs_afile_commit(&a, err, errlen);
out:
    free(head);
    return rc;
}

/* ---- reader ----------------------------------------------------------------------------------- */

static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0; /* end of file: caller reports a truncation */
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d < ST_MAX_EXACT_INT) || (double)(uint64_t)d != d) return -1;
    *out = (uint64_t)d;
    return 0;
}

/* Parse one tensor entry of the header into info (name already set). */
static int parse_entry(const char *path, const cJSON *e, st_info *info, uint64_t *begin,
                       uint64_t *end, char *err, size_t errlen) {
    const char *name = info->name;
    if (!cJSON_IsObject(e)) {
        mt_errf(err, errlen, "%s: tensor '%s': header entry is not an object", path, name);
        return -1;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || st_dtype_from_name(dt->valuestring, &info->dtype) != 0) {
        mt_errf(err, errlen, "%s: tensor '%s': missing or unknown dtype%s%s", path, name,
                cJSON_IsString(dt) ? " " : "", cJSON_IsString(dt) ? dt->valuestring : "");
        return -1;
    }
    int nd = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : -1;
    if (nd < 0 || nd > ST_MAX_DIMS) {
        mt_errf(err, errlen, "%s: tensor '%s': shape must be an array of at most %d integers",
                path, name, ST_MAX_DIMS);
        return -1;
    }
    info->ndim = nd;
    int d = 0;
    for (const cJSON *x = sh->child; x != NULL; x = x->next, d++) {
        uint64_t v;
        if (json_uint(x, &v) != 0) {
            mt_errf(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                    path, name, d);
            return -1;
        }
        info->shape[d] = (int64_t)v;
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || json_uint(of->child, begin) != 0 ||
        json_uint(of->child->next, end) != 0 || *end < *begin) {
        mt_errf(err, errlen, "%s: tensor '%s': data_offsets must be [begin, end] with "
                "0 <= begin <= end", path, name);
        return -1;
    }
    char s[160];
    if (shape_size(nd, info->shape, info->dtype, &info->numel, &info->nbytes) != 0) {
        mt_errf(err, errlen, "%s: tensor '%s': shape %s is too large", path, name,
                shape_str(s, sizeof s, nd, info->shape));
        return -1;
    }
    if (*end - *begin != info->nbytes) {
        mt_errf(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] span "
                "%" PRIu64 " bytes but shape %s x %s needs %" PRIu64, path, name, *begin, *end,
                *end - *begin, shape_str(s, sizeof s, nd, info->shape),
                st_dtype_name(info->dtype), info->nbytes);
        return -1;
    }
    return 0;
}

static int parse_metadata(const char *path, st_file *f, const cJSON *m, char *err,
                          size_t errlen) {
    if (cJSON_IsNull(m)) return 0;
    if (!cJSON_IsObject(m)) {
        mt_errf(err, errlen, "%s: __metadata__ is not an object", path);
        return -1;
    }
    int n = cJSON_GetArraySize(m);
    f->meta_keys = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
    f->meta_values = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
    if (f->meta_keys == NULL || f->meta_values == NULL) {
        mt_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (const cJSON *kv = m->child; kv != NULL; kv = kv->next) {
        if (!cJSON_IsString(kv)) {
            mt_errf(err, errlen, "%s: __metadata__ value of '%s' is not a string", path,
                    kv->string);
            return -1;
        }
        if (st_metadata(f, kv->string) != NULL) {
            mt_errf(err, errlen, "%s: __metadata__ key '%s' appears twice", path, kv->string);
            return -1;
        }
        f->meta_keys[f->n_meta] = strdup(kv->string);
        f->meta_values[f->n_meta] = strdup(kv->valuestring);
        f->n_meta++;
        if (f->meta_keys[f->n_meta - 1] == NULL || f->meta_values[f->n_meta - 1] == NULL) {
            mt_errf(err, errlen, "%s: out of memory", path);
            return -1;
        }
    }
    return 0;
}

/* Sort key for the layout checks: qsort has no context argument, so each entry carries its data. */
typedef struct {
    const char *name;
    uint64_t begin, nbytes;
    int idx;
} layout_key;

static int cmp_key_name(const void *a, const void *b) {
    return strcmp(((const layout_key *)a)->name, ((const layout_key *)b)->name);
}

static int cmp_key_offset(const void *a, const void *b) {
    const layout_key *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Names unique; offsets inside the buffer, contiguous, covering it exactly. */
static int check_layout(const char *path, st_file *f, const uint64_t *begin, uint64_t buffer,
                        char *err, size_t errlen) {
    int n = f->n_tensors, rc = 0;
    layout_key *k = malloc(sizeof *k * (size_t)(n > 0 ? n : 1));
    f->by_name = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (k == NULL || f->by_name == NULL) {
        free(k);
        mt_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int i = 0; i < n; i++)
        k[i] = (layout_key){f->tensors[i].name, begin[i], f->tensors[i].nbytes, i};
    qsort(k, (size_t)n, sizeof *k, cmp_key_name);
    for (int i = 0; i < n; i++) f->by_name[i] = k[i].idx;
    for (int i = 1; i < n && rc == 0; i++) {
        if (strcmp(k[i - 1].name, k[i].name) == 0) {
            mt_errf(err, errlen, "%s: tensor '%s' appears twice in the header", path, k[i].name);
            rc = -1;
        }
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (begin[i] + f->tensors[i].nbytes > buffer) {
            mt_errf(err, errlen, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] go "
                    "past the end of the data buffer (%" PRIu64 " bytes): file truncated?",
                    path, f->tensors[i].name, begin[i], begin[i] + f->tensors[i].nbytes, buffer);
            rc = -1;
        }
    }
    qsort(k, (size_t)n, sizeof *k, cmp_key_offset);
    uint64_t expect = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *prev = i > 0 ? k[i - 1].name : "(start of buffer)";
        if (k[i].begin < expect) {
            mt_errf(err, errlen, "%s: tensors '%s' and '%s' overlap (byte %" PRIu64 ")", path,
                    prev, k[i].name, k[i].begin);
            rc = -1;
        } else if (k[i].begin > expect) {
            mt_errf(err, errlen, "%s: gap of %" PRIu64 " bytes between '%s' and tensor '%s'",
                    path, k[i].begin - expect, prev, k[i].name);
            rc = -1;
        }
        expect = k[i].begin + k[i].nbytes;
    }
    if (rc == 0 && expect != buffer) {
        mt_errf(err, errlen, "%s: data buffer is %" PRIu64 " bytes but the tensors cover %" PRIu64
                " (trailing bytes or wrong header)", path, buffer, expect);
        rc = -1;
    }
    free(k);
    return rc;
}

int st_open(st_file *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    char *hdr = NULL;
    cJSON *root = NULL;
    uint64_t *begin = NULL;
    f->path = strdup(path ? path : "");
    if (f->path == NULL) goto oom;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        mt_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        mt_errf(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    f->file_bytes = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (f->file_bytes < 8 || pread_all(f->fd, len8, 8, 0) != 0) {
        mt_errf(err, errlen, "%s: file is %" PRIu64 " bytes, too short for the 8-byte header "
                "length (truncated or not a safetensors file)", path, f->file_bytes);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    f->header_bytes = hlen;
    if (hlen > f->file_bytes - 8) {
        mt_errf(err, errlen, "%s: header length %" PRIu64 " exceeds the %" PRIu64 " bytes after "
                "the length field (truncated or not a safetensors file)", path, hlen,
                f->file_bytes - 8);
        goto fail;
    }
    if (hlen > ST_MAX_HEADER_BYTES || hlen < 2) {
        mt_errf(err, errlen, "%s: header length %" PRIu64 " is outside [2, %llu]", path, hlen,
                ST_MAX_HEADER_BYTES);
        goto fail;
    }
    hdr = malloc((size_t)hlen + 1);
    if (hdr == NULL) goto oom;
    if (pread_all(f->fd, hdr, (size_t)hlen, 8) != 0) {
        mt_errf(err, errlen, "%s: cannot read the %" PRIu64 "-byte header: %s", path, hlen,
                errno ? strerror(errno) : "end of file");
        goto fail;
    }
    hdr[hlen] = '\0';
    long bad = utf8_invalid_at((const uint8_t *)hdr, (size_t)hlen);
    if (hdr[0] != '{' || bad >= 0) {
        mt_errf(err, errlen, "%s: header %s (byte %ld of the header)", path,
                hdr[0] != '{' ? "does not start with '{'" : "is not valid UTF-8",
                hdr[0] != '{' ? 0L : bad);
        goto fail;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (root == NULL || !cJSON_IsObject(root)) {
        const char *at = root ? hdr : cJSON_GetErrorPtr();
        mt_errf(err, errlen, "%s: header is not a valid JSON object (error near byte %ld of "
                "the header)", path, at ? (long)(at - hdr) : -1L);
        goto fail;
    }
    for (const char *p = end; p < hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            mt_errf(err, errlen, "%s: unexpected byte 0x%02x after the JSON header (byte %ld; "
                    "padding must be spaces)", path, (unsigned char)*p, (long)(p - hdr));
            goto fail;
        }
    }
    int n = 0, seen_meta = 0;
    for (cJSON *e = root->child; e != NULL; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
    f->tensors = calloc((size_t)(n > 0 ? n : 1), sizeof(st_info));
    begin = calloc((size_t)(n > 0 ? n : 1), sizeof(uint64_t));
    if (f->tensors == NULL || begin == NULL) goto oom;
    for (cJSON *e = root->child; e != NULL; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) {
                mt_errf(err, errlen, "%s: __metadata__ appears twice", path);
                goto fail;
            }
            if (parse_metadata(path, f, e, err, errlen) != 0) goto fail;
            continue;
        }
        st_info *info = &f->tensors[f->n_tensors];
        info->name = strdup(e->string);
        if (info->name == NULL) goto oom;
        f->n_tensors++;
        uint64_t b, en;
        if (parse_entry(path, e, info, &b, &en, err, errlen) != 0) goto fail;
        begin[f->n_tensors - 1] = b;
    }
    uint64_t data_start = 8 + hlen, buffer = f->file_bytes - data_start;
    if (check_layout(path, f, begin, buffer, err, errlen) != 0) goto fail;
    f->map = mmap(NULL, (size_t)f->file_bytes, PROT_READ, MAP_SHARED, f->fd, 0);
    if (f->map == MAP_FAILED) f->map = NULL; /* still readable through st_read_tensor */
    for (int i = 0; i < f->n_tensors; i++) {
        f->tensors[i].offset = data_start + begin[i];
        f->tensors[i].data = f->map ? (const char *)f->map + f->tensors[i].offset : NULL;
    }
    free(begin);
    free(hdr);
    cJSON_Delete(root);
    return 0;
oom:
    mt_errf(err, errlen, "%s: out of memory", path ? path : "(null)");
fail:
    free(begin);
    free(hdr);
    cJSON_Delete(root);
    st_close(f);
    return -1;
}

const st_info *st_find(const st_file *f, const char *name) {
    int lo = 0, hi = f->n_tensors - 1;
    if (f->by_name == NULL || name == NULL) return NULL;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_info *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

int st_count(const st_file *f) { return f->n_tensors; }

const st_info *st_info_at(const st_file *f, int i) {
    return (i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}

int st_read_tensor(const st_file *f, const char *name, void *dst, size_t dst_bytes, char *err,
                   size_t errlen) {
    const st_info *t = st_find(f, name);
    if (t == NULL) {
        mt_errf(err, errlen, "%s: no tensor named '%s'", f->path ? f->path : "(closed)",
                name ? name : "(null)");
        return -1;
    }
    if ((uint64_t)dst_bytes != t->nbytes) {
        char s[160];
        mt_errf(err, errlen, "%s: tensor '%s' (%s %s) is %" PRIu64 " bytes but the destination "
                "holds %zu", f->path, name, st_dtype_name(t->dtype),
                shape_str(s, sizeof s, t->ndim, t->shape), t->nbytes, dst_bytes);
        return -1;
    }
    if (pread_all(f->fd, dst, dst_bytes, t->offset) != 0) {
        mt_errf(err, errlen, "%s: tensor '%s': read of %zu bytes at offset %" PRIu64 " failed: "
                "%s", f->path, name, dst_bytes, t->offset,
                errno ? strerror(errno) : "file shorter than its header says (truncated)");
        return -1;
    }
    return 0;
}

const char *st_metadata(const st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

int st_metadata_count(const st_file *f) { return f->n_meta; }

const char *st_metadata_at(const st_file *f, int i, const char **key) {
    if (i < 0 || i >= f->n_meta) return NULL;
    if (key) *key = f->meta_keys[i];
    return f->meta_values[i];
}

void st_close(st_file *f) {
    if (f->map != NULL) munmap(f->map, (size_t)f->file_bytes);
    if (f->path != NULL && f->fd >= 0) close(f->fd); /* path is set iff st_open ran */
    for (int i = 0; i < f->n_tensors; i++) free((char *)f->tensors[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->tensors);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

int st_shard_get(const st_file *f, const char *name, st_shard *s, char *err, size_t errlen) {
    const st_info *t = st_find(f, name);
    if (t == NULL) {
        mt_errf(err, errlen, "%s: no tensor named '%s'", f->path, name ? name : "(null)");
        return -1;
    }
    char key[1024];
    if (snprintf(key, sizeof key, "shard:%s", name) >= (int)sizeof key) {
        mt_errf(err, errlen, "%s: tensor name '%s' too long", f->path, name);
        return -1;
    }
    const char *v = st_metadata(f, key);
    if (v == NULL) {
        memset(s, 0, sizeof *s);
        s->ndim = t->ndim;
        memcpy(s->global, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        return 0;
    }
    char msg[512];
    if (st_shard_parse(v, s, msg, sizeof msg) != 0) {
        mt_errf(err, errlen, "%s: tensor '%s': %s", f->path, name, msg);
        return -1;
    }
    int bad = s->ndim != t->ndim;
    for (int d = 0; d < s->ndim && !bad; d++)
        bad = s->offset[d] > s->global[d] || t->shape[d] > s->global[d] - s->offset[d];
    if (bad) {
        mt_errf(err, errlen, "%s: tensor '%s': shard '%s' does not fit (tensor has %d dims; need "
                "offset + shape <= global)", f->path, name, v, t->ndim);
        return -1;
    }
    return 1;
}
