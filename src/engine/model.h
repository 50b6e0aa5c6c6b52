/* Model description (from config.json), weights (from safetensors) and the
 * architecture registry. Weights are used as the checkpoint stores them
 * (mapped, fp32 / bf16 / fp16) wherever a family needs no layout fix; the forward
 * pass (forward.c) is generic over the flags in rc_config. Each family file in
 * models/ declares, as data (rc_arch), its config keys, forward details and
 * tensor tables; the weight fields are the lists below
 * (docs/adding-a-model.md). */
#ifndef RC_MODEL_H
#define RC_MODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"
#include "status.h"

typedef enum { RC_NORM_LAYER, RC_NORM_RMS } rc_norm_kind;
/* GELU_ERF: F.gelu; GELU_TANH: F.gelu(approximate="tanh") ("gelu_pytorch_tanh");
 * GELU_NEW: transformers' NewGELUActivation ("gelu_new", a chain of tensor ops);
 * GELU_BLOOM: bloom_gelu_forward (0.79788456 for sqrt(2/pi), its own order) */
typedef enum { RC_ACT_GELU_ERF, RC_ACT_GELU_TANH, RC_ACT_SILU, RC_ACT_GELU_BLOOM, RC_ACT_GELU_NEW } rc_act;
/* LONGROPE: Phi-3's short_factor (rope_short_factor) divides each pair's
 * frequency, cos and sin times the attention factor; long_factor (past
 * original_max_position_embeddings) is refused at run time */
typedef enum { RC_ROPE_DEFAULT, RC_ROPE_LINEAR, RC_ROPE_LLAMA3, RC_ROPE_YARN, RC_ROPE_LONGROPE } rc_rope_type;
/* RMSNorm of q and k right after their projection, before RoPE: none; per
 * head over head_dim with one [head_dim] weight for all heads (Qwen3's
 * q_norm / k_norm); over the whole projection, [n_heads * head_dim] and
 * [n_kv_heads * head_dim] weights (OLMo2). */
typedef enum { RC_QK_NORM_NONE, RC_QK_NORM_HEAD, RC_QK_NORM_ALL } rc_qk_norm;
/* Position encoding: rotary (RoPE on q and k), ALiBi (a per-head linear
 * bias on the attention scores), learned (a position embedding table added
 * to the token embeddings, GPT-2). */
typedef enum { RC_POS_ROTARY, RC_POS_ALIBI, RC_POS_LEARNED } rc_pos_kind;
/* ALiBi slopes: the formula and the arithmetic the family's code uses.
 * BLOOM: torch.pow(fp32 base 2^(-8/n2), k) in fp32, extra heads from the
 * base 2^(-4/n2) at odd powers (n2: largest power of two <= heads);
 * BAICHUAN: the same values from Python floats (start * ratio**i), then fp32;
 * MPT: 1 / 2^(k * alibi_bias_max / n2) in fp32 (n2: smallest power of two >=
 * heads), odd-then-even reordering when heads is not a power of two. */
typedef enum { RC_SLOPES_BLOOM, RC_SLOPES_BAICHUAN, RC_SLOPES_MPT } rc_alibi_slopes;
/* How the bias meets the scores (README "Numerics"). FUSED: one rounding of
 * dot * scale + bias (BLOOM's baddbmm), bias rounded to the model dtype;
 * MODEL_DT: bias rounded to the model dtype and added in it (Baichuan-13B's
 * alibi mask cast to the hidden dtype); F32: fp32 bias added in fp32 (MPT's
 * fp32 table promotes the sum). */
typedef enum { RC_ALIBI_ADD_FUSED, RC_ALIBI_ADD_MODEL_DT, RC_ALIBI_ADD_F32 } rc_alibi_add;
typedef enum { RC_MLP_PLAIN, RC_MLP_GATED } rc_mlp_kind;
/* A MoE router (moe.c, docs/routing.md "Routers"): SOFTMAX, softmax over the
 * logits then top-k (Qwen2-MoE, Qwen3-MoE, Mixtral); SIGMOID_GROUPED,
 * DeepSeek-V3's and GLM-4.5's: sigmoid scores, the selection-only bias
 * (e_score_correction_bias), group-limited top-k (n_group, topk_group), the
 * weights taken from the unbiased scores, renormalised (norm_topk_prob) and
 * scaled (routed_scaling_factor) */
typedef enum { RC_ROUTER_SOFTMAX, RC_ROUTER_SIGMOID_GROUPED } rc_router_kind;
typedef enum { RC_RESIDUAL_SEQUENTIAL, RC_RESIDUAL_PARALLEL } rc_residual_kind;
typedef enum { RC_HEAD_UNTIED, RC_HEAD_TIED } rc_head_kind;

/* Limits on sizes read from config.json, checked before anything is allocated. */
#define RC_LIM_LAYERS 4096
#define RC_LIM_HIDDEN (1 << 20)
#define RC_LIM_HEADS 4096
#define RC_LIM_HEAD_DIM 4096
#define RC_LIM_INTER (1 << 22)
#define RC_LIM_VOCAB (1 << 24)
#define RC_LIM_POS (1 << 24)

#define RC_MAX_EOS 8
/* longrope's short_factor / long_factor: one value per rotary pair */
#define RC_MAX_ROPE_PAIRS 512

typedef struct rc_arch rc_arch;

/* A multimodal wrapper's folder read as its text model (models/registry.c's k_wrappers; docs/models.md
 * "Multimodal wrapper folders"): config.json's model_type is the wrapper's, the text model's config is the
 * object under text_key (its model_type, when given, must be text_model_type), the text weights are under
 * prefixes (the first the one v5 save_pretrained writes; "" last, for the head at the top level), and the
 * rest of the checkpoint (the vision tower, projector, MTP layers) is ignored. */
typedef struct {
    const char *model_type;       /* "qwen3_5_moe" */
    const char *cls;              /* transformers' class, for messages: "Qwen3_5MoeForConditionalGeneration" */
    const char *text_model_type;  /* "qwen3_5_moe_text" */
    const char *text_key;         /* "text_config" */
    const char *const *prefixes;  /* {"model.language_model.", "", NULL} */
    bool tie_default;             /* the wrapper class's tie_word_embeddings default (the top-level key decides) */
    bool no_final_softcap;        /* the wrapper's forward never applies final_logit_softcapping */
} rc_wrapper;

typedef struct {
    char model_type[32];     /* HF model_type, e.g. "gpt_neox", "qwen2" (a wrapper's: its text model's) */
    const rc_arch *arch;     /* family implementation (models/) */
    const rc_wrapper *wrapper; /* the multimodal wrapper the folder is, or NULL */
    int64_t n_layers;
    int64_t hidden;          /* hidden_size */
    int64_t n_heads;         /* num_attention_heads */
    int64_t n_kv_heads;      /* num_key_value_heads (== n_heads without GQA) */
    int64_t head_dim;
    int64_t intermediate;    /* MLP inner size */
    int64_t vocab;           /* rows of the embedding / LM head */
    int64_t max_pos;         /* max_position_embeddings */
    double norm_eps;
    rc_norm_kind norm;
    rc_pos_kind pos;
    rc_act act;
    bool gated_mlp;          /* SwiGLU: down(act(gate(x)) * up(x)) */
    bool parallel_residual;  /* x + attn(ln1(x)) + mlp(ln2(x)) */
    bool tie_embeddings;     /* LM head reuses the input embedding */
    bool qkv_bias, o_bias, mlp_bias;
    bool norm_bias;          /* LayerNorm has a bias */
    int64_t rotary_dim;      /* leading dims of each head that are rotated (even) */
    double rope_theta;
    rc_rope_type rope_type;
    double rope_factor, rope_low_freq, rope_high_freq;
    int64_t rope_orig_max_pos;
    /* YaRN (rope_type yarn): the ramp's beta_fast / beta_slow, truncate, and
     * the attention factor cos and sin are multiplied by (1 for the other types) */
    double rope_beta_fast, rope_beta_slow;
    bool rope_truncate;
    double rope_attn_factor;
    /* longrope: short_factor as config.json gives it (rotary_dim / 2 values;
     * HF makes an fp32 tensor of them) */
    double rope_short_factor[RC_MAX_ROPE_PAIRS];
    int64_t sliding_window;  /* 0: none */
    /* window_per_layer: sliding_window applies to the layers whose
     * layer_sliding[l] is 1 only (layer_types "sliding_attention"), the
     * others attend to every earlier key; else to every layer (Mistral) */
    bool window_per_layer;
    unsigned char layer_sliding[RC_LIM_LAYERS];
    rc_qk_norm qk_norm;
    /* post_norm: ln1 / ln2 normalise the attention and MLP outputs before
     * their residual add, and nothing normalises their inputs (OLMo2's
     * post_attention_layernorm / post_feedforward_layernorm) */
    bool post_norm;
    /* RMSNorm multiplies the weight in fp32 and rounds once,
     * R(w * x * rsqrt(..)) (OLMo2's (weight * x).to(dtype)), instead of
     * Llama's R(w * R(x * rsqrt(..))) */
    bool norm_w_f32;
    /* Gemma's RMSNorm: the weight enters as (1 + w) computed in fp32 from the
     * weight's (rounded) value, multiplied in fp32 and rounded once
     * (norm_w_f32 is set with it); every RMSNorm of the model, q / k norms included */
    bool norm_w_offset;
    /* four norms per layer: ln1 / ln2 before attention and MLP and
     * post_attn_ln_w / post_mlp_ln_w on their outputs before the residual add
     * (Gemma 2 / 3: input_layernorm, pre_feedforward_layernorm,
     * post_attention_layernorm, post_feedforward_layernorm; GLM-4:
     * input_layernorm, post_attention_layernorm, post_self_attn_layernorm,
     * post_mlp_layernorm) */
    bool sandwich_norm;
    /* > 0: token embeddings multiplied by this (Python float -> fp32 -> the
     * run's dtype), the product rounded to the dtype (Gemma's sqrt(hidden)) */
    double embed_scale;
    /* > 0: soft-capping cap * tanh(x / cap), each op rounded to the dtype:
     * of the attention scores after the scaling (attn_logit_softcapping) and
     * of the LM head's logits (final_logit_softcapping) */
    double attn_softcap, final_softcap;
    /* > 0: the sliding layers (layer_sliding) rotate with default RoPE of this
     * base (Gemma 3's rope_local_base_freq / rope_parameters.sliding_attention;
     * OLMo3's rope_parameters per layer type), the others with rope_theta and
     * its scaling (rope_scaling applies to the full layers only) */
    double rope_theta_local;
    /* ALiBi (pos == RC_POS_ALIBI) */
    rc_alibi_slopes alibi_slopes;
    double alibi_bias_max;     /* MPT: slopes 1 / 2^(k * max / n2) (> 0) */
    bool alibi_from_last_key;  /* MPT: distances from the call's last key, not from position 0 */
    rc_alibi_add alibi_add;
    /* scores */
    double softmax_scale;      /* 0: head_dim ** -0.5; else this multiplier (MPT attn_config.softmax_scale) */
    bool score_div;            /* scores divided by sqrt(head_dim) (Baichuan) instead of multiplied */
    double clip_qkv;           /* > 0: q, k, v clamped to [-clip_qkv, clip_qkv] after the projection (MPT) */
    bool embed_norm;           /* LayerNorm on the token embeddings (BLOOM word_embeddings_layernorm) */
    bool norm_head;            /* LM-head rows L2-normalised in the weight dtype (Baichuan2 NormHead) */
    bool rope_f32;             /* RoPE products and sum in fp32 with fp32 cos/sin, rounded once (Baichuan2-7B) */
    bool attn_f32;             /* scores and probabilities in fp32, P.V rounded once (Baichuan2-7B's SDPA) */
    /* Multi-head latent attention (DeepSeek-V2 / V3, docs/mla.md). mla: q from
     * q_a_proj -> q_a_layernorm -> q_b_proj (q_lora_rank > 0) or q_proj, K and V
     * from kv_a_proj_with_mqa's latent (kv_lora_rank) through kv_a_layernorm and
     * kv_b_proj, plus one shared RoPE key (qk_rope_dim). The expanded
     * attention it computes is head_dim = qk_nope_dim + qk_rope_dim wide with
     * n_kv_heads = n_heads and rotary_dim = qk_rope_dim (set by the family);
     * each head's value has v_head_dim values. mla_norm_eps: the latent
     * norms' eps (DeepseekV3RMSNorm's default 1e-6, not rms_norm_eps) */
    bool mla;
    int64_t q_lora_rank;       /* 0: a plain q_proj */
    int64_t kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
    bool rope_interleave;      /* the checkpoint's RoPE rows are interleaved pairs (undone at load) */
    double mla_norm_eps;
    /* Mixture of experts (n_experts 0: a dense model; moe.c, docs/models.md) */
    int64_t n_experts;         /* num_experts / num_local_experts */
    int64_t top_k;             /* num_experts_per_tok */
    int64_t moe_intermediate;  /* each expert's SwiGLU inner size */
    int64_t shared_intermediate; /* the shared expert's inner size (Qwen2-MoE; 0: none) */
    bool norm_topk_prob;       /* the top-k weights renormalised to sum 1 */
    bool moe_weights_f32;      /* the routing weights stay fp32 (Mixtral) instead of cast to the dtype */
    int64_t sparse_step;       /* decoder_sparse_step: layer l is MoE when (l + 1) % step == 0 */
    rc_router_kind router;     /* the routing rule (softmax or DeepSeek's grouped sigmoid) */
    int64_t n_group, topk_group; /* SIGMOID_GROUPED: experts in n_group groups, top-k among the best topk_group */
    double routed_scale;       /* SIGMOID_GROUPED: routed_scaling_factor, multiplied into the weights (fp32) */
    bool router_gate_f32;      /* the router's weight kept fp32 and its GEMM in fp32 whatever the dtype
                                * (transformers' _keep_in_fp32_modules_strict "gate.weight") */
    bool router_gate_engine_dt; /* with router_gate_f32: router=dtype computes the gate as vLLM's default does
                                 * (DeepSeek-V3: GateLinear with out_dtype None): the weight rounded to the dtype,
                                 * the logits rounded once to it; GLM-4.5 keeps the gate fp32 (docs/routing.md) */
    bool router_bias;          /* e_score_correction_bias [n_experts] (fp32), added to the scores for the choice */
    bool shared_ungated;       /* the shared expert(s) added without Qwen2-MoE's sigmoid gate */
    uint64_t mlp_only[RC_LIM_LAYERS / 64]; /* mlp_only_layers as a bit set */
    /* gpt-oss (models/gpt_oss.c, docs/numerics.md "gpt-oss"): a learned logit per
     * query head in the softmax's denominator (self_attn.sinks); biases on the
     * router and on every expert's gate / up and down projections (each added
     * after its GEMM, rounded on its own); routing by the top-k of the logits,
     * then a softmax over the k chosen; and the experts' clamped SwiGLU
     * (swiglu_limit > 0): (clamp(up, -l, l) + 1) * g * sigmoid(alpha * g), g =
     * min(gate, l) */
    bool attn_sinks;
    bool moe_bias;
    bool moe_topk_softmax;
    double swiglu_alpha, swiglu_limit;
    /* Hybrid linear attention (Qwen3-Next; gdn.h, docs/linear-attention-cache.md): layer_linear[l] 1 for a
     * Gated DeltaNet layer (layer_types "linear_attention"), 0 for full attention; n_linear of them */
    int64_t n_linear;
    unsigned char layer_linear[RC_LIM_LAYERS];
    int64_t lin_hk, lin_hv, lin_dk, lin_dv; /* linear_num_key_heads, linear_num_value_heads, head dims */
    int64_t lin_conv_k;        /* linear_conv_kernel_dim */
    /* full-attention layers: q_proj also gives a gate per head, the attention output multiplied by its sigmoid
     * before o_proj (Qwen3NextAttention) */
    bool attn_out_gate;
    int64_t n_layers_model;    /* the checkpoint's num_hidden_layers; n_layers is less under --layers N */
    int64_t bos_id;          /* -1: none */
    int64_t eos_ids[RC_MAX_EOS];
    int n_eos;
    /* eos_token_id values not below vocab_size: transformers warns and generates
     * without them; so does ratiocheck (rc_config_eos_warning) */
    int64_t eos_dropped[RC_MAX_EOS];
    int n_eos_dropped;
} rc_config;

/* The weights, as data. One line per field: X(field, rows, cols, present,
 * kind): the field's shape, [rows, cols] row-major as the forward pass reads
 * it (cols RC_DIM_1 for a vector), when it has storage of its own, and its
 * kind: MAT, a GEMM operand or embedding table that an engine keeps in the
 * dtype of its values (2 bytes in a bf16 / fp16 run, used in place from the
 * model when the values need no rounding), or VEC, a small tensor (norms,
 * biases, learned positions) that an engine always holds as fp32 arrays.
 * These lists size the weights (rc_weights_numel), check what a family
 * loaded (model.c), plan and make an engine's copies (forward.c) and
 * generate the structs below. Adding a weight field is one line here. */
typedef enum {
    RC_DIM_1,   /* 1 (a vector's second dim; a 1-D tensor in a table) */
    RC_DIM_H,   /* hidden */
    RC_DIM_V,   /* vocab */
    RC_DIM_I,   /* intermediate */
    RC_DIM_Q,   /* n_heads * head_dim */
    RC_DIM_KV,  /* n_kv_heads * head_dim */
    RC_DIM_QKV, /* (n_heads + 2 * n_kv_heads) * head_dim */
    RC_DIM_3H,  /* 3 * hidden (fused QKV as GPT-NeoX, BLOOM and GPT-2 store it) */
    RC_DIM_POS, /* max_pos (a learned position table, as GPT-2's wpe) */
    RC_DIM_E,   /* n_experts (the router's rows) */
    RC_DIM_IM,  /* moe_intermediate (one expert's inner size) */
    RC_DIM_E2IM,/* n_experts * 2 * moe_intermediate (every expert's [gate; up] rows) */
    RC_DIM_EH,  /* n_experts * hidden (every expert's down_proj rows) */
    RC_DIM_IS,  /* shared_intermediate (the shared expert's inner size) */
    RC_DIM_QNORM, /* q_norm's length: head_dim (RC_QK_NORM_HEAD) or n_heads * head_dim (ALL) */
    RC_DIM_KNORM, /* k_norm's length: head_dim (RC_QK_NORM_HEAD) or n_kv_heads * head_dim (ALL) */
    RC_DIM_NH,  /* n_heads (one value per query head: gpt-oss's attention sinks) */
    RC_DIM_O,   /* the attention output's width: n_heads * head_dim, or n_heads * v_head_dim (MLA) */
    RC_DIM_MQ,  /* MLA: n_heads * (qk_nope_dim + qk_rope_dim) (q_b_proj / q_proj rows) */
    RC_DIM_MQIN,/* MLA: q_b_proj's input, q_lora_rank, or hidden for a plain q_proj */
    RC_DIM_QL,  /* MLA: q_lora_rank */
    RC_DIM_KVL, /* MLA: kv_lora_rank */
    RC_DIM_KVA, /* MLA: kv_lora_rank + qk_rope_dim (kv_a_proj_with_mqa rows) */
    RC_DIM_KVB, /* MLA: n_heads * (qk_nope_dim + v_head_dim) (kv_b_proj rows) */
    RC_DIM_LQKVZ, /* Gated DeltaNet in_proj_qkvz rows: 2 lin_hk lin_dk + 2 lin_hv lin_dv */
    RC_DIM_LBA,   /* in_proj_ba rows: 2 lin_hv */
    RC_DIM_LCONV, /* the conv's channels: 2 lin_hk lin_dk + lin_hv lin_dv */
    RC_DIM_LK,    /* lin_conv_k */
    RC_DIM_LHV,   /* lin_hv */
    RC_DIM_LDV,   /* lin_dv */
    RC_DIM_LV,    /* lin_hv * lin_dv (out_proj's input) */
} rc_dim;

typedef enum {
    RC_ALWAYS,
    RC_IF_NORM_BIAS,      /* cfg->norm_bias */
    RC_IF_UNTIED,         /* !cfg->tie_embeddings */
    RC_IF_QKV_BIAS,       /* cfg->qkv_bias */
    RC_IF_O_BIAS,         /* cfg->o_bias */
    RC_IF_MLP_BIAS,       /* cfg->mlp_bias */
    RC_IF_GATED,          /* cfg->gated_mlp */
    RC_IF_GATED_MLP_BIAS, /* cfg->gated_mlp && cfg->mlp_bias */
    RC_IF_LEARNED_POS,    /* cfg->pos == RC_POS_LEARNED */
    RC_IF_EMBED_NORM,     /* cfg->embed_norm */
    RC_IF_EMBED_NORM_BIAS,/* cfg->embed_norm && cfg->norm_bias */
    /* per layer (rc_weight_cond_holds_layer; rc_weight_cond_holds: in any layer) */
    RC_IF_DENSE,          /* a dense MLP layer */
    RC_IF_DENSE_GATED,    /* a dense layer && cfg->gated_mlp */
    RC_IF_DENSE_MLP_BIAS, /* a dense layer && cfg->mlp_bias */
    RC_IF_DENSE_GATED_MLP_BIAS, /* a dense layer && cfg->gated_mlp && cfg->mlp_bias */
    RC_IF_MOE,            /* a mixture-of-experts layer */
    RC_IF_SHARED_EXPERT,  /* a MoE layer with a shared expert */
    RC_IF_SHARED_GATE,    /* a MoE layer with a shared expert and its sigmoid gate (!cfg->shared_ungated) */
    RC_IF_ROUTER_BIAS,    /* a MoE layer whose router has e_score_correction_bias (cfg->router_bias) */
    RC_IF_QK_NORM,        /* cfg->qk_norm != RC_QK_NORM_NONE */
    RC_IF_SANDWICH_NORM,  /* cfg->sandwich_norm */
    RC_IF_SINKS,          /* cfg->attn_sinks */
    RC_IF_MOE_BIAS,       /* a mixture-of-experts layer && cfg->moe_bias */
    RC_IF_QKV,            /* a full-attention layer && !cfg->mla: the fused q/k/v projection */
    RC_IF_MLA,            /* cfg->mla */
    RC_IF_MLA_BIAS,       /* cfg->mla && cfg->qkv_bias (kv_a_proj_with_mqa's bias) */
    RC_IF_MLA_QLORA,      /* cfg->mla && cfg->q_lora_rank > 0 */
    RC_IF_MLA_QLORA_BIAS, /* cfg->mla && cfg->q_lora_rank > 0 && cfg->qkv_bias (q_a_proj's bias) */
    RC_IF_MLA_QPROJ,      /* cfg->mla && cfg->q_lora_rank == 0 (a plain q_proj) */
    RC_IF_ATTN,           /* a full-attention layer (every layer but a hybrid model's linear ones) */
    RC_IF_LINEAR,         /* a Gated DeltaNet layer */
    RC_IF_ATTN_GATE,      /* a full-attention layer && cfg->attn_out_gate */
} rc_weight_cond;

/* Per-model weights (rc_weights). */
#define RC_MODEL_WEIGHT_FIELDS(X)                                                                     \
    X(embed, RC_DIM_V, RC_DIM_H, RC_ALWAYS, MAT)         /* [vocab, hidden] */                             \
    X(wpe, RC_DIM_POS, RC_DIM_H, RC_IF_LEARNED_POS, VEC) /* [max_pos, hidden] learned positions, or NULL */  \
    X(emb_ln_w, RC_DIM_H, RC_DIM_1, RC_IF_EMBED_NORM, VEC)     /* [hidden] embedding LayerNorm, or NULL */ \
    X(emb_ln_b, RC_DIM_H, RC_DIM_1, RC_IF_EMBED_NORM_BIAS, VEC)/* [hidden] or NULL */                    \
    X(lnf_w, RC_DIM_H, RC_DIM_1, RC_ALWAYS, VEC)         /* [hidden] */                                    \
    X(lnf_b, RC_DIM_H, RC_DIM_1, RC_IF_NORM_BIAS, VEC)   /* [hidden], NULL for RMSNorm */                  \
    X(lm_head, RC_DIM_V, RC_DIM_H, RC_IF_UNTIED, MAT)    /* [vocab, hidden]; aliases embed when tied */

/* Per-layer weights (rc_layer_weights, one transformer block). Q, K and V are
 * stored fused for every family: all Q rows, then K, then V. */
#define RC_LAYER_WEIGHT_FIELDS(X)                                                                     \
    X(ln1_w, RC_DIM_H, RC_DIM_1, RC_ALWAYS, VEC)             /* [hidden] */                                \
    X(ln1_b, RC_DIM_H, RC_DIM_1, RC_IF_NORM_BIAS, VEC)       /* [hidden], NULL for RMSNorm */              \
    X(ln2_w, RC_DIM_H, RC_DIM_1, RC_ALWAYS, VEC)             /* [hidden] */                                \
    X(ln2_b, RC_DIM_H, RC_DIM_1, RC_IF_NORM_BIAS, VEC)       /* [hidden], NULL for RMSNorm */              \
    X(post_attn_ln_w, RC_DIM_H, RC_DIM_1, RC_IF_SANDWICH_NORM, VEC) /* [hidden] norm of the attention output, or NULL */ \
    X(post_mlp_ln_w, RC_DIM_H, RC_DIM_1, RC_IF_SANDWICH_NORM, VEC)  /* [hidden] norm of the MLP output, or NULL */ \
    X(w_qkv, RC_DIM_QKV, RC_DIM_H, RC_IF_QKV, MAT)           /* [(n_heads + 2*n_kv_heads) * head_dim, hidden] (NULL: MLA, linear layers) */ \
    X(b_qkv, RC_DIM_QKV, RC_DIM_1, RC_IF_QKV_BIAS, VEC)      /* [(n_heads + 2*n_kv_heads) * head_dim] or NULL */ \
    X(w_mqa, RC_DIM_QL, RC_DIM_H, RC_IF_MLA_QLORA, MAT)      /* MLA [q_lora, hidden] q_a_proj, or NULL */ \
    X(b_mqa, RC_DIM_QL, RC_DIM_1, RC_IF_MLA_QLORA_BIAS, VEC) /* MLA [q_lora] q_a_proj bias, or NULL */ \
    X(mq_ln_w, RC_DIM_QL, RC_DIM_1, RC_IF_MLA_QLORA, VEC)    /* MLA [q_lora] q_a_layernorm, or NULL */ \
    X(w_mq, RC_DIM_MQ, RC_DIM_MQIN, RC_IF_MLA, MAT)          /* MLA q_b_proj [nh * (rope + nope), q_lora] or q_proj */ \
    X(w_mkva, RC_DIM_KVA, RC_DIM_H, RC_IF_MLA, MAT)          /* MLA [kv_lora + rope, hidden] kv_a_proj_with_mqa */ \
    X(b_mkva, RC_DIM_KVA, RC_DIM_1, RC_IF_MLA_BIAS, VEC)     /* MLA [kv_lora + rope] its bias, or NULL */ \
    X(mkv_ln_w, RC_DIM_KVL, RC_DIM_1, RC_IF_MLA, VEC)        /* MLA [kv_lora] kv_a_layernorm */ \
    X(w_mkvb, RC_DIM_KVB, RC_DIM_KVL, RC_IF_MLA, MAT)        /* MLA [nh * (nope + v), kv_lora] kv_b_proj */ \
    X(q_norm_w, RC_DIM_QNORM, RC_DIM_1, RC_IF_QK_NORM, VEC)  /* [head_dim] or [n_heads * head_dim], or NULL */ \
    X(k_norm_w, RC_DIM_KNORM, RC_DIM_1, RC_IF_QK_NORM, VEC)  /* [head_dim] or [n_kv_heads * head_dim], or NULL */ \
    X(w_o, RC_DIM_H, RC_DIM_O, RC_IF_ATTN, MAT)              /* [hidden, n_heads * head_dim] (MLA: n_heads * v_head_dim) */ \
    X(w_q_gate, RC_DIM_Q, RC_DIM_H, RC_IF_ATTN_GATE, MAT)    /* [n_heads * head_dim, hidden] the output gate's rows of q_proj */ \
    X(b_o, RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, VEC)            /* [hidden] or NULL */                        \
    X(w_up, RC_DIM_I, RC_DIM_H, RC_IF_DENSE, MAT)            /* [intermediate, hidden] (neox dense_h_to_4h, llama up_proj) */ \
    X(b_up, RC_DIM_I, RC_DIM_1, RC_IF_DENSE_MLP_BIAS, VEC)       /* [intermediate] or NULL */                  \
    X(w_gate, RC_DIM_I, RC_DIM_H, RC_IF_DENSE_GATED, MAT)      /* [intermediate, hidden] (llama gate_proj), NULL when not gated */ \
    X(b_gate, RC_DIM_I, RC_DIM_1, RC_IF_DENSE_GATED_MLP_BIAS, VEC) /* [intermediate] or NULL */                  \
    X(w_down, RC_DIM_H, RC_DIM_I, RC_IF_DENSE, MAT)          /* [hidden, intermediate] */                  \
    X(b_down, RC_DIM_H, RC_DIM_1, RC_IF_DENSE_MLP_BIAS, VEC)     /* [hidden] or NULL */ \
    X(w_router, RC_DIM_E, RC_DIM_H, RC_IF_MOE, MAT)          /* [n_experts, hidden] (mlp.gate) */          \
    X(e_bias, RC_DIM_E, RC_DIM_1, RC_IF_ROUTER_BIAS, VEC)    /* [n_experts] e_score_correction_bias, or NULL */ \
    X(w_exp_gu, RC_DIM_E2IM, RC_DIM_H, RC_IF_MOE, MAT)       /* [n_experts * 2 * moe_inter, hidden]: expert e's gate rows, then its up rows */ \
    X(w_exp_down, RC_DIM_EH, RC_DIM_IM, RC_IF_MOE, MAT)      /* [n_experts * hidden, moe_inter]: expert e's down_proj */ \
    X(w_sh_gate, RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, MAT) /* [shared_inter, hidden] shared_expert.gate_proj */ \
    X(w_sh_up, RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, MAT)   /* [shared_inter, hidden] */                 \
    X(w_sh_down, RC_DIM_H, RC_DIM_IS, RC_IF_SHARED_EXPERT, MAT) /* [hidden, shared_inter] */                 \
    X(w_sh_sig, RC_DIM_1, RC_DIM_H, RC_IF_SHARED_GATE, MAT)     /* [1, hidden] shared_expert_gate, or NULL */ \
    X(sinks, RC_DIM_NH, RC_DIM_1, RC_IF_SINKS, VEC)             /* [n_heads] attention sink logits (gpt-oss), or NULL */ \
    X(b_router, RC_DIM_E, RC_DIM_1, RC_IF_MOE_BIAS, VEC)        /* [n_experts] the router's bias, or NULL */ \
    X(b_exp_gu, RC_DIM_E2IM, RC_DIM_1, RC_IF_MOE_BIAS, VEC)     /* [n_experts * 2 * moe_inter]: expert e's gate bias, then its up bias */ \
    X(b_exp_down, RC_DIM_EH, RC_DIM_1, RC_IF_MOE_BIAS, VEC)     /* [n_experts * hidden]: expert e's down_proj bias */ \
    X(w_lin_qkvz, RC_DIM_LQKVZ, RC_DIM_H, RC_IF_LINEAR, MAT)  /* Gated DeltaNet in_proj_qkvz (per key head: q, k, v, z) */ \
    X(w_lin_ba, RC_DIM_LBA, RC_DIM_H, RC_IF_LINEAR, MAT)      /* in_proj_ba (per key head: b, a) */        \
    X(lin_conv_w, RC_DIM_LCONV, RC_DIM_LK, RC_IF_LINEAR, VEC) /* conv1d.weight [channels, kernel] */        \
    X(lin_dt_bias, RC_DIM_LHV, RC_DIM_1, RC_IF_LINEAR, VEC)   /* dt_bias [lin_hv] */                         \
    X(lin_A_log, RC_DIM_LHV, RC_DIM_1, RC_IF_LINEAR, VEC)     /* A_log [lin_hv] */                           \
    X(lin_norm_w, RC_DIM_LDV, RC_DIM_1, RC_IF_LINEAR, VEC)    /* the gated RMSNorm's weight [lin_dv] */      \
    X(w_lin_out, RC_DIM_H, RC_DIM_LV, RC_IF_LINEAR, MAT)      /* out_proj [hidden, lin_hv * lin_dv] */

/* One weight tensor's storage: row-major elements of dt (RC_F32, RC_BF16 or
 * RC_F16); p NULL when the weight is absent. A model's weights point into the
 * mapped checkpoint when they can be used as stored, else into the model's
 * arena (a copy in the stored dtype, or fp32 for F64 files). */
typedef struct {
    const void *p;
    rc_dtype dt;
    bool mapped; /* p is in the mapped checkpoint (set by the loader, also when dry) */
} rc_wt;

typedef enum { RC_WK_MAT, RC_WK_VEC } rc_weight_kind;

/* A VEC weight of an engine (always fp32) as a float array, NULL if absent. */
static inline const float *rc_wt_vec(rc_wt w) { return (const float *)w.p; }
static inline rc_wt rc_wt_f32(const float *p) { return (rc_wt){p, RC_F32, false}; }
/* element i as fp32 (exact: every storage dtype converts exactly) */
static inline float rc_wt_at(rc_wt w, int64_t i)
{
    const unsigned char *b = (const unsigned char *)w.p;
    if (w.dt == RC_F32) {
        float f;
        memcpy(&f, b + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, b + 2 * i, 2);
    return w.dt == RC_BF16 ? rc_bf16_to_f32(h) : rc_f16_to_f32(h);
}
/* n elements from element i0, converted to fp32 and rounded to round_dt,
 * into dst stored as store_dt (RC_F32, or round_dt itself) */
void rc_wt_convert(rc_wt w, int64_t i0, int64_t n, rc_dtype round_dt, rc_dtype store_dt, void *dst);

#define RC_WEIGHT_PTR_(field, rows, cols, present, kind) rc_wt field;
#define RC_WEIGHT_ONE_(field, rows, cols, present, kind) +1
#define RC_WEIGHT_ID_MODEL_(field, rows, cols, present, kind) RC_MW_##field,
#define RC_WEIGHT_ID_LAYER_(field, rows, cols, present, kind) RC_LW_##field,

typedef struct {
    RC_LAYER_WEIGHT_FIELDS(RC_WEIGHT_PTR_)
} rc_layer_weights;

typedef struct {
    RC_MODEL_WEIGHT_FIELDS(RC_WEIGHT_PTR_)
    rc_layer_weights *layers; /* [n_layers] */
    float *inv_freq;          /* [rotary_dim / 2], fp32 as HF computes it (never rounded) */
    float *inv_freq_local;    /* the sliding layers' [rotary_dim / 2] when rope_theta_local > 0, else NULL */
    float *alibi_slopes;      /* [n_heads] fp32 as the family computes them (never rounded), or NULL */
} rc_weights;

/* Field ids, for the family tensor tables: RC_MW_embed, ..., RC_LW_w_qkv, ... */
typedef enum { RC_MODEL_WEIGHT_FIELDS(RC_WEIGHT_ID_MODEL_) RC_N_MODEL_WEIGHTS } rc_model_weight_id;
typedef enum { RC_LAYER_WEIGHT_FIELDS(RC_WEIGHT_ID_LAYER_) RC_N_LAYER_WEIGHTS } rc_layer_weight_id;

/* Every float pointer of the structs is in the lists (a field added to a
 * struct by hand, outside the lists, fails here). */
#ifdef __cplusplus
#define RC_STATIC_ASSERT static_assert
#else
#define RC_STATIC_ASSERT _Static_assert
#endif
RC_STATIC_ASSERT((0 RC_LAYER_WEIGHT_FIELDS(RC_WEIGHT_ONE_)) * sizeof(rc_wt) == sizeof(rc_layer_weights),
                 "rc_layer_weights has a field outside RC_LAYER_WEIGHT_FIELDS");
RC_STATIC_ASSERT((0 RC_MODEL_WEIGHT_FIELDS(RC_WEIGHT_ONE_)) * sizeof(rc_wt) + sizeof(rc_layer_weights *) +
                         3 * sizeof(float *) ==
                     sizeof(rc_weights),
                 "rc_weights has a field outside RC_MODEL_WEIGHT_FIELDS");
RC_STATIC_ASSERT((0 RC_MODEL_WEIGHT_FIELDS(RC_WEIGHT_ONE_)) == RC_N_MODEL_WEIGHTS &&
                     (0 RC_LAYER_WEIGHT_FIELDS(RC_WEIGHT_ONE_)) == RC_N_LAYER_WEIGHTS,
                 "field id enums out of step with the lists");

/* the weights a quantized checkpoint stores quantized, over the layers
 * loaded: as stored (codes and scales) and dequantized (2-byte values) */
typedef struct {
    int64_t tensors;
    uint64_t code_bytes, scale_bytes, deq_bytes;
    int64_t block[2];       /* FP8: weight_block_size (the last quantized tensor's) */
} rc_quant_sizes;

typedef struct {
    char *dir;
    rc_config cfg;
    rc_weights w;
    rc_safetensors *st;     /* the mapped checkpoint, open while weights point into it (NULL when dry) */
    unsigned char *arena;   /* weights that cannot be used as stored (layout fixes, fused pieces, F64) */
    int64_t arena_bytes;    /* its size */
    int64_t mapped_bytes;   /* weight bytes used in place from the mapped files */
    float *tables;          /* inv_freq (both tables) and the ALiBi slopes */
    int64_t n_params;       /* elements of floating tensors in the checkpoint (a wrapper's: its text model's) */
    /* a wrapper folder's tensors outside its text model (vision tower, projector, MTP layers: not read), their
     * floating elements, and the first of their names in the files' order */
    int64_t n_ignored_tensors, n_ignored_params;
    char ignored_first[96];
    char stored_dtype[16];  /* dtype of the embedding tensor in the files */
    rc_st_stored stored[24]; /* the files' tensors by stored dtype (before any dequantization) */
    int nstored;
    char quant_method[16];  /* config.json's quantization_config.quant_method, or "" */
    rc_quant_sizes qsizes;  /* the quantized weights of the layers loaded (inspect's memory lines) */
} rc_model;

/* Weight-loading context (model.c). */
typedef struct {
    const rc_safetensors *st;
    const rc_config *cfg;
    unsigned char *arena; /* NULL when dry */
    int64_t used, cap;    /* arena bytes */
    int64_t mapped;       /* bytes used in place */
    bool dry;             /* headers only: tensors checked and counted, nothing read (no field has data) */
} rc_loader;

/* Drop the pages of weight w (n elements) from memory when it lies in the
 * mapped checkpoint (they are read again from the file if used); nothing
 * for arena storage. */
void rc_model_release(const rc_model *m, rc_wt w, int64_t n);
/* Find `name` with or without a prefix ("" / "model." / "gpt_neox." ...). */
const char *rc_loader_resolve(const rc_loader *ld, const char *const *prefixes, const char *name,
                              char *buf, size_t n);

/* A config.json integer: its HF key and the aliases other families' configs
 * use for the same value (hidden_size / n_embd / n_embed), read into an
 * int64_t field of rc_config. Missing and required: "<first key>" is missing. */
#define RC_MAX_KEY_ALIASES 4
typedef struct {
    const char *keys[RC_MAX_KEY_ALIASES + 1]; /* first = the name in messages; NULL-terminated */
    size_t offset;                           /* offsetof(rc_config, field) */
    int64_t lo, hi;                          /* range, checked on the value read */
    bool required;
    int64_t def;                             /* when absent and not required */
} rc_config_key;
#define RC_KEY(field, lo, hi, required, def, ...) \
    {{__VA_ARGS__, NULL}, offsetof(rc_config, field), (lo), (hi), (required), (def)}

/* How a table entry's tensor fills its field: the whole field; appended
 * right after the previous entry's (together they fill the field: Llama's
 * q_proj, k_proj, v_proj make w_qkv); or one half of the rows of a stored
 * tensor of 2 x rows rows (HALF0: the first half, whose entry reads the
 * tensor; HALF1: the next entry, the second half of the same tensor; Phi-3's
 * and GLM-4's gate_up_proj: gate rows, then up rows). WHOLE and APPEND are
 * false and true, as the tables write them. */
/* MID1: the whole field, from a file tensor of shape [rows, 1, cols] (a
 * depthwise Conv1d weight, Qwen3-Next's conv1d [channels, 1, kernel]). */
/* APPEND_FIELD: appended as APPEND, the last piece of its field, and its fix runs once over the whole field
 * (rows: the field's; Qwen3.5's separate in_proj_qkv / in_proj_z rows reordered into Qwen3-Next's fused
 * in_proj_qkvz layout). */
typedef enum {
    RC_PIECE_WHOLE = 0,
    RC_PIECE_APPEND = 1,
    RC_PIECE_HALF0,
    RC_PIECE_HALF1,
    RC_PIECE_MID1,
    RC_PIECE_APPEND_FIELD
} rc_piece;

/* One checkpoint tensor the family reads into a weight field. */
typedef struct {
    int field;          /* RC_MW_<field> (model table) or RC_LW_<field> (layer table) */
    const char *name;   /* after the family prefix; in the layer table after "<layer_stem><i>." */
    rc_dim rows, cols;  /* shape in the file; cols RC_DIM_1: a 1-D tensor */
    rc_weight_cond when;/* read when this holds, else the field stays NULL */
    rc_piece piece;     /* the whole field, appended to the previous entry, or a half */
    /* in place after reading into the arena (models/common.h), or NULL:
     * per-head QKV de-interleave, Conv1D transpose (the field then has shape
     * [cols, rows]); elements of elem_size bytes (any storage dtype) */
    rc_status (*fix)(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols);
} rc_tensor_spec;

/* How the forward pass runs this family: the defaults written into rc_config
 * before the family's parse hook (which may override them from config.json). */
typedef struct {
    rc_norm_kind norm;
    bool norm_bias;
    rc_residual_kind residual;
    rc_pos_kind pos;
    rc_mlp_kind mlp;
    rc_act act;
    rc_head_kind head;
} rc_forward_desc;

/* Where a MoE family's experts are (loaded by model.c for every MoE layer,
 * after the layer table): one tensor per expert (the published layout,
 * "<per_expert><e>.<gate|up|down>"), or the fused 3-D tensors of
 * transformers v5 (fused_gate_up [E, 2 * moe_inter, hidden]: expert e's
 * gate rows then its up rows; fused_down [E, hidden, moe_inter]), whichever
 * the checkpoint holds. The router's name may differ between the two
 * (Mixtral's block_sparse_moe.gate is renamed mlp.gate by v5). */
typedef struct {
    const char *router, *router_fused;  /* [n_experts, hidden] */
    const char *per_expert;             /* the stem before the expert index: "mlp.experts." */
    const char *gate, *up, *down;       /* after the stem */
    const char *fused_gate_up, *fused_down;
    /* gpt-oss: the fused tensors only, stored [E, hidden, 2 * moe_inter] with
     * gate and up interleaved in the last dimension (gate = [..., ::2], up =
     * [..., 1::2]) and down [E, moe_inter, hidden] (x @ W, not x @ W^T); the
     * loader copies them into the layout above. */
    bool fused_transposed_interleaved;
    /* the biases (cfg->moe_bias): router [E], gate_up [E, 2 * moe_inter]
     * (interleaved as the weight when fused_transposed_interleaved), down [E, hidden] */
    const char *router_bias, *fused_gate_up_bias, *fused_down_bias;
} rc_expert_spec;

struct rc_arch {
    const char *family;             /* "gpt_neox", "llama" */
    const char *const *model_types; /* NULL-terminated list of HF model_type values */
    const rc_config_key *keys;      /* integer keys, read in this order; ends with a NULL key */
    rc_forward_desc forward;
    const char *const *prefixes;    /* tensor name prefixes tried in order ("gpt_neox.", ""); the
                                     * first names a missing tensor */
    const char *layer_stem;         /* "layers." -> "layers.<i>.<name>" */
    const rc_tensor_spec *model_tensors, *layer_tensors; /* in arena order; end with name NULL */
    /* The rest of config.json (hidden_act, eps, biases, rope, head_dim, ...);
     * the keys and forward defaults are already in cfg. */
    rc_status (*parse_config)(const json_t *root, const char *path, rc_config *cfg);
    const rc_expert_spec *experts;  /* MoE families only, else NULL */
};

/* model.c: elements the weight fields take for cfg (checked arithmetic). */
rc_status rc_weights_numel(const rc_config *cfg, int64_t *n);
int64_t rc_dim_value(const rc_config *cfg, rc_dim d);
bool rc_weight_cond_holds(const rc_config *cfg, rc_weight_cond w);
/* w in decoder layer l (the per-layer conditions: dense or MoE layer) */
bool rc_weight_cond_holds_layer(const rc_config *cfg, rc_weight_cond w, int64_t l);
/* layer l is a mixture-of-experts layer (Qwen2MoeDecoderLayer's rule: not in
 * mlp_only_layers, num_experts > 0 and (l + 1) % decoder_sparse_step == 0) */
bool rc_layer_is_moe(const rc_config *cfg, int64_t l);
/* a decoder layer's weight field id keeps its stored values in every run
 * (never rounded to the run's dtype): the router and its selection bias of a
 * family whose transformers class keeps them fp32 (cfg->router_gate_f32:
 * _keep_in_fp32_modules_strict "gate.weight", "e_score_correction_bias") */
bool rc_layer_weight_keeps_f32(const rc_config *cfg, int id);
/* layer l is a Gated DeltaNet layer (cfg->layer_linear) */
static inline bool rc_layer_is_linear(const rc_config *cfg, int64_t l)
{
    return cfg->n_linear > 0 && l >= 0 && l < RC_LIM_LAYERS && cfg->layer_linear[l];
}


/* Decoder layer l's weights (elements, every field the layer holds: all of a
 * MoE layer's experts) and its GEMM FLOPs per token (a MoE layer: the router,
 * top_k experts and the shared expert, the ones a token runs). false when a
 * size overflows. */
bool rc_layer_cost(const rc_config *cfg, int64_t l, int64_t *weight_elems, double *flop_per_token);

/* models/registry.c */
const rc_arch *rc_arch_for_model_type(const char *model_type);
/* Every family, NULL-terminated (registry order). */
const rc_arch *const *rc_arch_all(void);
/* Comma-separated list of supported model types (families, then wrappers), for messages. */
const char *rc_arch_supported_list(void);
/* The wrapper whose model_type this is, or NULL; every wrapper, NULL-terminated. */
const rc_wrapper *rc_wrapper_for_model_type(const char *model_type);
const rc_wrapper *const *rc_wrapper_all(void);
/* The tensor name prefixes of a loaded config: its wrapper's, else its family's. */
const char *const *rc_config_prefixes(const rc_config *cfg);

/* hf_config.c: parse config.json (or a JSON object already loaded). */
/* Read an integer under the first of `keys` present (NULL-terminated); two
 * aliases present at once is an error naming both. *present as rc_json_get_int. */
rc_status rc_config_get_int_alias(const json_t *root, const char *path, const char *const *keys,
                                  int64_t lo, int64_t hi, int64_t def, int64_t *out, bool *present);
rc_status rc_config_load(const char *dir, rc_config *cfg);
rc_status rc_config_parse(const json_t *root, const char *path, rc_config *cfg);

/* Shared config helpers for the family files. */
rc_status rc_config_parse_rope(const json_t *root, const char *path, rc_config *cfg,
                               double default_theta, double default_partial,
                               const char *legacy_theta_key, const char *legacy_partial_key);
rc_status rc_config_finish(const char *path, rc_config *cfg);
/* The warning for eos_token_id values outside the vocabulary (cfg->eos_dropped),
 * one line into buf, or false and buf "" when there are none. */
bool rc_config_eos_warning(const rc_config *cfg, char *buf, size_t n);
/* "layer_types" (a list of n_layers strings: full_attention, or its legacy
 * name attention, and sliding_attention; anything else refused by name)
 * into cfg->layer_sliding, with window_per_layer set; *present false and
 * nothing changed when the key is absent or null. */
rc_status rc_config_parse_layer_types(const json_t *root, const char *path, rc_config *cfg, bool *present);
/* A norm epsilon (rms_norm_eps, layer_norm_eps): a number > 0 that stays > 0
 * as fp32 (the forward adds (float)eps), at most 1; else RC_ERR_FORMAT
 * naming the file and the key. */
rc_status rc_config_get_norm_eps(const json_t *root, const char *path, const char *key, double def,
                                 double *out);

/* model.c */
/* --model's folder exists and is a folder: RC_ERR_IO naming it otherwise, with
 * how to download it when it looks like a Hugging Face Hub id ("org/name"),
 * RC_ERR_USAGE when it is a file. rc_model_load* call it first. */
rc_status rc_model_dir_check(const char *dir);
rc_status rc_model_load(const char *dir, rc_model **out);
/* rc_model_load (dry: rc_model_load_headers) of the first n_layers decoder
 * layers only (--layers N; 0: all): cfg.n_layers becomes N (at most the
 * model's), cfg.n_layers_model keeps the checkpoint's count, and the forward
 * runs those layers, then the final norm and the head. */
rc_status rc_model_load_layers(const char *dir, int64_t n_layers, bool dry, rc_model **out);
/* rc_model_load without reading a weight: config.json and the safetensors
 * headers, every tensor the family needs checked for presence, shape and a
 * float dtype, arena_bytes, mapped_bytes, n_params and stored_dtype set and
 * each present weight's storage dtype (rc_wt.dt), but no data (every p
 * NULL). What `inspect` needs, in a few MB for any model size. */
rc_status rc_model_load_headers(const char *dir, rc_model **out);
void rc_model_free(rc_model *m);
/* For a run whose every engine computes in dt (bf16 or fp16; anything else:
 * nothing done): the layer GEMM weights the model copied at load (a layout
 * fix such as GPT-NeoX's fused QKV de-interleaved, Llama's q/k/v fused, a
 * Conv1D transpose, F64 files) and holds in another dtype are rounded to dt
 * once and stored at its width, in a new arena (the old one is freed). They
 * are then exactly the values an engine in dt would round them to, and an
 * engine in dt uses them in place instead of copying them. Not for a run
 * that also needs their stored values: an fp32 side or reference, the fp64
 * reference. Dry (rc_model_load_headers): the dtypes and arena_bytes only. */
rc_status rc_model_narrow(rc_model *m, rc_dtype dt);
/* cfg's RoPE made the sliding layers' (rope_theta_local > 0): default type,
 * base rope_theta_local, attention factor 1 (Gemma 3's local rotary, OLMo 3's
 * sliding layers) */
static inline void rc_config_local_rope(rc_config *cfg)
{
    cfg->rope_type = RC_ROPE_DEFAULT;
    cfg->rope_theta = cfg->rope_theta_local;
    cfg->rope_factor = 1.0;
    cfg->rope_attn_factor = 1.0;
}
/* Compute HF's fp32 inv_freq for cfg (rope type and scaling included). */
void rc_rope_inv_freq(const rc_config *cfg, float *inv_freq);
/* A sequence of n_positions positions can run: RC_ERR_UNSUPPORTED for
 * longrope past original_max_position_embeddings (transformers then rotates
 * every position of a forward call with long_factor, so its KV-cached
 * generation and its full forward part ways), naming both numbers. */
rc_status rc_config_check_positions(const rc_config *cfg, int64_t n_positions);
/* RoPE of layer l: the sliding layers' own table (rc_config_local_rope) when
 * the config gives them one */
static inline bool rc_layer_rope_local(const rc_config *cfg, int64_t l)
{
    return cfg->rope_theta_local > 0 && l >= 0 && l < RC_LIM_LAYERS && cfg->layer_sliding[l];
}
/* YaRN's correction range [low, high] over the rotary pair index, as
 * find_correction_range computes it (Python floats; floor / ceil with
 * truncate; clamped to [0, rotary_dim - 1]). */
void rc_yarn_range(const rc_config *cfg, double *low, double *high);
/* The sliding window of layer l (0: none): cfg->sliding_window for every
 * layer, or for the sliding layers only when cfg->window_per_layer. */
static inline int64_t rc_layer_window(const rc_config *cfg, int64_t l)
{
    return !cfg->window_per_layer || (l >= 0 && l < RC_LIM_LAYERS && cfg->layer_sliding[l]) ? cfg->sliding_window
                                                                                            : 0;
}
/* The family's fp32 ALiBi slopes for cfg->n_heads heads (cfg->alibi_slopes);
 * slopes64: the same formula in double (the fp64 reference). Either may be NULL. */
void rc_alibi_slopes_compute(const rc_config *cfg, float *slopes, double *slopes64);

#endif
