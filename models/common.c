/* Helpers shared by the family files (see common.h). */
#include "common.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "util.h"

rc_status rc_qkv_deinterleave_per_head(const rc_config *c, void *data, int es, int64_t rows, int64_t cols)
{
    const int64_t nh = c->n_heads, d = c->head_dim, H = nh * d;
    if (rows != 3 * H || cols < 1)
        return rc_errorf(RC_ERR_INTERNAL, "per-head QKV de-interleave: %lld rows, expected 3 x %lld",
                         (long long)rows, (long long)H);
    const size_t row_bytes = (size_t)cols * (size_t)es;
    unsigned char *tmp = malloc((size_t)rows * row_bytes), *p = data;
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory de-interleaving query_key_value");
    for (int64_t h = 0; h < nh; h++)
        for (int64_t part = 0; part < 3; part++)
            for (int64_t i = 0; i < d; i++) {
                int64_t src = h * 3 * d + part * d + i, dst = part * H + h * d + i;
                memcpy(tmp + (size_t)dst * row_bytes, p + (size_t)src * row_bytes, row_bytes);
            }
    memcpy(p, tmp, (size_t)rows * row_bytes);
    free(tmp);
    return RC_OK;
}

rc_status rc_conv1d_transpose(const rc_config *c, void *data, int es, int64_t rows, int64_t cols)
{
    (void)c;
    unsigned char *tmp = malloc((size_t)(rows * cols) * (size_t)es), *p = data;
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory transposing a Conv1D weight");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++)
            memcpy(tmp + (size_t)(k * rows + r) * (size_t)es, p + (size_t)(r * cols + k) * (size_t)es, (size_t)es);
    memcpy(p, tmp, (size_t)(rows * cols) * (size_t)es);
    free(tmp);
    return RC_OK;
}

rc_status rc_rope_interleaved_to_half(const rc_config *c, void *data, int es, int64_t rows, int64_t cols)
{
    const int64_t d = c->head_dim, rd = c->rotary_dim, half = rd / 2;
    if (d < 1 || rows % d != 0 || rd < 0 || rd > d || rd % 2 != 0 || cols < 1)
        return rc_errorf(RC_ERR_INTERNAL, "interleaved RoPE layout: %lld rows, head_dim %lld, rotary %lld",
                         (long long)rows, (long long)d, (long long)rd);
    const size_t row_bytes = (size_t)cols * (size_t)es;
    unsigned char *tmp = malloc((size_t)(rd > 0 ? rd : 1) * row_bytes), *p = data;
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory reordering RoPE rows");
    for (int64_t h = 0; h < rows / d; h++) {
        unsigned char *head = p + (size_t)(h * d) * row_bytes;
        for (int64_t j = 0; j < half; j++) {
            memcpy(tmp + (size_t)j * row_bytes, head + (size_t)(2 * j) * row_bytes, row_bytes);
            memcpy(tmp + (size_t)(half + j) * row_bytes, head + (size_t)(2 * j + 1) * row_bytes, row_bytes);
        }
        memcpy(head, tmp, (size_t)rd * row_bytes);
    }
    free(tmp);
    return RC_OK;
}

/* the first name of the family's key for an rc_config field */
static const char *key_name(const rc_config *c, size_t offset, const char *fallback)
{
    for (const rc_config_key *k = c->arch->keys; k->keys[0]; k++)
        if (k->offset == offset)
            return k->keys[0];
    return fallback;
}

rc_status rc_heads_from_hidden(const char *path, rc_config *c)
{
    if (c->hidden % c->n_heads != 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s %lld is not a multiple of %s %lld", path,
                         key_name(c, offsetof(rc_config, hidden), "hidden_size"), (long long)c->hidden,
                         key_name(c, offsetof(rc_config, n_heads), "num_attention_heads"), (long long)c->n_heads);
    c->head_dim = c->hidden / c->n_heads;
    c->n_kv_heads = c->n_heads;
    return RC_OK;
}

/* a number that JSON null turns off: absent -> def, null -> 0 (None), else > 0 */
static rc_status gemma_opt_num(const json_t *root, const char *path, const char *key, double def, double *out)
{
    bool present;
    RC_TRY(rc_json_get_num(root, key, path, 1e-30, 1e30, def, out, &present));
    if (!present && json_object_get(root, key)) /* null: None */
        *out = 0;
    return RC_OK;
}

rc_status rc_gemma_parse(const json_t *root, const char *path, rc_config *cfg, const rc_gemma_defaults *d)
{
    bool present, bidir;
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, RC_LIM_HEADS, d->n_kv_heads, &cfg->n_kv_heads,
                           NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, RC_LIM_HEAD_DIM, 256, &cfg->head_dim, NULL));
    if (cfg->hidden % cfg->n_heads != 0) /* validate_architecture refuses such a config */
        return rc_errorf(RC_ERR_FORMAT, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld", path,
                         (long long)cfg->hidden, (long long)cfg->n_heads);
    /* MLP: ACT2FN[hidden_activation] (hidden_act, in older files beside it, is not read by transformers) */
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_activation", path, "gelu_pytorch_tanh", &act, NULL));
    if (strcmp(act, "gelu_pytorch_tanh") == 0)
        cfg->act = RC_ACT_GELU_TANH;
    else if (strcmp(act, "gelu") == 0)
        cfg->act = RC_ACT_GELU_ERF;
    else
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_activation \"%.32s\" is not supported for %s (supported: "
                         "gelu_pytorch_tanh, gelu)", path, act, cfg->model_type);
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, true, &cfg->tie_embeddings, NULL));
    bool ab;
    RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
    cfg->qkv_bias = cfg->o_bias = ab; /* q/k/v and o_proj: bias=config.attention_bias */
    cfg->mlp_bias = false;
    RC_TRY(rc_json_get_bool(root, "use_bidirectional_attention", path, false, &bidir, NULL));
    if (bidir)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: use_bidirectional_attention = true (an encoder) is not supported",
                         path);
    cfg->norm_w_offset = true; /* (1 + w) */
    cfg->norm_w_f32 = true;    /* output * (1.0 + weight.float()), then .type_as(x): one rounding */
    cfg->sandwich_norm = true;
    cfg->embed_scale = sqrt((double)cfg->hidden); /* config.hidden_size ** 0.5, a Python float */
    double qpas;
    RC_TRY(rc_json_get_num(root, "query_pre_attn_scalar", path, 1e-30, 1e30, 256, &qpas, NULL));
    cfg->softmax_scale = pow(qpas, -0.5); /* query_pre_attn_scalar ** -0.5 in Python */
    RC_TRY(gemma_opt_num(root, path, "final_logit_softcapping", d->final_softcap, &cfg->final_softcap));
    if (d->attn_softcap_read)
        RC_TRY(gemma_opt_num(root, path, "attn_logit_softcapping", 50.0, &cfg->attn_softcap));
    /* sliding windows: layer_types, else every pattern-th layer full ((i + 1) % pattern) */
    RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 4096, &cfg->sliding_window, &present));
    if (!present && json_object_get(root, "sliding_window")) /* null: no window */
        cfg->sliding_window = 0;
    int64_t pattern = d->pattern;
    if (d->pattern_key)
        RC_TRY(rc_json_get_int(root, d->pattern_key, path, 1, INT64_MAX, d->pattern, &pattern, NULL));
    RC_TRY(rc_config_parse_layer_types(root, path, cfg, &present));
    if (!present)
        for (int64_t l = 0; l < cfg->n_layers; l++)
            cfg->layer_sliding[l] = (l + 1) % pattern != 0;
    cfg->window_per_layer = true;
    return RC_OK;
}

const rc_expert_spec rc_grouped_moe_experts = {
    .router = "mlp.gate.weight",
    .router_fused = "mlp.gate.weight",
    .per_expert = "mlp.experts.",
    .gate = "gate_proj.weight",
    .up = "up_proj.weight",
    .down = "down_proj.weight",
    .fused_gate_up = "mlp.experts.gate_up_proj",
    .fused_down = "mlp.experts.down_proj",
};

rc_status rc_grouped_moe_parse(const json_t *root, const char *path, rc_config *cfg, const rc_grouped_moe_defaults *d)
{
    int64_t n_shared, first_dense;
    RC_TRY(rc_json_get_int(root, "n_shared_experts", path, 0, RC_LIM_INTER, d->n_shared, &n_shared, NULL));
    RC_TRY(rc_json_get_int(root, "first_k_dense_replace", path, 0, RC_LIM_LAYERS, d->first_dense, &first_dense, NULL));
    RC_TRY(rc_json_get_num(root, "routed_scaling_factor", path, 0.0, 1e30, d->routed_scale, &cfg->routed_scale, NULL));
    if (!(cfg->routed_scale > 0.0) || !isfinite((double)(float)cfg->routed_scale))
        return rc_errorf(RC_ERR_FORMAT, "%s: routed_scaling_factor %g is not a positive fp32 number", path,
                         cfg->routed_scale);
    RC_TRY(rc_json_get_bool(root, "norm_topk_prob", path, d->norm_topk_prob, &cfg->norm_topk_prob, NULL));
    if (!rc_mul_i64(n_shared, cfg->moe_intermediate, &cfg->shared_intermediate) ||
        cfg->shared_intermediate > RC_LIM_INTER)
        return rc_errorf(RC_ERR_FORMAT, "%s: n_shared_experts %lld x moe_intermediate_size %lld is too large", path,
                         (long long)n_shared, (long long)cfg->moe_intermediate);
    const int64_t E = cfg->n_experts, G = cfg->n_group;
    if (E % G != 0 || E / G < 2)
        return rc_errorf(RC_ERR_FORMAT, "%s: %lld experts do not make n_group %lld groups of two or more", path,
                         (long long)E, (long long)G);
    if (cfg->topk_group > G)
        return rc_errorf(RC_ERR_FORMAT, "%s: topk_group %lld exceeds n_group %lld", path, (long long)cfg->topk_group,
                         (long long)G);
    if (cfg->top_k > cfg->topk_group * (E / G))
        return rc_errorf(RC_ERR_FORMAT, "%s: num_experts_per_tok %lld exceeds the %lld experts of topk_group %lld "
                         "groups", path, (long long)cfg->top_k, (long long)(cfg->topk_group * (E / G)),
                         (long long)cfg->topk_group);
    cfg->router = RC_ROUTER_SIGMOID_GROUPED;
    cfg->router_gate_f32 = true; /* _keep_in_fp32_modules_strict: gate.weight, e_score_correction_bias */
    cfg->router_bias = true;
    cfg->moe_weights_f32 = true; /* topk_weights stay fp32: expert output * fp32 weight, then .to(dtype) */
    cfg->shared_ungated = true;
    cfg->sparse_step = 1;
    memset(cfg->mlp_only, 0, sizeof cfg->mlp_only);
    for (int64_t l = 0; l < first_dense && l < cfg->n_layers && l < RC_LIM_LAYERS; l++)
        cfg->mlp_only[l / 64] |= (uint64_t)1 << (l % 64);
    return RC_OK;
}

/* mlp_only_layers: a list of layer indices, as a bit set */
rc_status rc_parse_mlp_only(const json_t *root, const char *path, rc_config *cfg)
{
    memset(cfg->mlp_only, 0, sizeof cfg->mlp_only);
    const json_t *mo = json_object_get(root, "mlp_only_layers");
    if (!mo || json_is_null(mo))
        return RC_OK;
    if (!json_is_array(mo))
        return rc_errorf(RC_ERR_FORMAT, "%s: mlp_only_layers is not a list", path);
    for (size_t i = 0; i < json_array_size(mo); i++) {
        const json_t *v = json_array_get(mo, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= cfg->n_layers)
            return rc_errorf(RC_ERR_FORMAT, "%s: mlp_only_layers[%zu] is not a layer index in [0, %lld)", path, i,
                             (long long)cfg->n_layers);
        const int64_t l = (int64_t)json_integer_value(v);
        cfg->mlp_only[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return RC_OK;
}
