#include "rollout.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "forward64.h"
#include "routing_rec.h"
#include "util.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool is_eos(const rc_config *c, int32_t tok)
{
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == tok)
            return true;
    return false;
}

/* A log-prob that is not finite means the row's logits were not (NaN, or an
 * Inf from an overflow: then the log-sum-exp, and with it every log-prob of
 * the row, is not finite either), and no ratio can be computed from it: the
 * run stops (exit 5: the model is valid but does not run in this dtype).
 * Prompt and sample count from 1, like every prompt number in messages;
 * position is the generated token, 1 for the first. */
static rc_status nonfinite_logits(const rc_results *out, int64_t sq, int64_t t, const char *where,
                                  rc_dtype dt, float lp)
{
    return rc_errorf(RC_ERR_UNSUPPORTED,
                     "prompt %lld, sample %lld, position %lld: non-finite logits in %s (log-prob %g; "
                     "model weights or activations overflowed in %s)",
                     (long long)out->seq_prompt[sq] + 1, (long long)out->seq_sample[sq] + 1, (long long)t + 1,
                     where, (double)lp, rc_dtype_str(dt));
}

typedef struct {
    const rc_rollout_cfg *cfg;
    rc_progress_fn progress;
    void *pctx;
    int64_t tokens;           /* tokens done, every phase */
    double done, total;       /* work done / to do: tokens weighted by their phase's cost */
    volatile int *interrupted;
    rc_routing_rec *routing;  /* a MoE model's routing recorder, else NULL */
} run_ctx;

/* The cost of a token in each phase relative to a generated one, for the
 * progress fraction (measured on the bundled model, default check, bf16
 * engine: 1.4 s for 4200 generated tokens = 3.3e-4 s each; re-scoring 1.9 s
 * for 9240 = 2.1e-4 s (0.6); the fp32 reference 0.8 s for 4200 (0.6), the
 * fp64 one 8.9 s (6.4)) */
static double phase_weight(const char *phase)
{
    return !strncmp(phase, "generate", 8) || !strcmp(phase, "distribution") ? 1.0
           : !strcmp(phase, "reference fp64")                               ? 6.4
                                                                             : 0.6;
}

static rc_status tick(run_ctx *rc, const char *phase, int64_t n)
{
    rc->tokens += n;
    rc->done += phase_weight(phase) * (double)n;
    if (rc->progress)
        rc->progress(rc->pctx, phase, rc->total > 0 ? rc->done / rc->total : 1.0, rc->tokens);
    if (rc->interrupted && *rc->interrupted)
        return rc_errorf(RC_ERR_INTERRUPTED, "interrupted");
    return RC_OK;
}

/* Cached decoding: prefill each batch of prompts, then one token per step. */
/* The prompts of sequences b0 .. b0 + nb - 1 into the cache (slot slot0 + i
 * for sequence b0 + i), and each one's next-token log-probs into lp[i, :].
 * slots / starts / n_new / rows / tok are the caller's scratch. In one packed
 * call, or with --sampler prefill-chunk=C in calls of C tokens per prompt
 * (chunk k covers prompt positions [kC, (k+1)C), every prompt that still has
 * tokens takes part), as a chunked-prefill engine builds its cache; the
 * log-probs of a prompt come from the call with its last token. */
static rc_status prefill(rc_engine *e, const rc_rollout_cfg *cfg, const rc_results *out, int64_t b0, int64_t nb,
                         int64_t slot0, int64_t *slots, int64_t *starts, int64_t *n_new, int64_t *rows,
                         int64_t *owner, int32_t *tok, float *lp, float *chunk_lp)
{
    const int64_t V = e->model->cfg.vocab;
    const int64_t C = cfg->prefill_chunk > 0 && chunk_lp ? cfg->prefill_chunk : cfg->prompt_max;
    for (int64_t c0 = 0; c0 < cfg->prompt_max; c0 += C) {
        int64_t n = 0, R = 0, n_out = 0;
        for (int64_t i = 0; i < nb; i++) {
            const int64_t p = out->seq_prompt[b0 + i], plen = cfg->prompt_len[p];
            if (plen <= c0)
                continue;
            const int64_t k = plen - c0 < C ? plen - c0 : C;
            slots[n] = slot0 + i;
            starts[n] = c0;
            n_new[n] = k;
            memcpy(tok + R, cfg->prompt_tokens + p * cfg->prompt_max + c0, (size_t)k * sizeof *tok);
            R += k;
            if (c0 + k == plen) { /* this call holds the prompt's last token (owner: its batch index) */
                rows[n_out] = R - 1;
                owner[n_out++] = i;
            }
            n++;
        }
        if (n == 0)
            break;
        float *dst = C >= cfg->prompt_max ? lp : chunk_lp;
        RC_TRY(rc_engine_step(e, slots, starts, n_new, n, tok, rows, n_out, dst, NULL, NULL));
        if (dst != lp)
            for (int64_t j = 0; j < n_out; j++)
                memcpy(lp + owner[j] * V, chunk_lp + j * V, (size_t)V * sizeof *lp);
    }
    for (int64_t i = 0; i < nb; i++)
        slots[i] = slot0 + i; /* the decode steps' slots */
    return RC_OK;
}

/* cfg->replay_only: does the group of sequences [b0, b0 + nb) hold one? */
static bool group_wanted(const rc_rollout_cfg *cfg, int64_t b0, int64_t nb)
{
    for (int64_t i = 0; cfg->replay_only && i < nb; i++)
        if (cfg->replay_only[b0 + i])
            return true;
    return !cfg->replay_only;
}

static rc_status generate(run_ctx *rc, rc_engine *e, rc_results *out)
{
    const rc_rollout_cfg *cfg = rc->cfg;
    const rc_config *mc = &e->model->cfg;
    const int64_t V = mc->vocab, G = out->gen_len, S = out->n_seq;
    const int64_t B = cfg->batch;
    float *lp = NULL, *work = NULL, *step_lpp = NULL, *chunk_lp = NULL;
    double *step_ent = NULL;
    int64_t *owner = NULL, *slots = NULL, *starts = NULL, *n_new = NULL, *rows = NULL, *ids = NULL;
    int32_t *tok = NULL, *step_tok = NULL;
    const int n_thr = omp_get_max_threads();
    rc_rng *rng = NULL;
    rc_status s = RC_OK;
    if ((s = rc_calloc((void **)&lp, B * V, sizeof *lp, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&work, 2 * V * n_thr, sizeof *work, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&step_lpp, B, sizeof *step_lpp, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&step_ent, B, sizeof *step_ent, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&step_tok, B, sizeof *step_tok, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&slots, B, sizeof *slots, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&starts, B, sizeof *starts, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&n_new, B, sizeof *n_new, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&rows, B, sizeof *rows, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&ids, B, sizeof *ids, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&owner, B, sizeof *owner, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&rng, B, sizeof *rng, "generation")) != RC_OK ||
        (s = rc_calloc((void **)&tok, B * cfg->prompt_max + B, sizeof *tok, "generation")) != RC_OK ||
        (cfg->prefill_chunk > 0 && cfg->prefill_chunk < cfg->prompt_max &&
         (s = rc_calloc((void **)&chunk_lp, B * V, sizeof *chunk_lp, "generation")) != RC_OK))
        goto done;
    for (int64_t b0 = 0; b0 < S && s == RC_OK; b0 += B) {
        const int64_t nb = S - b0 < B ? S - b0 : B;
        if (!group_wanted(cfg, b0, nb))
            continue;
        /* prefill: every prompt of the batch, packed (in chunks with prefill_chunk) */
        for (int64_t i = 0; i < nb; i++) {
            const int64_t sq = b0 + i, p = out->seq_prompt[sq];
            ids[i] = sq;
            rc_rng_seed(&rng[i], cfg->seed, (uint64_t)p, (uint64_t)out->seq_sample[sq]);
            out->gen_valid[sq] = (int32_t)G;
        }
        e->hook.seq0 = b0; /* slot i holds sequence b0 + i */
        rc_routing_rec_attach(rc->routing, e, 0, b0);
        if (s == RC_OK)
            s = prefill(e, cfg, out, b0, nb, 0, slots, starts, n_new, rows, owner, tok, lp, chunk_lp);
        int64_t active = nb;
        for (int64_t step = 0; step < G && s == RC_OK; step++) {
            /* sample the step's token for every active sequence (row i of lp),
             * in parallel when the vocabulary makes it worth it: each sequence
             * has its own generator, so the tokens do not depend on threads */
#pragma omp parallel for schedule(static) if (active * V >= ((int64_t)1 << 20))
            for (int64_t i = 0; i < active; i++) {
                const int64_t sq = ids[i];
                float *w = work + (size_t)omp_get_thread_num() * (size_t)(2 * V);
                if (cfg->forced_tokens && step >= cfg->forced_valid[sq]) { /* the replayed rollout ended */
                    step_tok[i] = -1;
                    continue;
                }
                /* with the token: the entropy of the distribution its log-prob is
                 * from (temperature-scaled, full vocabulary: as logprob_gen) */
                if (cfg->forced_tokens) { /* replay a stored rollout */
                    step_tok[i] = cfg->forced_tokens[sq * cfg->forced_len + step];
                    step_lpp[i] =
                        rc_processed_logprob(lp + i * V, V, &cfg->sampling, step_tok[i], w, &step_ent[i]);
                } else {
                    step_tok[i] =
                        rc_sample(lp + i * V, V, &cfg->sampling, &rng[slots[i]], w, &step_lpp[i], &step_ent[i]);
                }
            }
            int64_t next = 0;
            for (int64_t i = 0; i < active; i++) {
                const int64_t sq = ids[i];
                const int32_t t = step_tok[i];
                const float lpp = step_lpp[i];
                if (t < 0) { /* the replayed rollout ended here */
                    out->gen_valid[sq] = (int32_t)step;
                    continue;
                }
                if (!isfinite(lp[i * V + t])) {
                    s = nonfinite_logits(out, sq, step, "the cached generation", e->num.dt, lp[i * V + t]);
                    break;
                }
                out->gen_tokens[sq * G + step] = t;
                out->logprob_gen[sq * G + step] = lp[i * V + t];
                out->logprob_gen_processed[sq * G + step] = lpp;
                out->entropy_gen[sq * G + step] = (float)step_ent[i];
                if (cfg->stop_at_eos && is_eos(mc, t)) {
                    out->gen_valid[sq] = (int32_t)(step + 1);
                    continue; /* this sequence is done */
                }
                /* feed the token back in the next step (compacted) */
                slots[next] = slots[i];
                ids[next] = sq;
                starts[next] = cfg->prompt_len[out->seq_prompt[sq]] + step;
                n_new[next] = 1;
                tok[next] = t;
                rows[next] = next;
                next++;
            }
            if (s != RC_OK)
                break;
            active = next;
            s = tick(rc, "generate", nb);
            if (s != RC_OK || step + 1 == G || active == 0)
                break;
            s = rc_engine_step(e, slots, starts, n_new, active, tok, rows, active, lp, NULL, NULL);
        }
    }
done:
    free(lp);
    free(chunk_lp);
    free(owner);
    free(work);
    free(step_lpp);
    free(step_ent);
    free(step_tok);
    free(slots);
    free(starts);
    free(n_new);
    free(rows);
    free(ids);
    free(tok);
    free(rng);
    return s;
}

/* ratiocheck score: the logged tokens and log-probs stand for the sampler */
static rc_status given(run_ctx *rc, rc_results *out)
{
    const rc_rollout_cfg *cfg = rc->cfg;
    const int64_t G = out->gen_len;
    for (int64_t sq = 0; sq < out->n_seq; sq++) {
        const int64_t valid = cfg->forced_valid[sq] < G ? cfg->forced_valid[sq] : G;
        out->gen_valid[sq] = (int32_t)valid;
        for (int64_t t = 0; t < valid; t++) {
            out->gen_tokens[sq * G + t] = cfg->forced_tokens[sq * cfg->forced_len + t];
            out->logprob_gen[sq * G + t] = out->logprob_gen_processed[sq * G + t] =
                cfg->given_logprobs[sq * cfg->forced_len + t];
        }
    }
    return tick(rc, "generate", 0);
}

/* The trainer's forward of one group in calls of C tokens per sequence
 * through the KV cache (--trainer prefill-chunk=C): call k computes tokens
 * [kC, (k+1)C) of every sequence that has them, attending to the earlier
 * calls' keys in the cache. The packed group (tok, n_new[nb], its output rows
 * and targets as one call would take them) is cut into those calls; lp gets
 * each output's log-prob in the one-call order. */
static rc_status step_chunked(rc_engine *e, int64_t C, int64_t nb, const int64_t *n_new, const int32_t *tok,
                              const int64_t *rows, const int32_t *targets, int64_t n_out, float *lp)
{
    int64_t *sl = NULL, *st = NULL, *nn = NULL, *r2 = NULL, *row0 = NULL, *map = NULL;
    int32_t *t2 = NULL, *g2 = NULL;
    float *lp2 = NULL;
    int64_t maxn = 0, R = 0;
    for (int64_t i = 0; i < nb; i++) {
        maxn = n_new[i] > maxn ? n_new[i] : maxn;
        R += n_new[i];
    }
    rc_status s;
    if ((s = rc_calloc((void **)&sl, nb, sizeof *sl, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&st, nb, sizeof *st, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&nn, nb, sizeof *nn, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&row0, nb + 1, sizeof *row0, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&r2, n_out + 1, sizeof *r2, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&map, n_out + 1, sizeof *map, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&g2, n_out + 1, sizeof *g2, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&lp2, n_out + 1, sizeof *lp2, "chunked forward")) != RC_OK ||
        (s = rc_calloc((void **)&t2, R + 1, sizeof *t2, "chunked forward")) != RC_OK)
        goto done;
    for (int64_t i = 0; i < nb; i++)
        row0[i + 1] = row0[i] + n_new[i];
    for (int64_t c0 = 0; c0 < maxn && s == RC_OK; c0 += C) {
        int64_t k = 0, R2 = 0, o2 = 0;
        for (int64_t i = 0; i < nb; i++) {
            if (n_new[i] <= c0)
                continue;
            const int64_t n = n_new[i] - c0 < C ? n_new[i] - c0 : C;
            sl[k] = i;
            st[k] = c0;
            nn[k] = n;
            memcpy(t2 + R2, tok + row0[i] + c0, (size_t)n * sizeof *t2);
            /* this sequence's outputs whose row falls in the chunk (rows ascend within a sequence) */
            for (int64_t j = 0; j < n_out; j++)
                if (rows[j] >= row0[i] + c0 && rows[j] < row0[i] + c0 + n) {
                    r2[o2] = R2 + rows[j] - row0[i] - c0;
                    g2[o2] = targets[j];
                    map[o2++] = j;
                }
            R2 += n;
            k++;
        }
        s = rc_engine_step(e, sl, st, nn, k, t2, r2, o2, NULL, g2, lp2);
        for (int64_t j = 0; j < o2 && s == RC_OK; j++)
            lp[map[j]] = lp2[j];
    }
done:
    free(sl);
    free(st);
    free(nn);
    free(r2);
    free(row0);
    free(map);
    free(t2);
    free(g2);
    free(lp2);
    return s;
}

/* --distribution (cfg->distribution): the sampler's replay and the window
 * of its full log-prob rows, and what the trainer's target hook needs to
 * place each LM-head row. */
typedef struct {
    rc_engine *se;              /* the sampler's replay engine (n_seq slots) */
    int64_t B, w, t0, t1;       /* decode batch; positions per window; this window [t0, t1) */
    float *buf;                 /* [S][w][V] the sampler's rows of the window */
    float *lp;                  /* [S][V] each decode batch's rows of its next step */
    int64_t *slots, *starts, *n_new, *rows, *ids; /* [S]: decode batch b's at its first sequence */
    int32_t *tok;               /* [S] */
    int64_t *step, *active;     /* per decode batch: the next step, its sequences (step -1: not prefilled) */
    int64_t *owner;             /* prefill scratch [B] */
    int32_t *ptok;              /* [B * prompt_max + B] */
    float *chunk_lp;            /* [B][V] with prefill_chunk, else NULL */
    /* the trainer's forward of one length (rescore sets them) */
    const int32_t *targets;     /* rescore's targets: the hook's row index is the offset into them */
    int64_t *code;              /* [rows] sq * L + t of each output row */
    int64_t L;
    double *kl, *tv;            /* the length's per-token arrays */
    int32_t *top1;
    float *rows_buf;            /* the trainer engine's chunk rows [logit_rows][V] */
    FILE *dump;                 /* cfg->dist_dump */
    bool dump_failed;
} dist_ctx;

/* One batched full forward over prompt + the first L generated tokens of
 * every sequence (in groups of forward_batch; in calls of chunk tokens per
 * sequence when chunk > 0); dst[s * L + t] gets the log-prob of generated
 * token t (NaN where not valid). With dc (--distribution, chunk 0), the
 * engine's target hook (dist_targets) gets each row's (sequence, position). */
static rc_status rescore(run_ctx *rc, rc_engine *e, const rc_results *out, int64_t L, int64_t fb, int64_t chunk,
                         const char *phase, float *dst, double *dst64, int64_t dst_stride, dist_ctx *dc)
{
    const rc_rollout_cfg *cfg = rc->cfg;
    const int64_t S = out->n_seq, G = out->gen_len;
    int64_t *slots = NULL, *starts = NULL, *n_new = NULL, *rows = NULL, *code = NULL;
    int32_t *tok = NULL, *targets = NULL;
    float *lp = NULL;
    rc_status s = RC_OK;
    const int64_t maxrows = fb * (cfg->prompt_max + L);
    if ((s = rc_calloc((void **)&slots, fb, sizeof *slots, "re-scoring")) != RC_OK ||
        (s = rc_calloc((void **)&starts, fb, sizeof *starts, "re-scoring")) != RC_OK ||
        (s = rc_calloc((void **)&n_new, fb, sizeof *n_new, "re-scoring")) != RC_OK ||
        (s = rc_calloc((void **)&rows, fb * L + 1, sizeof *rows, "re-scoring")) != RC_OK ||
        (s = rc_calloc((void **)&targets, fb * L + 1, sizeof *targets, "re-scoring")) != RC_OK ||
        (s = rc_calloc((void **)&lp, fb * L + 1, sizeof *lp, "re-scoring")) != RC_OK ||
        (s = rc_calloc((void **)&tok, maxrows, sizeof *tok, "re-scoring")) != RC_OK ||
        (dc && (s = rc_calloc((void **)&code, fb * L + 1, sizeof *code, "re-scoring")) != RC_OK))
        goto done;
    if (dc) {
        dc->targets = targets;
        dc->code = code;
        dc->L = L;
    }
    for (int64_t sq = 0; sq < S; sq++)
        for (int64_t t = 0; t < L; t++) {
            if (dst)
                dst[sq * dst_stride + t] = NAN;
            if (dst64)
                dst64[sq * dst_stride + t] = NAN;
        }
    for (int64_t b0 = 0; b0 < S && s == RC_OK; b0 += fb) {
        const int64_t nb = S - b0 < fb ? S - b0 : fb;
        int64_t R = 0, n_out = 0;
        if (!group_wanted(cfg, b0, nb))
            continue;
        for (int64_t i = 0; i < nb; i++) {
            const int64_t sq = b0 + i, p = out->seq_prompt[sq];
            const int64_t P = cfg->prompt_len[p];
            const int64_t valid = out->gen_valid[sq] < L ? out->gen_valid[sq] : L;
            slots[i] = i;
            starts[i] = 0;
            n_new[i] = P + valid;
            memcpy(tok + R, cfg->prompt_tokens + p * cfg->prompt_max, (size_t)P * sizeof *tok);
            memcpy(tok + R + P, out->gen_tokens + sq * G, (size_t)valid * sizeof *tok);
            for (int64_t t = 0; t < valid; t++) {
                rows[n_out] = R + P + t - 1; /* the row that predicts generated token t */
                targets[n_out] = out->gen_tokens[sq * G + t];
                if (code)
                    code[n_out] = sq * L + t;
                n_out++;
            }
            R += n_new[i];
        }
        e->hook.seq0 = b0;
        if (dst) /* the trainer's forward (a reference pass writes dst64 only and records nothing) */
            rc_routing_rec_attach(rc->routing, e, 1, b0);
        if (chunk > 0)
            s = step_chunked(e, chunk, nb, n_new, tok, rows, targets, n_out, lp);
        else
            s = rc_engine_step(e, slots, starts, n_new, nb, tok, rows, n_out, NULL, targets, lp);
        n_out = 0;
        for (int64_t i = 0; i < nb && s == RC_OK; i++) {
            const int64_t sq = b0 + i;
            const int64_t valid = out->gen_valid[sq] < L ? out->gen_valid[sq] : L;
            for (int64_t t = 0; t < valid; t++, n_out++) {
                if (!isfinite(lp[n_out])) { /* phase: "forward L=20", "reference fp32" */
                    s = nonfinite_logits(out, sq, t, phase, e->num.dt, lp[n_out]);
                    break;
                }
                if (dst)
                    dst[sq * dst_stride + t] = lp[n_out];
                if (dst64)
                    dst64[sq * dst_stride + t] = (double)lp[n_out];
            }
        }
        if (s == RC_OK)
            s = tick(rc, phase, nb * L);
    }
done:
    if (dc)
        dc->targets = NULL;
    free(slots);
    free(starts);
    free(n_new);
    free(rows);
    free(targets);
    free(lp);
    free(tok);
    free(code);
    return s;
}

/* ratiocheck score's trainer-side top-k / top-p (cfg->trainer_truncates):
 * the engine's target hook gets each LM-head chunk's full log-prob rows */
typedef struct {
    const rc_sampling *sp;
    float *work;     /* [threads][2V]: rc_truncated_logprob's sort */
    float *rows;     /* the engine's chunk rows [logit_rows, V] */
    int64_t outside; /* targets outside the kept set */
} truncation;

static rc_status truncate_targets(void *ctx, const float *lp, int64_t n, int64_t V, const int32_t *targets,
                                  float *target_out)
{
    truncation *t = ctx;
    int64_t outside = 0;
#pragma omp parallel for reduction(+ : outside) schedule(dynamic, 1)
    for (int64_t i = 0; i < n; i++) {
        bool o;
        float *w = t->work + (int64_t)omp_get_thread_num() * 2 * V;
        target_out[i] = rc_truncated_logprob(lp + i * V, V, t->sp, targets[i], w, &o);
        outside += o;
    }
    t->outside += outside;
    return RC_OK;
}

/* e's targets through truncate_targets (nothing unless cfg->trainer_truncates) */
static rc_status truncation_attach(const rc_rollout_cfg *cfg, rc_engine *e, truncation *t)
{
    if (!cfg->trainer_truncates)
        return RC_OK;
    const int64_t V = e->model->cfg.vocab;
    free(t->rows);
    t->rows = NULL;
    t->sp = &cfg->sampling;
    if (!t->work)
        RC_TRY(rc_calloc((void **)&t->work, (int64_t)omp_get_max_threads() * 2 * V, sizeof *t->work, "top-k / top-p"));
    RC_TRY(rc_calloc((void **)&t->rows, e->logit_rows * V, sizeof *t->rows, "top-k / top-p"));
    e->target = (rc_target_hook){truncate_targets, t, t->rows};
    return RC_OK;
}

/* --distribution: the trainer's target hook. Each row's token log-prob as
 * the plain path computes it (rco_logprob_row: the same value as the row's
 * entry), and for a row in the window its agreement with the sampler's row */
static rc_status dist_targets(void *ctx, const float *lp, int64_t n, int64_t V, const int32_t *targets,
                              float *target_out)
{
    dist_ctx *d = ctx;
    if (!d->targets)
        return rc_errorf(RC_ERR_INTERNAL, "distribution: trainer rows outside a re-scoring");
    const int64_t i0 = targets - d->targets;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t j = 0; j < n; j++) {
        const float *q = lp + j * V;
        target_out[j] = q[targets[j]];
        const int64_t code = d->code[i0 + j], sq = code / d->L, t = code % d->L;
        if (t < d->t0 || t >= d->t1)
            continue;
        const rc_dist_token k = rc_dist_row(d->buf + (sq * d->w + t - d->t0) * V, q, V);
        d->kl[code] = k.kl;
        d->tv[code] = k.tv;
        d->top1[code] = k.top1 ? 1 : 0;
        if (d->dump) {
#pragma omp critical(rc_dist_dump)
            {
                const int64_t head[4] = {d->L, sq, t, V}, top1 = k.top1;
                const double kt[2] = {k.kl, k.tv};
                if (fwrite(head, sizeof head, 1, d->dump) != 1 || fwrite(kt, sizeof kt, 1, d->dump) != 1 ||
                    fwrite(&top1, sizeof top1, 1, d->dump) != 1 ||
                    fwrite(d->buf + (sq * d->w + t - d->t0) * V, sizeof(float), (size_t)V, d->dump) != (size_t)V ||
                    fwrite(q, sizeof(float), (size_t)V, d->dump) != (size_t)V)
                    d->dump_failed = true;
            }
        }
    }
    if (d->dump_failed)
        return rc_errorf(RC_ERR_IO, "distribution: cannot write the rows' dump");
    return RC_OK;
}

static void dist_free(dist_ctx *d)
{
    rc_engine_free(d->se);
    free(d->buf);
    free(d->lp);
    free(d->slots);
    free(d->starts);
    free(d->n_new);
    free(d->rows);
    free(d->ids);
    free(d->tok);
    free(d->step);
    free(d->active);
    free(d->owner);
    free(d->ptok);
    free(d->chunk_lp);
    free(d->rows_buf);
    memset(d, 0, sizeof *d);
}

/* The replay engine (the sampler's numerics, the generation's sizes but a
 * cache slot per sequence), the window's size and buffers, and every
 * length's per-token arrays (NaN / -1) */
static rc_status dist_begin(run_ctx *rc, dist_ctx *d, const rc_model *m, rc_backend *be, int64_t B, int64_t max_rows,
                            rc_results *out)
{
    const rc_rollout_cfg *cfg = rc->cfg;
    const int64_t S = out->n_seq, G = out->gen_len, V = m->cfg.vocab;
    const int64_t nbatch = (S + B - 1) / B;
    d->B = B;
    d->dump = cfg->dist_dump;
    int64_t per_pos; /* bytes of one position of every sequence */
    if (!rc_mul_i64(S, V, &per_pos) || !rc_mul_i64(per_pos, (int64_t)sizeof(float), &per_pos))
        return rc_errorf(RC_ERR_NOMEM, "distribution: %lld sequences x %lld tokens overflow", (long long)S,
                         (long long)V);
    d->w = cfg->dist_window > 0 ? cfg->dist_window : RC_DIST_BUDGET_BYTES / per_pos;
    d->w = d->w < 1 ? 1 : d->w > G ? G : d->w;
    int64_t nbuf; /* S x w <= S x G: no overflow (S <= 2^24) */
    if (!rc_mul_i64(S * d->w, V, &nbuf))
        return rc_errorf(RC_ERR_NOMEM, "distribution: %lld sequences x %lld positions x %lld tokens overflow",
                         (long long)S, (long long)d->w, (long long)V);
    RC_TRY(rc_engine_create(m, be, &cfg->num, S, cfg->prompt_max + G, max_rows, &d->se));
    RC_TRY(rc_calloc((void **)&d->buf, nbuf, sizeof *d->buf, "distribution"));
    RC_TRY(rc_calloc((void **)&d->lp, S * V, sizeof *d->lp, "distribution"));
    RC_TRY(rc_calloc((void **)&d->slots, S, sizeof *d->slots, "distribution"));
    RC_TRY(rc_calloc((void **)&d->starts, S, sizeof *d->starts, "distribution"));
    RC_TRY(rc_calloc((void **)&d->n_new, S, sizeof *d->n_new, "distribution"));
    RC_TRY(rc_calloc((void **)&d->rows, S, sizeof *d->rows, "distribution"));
    RC_TRY(rc_calloc((void **)&d->ids, S, sizeof *d->ids, "distribution"));
    RC_TRY(rc_calloc((void **)&d->tok, S, sizeof *d->tok, "distribution"));
    RC_TRY(rc_calloc((void **)&d->step, nbatch, sizeof *d->step, "distribution"));
    RC_TRY(rc_calloc((void **)&d->active, nbatch, sizeof *d->active, "distribution"));
    RC_TRY(rc_calloc((void **)&d->owner, B, sizeof *d->owner, "distribution"));
    RC_TRY(rc_calloc((void **)&d->ptok, B * cfg->prompt_max + B, sizeof *d->ptok, "distribution"));
    if (cfg->prefill_chunk > 0 && cfg->prefill_chunk < cfg->prompt_max)
        RC_TRY(rc_calloc((void **)&d->chunk_lp, B * V, sizeof *d->chunk_lp, "distribution"));
    for (int64_t b = 0; b < nbatch; b++)
        d->step[b] = -1;
    for (int i = 0; i < out->n_lens; i++) {
        rc_len_result *lr = &out->lens[i];
        const int64_t n = S * lr->len;
        RC_TRY(rc_calloc((void **)&lr->dist_kl, n, sizeof *lr->dist_kl, "distribution"));
        RC_TRY(rc_calloc((void **)&lr->dist_tv, n, sizeof *lr->dist_tv, "distribution"));
        RC_TRY(rc_calloc((void **)&lr->dist_top1, n, sizeof *lr->dist_top1, "distribution"));
        for (int64_t k = 0; k < n; k++) {
            lr->dist_kl[k] = lr->dist_tv[k] = NAN;
            lr->dist_top1[k] = -1;
        }
    }
    /* progress: the replay as a generation, each further window's forwards */
    rc->total += phase_weight("distribution") * (double)(S * G);
    for (int64_t t0 = d->w; t0 < G; t0 += d->w)
        for (int i = 0; i < out->n_lens; i++)
            if (out->lens[i].len > t0)
                rc->total += phase_weight("distribution") * (double)(S * out->lens[i].len);
    return RC_OK;
}

/* The sampler's replay up to the window's end: every decode batch as
 * generate() ran it (the same prompts, tokens, steps and active sequences,
 * in its own cache slots), each row of a position in [t0, t1) into the
 * window's buffer, its token's log-prob checked against the generation's */
static rc_status dist_replay(run_ctx *rc, dist_ctx *d, const rc_results *out)
{
    const rc_rollout_cfg *cfg = rc->cfg;
    const rc_config *mc = &d->se->model->cfg;
    const int64_t S = out->n_seq, G = out->gen_len, V = mc->vocab, B = d->B;
    for (int64_t b0 = 0, bi = 0; b0 < S; b0 += B, bi++) {
        const int64_t nb = S - b0 < B ? S - b0 : B;
        int64_t *sl = d->slots + b0, *st = d->starts + b0, *nn = d->n_new + b0, *rw = d->rows + b0;
        int64_t *ids = d->ids + b0;
        int32_t *tk = d->tok + b0;
        float *lp = d->lp + b0 * V;
        if (d->step[bi] < 0) {
            for (int64_t i = 0; i < nb; i++)
                ids[i] = b0 + i;
            RC_TRY(prefill(d->se, cfg, out, b0, nb, b0, sl, st, nn, rw, d->owner, d->ptok, lp, d->chunk_lp));
            d->step[bi] = 0;
            d->active[bi] = nb;
        }
        while (d->step[bi] < d->t1 && d->active[bi] > 0) {
            const int64_t step = d->step[bi], active = d->active[bi];
            int64_t next = 0;
            for (int64_t i = 0; i < active; i++) {
                const int64_t sq = ids[i];
                if (step >= out->gen_valid[sq]) /* the rollout ended here */
                    continue;
                const int32_t t = out->gen_tokens[sq * G + step];
                const float *row = lp + i * V;
                if (memcmp(&row[t], &out->logprob_gen[sq * G + step], sizeof(float)))
                    return rc_errorf(RC_ERR_INTERNAL,
                                     "distribution: the sampler's replay of sequence %lld, position %lld gave "
                                     "log-prob %.9g, its generation %.9g",
                                     (long long)sq, (long long)step, (double)row[t],
                                     (double)out->logprob_gen[sq * G + step]);
                if (step >= d->t0)
                    memcpy(d->buf + (sq * d->w + step - d->t0) * V, row, (size_t)V * sizeof *row);
                if (cfg->stop_at_eos && is_eos(mc, t))
                    continue;
                sl[next] = sl[i];
                ids[next] = sq;
                st[next] = cfg->prompt_len[out->seq_prompt[sq]] + step;
                nn[next] = 1;
                tk[next] = t;
                rw[next] = next;
                next++;
            }
            d->step[bi] = step + 1;
            d->active[bi] = step + 1 == G ? 0 : next;
            RC_TRY(tick(rc, "distribution", nb));
            if (d->active[bi] == 0)
                break;
            RC_TRY(rc_engine_step(d->se, sl, st, nn, next, tk, rw, next, lp, NULL, NULL));
        }
    }
    return RC_OK;
}

/* the trainer engine's target hook: dist_targets */
static rc_status dist_attach(dist_ctx *d, rc_engine *e)
{
    free(d->rows_buf);
    d->rows_buf = NULL;
    RC_TRY(rc_calloc((void **)&d->rows_buf, e->logit_rows * e->model->cfg.vocab, sizeof *d->rows_buf,
                     "distribution"));
    e->target = (rc_target_hook){dist_targets, d, d->rows_buf};
    return RC_OK;
}

/* The windows after the first: the sampler's replay, then each length that
 * reaches the window re-scored again with the hook, its token log-probs
 * checked against the re-scoring's */
static rc_status dist_windows(run_ctx *rc, dist_ctx *d, rc_engine *e, int64_t FB, rc_results *out)
{
    const int64_t S = out->n_seq, G = out->gen_len;
    float *tmp = NULL;
    RC_TRY(rc_calloc((void **)&tmp, S * G + 1, sizeof *tmp, "distribution"));
    rc_status s = RC_OK;
    for (int64_t t0 = d->w; t0 < G && s == RC_OK; t0 += d->w) {
        d->t0 = t0;
        d->t1 = t0 + d->w < G ? t0 + d->w : G;
        s = dist_replay(rc, d, out);
        for (int i = 0; i < out->n_lens && s == RC_OK; i++) {
            rc_len_result *lr = &out->lens[i];
            const int64_t L = lr->len;
            if (L <= t0)
                continue;
            d->kl = lr->dist_kl;
            d->tv = lr->dist_tv;
            d->top1 = lr->dist_top1;
            s = rescore(rc, e, out, L, FB, 0, "distribution", tmp, NULL, L, d);
            for (int64_t k = 0; k < S * L && s == RC_OK; k++)
                if (memcmp(&tmp[k], &lr->logprob_fwd[k], sizeof *tmp))
                    s = rc_errorf(RC_ERR_INTERNAL,
                                  "distribution: the trainer's forward at L=%lld repeated gave log-prob %.9g at "
                                  "sequence %lld, position %lld, the re-scoring %.9g",
                                  (long long)L, (double)tmp[k], (long long)(k / L), (long long)(k % L),
                                  (double)lr->logprob_fwd[k]);
        }
    }
    free(tmp);
    return s;
}

/* --reference fp64: each sequence through the float64 forward pass */
static rc_status reference64(run_ctx *rc, const rc_model *m, rc_results *out)
{
    const rc_rollout_cfg *cfg = rc->cfg;
    const int64_t G = out->gen_len;
    int32_t *tok = NULL, *targets = NULL;
    int64_t *rows = NULL;
    double *lp = NULL;
    rc_status s = RC_OK;
    if ((s = rc_calloc((void **)&tok, cfg->prompt_max + G, sizeof *tok, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&targets, G, sizeof *targets, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&rows, G, sizeof *rows, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&lp, G, sizeof *lp, "fp64 reference")) != RC_OK)
        goto done;
    for (int64_t sq = 0; sq < out->n_seq && s == RC_OK; sq++) {
        const int64_t p = out->seq_prompt[sq], P = cfg->prompt_len[p], valid = out->gen_valid[sq];
        memcpy(tok, cfg->prompt_tokens + p * cfg->prompt_max, (size_t)P * sizeof *tok);
        memcpy(tok + P, out->gen_tokens + sq * G, (size_t)valid * sizeof *tok);
        for (int64_t t = 0; t < valid; t++) {
            rows[t] = P + t - 1;
            targets[t] = out->gen_tokens[sq * G + t];
        }
        s = rc_forward64(m, tok, P + valid, (double)cfg->num.temperature, rows, targets, valid, lp);
        for (int64_t t = 0; t < G && s == RC_OK; t++)
            out->logprob_ref[sq * G + t] = t < valid ? lp[t] : NAN;
        if (s == RC_OK)
            s = tick(rc, "reference fp64", G);
    }
done:
    free(tok);
    free(targets);
    free(rows);
    free(lp);
    return s;
}

/* The sizes of a run's engines over S sequences: B decoded together, FB per full forward, the cache slots, the
 * generation's prefill rows and the forward's rows (rc_run_check's, and rc_run_engine_shapes') */
static void run_engine_sizes(const rc_rollout_cfg *cfg, int64_t S, int64_t *B, int64_t *FB, int64_t *slots,
                             int64_t *rows_gen, int64_t *rows_fwd)
{
    const int64_t G = cfg->lens[cfg->n_lens - 1];
    *B = cfg->batch < S ? cfg->batch : S;
    *FB = cfg->forward_batch > 0 && cfg->forward_batch < S ? cfg->forward_batch : S;
    *slots = *B > *FB ? *B : *FB;
    *rows_gen = *B * cfg->prompt_max;
    *rows_fwd = *FB * (cfg->prompt_max + G);
}

int rc_run_engine_shapes(const rc_model *m, const rc_rollout_cfg *cfg, rc_kernels sampler_k, rc_kernels trainer_k,
                         rc_engine_shape *out)
{
    int64_t S = 0, B, FB, slots, rows_gen, rows_fwd;
    if (cfg->n_lens < 1 || cfg->n_lens > RC_MAX_LENS || !rc_mul_i64(cfg->n_prompts, cfg->samples, &S) || S < 1 ||
        S > (1 << 24))
        return 0; /* rc_run_check refuses it */
    run_engine_sizes(cfg, S, &B, &FB, &slots, &rows_gen, &rows_fwd);
    const int64_t len = cfg->prompt_max + cfg->lens[cfg->n_lens - 1], rows = rows_gen > rows_fwd ? rows_gen : rows_fwd;
    int n = 0;
    if (!cfg->given_logprobs) /* the generation's engine */
        out[n++] = (rc_engine_shape){cfg->num, sampler_k, slots, len, rows, RC_PHASE_GENERATE};
    const bool mla_own = m->cfg.mla && (cfg->num.mla_absorbed != cfg->num_trainer.mla_absorbed ||
                                        cfg->num.mla_prefill_expanded != cfg->num_trainer.mla_prefill_expanded);
    if (cfg->trainer || cfg->given_logprobs || mla_own) /* the trainer's own, after the generation's is freed */
        out[n++] = (rc_engine_shape){cfg->num_trainer, trainer_k, slots, len, rows, RC_PHASE_FORWARD};
    else if (n > 0)
        out[0].phases |= RC_PHASE_FORWARD;
    if (cfg->distribution && !cfg->given_logprobs && cfg->forward_chunk == 0 && !cfg->trainer_truncates)
        out[n++] = (rc_engine_shape){cfg->num, sampler_k, S, len, rows, RC_PHASE_GENERATE | RC_PHASE_FORWARD};
    if (cfg->reference == 32) {
        rc_numerics ref = rc_numerics_fp32();
        ref.temperature = cfg->num.temperature;
        out[n++] = (rc_engine_shape){ref, RC_KERNELS_INVARIANT, FB, len, rows_fwd, RC_PHASE_REFERENCE};
    }
    return n;
}

rc_status rc_run_check(const rc_model *m, rc_backend *be, rc_backend *ref_be, const rc_rollout_cfg *cfg,
                       rc_progress_fn progress, void *progress_ctx, volatile int *interrupted,
                       rc_results *out)
{
    const rc_config *mc = &m->cfg;
    if (cfg->n_lens < 1 || cfg->n_lens > RC_MAX_LENS)
        return rc_errorf(RC_ERR_USAGE, "--len needs between 1 and %d lengths", RC_MAX_LENS);
    for (int i = 0; i < cfg->n_lens; i++)
        if (cfg->lens[i] < 1 || (i > 0 && cfg->lens[i] <= cfg->lens[i - 1]))
            return rc_errorf(RC_ERR_USAGE, "--len values must be positive and increasing");
    if (cfg->n_prompts < 1 || cfg->samples < 1 || cfg->batch < 1 || cfg->forward_batch < 0 || cfg->forward_chunk < 0)
        return rc_errorf(RC_ERR_USAGE, "need at least one prompt, sample and batch slot");
    if (cfg->given_logprobs && cfg->trainer && cfg->num_trainer.route_replay)
        return rc_errorf(RC_ERR_UNSUPPORTED, "routing=replay replays the sampler's experts, and logged rollouts "
                         "carry none (use ratiocheck run)");
    if (cfg->trainer_truncates && cfg->reference == 64)
        return rc_errorf(RC_ERR_UNSUPPORTED, "--reference fp64 with processed top-k / top-p log-probs: the float64 "
                         "forward does not apply top-k / top-p (use --reference fp32)");
    const int64_t G = cfg->lens[cfg->n_lens - 1];
    if (cfg->forced_tokens && G > cfg->forced_len)
        return rc_errorf(RC_ERR_USAGE, "--len %lld exceeds the %lld tokens of the replayed rollouts", (long long)G,
                         (long long)cfg->forced_len);
    for (int64_t p = 0; p < cfg->n_prompts; p++) {
        if (cfg->prompt_len[p] < 1)
            return rc_errorf(RC_ERR_USAGE, "prompt %lld is empty", (long long)p + 1);
        if (cfg->prompt_len[p] + G > mc->max_pos)
            return rc_errorf(RC_ERR_USAGE,
                             "prompt %lld (%d tokens) plus %lld generated tokens exceeds the model's %lld positions",
                             (long long)p + 1, cfg->prompt_len[p], (long long)G, (long long)mc->max_pos);
        for (int64_t t = 0; t < cfg->prompt_len[p]; t++) {
            int32_t id = cfg->prompt_tokens[p * cfg->prompt_max + t];
            if (id < 0 || id >= mc->vocab)
                return rc_errorf(RC_ERR_USAGE, "prompt %lld: token id %d is outside the vocabulary [0, %lld)",
                                 (long long)p + 1, id, (long long)mc->vocab);
        }
    }
    int64_t S;
    if (!rc_mul_i64(cfg->n_prompts, cfg->samples, &S) || S > (1 << 24))
        return rc_errorf(RC_ERR_USAGE, "too many sequences");
    /* replay: generate() indexes log-prob rows with these ids and reads
     * forced_valid[S] / forced_tokens[S, forced_len] (the caller sizes them
     * for n_prompts x samples); check every id it will use */
    if (cfg->forced_tokens && (!cfg->forced_valid || cfg->forced_len < 0))
        return rc_errorf(RC_ERR_INTERNAL, "replayed rollouts without their valid counts");
    for (int64_t sq = 0; cfg->forced_tokens && sq < S; sq++) {
        const int64_t valid = cfg->forced_valid[sq];
        if (valid < 0 || valid > cfg->forced_len)
            return rc_errorf(RC_ERR_FORMAT, "replayed rollout %lld has %lld valid tokens, outside 0..%lld",
                             (long long)sq, (long long)valid, (long long)cfg->forced_len);
        for (int64_t t = 0; t < valid && t < G; t++) {
            const int32_t id = cfg->forced_tokens[sq * cfg->forced_len + t];
            if (id < 0 || id >= mc->vocab)
                return rc_errorf(RC_ERR_FORMAT,
                                 "replayed rollout %lld, generated token %lld: id %d is outside the vocabulary [0, %lld)",
                                 (long long)sq, (long long)t, (int)id, (long long)mc->vocab);
        }
    }
    int64_t B, FB, slots, rows_gen, rows_fwd;
    run_engine_sizes(cfg, S, &B, &FB, &slots, &rows_gen, &rows_fwd);

    rc_status s = RC_OK;
    out->stat = cfg->stat; /* the statistics' thresholds (zero: the defaults) */
    out->n_prompts = cfg->n_prompts;
    out->prompt_max = cfg->prompt_max;
    out->n_seq = S;
    out->gen_len = G;
#define ALLOC(p, n) \
    if (s == RC_OK) \
    s = rc_calloc((void **)&(p), (n), sizeof *(p), "results")
    ALLOC(out->prompt_tokens, cfg->n_prompts * cfg->prompt_max);
    ALLOC(out->prompt_len, cfg->n_prompts);
    ALLOC(out->seq_prompt, S);
    ALLOC(out->seq_sample, S);
    ALLOC(out->gen_tokens, S * G);
    ALLOC(out->gen_valid, S);
    ALLOC(out->logprob_gen, S * G);
    ALLOC(out->logprob_gen_processed, S * G);
    ALLOC(out->entropy_gen, S * G);
    ALLOC(out->lens, cfg->n_lens);
    if (cfg->reference)
        ALLOC(out->logprob_ref, S * G);
    if (s != RC_OK)
        return s;
    out->n_lens = cfg->n_lens; /* only now that out->lens exists */
    for (int i = 0; i < cfg->n_lens; i++) {
        out->lens[i].len = cfg->lens[i];
        ALLOC(out->lens[i].logprob_fwd, S * cfg->lens[i]);
    }
#undef ALLOC
    if (s != RC_OK)
        return s;
    memcpy(out->prompt_tokens, cfg->prompt_tokens, (size_t)(cfg->n_prompts * cfg->prompt_max) * sizeof(int32_t));
    memcpy(out->prompt_len, cfg->prompt_len, (size_t)cfg->n_prompts * sizeof(int32_t));
    for (int64_t sq = 0; sq < S; sq++) {
        out->seq_prompt[sq] = (int32_t)(sq / cfg->samples);
        out->seq_sample[sq] = (int32_t)(sq % cfg->samples);
    }
    for (int64_t i = 0; i < S * G; i++) {
        out->gen_tokens[i] = -1;
        out->logprob_gen[i] = out->logprob_gen_processed[i] = out->entropy_gen[i] = NAN;
    }

    run_ctx rc = {.cfg = cfg, .progress = progress, .pctx = progress_ctx, .interrupted = interrupted};
    /* the routing record of a MoE model: both sides' experts at every position (score: no sampler engine) */
    if (!cfg->given_logprobs && (s = rc_routing_rec_create(mc, S, cfg->prompt_max + G, &rc.routing)) != RC_OK)
        return s;
    rc.total = cfg->given_logprobs ? 0.0 : phase_weight("generate") * (double)(S * G);
    for (int i = 0; i < cfg->n_lens; i++)
        rc.total += phase_weight("forward") * (double)(S * cfg->lens[i]);
    if (cfg->reference)
        rc.total += phase_weight(cfg->reference == 64 ? "reference fp64" : "reference fp32") * (double)(S * G);

    double t0 = now_s();
    rc_engine *e = NULL;
    if (cfg->given_logprobs && !cfg->forced_tokens)
        return rc_errorf(RC_ERR_INTERNAL, "given log-probs without their tokens");
    if (cfg->given_logprobs) /* ratiocheck score: no sampler engine, the trainer's below */
        s = given(&rc, out);
    /* a capture hook (the trace) reads the activation buffers as floats: fp32 storage (no result changes) */
    rc_numerics num_s = cfg->num, num_t = cfg->num_trainer;
    num_s.act_f32 = num_s.act_f32 || cfg->capture != NULL;
    num_t.act_f32 = num_t.act_f32 || cfg->capture != NULL;
    if (!cfg->given_logprobs)
        s = rc_engine_create(m, be, &num_s, slots, cfg->prompt_max + G, rows_gen > rows_fwd ? rows_gen : rows_fwd,
                             &e);
    if (s == RC_OK && e)
        e->hook = (rc_capture_hook){cfg->capture, cfg->capture_ctx, 0, 0};
    if (s == RC_OK && !cfg->given_logprobs)
        s = generate(&rc, e, out);
    const double t_gen = now_s(); /* the generation's end (the replay below is not the generation's time) */
    /* --distribution: the sampler's rows of the first window, replayed */
    const bool dist = cfg->distribution && !cfg->given_logprobs && cfg->forward_chunk == 0 && !cfg->trainer_truncates;
    dist_ctx dc = {0};
    if (s == RC_OK && dist)
        s = dist_begin(&rc, &dc, m, be, B, rows_gen > rows_fwd ? rows_gen : rows_fwd, out);
    if (s == RC_OK && dist) {
        dc.t1 = dc.w;
        s = dist_replay(&rc, &dc, out);
    }
    /* latent attention: the sides' forms differ (the sampler mla=engine, the trainer expanded by default) */
    const bool mla_own = m->cfg.mla && (cfg->num.mla_absorbed != cfg->num_trainer.mla_absorbed ||
                                        cfg->num.mla_prefill_expanded != cfg->num_trainer.mla_prefill_expanded);
    if (s == RC_OK && (cfg->trainer || cfg->given_logprobs || mla_own)) { /* the trainer's own engine */
        rc_engine_free(e);
        e = NULL;
        s = rc_engine_create(m, cfg->trainer_be ? cfg->trainer_be : be, &num_t, slots,
                             cfg->prompt_max + G, rows_gen > rows_fwd ? rows_gen : rows_fwd, &e);
    }
    if (s == RC_OK) /* the full forward: the trainer's side (its own engine, or the shared one) */
        e->hook = (rc_capture_hook){cfg->capture, cfg->capture_ctx, 1, 0};
    double t1 = now_s();
    char phase[64];
    truncation tr = {0};
    if (s == RC_OK)
        s = truncation_attach(cfg, e, &tr);
    if (s == RC_OK && dist)
        s = dist_attach(&dc, e);
    for (int i = 0; i < cfg->n_lens && s == RC_OK; i++) {
        snprintf(phase, sizeof phase, "forward L=%lld", (long long)cfg->lens[i]);
        tr.outside = 0;
        dc.kl = out->lens[i].dist_kl;
        dc.tv = out->lens[i].dist_tv;
        dc.top1 = out->lens[i].dist_top1;
        s = rescore(&rc, e, out, cfg->lens[i], FB, cfg->forward_chunk, phase, out->lens[i].logprob_fwd, NULL,
                    cfg->lens[i], dist ? &dc : NULL);
    }
    out->trainer_outside_kept = tr.outside; /* the longest length's */
    if (s == RC_OK && dist)
        s = dist_windows(&rc, &dc, e, FB, out);
    dist_free(&dc);
    rc_engine_free(e);
    double t2 = now_s();
    if (s == RC_OK && cfg->reference == 32) {
        rc_numerics ref = rc_numerics_fp32();
        ref.temperature = cfg->num.temperature;
        rc_engine *re = NULL;
        s = rc_engine_create(m, ref_be, &ref, FB, cfg->prompt_max + G, rows_fwd, &re);
        if (s == RC_OK)
            s = truncation_attach(cfg, re, &tr);
        if (s == RC_OK)
            s = rescore(&rc, re, out, G, FB, 0, "reference fp32", NULL, out->logprob_ref, G, NULL);
        rc_engine_free(re);
    } else if (s == RC_OK && cfg->reference == 64) {
        s = reference64(&rc, m, out);
    }
    free(tr.work);
    free(tr.rows);
    if (s == RC_OK && cfg->n_lens > 0)
        s = rc_routing_rec_finish(rc.routing, cfg->prompt_len, out);
    rc_routing_rec_free(rc.routing);
    out->seconds_generate = (dist ? t_gen : t1) - t0;
    out->seconds_forward = t2 - t1;
    out->seconds_reference = cfg->reference ? now_s() - t2 : 0.0;
    if (s == RC_OK)
        s = rc_compute_stats(out);
    out->seconds_total = now_s() - t0;
    return s;
}
