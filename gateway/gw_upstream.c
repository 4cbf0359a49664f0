/*
 * gateway/gw_upstream.c — one HTTP attempt against an upstream, on libcurl.
 *
 * Why it is shaped so:
 *   - Each attempt is one easy handle inside its own multi handle, driven by the client's own
 *     connection thread (curl_multi_perform + curl_multi_poll). The thread reads from the
 *     upstream only when it is ready to write to the client, so a slow client leaves bytes in the
 *     upstream's socket and TCP pushes back on the model server (backpressure) instead of the
 *     gateway buffering without bound. Between polls the thread looks at the client's socket
 *     (POLLRDHUP): a client gone mid-request aborts the transfer, which closes the upstream
 *     connection, which is how the model server learns to stop generating.
 *   - (multi, easy) pairs are pooled: a pair keeps its connection cache, so consecutive requests
 *     reuse a kept-alive TCP connection to the upstream (no handshake per request), and no
 *     request pays for creating the multi handle's wake-up socket pair.
 *   - libcurl decides what HTTP is; nothing here parses status lines beyond the Retry-After
 *     header and the code libcurl reports.
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "gateway/gw_impl.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int gw_client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return 0;
    return (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
    gw_call *c = ud;
    size_t len = size * n;
    if (len >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (after 100 Continue, say) */
        c->retry_after[0] = 0;
        c->headers_done = 0;
        const char *sp = memchr(p, ' ', len);
        c->status = sp ? atoi(sp + 1) : 0;
    } else if (len >= 12 && !strncasecmp(p, "Retry-After:", 12)) {
        size_t v = 12;
        while (v < len && (p[v] == ' ' || p[v] == '\t')) v++;
        size_t e = len;
        while (e > v && (p[e - 1] == '\r' || p[e - 1] == '\n' || p[e - 1] == ' ')) e--;
        size_t k = e - v < sizeof(c->retry_after) - 1 ? e - v : sizeof(c->retry_after) - 1;
        memcpy(c->retry_after, p + v, k);
        c->retry_after[k] = 0;
    } else if (len <= 2 && (p[0] == '\r' || p[0] == '\n')) {
        if (c->status >= 200) c->headers_done = 1;
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
    gw_call *c = ud;
    size_t len = size * n;
    if (c->received + len > c->max_body) {
        c->too_big = 1;
        return 0; /* aborts the transfer (CURLE_WRITE_ERROR) */
    }
    c->received += len;
    if (c->stream && c->status == 200) gw_sse_feed(&c->sse, p, len);
    else api_buf_put(&c->body, p, len);
    return len;
}

gw_call *gw_call_get(gw_gateway *g) {
    pthread_mutex_lock(&g->pool_mu);
    gw_call *c = g->pool;
    if (c) g->pool = c->next;
    pthread_mutex_unlock(&g->pool_mu);
    if (!c) {
        c = callocCheck(1, sizeof(gw_call));
        c->multi = curl_multi_init();
        c->easy = curl_easy_init();
        mtCheck(c->multi && c->easy, "libcurl could not create a handle (out of memory?)");
    }
    c->next = NULL;
    return c;
}

int gw_call_start(gw_call *c, const gw_policy *p, const char *url, const char *api_key,
                  const char *req_id, const char *body, size_t n, int stream) {
    CURL *e = c->easy;
    curl_easy_reset(e);
    c->stream = stream;
    c->status = 0;
    c->headers_done = 0;
    c->retry_after[0] = 0;
    c->body.len = 0;
    if (c->body.p) c->body.p[0] = 0;
    gw_sse_free(&c->sse);
    c->max_body = (size_t)p->max_response;
    c->too_big = 0;
    c->received = 0;
    c->done = 0;
    c->connected = 0;
    c->result = CURLE_OK;
    c->errbuf[0] = 0;
    curl_slist_free_all(c->hdrs);
    c->hdrs = NULL;
    char h[400];
    c->hdrs = curl_slist_append(c->hdrs, "Content-Type: application/json");
    c->hdrs = curl_slist_append(c->hdrs, stream ? "Accept: text/event-stream"
                                                : "Accept: application/json");
    c->hdrs = curl_slist_append(c->hdrs, "Expect:"); /* no 100-continue round trip */
    snprintf(h, sizeof(h), "X-Request-Id: %s", req_id);
    c->hdrs = curl_slist_append(c->hdrs, h);
    if (api_key && *api_key) {
        snprintf(h, sizeof(h), "Authorization: Bearer %s", api_key);
        c->hdrs = curl_slist_append(c->hdrs, h);
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(p->connect_timeout_s * 1000));
    if (!stream) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(p->timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (curl_multi_add_handle(c->multi, e) != CURLM_OK) {
        c->done = 1;
        c->result = CURLE_FAILED_INIT;
        return -1;
    }
    c->running = 1;
    return 0;
}

/* Read the multi handle's messages: marks the call done with its result. */
static void collect(gw_call *c) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left)))
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == c->easy) {
            c->result = msg->data.result;
            c->done = 1;
            long code = 0;
            curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code);
            if (code > 0) c->status = (int)code;
            curl_off_t ct = 0;
            curl_easy_getinfo(c->easy, CURLINFO_CONNECT_TIME_T, &ct);
            c->connected = ct > 0 || code > 0;
        }
}

int gw_call_pump(gw_gateway *g, gw_call *c, double timeout_s, int client_fd) {
    double t_end = api_now() + (timeout_s > 0 ? timeout_s : 0);
    uint64_t before = c->received;
    int hdr_before = c->headers_done;
    for (;;) {
        int still = 0;
        curl_multi_perform(c->multi, &still);
        collect(c);
        if (c->done || c->received != before || c->headers_done != hdr_before) return 1;
        if (atomic_load(&g->stopping) || gw_client_gone(client_fd)) return -1;
        double left = t_end - api_now();
        if (left <= 0) return 0;
        int ms = (int)(left * 1000) + 1;
        if (ms > 50) ms = 50; /* look at the client's socket at least 20 times a second */
        curl_multi_poll(c->multi, NULL, 0, ms, NULL);
    }
}

void gw_call_put(gw_gateway *g, gw_call *c) {
    if (!c) return;
    if (c->running) {
        /* removing an unfinished transfer closes its connection: the upstream sees the cancel */
        curl_multi_remove_handle(c->multi, c->easy);
        c->running = 0;
    }
    curl_slist_free_all(c->hdrs);
    c->hdrs = NULL;
    if (c->body.cap > (1u << 20)) api_buf_free(&c->body); /* do not pool big buffers */
    gw_sse_free(&c->sse);
    pthread_mutex_lock(&g->pool_mu);
    c->next = g->pool;
    g->pool = c;
    pthread_mutex_unlock(&g->pool_mu);
}

gw_outcome gw_call_outcome(const gw_call *c) {
    if (c->too_big) return GW_OUT_BAD_BODY;
    switch (c->result) {
    case CURLE_OK: return gw_outcome_of_status(c->status);
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST: return GW_OUT_CONNECT;
    case CURLE_OPERATION_TIMEDOUT: return c->connected ? GW_OUT_TIMEOUT : GW_OUT_CONNECT;
    default: return GW_OUT_TRANSPORT;
    }
}

static size_t discard(char *p, size_t size, size_t n, void *ud) {
    (void)p, (void)ud;
    return size * n;
}

int gw_http_get_status(const char *url, double timeout_s) {
    CURL *e = curl_easy_init();
    if (!e) return 0;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    long code = 0;
    if (curl_easy_perform(e) == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(e);
    return (int)code;
}
