/* GPT-2: transformers' GPT2LMHeadModel.
 *
 * config.json: n_embd, n_layer, n_head, n_positions, n_inner (null: 4 x
 *   n_embd), layer_norm_epsilon, activation_function (gelu_new),
 *   scale_attn_weights, scale_attn_by_inverse_layer_idx and
 *   reorder_and_upcast_attn (both false in every published GPT-2; refused
 *   when true).
 * Tensors (optional "transformer." prefix; Conv1D weights are stored
 * [in, out] and transposed at load):
 *   wte.weight                     [V, H]
 *   wpe.weight                     [n_positions, H]   learned positions
 *   h.{i}.ln_1.{weight,bias}       [H]
 *   h.{i}.attn.c_attn.weight       [H, 3H]  Conv1D: columns q | k | v
 *   h.{i}.attn.c_attn.bias         [3H]
 *   h.{i}.attn.c_proj.{weight,bias} [H, H], [H]
 *   h.{i}.ln_2.{weight,bias}       [H]
 *   h.{i}.mlp.c_fc.{weight,bias}   [H, I], [I]
 *   h.{i}.mlp.c_proj.{weight,bias} [I, H], [H]
 *   ln_f.{weight,bias}             [H]
 *   (lm_head ties wte; the "attn.bias" causal-mask buffers of old
 *   checkpoints are ignored)
 * Forward details: x = wte[token] + wpe[position] (rounded once), pre-LN
 * sequential blocks with LayerNorm (bias), scores matmul(q, k^T) * d^-0.5,
 * softmax in the scores' dtype (fp32 inside), gelu_new (tanh), tied head. */
#include <string.h>

#include "common.h"
#include "json_util.h"
#include "model.h"

static const char *const k_types[] = {"gpt2", NULL};
static const char *const k_prefixes[] = {"transformer.", "", NULL};

static rc_status gpt2_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_heads_from_hidden(path, cfg)); /* head_dim = hidden / heads, no GQA */
    if (cfg->intermediate == 0) { /* n_inner null or absent: 4 * n_embd */
        if (cfg->hidden > RC_LIM_INTER / 4)
            return rc_errorf(RC_ERR_FORMAT, "%s: 4 x n_embd exceeds %d", path, RC_LIM_INTER);
        cfg->intermediate = 4 * cfg->hidden;
    }
    const char *act;
    RC_TRY(rc_json_get_str(root, "activation_function", path, "gelu_new", &act, NULL));
    if (strcmp(act, "gelu_new") == 0)
        cfg->act = RC_ACT_GELU_NEW;
    else if (strcmp(act, "gelu_pytorch_tanh") == 0)
        cfg->act = RC_ACT_GELU_TANH;
    else if (strcmp(act, "gelu") == 0)
        cfg->act = RC_ACT_GELU_ERF;
    else
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%s: activation_function \"%.32s\" is not supported for gpt2 (supported: gelu_new, "
                         "gelu_pytorch_tanh, gelu)",
                         path, act);
    RC_TRY(rc_config_get_norm_eps(root, path, "layer_norm_epsilon", 1e-5, &cfg->norm_eps));
    bool scale = true, by_layer = false, reorder = false;
    RC_TRY(rc_json_get_bool(root, "scale_attn_weights", path, true, &scale, NULL));
    RC_TRY(rc_json_get_bool(root, "scale_attn_by_inverse_layer_idx", path, false, &by_layer, NULL));
    RC_TRY(rc_json_get_bool(root, "reorder_and_upcast_attn", path, false, &reorder, NULL));
    if (by_layer || reorder)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: gpt2 %s = true is not supported", path,
                         by_layer ? "scale_attn_by_inverse_layer_idx" : "reorder_and_upcast_attn");
    if (!scale)
        cfg->softmax_scale = 1.0; /* scaling = 1.0 */
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, true, &cfg->tie_embeddings, NULL));
    if (!cfg->tie_embeddings)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: gpt2 with tie_word_embeddings = false is not supported", path);
    cfg->qkv_bias = cfg->o_bias = cfg->mlp_bias = true;
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then gpt2_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "n_embd", "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "n_layer", "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "n_head", "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, false, 0, "n_inner"),
    RC_KEY(max_pos, 1, RC_LIM_POS, true, 0, "n_positions", "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

/* Tensors, in arena order (after the optional "transformer." prefix). The
 * Conv1D entries give the file's [in, out] shape. */
static const rc_tensor_spec k_model_tensors[] = {
    {RC_MW_embed, "wte.weight", RC_DIM_V, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_MW_wpe, "wpe.weight", RC_DIM_POS, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_w, "ln_f.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_b, "ln_f.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "ln_1.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln1_b, "ln_1.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "ln_2.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_b, "ln_2.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_qkv, "attn.c_attn.weight", RC_DIM_H, RC_DIM_3H, RC_ALWAYS, false, rc_conv1d_transpose},
    {RC_LW_b_qkv, "attn.c_attn.bias", RC_DIM_3H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_o, "attn.c_proj.weight", RC_DIM_H, RC_DIM_H, RC_ALWAYS, false, rc_conv1d_transpose},
    {RC_LW_b_o, "attn.c_proj.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_up, "mlp.c_fc.weight", RC_DIM_H, RC_DIM_I, RC_ALWAYS, false, rc_conv1d_transpose},
    {RC_LW_b_up, "mlp.c_fc.bias", RC_DIM_I, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_down, "mlp.c_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, false, rc_conv1d_transpose},
    {RC_LW_b_down, "mlp.c_proj.bias", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_gpt2 = {
    .family = "gpt2",
    .model_types = k_types,
    .keys = k_keys,
    /* LayerNorm with bias, sequential residual, learned positions, plain
     * gelu_new MLP, head tied to wte */
    .forward = {.norm = RC_NORM_LAYER,
                .norm_bias = true,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_LEARNED,
                .mlp = RC_MLP_PLAIN,
                .act = RC_ACT_GELU_NEW,
                .head = RC_HEAD_TIED},
    .prefixes = k_prefixes,
    .layer_stem = "h.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_layer_tensors,
    .parse_config = gpt2_parse,
};
