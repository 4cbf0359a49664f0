/*
 * text/tok_formats.c — tokenizer files of other ecosystems, recognised by content:
 *
 *   tiktoken rank file   "<base64 of the token's bytes> <rank>" per line (OpenAI's r50k_base /
 *                        gpt2 ranks, as js-tiktoken and tiktoken ship them). Rank = id. The file
 *                        holds no special tokens: <|endoftext|> gets id max_rank + 1, as
 *                        tiktoken's gpt2 encoding defines it.
 *   Hugging Face         tokenizer.json (model.type "BPE" with a ByteLevel pre-tokenizer), or
 *                        vocab.json (token -> id) + merges.txt ("left right" per line, in merge
 *                        order). Token strings use GPT-2's byte-to-unicode alphabet (each byte
 *                        is one printable code point: bytes_to_unicode() in GPT-2's encoder.py),
 *                        mapped back to bytes here. Merge m gives its result rank 256 + m, and
 *                        single bytes rank below every merge, so tiktoken's rule (lowest-ranked
 *                        concatenation) reproduces the merge order; ids stay vocab.json's.
 *   llm.c                gpt2_tokenizer.bin: 256 x uint32 header (magic 20240328, version 1|2,
 *                        vocab size, version 2: the end-of-text id), then per id a uint8 length
 *                        and the bytes. No merges, so decode only (TOK_KIND_DECODE).
 *
 * Everything else — llm.c model and state files, safetensors weights, token shards, text that is
 * none of these, garbage — gets one line saying what the file looks like instead.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/hash.h"
#include "text/tokenizer_impl.h"

#define LLMC_TOK_MAGIC 20240328u
#define LLMC_MODEL_MAGIC 20240326u
#define LLMC_STATE_MAGIC 20240327u
#define SHARD_MAGIC 20240520u
#define MAX_TOKEN_FILE ((size_t)1 << 29)

/* ---- small helpers ------------------------------------------------------------------------- */

static uint8_t *read_all(const char *path, size_t *n, char *err, size_t errlen) {
    struct stat st;
    FILE *f = fopen(path, "rb");
    if (f == NULL || fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "cannot open tokenizer file '%s': %s", path, strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    if ((uint64_t)st.st_size > MAX_TOKEN_FILE) {
        snprintf(err, errlen, "tokenizer file '%s': too large (%lld bytes)", path,
                 (long long)st.st_size);
        fclose(f);
        return NULL;
    }
    *n = (size_t)st.st_size;
    uint8_t *buf = mallocCheck(*n + 1);
    size_t got = fread(buf, 1, *n, f);
    fclose(f);
    if (got != *n) {
        snprintf(err, errlen, "tokenizer file '%s': short read", path);
        free(buf);
        return NULL;
    }
    buf[*n] = 0;
    return buf;
}

/* path of `name` in the directory of `path` */
static void sibling(char *out, size_t len, const char *path, const char *name) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    snprintf(out, len, "%s/%s", dirname(tmp), name);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int b64_value(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decode standard base64 (RFC 4648, '=' padding) of s[0..n) into out; returns the byte count or
 * -1 when s is not base64. out needs 3 * n / 4 bytes. */
static long b64_decode(const uint8_t *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4 != 0) return -1;
    long w = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value(s[i + k])) < 0) {
                return -1;
            }
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[w++] = (uint8_t)(x >> 16);
        if (pad < 2) out[w++] = (uint8_t)(x >> 8);
        if (pad < 1) out[w++] = (uint8_t)x;
    }
    return w;
}

/* ---- tiktoken ------------------------------------------------------------------------------ */

/* 1 if the first line looks like "<base64> <digits>" */
static int looks_tiktoken(const uint8_t *b, size_t n) {
    size_t i = 0;
    while (i < n && b64_value(b[i]) >= 0) i++;
    while (i < n && b[i] == '=') i++;
    if (i == 0 || i >= n || b[i] != ' ') return 0;
    size_t d = ++i;
    while (i < n && b[i] >= '0' && b[i] <= '9') i++;
    return i > d && (i == n || b[i] == '\n' || b[i] == '\r');
}

static int load_tiktoken(tok_tokenizer *t, const char *path, const uint8_t *b, size_t n,
                         char *err, size_t errlen) {
    tok_entries es = {0};
    uint8_t tokbuf[1024];
    uint32_t maxrank = 0;
    int line = 0;
    char msg[256];
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && b[e] != '\n') e++;
        size_t L = e;
        if (L > i && b[L - 1] == '\r') L--;
        line++;
        if (L > i) {
            size_t sp = i;
            while (sp < L && b[sp] != ' ') sp++;
            long nb = sp - i <= 4 * (sizeof(tokbuf) / 3) ? b64_decode(b + i, sp - i, tokbuf) : -1;
            char *end = NULL;
            char num[16] = "";
            if (L - sp - 1 < sizeof(num) && sp < L) memcpy(num, b + sp + 1, L - sp - 1), num[L - sp - 1] = 0;
            unsigned long r = num[0] >= '0' && num[0] <= '9' ? strtoul(num, &end, 10) : 0;
            if (nb <= 0 || end == NULL || *end != 0 || r >= TOK_MAX_VOCAB - 1) {
                snprintf(err, errlen, "tokenizer file '%s': tiktoken rank file line %d is not "
                         "'<base64 token> <rank>'", path, line);
                tok_entries_free(&es);
                return -1;
            }
            tok_entries_add(&es, (uint32_t)r, (uint32_t)r, tokbuf, (size_t)nb, 0);
            if (r > maxrank) maxrank = (uint32_t)r;
        }
        i = e + 1;
    }
    if (es.n == 0) {
        snprintf(err, errlen, "tokenizer file '%s': tiktoken rank file without tokens", path);
        return -1;
    }
    tok_entries_add(&es, maxrank + 1, TOK_NO_RANK, (const uint8_t *)"<|endoftext|>", 13, 1);
    int rc = tok_ranked_build(t, TOK_KIND_RANKED, &es, TOK_GPT2_PATTERN, "tiktoken rank file",
                              msg, sizeof(msg));
    tok_entries_free(&es);
    if (rc != 0) snprintf(err, errlen, "tokenizer file '%s': tiktoken rank file: %s", path, msg);
    return rc;
}

/* ---- Hugging Face -------------------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode(): the code point that stands for each byte in vocab strings. */
static int unicode_to_byte(uint32_t cp) {
    static int table[324];
    static int ready = 0;
    if (!ready) { /* benign race: every thread writes the same values */
        for (int i = 0; i < 324; i++) table[i] = -1;
        int extra = 0;
        for (int b = 0; b < 256; b++) {
            int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            table[printable ? b : 256 + extra++] = b;
        }
        ready = 1;
    }
    return cp < 324 ? table[cp] : -1;
}

/* Bytes of a vocab string (UTF-8 of byte-level code points); -1 if some code point is not one. */
static long hf_bytes(const char *s, uint8_t *out, size_t cap) {
    const uint8_t *p = (const uint8_t *)s;
    size_t w = 0;
    while (*p) {
        uint32_t cp;
        if (p[0] < 0x80) cp = *p++;
        else if ((p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
            cp = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
            p += 2;
        } else return -1; /* byte-level code points are all below U+0800 */
        int b = unicode_to_byte(cp);
        if (b < 0 || w >= cap) return -1;
        out[w++] = (uint8_t)b;
    }
    return (long)w;
}

/* string (bytes) -> entry index, for applying merges */
typedef struct {
    const tok_entries *es;
    uint32_t *slot; /* entry index + 1, 0 = empty */
    size_t cap;
} str_map;


static long sm_find(const str_map *m, const uint8_t *p, size_t n) {
    for (size_t i = hash_fnv1a64(p, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        uint32_t s = m->slot[i];
        if (s == 0) return -1;
        const tok_entry *e = &m->es->e[s - 1];
        if (e->len == n && memcmp(m->es->pool + e->off, p, n) == 0) return (long)s - 1;
    }
}

static void sm_build(str_map *m, const tok_entries *es) {
    m->es = es;
    m->cap = 16;
    while (m->cap < 2 * es->n) m->cap <<= 1;
    m->slot = callocCheck(m->cap, sizeof(uint32_t));
    for (size_t k = 0; k < es->n; k++) {
        const tok_entry *e = &es->e[k];
        if (sm_find(m, es->pool + e->off, e->len) >= 0) continue; /* first wins */
        size_t i = hash_fnv1a64(es->pool + e->off, e->len) & (m->cap - 1);
        while (m->slot[i]) i = (i + 1) & (m->cap - 1);
        m->slot[i] = (uint32_t)k + 1;
    }
}

/* Fill es from a vocab object {"token": id, ...}. 0 or -1 with err (no path). */
static int hf_vocab(tok_entries *es, const cJSON *vocab, char *err, size_t errlen) {
    uint8_t buf[1024];
    for (const cJSON *it = vocab->child; it; it = it->next) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= TOK_MAX_VOCAB) {
            snprintf(err, errlen, "vocab entry '%.40s' has no valid id", it->string);
            return -1;
        }
        long nb = hf_bytes(it->string, buf, sizeof(buf));
        if (nb < 0) {
            /* e.g. "<|endoftext|>" stays as it is; anything outside the byte alphabet means the
             * vocabulary is not GPT-2 byte-level (SentencePiece, WordPiece, ...) */
            snprintf(err, errlen, "vocab entry '%.40s' is not in GPT-2's byte-level alphabet (not "
                     "a byte-level BPE tokenizer)", it->string);
            return -1;
        }
        tok_entries_add(es, (uint32_t)it->valuedouble, TOK_NO_RANK, buf, (size_t)nb, 0);
    }
    return 0;
}

/* Rank single bytes and every merge result. merge(i) yields the pair's two strings. */
static int hf_apply_merges(tok_entries *es, const char *const *left, const char *const *right,
                           size_t nm, char *err, size_t errlen) {
    str_map m;
    sm_build(&m, es);
    for (size_t k = 0; k < es->n; k++)
        if (es->e[k].len == 1) es->e[k].rank = es->pool[es->e[k].off];
    uint8_t a[1024], b[1024], ab[2048];
    int rc = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) {
        long na = hf_bytes(left[i], a, sizeof(a)), nb = hf_bytes(right[i], b, sizeof(b));
        if (na <= 0 || nb <= 0 || sm_find(&m, a, (size_t)na) < 0 || sm_find(&m, b, (size_t)nb) < 0) {
            snprintf(err, errlen, "merge %zu ('%.30s' '%.30s') uses a token missing from the vocab",
                     i + 1, left[i], right[i]);
            rc = -1;
            break;
        }
        memcpy(ab, a, (size_t)na);
        memcpy(ab + na, b, (size_t)nb);
        long k = sm_find(&m, ab, (size_t)(na + nb));
        if (k < 0) {
            snprintf(err, errlen, "merge %zu ('%.30s' '%.30s') makes a token missing from the "
                     "vocab", i + 1, left[i], right[i]);
            rc = -1;
        } else if (es->e[k].rank == TOK_NO_RANK) {
            es->e[k].rank = 256 + (uint32_t)i; /* a repeated result keeps its first rank */
        }
    }
    free(m.slot);
    return rc;
}

/* Mark (or add) the special tokens: added_tokens of tokenizer.json, else <|endoftext|>. */
static void hf_specials(tok_entries *es, const cJSON *added) {
    const cJSON *a;
    int any = 0;
    cJSON_ArrayForEach(a, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valuedouble < 0) continue;
        size_t k;
        for (k = 0; k < es->n && es->e[k].id != (uint32_t)id->valuedouble; k++) {
        }
        if (k == es->n) {
            tok_entries_add(es, (uint32_t)id->valuedouble, TOK_NO_RANK,
                            (const uint8_t *)content->valuestring, strlen(content->valuestring), 1);
        } else {
            /* the added token's content is raw text, not byte-level: replace the bytes */
            es->e[k].special = 1;
            es->e[k].rank = TOK_NO_RANK;
            size_t len = strlen(content->valuestring);
            if (len == es->e[k].len)
                memcpy(es->pool + es->e[k].off, content->valuestring, len);
        }
        any = 1;
    }
    if (any) return;
    for (size_t k = 0; k < es->n; k++)
        if (es->e[k].len == 13 && memcmp(es->pool + es->e[k].off, "<|endoftext|>", 13) == 0) {
            es->e[k].special = 1;
            es->e[k].rank = TOK_NO_RANK;
        }
}

/* Split "left right" merge lines (merges.txt, or tokenizer.json's string form) in place. */
static int split_merge(char *s, const char **l, const char **r) {
    char *sp = strchr(s, ' ');
    if (sp == NULL || sp == s || sp[1] == 0 || strchr(sp + 1, ' ')) return -1;
    *sp = 0;
    *l = s;
    *r = sp + 1;
    return 0;
}

static int hf_finish(tok_tokenizer *t, tok_entries *es, const char *const *l,
                     const char *const *r, size_t nm, const cJSON *added, const char *source,
                     const char *path, char *err, size_t errlen) {
    char msg[300];
    int rc = hf_apply_merges(es, l, r, nm, msg, sizeof(msg));
    if (rc == 0) {
        hf_specials(es, added);
        rc = tok_ranked_build(t, TOK_KIND_RANKED, es, TOK_GPT2_PATTERN, source, msg, sizeof(msg));
    }
    if (rc != 0) snprintf(err, errlen, "tokenizer file '%s': %s: %s", path, source, msg);
    return rc;
}

static int load_tokenizer_json(tok_tokenizer *t, const char *path, const cJSON *root, char *err,
                               size_t errlen) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *pre_type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space");
    const char *why = NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0)
        why = "its model is not BPE";
    else if (!cJSON_IsString(pre_type) || strcmp(pre_type->valuestring, "ByteLevel") != 0)
        why = "its pre-tokenizer is not ByteLevel (GPT-2's)";
    else if (cJSON_IsTrue(prefix))
        why = "add_prefix_space is true (GPT-2 uses false)";
    else if (norm && !cJSON_IsNull(norm))
        why = "it has a normalizer (GPT-2 has none)";
    if (why) {
        snprintf(err, errlen, "tokenizer file '%s': Hugging Face tokenizer.json that is not GPT-2 "
                 "byte-level BPE: %s", path, why);
        return -1;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        snprintf(err, errlen, "tokenizer file '%s': tokenizer.json without model.vocab / "
                 "model.merges", path);
        return -1;
    }
    tok_entries es = {0};
    char msg[300];
    if (hf_vocab(&es, vocab, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "tokenizer file '%s': tokenizer.json: %s", path, msg);
        tok_entries_free(&es);
        return -1;
    }
    size_t nm = (size_t)cJSON_GetArraySize(merges), i = 0;
    const char **l = mallocCheck((nm + 1) * sizeof(char *)), **r = mallocCheck((nm + 1) * sizeof(char *));
    char **own = callocCheck(nm + 1, sizeof(char *));
    const cJSON *m;
    int rc = 0;
    cJSON_ArrayForEach(m, merges) {
        /* "left right" (tokenizers < 0.20) or ["left", "right"] */
        if (cJSON_IsString(m)) {
            own[i] = strdup(m->valuestring);
            mtCheck(own[i] != NULL, "out of memory");
            if (split_merge(own[i], &l[i], &r[i]) != 0) rc = -1;
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) && cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            l[i] = cJSON_GetArrayItem(m, 0)->valuestring;
            r[i] = cJSON_GetArrayItem(m, 1)->valuestring;
        } else {
            rc = -1;
        }
        if (rc != 0) {
            snprintf(err, errlen, "tokenizer file '%s': tokenizer.json merge %zu is not a pair",
                     path, i + 1);
            break;
        }
        i++;
    }
    if (rc == 0)
        rc = hf_finish(t, &es, l, r, nm, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"),
                       "Hugging Face tokenizer.json", path, err, errlen);
    for (size_t k = 0; k < nm; k++) free(own[k]);
    free(own);
    free(l);
    free(r);
    tok_entries_free(&es);
    return rc;
}

/* vocab.json at vpath + merges.txt at mpath */
static int load_vocab_merges(tok_tokenizer *t, const char *vpath, const char *mpath, char *err,
                             size_t errlen) {
    if (!is_file(vpath) || !is_file(mpath)) {
        snprintf(err, errlen, "tokenizer file '%s': Hugging Face vocab.json and merges.txt go "
                 "together; '%s' is missing", is_file(vpath) ? vpath : mpath,
                 is_file(vpath) ? mpath : vpath);
        return -1;
    }
    size_t vn, mn;
    uint8_t *vb = read_all(vpath, &vn, err, errlen);
    if (!vb) return -1;
    uint8_t *mb = read_all(mpath, &mn, err, errlen);
    if (!mb) {
        free(vb);
        return -1;
    }
    cJSON *vocab = cJSON_ParseWithLength((const char *)vb, vn);
    int rc = -1;
    tok_entries es = {0};
    char msg[300];
    if (!cJSON_IsObject(vocab)) {
        snprintf(err, errlen, "tokenizer file '%s': vocab.json is not a JSON object", vpath);
    } else if (hf_vocab(&es, vocab, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "tokenizer file '%s': vocab.json: %s", vpath, msg);
    } else {
        size_t cap = 1024, nm = 0;
        const char **l = mallocCheck(cap * sizeof(char *)), **r = mallocCheck(cap * sizeof(char *));
        int line = 0;
        rc = 0;
        for (char *s = (char *)mb, *e; s < (char *)mb + mn && rc == 0; s = e + 1) {
            e = strchr(s, '\n');
            if (!e) e = (char *)mb + mn;
            *e = 0;
            line++;
            if (e > s && e[-1] == '\r') e[-1] = 0;
            if (s[0] == 0 || (line == 1 && strncmp(s, "#version", 8) == 0)) continue;
            if (nm == cap) {
                cap *= 2;
                l = realloc(l, cap * sizeof(char *));
                r = realloc(r, cap * sizeof(char *));
                mtCheck(l && r, "out of memory");
            }
            if (split_merge(s, &l[nm], &r[nm]) != 0) {
                snprintf(err, errlen, "tokenizer file '%s': merges.txt line %d is not 'left right'",
                         mpath, line);
                rc = -1;
            }
            nm++;
        }
        if (rc == 0)
            rc = hf_finish(t, &es, l, r, nm, NULL, "Hugging Face vocab.json + merges.txt", vpath,
                           err, errlen);
        free(l);
        free(r);
    }
    cJSON_Delete(vocab);
    tok_entries_free(&es);
    free(vb);
    free(mb);
    return rc;
}

/* ---- llm.c --------------------------------------------------------------------------------- */

static int load_llmc(tok_tokenizer *t, const char *path, const uint8_t *b, size_t n, char *err,
                     size_t errlen) {
    if (n < 1024) {
        snprintf(err, errlen, "tokenizer file '%s': llm.c tokenizer truncated (%zu bytes; the "
                 "header is 1024)", path, n);
        return -1;
    }
    uint32_t version = tok_get_u32(b + 4), V = tok_get_u32(b + 8);
    if (version != 1 && version != 2) {
        snprintf(err, errlen, "tokenizer file '%s': llm.c tokenizer version %u (this build reads "
                 "1 and 2)", path, version);
        return -1;
    }
    if (V == 0 || V > TOK_MAX_VOCAB) {
        snprintf(err, errlen, "tokenizer file '%s': llm.c tokenizer vocab size %u out of range",
                 path, V);
        return -1;
    }
    uint32_t eot = version == 2 ? tok_get_u32(b + 12) : UINT32_MAX;
    tok_entries es = {0};
    size_t at = 1024;
    for (uint32_t id = 0; id < V; id++) {
        if (at >= n || b[at] == 0 || at + 1 + b[at] > n) {
            snprintf(err, errlen, "tokenizer file '%s': llm.c tokenizer %s at token %u of %u",
                     path, at < n && b[at] == 0 ? "has an empty token" : "truncated", id, V);
            tok_entries_free(&es);
            return -1;
        }
        int special = id == eot || (eot == UINT32_MAX && b[at] == 13 &&
                                    memcmp(b + at + 1, "<|endoftext|>", 13) == 0);
        tok_entries_add(&es, id, TOK_NO_RANK, b + at + 1, b[at], special);
        at += 1 + (size_t)b[at];
    }
    if (at != n) {
        snprintf(err, errlen, "tokenizer file '%s': llm.c tokenizer has %zu trailing bytes after "
                 "%u tokens", path, n - at, V);
        tok_entries_free(&es);
        return -1;
    }
    char msg[256];
    int rc = tok_ranked_build(t, TOK_KIND_DECODE, &es, NULL, "llm.c gpt2_tokenizer.bin", msg,
                              sizeof(msg));
    tok_entries_free(&es);
    if (rc != 0) snprintf(err, errlen, "tokenizer file '%s': %s", path, msg);
    return rc;
}

/* ---- detection ----------------------------------------------------------------------------- */

static int load_dir(tok_tokenizer *t, const char *dir, char *err, size_t errlen) {
    char p[4096], q[4096];
    snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
    if (is_file(p)) return tok_load(t, p, err, errlen);
    snprintf(p, sizeof(p), "%s/vocab.json", dir);
    snprintf(q, sizeof(q), "%s/merges.txt", dir);
    if (is_file(p) || is_file(q)) return load_vocab_merges(t, p, q, err, errlen);
    snprintf(p, sizeof(p), "%s/tokenizer.bin", dir);
    if (is_file(p)) return tok_load(t, p, err, errlen);
    snprintf(err, errlen, "tokenizer directory '%s' holds no tokenizer.json, vocab.json + "
             "merges.txt or tokenizer.bin", dir);
    return -1;
}

int tok_formats_load(tok_tokenizer *t, const char *path, const uint8_t *b, size_t n, char *err,
                     size_t errlen) {
    memset(t, 0, sizeof(*t));
    if (b == NULL) return load_dir(t, path, err, errlen);
    uint32_t magic = n >= 4 ? tok_get_u32(b) : 0;
    if (magic == LLMC_TOK_MAGIC) return load_llmc(t, path, b, n, err, errlen);
    const char *other = magic == LLMC_MODEL_MAGIC ? "an llm.c model file (gpt2_*.bin)"
                        : magic == LLMC_STATE_MAGIC ? "an llm.c debug state file"
                        : magic == SHARD_MAGIC      ? "a token shard (llm.c format)"
                                                    : NULL;
    if (n >= 10 && b[8] == '{') { /* safetensors: uint64 header length, then a JSON header */
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
        if (hl + 8 <= n) other = "a safetensors file (model weights)";
    }
    if (other) {
        snprintf(err, errlen, "tokenizer file '%s' is %s, not a tokenizer", path, other);
        return -1;
    }
    size_t i = 0;
    if (n >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF) i = 3;
    while (i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) i++;
    if (i < n && b[i] == '{') {
        cJSON *root = cJSON_ParseWithLength((const char *)b, n);
        int rc = -1;
        if (root == NULL) {
            snprintf(err, errlen, "tokenizer file '%s': not valid JSON", path);
        } else if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "model"))) {
            rc = load_tokenizer_json(t, path, root, err, errlen);
        } else if (root->child && cJSON_IsNumber(root->child)) {
            char m[4096];
            sibling(m, sizeof(m), path, "merges.txt");
            rc = load_vocab_merges(t, path, m, err, errlen);
        } else {
            snprintf(err, errlen, "tokenizer file '%s': JSON that is neither a Hugging Face "
                     "tokenizer.json nor a vocab.json", path);
        }
        cJSON_Delete(root);
        return rc;
    }
    if (n >= 8 && memcmp(b, "#version", 8) == 0) {
        char v[4096];
        sibling(v, sizeof(v), path, "vocab.json");
        return load_vocab_merges(t, v, path, err, errlen);
    }
    if (looks_tiktoken(b, n)) return load_tiktoken(t, path, b, n, err, errlen);
    snprintf(err, errlen, "tokenizer file '%s': not a tokenizer minitrain reads (bad magic; "
             "expected minitrain's tokenizer.bin, llm.c's gpt2_tokenizer.bin, a tiktoken rank file, "
             "or Hugging Face tokenizer.json / vocab.json + merges.txt)", path);
    return -1;
}
