/*
 * serve/listen.c — the HTTP plumbing serve and the gateway share (serve/api.h): resolve, bind and
 * start libmicrohttpd; answering a request (api_response, api_queue); the Prometheus text
 * exposition writers; the monotonic clock.
 *
 * MHD_USE_THREAD_PER_CONNECTION: a handler may block (waiting for a slot, or for an upstream)
 * without stalling other clients, and MHD still enforces the idle timeout. MHD's own log lines go
 * to stderr with the subcommand's prefix, one line each; the "Application reported internal
 * error" line is dropped, because our handlers return MHD_NO on purpose when the client left
 * mid-request (the access log already says 499).
 */
#include "serve/api.h"

#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const char *who = cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    if (strstr(msg, "Application reported internal error")) return;
    fprintf(stderr, "minitrain: %s: libmicrohttpd: %s\n", who, msg);
}

struct MHD_Daemon *api_listen(const api_listen_opts *o, int *bound_port, char *err, size_t errlen) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof(port), "%d", o->port);
    int rc = getaddrinfo(o->host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", o->host, gai_strerror(rc));
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d;
    if (o->backlog)
        d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, o->on_request, o->cls,
                             MHD_OPTION_EXTERNAL_LOGGER, mhd_log, (void *)o->who, /* first */
                             MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                             MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
                             MHD_OPTION_NOTIFY_COMPLETED, o->on_completed, o->cls,
                             MHD_OPTION_CONNECTION_LIMIT, o->conn_limit,
                             MHD_OPTION_LISTEN_BACKLOG_SIZE, o->backlog, MHD_OPTION_END);
    else
        d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, o->on_request, o->cls,
                             MHD_OPTION_EXTERNAL_LOGGER, mhd_log, (void *)o->who, /* first */
                             MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                             MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
                             MHD_OPTION_NOTIFY_COMPLETED, o->on_completed, o->cls,
                             MHD_OPTION_CONNECTION_LIMIT, o->conn_limit, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        snprintf(err, errlen, "cannot listen on %s:%d (port in use, or no permission?)", o->host,
                 o->port);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = di ? di->port : o->port;
    return d;
}

/* ---- Prometheus text exposition format 0.0.4 --------------------------------------------------- */

const double api_latency_bounds[API_LAT_NBUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                   0.5,   1.0,  2.5,   5.0,  10.0, 30.0};

void api_prom_family(api_buf *b, const char *name, const char *type, const char *help) {
    api_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void api_prom_counter(api_buf *b, const char *name, const char *help, uint64_t v) {
    api_prom_family(b, name, "counter", help);
    api_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void api_prom_gauge(api_buf *b, const char *name, const char *help, long long v) {
    api_prom_family(b, name, "gauge", help);
    api_buf_printf(b, "%s %lld\n", name, v);
}

void api_prom_histogram(api_buf *b, const char *name, const char *labels, const uint64_t *bucket,
                       double sum, uint64_t count) {
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    for (int i = 0; i < API_LAT_NBUCKETS; i++) {
        cum += bucket[i];
        api_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
                      api_latency_bounds[i], (unsigned long long)cum);
    }
    cum += bucket[API_LAT_NBUCKETS];
    api_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                  (unsigned long long)cum);
    if (labels[0]) {
        api_buf_printf(b, "%s_sum{%s} %.9g\n", name, labels, sum);
        api_buf_printf(b, "%s_count{%s} %llu\n", name, labels, (unsigned long long)count);
    } else {
        api_buf_printf(b, "%s_sum %.9g\n", name, sum);
        api_buf_printf(b, "%s_count %llu\n", name, (unsigned long long)count);
    }
}

double api_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- answers ---------------------------------------------------------------------------------- */

struct MHD_Response *api_response(api_buf *body, const char *ctype) {
    struct MHD_Response *r;
    if (body->len == 0) {
        api_buf_free(body);
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(body->len, body->p, MHD_RESPMEM_MUST_FREE);
        if (r == NULL) api_buf_free(body);
        memset(body, 0, sizeof(*body)); /* MHD frees it */
    }
    if (r != NULL) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return r;
}

enum MHD_Result api_queue(struct MHD_Connection *c, int status, struct MHD_Response *r,
                          int *status_out) {
    if (r == NULL) return MHD_NO;
    enum MHD_Result q = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    if (q == MHD_YES && status_out) *status_out = status;
    return q;
}
