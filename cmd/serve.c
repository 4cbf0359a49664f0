/*
 * cmd/serve.c — `minitrain serve`: flags, loading the run, and the process lifecycle.
 *
 * Order matters: the server listens BEFORE the model loads, so a health checker sees
 * 503 {"status":"loading"} and then 200 {"status":"ok"} instead of connection refused. SIGINT and
 * SIGTERM are blocked in every thread and taken by sigwait() in the main thread, which then stops
 * the server cleanly (generations cancelled, connections closed, threads joined, memory freed) —
 * so AddressSanitizer's leak check at exit sees a clean process.
 */
#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "serve/server.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "text/tokenizer.h"

/* Keys from FILE: one per line, surrounding blanks ignored, empty lines and # comments skipped. */
static char **read_keys(const char *path, int *n_out) {
    FILE *f = fopen(path, "r");
    if (!f) mt_fail("cannot read --api-key-file '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode))
        mt_fail("--api-key-file '%s' is not a regular file", path);
    if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077))
        mt_warn("%s is readable by other users (chmod 600 it)", path);
    char **keys = NULL, line[1024];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n')
            mt_fail("%s:%d: line too long (keys are at most 1000 bytes)", path, lineno);
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        len = strlen(p);
        while (len && (p[len - 1] == '\n' || p[len - 1] == '\r' || p[len - 1] == ' ' ||
                       p[len - 1] == '\t'))
            p[--len] = 0;
        if (len == 0 || p[0] == '#') continue;
        keys = realloc(keys, (size_t)(n + 1) * sizeof(char *));
        mtCheck(keys != NULL, "out of memory reading API keys");
        keys[n] = strdup(p);
        mtCheck(keys[n] != NULL, "out of memory reading API keys");
        n++;
    }
    fclose(f);
    if (n == 0) mt_fail("%s holds no API keys (one key per line; # starts a comment)", path);
    *n_out = n;
    return keys;
}

/* Default model id: the run directory's name, or the model file's name without .safetensors. */
static void default_name(const char *run, char *out, size_t cap) {
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", run);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    snprintf(out, cap, "%s", basename(tmp));
    char *dot = strstr(out, ".safetensors");
    if (dot && dot != out && dot[12] == 0) *dot = 0;
}

/* The name the API reports for the model: --model-name (1..64 characters, no spaces, quotes or
 * control characters: it goes into JSON and headers as is), else default_name of the run. */
static void model_name_of(const char *name, const char *run, char *out, size_t len) {
    if (name) {
        if (!*name || strlen(name) > 64) mt_fail("--model-name must be 1..64 characters");
        for (const char *p = name; *p; p++)
            if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || *p == 127)
                mt_fail("--model-name '%s' may not contain spaces, quotes or control characters",
                        name);
        snprintf(out, len, "%s", name);
    } else {
        default_name(run, out, len);
    }
}

/* The tokenizer to serve with: --tokenizer, else tokenizer.bin in the run directory (run_is_dir)
 * or beside the model file. */
static void tokenizer_path(const char *tok_path, const char *run, int run_is_dir, char *out,
                           size_t len) {
    if (tok_path) {
        snprintf(out, len, "%s", tok_path);
    } else if (run_is_dir) {
        snprintf(out, len, "%s/tokenizer.bin", run);
    } else {
        char tmp[1024];
        snprintf(tmp, sizeof(tmp), "%s", run);
        snprintf(out, len, "%s/tokenizer.bin", dirname(tmp));
    }
}

/* Load the model (its latest step, or step >= 0) and a tokenizer that can encode prompts while
 * srv already answers /health with "loading"; a failure stops srv and is a user error (exit 2).
 * Returns the step loaded. */
static int load_model(srv_server *srv, const char *run, long long step, const char *tpath,
                      int explicit_tok, gpt_model *m, tok_tokenizer *tok) {
    char err[1200];
    int loaded_step = 0;
    int rc = step >= 0 ? model_io_load_step(m, run, (int)step, &loaded_step, err, sizeof(err))
                       : model_io_load(m, run, &loaded_step, err, sizeof(err));
    if (rc != 0) {
        srv_stop(srv);
        mt_fail("%s", err);
    }
    if (tok_load(tok, tpath, err, sizeof(err)) != 0) {
        srv_stop(srv);
        gpt_free(m);
        mt_fail("%s (give the tokenizer with --tokenizer FILE)", err);
    }
    /* a tokenizer named with --tokenizer must be the model's; the run's own may be smaller
     * (train --vocab-size above the tokenizer's) */
    if (tok_check_vocab(tok, tpath, m->cfg.vocab_size, explicit_tok, err, sizeof(err)) != 0) {
        srv_stop(srv);
        gpt_free(m);
        mt_fail("%s", err);
    }
    if (!tok_can_encode(tok)) { /* llm.c's gpt2_tokenizer.bin: docs/interop.md */
        srv_stop(srv);
        gpt_free(m);
        mt_fail("tokenizer '%s' is decode only (llm.c's gpt2_tokenizer.bin has no merges) and "
                "cannot encode prompts; give --tokenizer with a tiktoken or Hugging Face file", tpath);
    }
    return loaded_step;
}

/* The flags of `minitrain serve`: the server's options o, and what cmd_serve itself uses. */
typedef struct {
    const char *run, *tok_path, *key_file, *name, *device;
    long long step;
    int threads, timeout_s;
    srv_opts o;
} serve_args;

/* Step 1: the option table and its parse; ARGS_CONTINUE or the exit code (--help, bad flag). */
static int parse_serve_args(serve_args *a, int argc, char **argv) {
    *a = (serve_args){.step = -1, .device = "cpu",
                      .o = {.host = "127.0.0.1", .port = 8080, .slots = 1, .queue = 16,
                            .max_body = 1 << 20, .timeout_s = 30}};
    srv_opts *o = &a->o;
    a->timeout_s = (int)o->timeout_s;
    o->fault_rate = -1; /* not given: 0, or 1 when --fault-status is */
    o->fault_seed = 1;
    const args_opt opts[] = {
        {"run", KEYTAB_STRING, &a->run, 0, 0, "DIR|FILE", "run directory (DIR/model.safetensors) or an "
         "exported model file", ""},
        {"step", KEYTAB_I64, &a->step, 0, 2000000000, "N", "serve the checkpoint of step N (default: the "
         "newest)", ""},
        {"tokenizer", KEYTAB_STRING, &a->tok_path, 0, 0, "FILE", "tokenizer (default: tokenizer.bin next "
         "to the model)", ""},
        {"host", KEYTAB_STRING, &o->host, 0, 0, "ADDR", "bind address (0.0.0.0 or :: for all)", NULL},
        {"port", KEYTAB_INT, &o->port, 0, 65535, "P", "TCP port (0 = any free port, printed at start)",
         NULL},
        {"slots", KEYTAB_INT, &o->slots, 1, 256, "N", "generations in parallel (batched into one forward per token), one KV cache each",
         NULL},
        {"queue", KEYTAB_INT, &o->queue, 0, 65536, "N", "requests that may wait for a slot; more get "
         "503", NULL},
        {"threads", KEYTAB_INT, &a->threads, 0, 1024, "N", "OpenMP/BLAS threads of the batched decoder "
         "(default: all cores)", ""},
        {"max-body", KEYTAB_BYTES, &o->max_body, 64, 1 << 30, "BYTES", "largest request body, e.g. "
         "1048576 or 1M; 413 above", NULL},
        {"timeout", KEYTAB_INT, &a->timeout_s, 1, 86400, "S", "close connections idle or stalled for S "
         "seconds", NULL},
        {"model-name", KEYTAB_STRING, &a->name, 0, 0, "NAME", "the model id clients use (default: the "
         "run's directory name)", ""},
        {"api-key-file", KEYTAB_STRING, &a->key_file, 0, 0, "FILE", "require 'Authorization: Bearer KEY' "
         "(one key per line, #\ncomments); /health stays open", ""},
        {"log-content", KEYTAB_FLAG, &o->log_content, 0, 0, NULL, "include prompts and completions in "
         "the access log (off:\nonly counts and timings are logged)", NULL},
        {"quiet", KEYTAB_FLAG, &o->quiet, 0, 0, NULL, "no access log", NULL},
        {"device", KEYTAB_STRING, &a->device, 0, 0, "NAME", "cpu | guard | cuda (GPU=1 builds); env "
         "MINITRAIN_DEVICE overrides", NULL},
        {"fault-rate", KEYTAB_DOUBLE, &o->fault_rate, 0, 1, "P", "TEST ONLY: answer a fraction P of "
         "generation requests\nwith --fault-status instead", "0"},
        {"fault-status", KEYTAB_INT, &o->fault_status, 400, 599, "CODE", "TEST ONLY: the status of those "
         "faults; alone it means\n--fault-rate 1. 429 and 503 carry Retry-After", "500"},
        {"fault-retry-after", KEYTAB_INT, &o->fault_retry_after_s, 1, 86400, "S", "TEST ONLY: the "
         "Retry-After of a 429/503 fault", "1"},
        {"fault-empty", KEYTAB_DOUBLE, &o->fault_empty, 0, 1, "P", "TEST ONLY: a fraction P get a 200 "
         "with no choices or\nempty content and no finish_reason", NULL},
        {"fault-latency", KEYTAB_INT, &o->fault_latency_ms, 0, 600000, "MS", "TEST ONLY: wait MS "
         "milliseconds before answering each\ngeneration request", NULL},
        {"fault-latency-rate", KEYTAB_DOUBLE, &o->fault_latency_rate, 0, 1, "P", "TEST ONLY: only a "
         "fraction P of requests get\n--fault-latency (drawn with --fault-seed)", "1"},
        {"fault-seed", KEYTAB_U64, &o->fault_seed, 0, 1e18, "N", "TEST ONLY: seed of the fault draws "
         "(same seed, same faults)", NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "serve",
        .synopsis = "usage: minitrain serve --run DIR|FILE [options]",
        .about = "Serve a trained model over HTTP with the OpenAI completions API:\n"
                 "  POST /v1/completions, POST /v1/chat/completions, POST /v1/embeddings,\n"
                 "  GET /v1/models, GET /health, GET /metrics (Prometheus).",
        .opts = opts,
        .epilog = "example:\n"
                  "  minitrain serve --run runs/shakespeare --port 8080\n"
                  "  curl -s localhost:8080/v1/completions -H 'Content-Type: application/json' \\\n"
                  "       -d '{\"model\":\"shakespeare\",\"prompt\":\"ROMEO:\",\"max_tokens\":64}'\n"
                  "The --fault-* options are for TESTS ONLY: they make the server misbehave on\n"
                  "purpose (generation endpoints only; /health stays truthful) so that a gateway\n"
                  "in front of it can be tested. Never use them in production.\n"
                  "See docs/serve.md.",
    };
    return args_parse(&spec, argc, argv, NULL);
}

/* Step 2: the server's options completed from the flags: the timeout, the fault defaults (with
 * their warning), the model's name (into model_name), the tokenizer's path (into tpath), the
 * API keys, the threads. A missing --run is a user error (exit 2). */
static void finish_serve_opts(serve_args *a, char *model_name, size_t name_len, char *tpath,
                              size_t tpath_len) {
    srv_opts *o = &a->o;
    o->timeout_s = (unsigned)a->timeout_s;
    if (o->fault_rate < 0) o->fault_rate = o->fault_status ? 1 : 0;
    if (o->fault_rate > 0 || o->fault_empty > 0 || o->fault_latency_ms > 0)
        mt_warn("serve: TEST-ONLY FAULT INJECTION ON: %.0f%% status %d, %.0f%% empty, +%d ms "
                "(seed %llu)", 100 * o->fault_rate, o->fault_status ? o->fault_status : 500,
                100 * o->fault_empty, o->fault_latency_ms, o->fault_seed);
    if (!a->run) mt_fail("--run DIR is required (a directory written by `minitrain train`, or a "
                         "model file)");
    struct stat sb;
    if (stat(a->run, &sb) != 0) mt_fail("--run '%s' does not exist", a->run);
    model_name_of(a->name, a->run, model_name, name_len);
    o->model_name = model_name;
    tokenizer_path(a->tok_path, a->run, S_ISDIR(sb.st_mode), tpath, tpath_len);
    if (a->key_file) o->api_keys = read_keys(a->key_file, &o->n_api_keys);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    o->threads = a->threads > 0 ? a->threads : (int)ncpu;
}

int cmd_serve(int argc, char **argv) {
    serve_args a;
    int prc = parse_serve_args(&a, argc, argv);
    if (prc != ARGS_CONTINUE) return prc;
    char model_name[128], tpath[1200];
    finish_serve_opts(&a, model_name, sizeof(model_name), tpath, sizeof(tpath));
    const srv_opts *o = &a.o;

    /* signals: taken by sigwait below; every thread started from here on inherits the mask */
    sigset_t set;
    cmd_block_signals(&set);

    char err[1200];
    srv_server *srv = srv_start(o, err, sizeof(err));
    if (!srv) {
        fprintf(stderr, "minitrain: error: %s\n", err);
        return MT_EXIT_ERROR;
    }
    int port = srv_port(srv);
    const char *host = o->host;
    int v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "minitrain: serve: loading %s (listening on http://%s%s%s:%d, /health says "
            "loading)\n", a.run, v6 ? "[" : "", host, v6 ? "]" : "", port);

    if (ops_select(a.device, 0, err, sizeof(err)) != 0) mt_fail("%s", err);
    gpt_model m;
    tok_tokenizer tok;
    int loaded_step = load_model(srv, a.run, a.step, tpath, a.tok_path != NULL, &m, &tok);
    srv_set_model(srv, &m, &tok, loaded_step);
    printf("minitrain: serving '%s' (step %d: %d layers, d_model %d, context %d, vocab %d) on "
           "http://%s%s%s:%d — slots %d, queue %d, threads %d\n",
           model_name, loaded_step, m.cfg.n_layer, m.cfg.d_model, m.cfg.seq_len,
           m.cfg.vocab_size, v6 ? "[" : "", host, v6 ? "]" : "", port, o->slots, o->queue,
           o->threads);
    fflush(stdout);

    cmd_wait_signal(&set, "serve");
    srv_stop(srv);
    tok_free(&tok);
    gpt_free(&m);
    for (int i = 0; i < o->n_api_keys; i++) free(o->api_keys[i]);
    free(o->api_keys);
    return MT_EXIT_OK;
}
