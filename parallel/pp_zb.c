/*
 * parallel/pp_zb.c — the ZB-H1 driver (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024,
 * §3.1, the handcrafted schedule at 1F1B's memory).
 *
 * The backward is two passes: B, the gradient w.r.t. the stage input (the previous stage waits
 * for it), and W, the gradients w.r.t. the weights (nobody waits for it). Stage s of P runs
 * 1F1B's warm-up, min(P-s-1, M) forwards; then for each remaining microbatch one forward and one
 * B, followed by a W whenever more than s W passes are pending; in the cool-down a B and the same
 * rule; then the pending Ws. The first s Ws of stage s are thereby postponed into the cool-down,
 * where 1F1B idles waiting for gradients: with unit-cost passes the idle time per stage drops
 * from (P-1)(T_F+T_B+T_W) to (P-1)(T_F+T_B-T_W). Each stage holds at most min(M, P)
 * microbatches (an activation lives from its F to its W): 1F1B's peak on its first stage.
 * W passes run in microbatch order, so parameter gradients accumulate as in 1F1B.
 */
#include "parallel/pp_impl.h"

#include <stdlib.h>

#include "core/check.h"

int pp_order_zbh1(int P, int s, int M, pp_op *out) {
    int warm = pp_warmup_forwards(PP_ZBH1, P, s, M, 1), n = 0, fi = 0, bi = 0, wi = 0;
    for (int i = 0; i < warm; i++) out[n++] = (pp_op){'F', fi++, 0};
    while (bi < M) {
        if (fi < M) out[n++] = (pp_op){'F', fi++, 0};
        out[n++] = (pp_op){'B', bi++, 0};
        while (bi - wi > s) out[n++] = (pp_op){'W', wi++, 0}; /* keep s Ws postponed */
    }
    while (wi < M) out[n++] = (pp_op){'W', wi++, 0};
    return n;
}

void pp_drive_zbh1(pp_pipe *p) {
    mtCheck(p->f->weight != NULL, "zb-h1 needs the stage's weight-gradient pass (pp_stage_fns.weight)");
    pp_op *ops = mallocCheck((size_t)3 * p->M * sizeof(pp_op));
    int n = pp_order_zbh1(p->P, p->s, p->M, ops);
    pp_execute(p, ops, n);
    free(ops);
}
