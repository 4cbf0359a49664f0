/*
 * gateway/cmd_gateway.c — `minitrain gateway`: configuration from a file and/or flags, and the
 * process lifecycle; `minitrain gateway keys ...` is the key manager (gw_keys_cli).
 *
 * The config file is read first wherever --config stands, then every other flag applies on top in
 * command-line order, so `--config gw.ini --port 0` runs the file's gateway on a free port. Any
 * [gateway] or [policy] key is also a flag (--consecutive-failures 3). SIGINT and SIGTERM are
 * blocked in every thread and taken by sigwait() in the main thread, which stops the gateway
 * cleanly (connections closed, threads joined, memory freed).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "gateway/gw_keys.h"
#include "gateway/gw_proxy.h"

static void usage(void) {
    printf("usage: minitrain gateway --config FILE [--KEY VALUE ...]\n"
           "       minitrain gateway --port P --upstream NAME=URL [--upstream ...] "
           "--route MODEL=A[,B...] [--keys-db FILE]\n"
           "       minitrain gateway keys add|ls|revoke --keys-db FILE ...   (see `gateway keys "
           "--help`)\n\n"
           "An AI gateway in front of model servers (`minitrain serve` or any OpenAI-compatible\n"
           "server): fallback, outlier ejection, retries with a budget, API keys with roles, rate\n"
           "limits, guards. Serves POST /v1/completions, POST /v1/chat/completions, GET "
           "/v1/models,\nGET /health, GET /metrics and /admin/keys.\n\n"
           "  --config FILE          INI file: [gateway] [policy] [upstream NAME] [model NAME] "
           "[rule NAME]\n"
           "  --host ADDR            bind address (default 127.0.0.1)\n"
           "  --port P               TCP port (default 8090; 0 = any free port, printed at "
           "start)\n"
           "  --upstream NAME=URL    a model server (repeatable)\n"
           "  --route MODEL=T,...    public model name -> targets in priority order; T is "
           "UPSTREAM\n"
           "                         or UPSTREAM/MODEL; A|B shares one level by weight "
           "(repeatable)\n"
           "  --keys-db FILE         API keys and roles (SQLite); without it the gateway is "
           "OPEN\n"
           "  --redis HOST:PORT      rate-limit buckets in Redis, shared by gateway replicas\n"
           "  --redis-fail M         closed (default: 503 while Redis is down) or open (admit)\n"
           "  --all-ejected M        longest (default: try the upstream out longest) or "
           "refuse (503)\n"
           "  --pii M                off (default) or mask (safety/pii placeholders)\n"
           "  --pii-on W             prompts, completions or both (default both)\n"
           "  --quiet                no access log\n\n"
           "policy (the one table of thresholds; also [policy] keys in the file):\n");
    for (const gw_policy_key *k = gw_policy_keys; k->name; k++) {
        char flag[64];
        size_t i = 0;
        for (; k->name[i] && i < sizeof(flag) - 1; i++)
            flag[i] = k->name[i] == '_' ? '-' : k->name[i];
        flag[i] = 0;
        printf("  --%-22s %s (default %g)\n", flag, k->help, k->def);
    }
    printf("\nexample:\n"
           "  minitrain gateway --port 8090 --upstream a=http://127.0.0.1:8081 \\\n"
           "      --upstream b=http://127.0.0.1:8082 --route shakespeare=a,b\n"
           "See docs/gateway.md.\n");
}

static void config_fail(const char *msg) {
    fprintf(stderr, "minitrain: error: %s\n", msg);
    fflush(stderr);
    exit(MT_EXIT_USAGE);
}

int gw_cmd_gateway(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "keys")) return gw_keys_cli(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return MT_EXIT_OK;
        }
    gw_config *cfg = callocCheck(1, sizeof(gw_config));
    gw_config_init(cfg);
    char err[1200];
    /* pass 1: the file */
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--config=", 9) || !strcmp(argv[i], "--config")) {
            const char *path = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[i + 1] : NULL);
            if (!path) config_fail("--config needs a FILE");
            if (gw_config_load(cfg, path, err, sizeof(err))) config_fail(err);
        }
    }
    /* pass 2: every other flag, in order */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2)) {
            snprintf(err, sizeof(err), "unexpected argument '%s' (see `minitrain gateway --help`)",
                     a);
            config_fail(err);
        }
        char name[96];
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        if (eq) {
            snprintf(name, sizeof(name), "%.*s", (int)(eq - a - 2), a + 2);
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", a + 2);
        }
        if (!strcmp(name, "quiet") && !val) {
            cfg->quiet = 1;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) {
                snprintf(err, sizeof(err), "--%s needs a value", name);
                config_fail(err);
            }
            val = argv[++i];
        }
        if (!strcmp(name, "config")) continue;
        int rc;
        if (!strcmp(name, "upstream")) rc = gw_config_add_upstream(cfg, val, err, sizeof(err));
        else if (!strcmp(name, "route")) rc = gw_config_add_route(cfg, val, err, sizeof(err));
        else rc = gw_config_set(cfg, name, val, err, sizeof(err));
        if (rc == 1) {
            snprintf(err, sizeof(err), "unknown option '--%s' (see `minitrain gateway --help`)",
                     name);
            config_fail(err);
        }
        if (rc) {
            char msg[1300];
            snprintf(msg, sizeof(msg), "--%s: %s", name, err);
            config_fail(msg);
        }
    }
    if (gw_config_validate(cfg, err, sizeof(err))) config_fail(err);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    gw_gateway *g = gw_gateway_start(cfg, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "minitrain: error: %s\n", err);
        free(cfg);
        return MT_EXIT_USAGE;
    }
    if (!cfg->keys_db[0])
        fprintf(stderr, "minitrain: gateway: OPEN: no keys database (--keys-db), so every client "
                        "may call every model and no rate limits apply\n");
    int v6 = strchr(cfg->host, ':') != NULL;
    printf("minitrain: gateway listening on http://%s%s%s:%d — %d upstream%s, %d model%s%s%s\n",
           v6 ? "[" : "", cfg->host, v6 ? "]" : "", gw_gateway_port(g), cfg->n_up,
           cfg->n_up == 1 ? "" : "s", cfg->n_routes, cfg->n_routes == 1 ? "" : "s",
           cfg->keys_db[0] ? ", keys " : ", open", cfg->keys_db[0] ? cfg->keys_db : "");
    for (int r = 0; r < cfg->n_routes; r++) {
        printf("  model %s ->", cfg->routes[r].name);
        for (int t = 0; t < cfg->routes[r].n_targets; t++) {
            const gw_target *tg = &cfg->routes[r].t[t];
            printf("%s %s%s%s", t == 0 ? "" : (tg->level == cfg->routes[r].t[t - 1].level ? " |" : ","),
                   tg->upstream_name, tg->model[0] ? "/" : "", tg->model);
        }
        printf("\n");
    }
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "minitrain: gateway: %s received, stopping\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM");
    gw_gateway_stop(g);
    free(cfg);
    return MT_EXIT_OK;
}
