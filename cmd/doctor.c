/*
 * cmd/doctor.c — `minitrain doctor [--json] [--baseline FILE | --runs DIR] [--config INI]`: the
 * node health checks of sched/doctor.h on this machine (and, under mpirun with two or more ranks,
 * between every pair of ranks). One line per check; a failed check also prints one line on
 * stderr, and the exit status is 1. --record RUN_DIR logs the result in that run.db (EV_DOCTOR),
 * where `--runs` finds it as part of the fleet.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/config.h"
#include "core/events.h"
#include "core/rundb.h"
#include "ops/peak.h"
#include "parallel/comm.h"
#include "sched/doctor.h"

/* The tier roots of a training config: tier 0 (ckpt_tier0_root, $MINITRAIN_SHM_DIR or
 * /dev/shm/minitrain), tier 1 (RUN_DIR), tier 2 (ckpt_durable, when set). */
static int config_roots(const char *ini, mt_config *cfg, doctor_opts *o, char *err, size_t n) {
    config_defaults(cfg);
    if (config_load_ini(cfg, ini, err, n) != 0) return -1;
    if (cfg->run_dir[0] == 0) {
        const char *b = strrchr(ini, '/') ? strrchr(ini, '/') + 1 : ini;
        size_t L = strcspn(b, ".");
        snprintf(cfg->run_dir, sizeof(cfg->run_dir), "runs/%.*s", (int)L, b);
    }
    static char t0[600];
    const char *shm = getenv("MINITRAIN_SHM_DIR");
    snprintf(t0, sizeof(t0), "%s", cfg->ckpt_tier0_root[0] ? cfg->ckpt_tier0_root
                                   : shm && shm[0]           ? shm
                                                             : "/dev/shm/minitrain");
    int k = 0;
    o->roots[k] = t0, o->root_tier[k++] = 0;
    o->roots[k] = cfg->run_dir, o->root_tier[k++] = 1;
    if (cfg->ckpt_durable[0]) o->roots[k] = cfg->ckpt_durable, o->root_tier[k++] = 2;
    o->roots[k] = NULL;
    o->tier0_root = t0;
    return 0;
}

static void record(const char *run_dir, const doctor_result *r) {
    char err[512];
    rundb *db = rundb_open(run_dir, err, sizeof(err));
    if (!db) {
        mt_warn("doctor --record: %s", err);
        return;
    }
    cJSON *d = doctor_json(r);
    cJSON *failed = cJSON_AddArrayToObject(d, "failed_checks");
    for (int i = 0; i < r->n; i++)
        if (!r->c[i].ok) cJSON_AddItemToArray(failed, cJSON_CreateString(r->c[i].name));
    ev_log(db, 0, EV_DOCTOR, -1, d);
    rundb_close(db);
}

static void print_text(const doctor_result *r) {
    printf("doctor: %s — %d check%s, %d failed (reference: %s)\n", r->host, r->n,
           r->n == 1 ? "" : "s", r->failed, r->ref_source);
    for (int i = 0; i < r->n; i++) printf("  %-4s %s\n", r->c[i].ok ? "ok" : "FAIL", r->c[i].text);
}

int cmd_doctor(int argc, char **argv) {
    const char *baseline = NULL, *runs = NULL, *ini = NULL, *rec = NULL;
    int json = 0, threads = 0;
    double tol = 0.8, min_free = 256, probe_s = 2;
    const args_opt opts[] = {
        {"json", KEYTAB_FLAG, &json, 0, 0, NULL, "print the result as JSON (a --baseline file)",
         NULL},
        {"baseline", KEYTAB_STRING, &baseline, 0, 0, "FILE", "reference figures: a healthy "
         "machine's `doctor --json`", ""},
        {"runs", KEYTAB_STRING, &runs, 0, 0, "DIR", "reference: the median of the other hosts' "
         "doctor records in DIR/run.db and DIR/SUBDIR/run.db", ""},
        {"config", KEYTAB_STRING, &ini, 0, 0, "INI", "a training config: write + fsync to its "
         "tier roots, free space under its tier 0", ""},
        {"record", KEYTAB_STRING, &rec, 0, 0, "RUN_DIR", "log the result in RUN_DIR/run.db (a "
         "doctor event)", ""},
        {"threads", KEYTAB_INT, &threads, 0, 1024, "N", "threads of the probes (0: all)", NULL},
        {"tolerance", KEYTAB_DOUBLE, &tol, 0.01, 1, "F", "pass at >= F x the reference", NULL},
        {"min-free-mb", KEYTAB_DOUBLE, &min_free, 0, 1e12, "MB", "free space the tier-0 root "
         "needs", NULL},
        {"probe-s", KEYTAB_DOUBLE, &probe_s, 0.1, 600, "S", "time cap of each probe", NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "doctor",
        .synopsis = "usage: minitrain doctor [--json] [--baseline FILE | --runs DIR] [--config INI]"
                    " [options]",
        .about = "Health checks of this machine before it (re)joins a job: the sgemm peak and\n"
                 "memory bandwidth against a reference, write + fsync to each checkpoint tier\n"
                 "root, free space under tier 0; under mpirun, ping-pong latency and an all-reduce\n"
                 "between every pair of ranks. Exit 1 with one line per failed check.",
        .opts = opts,
        .epilog = "examples:\n  minitrain doctor --json > healthy.json\n"
                  "  minitrain doctor --baseline healthy.json --config examples/shakespeare.ini\n"
                  "  mpirun -np 4 minitrain doctor --runs runs\n",
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (baseline && runs) {
        fprintf(stderr, "minitrain: error: doctor: give --baseline or --runs, not both\n");
        return MT_EXIT_USAGE;
    }
    comm *world = comm_init_world(NULL, NULL);
    int me = comm_rank(world);
    doctor_opts o = {.threads = threads, .tolerance = tol, .min_free_mb = min_free,
                     .probe_s = probe_s};
    doctor_result r;
    memset(&r, 0, sizeof(r));
    gethostname(r.host, sizeof(r.host));
    r.host[sizeof(r.host) - 1] = 0;
    char err[1024];
    static mt_config cfg;
    if (ini && config_roots(ini, &cfg, &o, err, sizeof(err)) != 0) {
        fprintf(stderr, "minitrain: error: doctor --config: %s\n", err);
        comm_finalize();
        return MT_EXIT_USAGE;
    }
    if (baseline) {
        if (doctor_read_baseline(baseline, &o.ref_sgemm, &o.ref_bw, err, sizeof(err)) != 0) {
            fprintf(stderr, "minitrain: error: doctor: %s\n", err);
            comm_finalize();
            return MT_EXIT_USAGE;
        }
        snprintf(r.ref_source, sizeof(r.ref_source), "baseline %s", baseline);
    } else if (runs) {
        int hosts = doctor_fleet_median(runs, r.host, &o.ref_sgemm, &o.ref_bw);
        if (hosts)
            snprintf(r.ref_source, sizeof(r.ref_source), "median of %d other host%s in %.200s",
                     hosts, hosts == 1 ? "" : "s", runs);
        else
            snprintf(r.ref_source, sizeof(r.ref_source), "none: no other host's doctor record "
                     "in %.200s", runs);
    } else {
        peak_cache_entry e;
        if (peak_cache_lookup(threads, 1, &e) == 0 && e.sgemm > 0) {
            o.ref_sgemm = e.sgemm;
            o.ref_bw = e.bandwidth;
            snprintf(r.ref_source, sizeof(r.ref_source), "this machine's peak cache");
        } else {
            snprintf(r.ref_source, sizeof(r.ref_source), "none");
        }
    }
    if (me == 0) doctor_run_local(&o, &r);
    doctor_run_pairs(world, &r);
    int rc = r.failed ? MT_EXIT_ERROR : MT_EXIT_OK;
    if (me == 0) {
        if (json) {
            cJSON *d = doctor_json(&r);
            char *t = cJSON_Print(d);
            printf("%s\n", t);
            free(t);
            cJSON_Delete(d);
        } else {
            print_text(&r);
        }
        for (int i = 0; i < r.n; i++)
            if (!r.c[i].ok) fprintf(stderr, "minitrain: doctor: FAIL %s\n", r.c[i].text);
        if (rec) record(rec, &r);
    }
    double v = rc;
    comm_all_reduce_f64(world, &v, 1, COMM_MAX); /* every rank exits as rank 0 says */
    comm_finalize();
    return (int)v;
}
