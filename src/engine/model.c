/* Model loading: config.json + safetensors -> fp32 weights in one arena. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

float *rc_loader_take(rc_loader *ld, int64_t n)
{
    if (n < 0 || ld->used > ld->cap - n)
        return NULL;
    float *p = ld->arena + ld->used;
    ld->used += n;
    return p;
}

const char *rc_loader_resolve(const rc_loader *ld, const char *const *prefixes, const char *name,
                              char *buf, size_t n)
{
    for (int i = 0; prefixes[i]; i++) {
        snprintf(buf, n, "%s%s", prefixes[i], name);
        if (rc_st_find(ld->st, buf))
            return buf;
    }
    /* not found under any prefix: report it under the first (canonical) one */
    snprintf(buf, n, "%s%s", prefixes[0], name);
    return buf;
}

static rc_status loader_get(rc_loader *ld, const char *name, int ndim, const int64_t *shape,
                            float **out, bool optional)
{
    *out = NULL;
    if (optional && !rc_st_find(ld->st, name))
        return RC_OK;
    int64_t n;
    if (!rc_numel(shape, ndim, &n))
        return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\": expected size overflows", name);
    float *dst = rc_loader_take(ld, n);
    if (!dst)
        return rc_errorf(RC_ERR_INTERNAL, "weight arena too small at tensor \"%s\"", name);
    RC_TRY(rc_st_read_weight(ld->st, name, ndim, shape, dst));
    *out = dst;
    return RC_OK;
}

rc_status rc_loader_get(rc_loader *ld, const char *name, int ndim, const int64_t *shape, float **out)
{
    return loader_get(ld, name, ndim, shape, out, false);
}

rc_status rc_loader_get_opt(rc_loader *ld, const char *name, int ndim, const int64_t *shape,
                            float **out)
{
    return loader_get(ld, name, ndim, shape, out, true);
}

/* HF's inv_freq in fp32, op by op as torch computes it:
 * default: 1.0 / (base ** (arange(0, dim, 2).float() / dim)); linear: / factor;
 * llama3: transformers.modeling_rope_utils._compute_llama3_parameters. */
void rc_rope_inv_freq(const rc_config *cfg, float *inv)
{
    int64_t dim = cfg->rotary_dim;
    float base = (float)cfg->rope_theta;
    for (int64_t j = 0; j < dim / 2; j++) {
        float e = (float)(2 * j) / (float)dim;
        inv[j] = 1.0f / powf(base, e);
    }
    if (cfg->rope_type == RC_ROPE_LINEAR) {
        for (int64_t j = 0; j < dim / 2; j++)
            inv[j] = inv[j] / (float)cfg->rope_factor;
    } else if (cfg->rope_type == RC_ROPE_LLAMA3) {
        const float factor = (float)cfg->rope_factor;
        const float low = (float)cfg->rope_low_freq;
        const double old_ctx = (double)cfg->rope_orig_max_pos;
        const float low_wavelen = (float)(old_ctx / cfg->rope_low_freq);
        const float high_wavelen = (float)(old_ctx / cfg->rope_high_freq);
        const float two_pi = (float)(2.0 * M_PI);
        const float denom = (float)(cfg->rope_high_freq - cfg->rope_low_freq);
        for (int64_t j = 0; j < dim / 2; j++) {
            float wavelen = two_pi / inv[j];
            float llama = wavelen > low_wavelen ? inv[j] / factor : inv[j];
            float smooth = ((float)old_ctx / wavelen - low) / denom;
            float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
            bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            inv[j] = medium ? smoothed : llama;
        }
    }
}

void rc_model_free(rc_model *m)
{
    if (!m)
        return;
    free(m->arena);
    free(m->w.layers);
    free(m->dir);
    free(m);
}

rc_status rc_model_load(const char *dir, rc_model **out)
{
    *out = NULL;
    rc_model *m = calloc(1, sizeof *m);
    if (!m)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_safetensors *st = NULL;
    rc_status s = RC_OK;
    m->dir = strdup(dir);
    if (!m->dir) {
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s = rc_config_load(dir, &m->cfg);
    if (s != RC_OK)
        goto fail;
    s = rc_st_open_dir(dir, &st);
    if (s != RC_OK)
        goto fail;
    const rc_config *c = &m->cfg;
    int64_t nw;
    s = c->arch->weights_size(c, &nw);
    if (s != RC_OK)
        goto fail;
    /* every weight comes from a distinct tensor of the checkpoint: a config
     * that needs more values than the files hold is wrong, and is rejected
     * before its size is allocated. Tensors of every dtype count here, so
     * that a weight stored in a dtype we cannot load (I32, C64, F8, ...) is
     * reported by name when it is read (exit 5), not as a size mismatch. */
    int64_t in_files = 0, in_files_float = 0;
    for (int64_t i = 0; i < st->ntensors; i++) {
        const rc_st_tensor *t = &st->tensors[i];
        int64_t n;
        rc_numel(t->shape, t->ndim, &n); /* each fits its file: no overflow */
        in_files += n;
        if (t->dtype == RC_F32 || t->dtype == RC_F16 || t->dtype == RC_BF16 || t->dtype == RC_F64)
            in_files_float += n;
    }
    if (nw > in_files) {
        s = rc_errorf(RC_ERR_FORMAT,
                      "%s: config.json describes %lld weights but the safetensors files hold only %lld "
                      "(hidden_size, layers or vocab_size do not match the checkpoint)",
                      dir, (long long)nw, (long long)in_files);
        goto fail;
    }
    m->n_params = in_files_float;
    int64_t n_inv = c->rotary_dim / 2 + 1;
    s = rc_alloc_aligned((void **)&m->arena, nw + n_inv, sizeof(float), "model weights");
    if (s != RC_OK)
        goto fail;
    s = rc_calloc((void **)&m->w.layers, c->n_layers, sizeof *m->w.layers, "layer table");
    if (s != RC_OK)
        goto fail;
    rc_loader ld = {.st = st, .cfg = c, .arena = m->arena, .used = 0, .cap = nw + n_inv};
    s = c->arch->load(&ld, &m->w);
    if (s != RC_OK) {
        rc_error_prefix(s, "%s", dir);
        goto fail;
    }
    m->w.inv_freq = rc_loader_take(&ld, n_inv);
    if (!m->w.inv_freq) {
        s = rc_errorf(RC_ERR_INTERNAL, "weight arena too small for the RoPE table");
        goto fail;
    }
    rc_rope_inv_freq(c, m->w.inv_freq);
    m->arena_len = ld.used;
    /* stored dtype, from the files */
    {
        const char *ename = NULL;
        for (int64_t i = 0; i < st->ntensors && !ename; i++)
            if (strstr(st->tensors[i].name, "embed_in.weight") ||
                strstr(st->tensors[i].name, "embed_tokens.weight"))
                ename = st->tensors[i].dtype_name;
        snprintf(m->stored_dtype, sizeof m->stored_dtype, "%s", ename ? ename : "?");
    }
    rc_st_close(st);
    *out = m;
    return RC_OK;
fail:
    rc_st_close(st);
    rc_model_free(m);
    return s;
}
