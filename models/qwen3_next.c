/* Qwen3-Next: transformers' Qwen3NextForCausalLM (models/qwen3_next/modeling_qwen3_next.py), a hybrid of
 * Gated DeltaNet linear-attention layers and full-attention layers (layer_types, or full_attention_interval:
 * layer i is full attention when (i + 1) % interval == 0), each followed by the sparse MoE block with its
 * gated shared expert (or the dense MLP: mlp_only_layers, decoder_sparse_step). docs/numerics.md "Gated
 * DeltaNet" and "Qwen3-Next" hold the rules; docs/linear-attention-cache.md the cache.
 *
 *  - every RMSNorm (input / post-attention, q / k norms, the final norm) is Qwen3NextRMSNorm:
 *    x * rsqrt(mean x^2 + eps) * (1 + w) in fp32, rounded once (Gemma's rule: norm_w_offset);
 *  - full attention: q_proj gives, per head, head_dim query rows then head_dim gate rows; q / k norms per
 *    head before RoPE; partial rotary (partial_rotary_factor, default 0.25); the attention output times
 *    sigmoid(gate) before o_proj;
 *  - Gated DeltaNet (src/engine/gdn.c): in_proj_qkvz, in_proj_ba (per key head: q, k, the value heads' v and
 *    z; b, a), the causal depthwise conv1d + SiLU, g = -exp(A_log) * softplus(a + dt_bias),
 *    beta = sigmoid(b), the gated delta rule (chunked over a call's tokens, recurrent for one cached token),
 *    the gated RMSNorm (Qwen3NextRMSNormGated), out_proj;
 *  - MoE: softmax router in fp32, top-k, renormalised (norm_topk_prob, default true), weights cast to the
 *    dtype; the shared expert times sigmoid(shared_expert_gate(x)) (Qwen2-MoE's block, src/engine/moe.c).
 * config.json (Qwen3NextConfig defaults): head_dim 256, num_key_value_heads 2, rms_norm_eps 1e-6,
 *   hidden_act silu, attention_bias false (true is refused), linear_* (conv 4, key / value head dims 128,
 *   16 key / 32 value heads), num_experts 512, num_experts_per_tok 10, moe_intermediate_size 512,
 *   shared_expert_intermediate_size 512, decoder_sparse_step 1, mlp_only_layers [], layer_types or
 *   full_attention_interval (4), tie_word_embeddings false, rope (theta 10000, partial 0.25).
 * Tensors (after "model.layers.{i}."): input_layernorm, post_attention_layernorm; a linear layer's
 *   linear_attn.{in_proj_qkvz, in_proj_ba, out_proj}.weight, linear_attn.conv1d.weight [C, 1, K],
 *   linear_attn.dt_bias, linear_attn.A_log, linear_attn.norm.weight; a full layer's self_attn.{q,k,v,o}_proj,
 *   q_norm, k_norm; the MoE's mlp.gate, experts (per expert or fused), shared_expert, shared_expert_gate. */
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "gdn.h"
#include "model.h"
#include "util.h"

static const char *const k_types[] = {"qwen3_next", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

/* q_proj [n_heads * 2 head_dim, hidden], per head its query rows then its gate rows, into all gate rows
 * (the first half: w_q_gate) then all query rows (the second: w_qkv's Q) */
static rc_status q_gate_split(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols)
{
    const int64_t nh = cfg->n_heads, d = cfg->head_dim;
    if (rows != 2 * nh * d)
        return rc_errorf(RC_ERR_INTERNAL, "q_proj: %lld rows for %lld heads of %lld", (long long)rows,
                         (long long)nh, (long long)d);
    const size_t row = (size_t)cols * (size_t)elem_size, blk = row * (size_t)d;
    unsigned char *tmp = malloc(blk * (size_t)(2 * nh));
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory (q_proj split)");
    unsigned char *src = data;
    for (int64_t h = 0; h < nh; h++) {
        memcpy(tmp + (size_t)(nh + h) * blk, src + (size_t)(2 * h) * blk, blk);  /* query */
        memcpy(tmp + (size_t)h * blk, src + (size_t)(2 * h + 1) * blk, blk);     /* gate */
    }
    memcpy(data, tmp, blk * (size_t)(2 * nh));
    free(tmp);
    return RC_OK;
}

/* layer_types (linear_attention / full_attention), else full_attention_interval */
static rc_status parse_layer_kinds(const json_t *root, const char *path, rc_config *cfg)
{
    const json_t *lt = json_object_get(root, "layer_types");
    memset(cfg->layer_linear, 0, sizeof cfg->layer_linear);
    cfg->n_linear = 0;
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int64_t)json_array_size(lt) != cfg->n_layers)
            return rc_errorf(RC_ERR_FORMAT, "%s: layer_types is not a list of num_hidden_layers (%lld) strings", path,
                             (long long)cfg->n_layers);
        for (int64_t l = 0; l < cfg->n_layers; l++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)l));
            if (!s || (strcmp(s, "linear_attention") != 0 && strcmp(s, "full_attention") != 0))
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: layer_types[%lld] \"%.40s\" is not supported for %s "
                                 "(supported: linear_attention, full_attention)", path, (long long)l,
                                 s ? s : "(not a string)", cfg->model_type);
            cfg->layer_linear[l] = strcmp(s, "linear_attention") == 0;
        }
    } else {
        int64_t iv;
        RC_TRY(rc_json_get_int(root, "full_attention_interval", path, 1, RC_LIM_LAYERS, 4, &iv, NULL));
        for (int64_t l = 0; l < cfg->n_layers; l++)
            cfg->layer_linear[l] = (l + 1) % iv != 0;
    }
    for (int64_t l = 0; l < cfg->n_layers; l++)
        cfg->n_linear += cfg->layer_linear[l];
    return RC_OK;
}

static rc_status qwen3_next_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, cfg->n_heads, cfg->n_heads < 2 ? cfg->n_heads : 2,
                           &cfg->n_kv_heads, NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, RC_LIM_HEAD_DIM, 256, &cfg->head_dim, NULL));
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for %s (supported: silu)",
                         path, act, cfg->model_type);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    bool ab;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
    if (ab)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: attention_bias = true is not supported for %s", path,
                         cfg->model_type);
    cfg->qkv_bias = cfg->o_bias = cfg->mlp_bias = false;
    cfg->qk_norm = RC_QK_NORM_HEAD;
    cfg->norm_w_offset = cfg->norm_w_f32 = true; /* Qwen3NextRMSNorm: (1 + w) in fp32, one rounding */
    cfg->attn_out_gate = true;
    RC_TRY(rc_json_get_bool(root, "norm_topk_prob", path, true, &cfg->norm_topk_prob, NULL));
    cfg->moe_weights_f32 = false; /* router_top_value.to(router_logits.dtype) */
    if (cfg->top_k > cfg->n_experts)
        return rc_errorf(RC_ERR_FORMAT, "%s: num_experts_per_tok %lld exceeds the %lld experts", path,
                         (long long)cfg->top_k, (long long)cfg->n_experts);
    RC_TRY(rc_parse_mlp_only(root, path, cfg));
    RC_TRY(parse_layer_kinds(root, path, cfg));
    const rc_gdn_dims gd = {cfg->lin_hk, cfg->lin_hv, cfg->lin_dk, cfg->lin_dv};
    rc_status s = rc_gdn_dims_check(&gd);
    if (s != RC_OK)
        return rc_error_prefix(s, "%s", path);
    int64_t w;
    if (!rc_mul_i64(2 * cfg->lin_hk, cfg->lin_dk, &w) || !rc_mul_i64(2 * cfg->lin_hv, cfg->lin_dv, &w))
        return rc_errorf(RC_ERR_FORMAT, "%s: linear attention sizes overflow", path);
    /* Qwen3NextConfig: partial_rotary_factor 0.25 unless given */
    return rc_config_parse_rope(root, path, cfg, 10000.0, 0.25, NULL, NULL);
}

static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, false, 5632, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 32768, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    RC_KEY(n_experts, 0, 1 << 16, false, 512, "num_experts"),
    RC_KEY(top_k, 1, 1 << 16, false, 10, "num_experts_per_tok"),
    RC_KEY(moe_intermediate, 1, RC_LIM_INTER, false, 512, "moe_intermediate_size"),
    RC_KEY(shared_intermediate, 0, RC_LIM_INTER, false, 512, "shared_expert_intermediate_size"),
    RC_KEY(sparse_step, 1, RC_LIM_LAYERS, false, 1, "decoder_sparse_step"),
    RC_KEY(lin_hk, 1, RC_LIM_HEADS, false, 16, "linear_num_key_heads"),
    RC_KEY(lin_hv, 1, RC_LIM_HEADS, false, 32, "linear_num_value_heads"),
    RC_KEY(lin_dk, 1, RC_LIM_HEAD_DIM, false, 128, "linear_key_head_dim"),
    RC_KEY(lin_dv, 1, RC_LIM_HEAD_DIM, false, 128, "linear_value_head_dim"),
    RC_KEY(lin_conv_k, 1, 64, false, 4, "linear_conv_kernel_dim"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    /* full attention: q_proj split into the gate (w_q_gate) and Q (w_qkv, then K and V appended) */
    {RC_LW_w_q_gate, "self_attn.q_proj.weight", RC_DIM_Q, RC_DIM_H, RC_IF_ATTN, RC_PIECE_HALF0, q_gate_split},
    {RC_LW_w_qkv, "self_attn.q_proj.weight", RC_DIM_Q, RC_DIM_H, RC_IF_ATTN, RC_PIECE_HALF1, NULL},
    {RC_LW_w_qkv, "self_attn.k_proj.weight", RC_DIM_KV, RC_DIM_H, RC_IF_ATTN, RC_PIECE_APPEND, NULL},
    {RC_LW_w_qkv, "self_attn.v_proj.weight", RC_DIM_KV, RC_DIM_H, RC_IF_ATTN, RC_PIECE_APPEND, NULL},
    RC_LLAMA_QK_NORM_TENSORS,
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_Q, RC_IF_ATTN, false, NULL},
    /* Gated DeltaNet */
    {RC_LW_w_lin_qkvz, "linear_attn.in_proj_qkvz.weight", RC_DIM_LQKVZ, RC_DIM_H, RC_IF_LINEAR, false, NULL},
    {RC_LW_w_lin_ba, "linear_attn.in_proj_ba.weight", RC_DIM_LBA, RC_DIM_H, RC_IF_LINEAR, false, NULL},
    {RC_LW_lin_conv_w, "linear_attn.conv1d.weight", RC_DIM_LCONV, RC_DIM_LK, RC_IF_LINEAR, RC_PIECE_MID1, NULL},
    {RC_LW_lin_dt_bias, "linear_attn.dt_bias", RC_DIM_LHV, RC_DIM_1, RC_IF_LINEAR, false, NULL},
    {RC_LW_lin_A_log, "linear_attn.A_log", RC_DIM_LHV, RC_DIM_1, RC_IF_LINEAR, false, NULL},
    {RC_LW_lin_norm_w, "linear_attn.norm.weight", RC_DIM_LDV, RC_DIM_1, RC_IF_LINEAR, false, NULL},
    {RC_LW_w_lin_out, "linear_attn.out_proj.weight", RC_DIM_H, RC_DIM_LV, RC_IF_LINEAR, false, NULL},
    RC_LLAMA_MLP_TENSORS(RC_IF_DENSE),
    {RC_LW_w_sh_gate, "mlp.shared_expert.gate_proj.weight", RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, false,
     NULL},
    {RC_LW_w_sh_up, "mlp.shared_expert.up_proj.weight", RC_DIM_IS, RC_DIM_H, RC_IF_SHARED_EXPERT, false,
     NULL},
    {RC_LW_w_sh_down, "mlp.shared_expert.down_proj.weight", RC_DIM_H, RC_DIM_IS, RC_IF_SHARED_EXPERT, false,
     NULL},
    {RC_LW_w_sh_sig, "mlp.shared_expert_gate.weight", RC_DIM_1, RC_DIM_H, RC_IF_SHARED_EXPERT, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_expert_spec k_experts = {
    .router = "mlp.gate.weight",
    .router_fused = "mlp.gate.weight",
    .per_expert = "mlp.experts.",
    .gate = "gate_proj.weight",
    .up = "up_proj.weight",
    .down = "down_proj.weight",
    .fused_gate_up = "mlp.experts.gate_up_proj",
    .fused_down = "mlp.experts.down_proj",
};

const rc_arch rc_arch_qwen3_next = {
    .family = "qwen3_next",
    .model_types = k_types,
    .keys = k_keys,
    .forward = {.norm = RC_NORM_RMS,
                .norm_bias = false,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_ROTARY,
                .mlp = RC_MLP_GATED,
                .act = RC_ACT_SILU,
                .head = RC_HEAD_UNTIED},
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_layer_tensors,
    .parse_config = qwen3_next_parse,
    .experts = &k_experts,
};
