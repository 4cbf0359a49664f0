/*
 * bench/bench_plan.c — how long `minitrain plan` takes at cluster scale: 2,048 nodes × 8 GPUs
 * (16,384 GPUs) in a 2-level fat tree of 32 nodes per leaf, tp 8 × pp 16 × dp 128, planned
 * (place + cost + rule check) 10 times; prints the best and the mean. The issue asks for < 1 s.
 */
#include <stdio.h>
#include <time.h>

#include "core/timer.h"
#include "sched/plan.h"

int main(void) {
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 2048, 8, 32);
    plan_model m = {.tp = 8, .pp = 16, .dp = 128, .ep = 1, .n_layer = 96, .d_model = 12288,
                    .seq_len = 2048, .vocab_size = 50257, .micro_batch = 1, .microbatches = 64,
                    .bytes_per_elem = 2};
    double best = 1e9, sum = 0;
    char err[256], rules[1024];
    int broken = 0;
    for (int i = 0; i < 10; i++) {
        double t0 = timer_now();
        plan_placement p;
        if (plan_place(&t, &m, 0, PLAN_ORDER_PLANNED, &p, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        plan_cost c;
        plan_cost_eval(&t, &m, &p, &c);
        broken = plan_check_rules(&t, &m, &p, rules, sizeof(rules));
        plan_placement_free(&p);
        double dt = timer_now() - t0;
        sum += dt;
        if (dt < best) best = dt;
    }
    printf("plan 16384 GPUs (2048 nodes x 8, 64 leaves; tp 8 pp 16 dp 128): best %.2f ms, mean "
           "%.2f ms over 10 (rules broken: %d)\n", best * 1e3, sum / 10 * 1e3, broken);
    plan_topo_free(&t);
    return 0;
}
