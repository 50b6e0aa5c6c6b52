/* Baichuan (remote code modeling_baichuan.py; transformers has no class):
 * Baichuan-7B (RoPE), Baichuan-13B (ALiBi), Baichuan2-7B (RoPE + NormHead),
 * Baichuan2-13B (ALiBi + NormHead). tools/fixtures/baichuan_ref.py is the PyTorch
 * reference the fixtures come from (it names the upstream files followed).
 *
 * Which variant a published folder is, from config.json (model_type is
 * "baichuan" for all four; evidence in tools/fixtures/baichuan_ref.py):
 *   position encoding: RoPE iff architectures[0] is "BaiChuanForCausalLM"
 *     (capital C: only Baichuan-7B) or max_position_embeddings is present
 *     (only the RoPE files read it; the ALiBi files read model_max_length);
 *   NormHead: an explicit "norm_head" (true/false) decides; else Baichuan2
 *     iff z_loss_weight is present (Baichuan2's configuration class writes
 *     it) or vocab_size is 125696 (Baichuan2's tokenizer; the published
 *     Baichuan2 config.json files carry no other marker). Baichuan-7B
 *     (BaiChuanForCausalLM) with NormHead does not exist: refused.
 * config.json: hidden_size, intermediate_size, num_hidden_layers,
 *   num_attention_heads, vocab_size, rms_norm_eps, hidden_act (silu),
 *   tie_word_embeddings (false).
 * Tensors (optional "model." prefix on everything but lm_head):
 *   embed_tokens.weight                          [V, H]
 *   layers.{i}.input_layernorm.weight            [H]
 *   layers.{i}.self_attn.W_pack.weight           [3H, H]  rows q | k | v
 *   layers.{i}.self_attn.o_proj.weight           [H, H]
 *   layers.{i}.post_attention_layernorm.weight   [H]
 *   layers.{i}.mlp.gate_proj.weight              [I, H]
 *   layers.{i}.mlp.up_proj.weight                [I, H]
 *   layers.{i}.mlp.down_proj.weight              [H, I]
 *   norm.weight                                  [H]
 *   lm_head.weight                               [V, H]   NormHead: rows L2-normalised
 * Forward details: RMSNorm, SwiGLU, no biases, scores R(R(q.k) /
 * sqrt(head_dim)); 13B: ALiBi bias slope * key position (_get_interleave
 * slopes in Python floats, an fp32 mask cast to the hidden dtype and added
 * in it); 7B: rotate-half RoPE over the whole head. */
#include <string.h>

#include "common.h"
#include "json_util.h"
#include "model.h"

static const char *const k_types[] = {"baichuan", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

static rc_status baichuan_parse(const json_t *root, const char *path, rc_config *cfg)
{
    RC_TRY(rc_heads_from_hidden(path, cfg)); /* head_dim = hidden / heads, no GQA */
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for baichuan (supported: silu)",
                         path, act);
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    cfg->score_div = true;
    bool explicit_nh;
    RC_TRY(rc_json_get_bool(root, "norm_head", path, false, &cfg->norm_head, &explicit_nh));
    if (!explicit_nh) {
        const json_t *z = json_object_get(root, "z_loss_weight");
        cfg->norm_head = z != NULL || cfg->vocab == 125696; /* the key present, as tools/fixtures/baichuan_ref.py reads it */
    }
    bool gen1_7b = false;
    const json_t *arch = json_object_get(root, "architectures");
    if (arch && json_is_array(arch) && json_array_size(arch) > 0 && json_is_string(json_array_get(arch, 0)))
        gen1_7b = strcmp(json_string_value(json_array_get(arch, 0)), "BaiChuanForCausalLM") == 0;
    if (gen1_7b && cfg->norm_head)
        return rc_errorf(RC_ERR_FORMAT, "%s: architectures \"BaiChuanForCausalLM\" (Baichuan-7B) has no NormHead, "
                         "but the config asks for one", path);
    bool rope_len;
    int64_t len;
    RC_TRY(rc_json_get_int(root, "max_position_embeddings", path, 1, RC_LIM_POS, 0, &len, &rope_len));
    if (!rope_len && gen1_7b) { /* Baichuan-7B's configuration class defaults to 4096 */
        len = 4096;
        rope_len = true;
    }
    if (rope_len) { /* Baichuan-7B / Baichuan2-7B */
        cfg->pos = RC_POS_ROTARY;
        /* Baichuan2-7B (BaichuanForCausalLM with RoPE) keeps cos/sin in fp32,
         * rotates in fp32 and calls F.scaled_dot_product_attention, whose math
         * backend computes scores and softmax in fp32; Baichuan-7B rounds
         * cos/sin to the model dtype and takes an fp32 softmax of MD scores */
        cfg->rope_f32 = cfg->attn_f32 = !gen1_7b;
        cfg->max_pos = len;
        return rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL);
    }
    /* Baichuan-13B / Baichuan2-13B: the ALiBi mask is built for model_max_length positions */
    bool present;
    RC_TRY(rc_json_get_int(root, "model_max_length", path, 1, RC_LIM_POS, 0, &len, &present));
    if (!present)
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: baichuan config has neither max_position_embeddings (7B, RoPE) nor "
                         "model_max_length (13B, ALiBi)",
                         path);
    cfg->pos = RC_POS_ALIBI;
    cfg->max_pos = len;
    cfg->rotary_dim = 0;
    cfg->alibi_slopes = RC_SLOPES_BAICHUAN;
    cfg->alibi_add = RC_ALIBI_ADD_MODEL_DT;
    return RC_OK;
}

/* Integer keys, read in this order (then eos_token_id, then baichuan_parse). */
static const rc_config_key k_keys[] = {
    RC_KEY(vocab, 1, RC_LIM_VOCAB, true, 0, "vocab_size"),
    RC_KEY(hidden, 1, RC_LIM_HIDDEN, true, 0, "hidden_size"),
    RC_KEY(n_layers, 1, RC_LIM_LAYERS, true, 0, "num_hidden_layers"),
    RC_KEY(n_heads, 1, RC_LIM_HEADS, true, 0, "num_attention_heads"),
    RC_KEY(intermediate, 1, RC_LIM_INTER, true, 0, "intermediate_size"),
    RC_KEY(bos_id, 0, RC_LIM_VOCAB, false, -1, "bos_token_id"),
    {{NULL}, 0, 0, 0, false, 0},
};

static const rc_tensor_spec k_model_tensors[] = {
    {RC_MW_embed, "embed_tokens.weight", RC_DIM_V, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_MW_lnf_w, "norm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_MW_lm_head, "lm_head.weight", RC_DIM_V, RC_DIM_H, RC_IF_UNTIED, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

static const rc_tensor_spec k_layer_tensors[] = {
    {RC_LW_ln1_w, "input_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_ln2_w, "post_attention_layernorm.weight", RC_DIM_H, RC_DIM_1, RC_ALWAYS, false, NULL},
    {RC_LW_w_qkv, "self_attn.W_pack.weight", RC_DIM_3H, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_o, "self_attn.o_proj.weight", RC_DIM_H, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_gate, "mlp.gate_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_up, "mlp.up_proj.weight", RC_DIM_I, RC_DIM_H, RC_ALWAYS, false, NULL},
    {RC_LW_w_down, "mlp.down_proj.weight", RC_DIM_H, RC_DIM_I, RC_ALWAYS, false, NULL},
    {0, NULL, 0, 0, 0, false, NULL},
};

const rc_arch rc_arch_baichuan = {
    .family = "baichuan",
    .model_types = k_types,
    .keys = k_keys,
    /* RMSNorm, sequential residual, RoPE or ALiBi (from the config, see
     * above), SwiGLU, untied lm_head */
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
    .parse_config = baichuan_parse,
};
