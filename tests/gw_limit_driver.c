/*
 * tests/gw_limit_driver.c — one "gateway process" for tests/run_gw_redis.sh: a gw_limiter on a
 * Redis address, and bursts of parallel reservations against one key.
 *
 *   gw_limit_driver --redis HOST:PORT --key ID [--rpm N] [--tpm N] [--max-concurrent N]
 *                   [--cost C] [--threads T] [--phases P] [--dir D] [--fail-open]
 *                   [--then hold|settle:USED|release]
 *
 * Each phase: T threads wait on a barrier, then each reserves `cost` once. The phase prints
 *   phase I admitted=A refused=R unavailable=U
 * and the admitted reservations are then held (default: they keep their tokens and slots until
 * the process ends), settled with USED tokens each, or released. With --dir, the driver writes
 * D/ready.I before phase I and waits for D/go.I, so the script can line up several processes
 * (and kill Redis) between phases.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/gw_limit.h"

typedef struct {
    gw_limiter *l;
    gw_key_info *k;
    long cost;
    pthread_barrier_t *go;
    int rc;
    gw_admission a;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    pthread_barrier_wait(r->go);
    r->rc = gw_limiter_reserve(r->l, r->k, r->cost, &r->a);
    return NULL;
}

static void touch(const char *dir, const char *name, int i) {
    char p[512];
    snprintf(p, sizeof(p), "%s/%s.%d", dir, name, i);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
}

static void wait_for(const char *dir, const char *name, int i) {
    char p[512];
    snprintf(p, sizeof(p), "%s/%s.%d", dir, name, i);
    for (int t = 0; access(p, F_OK) != 0; t++) {
        if (t > 60000) {
            fprintf(stderr, "gw_limit_driver: gave up waiting for %s\n", p);
            exit(1);
        }
        usleep(1000);
    }
}

int main(int argc, char **argv) {
    const char *redis = NULL, *dir = NULL, *then = "hold";
    gw_key_info k;
    memset(&k, 0, sizeof(k));
    k.role = GW_ROLE_USER;
    long cost = 1;
    int threads = 50, phases = 1, fail_open = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--redis")) redis = v, i++;
        else if (!strcmp(a, "--key")) snprintf(k.id, sizeof(k.id), "%s", v), i++;
        else if (!strcmp(a, "--rpm")) k.rpm = atol(v), i++;
        else if (!strcmp(a, "--tpm")) k.tpm = atol(v), i++;
        else if (!strcmp(a, "--max-concurrent")) k.max_concurrent = atoi(v), i++;
        else if (!strcmp(a, "--cost")) cost = atol(v), i++;
        else if (!strcmp(a, "--threads")) threads = atoi(v), i++;
        else if (!strcmp(a, "--phases")) phases = atoi(v), i++;
        else if (!strcmp(a, "--dir")) dir = v, i++;
        else if (!strcmp(a, "--then")) then = v, i++;
        else if (!strcmp(a, "--fail-open")) fail_open = 1;
        else {
            fprintf(stderr, "gw_limit_driver: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!redis || !k.id[0] || threads < 1 || threads > 1000 || phases < 1) {
        fprintf(stderr, "gw_limit_driver: --redis and --key are required\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* as every gateway process must: a write to a dead Redis */
    char err[256];
    gw_limiter *l = gw_limiter_new(redis, fail_open, err, sizeof(err));
    if (!l) {
        fprintf(stderr, "gw_limit_driver: %s\n", err);
        return 2;
    }
    racer *r = calloc((size_t)threads, sizeof(racer));
    pthread_t *th = calloc((size_t)threads, sizeof(pthread_t));
    for (int p = 0; p < phases; p++) {
        if (dir) {
            touch(dir, "ready", p);
            wait_for(dir, "go", p);
        }
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, (unsigned)threads);
        for (int i = 0; i < threads; i++) {
            r[i] = (racer){.l = l, .k = &k, .cost = cost, .go = &go};
            if (pthread_create(&th[i], NULL, race, &r[i]) != 0) return 1;
        }
        int adm = 0, ref = 0, unav = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            adm += r[i].a.admitted;
            ref += !r[i].a.admitted;
            unav += r[i].rc == GW_LIMIT_UNAVAILABLE;
        }
        pthread_barrier_destroy(&go);
        for (int i = 0; i < threads; i++) {
            if (!r[i].a.admitted) continue;
            if (!strncmp(then, "settle:", 7)) gw_limiter_settle(l, r[i].a.reservation, atol(then + 7));
            else if (!strcmp(then, "release")) gw_limiter_release(l, r[i].a.reservation);
        }
        printf("phase %d admitted=%d refused=%d unavailable=%d\n", p, adm, ref, unav);
        fflush(stdout);
    }
    if (dir) {
        touch(dir, "done", 0);
        wait_for(dir, "exit", 0); /* held reservations stay held until the script says so */
    }
    gw_limiter_free(l);
    free(r);
    free(th);
    return 0;
}
