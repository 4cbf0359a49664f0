/*
 * cmd/gateway.c — `minitrain gateway`: configuration from a file and/or flags, and the process
 * lifecycle; `minitrain gateway keys ...` is the key manager (cmd/gateway_keys.c).
 *
 * The config file (--config) is read first, then every other option applies on top of it in
 * command-line order, so `--config gw.ini --port 0` runs the file's gateway on a free port. Any
 * [gateway] or [policy] key is also an option (--consecutive-failures 3: the policy table of
 * gateway/gw_config.c); --upstream and --route may repeat. SIGINT and SIGTERM are blocked in every
 * thread and taken by sigwait() in the main thread, which stops the gateway cleanly (connections
 * closed, threads joined, memory freed).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "gateway/gw_proxy.h"

static int known(const char *name) {
    return !strcmp(name, "upstream") || !strcmp(name, "route") || gw_config_has_key(name);
}

static void policy_help(FILE *out) {
    fprintf(out, "gateway options (also [gateway] keys of the file):\n"
                 "  --host ADDR               bind address (default 127.0.0.1)\n"
                 "  --port P                  TCP port (default 8090; 0 = any free port, printed)\n"
                 "  --upstream NAME=URL       a model server (repeatable)\n"
                 "  --route MODEL=T[,T...]    public model name -> targets in priority order; T is\n"
                 "                            UPSTREAM or UPSTREAM/MODEL; A|B shares one level by\n"
                 "                            weight (repeatable)\n"
                 "  --keys-db FILE            API keys and roles (SQLite); without it: OPEN\n"
                 "  --redis HOST:PORT         rate-limit buckets in Redis, shared by replicas\n"
                 "  --redis-fail M            open (default: local buckets while Redis is down)\n"
                 "                            or closed (503 for limited keys until it is back)\n"
                 "  --all-ejected M           longest (default: try the upstream out longest,\n"
                 "                            then 503 + Retry-After) or refuse (503 at once)\n"
                 "  --pii M                   off (default) or mask (safety/pii placeholders)\n"
                 "  --pii-on W                prompts, completions or both (default both)\n"
                 "  --lb M                    ordered (default), round_robin, least_busy,\n"
                 "                            ewma_latency or p2c (a [model] may set its own)\n"
                 "  --hedge-after W           off (default), MS or pNN: a second attempt when the\n"
                 "                            first has no first token by then\n"
                 "  --cache-bytes N           response cache for deterministic requests (0 = off)\n"
                 "  --cache-shared B          true: cached answers are shared across keys\n"
                 "  --cache-ttl-s S           > 0: the cache in Redis (--redis), entries expire\n\n"
                 "policy (the one table of thresholds; also [policy] keys of the file):\n");
    keytab_print_options(out, gw_policy_keys, NULL, 28);
}

static void print_routes(const gw_config *cfg) {
    for (int r = 0; r < cfg->n_routes; r++) {
        printf("  model %s ->", cfg->routes[r].name);
        for (int t = 0; t < cfg->routes[r].n_targets; t++) {
            const gw_target *tg = &cfg->routes[r].t[t];
            const char *sep = t == 0 ? "" : tg->level == cfg->routes[r].t[t - 1].level ? " |" : ",";
            printf("%s %s%s%s", sep, tg->upstream_name, tg->model[0] ? "/" : "", tg->model);
        }
        printf("\n");
    }
}

int cmd_gateway(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "keys")) return cmd_gateway_keys(argc - 1, argv + 1);
    const char *config_path = NULL;
    int quiet = 0;
    args_overrides ov = {0}; /* the [gateway]/[policy] keys, --upstream and --route, in order */
    const args_opt opts[] = {
        {"config", KEYTAB_STRING, &config_path, 0, 0, "FILE",
         "INI file: [gateway] [policy] [upstream NAME] [model NAME] [rule NAME]", ""},
        {"quiet", KEYTAB_FLAG, &quiet, 0, 0, NULL, "no access log", ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "gateway",
        .synopsis = "usage: minitrain gateway --config FILE [--KEY VALUE ...]\n"
                    "       minitrain gateway --port P --upstream NAME=URL [--upstream ...] "
                    "--route MODEL=A[,B...] [--keys-db FILE]\n"
                    "       minitrain gateway keys add|ls|revoke|disable|enable|audit|budget|usage --keys-db "
                    "FILE ...",
        .about = "An AI gateway in front of model servers (`minitrain serve` or any "
                 "OpenAI-compatible\nserver): fallback, outlier ejection with half-open probes, "
                 "retries under a budget,\nAPI keys with roles, rate limits, guards. Serves POST "
                 "/v1/completions, POST\n/v1/chat/completions, POST /v1/embeddings, GET "
                 "/v1/models, GET /health, GET\n/metrics and /admin/. Spend budgets: `gateway "
                 "keys budget|usage`.",
        .opts = opts,
        .epilog = "example:\n"
                  "  minitrain gateway --port 8090 --upstream a=http://127.0.0.1:8081 \\\n"
                  "      --upstream b=http://127.0.0.1:8082 --route shakespeare=a,b\n"
                  "See docs/gateway.md.",
        .known = known,
        .other = args_override_add,
        .ctx = &ov,
        .help_tail = policy_help,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) {
        args_overrides_free(&ov); /* those taken before the refused word */
        return prc;
    }
    if (ov.overflow)
        mt_fail("more than %d gateway options on the command line", ARGS_MAX_OVERRIDES);
    gw_config *cfg = callocCheck(1, sizeof(gw_config));
    gw_config_init(cfg);
    char err[1200];
    if (config_path && gw_config_load(cfg, config_path, err, sizeof(err))) mt_fail("%s", err);
    for (int i = 0; i < ov.n; i++) /* a name given twice: the later silently replaced the first */
        for (int j = 0; j < i; j++) {
            const char *k = ov.key[i], *v = ov.val[i], *w = ov.val[j], *eq = strchr(v, '=');
            if ((strcmp(k, "upstream") && strcmp(k, "route")) || strcmp(k, ov.key[j]) || !eq)
                continue;
            size_t n = (size_t)(eq - v);
            if (strncmp(v, w, n) == 0 && w[n] == '=')
                mt_fail("--%s %.*s is given twice ('%s' and '%s'); give each %s once", k, (int)n,
                        v, w, v, strcmp(k, "route") ? "upstream" : "model");
        }
    for (int i = 0; i < ov.n; i++) {
        const char *k = ov.key[i], *v = ov.val[i];
        int rc = !strcmp(k, "upstream") ? gw_config_add_upstream(cfg, v, err, sizeof(err))
                 : !strcmp(k, "route")  ? gw_config_add_route(cfg, v, err, sizeof(err))
                                        : gw_config_set(cfg, k, v, err, sizeof(err));
        if (rc) mt_fail("--%s: %s", k, err);
    }
    args_overrides_free(&ov);
    if (quiet) cfg->quiet = 1;
    if (gw_config_validate(cfg, err, sizeof(err))) mt_fail("%s", err);

    sigset_t set;
    cmd_block_signals(&set); /* SIGPIPE too: hiredis and libcurl write to sockets a peer may have closed */

    gw_gateway *g = gw_gateway_start(cfg, err, sizeof(err));
    if (!g) {
        free(cfg);
        mt_fail("%s", err);
    }
    if (!cfg->keys_db[0])
        fprintf(stderr, "minitrain: gateway: OPEN: no keys database (--keys-db), so every client "
                        "may call every model and no rate limits apply\n");
    int v6 = strchr(cfg->host, ':') != NULL;
    printf("minitrain: gateway listening on http://%s%s%s:%d — %d upstream%s, %d model%s, %s%s\n",
           v6 ? "[" : "", cfg->host, v6 ? "]" : "", gw_gateway_port(g), cfg->n_up,
           cfg->n_up == 1 ? "" : "s", cfg->n_routes, cfg->n_routes == 1 ? "" : "s",
           cfg->keys_db[0] ? "keys " : "open", cfg->keys_db);
    print_routes(cfg);
    fflush(stdout);
    cmd_wait_signal(&set, "gateway");
    gw_gateway_stop(g);
    free(cfg);
    return MT_EXIT_OK;
}
