/* Seeded sampling from a next-token distribution, with HF's temperature /
 * top-k / top-p semantics, and the two log-probs PPO code records. */
#ifndef RC_SAMPLER_H
#define RC_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rc_rng;

/* A stream that depends only on (seed, a, b): a sequence's samples do not
 * depend on which batch it runs in. */
void rc_rng_seed(rc_rng *r, uint64_t seed, uint64_t a, uint64_t b);
uint64_t rc_rng_next(rc_rng *r);
double rc_rng_uniform(rc_rng *r); /* [0, 1), 53 bits */

typedef struct {
    int64_t top_k;  /* 0: off */
    double top_p;   /* 1.0: off */
} rc_sampling;

/* Sample from the log-probs lp[V] of the temperature-scaled distribution
 * after top-k then top-p filtering (transformers' TopKLogitsWarper keeps
 * every token tied with the k-th; TopPLogitsWarper keeps the smallest set of
 * most likely tokens whose mass reaches top_p, at least one). Returns the
 * token; *lp_processed gets its log-prob under the renormalised filtered
 * distribution. `work` needs 2*V floats, 8-byte aligned (it also holds V
 * doubles: malloc / rc_calloc memory). *entropy (unless NULL) gets
 * rc_entropy(lp, V), from the same pass over the exps when nothing is
 * filtered. */
int32_t rc_sample(const float *lp, int64_t V, const rc_sampling *sp, rc_rng *rng, float *work,
                  float *lp_processed, double *entropy);

/* The processed (top-k / top-p renormalised) log-prob of a given token;
 * -inf when the filters remove it. *entropy as rc_sample's; `work` as rc_sample's (2*V floats). */
float rc_processed_logprob(const float *lp, int64_t V, const rc_sampling *sp, int32_t tok, float *work,
                           double *entropy);

/* The trainer's side of processed log-probs (ratiocheck score): the log-prob
 * of tok under the distribution the sampler's processing produced from lp
 * (the temperature-scaled log-probs): top-k, then top-p over the top-k
 * survivors (the same mask as rc_sample), renormalised over the kept tokens.
 * A token the mask removes could not have been sampled from lp: *outside is
 * set and the log-prob is renormalised over the kept set widened to it (every
 * token at least as likely as tok), finite and continuous across the cut.
 * `work` needs 2*V floats. */
float rc_truncated_logprob(const float *lp, int64_t V, const rc_sampling *sp, int32_t tok, float *work,
                           bool *outside);

/* The entropy -sum_i p_i log p_i (nats) of the distribution with log-probs
 * lp[V], p_i = exp(lp_i) as given (not renormalised), each term and the sum
 * in double; tokens with lp = -inf add nothing. */
double rc_entropy(const float *lp, int64_t V);

#endif
