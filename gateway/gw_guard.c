/*
 * gateway/gw_guard.c — what the gateway lets through: content rules (PCRE2 patterns with block
 * or redact actions, on prompts and/or completions) and PII masking (safety/pii.h), on whole
 * texts and on streams.
 *
 * Why it is shaped so:
 *   - A stream cannot be judged event by event: "bad" + "word" must be caught as "badword". The
 *     filter holds back the last (window - 1) bytes, where window is the longest match any rule
 *     may span (each rule declares it; PII uses pii_window), so a match that ends in a future
 *     piece always starts inside the held-back bytes. Released text is kept (up to window bytes)
 *     as context, so \b and lookbehind judge the boundary as they would the whole text. The
 *     price is latency of at most window - 1 bytes, and only when a completion rule is active.
 *   - A redaction is applied only once the whole match lies in the releasable part; a match
 *     that reaches into the held-back part moves the release point to its start (a greedy
 *     pattern such as \d+ may still grow).
 *   - Patterns that can match the empty string are refused when compiled: as block rules they
 *     would block everything.
 *   - PII masking uses safety/pii.c when the build has it (MT_HAVE_PII, set by the Makefile when
 *     safety/pii.c exists); without it, pii = mask is a configuration error that says so.
 *   - Nothing here logs or stores text: callers get the rule's name, never the matched bytes.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "gateway/gw_impl.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#ifdef MT_HAVE_PII
#include "safety/pii.h"
#endif

#define PII_WINDOW 128 /* bytes: emails, cards, IBANs, phones and IPv6 fit; PEM blocks do not */

typedef struct {
    char name[GW_NAME_MAX];
    pcre2_code *re;
    int action, on;
    size_t window;
    char repl[64];
    size_t repl_len;
} rule;

struct gw_rules {
    int n;
    rule r[GW_MAX_RULES];
    int pii_on; /* GW_ON_* bits, 0 = off */
};

gw_rules *gw_rules_new(const gw_config *c, char *err, size_t errlen) {
    gw_rules *rs = callocCheck(1, sizeof(gw_rules));
    if (c->pii == GW_PII_MASK) {
#ifdef MT_HAVE_PII
        rs->pii_on = c->pii_on;
#else
        snprintf(err, errlen, "pii = mask: the PII guard needs safety/pii (safety/pii.c is not in "
                              "this build); set pii = off");
        free(rs);
        return NULL;
#endif
    }
    for (int i = 0; i < c->n_rules; i++) {
        const gw_rule_cfg *rc = &c->rules[i];
        rule *r = &rs->r[rs->n];
        int ecode;
        PCRE2_SIZE eoff;
        uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (rc->caseless ? PCRE2_CASELESS : 0);
        r->re = pcre2_compile((PCRE2_SPTR)rc->pattern, PCRE2_ZERO_TERMINATED, opts, &ecode, &eoff,
                              NULL);
        if (!r->re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ecode, msg, sizeof(msg));
            snprintf(err, errlen, "rule %s: bad pattern at offset %zu: %s", rc->name,
                     (size_t)eoff, (char *)msg);
            gw_rules_free(rs);
            return NULL;
        }
        uint32_t minlen = 0;
        pcre2_pattern_info(r->re, PCRE2_INFO_MINLENGTH, &minlen);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->re, NULL);
        int empty = pcre2_match(r->re, (PCRE2_SPTR) "", 0, 0, 0, md, NULL) >= 0;
        pcre2_match_data_free(md);
        if (empty) {
            snprintf(err, errlen, "rule %s: the pattern matches the empty string", rc->name);
            pcre2_code_free(r->re);
            gw_rules_free(rs);
            return NULL;
        }
        if (minlen > (uint32_t)rc->window) {
            snprintf(err, errlen, "rule %s: window %d is shorter than the shortest match (%u bytes)",
                     rc->name, rc->window, minlen);
            pcre2_code_free(r->re);
            gw_rules_free(rs);
            return NULL;
        }
        pcre2_jit_compile(r->re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if absent */
        snprintf(r->name, sizeof(r->name), "%s", rc->name);
        r->action = rc->action;
        r->on = rc->on;
        r->window = (size_t)rc->window;
        snprintf(r->repl, sizeof(r->repl), "%s", rc->replacement);
        r->repl_len = strlen(r->repl);
        rs->n++;
    }
    return rs;
}

void gw_rules_free(gw_rules *rs) {
    if (!rs) return;
    for (int i = 0; i < rs->n; i++) pcre2_code_free(rs->r[i].re);
    free(rs);
}

int gw_rules_active(const gw_rules *rs, int on) {
    if (!rs) return 0;
    if (rs->pii_on & on) return 1;
    for (int i = 0; i < rs->n; i++)
        if (rs->r[i].on & on) return 1;
    return 0;
}

size_t gw_rules_window(const gw_rules *rs, int on) {
    size_t w = 0;
    if (!rs) return 0;
    if ((rs->pii_on & on) && w < PII_WINDOW) w = PII_WINDOW;
    for (int i = 0; i < rs->n; i++)
        if ((rs->r[i].on & on) && rs->r[i].window > w) w = rs->r[i].window;
    return w;
}

/* ---- matching ----------------------------------------------------------------------------------- */

/* First match of r in s[0..n) starting at or after `from`: 1 with [*ms, *me), else 0. */
static int match_at(const rule *r, const char *s, size_t n, size_t from, size_t *ms, size_t *me) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->re, NULL);
    int rc = pcre2_match(r->re, (PCRE2_SPTR)s, n, from, 0, md, NULL);
    if (rc >= 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        *ms = ov[0];
        *me = ov[1];
    }
    pcre2_match_data_free(md);
    return rc >= 0 && *me > *ms;
}

/* Earliest block-rule match starting at or after from: 1 with *at and *name. */
static int first_block(const gw_rules *rs, int on, const char *s, size_t n, size_t from,
                       size_t *at, const char **name) {
    int found = 0;
    for (int i = 0; i < rs->n; i++) {
        const rule *r = &rs->r[i];
        size_t ms, me;
        if (r->action != GW_ACT_BLOCK || !(r->on & on)) continue;
        if (match_at(r, s, n, from, &ms, &me) && (!found || ms < *at)) {
            found = 1;
            *at = ms;
            *name = r->name;
        }
    }
    return found;
}

/* A redaction: bytes [s, e) become repl. */
typedef struct {
    size_t s, e;
    const char *repl;
    size_t repl_len;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static void spans_add(spans *sp, size_t s, size_t e, const char *repl, size_t repl_len) {
    if (sp->n == sp->cap) {
        sp->cap = sp->cap ? 2 * sp->cap : 16;
        sp->v = realloc(sp->v, sp->cap * sizeof(span));
        mtCheck(sp->v != NULL, "out of memory collecting redactions");
    }
    sp->v[sp->n++] = (span){s, e, repl, repl_len};
}

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    return x->e > y->e ? -1 : x->e < y->e; /* longer first */
}

/* Every redaction (redact rules and PII) in s[0..n) starting at or after from, sorted, with
 * overlaps removed (the earlier, then longer, wins). */
static void collect_redactions(const gw_rules *rs, int on, const char *s, size_t n, size_t from,
                               spans *sp) {
    for (int i = 0; i < rs->n; i++) {
        const rule *r = &rs->r[i];
        if (r->action != GW_ACT_REDACT || !(r->on & on)) continue;
        size_t pos = from, ms, me;
        while (pos < n && match_at(r, s, n, pos, &ms, &me)) {
            spans_add(sp, ms, me, r->repl, r->repl_len);
            pos = me;
        }
    }
#ifdef MT_HAVE_PII
    if (rs->pii_on & on) {
        pii_span ps[64];
        size_t total = pii_find(s, n, PII_ALL, ps, 64);
        if (total > 64) { /* rare: look again with room for all */
            pii_span *big = mallocCheck(total * sizeof(pii_span));
            pii_find(s, n, PII_ALL, big, total);
            for (size_t i = 0; i < total; i++)
                if (big[i].start >= from) {
                    const char *ph = pii_type_placeholder(big[i].type);
                    spans_add(sp, big[i].start, big[i].end, ph, strlen(ph));
                }
            free(big);
        } else {
            for (size_t i = 0; i < total; i++)
                if (ps[i].start >= from) {
                    const char *ph = pii_type_placeholder(ps[i].type);
                    spans_add(sp, ps[i].start, ps[i].end, ph, strlen(ph));
                }
        }
    }
#endif
    if (sp->n > 1) qsort(sp->v, sp->n, sizeof(span), span_cmp);
    size_t k = 0;
    for (size_t i = 0; i < sp->n; i++)
        if (k == 0 || sp->v[i].s >= sp->v[k - 1].e) sp->v[k++] = sp->v[i];
    sp->n = k;
}

/* Append s[from..limit) to out with the redactions that lie wholly inside it; returns the new
 * limit (moved back to the start of a redaction that crosses it). */
static size_t emit_redacted(const spans *sp, const char *s, size_t from, size_t limit,
                            api_buf *out) {
    for (size_t i = 0; i < sp->n; i++)
        if (sp->v[i].s < limit && sp->v[i].e > limit) {
            limit = sp->v[i].s;
            break;
        }
    size_t pos = from;
    for (size_t i = 0; i < sp->n && sp->v[i].e <= limit; i++) {
        api_buf_put(out, s + pos, sp->v[i].s - pos);
        api_buf_put(out, sp->v[i].repl, sp->v[i].repl_len);
        pos = sp->v[i].e;
    }
    if (limit > pos) api_buf_put(out, s + pos, limit - pos);
    return limit;
}

int gw_rules_apply(const gw_rules *rs, int on, const char *text, size_t n, api_buf *out,
                   const char **rule_name, size_t *block_at) {
    *rule_name = NULL;
    *block_at = 0;
    size_t at;
    const char *name;
    if (rs && first_block(rs, on, text, n, 0, &at, &name)) {
        *rule_name = name;
        *block_at = at;
        return 1;
    }
    spans sp = {0};
    if (rs) collect_redactions(rs, on, text, n, 0, &sp);
    emit_redacted(&sp, text, 0, n, out);
    if (!out->p) api_buf_put(out, "", 0);
    free(sp.v);
    return 0;
}

/* ---- the streaming filter -------------------------------------------------------------------------- */

void gw_filter_init(gw_filter *f, const gw_rules *r) {
    memset(f, 0, sizeof(*f));
    f->r = r;
    f->window = gw_rules_window(r, GW_ON_COMPLETIONS);
}

int gw_filter_push(gw_filter *f, const char *text, size_t n, int final, api_buf *out) {
    if (f->blocked) return 1;
    if (!gw_rules_active(f->r, GW_ON_COMPLETIONS)) {
        api_buf_put(out, text, n);
        return 0;
    }
    api_buf_put(&f->pend, text, n);
    /* subject = context (released) + pending */
    api_buf s = {0};
    api_buf_put(&s, f->ctx.p ? f->ctx.p : "", f->ctx.len);
    api_buf_put(&s, f->pend.p, f->pend.len);
    size_t from = f->ctx.len, len = s.len;
    size_t hold = f->window > 0 ? f->window - 1 : 0;
    size_t limit = final ? len : (len > from + hold ? len - hold : from);
    size_t at;
    const char *name;
    if (first_block(f->r, GW_ON_COMPLETIONS, s.p, len, from, &at, &name)) {
        spans sp = {0};
        collect_redactions(f->r, GW_ON_COMPLETIONS, s.p, at, from, &sp);
        emit_redacted(&sp, s.p, from, at, out); /* what came before the match may go */
        free(sp.v);
        f->blocked = 1;
        f->rule = name;
        api_buf_free(&s);
        return 1;
    }
    if (!final) /* never cut a UTF-8 character in two: the event JSON needs whole ones */
        limit -= api_utf8_incomplete_tail((const uint8_t *)s.p + from, limit - from);
    spans sp = {0};
    collect_redactions(f->r, GW_ON_COMPLETIONS, s.p, len, from, &sp);
    limit = emit_redacted(&sp, s.p, from, limit, out);
    free(sp.v);
    /* context: the last `window` bytes of everything released (original text) */
    size_t keep = f->window, end = limit;
    size_t start = end > keep ? end - keep : 0;
    api_buf ctx = {0};
    api_buf_put(&ctx, s.p + start, end - start);
    api_buf_free(&f->ctx);
    f->ctx = ctx;
    api_buf pend = {0};
    api_buf_put(&pend, s.p + limit, len - limit);
    api_buf_free(&f->pend);
    f->pend = pend;
    api_buf_free(&s);
    return 0;
}

void gw_filter_free(gw_filter *f) {
    api_buf_free(&f->pend);
    api_buf_free(&f->ctx);
}

/* ---- prompts in a request body ---------------------------------------------------------------------- */

/* Guard one JSON string item in place. 1 = blocked. */
static int guard_string(const gw_rules *rs, cJSON *item, int *changed, const char **rule) {
    if (!cJSON_IsString(item) || !item->valuestring) return 0;
    const char *t = item->valuestring;
    size_t at;
    api_buf out = {0};
    if (gw_rules_apply(rs, GW_ON_PROMPTS, t, strlen(t), &out, rule, &at)) {
        api_buf_free(&out);
        return 1;
    }
    if (out.len != strlen(t) || memcmp(out.p, t, out.len)) {
        /* cJSON strings are NUL-terminated; a redaction never introduces a NUL */
        char *copy = cJSON_malloc(out.len + 1);
        mtCheck(copy != NULL, "out of memory redacting a prompt");
        memcpy(copy, out.p, out.len + 1);
        cJSON_free(item->valuestring);
        item->valuestring = copy;
        *changed = 1;
    }
    api_buf_free(&out);
    return 0;
}

int gw_guard_prompt(const gw_rules *rs, cJSON *req, int chat, int *changed, const char **rule) {
    *changed = 0;
    *rule = NULL;
    if (!gw_rules_active(rs, GW_ON_PROMPTS)) return 0;
    if (!chat) {
        cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
        if (cJSON_IsString(p)) return guard_string(rs, p, changed, rule);
        cJSON *it;
        cJSON_ArrayForEach(it, p) /* an array of strings; token-id arrays are not text */
            if (guard_string(rs, it, changed, rule)) return 1;
        return 0;
    }
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(req, "messages"), *m;
    cJSON_ArrayForEach(m, msgs) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsString(content)) {
            if (guard_string(rs, content, changed, rule)) return 1;
        } else if (cJSON_IsArray(content)) { /* [{"type":"text","text":"..."}] */
            cJSON *part;
            cJSON_ArrayForEach(part, content)
                if (guard_string(rs, cJSON_GetObjectItemCaseSensitive(part, "text"), changed, rule))
                    return 1;
        }
    }
    return 0;
}
