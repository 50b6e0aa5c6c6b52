/* config.json: generic machinery only. The family (models/<family>.c)
 * declares its integer keys with their aliases and ranges, and its forward
 * details; this file reads them, parses eos_token_id and the RoPE settings
 * (top level or under "rope_parameters") the families share, and runs the
 * checks every family shares. Family-specific logic is the family's
 * parse_config hook. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "model.h"
#include "util.h"

#define MAX_CONFIG_BYTES (16u << 20)

/* Limits on sizes read from config.json: RC_LIM_* in model.h. */
#define LIM_VOCAB RC_LIM_VOCAB
#define LIM_POS RC_LIM_POS
#define LIM_HEAD_DIM RC_LIM_HEAD_DIM

rc_status rc_config_load(const char *dir, rc_config *cfg)
{
    char *path = rc_path_join(dir, "config.json");
    if (!path)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    json_t *root;
    rc_status s = rc_json_load_object(path, MAX_CONFIG_BYTES, &root);
    if (s == RC_OK) {
        s = rc_config_parse(root, path, cfg);
        json_decref(root);
    }
    free(path);
    return s;
}

static rc_status parse_eos(const json_t *root, const char *path, rc_config *cfg)
{
    const json_t *v = json_object_get(root, "eos_token_id");
    cfg->n_eos = 0;
    if (!v || json_is_null(v))
        return RC_OK;
    if (!json_is_array(v)) {
        int64_t x;
        RC_TRY(rc_json_get_int(root, "eos_token_id", path, 0, LIM_VOCAB, -1, &x, NULL));
        cfg->eos_ids[cfg->n_eos++] = x;
        return RC_OK;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e)
    {
        /* reuse the scalar checks through a one-key object */
        json_t *tmp = json_pack("{sO}", "eos_token_id", e);
        if (!tmp)
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        int64_t x = -1;
        rc_status s = rc_json_get_int(tmp, "eos_token_id", path, 0, LIM_VOCAB, -1, &x, NULL);
        json_decref(tmp);
        if (s != RC_OK)
            return rc_errorf(s, "%s: \"eos_token_id\"[%zu] must be an integer in [0, %d]", path, i, LIM_VOCAB);
        if (x < 0)
            return rc_errorf(RC_ERR_FORMAT, "%s: \"eos_token_id\"[%zu] is null", path, i);
        if (cfg->n_eos == RC_MAX_EOS)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: more than %d eos_token_id values", path, RC_MAX_EOS);
        cfg->eos_ids[cfg->n_eos++] = x;
    }
    return RC_OK;
}

rc_status rc_config_parse(const json_t *root, const char *path, rc_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    const char *mt;
    bool present;
    RC_TRY(rc_json_get_str(root, "model_type", path, NULL, &mt, &present));
    if (!present)
        return rc_errorf(RC_ERR_FORMAT, "%s: \"model_type\" is missing", path);
    cfg->arch = rc_arch_for_model_type(mt);
    if (!cfg->arch)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: model_type \"%.40s\" is not supported (supported: %s)",
                         path, mt, rc_arch_supported_list());
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt);

    /* the family's forward details, as defaults its parse hook may override */
    const rc_forward_desc *fd = &cfg->arch->forward;
    cfg->norm = fd->norm;
    cfg->norm_bias = fd->norm_bias;
    cfg->parallel_residual = fd->residual == RC_RESIDUAL_PARALLEL;
    cfg->pos = fd->pos;
    cfg->gated_mlp = fd->mlp == RC_MLP_GATED;
    cfg->act = fd->act;
    cfg->tie_embeddings = fd->head == RC_HEAD_TIED;
    /* the family's integer keys, in its order */
    for (const rc_config_key *k = cfg->arch->keys; k->keys[0]; k++) {
        int64_t *dst = (int64_t *)((char *)cfg + k->offset);
        RC_TRY(rc_config_get_int_alias(root, path, k->keys, k->lo, k->hi, k->def, dst, &present));
        if (!present && k->required)
            return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" is missing", path, k->keys[0]);
    }
    RC_TRY(parse_eos(root, path, cfg));
    RC_TRY(cfg->arch->parse_config(root, path, cfg));
    if (cfg->pos == RC_POS_ALIBI) {
        /* a config that also asks for rotary embeddings is contradictory:
         * say so rather than silently run one of the two */
        static const char *const rotary_keys[] = {"rope_theta", "rope_scaling", "rope_parameters", "rotary_pct",
                                                  "rotary_dim", "rotary_emb_base", "partial_rotary_factor",
                                                  "rotary_emb_fraction", NULL};
        for (int i = 0; rotary_keys[i]; i++) {
            const json_t *v = json_object_get(root, rotary_keys[i]);
            if (v && !json_is_null(v))
                return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" (rotary embeddings) in a %s config, whose attention "
                                 "uses ALiBi: the two position encodings contradict each other",
                                 path, rotary_keys[i], cfg->model_type);
        }
    }
    return rc_config_finish(path, cfg);
}

rc_status rc_config_get_int_alias(const json_t *root, const char *path, const char *const *keys,
                                  int64_t lo, int64_t hi, int64_t def, int64_t *out, bool *present)
{
    const char *found = NULL;
    for (int i = 0; keys[i]; i++) {
        const json_t *v = json_object_get(root, keys[i]);
        if (!v || json_is_null(v)) /* null counts as absent, as for every key */
            continue;
        if (found)
            return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" and \"%s\" are both given (the same setting)", path,
                             found, keys[i]);
        found = keys[i];
    }
    return rc_json_get_int(root, found ? found : keys[0], path, lo, hi, def, out, present);
}

/* RoPE: HF v5 writes {"rope_parameters": {"rope_type", "rope_theta",
 * "partial_rotary_factor", ...}}; older files use top-level rope_theta /
 * rope_scaling ({"type" or "rope_type", "factor", ...}) or family keys such as
 * gpt_neox's rotary_emb_base / rotary_pct. rope_parameters wins when present. */
rc_status rc_config_parse_rope(const json_t *root, const char *path, rc_config *cfg,
                               double default_theta, double default_partial,
                               const char *legacy_theta_key, const char *legacy_partial_key)
{
    const json_t *rp = json_object_get(root, "rope_parameters");
    const json_t *rs = json_object_get(root, "rope_scaling");
    if (rp && !json_is_null(rp) && !json_is_object(rp))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"rope_parameters\" must be an object", path);
    if (rs && !json_is_null(rs) && !json_is_object(rs))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"rope_scaling\" must be an object or null", path);
    if (rp && json_is_null(rp))
        rp = NULL;
    if (rs && json_is_null(rs))
        rs = NULL;

    double theta, partial;
    bool present;
    /* theta: rope_parameters.rope_theta > rope_theta > legacy key > default */
    RC_TRY(rc_json_get_num(root, "rope_theta", path, 1e-6, 1e30, default_theta, &theta, &present));
    if (!present && legacy_theta_key)
        RC_TRY(rc_json_get_num(root, legacy_theta_key, path, 1e-6, 1e30, default_theta, &theta, NULL));
    RC_TRY(rc_json_get_num(root, "partial_rotary_factor", path, 0.0, 1.0, default_partial, &partial,
                           &present));
    if (!present && legacy_partial_key)
        RC_TRY(rc_json_get_num(root, legacy_partial_key, path, 0.0, 1.0, default_partial, &partial, NULL));
    const json_t *sc = rs; /* where the scaling keys live */
    if (rp) {
        RC_TRY(rc_json_get_num(rp, "rope_theta", path, 1e-6, 1e30, theta, &theta, NULL));
        RC_TRY(rc_json_get_num(rp, "partial_rotary_factor", path, 0.0, 1.0, partial, &partial, NULL));
        sc = rp;
    }
    cfg->rope_theta = theta;
    cfg->rotary_dim = (int64_t)((double)cfg->head_dim * partial); /* Python int() truncation */
    if (cfg->rotary_dim % 2 != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%s: rotary dimension %lld (head_dim x partial rotary factor) is odd",
                         path, (long long)cfg->rotary_dim);

    cfg->rope_type = RC_ROPE_DEFAULT;
    cfg->rope_factor = 1.0;
    if (!sc)
        return RC_OK;
    const char *type;
    RC_TRY(rc_json_get_str(sc, "rope_type", path, NULL, &type, &present));
    if (!present)
        RC_TRY(rc_json_get_str(sc, "type", path, "default", &type, NULL));
    if (strcmp(type, "default") == 0)
        return RC_OK;
    if (strcmp(type, "linear") == 0) {
        cfg->rope_type = RC_ROPE_LINEAR;
        RC_TRY(rc_json_get_num(sc, "factor", path, 1e-6, 1e6, 0, &cfg->rope_factor, &present));
        if (!present)
            return rc_errorf(RC_ERR_FORMAT, "%s: linear rope scaling needs \"factor\"", path);
        return RC_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        cfg->rope_type = RC_ROPE_LLAMA3;
        struct {
            const char *k;
            double *d;
        } f[] = {{"factor", &cfg->rope_factor},
                 {"low_freq_factor", &cfg->rope_low_freq},
                 {"high_freq_factor", &cfg->rope_high_freq}};
        for (int i = 0; i < 3; i++) {
            RC_TRY(rc_json_get_num(sc, f[i].k, path, 1e-6, 1e6, 0, f[i].d, &present));
            if (!present)
                return rc_errorf(RC_ERR_FORMAT, "%s: llama3 rope scaling needs \"%s\"", path, f[i].k);
        }
        RC_TRY(rc_json_get_int(sc, "original_max_position_embeddings", path, 1, LIM_POS, 0,
                               &cfg->rope_orig_max_pos, &present));
        if (!present)
            return rc_errorf(RC_ERR_FORMAT,
                             "%s: llama3 rope scaling needs \"original_max_position_embeddings\"", path);
        if (!(cfg->rope_high_freq > cfg->rope_low_freq))
            return rc_errorf(RC_ERR_FORMAT, "%s: llama3 rope scaling needs high_freq_factor > low_freq_factor",
                             path);
        return RC_OK;
    }
    return rc_errorf(RC_ERR_UNSUPPORTED,
                     "%s: rope scaling type \"%.32s\" is not supported (supported: default, linear, llama3)",
                     path, type);
}

rc_status rc_config_finish(const char *path, rc_config *cfg)
{
    if (cfg->n_kv_heads < 1 || cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads != 0)
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                         path, (long long)cfg->n_heads, (long long)cfg->n_kv_heads);
    if (cfg->head_dim < 1 || cfg->head_dim > LIM_HEAD_DIM)
        return rc_errorf(RC_ERR_FORMAT, "%s: head_dim %lld is out of range [1, %d]", path,
                         (long long)cfg->head_dim, LIM_HEAD_DIM);
    if (cfg->pos != RC_POS_ROTARY && cfg->rotary_dim != 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s positions together with rotary settings", path,
                         cfg->pos == RC_POS_ALIBI ? "ALiBi" : "learned");
    if (cfg->rotary_dim < 0 || cfg->rotary_dim > cfg->head_dim)
        return rc_errorf(RC_ERR_FORMAT, "%s: rotary dimension %lld exceeds head_dim %lld", path,
                         (long long)cfg->rotary_dim, (long long)cfg->head_dim);
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] >= cfg->vocab)
            return rc_errorf(RC_ERR_FORMAT, "%s: eos_token_id %lld is not below vocab_size %lld", path,
                             (long long)cfg->eos_ids[i], (long long)cfg->vocab);
    if (cfg->bos_id >= cfg->vocab)
        return rc_errorf(RC_ERR_FORMAT, "%s: bos_token_id %lld is not below vocab_size %lld", path,
                         (long long)cfg->bos_id, (long long)cfg->vocab);
    /* Every weight size must fit in 64 bits (and in our allocation limit)
     * before anything is allocated: the exact count from the weight lists
     * (model.h), biases and norms included */
    int64_t total = 0;
    if (rc_weights_numel(cfg, &total) != RC_OK || total > RC_MAX_ALLOC / (int64_t)sizeof(float)) {
        rc_clear_error();
        return rc_errorf(RC_ERR_FORMAT, "%s: model sizes are too large (weights would exceed %lld bytes)",
                         path, (long long)RC_MAX_ALLOC);
    }
    return RC_OK;
}

rc_status rc_config_get_norm_eps(const json_t *root, const char *path, const char *key, double def,
                                 double *out)
{
    /* the range check and the messages for wrong types, infinities and
     * negatives; then what that check lets through: 0, -0 and values that
     * round to 0 in fp32 (0 / sqrt(0 + 0) is NaN on an all-zero row) */
    RC_TRY(rc_json_get_num(root, key, path, 0.0, 1.0, def, out, NULL));
    if (!((float)*out > 0.0f))
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: \"%s\" = %g is out of range: it must be > 0 (not rounding to 0 in fp32) "
                         "and at most 1",
                         path, key, *out);
    return RC_OK;
}
