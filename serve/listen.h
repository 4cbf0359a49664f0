/*
 * serve/listen.h — the one way both HTTP servers of the gateway module open their socket.
 *
 * `minitrain serve` (server.c) and `minitrain gateway` (gw_http.c) both run libmicrohttpd with one
 * thread per connection, on an address resolved with getaddrinfo (so --host may be IPv4 or IPv6,
 * and --port 0 lets the kernel choose), with MHD's log lines prefixed by the subcommand's name.
 * Only the handlers, the idle timeout and the connection limit differ.
 */
#ifndef MT_SERVE_LISTEN_H
#define MT_SERVE_LISTEN_H

#include <microhttpd.h>
#include <stddef.h>

typedef struct {
    const char *host;       /* address to bind, e.g. "127.0.0.1" or "::1" */
    int port;               /* 0 = any free port (read the chosen one from *bound_port) */
    const char *who;        /* "serve" or "gateway": prefixes libmicrohttpd's log lines */
    unsigned timeout_s;     /* idle connection timeout (MHD_OPTION_CONNECTION_TIMEOUT) */
    unsigned conn_limit;    /* most connections at once (MHD_OPTION_CONNECTION_LIMIT) */
    unsigned backlog;       /* listen(2) backlog; 0 = MHD's default */
    MHD_AccessHandlerCallback on_request;
    MHD_RequestCompletedCallback on_completed;
    void *cls;              /* passed to both callbacks */
} api_listen_opts;

/* Start the daemon. Returns it, with the port actually bound in *bound_port, or NULL with one line
 * in err ("cannot resolve host ...", "cannot listen on H:P (port in use, or no permission?)"). */
struct MHD_Daemon *api_listen(const api_listen_opts *o, int *bound_port, char *err, size_t errlen);

#endif /* MT_SERVE_LISTEN_H */
