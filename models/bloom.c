/* BLOOM: transformers' BloomForCausalLM.
 *
 * config.json: hidden_size (or n_embed), n_layer, n_head, vocab_size,
 *   layer_norm_epsilon, apply_residual_connection_post_layernorm (false in
 *   every published BLOOM; refused when true), pretraining_tp with
 *   slow_but_exact (the slow path is refused), tie_word_embeddings (BLOOM
 *   ties). No position limit: ALiBi (max_position_embeddings is not a BLOOM
 *   key; the limit is RC_LIM_POS).
 * Tensors (optional "transformer." prefix):
 *   word_embeddings.weight                            [V, H]
 *   word_embeddings_layernorm.{weight,bias}           [H]
 *   h.{i}.input_layernorm.{weight,bias}               [H]
 *   h.{i}.self_attention.query_key_value.weight       [3H, H] rows per head: h*3d + p*d + i
 *   h.{i}.self_attention.query_key_value.bias         [3H]    same layout
 *   h.{i}.self_attention.dense.{weight,bias}          [H, H], [H]
 *   h.{i}.post_attention_layernorm.{weight,bias}      [H]
 *   h.{i}.mlp.dense_h_to_4h.{weight,bias}             [4H, H], [4H]
 *   h.{i}.mlp.dense_4h_to_h.{weight,bias}             [H, 4H], [H]
 *   ln_f.{weight,bias}                                [H]
 * Forward details: LayerNorm on the embeddings, pre-LN sequential blocks,
 * ALiBi (modeling_bloom.py: fp32 slopes from _get_alibi_slopes, bias =
 * slope * key position in fp32 cast to the hidden dtype, scores =
 * alibi.baddbmm(q, k^T, beta=1, alpha=1/sqrt(d)), softmax in fp32 cast
 * back), BloomGelu (tanh approximation with 0.79788456 for sqrt(2/pi),
 * its own order: RC_ACT_GELU_BLOOM), head tied to word_embeddings. */
#include <string.h>

#include "common.h"
#include "json_util.h"
#include "model.h"

static const char *const k_types[] = {"bloom", NULL};
static const char *const k_prefixes[] = {"transformer.", "", NULL};

static rc_status bloom_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_heads_from_hidden(path, cfg)); /* head_dim = hidden / heads, no GQA */
    if (cfg->hidden > RC_LIM_INTER / 4)
        return rc_errorf(RC_ERR_FORMAT, "%s: 4 x hidden_size exceeds %d", path, RC_LIM_INTER);
    cfg->intermediate = 4 * cfg->hidden;
    cfg->max_pos = RC_LIM_POS;
    RC_TRY(rc_config_get_norm_eps(root, path, "layer_norm_epsilon", 1e-5, &cfg->norm_eps));
    bool post_ln = false, slow = false;
    int64_t tp = 1;
    RC_TRY(rc_json_get_bool(root, "apply_residual_connection_post_layernorm", path, false, &post_ln, NULL));
    if (post_ln)
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%s: bloom apply_residual_connection_post_layernorm = true is not supported", path);
    RC_TRY(rc_json_get_int(root, "pretraining_tp", path, 1, 1024, 1, &tp, NULL));
    RC_TRY(rc_json_get_bool(root, "slow_but_exact", path, false, &slow, NULL));
    if (tp > 1 && slow)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: bloom slow_but_exact with pretraining_tp %lld is not supported",
                         path, (long long)tp);
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, true, &cfg->tie_embeddings, NULL));
    if (!cfg->tie_embeddings)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: bloom with tie_word_embeddings = false is not supported", path);
    cfg->qkv_bias = cfg->o_bias = cfg->mlp_bias = true;
    cfg->embed_norm = true;
    cfg->alibi_slopes = RC_SLOPES_BLOOM;
    cfg->alibi_add = RC_ALIBI_ADD_FUSED;
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then bloom_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size", "n_embed"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "n_layer", "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "n_head", "num_attention_heads"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    {RC_MW_embed, "word_embeddings.weight", RC_DIM_V, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_MW_emb_ln_w, "word_embeddings_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_MW_emb_ln_b, "word_embeddings_layernorm.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_w, "ln_f.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_b, "ln_f.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln1_b, "input_layernorm.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_b, "post_attention_layernorm.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_qkv, "self_attention.query_key_value.weight", RC_DIM_3H, RC_DIM_H, RC_ALWAYS, false,
     rc_qkv_deinterleave_per_head},
    {RC_LW_b_qkv, "self_attention.query_key_value.bias", RC_DIM_3H, RC_DIM_1, RC_ALWAYS, false,
     rc_qkv_deinterleave_per_head},
    {RC_LW_w_o, "self_attention.dense.weight", RC_DIM_H, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_b_o, "self_attention.dense.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_up, "mlp.dense_h_to_4h.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_b_up, "mlp.dense_h_to_4h.bias", RC_DIM_I, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_down, "mlp.dense_4h_to_h.weight", RC_DIM_H, RC_DIM_I, RC_ALWAYS, false, NULL},
    {RC_LW_b_down, "mlp.dense_4h_to_h.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_bloom = {
    .family = "bloom",
    .model_types = k_types,
    .keys = k_keys,
    /* LayerNorm with bias (also on the embeddings), sequential residual,
     * ALiBi fused into the scaled scores, plain GELU (tanh) MLP, tied head */
    .forward = {.norm = RC_NORM_LAYER,
                .norm_bias = true,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_ALIBI,
                .mlp = RC_MLP_PLAIN,
                .act = RC_ACT_GELU_BLOOM,
                .head = RC_HEAD_TIED},
    .prefixes = k_prefixes,
    .layer_stem = "h.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_layer_tensors,
    .parse_config = bloom_parse,
};
