/* ratiocheck score: re-score rollouts a user's own engine logged (README
 * "Check your own engine"). The logged tokens and log-probs stand for the
 * sampler; the trainer's full forward and the reference run as in a normal
 * run (rc_run_check with cfg.given_logprobs).
 *
 * Layout: rc_results holds prompts [n, longest prompt] and generated tokens
 * [n, longest response], padded with -1 / NaN: every rollout is its own
 * prompt (samples = 1, sequence i = rollout i in file order) and its response
 * length is its gen_valid (shorter ones are masked, as --stop-at-eos masks).
 * The padded tables are capped at RC_SCORE_MAX_PADDED cells each. A file of
 * more than one chunk (RC_SCORE_CHUNK_ROLLOUTS, --chunk-rollouts) is scored
 * chunk by chunk, each chunk's tables padded to the whole file's widths
 * (rc_score_inputs_build_padded), its statistics fed to rc_stats_acc and its
 * rows to rc_h5_stream (src/cli/cmd_score.c, score_chunks). */
#ifndef RC_SCORE_H
#define RC_SCORE_H

#include <stdint.h>

#include "results.h"
#include "rollouts_in.h"

#define RC_SCORE_MAX_PADDED ((int64_t)1 << 28)

typedef struct {
    int64_t n, prompt_max, resp_max;
    int32_t *prompt_tokens; /* [n, prompt_max], -1 padding */
    int32_t *prompt_len;    /* [n] */
    int32_t *tokens;        /* [n, resp_max], -1 padding */
    int32_t *valid;         /* [n] */
    float *logprobs;        /* [n, resp_max], NaN padding */
    float *trainer_logprobs; /* [n, resp_max], NaN padding: the file's trainer_logprobs, or NULL */
} rc_score_inputs;

rc_status rc_score_inputs_build(const rc_rollout_set *s, const char *path, rc_score_inputs *in);
/* the same padded to P prompt and G response columns (at least the set's
 * longest: a chunk padded to the whole file's widths) */
rc_status rc_score_inputs_build_padded(const rc_rollout_set *s, const char *path, int64_t P, int64_t G,
                                       rc_score_inputs *in);
/* score in chunks (README "Check your own engine"): rollouts per chunk by
 * default, and the padded cells (rollouts x (longest prompt + longest
 * response)) a chunk may hold */
#define RC_SCORE_CHUNK_ROLLOUTS 4096
/* keep the heap from growing chunk after chunk (glibc: a fixed mmap and
 * trim threshold, so every large buffer freed goes back; elsewhere nothing) */
void rc_score_steady_heap(void);
#define RC_SCORE_CHUNK_CELLS ((int64_t)1 << 22)
void rc_score_inputs_free(rc_score_inputs *in);

/* Both sides logged (the file's trainer_logprobs, no model): a chunk's
 * results as rc_run_check would lay them out for cfg's lengths (every
 * rollout its own prompt, responses cut at the longest length), the
 * sampler's log-probs as logprob_gen and the trainer's as every length's
 * logprob_fwd and as logprob_trainer; no entropy, no reference, no
 * statistics (the caller computes them). */
rc_status rc_score_logged_results(const rc_score_inputs *in, int n_lens, const int64_t *lens,
                                  const rc_stat_params *stat, rc_results *out);
/* With --model as well: r holds ratiocheck's forward of the chunk in its
 * lengths; its longest length's log-probs move to r->logprob_ratiocheck,
 * the file's trainer_logprobs become r->logprob_trainer and every length's
 * logprob_fwd (so the statistics compare the two logged sides), and every
 * valid token's three values are fed to tw. */
rc_status rc_score_adopt_trainer(const rc_score_inputs *in, rc_results *r, rc_threeway_acc *tw);

/* What the alignment checks measured (over the rollouts' tokens t < the
 * longest re-scored length). */
#define RC_SCORE_SHIFT_ROLLOUTS 64 /* the shift check looks at the first rollouts */
typedef struct {
    double shift_mad[3];      /* mean |logged - trainer| with the logged values moved by -1, 0, +1 tokens */
    int64_t shift_count[3];
    int64_t tokens;           /* tokens compared below */
    double slope;             /* least squares: logged ~ a + slope * trainer */
    double mean_diff;         /* mean(logged - trainer) */
    double frac_higher;       /* of the tokens whose two values differ, the fraction logged higher */
    char warnings[4][320];
    int n_warnings;
} rc_score_align;

/* The checks after the trainer's forward (README "Check your own engine"):
 * RC_ERR_FORMAT "FILE: ..." when the logged log-probs fit the trainer's
 * better shifted by one token, scale unlike log-probs at the stated
 * temperature, sit above the trainer's as a top-k / top-p renormalisation
 * does when none was declared, or hold tokens the declared top-k / top-p
 * removes (r->trainer_outside_kept: at least 2 and over 1% of the tokens);
 * warnings (no error) for the milder cases. */
rc_status rc_score_check_alignment(const rc_rollout_set *s, const char *path, const rc_results *r, rc_score_align *a);

/* A tokenizer mismatch: the response text a record carries (the first
 * RC_ROLLOUT_TEXT_KEPT rollouts) against its ids decoded with the model's
 * tokenizer (skipping special tokens, as the engines' text does). Every one
 * compared differs (at least 2): RC_ERR_FORMAT naming the first; some differ:
 * a warning into *a (stop strings and detokenizer settings can change the
 * text of a few); *compared / *differ get the counts. Call before the compact
 * arrays are freed. */
struct rc_tokenizer;
rc_status rc_score_check_text(const rc_rollout_set *s, const char *path, const struct rc_tokenizer *tok,
                              rc_score_align *a, int64_t *compared, int64_t *differ);

#endif
