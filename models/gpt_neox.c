/* GPT-NeoX (Pythia): transformers' GPTNeoXForCausalLM.
 *
 * config.json: hidden_act ("gelu" = exact erf GELU), layer_norm_eps,
 *   use_parallel_residual, rotary_pct / rotary_emb_base (or, from transformers
 *   v5, rope_parameters.partial_rotary_factor / rope_theta), attention_bias,
 *   tie_word_embeddings. head_dim = hidden_size / num_attention_heads.
 * Tensors (optional "gpt_neox." prefix on everything but embed_out):
 *   embed_in.weight                              [V, H]
 *   layers.{i}.input_layernorm.{weight,bias}     [H]
 *   layers.{i}.post_attention_layernorm.*        [H]
 *   layers.{i}.attention.query_key_value.weight  [3H, H]  rows interleaved per head:
 *                                                row h*3d + p*d + i, p = 0 q / 1 k / 2 v
 *   layers.{i}.attention.query_key_value.bias    [3H]     same layout
 *   layers.{i}.attention.dense.{weight,bias}     [H, H], [H]
 *   layers.{i}.mlp.dense_h_to_4h.{weight,bias}   [I, H], [I]
 *   layers.{i}.mlp.dense_4h_to_h.{weight,bias}   [H, I], [H]
 *   final_layer_norm.{weight,bias}               [H]
 *   embed_out.weight                             [V, H]  (untied unless tie_word_embeddings)
 * Forward details: LayerNorm with bias, partial rotate-half RoPE on the first
 * rotary_dim dims of each head, parallel or sequential residual, untied head.
 * The vocabulary (V) is usually padded beyond the tokenizer's size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "model.h"
#include "util.h"

static const char *const k_types[] = {"gpt_neox", NULL};
static const char *const k_prefixes[] = {"gpt_neox.", "", NULL};

static rc_status neox_parse(const json_t *root, const char *path, rc_config *cfg)
{
    if (cfg->hidden % cfg->n_heads != 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld",
                         path, (long long)cfg->hidden, (long long)cfg->n_heads);
    cfg->head_dim = cfg->hidden / cfg->n_heads;
    cfg->n_kv_heads = cfg->n_heads;
    cfg->norm = RC_NORM_LAYER;
    cfg->norm_bias = true;
    cfg->gated_mlp = false;
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "gelu", &act, NULL));
    if (strcmp(act, "gelu") == 0)
        cfg->act = RC_ACT_GELU_ERF;
    else if (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0)
        cfg->act = RC_ACT_GELU_TANH;
    else
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%s: hidden_act \"%.32s\" is not supported for gpt_neox (supported: gelu, "
                         "gelu_new, gelu_pytorch_tanh)",
                         path, act);
    RC_TRY(rc_config_get_norm_eps(root, path, "layer_norm_eps", 1e-5, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "use_parallel_residual", path, true, &cfg->parallel_residual, NULL));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    bool bias;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, true, &bias, NULL));
    cfg->qkv_bias = cfg->o_bias = bias;
    cfg->mlp_bias = true;
    return rc_config_parse_rope(root, path, cfg, 10000.0, 0.25, "rotary_emb_base", "rotary_pct");
}

static rc_status neox_size(const rc_config *c, int64_t *n)
{
    int64_t H = c->hidden, I = c->intermediate;
    int64_t layer = 4 * H + 3 * H * H + H * H + I * H + I + H * I + H;
    if (c->qkv_bias)
        layer += 3 * H;
    if (c->o_bias)
        layer += H;
    *n = c->vocab * H * (c->tie_embeddings ? 1 : 2) + 2 * H + c->n_layers * layer;
    return RC_OK;
}

static rc_status neox_load(rc_loader *ld, rc_weights *w)
{
    const rc_config *c = ld->cfg;
    const int64_t H = c->hidden, I = c->intermediate, V = c->vocab, d = c->head_dim;
    char nb[256], rb[256];
#define NAME(...) (snprintf(nb, sizeof nb, __VA_ARGS__), rc_loader_resolve(ld, k_prefixes, nb, rb, sizeof rb))
    RC_TRY(rc_loader_get(ld, NAME("embed_in.weight"), 2, (int64_t[]){V, H}, &w->embed));
    RC_TRY(rc_loader_get(ld, NAME("final_layer_norm.weight"), 1, (int64_t[]){H}, &w->lnf_w));
    RC_TRY(rc_loader_get(ld, NAME("final_layer_norm.bias"), 1, (int64_t[]){H}, &w->lnf_b));
    if (c->tie_embeddings)
        w->lm_head = w->embed;
    else
        RC_TRY(rc_loader_get(ld, NAME("embed_out.weight"), 2, (int64_t[]){V, H}, &w->lm_head));
    for (int64_t l = 0; l < c->n_layers; l++) {
        rc_layer_weights *L = &w->layers[l];
        char pre[64];
        snprintf(pre, sizeof pre, "layers.%lld.", (long long)l);
        RC_TRY(rc_loader_get(ld, NAME("%sinput_layernorm.weight", pre), 1, (int64_t[]){H}, &L->ln1_w));
        RC_TRY(rc_loader_get(ld, NAME("%sinput_layernorm.bias", pre), 1, (int64_t[]){H}, &L->ln1_b));
        RC_TRY(rc_loader_get(ld, NAME("%spost_attention_layernorm.weight", pre), 1, (int64_t[]){H}, &L->ln2_w));
        RC_TRY(rc_loader_get(ld, NAME("%spost_attention_layernorm.bias", pre), 1, (int64_t[]){H}, &L->ln2_b));
        /* fused QKV, interleaved per head -> [all Q; all K; all V] */
        float *qkv, *qkv_b = NULL;
        RC_TRY(rc_loader_get(ld, NAME("%sattention.query_key_value.weight", pre), 2,
                             (int64_t[]){3 * H, H}, &qkv));
        if (c->qkv_bias)
            RC_TRY(rc_loader_get(ld, NAME("%sattention.query_key_value.bias", pre), 1,
                                 (int64_t[]){3 * H}, &qkv_b));
        float *tmp = malloc((size_t)(3 * H * H) * sizeof *tmp);
        if (!tmp)
            return rc_errorf(RC_ERR_NOMEM, "out of memory de-interleaving query_key_value");
        float tmpb_small[1];
        float *tmpb = qkv_b ? malloc((size_t)(3 * H) * sizeof *tmpb) : tmpb_small;
        if (!tmpb) {
            free(tmp);
            return rc_errorf(RC_ERR_NOMEM, "out of memory de-interleaving query_key_value");
        }
        for (int64_t h = 0; h < c->n_heads; h++)
            for (int64_t part = 0; part < 3; part++)
                for (int64_t i = 0; i < d; i++) {
                    int64_t src = h * 3 * d + part * d + i, dst = part * H + h * d + i;
                    memcpy(tmp + dst * H, qkv + src * H, (size_t)H * sizeof *tmp);
                    if (qkv_b)
                        tmpb[dst] = qkv_b[src];
                }
        memcpy(qkv, tmp, (size_t)(3 * H * H) * sizeof *tmp);
        if (qkv_b) {
            memcpy(qkv_b, tmpb, (size_t)(3 * H) * sizeof *tmpb);
            free(tmpb);
        }
        free(tmp);
        L->w_qkv = qkv;
        L->b_qkv = qkv_b;
        RC_TRY(rc_loader_get(ld, NAME("%sattention.dense.weight", pre), 2, (int64_t[]){H, H}, &L->w_o));
        if (c->o_bias)
            RC_TRY(rc_loader_get(ld, NAME("%sattention.dense.bias", pre), 1, (int64_t[]){H}, &L->b_o));
        RC_TRY(rc_loader_get(ld, NAME("%smlp.dense_h_to_4h.weight", pre), 2, (int64_t[]){I, H}, &L->w_up));
        RC_TRY(rc_loader_get(ld, NAME("%smlp.dense_h_to_4h.bias", pre), 1, (int64_t[]){I}, &L->b_up));
        RC_TRY(rc_loader_get(ld, NAME("%smlp.dense_4h_to_h.weight", pre), 2, (int64_t[]){H, I}, &L->w_down));
        RC_TRY(rc_loader_get(ld, NAME("%smlp.dense_4h_to_h.bias", pre), 1, (int64_t[]){H}, &L->b_down));
    }
#undef NAME
    return RC_OK;
}

const rc_arch rc_arch_gpt_neox = {
    .family = "gpt_neox",
    .model_types = k_types,
    .parse_config = neox_parse,
    .weights_size = neox_size,
    .load = neox_load,
};
