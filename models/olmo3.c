/* OLMo 3 family: transformers' Olmo3ForCausalLM (models/olmo3/modeling_olmo3.py).
 *
 * OLMo 2's forward pass (post-attention / post-feedforward norms and none
 * before, q_norm / k_norm over the whole projection, the RMSNorm weight in
 * fp32 with one rounding, fp32 cos / sin with one rounding of the rotated
 * q / k; models/olmo2.c) with two differences (docs/numerics.md "OLMo 3"):
 *  - layer_types: sliding-window layers ("sliding_attention", keys within
 *    sliding_window of the query) among full ones; without the key
 *    Olmo3Config makes layer i sliding unless (i + 1) % 4 == 0;
 *  - RoPE per layer type (Olmo3RotaryEmbedding keeps one inv_freq and
 *    attention factor per type): rope_parameters {"full_attention": {..},
 *    "sliding_attention": {..}} as transformers v5 writes it, or the legacy
 *    top-level rope_theta (both types) and rope_scaling (the full layers
 *    only). The full layers take any supported scaling (yarn for the
 *    long-context checkpoints); the sliding layers the default RoPE, another
 *    type there is refused by name.
 * config.json (Olmo3Config defaults where a key is absent): num_key_value_heads
 *   (null or absent: num_attention_heads), head_dim (an explicit key is read, as
 *   getattr does; else hidden_size / num_attention_heads), rms_norm_eps (1e-5),
 *   hidden_act (silu), attention_bias (false: q/k/v and o_proj),
 *   max_position_embeddings (2048), tie_word_embeddings (false), rope_theta
 *   (500000), sliding_window (4096; null with a sliding layer is refused),
 *   layer_types.
 * Tensors: OLMo 2's (models/olmo2.c). */
#include <string.h>

#include "json_util.h"
#include "common.h"
#include "model.h"

static const char *const k_types[] = {"olmo3", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

#define OLMO3_THETA 500000.0 /* Olmo3Config.default_theta */

/* The two layer types' RoPE settings: the full layers' into cfg (by the
 * shared parser, on a copy of config.json whose rope_parameters is theirs),
 * the sliding layers' base into rope_theta_local. */
static rc_status olmo3_rope(const json_t *root, const char *path, rc_config *cfg)
{
    double theta;
    RC_TRY(rc_json_get_num(root, "rope_theta", path, 1e-6, 1e30, OLMO3_THETA, &theta, NULL));
    const json_t *rp = json_object_get(root, "rope_parameters");
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"rope_parameters\" must be an object", path);
    const json_t *full = NULL, *slide = NULL;
    if (rp && !json_is_null(rp)) {
        full = json_object_get(rp, "full_attention");
        slide = json_object_get(rp, "sliding_attention");
        if (!full && !slide)
            return rc_errorf(RC_ERR_FORMAT, "%s: olmo3 \"rope_parameters\" has neither \"full_attention\" nor "
                             "\"sliding_attention\" (Olmo3Config keeps one per layer type)", path);
        if ((full && !json_is_null(full) && !json_is_object(full)) ||
            (slide && !json_is_null(slide) && !json_is_object(slide)))
            return rc_errorf(RC_ERR_FORMAT, "%s: olmo3 \"rope_parameters\" entries must be objects", path);
        if (full && json_is_null(full))
            full = NULL;
        if (slide && json_is_null(slide))
            slide = NULL;
    }
    json_t *r = json_deep_copy(root);
    if (!r)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_status s = RC_OK;
    if (rp && !json_is_null(rp)) { /* the full layers' object, rope_theta defaulted, as rope_parameters */
        json_t *f = full ? json_deep_copy(full) : json_object();
        if (!f || (!json_object_get(f, "rope_theta") && json_object_set_new(f, "rope_theta", json_real(theta))) ||
            json_object_set_new(r, "rope_parameters", f))
            s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        json_object_del(r, "rope_scaling"); /* rope_parameters wins: the legacy key is not read (absent: -1) */
    }
    if (s == RC_OK)
        s = rc_config_parse_rope(r, path, cfg, OLMO3_THETA, 1.0, NULL, NULL);
    json_decref(r);
    RC_TRY(s);
    double local = theta;
    if (slide) {
        const char *type;
        bool present;
        RC_TRY(rc_json_get_str(slide, "rope_type", path, NULL, &type, &present));
        if (!present)
            RC_TRY(rc_json_get_str(slide, "type", path, "default", &type, NULL));
        if (strcmp(type, "default") != 0)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: rope_parameters.sliding_attention type \"%.32s\" is not "
                             "supported (the sliding layers: default only)", path, type);
        RC_TRY(rc_json_get_num(slide, "rope_theta", path, 1e-6, 1e30, theta, &local, NULL));
        double partial;
        RC_TRY(rc_json_get_num(slide, "partial_rotary_factor", path, 0.0, 1.0, 1.0, &partial, NULL));
        if (partial != 1.0)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for olmo3 (transformers' OLMo3 "
                             "rotates the whole head): not supported", path);
    }
    cfg->rope_theta_local = local;
    return RC_OK;
}

static rc_status olmo3_parse(const json_t *root, const char *path, rc_config *cfg)
{
    bool present;
    RC_TRY(rc_olmo2_parse_common(root, path, cfg));
    cfg->rope_f32 = true; /* Olmo3RotaryEmbedding returns fp32 cos / sin, as OLMo2's */
    /* sliding windows: sliding_window (null: none) and layer_types */
    RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 4096, &cfg->sliding_window, &present));
    if (!present && json_object_get(root, "sliding_window"))
        cfg->sliding_window = 0;
    RC_TRY(rc_config_parse_layer_types(root, path, cfg, &present));
    if (!present)
        for (int64_t l = 0; l < cfg->n_layers; l++)
            cfg->layer_sliding[l] = (l + 1) % 4 != 0;
    cfg->window_per_layer = true;
    RC_TRY(olmo3_rope(root, path, cfg));
    if (cfg->rotary_dim != cfg->head_dim)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: partial_rotary_factor below 1 for %s (transformers' OLMo3 "
                         "rotates the whole head): not supported", path, cfg->model_type);
    return RC_OK;
}

/* keys and tensors: OLMo 2's (models/olmo2.c) */
const rc_arch rc_arch_olmo3 = {
    .family = "olmo3",
    .model_types = k_types,
    .keys = rc_olmo2_keys,
    .forward = {.norm = RC_NORM_RMS,
                .norm_bias = false,
                .residual = RC_RESIDUAL_SEQUENTIAL,
                .pos = RC_POS_ROTARY,
                .mlp = RC_MLP_GATED,
                .act = RC_ACT_SILU,
                .head = RC_HEAD_UNTIED},
    .prefixes = k_prefixes,
    .layer_stem = "layers.",
    .model_tensors = rc_olmo2_model_tensors,
    .layer_tensors = rc_olmo2_layer_tensors,
    .parse_config = olmo3_parse,
};
