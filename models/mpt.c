/* MPT: transformers' MptForCausalLM.
 *
 * config.json: d_model, n_heads, n_layers, max_seq_len (expansion_ratio is ignored, as HF does),
 *   vocab_size, layer_norm_epsilon, no_bias, and attn_config { alibi,
 *   alibi_bias_max (> 0; HF computes with 8 whatever it says: see
 *   mpt_parse), clip_qkv, softmax_scale, qk_ln, prefix_lm,
 *   attn_uses_sequence_id }. HF's MPT always uses ALiBi, bias-free Linear
 *   and LayerNorm layers and exact GELU: a config asking for anything else
 *   (alibi false, qk_ln, prefix_lm, sequence ids, no_bias false, logit_scale)
 *   is refused rather than run differently from HF.
 * Tensors (optional "transformer." prefix):
 *   wte.weight                        [V, H]
 *   blocks.{i}.norm_1.weight          [H]      (no bias)
 *   blocks.{i}.attn.Wqkv.weight       [3H, H]  rows q | k | v (chunk(3))
 *   blocks.{i}.attn.out_proj.weight   [H, H]
 *   blocks.{i}.norm_2.weight          [H]
 *   blocks.{i}.ffn.up_proj.weight     [I, H]   I = 4 * H (MptMLP, whatever expansion_ratio says)
 *   blocks.{i}.ffn.down_proj.weight   [H, I]
 *   norm_f.weight                     [H]
 * Forward details: pre-LN sequential blocks, qkv clamped to +-clip_qkv,
 * scores R(R(q.k) * scale) + bias in fp32 (build_mpt_alibi_tensor: an fp32
 * table slope * (j - (max_seq_len - 1)) sliced to the key length, so the
 * bias is slope * (j - last key of the call); the fp32 table promotes the
 * sum to fp32), masked_fill with finfo.min, softmax of the fp32 scores cast
 * to the value dtype, head tied to wte. */
#include <string.h>

#include "common.h"
#include "json_util.h"
#include "model.h"

static const char *const k_types[] = {"mpt", NULL};
static const char *const k_prefixes[] = {"transformer.", "", NULL};

static rc_status mpt_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_heads_from_hidden(path, cfg)); /* head_dim = hidden / heads, no GQA */
    /* transformers' MptMLP is Linear(d_model, 4 * d_model) whatever
     * expansion_ratio says (modeling_mpt.py): so is ours */
    if (cfg->hidden > RC_LIM_INTER / 4)
        return rc_errorf(RC_ERR_FORMAT, "%s: 4 x d_model exceeds %d", path, RC_LIM_INTER);
    cfg->intermediate = 4 * cfg->hidden;
    RC_TRY(rc_config_get_norm_eps(root, path, "layer_norm_epsilon", 1e-5, &cfg->norm_eps));
    bool no_bias = true;
    RC_TRY(rc_json_get_bool(root, "no_bias", path, true, &no_bias, NULL));
    if (!no_bias)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: mpt no_bias = false is not supported (HF's MPT has no biases)",
                         path);
    const json_t *lsc = json_object_get(root, "logit_scale");
    if (lsc && !json_is_null(lsc))
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: mpt logit_scale is not supported", path);
    const json_t *ac = json_object_get(root, "attn_config");
    if (ac && !json_is_null(ac) && !json_is_object(ac))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"attn_config\" must be an object", path);
    json_t *empty = json_object();
    if (!empty)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    const json_t *a = ac && json_is_object(ac) ? ac : empty;
    bool alibi = true, qk_ln = false, prefix_lm = false, seq_id = false;
    double bias_max = 8.0, clip = 0.0, scale = 0.0;
    rc_status s = RC_OK;
    if ((s = rc_json_get_bool(a, "alibi", path, true, &alibi, NULL)) == RC_OK &&
        (s = rc_json_get_bool(a, "qk_ln", path, false, &qk_ln, NULL)) == RC_OK &&
        (s = rc_json_get_bool(a, "prefix_lm", path, false, &prefix_lm, NULL)) == RC_OK &&
        (s = rc_json_get_bool(a, "attn_uses_sequence_id", path, false, &seq_id, NULL)) == RC_OK &&
        (s = rc_json_get_num(a, "alibi_bias_max", path, -1e300, 1e300, 8.0, &bias_max, NULL)) == RC_OK &&
        (s = rc_json_get_num(a, "clip_qkv", path, -1e300, 1e30, 0.0, &clip, NULL)) == RC_OK)
        s = rc_json_get_num(a, "softmax_scale", path, -1e300, 1e30, 0.0, &scale, NULL); /* finite in fp32 */
    json_decref(empty);
    RC_TRY(s);
    if (!alibi || qk_ln || prefix_lm || seq_id)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: mpt attn_config.%s is not supported", path,
                         !alibi ? "alibi = false" : qk_ln ? "qk_ln" : prefix_lm ? "prefix_lm" : "attn_uses_sequence_id");
    if (!(bias_max > 0.0))
        return rc_errorf(RC_ERR_FORMAT, "%s: attn_config.alibi_bias_max = %g must be > 0", path, bias_max);
    if (clip < 0.0)
        return rc_errorf(RC_ERR_FORMAT, "%s: attn_config.clip_qkv = %g must be >= 0", path, clip);
    if (scale < 0.0)
        return rc_errorf(RC_ERR_FORMAT, "%s: attn_config.softmax_scale = %g must be > 0", path, scale);
    /* transformers' MptModel builds its ALiBi table with
     * build_mpt_alibi_tensor(num_heads, max_seq_len) and so the default
     * alibi_bias_max = 8 whatever the config says (modeling_mpt.py, v5.24
     * line 320); ratiocheck computes what HF computes. MosaicML's remote code
     * uses the config value; every published MPT config says 8, where the
     * two agree. The config's value is still checked (> 0) above. */
    cfg->alibi_bias_max = 8.0;
    cfg->clip_qkv = clip;
    cfg->softmax_scale = scale;
    cfg->alibi_slopes = RC_SLOPES_MPT;
    cfg->alibi_from_last_key = true;
    cfg->alibi_add = RC_ALIBI_ADD_F32;
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, true, &cfg->tie_embeddings, NULL));
    if (!cfg->tie_embeddings)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: mpt with tie_word_embeddings = false is not supported", path);
    cfg->qkv_bias = cfg->o_bias = cfg->mlp_bias = false;
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then mpt_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "d_model", "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "n_layers", "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "n_heads", "num_attention_heads"),
    RC_KEY(max_pos, 1, RC_LIM_POS, false, 2048, "max_seq_len", "max_position_embeddings"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    {RC_MW_embed, "wte.weight", RC_DIM_V, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_w, "norm_f.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "norm_1.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "norm_2.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_qkv, "attn.Wqkv.weight", RC_DIM_3H, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_o, "attn.out_proj.weight", RC_DIM_H, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_up, "ffn.up_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_down, "ffn.down_proj.weight", RC_DIM_H, RC_DIM_I, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_mpt = {
    .family = "mpt",
    .model_types = k_types,
    .keys = k_keys,
    /* LayerNorm without bias, sequential residual, ALiBi (fp32 bias from the
     * last key), exact GELU MLP without biases, tied head */
    .forward = {.norm = RC_NORM_LAYER,
                .norm_bias = false,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_ALIBI,
                .mlp = RC_MLP_PLAIN,
                .act = RC_ACT_GELU_ERF,
                .head = RC_HEAD_TIED},
    .prefixes = k_prefixes,
    .layer_stem = "blocks.",
    .model_tensors = k_model_tensors,
    .layer_tensors = k_layer_tensors,
    .parse_config = mpt_parse,
};
