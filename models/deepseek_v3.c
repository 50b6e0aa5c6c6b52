/* DeepSeek-V3 family: transformers' DeepseekV3ForCausalLM
 * (models/deepseek_v3/modeling_deepseek_v3.py), the architecture of
 * DeepSeek-V3 / R1, Kimi-K2 and Moonlight.
 *
 * Multi-head latent attention (docs/mla.md): per layer
 *   q       = q_b_proj(q_a_layernorm(q_a_proj(x)))   (q_lora_rank; or q_proj(x) when null)
 *   ckv     = kv_a_proj_with_mqa(x) = [latent (kv_lora_rank), k_rope (qk_rope_head_dim)]
 *   latent  = kv_a_layernorm(latent)                 (RMSNorm, eps 1e-6: DeepseekV3RMSNorm's default)
 *   [k_nope, v] per head = kv_b_proj(latent)         (qk_nope_head_dim, v_head_dim)
 *   RoPE on q's last qk_rope_head_dim values of each head and on k_rope (one
 *   key shared by the heads); rope_interleave: those values are interleaved
 *   pairs (HF rotates the even / odd slices: the de-interleaved rotate_half,
 *   bit for bit), undone here on the weight rows at load;
 *   softmax scale qk_head_dim ** -0.5, times mscale^2 with mscale =
 *   0.1 mscale_all_dim ln(factor) + 1 when the rope has a type and
 *   mscale_all_dim (yarn_apply_mscale); o_proj over n_heads * v_head_dim.
 * The engine computes each head with its RoPE values first, [rope, nope]
 * (q_b_proj / q_proj rows moved at load; a dot product's terms reordered,
 * which exact arithmetic does not see), so that the shared rope kernel
 * rotates the leading rotary_dim values as for every other family.
 * attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj (q_proj, q_b_proj
 * and kv_b_proj never have one).
 *
 * Layers below first_k_dense_replace have Llama's gated SiLU MLP
 * (intermediate_size); the others are mixture-of-experts layers as
 * DeepseekV3MoE computes them, the same module as GLM-4.5's (models/glm4_moe.c):
 * the grouped sigmoid router (fp32 gate, e_score_correction_bias for the
 * choice only, n_group / topk_group group-limited top-k, norm_topk_prob,
 * routed_scaling_factor; rc_grouped_moe_parse in models/common.c),
 * n_routed_experts experts of moe_intermediate_size, top
 * num_experts_per_tok, and n_shared_experts x moe_intermediate_size of shared
 * experts added without a gate (deepseek_moe_parse).
 *
 * config.json (DeepseekV3Config defaults where a key is absent):
 *   q_lora_rank (1536, null: q_proj), kv_lora_rank (512), qk_nope_head_dim
 *   (128), qk_rope_head_dim (64), v_head_dim (128), num_key_value_heads
 *   (must equal num_attention_heads: the expanded K / V have one head per
 *   query head), rms_norm_eps (1e-6), hidden_act (silu), attention_bias
 *   (false), rope_interleave (true), tie_word_embeddings (false),
 *   max_position_embeddings (4096), rope (theta 10000; yarn with mscale,
 *   mscale_all_dim), first_k_dense_replace (3), n_routed_experts (256; alias
 *   num_local_experts), num_experts_per_tok (8), moe_intermediate_size
 *   (2048), n_shared_experts (1), n_group (8), topk_group (4),
 *   norm_topk_prob (true), routed_scaling_factor (2.5), topk_method
 *   (noaux_tc), scoring_func (sigmoid), moe_layer_freq (1).
 * Tensors (after "model.layers.{i}."):
 *   self_attn.q_a_proj.weight [q_lora, H] (+ .bias), self_attn.q_a_layernorm.weight [q_lora],
 *   self_attn.q_b_proj.weight [nh * (nope + rope), q_lora]  or  self_attn.q_proj.weight [nh * (nope + rope), H]
 *   self_attn.kv_a_proj_with_mqa.weight [kv_lora + rope, H] (+ .bias), self_attn.kv_a_layernorm.weight [kv_lora]
 *   self_attn.kv_b_proj.weight [nh * (nope + v), kv_lora]
 *   self_attn.o_proj.weight [H, nh * v] (+ .bias)
 *   input_layernorm, post_attention_layernorm, mlp.{gate,up,down}_proj as Llama's (dense layers);
 *   MoE layers: RC_GROUPED_MOE_TENSORS and rc_grouped_moe_experts (models/common.h): mlp.gate.weight [E, H],
 *   mlp.gate.e_score_correction_bias [E], mlp.experts.{e}.{gate,up,down}_proj.weight (or the fused
 *   mlp.experts.gate_up_proj [E, 2 Im, H] / mlp.experts.down_proj [E, H, Im]),
 *   mlp.shared_experts.{gate,up,down}_proj.weight. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"deepseek_v3", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

/* rows [r0, r0 + n) of a [rows, cols] matrix of es-byte elements: the
 * interleaved pairs (x0, x1), (x2, x3), ... moved to rotate_half's layout
 * (x0, x2, ..., x1, x3, ...), as HF's q[..., 0::2] / q[..., 1::2] slices */
static void deinterleave_rows(unsigned char *data, int64_t r0, int64_t n, int64_t row_bytes, unsigned char *tmp)
{
    const int64_t half = n / 2;
    for (int64_t j = 0; j < n; j++) {
        const int64_t src = j < half ? 2 * j : 2 * (j - half) + 1;
        memcpy(tmp + j * row_bytes, data + (r0 + src) * row_bytes, (size_t)row_bytes);
    }
    memcpy(data + r0 * row_bytes, tmp, (size_t)(n * row_bytes));
}

/* q_b_proj / q_proj rows [nh][nope + rope] -> [nh][rope + nope], the rope
 * rows de-interleaved when rope_interleave */
static rc_status mla_q_rows(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols)
{
    const int64_t dn = cfg->qk_nope_dim, dr = cfg->qk_rope_dim, d = dn + dr;
    if (d <= 0 || rows != cfg->n_heads * d)
        return rc_errorf(RC_ERR_INTERNAL, "MLA q rows: %lld rows for %lld heads of %lld", (long long)rows,
                         (long long)cfg->n_heads, (long long)d);
    const int64_t rb = cols * elem_size;
    unsigned char *tmp = malloc((size_t)(d * rb));
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    unsigned char *b = data;
    for (int64_t h = 0; h < cfg->n_heads; h++) {
        unsigned char *head = b + h * d * rb;
        memcpy(tmp, head + dn * rb, (size_t)(dr * rb)); /* rope rows first */
        memcpy(tmp + dr * rb, head, (size_t)(dn * rb));
        memcpy(head, tmp, (size_t)(d * rb));
        if (cfg->rope_interleave)
            deinterleave_rows(head, 0, dr, rb, tmp);
    }
    free(tmp);
    return RC_OK;
}

/* kv_a_proj_with_mqa rows (or its bias) [kv_lora + rope]: the rope rows
 * de-interleaved when rope_interleave, the order kept */
static rc_status mla_kva_rows(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols)
{
    if (rows != cfg->kv_lora_rank + cfg->qk_rope_dim)
        return rc_errorf(RC_ERR_INTERNAL, "MLA kv_a rows: %lld", (long long)rows);
    if (!cfg->rope_interleave)
        return RC_OK;
    const int64_t rb = cols * elem_size;
    unsigned char *tmp = malloc((size_t)(cfg->qk_rope_dim * rb));
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    deinterleave_rows(data, cfg->kv_lora_rank, cfg->qk_rope_dim, rb, tmp);
    free(tmp);
    return RC_OK;
}

/* The MoE settings (docs/routing.md "Routers"): the grouped sigmoid router
 * that GLM-4.5 shares (rc_grouped_moe_parse), with DeepseekV3Config's
 * defaults. transformers' DeepseekV3TopkRouter computes noaux_tc with sigmoid
 * scores whatever topk_method / scoring_func say; the published configs name
 * exactly that, and anything else is refused by name rather than run as
 * something it is not. moe_layer_freq (in DeepSeek's own configs, read by its
 * remote modeling code, not by transformers): a value other than 1 would make
 * the two disagree on which layers are MoE, so it is refused. A config whose
 * layers are all dense (first_k_dense_replace >= num_hidden_layers) keeps no
 * experts (n_experts 0). */
static rc_status deepseek_moe_parse(const json_t *root, const char *path, rc_config *cfg)
{
    const char *s;
    RC_TRY(rc_json_get_str(root, "topk_method", path, "noaux_tc", &s, NULL));
    if (strcmp(s, "noaux_tc") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: topk_method \"%.32s\" is not supported for %s (supported: noaux_tc, "
                         "what transformers' DeepseekV3TopkRouter computes)", path, s, cfg->model_type);
    RC_TRY(rc_json_get_str(root, "scoring_func", path, "sigmoid", &s, NULL));
    if (strcmp(s, "sigmoid") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: scoring_func \"%.32s\" is not supported for %s (supported: sigmoid)",
                         path, s, cfg->model_type);
    int64_t freq;
    RC_TRY(rc_json_get_int(root, "moe_layer_freq", path, 1, RC_LIM_LAYERS, 1, &freq, NULL));
    if (freq != 1)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: moe_layer_freq %lld is not supported for %s (supported: 1; "
                         "transformers makes every layer from first_k_dense_replace on a MoE layer)", path,
                         (long long)freq, cfg->model_type);
    static const rc_grouped_moe_defaults k_moe = {.n_shared = 1, .first_dense = 3, .routed_scale = 2.5,
                                                  .norm_topk_prob = true};
    RC_TRY(rc_grouped_moe_parse(root, path, cfg, &k_moe));
    bool any_moe = false;
    for (int64_t l = 0; l < cfg->n_layers && l < RC_LIM_LAYERS; l++)
        any_moe = any_moe || !((cfg->mlp_only[l / 64] >> (l % 64)) & 1u);
    if (!any_moe)
        cfg->n_experts = 0;
    return RC_OK;
}

/* yarn_get_mscale(scale, mscale) in Python floats */
static double yarn_get_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static rc_status deepseek_v3_parse(const json_t *root, const char *path, rc_config *cfg)
{
    bool present;
    /* latent attention sizes */
    cfg->mla = true;
    RC_TRY(rc_json_get_int(root, "q_lora_rank", path, 1, RC_LIM_HIDDEN, 1536, &cfg->q_lora_rank, &present));
    if (!present && json_object_get(root, "q_lora_rank")) /* null: a plain q_proj */
        cfg->q_lora_rank = 0;
    RC_TRY(rc_json_get_int(root, "kv_lora_rank", path, 1, RC_LIM_HIDDEN, 512, &cfg->kv_lora_rank, NULL));
    RC_TRY(rc_json_get_int(root, "qk_nope_head_dim", path, 0, RC_LIM_HEAD_DIM, 128, &cfg->qk_nope_dim, NULL));
    RC_TRY(rc_json_get_int(root, "qk_rope_head_dim", path, 2, RC_LIM_HEAD_DIM, 64, &cfg->qk_rope_dim, NULL));
    RC_TRY(rc_json_get_int(root, "v_head_dim", path, 1, RC_LIM_HEAD_DIM, 128, &cfg->v_head_dim, NULL));
    if (cfg->qk_rope_dim % 2 != 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: qk_rope_head_dim %lld is odd (RoPE rotates pairs)", path,
                         (long long)cfg->qk_rope_dim);
    const int64_t dqk = cfg->qk_nope_dim + cfg->qk_rope_dim;
    if (dqk > RC_LIM_HEAD_DIM || cfg->kv_lora_rank + cfg->qk_rope_dim > RC_LIM_HEAD_DIM)
        return rc_errorf(RC_ERR_FORMAT, "%s: qk_nope_head_dim + qk_rope_head_dim (%lld) or kv_lora_rank + "
                         "qk_rope_head_dim (%lld) exceeds %d", path, (long long)dqk,
                         (long long)(cfg->kv_lora_rank + cfg->qk_rope_dim), RC_LIM_HEAD_DIM);
    if (cfg->v_head_dim > dqk) /* the expanded attention holds each value head in a q/k head's width */
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: v_head_dim %lld is wider than qk_nope_head_dim + qk_rope_head_dim "
                         "%lld: not supported", path, (long long)cfg->v_head_dim, (long long)dqk);
    int64_t nkv;
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, RC_LIM_HEADS, cfg->n_heads, &nkv, NULL));
    if (nkv != cfg->n_heads) /* expand_kv makes one K / V head per query head; repeat_kv would not fit */
        return rc_errorf(RC_ERR_FORMAT, "%s: num_key_value_heads %lld differs from num_attention_heads %lld (latent "
                         "attention expands one key and value head per query head)", path, (long long)nkv,
                         (long long)cfg->n_heads);
    cfg->n_kv_heads = cfg->n_heads;
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for %s (supported: silu)",
                         path, act, cfg->model_type);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    cfg->mla_norm_eps = 1e-6; /* q_a_layernorm / kv_a_layernorm: DeepseekV3RMSNorm(rank), eps not passed */
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    bool ab;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
    cfg->qkv_bias = cfg->o_bias = ab; /* q_a_proj, kv_a_proj_with_mqa, o_proj */
    cfg->mlp_bias = false;
    RC_TRY(rc_json_get_bool(root, "rope_interleave", path, true, &cfg->rope_interleave, NULL));
    /* RoPE over qk_rope_head_dim (DeepseekV3Config.head_dim = qk_rope_head_dim) */
    cfg->head_dim = cfg->qk_rope_dim;
    RC_TRY(rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL));
    if (cfg->rotary_dim != cfg->qk_rope_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s (transformers rotates all "
                         "qk_rope_head_dim values): not supported", path, cfg->model_type);
    cfg->head_dim = dqk;
    /* the softmax scale: qk_head_dim ** -0.5, times mscale^2 (yarn_apply_mscale) */
    const json_t *rp = json_object_get(root, "rope_parameters");
    if (!rp || !json_is_object(rp))
        rp = json_object_get(root, "rope_scaling");
    double scale = pow((double)dqk, -0.5);
    if (cfg->rope_type != RC_ROPE_DEFAULT && rp && json_is_object(rp)) {
        double msa, factor;
        RC_TRY(rc_json_get_num(rp, "mscale_all_dim", path, -1e6, 1e6, 0.0, &msa, NULL));
        if (msa != 0.0) {
            RC_TRY(rc_json_get_num(rp, "factor", path, 1e-6, 1e6, 0.0, &factor, &present));
            if (!present)
                return rc_errorf(RC_ERR_FORMAT, "%s: rope scaling with mscale_all_dim needs \"factor\"", path);
            const double m = yarn_get_mscale(factor, msa);
            scale = scale * m * m;
        }
    }
    if (!(scale > 0.0) || !isfinite((float)scale))
        return rc_errorf(RC_ERR_FORMAT, "%s: the softmax scale %g (mscale_all_dim) is not a positive fp32 value",
                         path, scale);
    cfg->softmax_scale = scale;
    RC_TRY(deepseek_moe_parse(root, path, cfg));
    cfg->router_gate_engine_dt = true; /* vLLM's DeepseekV2MoE: a gate in the model dtype (router=dtype) */
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then deepseek_v3_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 4096, "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, 0, "bos_token_id"),
    RC_KEY(n_experts, 1, 1 << 16, false, 256, "n_routed_experts", "num_local_experts"),
    RC_KEY(top_k, 1, 1 << 16, false, 8, "num_experts_per_tok"),
    RC_KEY(moe_intermediate, 1, RC_LIM_INTER, false, 2048, "moe_intermediate_size"),
    RC_KEY(n_group, 1, 1 << 16, false, 8, "n_group"),
    RC_KEY(topk_group, 1, 1 << 16, false, 4, "topk_group"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    RC_LLAMA_MODEL_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_mqa, "self_attn.q_a_proj.weight", RC_DIM_QL, RC_DIM_H, RC_IF_MLA_QLORA, false, NULL},
    {RC_LW_b_mqa, "self_attn.q_a_proj.bias", RC_DIM_QL, RC_DIM_1, RC_IF_MLA_QLORA_BIAS, false, NULL},
    {RC_LW_mq_ln_w, "self_attn.q_a_layernorm.weight", RC_DIM_QL, RC_DIM_1, RC_IF_MLA_QLORA, false, NULL},
    {RC_LW_w_mq, "self_attn.q_b_proj.weight", RC_DIM_MQ, RC_DIM_QL, RC_IF_MLA_QLORA, false, mla_q_rows},
    {RC_LW_w_mq, "self_attn.q_proj.weight", RC_DIM_MQ, RC_DIM_H, RC_IF_MLA_QPROJ, false, mla_q_rows},
    {RC_LW_w_mkva, "self_attn.kv_a_proj_with_mqa.weight", RC_DIM_KVA, RC_DIM_H, RC_IF_MLA, false, mla_kva_rows},
    {RC_LW_b_mkva, "self_attn.kv_a_proj_with_mqa.bias", RC_DIM_KVA, RC_DIM_1, RC_IF_MLA_BIAS, false, mla_kva_rows},
    {RC_LW_mkv_ln_w, "self_attn.kv_a_layernorm.weight", RC_DIM_KVL, RC_DIM_1, RC_IF_MLA, false, NULL},
    {RC_LW_w_mkvb, "self_attn.kv_b_proj.weight", RC_DIM_KVB, RC_DIM_KVL, RC_IF_MLA, false, NULL},
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_O, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "self_attn.o_proj.bias", RC_DIM_H, RC_DIM_1, RC_IF_O_BIAS, false, NULL},
    RC_LLAMA_MLP_TENSORS(RC_IF_DENSE),
    RC_GROUPED_MOE_TENSORS,
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_deepseek_v3 = {
    .family = "deepseek_v3",
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
    .parse_config = deepseek_v3_parse,
    .experts = &rc_grouped_moe_experts,
};
