/*
 * cmd/simulate.c — `minitrain simulate`: the flags of an ETTR study, then sim_study_run
 * (sched/simulate.h), which checks them together, applies a preset and prints the figures.
 *
 * Values not given stay NAN so that a preset or --from-run can fill them in (a given flag wins).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "sched/simulate.h"

int cmd_simulate(int argc, char **argv) {
    sim_study st = {.gpus = NAN, .mtbf_gpu_hours = NAN, .ckpt_save_s = NAN, .restart_s = NAN,
                    .interval_s = NAN, .hours = NAN, .target_ettr = NAN, .trials = 200};
    const char *interval = "auto";
    unsigned long long seed = 1;
    const double ANY_LO = -INFINITY, ANY_HI = INFINITY; /* sim_study_run checks the ranges */
    const args_opt opts[] = {
        {"gpus", KEYTAB_DOUBLE, &st.gpus, ANY_LO, ANY_HI, "G", "GPUs in the job", ""},
        {"mtbf-gpu-hours", KEYTAB_DOUBLE, &st.mtbf_gpu_hours, ANY_LO, ANY_HI, "H", "per-GPU mean "
         "time between failures, GPU-hours (inf = none)", ""},
        {"ckpt-save-s", KEYTAB_DOUBLE, &st.ckpt_save_s, ANY_LO, ANY_HI, "C", "seconds training is "
         "blocked per checkpoint", ""},
        {"restart-s", KEYTAB_DOUBLE, &st.restart_s, ANY_LO, ANY_HI, "R", "seconds from a failure to "
         "training again (detect, teardown,\nrelaunch, load)", ""},
        {"interval", KEYTAB_STRING, &interval, 0, 0, "auto|S", "compute seconds between checkpoints "
         "(auto = Young/Daly)", NULL},
        {"hours", KEYTAB_DOUBLE, &st.hours, ANY_LO, ANY_HI, "D", "wall hours simulated", "720"},
        {"trials", KEYTAB_INT, &st.trials, 1, 1000000, "N", "Monte Carlo trials", NULL},
        {"seed", KEYTAB_U64, &seed, 0, 1.8e19, "S", "RNG seed", NULL},
        {"from-run", KEYTAB_STRING, &st.from_run, 0, 0, "DIR", "take C and R as measured in "
         "DIR/run.db (minitrain report); alone\n(no --gpus, --mtbf-gpu-hours): replay that "
         "run (G = 1, its MTBF, length\nand interval) and print its measured ETTR beside", ""},
        {"target-ettr", KEYTAB_DOUBLE, &st.target_ettr, ANY_LO, ANY_HI, "X", "also print the largest "
         "R that reaches ETTR X, per C", ""},
        {"preset", KEYTAB_STRING, &st.preset, 0, 0, "NAME", "llama3|byterobust: published settings, "
         "with the assumptions\nprinted", ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "simulate",
        .synopsis = "usage: minitrain simulate --gpus G --mtbf-gpu-hours H --ckpt-save-s C "
                    "--restart-s R\n                          [--interval auto|S] [--hours D] "
                    "[--seed S] [--trials N]\n                          [--from-run DIR] "
                    "[--target-ettr X] [--preset NAME]",
        .about = "Monte Carlo of a training job that checkpoints every S compute seconds (each "
                 "save\nstalls training C s) and fails as a Poisson process with job MTBF M = "
                 "H*3600/G s;\na failure loses the work since the last checkpoint and costs R s to "
                 "restart.\nPrints ETTR (mean ± std, p5/p95 over N trials), Young's interval "
                 "sqrt(2*C*M) and the\nETTR there vs at the given interval, and the closed-form "
                 "first-order model.",
        .opts = opts,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    st.seed = seed;
    if (strcmp(interval, "auto") != 0) {
        if (args_double("interval", interval, 0, INFINITY, &st.interval_s) != ARGS_CONTINUE)
            return MT_EXIT_USAGE;
        if (!(st.interval_s > 0) || isinf(st.interval_s))
            mt_fail("simulate: --interval must be > 0 or auto, got '%s'", interval);
    }
    return sim_study_run(&st);
}
