/*
 * cmd/plan.c — `minitrain plan`: read a topology (file, flags, hwloc or Slurm), place the mesh on
 * it (sched/plan.h), print the placement and its predicted communication time per step next to
 * Megatron's default order and a naive order, and write the Open MPI rankfile.
 *
 * The model shape for the cost model comes from --config (a training INI) with flags on top;
 * without either it is GPT-2 124M's. Layout flags left at -1 come from the config.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/config.h"
#include "core/fs.h"
#include "core/timer.h"
#include "sched/plan.h"

static void fmt_time(char *buf, size_t n, double s) {
    if (s <= 0) snprintf(buf, n, "-");
    else if (s < 1e-3) snprintf(buf, n, "%.1f us", s * 1e6);
    else if (s < 1) snprintf(buf, n, "%.2f ms", s * 1e3);
    else snprintf(buf, n, "%.3f s", s);
}

static void print_row(const char *name, const plan_cost *c, int broken) {
    printf("%-9s", name);
    for (int d = 0; d < PLAN_NDIM; d++) {
        char t[32], cell[48];
        fmt_time(t, sizeof(t), c->seconds[d]);
        snprintf(cell, sizeof(cell), "%s (%s)", t, c->seconds[d] > 0 ? plan_link_name(c->link[d])
                                                                       : "-");
        printf("  %-19s", c->seconds[d] > 0 ? cell : "-");
    }
    char t[32];
    fmt_time(t, sizeof(t), c->total_s);
    printf("  %-10s  %s\n", t, broken ? "broken" : "all met");
}

/* The first nodes of the placement: which ranks each holds. */
static void print_nodes(const plan_topo *t, const plan_placement *p, int max_nodes) {
    int shown = 0, last = -1;
    for (int r = 0; r < p->world && shown <= max_nodes; r++) {
        if (p->node[r] != last) {
            if (last >= 0) printf("\n");
            if (++shown > max_nodes) break;
            last = p->node[r];
            printf("  %-10s leaf %-3d ranks", t->nodes[last].name, t->nodes[last].leaf);
        }
        printf(" %d", r);
    }
    if (shown <= max_nodes) printf("\n");
    if (p->n_used_nodes > max_nodes) printf("  ... (%d nodes in all)\n", p->n_used_nodes);
    if (p->n_spares) {
        printf("  spares:");
        for (int i = 0; i < p->n_spares && i < 16; i++) printf(" %s", t->nodes[p->spares[i]].name);
        printf("%s\n", p->n_spares > 16 ? " ..." : "");
    }
}

/* What plan prints: the layout and model, bytes per step, the cost table of the three orders
 * (names[o]) and the rules each breaks, the planned placement (unless quiet), the planning time. */
static void print_report(const plan_topo *t, const plan_model *m, const plan_placement *p,
                         const plan_cost *c, const int *broken, char rules[3][1024], int quiet,
                         double t_plan) {
    const char *names[3] = {"planned", "megatron", "naive"};
    int g = t->nodes[p[0].node[0]].gpus;
    printf("plan: %d ranks = tp %d x cp %d x pp %d x dp %d (ep %d) on %d of %d nodes x %d GPUs, "
           "%d leaves, %d spare(s)\n", p[0].world, m->tp, m->cp > 1 ? m->cp : 1, m->pp, m->dp,
           m->ep, p[0].n_used_nodes,
           t->n_nodes, g, t->n_leaves, p[0].n_spares);
    printf("model: L %d, d %d, T %d, V %d; %d microbatch(es) of %d; %d-byte elements; links "
           "GB/s: nvlink %g, node %g, leaf %g, spine %g\n", m->n_layer, m->d_model, m->seq_len,
           m->vocab_size, m->microbatches, m->micro_batch, m->bytes_per_elem, t->scaleup_gbs,
           t->intranode_gbs, t->nic_gbs, t->nic_gbs / t->oversub);
    double b[PLAN_NDIM];
    plan_bytes(m, b);
    printf("bytes/step/rank: TP %.3g, DP %.3g, PP %.3g, EP %.3g, CP %.3g\n", b[0], b[1], b[2],
           b[3], b[4]);
    printf("\n%-9s  %-19s  %-19s  %-19s  %-19s  %-19s  %-10s  %s\n", "order", "TP", "DP", "PP",
           "EP", "CP", "total/step", "rules");
    for (int o = 0; o < 3; o++) print_row(names[o], &c[o], broken[o]);
    for (int o = 0; o < 3; o++)
        if (broken[o] && !quiet) {
            printf("%s breaks:\n", names[o]);
            for (char *s = strtok(rules[o], "\n"); s; s = strtok(NULL, "\n")) printf("  %s\n", s);
        }
    if (!quiet) {
        printf("\nplacement (planned):\n");
        print_nodes(t, &p[0], 8);
    }
    printf("planned %d GPUs in %.1f ms\n", p[0].world, t_plan * 1e3);
}

/* The topology: one of --topology FILE, --from-hwloc, --from-slurm, or --nodes x
 * --gpus-per-node (uniform); the link overrides (NAN: keep) and the excluded hosts applied. An
 * unreadable source is a user error (exit 2). */
static void load_topology(plan_topo *t, const char *topology, int from_hwloc, int from_slurm,
                          int nodes, int gpn, int per_leaf, double nvlink, double nic,
                          double oversub, const char *exclude) {
    char err[512];
    plan_topo_init(t);
    int rc = 0;
    if (topology) rc = plan_topo_load(t, topology, err, sizeof(err));
    else if (from_hwloc) rc = plan_topo_from_hwloc(t, err, sizeof(err));
    else if (from_slurm) rc = plan_topo_from_slurm(t, err, sizeof(err));
    else plan_topo_uniform(t, nodes, gpn, per_leaf);
    if (rc != 0) mt_fail("%s", err);
    if (!isnan(nvlink)) t->scaleup_gbs = nvlink;
    if (!isnan(nic)) t->nic_gbs = nic;
    if (!isnan(oversub)) t->oversub = oversub;
    if (exclude && plan_topo_exclude(t, exclude, err, sizeof(err)) != 0) mt_fail("%s", err);
}

/* The flags of `minitrain plan`: -1 (NAN for the link overrides) means "not given". */
typedef struct {
    const char *topology, *exclude, *out, *config;
    int nodes, gpn, per_leaf, from_hwloc, from_slurm, spares, quiet;
    int tp, pp, dp, ep, cp, n_layer, d_model, seq_len, vocab, mbatch, mbs, bytes;
    double nvlink, nic, oversub;
} plan_args;

/* Step 1: the option table and its parse; ARGS_CONTINUE or the exit code (--help, bad flag). */
static int parse_plan_args(plan_args *a, int argc, char **argv) {
    *a = (plan_args){.tp = -1, .pp = -1, .dp = -1, .ep = -1, .cp = -1, .n_layer = -1,
                     .d_model = -1, .seq_len = -1, .vocab = -1, .mbatch = -1, .mbs = -1,
                     .bytes = 4, .nvlink = NAN, .nic = NAN, .oversub = NAN};
    const args_opt opts[] = {
        {"topology", KEYTAB_STRING, &a->topology, 0, 0, "FILE", "topology file (docs/placement.md)", ""},
        {"nodes", KEYTAB_INT, &a->nodes, 1, 1e6, "N", "uniform topology: N nodes named node0..", ""},
        {"gpus-per-node", KEYTAB_INT, &a->gpn, 1, 4096, "G", "... of G GPUs sharing one scale-up "
         "domain", ""},
        {"nodes-per-leaf", KEYTAB_INT, &a->per_leaf, 0, 1e6, "K", "... K nodes per leaf switch (0 = "
         "one leaf)", ""},
        {"from-hwloc", KEYTAB_FLAG, &a->from_hwloc, 0, 0, NULL, "the local node, as hwloc sees it", NULL},
        {"from-slurm", KEYTAB_FLAG, &a->from_slurm, 0, 0, NULL, "the nodes of the current Slurm "
         "allocation", NULL},
        {"tp", KEYTAB_INT, &a->tp, 1, 1e6, "T", "tensor-parallel degree", "config's"},
        {"pp", KEYTAB_INT, &a->pp, 1, 1e6, "P", "pipeline stages", "config's"},
        {"dp", KEYTAB_INT, &a->dp, 0, 1e6, "D", "data-parallel degree (0 = every usable GPU)",
         "config's"},
        {"ep", KEYTAB_INT, &a->ep, 1, 1e6, "E", "expert-parallel degree (divides dp)", "config's"},
        {"cp", KEYTAB_INT, &a->cp, 1, 1e6, "C", "context-parallel degree (ring attention)", "config's"},
        {"exclude", KEYTAB_STRING, &a->exclude, 0, 0, "HOSTS", "comma-separated hosts never to use "
         "(cordoned)", ""},
        {"spares", KEYTAB_INT, &a->spares, 0, 1e6, "N", "nodes held back as spares", NULL},
        {"out", KEYTAB_STRING, &a->out, 0, 0, "FILE", "write the Open MPI rankfile here", ""},
        {"config", KEYTAB_STRING, &a->config, 0, 0, "FILE", "training config: the model shape and "
         "layout", ""},
        {"n-layer", KEYTAB_INT, &a->n_layer, 1, 1e6, "L", "model: layers", "12"},
        {"d-model", KEYTAB_INT, &a->d_model, 1, 1e7, "D", "model: width", "768"},
        {"seq-len", KEYTAB_INT, &a->seq_len, 1, 1e8, "T", "model: sequence length", "1024"},
        {"vocab-size", KEYTAB_INT, &a->vocab, 1, 1e8, "V", "model: vocabulary", "50257"},
        {"micro-batch", KEYTAB_INT, &a->mbatch, 1, 1e6, "B", "sequences per microbatch", "1"},
        {"microbatches", KEYTAB_INT, &a->mbs, 1, 1e6, "M", "microbatches per step", "8"},
        {"bytes", KEYTAB_INT, &a->bytes, 1, 8, "N", "bytes per element moved (4 fp32, 2 bf16)", NULL},
        {"nvlink-gbs", KEYTAB_DOUBLE, &a->nvlink, 1e-3, 1e6, "X", "override: scale-up GB/s per GPU",
         ""},
        {"nic-gbs", KEYTAB_DOUBLE, &a->nic, 1e-3, 1e6, "X", "override: network GB/s per GPU", ""},
        {"oversubscription", KEYTAB_DOUBLE, &a->oversub, 1, 1e3, "X", "override: spine "
         "oversubscription", ""},
        {"quiet", KEYTAB_FLAG, &a->quiet, 0, 0, NULL, "print only the table", NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "plan",
        .synopsis = "usage: minitrain plan (--topology F | --nodes N --gpus-per-node G "
                    "[--nodes-per-leaf K]\n                      | --from-hwloc | --from-slurm) "
                    "--tp T --pp P --dp D [--ep E]\n                      [--exclude HOSTS] "
                    "[--spares N] [--out rankfile]",
        .about = "Place the ranks of the 5D mesh on a topology: TP (then CP rings, then EP) "
                 "groups inside a scale-up\ndomain, DP groups rail-aligned and inside one leaf when they fit, PP "
                 "stages across\nnodes, excluded hosts never used, spares held back. Prints the "
                 "predicted communication\ntime per step of each dimension (bytes per step x bus "
                 "factor / slowest link) for\nthe plan, Megatron's default order (ranks in host "
                 "order) and a naive order\n(round robin over hosts), and writes an Open MPI "
                 "rankfile that `train --rankfile`\nchecks its layout against.",
        .opts = opts,
        .epilog = "examples:\n"
                  "  minitrain plan --nodes 4 --gpus-per-node 8 --nodes-per-leaf 2 --tp 8 --pp 2 "
                  "--dp 2 --out job.rankfile\n"
                  "  minitrain plan --topology cluster.ini --tp 8 --pp 16 --dp 128 --exclude "
                  "node17 --spares 2\n"
                  "  mpirun --rankfile job.rankfile -np 32 ./minitrain train --config C "
                  "--rankfile job.rankfile",
    };
    return args_parse(&spec, argc, argv, NULL);
}

/* Step 2: the flags that go together, and an --out that is neither an input nor a FIFO, link
 * or directory; a user error (exit 2) otherwise. */
static void check_plan_args(const plan_args *a) {
    int sources = (a->topology != NULL) + (a->nodes > 0 || a->gpn > 0) + a->from_hwloc +
                  a->from_slurm;
    if (sources != 1)
        mt_fail("plan: give exactly one of --topology, --nodes/--gpus-per-node, --from-hwloc, "
                "--from-slurm");
    if ((a->nodes > 0) != (a->gpn > 0)) mt_fail("plan: --nodes and --gpus-per-node go together");

    /* the rankfile must not replace an input (`--topology t.ini --out t.ini` did) */
    const char *inputs[2] = {a->topology, a->config}, *input_flag[2] = {"--topology", "--config"};
    for (int i = 0; a->out && i < 2; i++)
        if (inputs[i] && fs_same_file(a->out, inputs[i]))
            mt_fail("plan: --out %s is the %s file; write the rankfile elsewhere", a->out,
                    input_flag[i]);
    char oerr[8192]; /* and the one output rule (core/fs.h): no FIFO, link or directory */
    if (a->out && fs_check_output(a->out, NULL, 0, oerr, sizeof(oerr)) < 0)
        mt_fail("plan: --out %s", oerr);
}

/* Step 3: the model shape and layout costed: GPT-2 124M's, then --config's, then the flags. */
static plan_model model_from_args(const plan_args *a) {
    mt_config cfg;
    config_defaults(&cfg);
    char err[512];
    plan_model m = {.tp = 1, .pp = 1, .dp = 0, .ep = 1, .cp = 1, .n_layer = 12, .d_model = 768,
                    .seq_len = 1024, .vocab_size = 50257, .micro_batch = 1, .microbatches = 8,
                    .bytes_per_elem = a->bytes};
    if (a->config) {
        if (config_load_ini(&cfg, a->config, err, sizeof(err)) != 0) mt_fail("%s", err);
        m.tp = cfg.tp, m.pp = cfg.pp, m.dp = cfg.dp, m.ep = cfg.ep, m.cp = cfg.cp;
        m.n_layer = cfg.n_layer, m.d_model = cfg.d_model, m.seq_len = cfg.seq_len;
        if (cfg.vocab_size > 0) m.vocab_size = cfg.vocab_size;
        m.micro_batch = cfg.batch_size;
        m.moe_every = cfg.moe_every, m.top_k = cfg.top_k;
    }
#define OVER(field, v) if ((v) >= 0) m.field = (v)
    OVER(tp, a->tp); OVER(pp, a->pp); OVER(dp, a->dp); OVER(ep, a->ep); OVER(cp, a->cp);
    OVER(n_layer, a->n_layer); OVER(d_model, a->d_model); OVER(seq_len, a->seq_len);
    OVER(vocab_size, a->vocab); OVER(micro_batch, a->mbatch); OVER(microbatches, a->mbs);
#undef OVER
    if (m.n_layer % m.pp != 0) mt_warn("plan: pp (%d) does not divide n_layer (%d): costed as "
                                       "n_layer/pp layers a stage", m.pp, m.n_layer);
    return m;
}

/* Step 4: place the three orders (plan_order: planned, megatron, naive), cost each and check
 * its rules; returns the planning time (s) of the planned order alone. */
static double place_orders(const plan_topo *t, const plan_model *m, int spares,
                           plan_placement p[3], plan_cost c[3], int broken[3],
                           char rules[3][1024]) {
    char err[512];
    double t0 = timer_now();
    for (int o = 0; o < 3; o++)
        if (plan_place(t, m, spares, (plan_order)o, &p[o], err, sizeof(err)) != 0)
            mt_fail("%s", err);
    double t_place = timer_now() - t0;
    t0 = timer_now();
    plan_cost_eval(t, m, &p[0], &c[0]);
    broken[0] = plan_check_rules(t, m, &p[0], rules[0], sizeof(rules[0]));
    double t_plan = t_place / 3 + (timer_now() - t0);
    for (int o = 1; o < 3; o++) {
        plan_cost_eval(t, m, &p[o], &c[o]);
        broken[o] = plan_check_rules(t, m, &p[o], rules[o], sizeof(rules[o]));
    }
    return t_plan;
}

/* Step 5: the planned placement as an Open MPI rankfile at out. */
static void write_rankfile(const char *out, const plan_topo *t, const plan_model *m,
                           const plan_placement *p) {
    fs_afile af; /* written atomically (core/fs.h): mpirun never reads half a rankfile */
    char err[1024];
    FILE *fp = fs_stream_open(&af, out, err, sizeof(err));
    if (!fp) mt_fail("plan: %s", err);
    plan_write_rankfile(fp, t, m, p);
    if (fs_stream_commit(&af, fp, err, sizeof(err)) != 0) mt_fail_io("plan: %s", err);
    printf("wrote %s (%d ranks)\n", out, p->world);
}

int cmd_plan(int argc, char **argv) {
    plan_args a;
    int prc = parse_plan_args(&a, argc, argv);
    if (prc != ARGS_CONTINUE) return prc;
    check_plan_args(&a);
    plan_model m = model_from_args(&a);

    plan_topo t;
    load_topology(&t, a.topology, a.from_hwloc, a.from_slurm, a.nodes, a.gpn, a.per_leaf,
                  a.nvlink, a.nic, a.oversub, a.exclude);

    if (m.dp == 0) { /* every usable GPU but the spares' */
        char err[512];
        m.dp = plan_auto_dp(&t, &m, a.spares, err, sizeof(err));
        if (m.dp < 0) mt_fail("%s", err);
    }

    plan_placement p[3]; /* planned, megatron, naive (plan_order) */
    plan_cost c[3];
    int broken[3];
    char rules[3][1024];
    double t_plan = place_orders(&t, &m, a.spares, p, c, broken, rules);
    print_report(&t, &m, p, c, broken, rules, a.quiet, t_plan);
    if (a.out) write_rankfile(a.out, &t, &m, &p[0]);
    for (int o = 0; o < 3; o++) plan_placement_free(&p[o]);
    plan_topo_free(&t);
    return MT_EXIT_OK; /* a rule that cannot hold here (too few nodes per leaf) is printed, not fatal */
}
