/* score's alignment hypotheses (docs/verdict.md "Alignment checks"): the
 * logged log-probs of the first rollouts compared, token by token, with what
 * each hypothesis predicts from ratiocheck's own forward of the same tokens
 * (fp32 while its engine needs at most RC_ALIGN_FP32_BYTES, else the
 * trainer's numerics; temperature 1), and the hypothesis the data decides for:
 *   tokenizer    the logged ids are this model's (they rank near the top of
 *                its distribution, as sampled tokens do) or another
 *                tokenizer's (they rank anywhere in the vocabulary);
 *   temperature  the logged values are log_softmax(logits / T) at the
 *                declared T (1 for raw log-probs) or at another T, fitted to
 *                the data by least squares: another T must fit decisively
 *                better (RC_ALIGN_DECISIVE times lower mean squared error) to
 *                be named; a smaller gain is reported as inconclusive.
 *   renormalisation  no temperature explains the values and they sit above
 *                the model's on nearly every token, as top-k / top-p
 *                renormalisation over a kept set lifts them.
 * The one-token shift is the trainer's forward shifted against the logged
 * values (score.c); probabilities logged for log-probs are positive, which
 * the reader refuses. */
#ifndef RC_ALIGN_H
#define RC_ALIGN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "rollouts_in.h"
#include "score.h"

#define RC_ALIGN_MAX_TOKENS 128 /* response tokens of the first rollouts compared */
#define RC_ALIGN_MAX_FORWARD 8192 /* ... of rollouts whose prompts and responses fit this (the first one always) */
#define RC_ALIGN_MIN_TOKENS 32
#define RC_ALIGN_FP32_BYTES ((int64_t)4 << 30) /* the forward in fp32 while its engine needs at most this */  /* fewer: no decision (a warning) */
#define RC_ALIGN_DECISIVE 10.0  /* mean squared error ratio that decides for another temperature */
#define RC_ALIGN_INCONCLUSIVE 2.0 /* above it (and below DECISIVE): inconclusive, a warning */
#define RC_ALIGN_MSE_FLOOR 1e-4 /* the declared hypothesis fits within (0.01 nat)^2: nothing to decide */
#define RC_ALIGN_TOP 16         /* a sampled token ranks among the model's top 16 ... */
#define RC_ALIGN_TOP_SAME 0.30  /* ... for at least this share of this model's sampled tokens */
#define RC_ALIGN_TOP_OTHER 0.10 /* below this share with a median rank past RC_ALIGN_RANK_OTHER: another tokenizer */
#define RC_ALIGN_RANK_OTHER 100

/* the first rollouts of a file, copied (at most RC_ALIGN_MAX_TOKENS response tokens) */
typedef struct {
    int64_t n;
    int32_t *tok;     /* prompt then response ids */
    float *lp;        /* logged log-prob of each response token */
    int64_t *tok_off, *lp_off; /* [n + 1] */
    int32_t *plen, *rlen;
    int64_t first_line; /* for messages: the file's line of rollout 0 */
} rc_align_probe;
rc_status rc_align_probe_take(const rc_rollout_set *c, rc_align_probe *p);
void rc_align_probe_free(rc_align_probe *p);

typedef struct {
    int64_t tokens;           /* compared */
    double t_declared;        /* 1 for raw log-probs, else the stated temperature */
    double mse_declared;      /* mean (logged - log_softmax(logits / t_declared))^2 */
    double t_fit, mse_fit;    /* the least-squares temperature and its error */
    double median_rank;       /* of the logged tokens in the model's distribution (0: the top token) */
    double frac_top;          /* share ranked < RC_ALIGN_TOP */
    const char *decision;     /* "declared", "temperature", "renormalised", "tokenizer", "inconclusive", "skipped" */
} rc_align_result;

/* Run the hypotheses on p with model m on backend be with numerics num (the
 * trainer's, at temperature 1: its log-probs at every logged position). raw: the log-probs are
 * declared raw (temperature 1), else processed at temperature t (given: the
 * file or the command line stated it). truncating: top-k / top-p declared
 * (the temperature is not fitted: score.c's checks cover it). RC_ERR_FORMAT
 * "PATH: ..." when another temperature or tokenizer is decisive; a warning
 * into *notes when inconclusive. */
rc_status rc_align_hypotheses(const rc_model *m, rc_backend *be, const rc_numerics *num, const rc_align_probe *p,
                              const char *path, bool raw, double t, bool t_given, bool truncating, rc_align_result *out,
                              rc_score_align *notes);

#endif
