/* The rollout harness: sample with KV-cached decoding, re-score with one
 * batched full forward per length, optionally re-score at a reference
 * precision, and collect everything into rc_results. */
#ifndef RC_ROLLOUT_H
#define RC_ROLLOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "results.h"
#include "sampler.h"

#define RC_MAX_LENS 32

typedef struct {
    /* prompts (token ids), n_prompts of them, padded with -1 to prompt_max */
    int64_t n_prompts, prompt_max;
    const int32_t *prompt_tokens;
    const int32_t *prompt_len;
    int64_t samples;       /* per prompt */
    int64_t batch;         /* sequences decoded together */
    int64_t prefill_chunk; /* the sampler builds each prompt's KV cache in calls of at
                              most this many tokens (0: the whole prompt in one call) */
    int64_t forward_batch; /* sequences per full forward (0: all) */
    int64_t forward_chunk; /* the trainer's forward in calls of at most this many tokens per
                              sequence through the KV cache (0: one call) */
    int n_lens;
    int64_t lens[RC_MAX_LENS]; /* ascending */
    uint64_t seed;
    rc_sampling sampling;
    bool stop_at_eos;
    int reference;         /* 0: none, 32: fp32 invariant engine, 64: float64 forward */
    rc_stat_params stat;   /* thresholds of the statistics (zeroed: the defaults) */
    rc_numerics num;       /* the sampler's: cached generation (and both paths unless `trainer`) */
    /* the trainer's side (--trainer): when set, the full forward re-scores
     * with these numerics, on trainer_be (NULL: the sampler's backend) */
    bool trainer;
    rc_numerics num_trainer;
    rc_backend *trainer_be;
    /* ratiocheck trace: every engine of the run but the fp32 reference gets
     * this hook (side 0: the cached generation, 1: the full forward; seq0:
     * the sequence in cache slot 0 of each call). NULL: no capture. */
    rc_capture_fn capture;
    void *capture_ctx;
    /* replay only the decode batches and forward groups that hold a sequence
     * with replay_only[s] set ([S], NULL: all); the others are left empty
     * (no valid tokens). Each group is the run's, so its results are too. */
    const bool *replay_only;
    /* replay: feed these tokens instead of sampling ([S, forced_len], -1
     * padded; forced_valid[S] valid tokens each), S = n_prompts x samples */
    const int32_t *forced_tokens;
    const int32_t *forced_valid;
    int64_t forced_len;
    /* ratiocheck score: the sampler's log-probs as its engine logged them
     * ([S, forced_len], with forced_tokens): no cached generation runs, the
     * generation log-probs are these */
    const float *given_logprobs;
    /* ratiocheck score, processed log-probs with top-k / top-p: the trainer's
     * (and the fp32 reference's) log-prob of each token is under the
     * distribution `sampling` keeps, renormalised (rc_truncated_logprob); the
     * tokens it removes are counted in out->trainer_outside_kept (longest
     * length). The fp64 reference is refused. */
    bool trainer_truncates;
    /* --distribution (docs/statistics.md "Distribution"): per token of every length, the
     * two sides' whole next-token distributions compared (rc_dist_row) into
     * out->lens[i].dist_*. The sampler's rows are replayed after the
     * generation (the same decode batches and steps, every decode batch's
     * cache kept: an engine of n_prompts x samples slots) into a buffer of
     * dist_window positions of every sequence (0: as many as
     * RC_DIST_BUDGET_BYTES holds, at least 1), and each window's trainer rows
     * come from the length's full forward, run as its re-scoring runs (the
     * first window's is the re-scoring itself; each further one repeats the
     * forward), so no more than one window of full rows is ever held. Each
     * replayed row's token log-prob must equal the generation's, and each
     * repeated forward's the re-scoring's, bit for bit (else RC_ERR_INTERNAL).
     * Nothing is computed without a sampler engine (given_logprobs) or with
     * a chunked trainer forward (forward_chunk > 0): dist_* stay NULL. */
    bool distribution;
    int64_t dist_window;
    /* tests (tools/checks/dist_ref.py): every compared pair written here, or NULL.
     * A record, little-endian: i64 L, sequence, position, V; f64 kl, tv;
     * i64 top1 (1 / 0); f32 the sampler's row [V]; f32 the trainer's [V] */
    FILE *dist_dump;
} rc_rollout_cfg;
#define RC_DIST_BUDGET_BYTES ((int64_t)512 << 20) /* the sampler rows of one window */

/* Progress: phase is "generate", "forward L=..", "reference fp32|fp64"; frac
 * the share of the run's work done (tokens weighted by their phase's cost),
 * tokens the tokens done in every phase so far. */
typedef void (*rc_progress_fn)(void *ctx, const char *phase, double frac, int64_t tokens);

/* Runs the check. be computes both paths; ref_be (invariant kernels) the
 * reference pass when cfg->reference_fp32. Fills everything in out except
 * the settings strings, and computes the statistics. */
rc_status rc_run_check(const rc_model *m, rc_backend *be, rc_backend *ref_be, const rc_rollout_cfg *cfg,
                       rc_progress_fn progress, void *progress_ctx, volatile int *interrupted,
                       rc_results *out);

/* An engine a run creates (rc_engine_create's numerics, kernels and sizes) and the phases it lives through:
 * the device memory of a run is, on each GPU, the most that the engines of one phase hold together. */
enum { RC_PHASE_GENERATE = 1, RC_PHASE_FORWARD = 2, RC_PHASE_REFERENCE = 4 };
typedef struct {
    rc_numerics num;
    rc_kernels kernels;
    int64_t n_slots, max_len, max_rows;
    unsigned phases; /* RC_PHASE_* bits */
} rc_engine_shape;
#define RC_RUN_MAX_ENGINES 4

/* The engines rc_run_check creates for cfg (the sampler's kernels, the trainer's) into out[RC_RUN_MAX_ENGINES]:
 * how many (0 for a cfg it refuses). */
int rc_run_engine_shapes(const rc_model *m, const rc_rollout_cfg *cfg, rc_kernels sampler_k, rc_kernels trainer_k,
                         rc_engine_shape *out);

#endif
