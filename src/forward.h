/* The forward pass, written once against rc_backend, and the two ways
 * ratiocheck drives it: a full forward over whole sequences (how a trainer
 * re-scores) and KV-cached decoding (prefill, then one token per step for the
 * whole batch, how a sampler generates). */
#ifndef RC_FORWARD_H
#define RC_FORWARD_H

#include <stdint.h>

#include "backend.h"
#include "model.h"

typedef struct {
    const rc_model *model;
    rc_backend *be;
    rc_kv_cache kv;
    /* scratch activations, sized for max_rows packed rows */
    int64_t max_rows;
    float *x, *h, *qkv, *att, *mlp_a, *mlp_b, *tmp, *logits;
    int64_t logit_rows; /* rows of logits computed per chunk */
} rc_engine;

/* Create an engine for up to n_slots sequences of up to max_len tokens and
 * up to max_rows packed rows per call. */
rc_status rc_engine_create(const rc_model *m, rc_backend *be, int64_t n_slots, int64_t max_len,
                           int64_t max_rows, rc_engine **out);
void rc_engine_free(rc_engine *e);

/* Run the model on new tokens for a set of sequences (their earlier tokens
 * must already be in the cache). For each packed row r listed in out_rows
 * (n_out of them), the next-token log-probs: full vectors into full_out
 * [n_out, V] (may be NULL) and/or the log-prob of targets[i] into target_out[i]
 * (both may be NULL). */
rc_status rc_engine_step(rc_engine *e, const int64_t *slots, const int64_t *starts,
                         const int64_t *n_new, int64_t n_seq, const int32_t *tokens,
                         const int64_t *out_rows, int64_t n_out, float *full_out,
                         const int32_t *targets, float *target_out);

/* Full forward of n_seq sequences (lens[b] tokens each, tokens packed) in one
 * batched pass from an empty cache; full_out [sum(lens), V] gets the
 * log-probs at every position. */
rc_status rc_full_forward(rc_engine *e, const int32_t *tokens, const int64_t *lens, int64_t n_seq,
                          float *full_out);

#endif
