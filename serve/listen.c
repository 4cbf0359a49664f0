/*
 * serve/listen.c — resolve, bind and start libmicrohttpd for serve and gateway (listen.h).
 *
 * MHD_USE_THREAD_PER_CONNECTION: a handler may block (waiting for a slot, or for an upstream)
 * without stalling other clients, and MHD still enforces the idle timeout. MHD's own log lines go
 * to stderr with the subcommand's prefix, one line each; the "Application reported internal
 * error" line is dropped, because our handlers return MHD_NO on purpose when the client left
 * mid-request (the access log already says 499).
 */
#include "serve/listen.h"

#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

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
