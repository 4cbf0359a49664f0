/*
 * gateway/cmd_serve.c — `minitrain serve`: flags, loading the run, and the process lifecycle.
 *
 * Order matters: the server listens BEFORE the model loads, so a health checker sees
 * 503 {"status":"loading"} and then 200 {"status":"ok"} instead of connection refused. SIGINT and
 * SIGTERM are blocked in every thread and taken by sigwait() in the main thread, which then stops
 * the server cleanly (generations cancelled, connections closed, threads joined, memory freed) —
 * so AddressSanitizer's leak check at exit sees a clean process.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "gateway/server.h"
#include "train/model_io.h"
#include "train/tokenizer.h"

static void usage(void) {
    printf("usage: minitrain serve --run DIR|FILE [options]\n\n"
           "Serve a trained model over HTTP with the OpenAI completions API:\n"
           "  POST /v1/completions, GET /v1/models, GET /health, GET /metrics (Prometheus).\n\n"
           "  --run DIR|FILE       run directory (DIR/model.safetensors) or an exported model file\n"
           "  --step N             serve the checkpoint of step N (default: the newest)\n"
           "  --tokenizer FILE     tokenizer (default: tokenizer.bin next to the model)\n"
           "  --host ADDR          bind address (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
           "  --port P             TCP port (default 8080; 0 = any free port, printed at start)\n"
           "  --slots N            generations in parallel, one KV cache each (default 1)\n"
           "  --queue N            requests that may wait for a slot; more get 503 (default 16)\n"
           "  --threads N          OpenMP/BLAS threads per slot (default: cores / slots)\n"
           "  --max-body BYTES     largest request body, e.g. 1048576 or 1M (default 1M); 413 above\n"
           "  --timeout S          close connections idle or stalled for S seconds (default 30)\n"
           "  --model-name NAME    the model id clients use (default: the run's directory name)\n"
           "  --api-key-file FILE  require 'Authorization: Bearer KEY' (one key per line, #\n"
           "                       comments); /health stays open\n"
           "  --log-content        include prompts and completions in the access log (off:\n"
           "                       only counts and timings are logged)\n"
           "  --quiet              no access log\n\n"
           "example:\n"
           "  minitrain serve --run runs/shakespeare --port 8080\n"
           "  curl -s localhost:8080/v1/completions -H 'Content-Type: application/json' \\\n"
           "       -d '{\"model\":\"shakespeare\",\"prompt\":\"ROMEO:\",\"max_tokens\":64}'\n"
           "See docs/serve.md.\n");
}

static long parse_int(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || errno) mt_fail("%s needs an integer, got '%s'", flag, s);
    if (v < lo || v > hi) mt_fail("%s = %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    return v;
}

/* BYTES with an optional K or M suffix (KiB, MiB). */
static size_t parse_bytes(const char *flag, const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == 0 || *s == '-' || errno) mt_fail("%s needs a byte count, got '%s'", flag, s);
    if (*end == 'k' || *end == 'K') v <<= 10, end++;
    else if (*end == 'm' || *end == 'M') v <<= 20, end++;
    if (*end != 0) mt_fail("%s needs a byte count like 1048576 or 1M, got '%s'", flag, s);
    if (v < 64 || v > (1ull << 30)) mt_fail("%s = %s is out of range [64, 1G]", flag, s);
    return (size_t)v;
}

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

int gw_cmd_serve(int argc, char **argv) {
    const char *run = NULL, *tok_path = NULL, *key_file = NULL, *name = NULL;
    long step = -1;
    gw_server_opts o = {.host = "127.0.0.1", .port = 8080, .slots = 1, .queue = 16,
                        .max_body = 1 << 20, .timeout_s = 30};
    int threads = 0;
    static struct option opts[] = {{"run", required_argument, 0, 'r'},
                                   {"step", required_argument, 0, 'S'},
                                   {"tokenizer", required_argument, 0, 'T'},
                                   {"host", required_argument, 0, 'H'},
                                   {"port", required_argument, 0, 'p'},
                                   {"slots", required_argument, 0, 's'},
                                   {"queue", required_argument, 0, 'q'},
                                   {"threads", required_argument, 0, 't'},
                                   {"max-body", required_argument, 0, 'b'},
                                   {"timeout", required_argument, 0, 'o'},
                                   {"model-name", required_argument, 0, 'n'},
                                   {"api-key-file", required_argument, 0, 'k'},
                                   {"log-content", no_argument, 0, 'L'},
                                   {"quiet", no_argument, 0, 'Q'},
                                   {"help", no_argument, 0, 'h'},
                                   {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': run = optarg; break;
        case 'S': step = parse_int("--step", optarg, 0, 2000000000); break;
        case 'T': tok_path = optarg; break;
        case 'H': o.host = optarg; break;
        case 'p': o.port = (int)parse_int("--port", optarg, 0, 65535); break;
        case 's': o.slots = (int)parse_int("--slots", optarg, 1, 256); break;
        case 'q': o.queue = (int)parse_int("--queue", optarg, 0, 65536); break;
        case 't': threads = (int)parse_int("--threads", optarg, 0, 1024); break;
        case 'b': o.max_body = parse_bytes("--max-body", optarg); break;
        case 'o': o.timeout_s = (unsigned)parse_int("--timeout", optarg, 1, 86400); break;
        case 'n': name = optarg; break;
        case 'k': key_file = optarg; break;
        case 'L': o.log_content = 1; break;
        case 'Q': o.quiet = 1; break;
        case 'h': usage(); return MT_EXIT_OK;
        default:
            mt_fail("unknown or incomplete option '%s' (see `minitrain serve --help`)",
                    argv[optind - 1]);
        }
    }
    if (optind < argc) mt_fail("unexpected argument '%s'", argv[optind]);
    if (!run) mt_fail("--run DIR is required (a directory written by `minitrain train`, or a "
                      "model file)");
    struct stat sb;
    if (stat(run, &sb) != 0) mt_fail("--run '%s' does not exist", run);
    char model_name[128], tpath[1200];
    if (name) {
        if (!*name || strlen(name) > 64) mt_fail("--model-name must be 1..64 characters");
        for (const char *p = name; *p; p++)
            if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || *p == 127)
                mt_fail("--model-name '%s' may not contain spaces, quotes or control characters",
                        name);
        snprintf(model_name, sizeof(model_name), "%s", name);
    } else {
        default_name(run, model_name, sizeof(model_name));
    }
    o.model_name = model_name;
    if (tok_path) {
        snprintf(tpath, sizeof(tpath), "%s", tok_path);
    } else if (S_ISDIR(sb.st_mode)) {
        snprintf(tpath, sizeof(tpath), "%s/tokenizer.bin", run);
    } else {
        char tmp[1024];
        snprintf(tmp, sizeof(tmp), "%s", run);
        snprintf(tpath, sizeof(tpath), "%s/tokenizer.bin", dirname(tmp));
    }
    if (key_file) o.api_keys = read_keys(key_file, &o.n_api_keys);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    o.threads_per_slot = threads > 0 ? threads : (int)(ncpu / o.slots > 1 ? ncpu / o.slots : 1);

    /* signals: taken by sigwait below; every thread started from here on inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[1200];
    gw_server *srv = gw_server_start(&o, err, sizeof(err));
    if (!srv) {
        fprintf(stderr, "minitrain: error: %s\n", err);
        return MT_EXIT_ERROR;
    }
    int port = gw_server_port(srv);
    const char *host = o.host;
    int v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "minitrain: serve: loading %s (listening on http://%s%s%s:%d, /health says "
            "loading)\n", run, v6 ? "[" : "", host, v6 ? "]" : "", port);

    gpt_model m;
    tok_tokenizer tok;
    int loaded_step = 0;
    int rc = step >= 0 ? model_io_load_step(&m, run, (int)step, &loaded_step, err, sizeof(err))
                       : model_io_load(&m, run, &loaded_step, err, sizeof(err));
    if (rc != 0) {
        gw_server_stop(srv);
        mt_fail("%s", err);
    }
    if (tok_load(&tok, tpath, err, sizeof(err)) != 0) {
        gw_server_stop(srv);
        gpt_free(&m);
        mt_fail("%s (give the tokenizer with --tokenizer FILE)", err);
    }
    if (!tok_can_encode(&tok)) { /* llm.c's gpt2_tokenizer.bin: docs/interop.md */
        gw_server_stop(srv);
        gpt_free(&m);
        mt_fail("tokenizer '%s' is decode only (llm.c's gpt2_tokenizer.bin has no merges) and "
                "cannot encode prompts; give --tokenizer with a tiktoken or Hugging Face file", tpath);
    }
    gw_server_set_model(srv, &m, &tok, loaded_step);
    printf("minitrain: serving '%s' (step %d: %d layers, d_model %d, context %d, vocab %d) on "
           "http://%s%s%s:%d — slots %d, queue %d, threads/slot %d\n",
           model_name, loaded_step, m.cfg.n_layer, m.cfg.d_model, m.cfg.seq_len,
           m.cfg.vocab_size, v6 ? "[" : "", host, v6 ? "]" : "", port, o.slots, o.queue,
           o.threads_per_slot);
    fflush(stdout);

    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "minitrain: serve: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    gw_server_stop(srv);
    tok_free(&tok);
    gpt_free(&m);
    for (int i = 0; i < o.n_api_keys; i++) free(o.api_keys[i]);
    free(o.api_keys);
    return MT_EXIT_OK;
}
