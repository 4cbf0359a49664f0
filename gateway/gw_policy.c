/*
 * gateway/gw_policy.c — the gateway's policies as small pure state machines: upstream health
 * (passive outlier ejection, half-open probe, active checks), what counts as a failure, retry
 * backoff, Retry-After and the retry budget, and the reading of upstream responses and
 * server-sent events.
 *
 * Why it is shaped so: each policy is a function of (state, event, thresholds from gw_policy,
 * time) with no sockets, threads or clocks of its own, so tests/test_gw_proxy.c walks every
 * transition with a fake clock and the network code (gw_route.c) only reports events. The
 * thresholds all come from the one table in gw_config.c.
 */
#include "gateway/gw_proxy.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- health ---------------------------------------------------------------------------------------- */

void gw_health_init(gw_health *h, double now) {
    memset(h, 0, sizeof(*h));
    h->healthy_since = now;
}

int gw_health_state(const gw_health *h, double now) {
    if (h->active_down) return GW_UP_EJECTED;
    if (!h->ejected) return GW_UP_HEALTHY;
    return now < h->eject_until ? GW_UP_EJECTED : GW_UP_PROBING;
}

int gw_health_acquire(gw_health *h, double now, int *probe) {
    *probe = 0;
    switch (gw_health_state(h, now)) {
    case GW_UP_HEALTHY: return 1;
    case GW_UP_PROBING:
        if (h->probe_in_flight) return 0; /* one probe at a time */
        h->probe_in_flight = 1;
        *probe = 1;
        return 1;
    default: return 0;
    }
}

static void eject(gw_health *h, const gw_policy *p, double now) {
    h->ejected = 1;
    h->times_ejected++;
    double t = p->ejection_base_s * h->times_ejected;
    if (t > p->ejection_max_s) t = p->ejection_max_s;
    h->ejected_at = now;
    h->eject_until = now + t;
    h->ejections++;
}

int gw_health_result(gw_health *h, const gw_policy *p, int failure, int was_probe, double now) {
    if (was_probe) {
        h->probe_in_flight = 0;
        if (failure) {
            eject(h, p, now); /* the probe failed: a longer rest */
            return 1;
        }
        h->ejected = 0; /* the probe succeeded: the circuit closes */
        h->consecutive = 0;
        h->healthy_since = now;
        return 0;
    }
    if (h->ejected) return 0; /* a request that started before the ejection: already counted */
    if (!failure) {
        h->consecutive = 0;
        return 0;
    }
    if (++h->consecutive >= p->consecutive_failures) {
        h->consecutive = 0;
        eject(h, p, now);
        return 1;
    }
    return 0;
}

void gw_health_active(gw_health *h, const gw_policy *p, int ok, double now) {
    if (!ok && !h->active_down) h->down_since = now;
    h->active_down = !ok;
    if (!ok || h->ejected) {
        h->healthy_since = now;
        return;
    }
    /* Envoy's multiplier decay: one step for every base period of health */
    if (h->times_ejected > 0 && now - h->healthy_since >= p->ejection_base_s) {
        h->times_ejected--;
        h->healthy_since = now;
    }
}

double gw_health_wait(const gw_health *h, double now) {
    if (!h->ejected || now >= h->eject_until) return 0;
    return h->eject_until - now;
}

double gw_health_out_since(const gw_health *h, double now) {
    double t = now;
    if (h->ejected && h->ejected_at < t) t = h->ejected_at;
    if (h->active_down && h->down_since < t) t = h->down_since;
    return t;
}

/* ---- outcomes ---------------------------------------------------------------------------------------- */

static const char *const OUTCOME_NAMES[GW_OUT_COUNT] = {
    "ok", "client_error", "connect", "transport", "timeout", "first_token_timeout", "5xx", "429",
    "bad_body", "empty"};

const char *gw_outcome_name(gw_outcome o) {
    return (unsigned)o < GW_OUT_COUNT ? OUTCOME_NAMES[o] : "unknown";
}

int gw_outcome_is_failure(gw_outcome o) { return o != GW_OUT_OK && o != GW_OUT_CLIENT_ERROR; }

gw_outcome gw_outcome_of_status(int status) {
    if (status >= 200 && status < 300) return GW_OUT_OK;
    if (status == 429) return GW_OUT_429;
    if (status == 408) return GW_OUT_TIMEOUT; /* the upstream timed the request out */
    if (status >= 500) return GW_OUT_5XX;
    if (status >= 400) return GW_OUT_CLIENT_ERROR;
    return GW_OUT_TRANSPORT; /* 1xx/3xx as a final answer: not something a model server sends */
}

/* ---- retries ---------------------------------------------------------------------------------------- */

double gw_backoff_s(const gw_policy *p, int n, double u01) {
    if (n < 0) n = 0;
    if (n > 30) n = 30;
    double cap = p->backoff_base_s * ldexp(1.0, n);
    if (cap > p->backoff_max_s) cap = p->backoff_max_s;
    if (u01 < 0) u01 = 0;
    if (u01 >= 1) u01 = 0.999999;
    return cap * u01;
}

double gw_retry_after_s(const char *value, double now_unix) {
    if (!value) return -1;
    while (*value == ' ' || *value == '\t') value++;
    if (!*value) return -1;
    if (*value >= '0' && *value <= '9') {
        char *end;
        double s = strtod(value, &end);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (*end || !isfinite(s) || s < 0) return -1;
        return s;
    }
    time_t t = curl_getdate(value, NULL); /* IMF-fixdate and the obsolete forms of RFC 9110 */
    if (t == (time_t)-1) return -1;
    double d = (double)t - now_unix;
    return d > 0 ? d : 0;
}

int gw_budget_try_retry(gw_budget *b, const gw_policy *p) {
    double allowed = p->retry_budget_ratio * b->in_flight;
    if (allowed < p->retry_budget_min) allowed = p->retry_budget_min;
    if (b->retrying + 1 > allowed) return 0;
    b->retrying++;
    return 1;
}

void gw_budget_end_retry(gw_budget *b) {
    if (b->retrying > 0) b->retrying--;
}

/* ---- responses --------------------------------------------------------------------------------------- */

static const char *choice_text(const cJSON *choice, int chat, int delta) {
    const cJSON *t;
    if (chat) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(choice, delta ? "delta" : "message");
        t = cJSON_GetObjectItemCaseSensitive(m, "content");
    } else {
        t = cJSON_GetObjectItemCaseSensitive(choice, "text");
    }
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static void read_usage(const cJSON *root, long *pt, long *ct) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    if (cJSON_IsNumber(p)) *pt = (long)p->valuedouble;
    if (cJSON_IsNumber(c)) *ct = (long)c->valuedouble;
}

gw_outcome gw_check_response(const char *body, size_t n, int chat, long *prompt_tokens,
                             long *completion_tokens) {
    cJSON *root = cJSON_ParseWithLength(body, n);
    if (!root) return GW_OUT_BAD_BODY;
    gw_outcome o = GW_OUT_OK;
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(choices)) {
        o = GW_OUT_BAD_BODY;
    } else if (cJSON_GetArraySize(choices) == 0) {
        o = GW_OUT_EMPTY;
    } else {
        const cJSON *c0 = cJSON_GetArrayItem(choices, 0);
        const char *text = choice_text(c0, chat, 0);
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
        int finished = cJSON_IsString(fr) && fr->valuestring[0];
        if (!cJSON_IsObject(c0)) o = GW_OUT_BAD_BODY;
        else if ((!text || !text[0]) && !finished) o = GW_OUT_EMPTY;
    }
    if (o == GW_OUT_OK) read_usage(root, prompt_tokens, completion_tokens);
    cJSON_Delete(root);
    return o;
}

/* ---- server-sent events ------------------------------------------------------------------------------ */

void gw_sse_feed(gw_sse *s, const void *data, size_t n) {
    if (s->off > 0 && s->off == s->in.len) { /* all consumed: start over */
        s->in.len = 0;
        s->off = 0;
    } else if (s->off > 65536 && s->off * 2 > s->in.len) { /* compact */
        memmove(s->in.p, s->in.p + s->off, s->in.len - s->off);
        s->in.len -= s->off;
        s->off = 0;
        s->in.p[s->in.len] = 0;
    }
    api_buf_put(&s->in, data, n);
}

/* End of the event starting at p[0..n): the index just past its blank line, or 0 if it is not
 * complete yet. Lines end with \r\n, \n or \r; a \r at the very end waits for a possible \n. */
static size_t event_end(const char *p, size_t n) {
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < n && p[j] != '\n' && p[j] != '\r') j++;
        if (j == n) return 0;
        size_t next = j + 1;
        if (p[j] == '\r') {
            if (j + 1 == n) return 0;
            if (p[j + 1] == '\n') next = j + 2;
        }
        if (j == i) return next; /* an empty line ends the event (an empty one is ignored later) */
        i = next;
    }
}

int gw_sse_next(gw_sse *s, api_buf *raw, api_buf *data) {
    const char *p = s->in.p ? s->in.p + s->off : "";
    size_t n = s->in.len - s->off;
    size_t end = event_end(p, n);
    if (end == 0) return 0;
    api_buf_put(raw, p, end);
    data->len = 0;
    if (data->p) data->p[0] = 0;
    int lines = 0;
    size_t i = 0;
    while (i < end) {
        size_t j = i;
        while (j < end && p[j] != '\n' && p[j] != '\r') j++;
        if (j - i >= 5 && !memcmp(p + i, "data:", 5)) {
            size_t v = i + 5;
            if (v < j && p[v] == ' ') v++;
            if (lines++) api_buf_put(data, "\n", 1);
            api_buf_put(data, p + v, j - v);
        }
        if (j < end && p[j] == '\r' && j + 1 < end && p[j + 1] == '\n') j++;
        i = j + 1;
    }
    if (!data->p) api_buf_put(data, "", 0);
    s->off += end;
    return 1;
}

void gw_sse_free(gw_sse *s) {
    api_buf_free(&s->in);
    s->off = 0;
}

int gw_event_parse(const char *data, size_t n, int chat, gw_event_info *ev, char **text,
                   size_t *text_len) {
    memset(ev, 0, sizeof(*ev));
    ev->prompt_tokens = ev->completion_tokens = -1;
    *text = NULL;
    *text_len = 0;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        ev->done = 1;
        return 0;
    }
    cJSON *root = cJSON_ParseWithLength(data, n);
    if (!root) return -1;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return -1;
    }
    ev->is_json = 1;
    if (cJSON_GetObjectItemCaseSensitive(root, "error")) ev->is_error = 1;
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    read_usage(root, &ev->prompt_tokens, &ev->completion_tokens);
    if (cJSON_IsArray(choices) && cJSON_GetArraySize(choices) > 0) {
        const cJSON *c0 = cJSON_GetArrayItem(choices, 0);
        ev->has_choice = 1;
        const char *t = choice_text(c0, chat, 1);
        if (t) {
            *text_len = strlen(t);
            *text = strdup(t);
            mtCheck(*text != NULL, "out of memory reading a stream event");
        }
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
        if (cJSON_IsString(fr)) snprintf(ev->finish, sizeof(ev->finish), "%s", fr->valuestring);
    } else if (cJSON_IsArray(choices) && ev->completion_tokens >= 0) {
        ev->usage_only = 1;
    }
    cJSON_Delete(root);
    return 0;
}
