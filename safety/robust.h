/*
 * safety/robust.h — adversarial robustness of a language model: attacks in embedding space
 * (FGSM, PGD), first-order token swaps (HotFlip), their evaluation on fixed validation batches
 * in any parallel layout, and adversarial training (FGSM, PGD, FreeLB) as a trainer microbatch
 * function.
 *
 * Embedding attacks (Goodfellow et al. 2015 "Explaining and harnessing adversarial examples";
 * Madry et al. 2018 "Towards deep learning models resistant to adversarial attacks"; the language
 * model form of Zhu et al. 2020, FreeLB, arXiv 1909.11764): a perturbation δ (B, T, C) is added to
 * the token-embedding rows after lookup (position embeddings untouched) and ascends the
 * cross-entropy of the fixed targets:
 *     δ ← Π_{‖δ‖≤ε}(δ + α·d(g)),   g = ∂L/∂δ (gpt_stage_backward_input),
 * d(g) = g/‖g‖₂ per sequence for the L2 ball, sign(g) per element for the L∞ ball (steepest
 * ascent under each norm), K steps of size α (default 2.5·ε/K, Madry et al.), optionally from a
 * uniform random point of the ball. FGSM is one step of size ε from δ = 0. Every step asserts
 * ‖δ‖ ≤ ε (L2: within 1e-6 relative, the float rounding of the projection; L∞: exactly).
 * Each sequence's reported loss is its best iterate over steps 1..K (the usual evaluation
 * practice; the clean point δ = 0 is never among them, so adv ≥ clean is a property of the
 * attack, not of the bookkeeping).
 *
 * ε is relative: ē = mean L2 norm of the token-embedding rows (rows < vocab_limit), and
 *     L2:  ε_abs = ε_rel·ē·√T  (the ball of the whole sequence: an RMS of ε_rel·ē per token)
 *     L∞:  ε_abs = ε_rel·ē/√C  (per element: a token's perturbation has L2 norm ≤ ε_rel·ē)
 * so ε_rel is "a fraction of one token embedding's norm per token" under both norms and figures
 * compare across model sizes. Rows report ε_abs too.
 *
 * HotFlip (Ebrahimi et al. 2018, arXiv 1712.06751): swapping token a for b at position i changes
 * the loss by ΔL ≈ (e_b − e_a)ᵀ ∇_{e_i}L. Each round scores every (position, token) pair of a
 * sequence with one gradient, keeps the best token per position, and applies the best swap
 * (greedy, beam 1) or keeps the `beam` best sequences by their TRUE loss after each position's
 * best swap (beam search). Up to `flips` swaps per sequence; a position is swapped at most once;
 * targets stay the original text.
 *
 * Layouts: the perturbation lives where the embedding lives (pipeline stage 0); TP ranks hold
 * identical embeddings and, after the f all-reduce, identical input gradients, so each computes
 * the same δ; DP ranks take every dp-th batch; the last stage's per-token losses and argmaxes are
 * broadcast over the pipeline group. Random starts are seeded by (seed, global sequence index,
 * ε index), so a layout evaluates exactly what one process evaluates.
 *
 * Metrics per ε: clean and adversarial mean NLL (nats/token) and perplexity, next-token accuracy
 * (argmax == target) clean and adversarial, attack success rate (share of positions whose argmax
 * changed), tokens, wall time.
 */
#ifndef MT_SAFETY_ROBUST_H
#define MT_SAFETY_ROBUST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "core/rundb.h"
#include "parallel/mesh.h"
#include "text/data.h"
#include "model/model.h"
#include "train/trainer.h"

#define ROBUST_MAX_EPS 16
/* The largest relative ε accepted (as adv_eps's bound, core/config.c): ε = 100 already puts the
 * ball 100 embedding norms wide; beyond, the perturbation's squared norm overflows fp32 (1e20 made
 * the attack's own finiteness check abort the process). */
#define ROBUST_EPS_MAX 100.0

typedef enum { ROBUST_FGSM = 0, ROBUST_PGD = 1, ROBUST_HOTFLIP = 2 } robust_attack;
typedef enum { ROBUST_L2 = 0, ROBUST_LINF = 1 } robust_norm;

typedef struct {
    robust_attack attack;
    robust_norm norm;
    int n_eps;
    double eps_rel[ROBUST_MAX_EPS]; /* relative ε per row (embedding attacks) */
    int steps;                      /* PGD ascent steps K (FGSM: 1) */
    double alpha_mult;              /* α = alpha_mult·ε_abs/K (PGD; default 2.5) */
    int random_start;               /* PGD: start uniform in the ball (default 0) */
    int flips, beam;                /* HotFlip: swaps per sequence, beam width 1..10 */
    int batches, batch_size;        /* sequences attacked: val windows [0, batches·batch_size) */
    int vocab_limit;                /* token ids < this are real (ē, HotFlip candidates); 0 = V */
    uint64_t seed;                  /* random starts */
    /* called on world rank 0 after each batch (NULL = quiet): done of total batches */
    void (*progress)(int done, int total, void *user);
    void *progress_user;
} robust_opts;

/* One row of results (one ε; HotFlip: one row). Losses in nats/token, accuracies and the success
 * rate as fractions, ms = wall time of this row's attack on this rank. max_ball is the largest
 * ‖δ‖/ε_abs seen after any projection (≤ 1 + 1e-6; 0 for ε = 0 and HotFlip), for tests. */
typedef struct {
    double eps_rel, eps_abs;
    int k;
    double clean_loss, adv_loss, clean_acc, adv_acc, success_rate;
    long long n_tokens;
    double ms;
    double max_ball;
} robust_row;

typedef struct {
    int n_rows;
    robust_row rows[ROBUST_MAX_EPS];
    double embed_norm; /* ē */
    int seq_len, n_seqs;
} robust_result;

/* Defaults: PGD, L2, ε_rel {0, 0.01, 0.03, 0.1}, K = 5, α = 2.5ε/K, no random start, 2 flips,
 * beam 1, 2 batches of 8, seed 1337. */
void robust_opts_default(robust_opts *o);

/* Parse "fgsm|pgd|hotflip", "l2|linf" and a comma list of ε_rel ≥ 0 (at most ROBUST_MAX_EPS).
 * Return 0, or -1 with one line in err naming the bad value. */
int robust_parse_attack(const char *s, robust_attack *out, char *err, size_t errlen);
int robust_parse_norm(const char *s, robust_norm *out, char *err, size_t errlen);
int robust_parse_eps(const char *list, robust_opts *o, char *err, size_t errlen);
const char *robust_attack_name(robust_attack a);
const char *robust_norm_name(robust_norm n);

/* ē: the mean L2 norm of the rows [0, vocab_limit) of the token embedding (vocab_limit 0 = all
 * V rows). Called on the first pipeline stage (which holds wte); other stages get the first
 * stage's value when ms is given (broadcast over the pipeline group; collective) and NAN when
 * ms is NULL. */
double robust_embed_norm(const gpt_model *m, const mesh *ms, int vocab_limit);

/* ε_abs for ε_rel under a norm, given ē and the model's T and C (formula above). */
double robust_eps_abs(robust_norm norm, double eps_rel, double embed_norm, int T, int C);

/* One ascent step and projection for B sequences of L floats each (delta, g (B, L)):
 * δ_b ← Π_{‖δ_b‖≤eps}(δ_b + alpha·d(g_b)), d = g/‖g‖₂ (L2, no step where g = 0) or sign(g) (L∞).
 * Aborts if a projected δ_b is outside the ball (L2 beyond 1e-6 relative). Returns the largest
 * ‖δ_b‖/eps (0 when eps = 0). */
double robust_ascent_step(float *delta, const float *g, int B, size_t L, robust_norm norm,
                          double alpha, double eps);

/* A uniform random point of the ball of radius eps in L dimensions (L2: Gaussian direction,
 * radius eps·u^(1/L); L∞: uniform per element), from seed alone. */
void robust_random_start(float *delta, size_t L, robust_norm norm, double eps, uint64_t seed);

/* Attack one batch in embedding space with FGSM/PGD at radius eps_abs (every rank of the layout
 * calls it with the same batch; collective over the pipeline group). inp, tgt (B, T);
 * B ≤ the model's activation B. seq0 = global index of the batch's first sequence (random start
 * seeds). delta (B, T, C) out on the first stage: the final iterate (unused elsewhere; may be
 * NULL). adv_loss (B·T) and adv_pred (B·T) out on every stage: per-token loss and argmax of each
 * sequence's best iterate (either may be NULL). Returns the largest ‖δ‖/ε_abs after a projection.
 * Aborts (mtCheck) if a step leaves the ε-ball. */
double robust_attack_embed(gpt_model *m, const mesh *ms, const robust_opts *o, int eps_index,
                           double eps_abs, const int *inp, const int *tgt, int B, int T,
                           uint64_t seq0, float *delta, float *adv_loss, int *adv_pred);

/* HotFlip on one batch (collective over the pipeline group, like robust_attack_embed):
 * o->flips swaps per sequence, greedy (o->beam 1) or beam search. adv_inp (B, T) out: the
 * swapped tokens (first stage; other stages get unspecified values); adv_loss, adv_pred (B·T) out
 * on every stage (either may be NULL): per-token loss and argmax on the swapped tokens against
 * the original targets. */
void robust_attack_hotflip(gpt_model *m, const mesh *ms, const robust_opts *o, const int *inp,
                           const int *tgt, int B, int T, int *adv_inp, float *adv_loss,
                           int *adv_pred);

/* The whole evaluation: o->batches batches of o->batch_size validation windows, clean and under
 * the attack at every ε (HotFlip: one row), summed over the data-parallel group. Collective over
 * the mesh (ms NULL = one process). Every rank receives the same result. The model's MoE
 * statistics are left as they were. Returns 0, or -1 with err (a batch larger than the model's
 * activations, an empty validation split, a HotFlip vocabulary of one token). */
int robust_evaluate(gpt_model *m, const mesh *ms, const data_loader *val, const robust_opts *o,
                    robust_result *res, char *err, size_t errlen);

/* Print the result as a table (text) or as one JSON object with a `rows` array (json = 1), with
 * the run directory, the evaluated step and the options. */
void robust_print(const robust_result *r, const robust_opts *o, const char *run_dir, int step,
                  int json);

/* Append the result's rows to run.db table evals (kind "train" or "cli"; time = now for all of
 * the evaluation's rows). */
void robust_log(rundb *db, int64_t run_id, int step, const char *kind, const robust_opts *o,
                const robust_result *r);

/* ---- training ---------------------------------------------------------------------------- */

/* Wire cfg's robustness keys into a trainer (called by the `train` subcommand after
 * trainer_init): robust_every > 0 registers the evaluation hook (every N steps and at the end,
 * rows of kind "train" into run.db, a log line on rank 0); adv_train != none installs the
 * adversarial microbatch (trainer_set_microbatch) and logs the extra passes it costs. Returns
 * the wiring (free with robust_detach), or NULL with err (adv_train with pp > 1, a bad key). */
typedef struct robust_wiring robust_wiring;
robust_wiring *robust_attach_trainer(trainer *tr, char *err, size_t errlen);
/* Free what robust_attach_trainer allocated (after trainer_run). NULL is a no-op. */
void robust_detach(robust_wiring *w);

/* ---- report ------------------------------------------------------------------------------ */

struct cJSON;
/* The newest evaluation in db (the rows sharing the largest evals.time): robust_report_print
 * prints it as a table under a heading and returns its row count (0 = no evals table or no
 * rows: nothing printed); robust_report_json returns it as a cJSON object {run_id, step, kind,
 * attack, norm, k, rows: [...]} for `report --json`, or NULL when there is none. */
int robust_report_print(sqlite3 *db);
struct cJSON *robust_report_json(sqlite3 *db);

/* Width in pixels of the adversarial-loss-vs-ε panel for db (0 when there are no embedding
 * attack rows), and the panel itself as SVG elements at x offset x0 in a picture of height h:
 * one polyline per evaluated step of the newest (kind, attack, norm, k), its legend, axes with
 * units. Used by `report --svg` beside the loss plot. */
int robust_svg_width(sqlite3 *db);
void robust_svg_panel(sqlite3 *db, FILE *f, int x0, int h);

#endif /* MT_SAFETY_ROBUST_H */
