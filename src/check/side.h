/* One side of the check (--sampler / --trainer): what it computes with. A
 * spec "KEY=VALUE,..." is parsed into a side, printed back the same way, two
 * sides compared (equal sides share one engine), and a side turned into the
 * engine's numerics. README "Two sides". */
#ifndef RC_SIDE_H
#define RC_SIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "forward.h"
#include "rollout.h"
#include "status.h"

typedef struct {
    rc_dtype dt;
    rc_kernels kernels;
    unsigned upcast; /* RC_UPCAST_* */
    bool lp_same;    /* log-softmax in the dtype */
    int64_t batch;   /* sampler: sequences decoded together; trainer: sequences per forward (0: all) */
    int64_t prefill_chunk; /* sampler: prompt tokens per prefill call; trainer: tokens per forward call
                            * through the cache (0: all in one call) */
    rc_precision mode;     /* pure dtype or autocast over fp32 masters */
    rc_kv_quant kv_quant;  /* sampler: the KV cache's storage (kv-cache=) */
    float kv_scale;        /* sampler, fp8 cache: k_scale = v_scale (kv-scale=, default 1 as vLLM) */
    int64_t tp;            /* tensor-parallel degree (1: none) */
    rc_tp_reduce tp_reduce; /* the all-reduce of its row-parallel layers (sampler: fp32, trainer: ring) */
    rc_wq_numerics wq;     /* sampler: fp8 weights of the linear layers (weights=fp8) */
    bool residual_f32;     /* residual=fp32: Megatron's --fp32-residual-connection */
    int mla_form;          /* latent attention (only latent-attention models; docs/mla.md): 0 expanded
                            * (transformers, the trainer's default), 1 absorbed (every row from the latent
                            * cache), 2 engine (vLLM / SGLang: a prefill expanded, a decode step absorbed; the
                            * sampler's default) */
    bool router_f32;       /* router=fp32: MoE router logits (and weights) in fp32 */
    bool router_dtype;     /* router=dtype given: also a router transformers keeps fp32 in the dtype where vLLM
                            * computes it so (DeepSeek-V3's gate; docs/routing.md) */
    bool route_replay;     /* trainer, routing=replay: the sampler's experts replayed (R3) */
    bool state_dtype;      /* hybrid models, state=dtype: the linear layers' recurrent state kept in the dtype */
    int64_t gdn_chunk;     /* hybrid models, chunk=N: the chunked form's chunk (64) */
    bool prefix_cache;     /* sampler, hybrid models, prefix-cache=on: a prompt's state restored from a copy in
                            * the dtype (SGLang's prefix cache) */
} rc_side;

/* every key at its default (the trainer's tp-reduce: ring, NCCL's; the sampler's: fp32, vLLM's) */
void rc_side_defaults(bool trainer, rc_side *sd);
/* Apply SPEC (KEY=VALUE,...) of --sampler / --trainer (`opt`) to sd. */
rc_status rc_side_parse(const char *opt, const char *spec, bool trainer, rc_side *sd);
/* one key's value, as the spec would give it (e.g. the settings a result file records) */
rc_status rc_side_set(const char *opt, const char *key, const char *value, bool trainer, rc_side *sd);
/* --kernels, --logprob-dtype: the side keys' values and errors (opt names the option) */
rc_status rc_side_parse_kernels(const char *opt, const char *v, rc_kernels *k);
rc_status rc_side_parse_lpdt(const char *opt, const char *v, bool *same);
/* "dtype=bf16,kernels=engine,upcast=none,logprob-dtype=fp32" and the keys not at their defaults */
void rc_side_str(const rc_side *sd, bool trainer, char *buf, size_t n);
/* "KEY=VALUE" of one key of sd (a sweep's setting names it so) */
void rc_side_key_str(const char *key, const rc_side *sd, char *buf, size_t n);
/* Equal sides share one engine. */
bool rc_side_equal(const rc_side *a, const rc_side *b);
/* the engine numerics of a side over base (trainer: Megatron's TP) */
rc_numerics rc_side_numerics(const rc_side *sd, const rc_numerics *base, bool trainer);
/* The two sides into a rollout configuration. */
void rc_side_apply(const rc_side *sm, const rc_side *tr, double temperature, rc_rollout_cfg *cfg);
/* What the engine cannot take whatever the model (who: "--sampler" ...). */
rc_status rc_side_check(const char *who, const rc_side *sd);

#endif
