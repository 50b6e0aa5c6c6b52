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

/* YaRN as transformers' _compute_yarn_parameters reads it (modeling_rope_utils):
 * factor (required), original_max_position_embeddings (a top-level key of that
 * name wins, as standardize_rope_params gives it priority; else the scaling
 * object's; else max_position_embeddings), beta_fast / beta_slow (`or 32`,
 * `or 1`: absent, null or 0 give the default), truncate (default true), and the
 * attention factor: attention_factor if given, else get_mscale(factor, mscale) /
 * get_mscale(factor, mscale_all_dim) when both are non-zero, else
 * get_mscale(factor), with get_mscale(s, m) = 0.1 m ln(s) + 1 for s > 1, else 1. */
static double yarn_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

static rc_status parse_yarn(const json_t *root, const json_t *sc, const char *path, rc_config *cfg)
{
    bool present;
    cfg->rope_type = RC_ROPE_YARN;
    RC_TRY(rc_json_get_num(sc, "factor", path, 1e-6, 1e6, 0, &cfg->rope_factor, &present));
    if (!present)
        return rc_errorf(RC_ERR_FORMAT, "%s: yarn rope scaling needs \"factor\"", path);
    RC_TRY(rc_json_get_int(root, "original_max_position_embeddings", path, 1, LIM_POS, 0, &cfg->rope_orig_max_pos,
                           &present));
    if (!present)
        RC_TRY(rc_json_get_int(sc, "original_max_position_embeddings", path, 1, LIM_POS, cfg->max_pos,
                               &cfg->rope_orig_max_pos, &present));
    if (cfg->rope_orig_max_pos < 1)
        return rc_errorf(RC_ERR_FORMAT, "%s: yarn rope scaling needs \"original_max_position_embeddings\" "
                         "(or max_position_embeddings)", path);
    RC_TRY(rc_json_get_num(sc, "beta_fast", path, 0.0, 1e6, 0.0, &cfg->rope_beta_fast, NULL));
    RC_TRY(rc_json_get_num(sc, "beta_slow", path, 0.0, 1e6, 0.0, &cfg->rope_beta_slow, NULL));
    if (cfg->rope_beta_fast == 0.0)
        cfg->rope_beta_fast = 32.0;
    if (cfg->rope_beta_slow == 0.0)
        cfg->rope_beta_slow = 1.0;
    RC_TRY(rc_json_get_bool(sc, "truncate", path, true, &cfg->rope_truncate, NULL));
    double af, ms, msa;
    RC_TRY(rc_json_get_num(sc, "attention_factor", path, 0.0, 1e6, 0.0, &af, &present));
    if (!present) {
        RC_TRY(rc_json_get_num(sc, "mscale", path, -1e6, 1e6, 0.0, &ms, NULL));
        RC_TRY(rc_json_get_num(sc, "mscale_all_dim", path, -1e6, 1e6, 0.0, &msa, NULL));
        af = ms != 0.0 && msa != 0.0 ? yarn_mscale(cfg->rope_factor, ms) / yarn_mscale(cfg->rope_factor, msa)
                                     : yarn_mscale(cfg->rope_factor, 1.0);
    }
    if (!(af > 0.0) || !isfinite(af))
        return rc_errorf(RC_ERR_FORMAT, "%s: yarn attention factor %g is not a positive number", path, af);
    cfg->rope_attn_factor = af;
    return RC_OK;
}

/* longrope as transformers' _compute_longrope_parameters reads it
 * (modeling_rope_utils): short_factor and long_factor (required, one number
 * per rotary pair; short_factor divides the frequencies up to
 * original_max_position_embeddings), original_max_position_embeddings (a
 * top-level key wins, as standardize_rope_params gives it priority; else the
 * scaling object's; else max_position_embeddings), factor (absent or null:
 * max_position_embeddings / original_max_position_embeddings) and the
 * attention factor cos and sin are multiplied by: attention_factor if given,
 * else 1 for factor <= 1, else sqrt(1 + ln(factor) / ln(original)). */
static rc_status factor_list(const json_t *sc, const char *key, const char *path, int64_t n, double *out)
{
    const json_t *v = json_object_get(sc, key);
    if (!v || json_is_null(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: longrope rope scaling needs \"%s\"", path, key);
    if (!json_is_array(v) || (int64_t)json_array_size(v) != n)
        return rc_errorf(RC_ERR_FORMAT, "%s: longrope \"%s\" must be a list of %lld numbers (one per rotary pair)",
                         path, key, (long long)n);
    for (int64_t j = 0; j < n; j++) {
        const json_t *e = json_array_get(v, (size_t)j);
        const double x = json_is_number(e) ? json_number_value(e) : NAN;
        if (!(x > 0.0) || !isfinite(x) || !((float)x > 0.0f) || !isfinite((float)x))
            return rc_errorf(RC_ERR_FORMAT, "%s: longrope \"%s\"[%lld] is not a positive number", path, key,
                             (long long)j);
        if (out)
            out[j] = x;
    }
    return RC_OK;
}

static rc_status parse_longrope(const json_t *root, const json_t *sc, const char *path, rc_config *cfg)
{
    bool present;
    cfg->rope_type = RC_ROPE_LONGROPE;
    const int64_t n = cfg->rotary_dim / 2;
    if (n > RC_MAX_ROPE_PAIRS)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: longrope with %lld rotary pairs (at most %d)", path, (long long)n,
                         RC_MAX_ROPE_PAIRS);
    RC_TRY(factor_list(sc, "short_factor", path, n, cfg->rope_short_factor));
    RC_TRY(factor_list(sc, "long_factor", path, n, NULL));
    RC_TRY(rc_json_get_int(root, "original_max_position_embeddings", path, 1, LIM_POS, 0, &cfg->rope_orig_max_pos,
                           &present));
    if (!present)
        RC_TRY(rc_json_get_int(sc, "original_max_position_embeddings", path, 1, LIM_POS, cfg->max_pos,
                               &cfg->rope_orig_max_pos, &present));
    if (cfg->rope_orig_max_pos < 1)
        return rc_errorf(RC_ERR_FORMAT, "%s: longrope rope scaling needs \"original_max_position_embeddings\" "
                         "(or max_position_embeddings)", path);
    RC_TRY(rc_json_get_num(sc, "factor", path, 1e-6, 1e6, 0.0, &cfg->rope_factor, &present));
    if (!present)
        cfg->rope_factor = (double)cfg->max_pos / (double)cfg->rope_orig_max_pos;
    double af;
    RC_TRY(rc_json_get_num(sc, "attention_factor", path, 0.0, 1e6, 0.0, &af, &present));
    if (!present)
        af = cfg->rope_factor <= 1.0 ? 1.0
                                     : sqrt(1.0 + log(cfg->rope_factor) / log((double)cfg->rope_orig_max_pos));
    if (!(af > 0.0) || !isfinite(af))
        return rc_errorf(RC_ERR_FORMAT, "%s: longrope attention factor %g is not a positive number", path, af);
    cfg->rope_attn_factor = af;
    return RC_OK;
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
    cfg->rope_attn_factor = 1.0;
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
    if (strcmp(type, "yarn") == 0)
        return parse_yarn(root, sc, path, cfg);
    if (strcmp(type, "longrope") == 0)
        return parse_longrope(root, sc, path, cfg);
    return rc_errorf(RC_ERR_UNSUPPORTED,
                     "%s: rope scaling type \"%.32s\" is not supported (supported: default, linear, llama3, yarn, "
                     "longrope)", path, type);
}

rc_status rc_config_check_positions(const rc_config *cfg, int64_t n_positions)
{
    if (cfg->pos == RC_POS_ROTARY && cfg->rope_type == RC_ROPE_LONGROPE && n_positions > cfg->rope_orig_max_pos)
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%lld positions with longrope RoPE: past original_max_position_embeddings %lld, "
                         "transformers switches a whole forward call to long_factor (its KV-cached generation "
                         "and its full forward then rotate earlier positions differently); not supported: keep "
                         "prompt + completion within %lld tokens",
                         (long long)n_positions, (long long)cfg->rope_orig_max_pos, (long long)cfg->rope_orig_max_pos);
    return RC_OK;
}

rc_status rc_config_parse_layer_types(const json_t *root, const char *path, rc_config *cfg, bool *present)
{
    const json_t *v = json_object_get(root, "layer_types");
    *present = v && !json_is_null(v);
    if (!*present)
        return RC_OK;
    if (!json_is_array(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"layer_types\" must be a list of strings", path);
    if ((int64_t)json_array_size(v) != cfg->n_layers)
        return rc_errorf(RC_ERR_FORMAT, "%s: \"layer_types\" has %zu entries for %lld layers", path,
                         json_array_size(v), (long long)cfg->n_layers);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *t = json_string_value(e);
        if (!t)
            return rc_errorf(RC_ERR_FORMAT, "%s: \"layer_types\"[%zu] is not a string", path, i);
        if (strcmp(t, "full_attention") == 0 || strcmp(t, "attention") == 0) /* "attention": the legacy name */
            cfg->layer_sliding[i] = 0;
        else if (strcmp(t, "sliding_attention") == 0)
            cfg->layer_sliding[i] = 1;
        else
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: \"layer_types\"[%zu] \"%.40s\" is not supported (supported: "
                             "full_attention, sliding_attention)", path, i, t);
    }
    cfg->window_per_layer = true;
    return RC_OK;
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
    if (cfg->window_per_layer && cfg->sliding_window <= 0)
        for (int64_t l = 0; l < cfg->n_layers && l < RC_LIM_LAYERS; l++)
            if (cfg->layer_sliding[l]) /* masking_utils: "Could not find a `sliding_window` argument" */
                return rc_errorf(RC_ERR_FORMAT, "%s: layer %lld is a sliding_attention layer but the config has no "
                                 "sliding window (sliding_window null, or use_sliding_window false)", path,
                                 (long long)l);
    /* transformers warns about an eos_token_id outside the vocabulary and
     * generates without it (it can never be sampled): the id is dropped */
    int kept = 0;
    cfg->n_eos_dropped = 0;
    for (int i = 0; i < cfg->n_eos; i++) {
        if (cfg->eos_ids[i] >= cfg->vocab)
            cfg->eos_dropped[cfg->n_eos_dropped++] = cfg->eos_ids[i];
        else
            cfg->eos_ids[kept++] = cfg->eos_ids[i];
    }
    cfg->n_eos = kept;
    if (cfg->bos_id >= cfg->vocab)
        return rc_errorf(RC_ERR_FORMAT, "%s: bos_token_id %lld is not below vocab_size %lld", path,
                         (long long)cfg->bos_id, (long long)cfg->vocab);
    /* Every weight size must fit in 64 bits, and the whole model in 1024
     * times the allocation limit (fp32 weights of 1 PiB; DeepSeek-V3's are
     * 2.7 TB): the exact count from the weight lists (model.h), biases and
     * norms included. The allocation limit itself (RC_MAX_ALLOC) is checked
     * by the loader on the layers it loads (--layers N keeps the first N),
     * before it opens a weight file (model_load in model.c). */
    int64_t total = 0;
    const int64_t most = RC_MAX_ALLOC / (int64_t)sizeof(float) * 1024;
    if (rc_weights_numel(cfg, &total) != RC_OK || total > most) {
        rc_clear_error();
        return rc_errorf(RC_ERR_FORMAT, "%s: model sizes are too large (weights would exceed %lld bytes as fp32)",
                         path, (long long)(most * (int64_t)sizeof(float)));
    }
    return RC_OK;
}

bool rc_config_eos_warning(const rc_config *cfg, char *buf, size_t n)
{
    if (n)
        buf[0] = '\0';
    if (cfg->n_eos_dropped == 0)
        return false;
    size_t o = (size_t)snprintf(buf, n, "config.json: eos_token_id");
    for (int i = 0; i < cfg->n_eos_dropped; i++)
        o += (size_t)snprintf(buf + (o < n ? o : n), o < n ? n - o : 0, "%s %lld", i ? "," : "",
                              (long long)cfg->eos_dropped[i]);
    snprintf(buf + (o < n ? o : n), o < n ? n - o : 0,
             " not below vocab_size %lld: never sampled, ignored (%s)", (long long)cfg->vocab,
             cfg->n_eos ? "the other EOS ids stop generation" : "generation runs to its length, no EOS");
    return true;
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
