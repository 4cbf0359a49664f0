/*
 * cmd/signals.c — the stop signals of the long-running subcommands (serve, gateway, dashboard).
 *
 * Each blocks SIGINT and SIGTERM before it starts a thread, so every thread inherits the mask and
 * only the main thread takes them, with sigwait(); it then stops its server cleanly (threads
 * joined, memory freed), so AddressSanitizer's leak check at exit sees a clean process. SIGPIPE is
 * ignored: a peer that closes its socket must not end the process (libmicrohttpd, libcurl and
 * hiredis all write to sockets).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "cmd/cmd.h"

void cmd_block_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int cmd_wait_signal(const sigset_t *set, const char *who) {
    int sig = 0;
    sigwait(set, &sig);
    fprintf(stderr, "minitrain: %s: %s received, stopping\n", who,
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    return sig;
}
