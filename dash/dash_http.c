/*
 * dash/dash_http.c — the dashboard's HTTP server (dash/dash.h) on libmicrohttpd: routes, the
 * bearer token, entity tags, and the headers that keep a page on its own host.
 *
 * Routes (GET and HEAD only): /  the runs page (?q=, ?status=, ?sort=, ?desc=); /run?dir=D  a
 * run's page (D must be a directory the index found: nothing else on disk is reachable);
 * /compare?run=D&run=E...  the compare page; /favicon.ico  204. A page is answered 304 when the
 * request's If-None-Match equals the tag of the files it is drawn from (dash_etag), without
 * opening any database, which is what the pages' polling costs.
 *
 * The token: with --token T every request needs "Authorization: Bearer T" or the cookie
 * mt_dash_token=T; "?token=T" on any page sets that cookie (HttpOnly, SameSite=Strict) and
 * redirects to the page without it, so a browser can log in from a link. Both sides are hashed
 * with SHA-256 and compared with CRYPTO_memcmp: the time taken says nothing about the token, not
 * even its length (as gateway/gw_keys.c checks keys). Every page carries a Content-Security-Policy
 * that allows no source outside the page itself and its own host.
 */
#include "dash/dash_impl.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/check.h"

#define DASH_MAX_COMPARE 8
#define DASH_RESCAN_S 0.25 /* requests within this of the last scan reuse it */

struct dash_server {
    struct MHD_Daemon *d;
    dash_index ix;
    unsigned char token_sha[32];
    int has_token, poll_ms;
    dash_sections_fn sections;
};

static const char CSP[] = "default-src 'none'; script-src 'unsafe-inline'; style-src "
                          "'unsafe-inline'; img-src data:; connect-src 'self'; form-action "
                          "'self'; base-uri 'none'; frame-ancestors 'none'";

int dash_is_loopback(const char *host) {
    if (!host || !strcmp(host, "localhost") || !strcmp(host, "::1")) return host != NULL;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int token_ok(const dash_server *s, const char *given) {
    unsigned char h[32];
    SHA256((const unsigned char *)(given ? given : ""), given ? strlen(given) : 0, h);
    return CRYPTO_memcmp(h, s->token_sha, 32) == 0 && given != NULL;
}

/* The token a request carries: the bearer header, else the cookie. NULL = none. */
static const char *request_token(struct MHD_Connection *c) {
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (a && !strncmp(a, "Bearer ", 7)) return a + 7;
    return MHD_lookup_connection_value(c, MHD_COOKIE_KIND, "mt_dash_token");
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                              const char *etag, const char *extra_h, const char *extra_v) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body ? body : (void *)"", body ? MHD_RESPMEM_MUST_FREE
                                                                            : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    if (etag) MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    if (extra_h) MHD_add_response_header(r, extra_h, extra_v);
    enum MHD_Result q = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return q;
}

static enum MHD_Result message(struct MHD_Connection *c, unsigned status, const char *title,
                               const char *line) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mtCheck(f != NULL, "out of memory");
    dash_page_message(f, title, line);
    mtCheck(fclose(f) == 0, "out of memory");
    return answer(c, status, text, len, NULL, status == 401 ? MHD_HTTP_HEADER_WWW_AUTHENTICATE : NULL,
                  "Bearer realm=\"minitrain dashboard\"");
}

/* Rescan when the last scan is older than DASH_RESCAN_S. Called with the mutex held. */
static void fresh(dash_server *s) {
    if (s->ix.scan == 0 || now_s() - s->ix.scanned_at > DASH_RESCAN_S) dash_index_refresh(&s->ix);
}

typedef struct {
    const char *v[DASH_MAX_COMPARE];
    int n, more;
} run_args;

static enum MHD_Result collect_runs(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    (void)kind;
    run_args *a = cls;
    if (key && value && !strcmp(key, "run")) {
        if (a->n < DASH_MAX_COMPARE) a->v[a->n++] = value;
        else a->more = 1;
    }
    return MHD_YES;
}

/* The body of f (a memstream) as an answer, or 304 when the request already has tag. */
static enum MHD_Result page_or_304(struct MHD_Connection *c, const char *tag, char *text, size_t len) {
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm && tag && !strcmp(inm, tag)) {
        free(text);
        return answer(c, MHD_HTTP_NOT_MODIFIED, NULL, 0, tag, NULL, NULL);
    }
    return answer(c, MHD_HTTP_OK, text, len, tag, NULL, NULL);
}

static int not_modified(struct MHD_Connection *c, const char *tag) {
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    return inm && !strcmp(inm, tag);
}

static enum MHD_Result route_runs(dash_server *s, struct MHD_Connection *c) {
    const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "q");
    const char *st = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "status");
    const char *sort = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "sort");
    const char *desc = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "desc");
    char *text = NULL, salt[600], tag[40];
    size_t len = 0;
    snprintf(salt, sizeof(salt), "runs|%.150s|%.40s|%.20s|%.4s", q ? q : "", st ? st : "",
             sort ? sort : "", desc ? desc : "");
    pthread_mutex_lock(&s->ix.mu);
    fresh(s);
    dash_run **all = calloc(s->ix.n ? s->ix.n : 1, sizeof(dash_run *));
    for (size_t i = 0; i < s->ix.n; i++) all[i] = &s->ix.runs[i];
    dash_etag(all, (int)s->ix.n, salt, tag, sizeof(tag));
    free(all);
    if (not_modified(c, tag)) {
        pthread_mutex_unlock(&s->ix.mu);
        return answer(c, MHD_HTTP_NOT_MODIFIED, NULL, 0, tag, NULL, NULL);
    }
    FILE *f = open_memstream(&text, &len);
    mtCheck(f != NULL, "out of memory");
    dash_page_runs(f, &s->ix, q ? q : "", st ? st : "", sort, desc && !strcmp(desc, "1"), s->poll_ms);
    pthread_mutex_unlock(&s->ix.mu);
    mtCheck(fclose(f) == 0, "out of memory");
    return page_or_304(c, tag, text, len);
}

static enum MHD_Result route_run(dash_server *s, struct MHD_Connection *c) {
    const char *dir = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "dir");
    if (!dir) return message(c, 400, "bad request", "/run needs ?dir=RUN_DIR (a link of the runs page)");
    pthread_mutex_lock(&s->ix.mu);
    fresh(s);
    dash_run *r = dash_index_find(&s->ix, dir);
    char tag[40];
    dash_run copy = {0};
    if (r) {
        dash_etag(&r, 1, "run", tag, sizeof(tag));
        copy.dir = strdup(r->dir);
    }
    pthread_mutex_unlock(&s->ix.mu);
    if (!copy.dir)
        return message(c, 404, "no such run", "that directory is not (or no longer) a run under the "
                       "dashboard's --runs directories");
    if (not_modified(c, tag)) {
        free(copy.dir);
        return answer(c, MHD_HTTP_NOT_MODIFIED, NULL, 0, tag, NULL, NULL);
    }
    char *text = NULL, err[8600];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mtCheck(f != NULL, "out of memory");
    int rc = dash_page_run(f, &copy, s->sections, s->poll_ms, err, sizeof(err));
    mtCheck(fclose(f) == 0, "out of memory");
    free(copy.dir);
    if (rc != 0) {
        free(text);
        return message(c, 503, "run not readable now", err);
    }
    return page_or_304(c, tag, text, len);
}

static enum MHD_Result route_compare(dash_server *s, struct MHD_Connection *c) {
    run_args a = {0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_runs, &a);
    if (a.n < 2 || a.more)
        return message(c, 400, "compare needs 2 to 8 runs", "check two or more runs (at most 8) on "
                       "the runs page, then press compare");
    dash_run *v[DASH_MAX_COMPARE];
    dash_run copies[DASH_MAX_COMPARE];
    char tag[40];
    pthread_mutex_lock(&s->ix.mu);
    fresh(s);
    int missing = -1;
    for (int i = 0; i < a.n; i++) {
        dash_run *r = dash_index_find(&s->ix, a.v[i]);
        if (!r) {
            missing = i;
            break;
        }
        v[i] = r;
    }
    if (missing < 0) {
        dash_etag(v, a.n, "compare", tag, sizeof(tag));
        for (int i = 0; i < a.n; i++) {
            copies[i] = (dash_run){.dir = strdup(v[i]->dir)};
            v[i] = &copies[i];
        }
    }
    pthread_mutex_unlock(&s->ix.mu);
    if (missing >= 0) {
        char line[600];
        snprintf(line, sizeof(line), "%.500s is not (or no longer) a run under the dashboard's "
                 "--runs directories", a.v[missing]);
        return message(c, 404, "no such run", line);
    }
    if (not_modified(c, tag)) {
        for (int i = 0; i < a.n; i++) free(copies[i].dir);
        return answer(c, MHD_HTTP_NOT_MODIFIED, NULL, 0, tag, NULL, NULL);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mtCheck(f != NULL, "out of memory");
    dash_page_compare(f, v, a.n, s->poll_ms);
    mtCheck(fclose(f) == 0, "out of memory");
    for (int i = 0; i < a.n; i++) free(copies[i].dir);
    return page_or_304(c, tag, text, len);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **con_cls) {
    (void)version, (void)upload, (void)con_cls;
    dash_server *s = cls;
    if (*upload_len) { /* no request of ours has a body */
        *upload_len = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return message(c, 405, "method not allowed", "the dashboard is read-only: GET only");
    if (!strcmp(url, "/favicon.ico")) return answer(c, 204, NULL, 0, NULL, NULL, NULL);
    if (s->has_token) {
        const char *given = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
        if (given) {
            if (!token_ok(s, given)) return message(c, 401, "unauthorized", "wrong token");
            char cookie[600];
            snprintf(cookie, sizeof(cookie), "mt_dash_token=%.500s; Path=/; HttpOnly; "
                     "SameSite=Strict", given);
            struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"",
                                                                     MHD_RESPMEM_PERSISTENT);
            if (!r) return MHD_NO;
            MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
            MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, url);
            enum MHD_Result q = MHD_queue_response(c, MHD_HTTP_SEE_OTHER, r);
            MHD_destroy_response(r);
            return q;
        }
        if (!token_ok(s, request_token(c)))
            return message(c, 401, "unauthorized", "this dashboard needs its token: send "
                           "\"Authorization: Bearer TOKEN\", or open /?token=TOKEN once");
    }
    if (!strcmp(url, "/")) return route_runs(s, c);
    if (!strcmp(url, "/run")) return route_run(s, c);
    if (!strcmp(url, "/compare")) return route_compare(s, c);
    return message(c, 404, "not found", "pages: / (all runs), /run?dir=D, /compare?run=D&run=E");
}

dash_server *dash_start(const dash_opts *o, int *port, char *err, size_t errlen) {
    const char *bind = o->bind ? o->bind : "127.0.0.1";
    if (o->n_roots <= 0) {
        snprintf(err, errlen, "no --runs DIR given");
        return NULL;
    }
    for (int i = 0; i < o->n_roots; i++) {
        struct stat sb;
        if (stat(o->roots[i], &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            snprintf(err, errlen, "--runs %s: no such directory", o->roots[i]);
            return NULL;
        }
    }
    if (!dash_is_loopback(bind) && (!o->token || !*o->token)) {
        snprintf(err, errlen, "--bind %s is not a loopback address: give --token T too (run "
                 "configs can be sensitive; every request must then carry the token)", bind);
        return NULL;
    }
    if (o->port < 0 || o->port > 65535) {
        snprintf(err, errlen, "--port must be in [0, 65535]");
        return NULL;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    const char *host = !strcmp(bind, "localhost") ? "127.0.0.1" : bind;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)o->port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)o->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "--bind %s: not a numeric IPv4 or IPv6 address", bind);
        return NULL;
    }
    dash_server *s = callocCheck(1, sizeof(*s));
    dash_index_init(&s->ix, o->roots, o->n_roots);
    s->poll_ms = o->poll_ms > 0 ? o->poll_ms : 2000;
    s->sections = o->sections;
    if (o->token && *o->token) {
        s->has_token = 1;
        SHA256((const unsigned char *)o->token, strlen(o->token), s->token_sha);
    }
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                            MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, errlen, "cannot listen on %s:%d (port in use, or no permission?)", bind, o->port);
        dash_index_free(&s->ix);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : o->port;
    return s;
}

void dash_stop(dash_server *s) {
    if (!s) return;
    MHD_stop_daemon(s->d);
    dash_index_free(&s->ix);
    free(s);
}
