/* Model loading: config.json + safetensors -> weights used in place from the
 * mapped files, or copied into one arena where a family's layout needs it. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

/* n bytes more of the arena's capacity (counted even when dry) */
static bool loader_reserve(rc_loader *ld, int64_t n)
{
    if (n < 0 || ld->used > ld->cap - n)
        return false;
    ld->used += n;
    return true;
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

/* name under the loaded config's prefixes (its wrapper's, else its family's) */
static const char *resolve(const rc_loader *ld, const char *name, char *buf, size_t n)
{
    return rc_loader_resolve(ld, rc_config_prefixes(ld->cfg), name, buf, n);
}

#define ARENA_ALIGN 64

/* Weight `name` into *out: in place from the mapped file unless `copy`
 * (a layout fix or a fused field needs it), the stored dtype is F64, or the
 * data is not aligned to its element size; otherwise a copy in the arena, in
 * as_dt (a fused field's dtype: the stored one or fp32) or, when as_dt < 0,
 * the stored dtype (F64: fp32), 64-byte aligned unless `append` (it continues
 * a fused field). *wdata: the arena copy, writable (NULL in place). Dry:
 * checked and counted, no data. */
static rc_status loader_get(rc_loader *ld, const char *name, int ndim, const int64_t *shape, bool copy,
                            int as_dt, bool append, rc_wt *out, void **wdata)
{
    *out = (rc_wt){NULL, RC_F32, false};
    *wdata = NULL;
    int64_t n, bytes;
    if (!rc_numel(shape, ndim, &n))
        return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\": expected size overflows", name);
    const void *data;
    int sdt;
    bool aligned;
    RC_TRY(rc_st_weight_view(ld->st, name, ndim, shape, false, &data, &sdt, &aligned));
    const rc_dtype dt = as_dt >= 0 ? (rc_dtype)as_dt : sdt == RC_F64 ? RC_F32 : (rc_dtype)sdt;
    if (dt != RC_F32 && (int)dt != sdt)
        return rc_errorf(RC_ERR_INTERNAL, "tensor \"%s\": %s cannot be read as %s", name,
                         rc_dtype_name((rc_dtype)sdt), rc_dtype_name(dt));
    out->dt = dt;
    if (!rc_mul_i64(n, rc_dtype_size(dt), &bytes))
        return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\": size overflows", name);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const bool in_place = !copy && as_dt < 0 && sdt != RC_F64 && aligned;
#else
    const bool in_place = false; /* the files are little-endian: converted by copying */
#endif
    if (in_place) {
        out->mapped = true;
        if (!rc_add_i64(ld->mapped, bytes, &ld->mapped))
            return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\": size overflows", name);
        if (ld->dry)
            return RC_OK;
        RC_TRY(rc_st_weight_view(ld->st, name, ndim, shape, true, &data, &sdt, &aligned));
        /* the scan touched every page: let them go until the forward pass
         * (or an engine's copy) reads them */
        rc_st_release(ld->st, data, (size_t)bytes);
        out->p = data;
        return RC_OK;
    }
    if (!append) { /* a tensor of its own starts aligned */
        const int64_t pad = (ARENA_ALIGN - ld->used % ARENA_ALIGN) % ARENA_ALIGN;
        if (!loader_reserve(ld, pad))
            return rc_errorf(RC_ERR_INTERNAL, "weight arena too small at tensor \"%s\"", name);
    }
    const int64_t off = ld->used;
    if (!loader_reserve(ld, bytes))
        return rc_errorf(RC_ERR_INTERNAL, "weight arena too small at tensor \"%s\"", name);
    if (ld->dry)
        return RC_OK;
    RC_TRY(rc_st_read_weight_as(ld->st, name, ndim, shape, dt, ld->arena + off));
    out->p = ld->arena + off;
    *wdata = ld->arena + off;
    return RC_OK;
}

void rc_model_release(const rc_model *m, rc_wt w, int64_t n)
{
    if (w.p && n > 0)
        rc_st_release(m->st, w.p, (size_t)n * (size_t)rc_dtype_size(w.dt));
}

void rc_wt_convert(rc_wt w, int64_t i0, int64_t n, rc_dtype round_dt, rc_dtype store_dt, void *dst)
{
    if (store_dt == RC_F32) {
        float *d = dst;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++)
            d[i] = rc_round_to(rc_wt_at(w, i0 + i), round_dt);
    } else {
        uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) {
            const float v = rc_wt_at(w, i0 + i);
            d[i] = store_dt == RC_BF16 ? rc_f32_to_bf16(v) : rc_f32_to_f16(v); /* RNE: rounds as rc_round_to */
        }
    }
}

int64_t rc_dim_value(const rc_config *c, rc_dim d)
{
    switch (d) {
    case RC_DIM_1: return 1;
    case RC_DIM_H: return c->hidden;
    case RC_DIM_V: return c->vocab;
    case RC_DIM_I: return c->intermediate;
    case RC_DIM_Q: return c->n_heads * c->head_dim;
    case RC_DIM_KV: return c->n_kv_heads * c->head_dim;
    case RC_DIM_QKV: return (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    case RC_DIM_3H: return 3 * c->hidden;
    case RC_DIM_POS: return c->max_pos;
    case RC_DIM_E: return c->n_experts;
    case RC_DIM_IM: return c->moe_intermediate;
    case RC_DIM_E2IM: return 2 * c->n_experts * c->moe_intermediate;
    case RC_DIM_EH: return c->n_experts * c->hidden;
    case RC_DIM_IS: return c->shared_intermediate;
    case RC_DIM_QNORM: return c->qk_norm == RC_QK_NORM_ALL ? c->n_heads * c->head_dim : c->head_dim;
    case RC_DIM_KNORM: return c->qk_norm == RC_QK_NORM_ALL ? c->n_kv_heads * c->head_dim : c->head_dim;
    case RC_DIM_NH: return c->n_heads;
    case RC_DIM_O: return c->n_heads * (c->mla ? c->v_head_dim : c->head_dim);
    case RC_DIM_MQ: return c->n_heads * (c->qk_nope_dim + c->qk_rope_dim);
    case RC_DIM_MQIN: return c->q_lora_rank > 0 ? c->q_lora_rank : c->hidden;
    case RC_DIM_QL: return c->q_lora_rank;
    case RC_DIM_KVL: return c->kv_lora_rank;
    case RC_DIM_KVA: return c->kv_lora_rank + c->qk_rope_dim;
    case RC_DIM_KVB: return c->n_heads * (c->qk_nope_dim + c->v_head_dim);
    case RC_DIM_LQKVZ: return 2 * c->lin_hk * c->lin_dk + 2 * c->lin_hv * c->lin_dv;
    case RC_DIM_LBA: return 2 * c->lin_hv;
    case RC_DIM_LCONV: return 2 * c->lin_hk * c->lin_dk + c->lin_hv * c->lin_dv;
    case RC_DIM_LK: return c->lin_conv_k;
    case RC_DIM_LHV: return c->lin_hv;
    case RC_DIM_LDV: return c->lin_dv;
    case RC_DIM_LV: return c->lin_hv * c->lin_dv;
    }
    return 0;
}

bool rc_layer_is_moe(const rc_config *c, int64_t l)
{
    if (c->n_experts <= 0 || l < 0 || l >= RC_LIM_LAYERS)
        return false;
    const bool mlp_only = (c->mlp_only[l / 64] >> (l % 64)) & 1u;
    const int64_t step = c->sparse_step > 0 ? c->sparse_step : 1;
    return !mlp_only && (l + 1) % step == 0;
}

bool rc_layer_weight_keeps_f32(const rc_config *c, int id)
{
    return c->router_gate_f32 && (id == RC_LW_w_router || id == RC_LW_e_bias);
}

bool rc_weight_cond_holds_layer(const rc_config *c, rc_weight_cond w, int64_t l)
{
    const bool moe = rc_layer_is_moe(c, l), lin = rc_layer_is_linear(c, l);
    switch (w) {
    case RC_IF_ATTN: return !lin;
    case RC_IF_QKV: return !lin && !c->mla; /* the fused q/k/v projection (MLA has its own) */
    case RC_IF_LINEAR: return lin;
    case RC_IF_ATTN_GATE: return !lin && c->attn_out_gate;
    case RC_IF_QKV_BIAS: /* the attention layer's tensors */
    case RC_IF_O_BIAS:
    case RC_IF_QK_NORM: return !lin && rc_weight_cond_holds(c, w);
    case RC_IF_DENSE: return !moe;
    case RC_IF_DENSE_GATED: return !moe && c->gated_mlp;
    case RC_IF_DENSE_MLP_BIAS: return !moe && c->mlp_bias;
    case RC_IF_DENSE_GATED_MLP_BIAS: return !moe && c->gated_mlp && c->mlp_bias;
    case RC_IF_MOE: return moe;
    case RC_IF_SHARED_EXPERT: return moe && c->shared_intermediate > 0;
    case RC_IF_MOE_BIAS: return moe && c->moe_bias;
    case RC_IF_SHARED_GATE: return moe && c->shared_intermediate > 0 && !c->shared_ungated;
    case RC_IF_ROUTER_BIAS: return moe && c->router_bias;
    default: return rc_weight_cond_holds(c, w);
    }
}

bool rc_weight_cond_holds(const rc_config *c, rc_weight_cond w)
{
    switch (w) {
    case RC_IF_DENSE:
    case RC_IF_DENSE_GATED:
    case RC_IF_DENSE_MLP_BIAS:
    case RC_IF_DENSE_GATED_MLP_BIAS:
    case RC_IF_MOE:
    case RC_IF_MOE_BIAS:
    case RC_IF_SHARED_EXPERT:
    case RC_IF_SHARED_GATE:
    case RC_IF_ROUTER_BIAS:
    case RC_IF_QKV:
    case RC_IF_ATTN:
    case RC_IF_LINEAR:
    case RC_IF_ATTN_GATE: /* in any layer */
        for (int64_t l = 0; l < c->n_layers; l++)
            if (rc_weight_cond_holds_layer(c, w, l))
                return true;
        return false;
    case RC_ALWAYS: return true;
    case RC_IF_NORM_BIAS: return c->norm_bias;
    case RC_IF_UNTIED: return !c->tie_embeddings;
    case RC_IF_QKV_BIAS: return c->qkv_bias && !c->mla;
    case RC_IF_MLA: return c->mla;
    case RC_IF_MLA_BIAS: return c->mla && c->qkv_bias;
    case RC_IF_MLA_QLORA: return c->mla && c->q_lora_rank > 0;
    case RC_IF_MLA_QLORA_BIAS: return c->mla && c->q_lora_rank > 0 && c->qkv_bias;
    case RC_IF_MLA_QPROJ: return c->mla && c->q_lora_rank <= 0;
    case RC_IF_O_BIAS: return c->o_bias;
    case RC_IF_MLP_BIAS: return c->mlp_bias;
    case RC_IF_GATED: return c->gated_mlp;
    case RC_IF_GATED_MLP_BIAS: return c->gated_mlp && c->mlp_bias;
    case RC_IF_LEARNED_POS: return c->pos == RC_POS_LEARNED;
    case RC_IF_EMBED_NORM: return c->embed_norm;
    case RC_IF_EMBED_NORM_BIAS: return c->embed_norm && c->norm_bias;
    case RC_IF_QK_NORM: return c->qk_norm != RC_QK_NORM_NONE;
    case RC_IF_SANDWICH_NORM: return c->sandwich_norm;
    case RC_IF_SINKS: return c->attn_sinks;
    }
    return false;
}

/* the weight lists as tables: name, shape, presence, where the field is */
typedef struct {
    const char *name;
    rc_dim rows, cols;
    rc_weight_cond present;
    size_t offset;
    rc_weight_kind kind;
} field_info;
#define FIELD_INFO_MODEL_(f, r, c, p, k) {#f, r, c, p, offsetof(rc_weights, f), RC_WK_##k},
#define FIELD_INFO_LAYER_(f, r, c, p, k) {#f, r, c, p, offsetof(rc_layer_weights, f), RC_WK_##k},
static const field_info k_model_fields[] = {RC_MODEL_WEIGHT_FIELDS(FIELD_INFO_MODEL_)};
static const field_info k_layer_fields[] = {RC_LAYER_WEIGHT_FIELDS(FIELD_INFO_LAYER_)};

/* l: the layer (-1: the model's own fields) */
static bool fields_numel(const rc_config *c, const field_info *f, int n, int64_t l, int64_t *out)
{
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        int64_t k;
        if (!(l < 0 ? rc_weight_cond_holds(c, f[i].present) : rc_weight_cond_holds_layer(c, f[i].present, l)))
            continue;
        if (!rc_mul_i64(rc_dim_value(c, f[i].rows), rc_dim_value(c, f[i].cols), &k) || !rc_add_i64(sum, k, &sum))
            return false;
    }
    *out = sum;
    return true;
}

rc_status rc_weights_numel(const rc_config *c, int64_t *n)
{
    int64_t top, layer, all;
    bool ok = fields_numel(c, k_model_fields, RC_N_MODEL_WEIGHTS, -1, &top);
    all = top;
    for (int64_t l = 0; ok && l < c->n_layers; l++)
        ok = fields_numel(c, k_layer_fields, RC_N_LAYER_WEIGHTS, l, &layer) && rc_add_i64(all, layer, &all);
    if (!ok)
        return rc_errorf(RC_ERR_FORMAT, "model sizes are too large (weight count overflows)");
    *n = all;
    return RC_OK;
}

bool rc_layer_cost(const rc_config *c, int64_t l, int64_t *weight_elems, double *flop_per_token)
{
    const double H = (double)c->hidden, q = (double)(c->n_heads * c->head_dim);
    const double qkv = (double)((c->n_heads + 2 * c->n_kv_heads) * c->head_dim);
    double f = H * qkv + q * H + (c->attn_out_gate ? H * q : 0.0);
    if (c->mla) /* the expanded form's projections: q (through q_lora), kv_a, kv_b, o */
        f = (c->q_lora_rank > 0 ? (H + q) * (double)c->q_lora_rank : H * q) +
            H * (double)(c->kv_lora_rank + c->qk_rope_dim) +
            (double)c->kv_lora_rank * (double)rc_dim_value(c, RC_DIM_KVB) + (double)rc_dim_value(c, RC_DIM_O) * H;
    if (rc_layer_is_linear(c, l)) /* Gated DeltaNet: in_proj_qkvz, in_proj_ba, out_proj */
        f = H * (double)(rc_dim_value(c, RC_DIM_LQKVZ) + rc_dim_value(c, RC_DIM_LBA)) +
            (double)rc_dim_value(c, RC_DIM_LV) * H;
    if (rc_layer_is_moe(c, l))
        f += (double)c->n_experts * H + (double)c->top_k * 3.0 * H * (double)c->moe_intermediate +
             (c->shared_intermediate > 0 ? 3.0 * H * (double)c->shared_intermediate + (c->shared_ungated ? 0.0 : H)
                                         : 0.0);
    else
        f += (c->gated_mlp ? 3.0 : 2.0) * H * (double)c->intermediate;
    *flop_per_token = 2.0 * f;
    return fields_numel(c, k_layer_fields, RC_N_LAYER_WEIGHTS, l, weight_elems);
}

static rc_wt *field_ptr(void *base, const field_info *f) { return (rc_wt *)((char *)base + f->offset); }

/* w for layer l, or for the model's own fields when l < 0 */
static bool cond_at(const rc_config *c, rc_weight_cond w, int64_t l)
{
    return l < 0 ? rc_weight_cond_holds(c, w) : rc_weight_cond_holds_layer(c, w, l);
}

static bool appends(rc_piece p) { return p == RC_PIECE_APPEND || p == RC_PIECE_APPEND_FIELD; }

/* the next entry of the table that is read for c appends to t's field */
static bool next_appends(const rc_config *c, const rc_tensor_spec *t, int64_t l)
{
    for (t++; t->name; t++)
        if (cond_at(c, t->when, l))
            return appends(t->piece);
    return false;
}

/* The dtype a fused field starting at entry t is copied in: the stored dtype
 * its pieces share (F64: fp32), else fp32 (every piece widened exactly); -1
 * when a piece is missing or not a float (the loader then reports it). */
static int fused_dtype(const rc_loader *ld, const rc_arch *a, const rc_tensor_spec *t, const char *stem, int64_t l)
{
    const rc_config *c = ld->cfg;
    int dt = -2;
    for (const rc_tensor_spec *u = t; u->name; u++) {
        if (!cond_at(c, u->when, l))
            continue;
        if (u != t && !appends(u->piece))
            break;
        char nb[256], rb[256];
        snprintf(nb, sizeof nb, "%s%s", stem, u->name);
        const rc_st_tensor *x = rc_st_find(ld->st, resolve(ld, nb, rb, sizeof rb));
        if (!x || !(x->dtype == RC_F32 || x->dtype == RC_BF16 || x->dtype == RC_F16 || x->dtype == RC_F64))
            return -1;
        const int d = x->dtype == RC_F64 ? RC_F32 : x->dtype;
        dt = dt == -2 || dt == d ? d : RC_F32;
    }
    return dt < 0 ? -1 : dt;
}

/* Read one table of tensors into `base` (an rc_weights or one rc_layer_weights). */
static rc_status load_table(rc_loader *ld, const rc_arch *a, const rc_tensor_spec *t, const field_info *fields,
                            int nfields, void *base, const char *stem, int64_t l)
{
    const rc_config *c = ld->cfg;
    char nb[256], rb[256];
    int64_t prev_end = -1; /* arena offset where the previous tensor ended */
    int fused_dt = -1;     /* the dtype of the fused field being read */
    rc_wt half1 = {NULL, RC_F32, false}; /* after a HALF0 entry: where its tensor's second half is */
    const char *half0_name = NULL;
    void *field_data = NULL; /* the arena copy of the field being read, from its first piece */
    int64_t field_rows = 0;  /* the rows its pieces have filled */
    for (; t->name; t++) {
        if (t->field < 0 || t->field >= nfields)
            return rc_errorf(RC_ERR_INTERNAL, "family %s: tensor table entry \"%s\" has no field", a->family,
                             t->name);
        if (!cond_at(c, t->when, l))
            continue;
        snprintf(nb, sizeof nb, "%s%s", stem, t->name);
        const char *name = resolve(ld, nb, rb, sizeof rb);
        int64_t rows = rc_dim_value(c, t->rows), cols = rc_dim_value(c, t->cols);
        int ndim = t->cols == RC_DIM_1 ? 1 : t->piece == RC_PIECE_MID1 ? 3 : 2;
        rc_wt *dst = field_ptr(base, &fields[t->field]);
        if (t->piece == RC_PIECE_HALF1) { /* the rest of the HALF0 entry's tensor, nothing read */
            if (!half0_name || strcmp(half0_name, t->name) != 0)
                return rc_errorf(RC_ERR_INTERNAL, "family %s: \"%s\" is a second half without its first",
                                 a->family, t->name);
            *dst = half1;
            half0_name = NULL;
            continue;
        }
        half0_name = NULL;
        rc_wt w;
        void *wdata;
        const int64_t start = ld->used;
        const bool append = appends(t->piece), fused = append || next_appends(c, t, l);
        if (fused && !append)
            fused_dt = fused_dtype(ld, a, t, stem, l);
        const bool halves = t->piece == RC_PIECE_HALF0;
        int64_t file_rows = rows;
        if (halves && !rc_mul_i64(rows, 2, &file_rows))
            return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\": expected size overflows", name);
        const int64_t shape[3] = {file_rows, 1, cols};
        int as_dt = fused ? fused_dt : -1;
        if (append && fused_dt < 0) { /* appended to a HALF1 piece: in that piece's storage dtype */
            const rc_st_tensor *x = rc_st_find(ld->st, name);
            if (x && (int)dst->dt != RC_F32 && x->dtype != (int)dst->dt)
                return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\" is %s where the rest of %s is %s", name,
                                 rc_dtype_name((rc_dtype)x->dtype), fields[t->field].name, rc_dtype_name(dst->dt));
            as_dt = (int)dst->dt;
        }
        RC_TRY(loader_get(ld, name, ndim, ndim == 3 ? shape : (int64_t[]){file_rows, cols}, t->fix || fused, as_dt,
                          append, &w, &wdata));
        if (append) {
            if ((!dst->p && !ld->dry) || start != prev_end)
                return rc_errorf(RC_ERR_INTERNAL, "tensor \"%s\" is not stored right after the rest of %s", name,
                                 fields[t->field].name);
            if (!rc_add_i64(field_rows, file_rows, &field_rows))
                return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\": size overflows", name);
        } else {
            *dst = w;
            field_data = wdata;
            field_rows = file_rows;
        }
        if (halves) { /* rows [rows, 2 rows) of the tensor: the next entry's field */
            half1 = w;
            if (w.p)
                half1.p = (const unsigned char *)w.p + rows * cols * rc_dtype_size(w.dt);
            half0_name = t->name;
        }
        prev_end = ld->used;
        if (t->fix && !ld->dry && t->piece == RC_PIECE_APPEND_FIELD)
            RC_TRY(t->fix(c, field_data, rc_dtype_size(w.dt), field_rows, cols));
        else if (t->fix && !ld->dry)
            RC_TRY(t->fix(c, wdata, rc_dtype_size(w.dt), file_rows, cols));
    }
    if (half0_name)
        return rc_errorf(RC_ERR_INTERNAL, "family %s: \"%s\" has no entry for its second half", a->family, half0_name);
    return RC_OK;
}

/* Every field the lists say is present was loaded (a family table that
 * forgets one fails here, not in the forward pass). */
static rc_status check_fields(const rc_config *c, const char *family, const field_info *f, int n, void *base,
                              const char *where, int64_t l)
{
    for (int i = 0; i < n; i++)
        if (cond_at(c, f[i].present, l) && !field_ptr(base, &f[i])->p)
            return rc_errorf(RC_ERR_INTERNAL, "family %s loads no tensor for weight %s%s", family, where,
                             f[i].name);
    return RC_OK;
}

/* The dtype every expert's pieces are copied in (one tensor per expert): the
 * stored dtype they share (F64: fp32), else fp32; -1 when one is missing or
 * not a float (the loader then reports it by name). */
static int experts_dtype(const rc_loader *ld, const rc_arch *a, const char *stem)
{
    const rc_expert_spec *x = a->experts;
    const char *parts[3] = {x->gate, x->up, x->down};
    int dt = -2;
    for (int64_t e = 0; e < ld->cfg->n_experts; e++)
        for (int p = 0; p < 3; p++) {
            char nb[256], eb[128], rb[256];
            snprintf(eb, sizeof eb, "%s%lld.", x->per_expert, (long long)e);
            snprintf(nb, sizeof nb, "%s%s%s", stem, eb, parts[p]);
            const rc_st_tensor *t = rc_st_find(ld->st, resolve(ld, nb, rb, sizeof rb));
            if (!t || !(t->dtype == RC_F32 || t->dtype == RC_BF16 || t->dtype == RC_F16 || t->dtype == RC_F64))
                return -1;
            const int d = t->dtype == RC_F64 ? RC_F32 : t->dtype;
            dt = dt == -2 || dt == d ? d : RC_F32;
        }
    return dt < 0 ? -1 : dt;
}

/* In place on n_mat matrices of rows x cols elements of es bytes: each
 * transposed (interleave: the transposed rows 0, 2, 4, ... first, then 1, 3,
 * 5, ...: gpt-oss's gate / up columns into gate rows, then up rows; rows
 * odd with interleave is an error of the caller). tmp: rows * cols * es bytes. */
static void transpose_mats(unsigned char *data, int64_t n_mat, int64_t rows, int64_t cols, int es, bool interleave,
                           unsigned char *tmp)
{
    const int64_t half = cols / 2;
    for (int64_t m = 0; m < n_mat; m++) {
        unsigned char *a = data + m * rows * cols * es;
        memcpy(tmp, a, (size_t)(rows * cols * es));
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                const int64_t r = interleave ? (j % 2) * half + j / 2 : j; /* the output row of column j */
                memcpy(a + (r * rows + i) * es, tmp + (i * cols + j) * es, (size_t)es);
            }
    }
}

/* gpt-oss's experts (rc_expert_spec.fused_transposed_interleaved): router
 * weight and bias, gate_up [E, H, 2 Im] and down [E, Im, H] copied into the
 * layout of w_exp_gu / w_exp_down, their biases de-interleaved likewise. */
static rc_status load_experts_interleaved(rc_loader *ld, const rc_arch *a, rc_layer_weights *L, const char *stem)
{
    const rc_config *c = ld->cfg;
    const rc_expert_spec *x = a->experts;
    const int64_t E = c->n_experts, H = c->hidden, Im = c->moe_intermediate;
    char nb[256], rb[256];
    void *wd;
#define EXP_NAME(suffix) (snprintf(nb, sizeof nb, "%s%s", stem, (suffix)), resolve(ld, nb, rb, sizeof rb))
    RC_TRY(loader_get(ld, EXP_NAME(x->router_fused), 2, (int64_t[]){E, H}, false, -1, false, &L->w_router, &wd));
    if (c->moe_bias)
        RC_TRY(loader_get(ld, EXP_NAME(x->router_bias), 1, (int64_t[]){E}, false, -1, false, &L->b_router, &wd));
    rc_status st = RC_OK;
    unsigned char *tmp = NULL;
    int64_t big = H * 2 * Im; /* one expert's gate_up (bounded by the config's checked limits) */
    if (!ld->dry && !(tmp = malloc((size_t)big * 4)))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_wt w;
    if ((st = loader_get(ld, EXP_NAME(x->fused_gate_up), 3, (int64_t[]){E, H, 2 * Im}, true, -1, false, &w, &wd)) ==
        RC_OK) {
        L->w_exp_gu = w;
        if (wd)
            transpose_mats(wd, E, H, 2 * Im, rc_dtype_size(w.dt), true, tmp);
    }
    if (st == RC_OK &&
        (st = loader_get(ld, EXP_NAME(x->fused_down), 3, (int64_t[]){E, Im, H}, true, -1, false, &w, &wd)) == RC_OK) {
        L->w_exp_down = w;
        if (wd)
            transpose_mats(wd, E, Im, H, rc_dtype_size(w.dt), false, tmp);
    }
    if (st == RC_OK && c->moe_bias &&
        (st = loader_get(ld, EXP_NAME(x->fused_gate_up_bias), 2, (int64_t[]){E, 2 * Im}, true, -1, false, &w, &wd)) ==
            RC_OK) {
        L->b_exp_gu = w;
        if (wd) /* each expert's [1, 2 Im] row: a transpose of a row vector with interleave */
            transpose_mats(wd, E, 1, 2 * Im, rc_dtype_size(w.dt), true, tmp);
    }
    if (st == RC_OK && c->moe_bias)
        st = loader_get(ld, EXP_NAME(x->fused_down_bias), 2, (int64_t[]){E, H}, false, -1, false, &L->b_exp_down, &wd);
#undef EXP_NAME
    free(tmp);
    return st;
}

/* A MoE layer's router and experts (rc_expert_spec): the fused 3-D tensors
 * used in place when the checkpoint holds them, else one tensor per expert,
 * copied one after the other into w_exp_gu (gate_e, up_e for e = 0, 1, ...:
 * the fused layout) and w_exp_down. */
static rc_status load_experts(rc_loader *ld, const rc_arch *a, rc_layer_weights *L, const char *stem)
{
    const rc_config *c = ld->cfg;
    const rc_expert_spec *x = a->experts;
    if (!x)
        return rc_errorf(RC_ERR_INTERNAL, "family %s has MoE layers but no expert names", a->family);
    const int64_t E = c->n_experts, H = c->hidden, Im = c->moe_intermediate;
    char nb[256], rb[256];
    void *wd;
    snprintf(nb, sizeof nb, "%s%s", stem, x->fused_gate_up);
    const bool fused = x->fused_gate_up && rc_st_find(ld->st, resolve(ld, nb, rb, sizeof rb));
    snprintf(nb, sizeof nb, "%s%s", stem, fused ? x->router_fused : x->router);
    RC_TRY(loader_get(ld, resolve(ld, nb, rb, sizeof rb), 2, (int64_t[]){E, H}, false, -1,
                      false, &L->w_router, &wd));
    if (x->fused_transposed_interleaved)
        return load_experts_interleaved(ld, a, L, stem);
    if (fused) {
        snprintf(nb, sizeof nb, "%s%s", stem, x->fused_gate_up);
        RC_TRY(loader_get(ld, resolve(ld, nb, rb, sizeof rb), 3, (int64_t[]){E, 2 * Im, H},
                          false, -1, false, &L->w_exp_gu, &wd));
        snprintf(nb, sizeof nb, "%s%s", stem, x->fused_down);
        RC_TRY(loader_get(ld, resolve(ld, nb, rb, sizeof rb), 3, (int64_t[]){E, H, Im},
                          false, -1, false, &L->w_exp_down, &wd));
        return RC_OK;
    }
    const int dt = experts_dtype(ld, a, stem);
    for (int pass = 0; pass < 2; pass++) /* gate_up, then down */
        for (int64_t e = 0; e < E; e++)
            for (int p = 0; p < (pass == 0 ? 2 : 1); p++) {
                char eb[128];
                snprintf(eb, sizeof eb, "%s%lld.", x->per_expert, (long long)e);
                snprintf(nb, sizeof nb, "%s%s%s", stem, eb, pass == 1 ? x->down : p == 0 ? x->gate : x->up);
                const bool first = e == 0 && p == 0;
                rc_wt w;
                RC_TRY(loader_get(ld, resolve(ld, nb, rb, sizeof rb), 2,
                                  pass == 0 ? (int64_t[]){Im, H} : (int64_t[]){H, Im}, true, dt, !first, &w, &wd));
                if (first)
                    *(pass == 0 ? &L->w_exp_gu : &L->w_exp_down) = w;
            }
    return RC_OK;
}

static rc_status load_weights(rc_loader *ld, const rc_arch *a, rc_weights *w)
{
    const rc_config *c = ld->cfg;
    RC_TRY(load_table(ld, a, a->model_tensors, k_model_fields, RC_N_MODEL_WEIGHTS, w, "", -1));
    if (c->tie_embeddings)
        w->lm_head = w->embed;
    if (!ld->dry)
        RC_TRY(check_fields(c, a->family, k_model_fields, RC_N_MODEL_WEIGHTS, w, "", -1));
    for (int64_t l = 0; l < c->n_layers; l++) {
        char stem[64];
        snprintf(stem, sizeof stem, "%s%lld.", a->layer_stem, (long long)l);
        RC_TRY(load_table(ld, a, a->layer_tensors, k_layer_fields, RC_N_LAYER_WEIGHTS, &w->layers[l], stem, l));
        if (rc_layer_is_moe(c, l))
            RC_TRY(load_experts(ld, a, &w->layers[l], stem));
        if (!ld->dry)
            RC_TRY(check_fields(c, a->family, k_layer_fields, RC_N_LAYER_WEIGHTS, &w->layers[l], stem, l));
    }
    return RC_OK;
}

/* One pass of rc_model_narrow over a table's fields: the new arena's layout
 * (new_arena NULL: sizes only; set_dt: a dry model's fields get their new
 * dtype) and, when filling, each arena field moved or converted into it. */
static bool narrow_table(const rc_model *m, const field_info *f, int n, void *base, int64_t l, rc_dtype dt,
                         bool set_dt, unsigned char *new_arena, int64_t *used, int64_t *n_narrow)
{
    const rc_config *c = &m->cfg;
    const bool layer = l >= 0;
    for (int i = 0; i < n; i++) {
        rc_wt *w = field_ptr(base, &f[i]);
        if (!cond_at(c, f[i].present, l) || w->mapped || (!layer && c->tie_embeddings &&
                                                                    f[i].offset == offsetof(rc_weights, lm_head)))
            continue; /* absent, used in place, or the tied head (the embedding's storage, moved with it) */
        int64_t numel, bytes;
        const bool narrow = layer && f[i].kind == RC_WK_MAT && w->dt != dt &&
                            !rc_layer_weight_keeps_f32(c, (int)(&f[i] - k_layer_fields));
        const rc_dtype to = narrow ? dt : w->dt;
        *n_narrow += narrow;
        if (!rc_mul_i64(rc_dim_value(c, f[i].rows), rc_dim_value(c, f[i].cols), &numel) ||
            !rc_mul_i64(numel, rc_dtype_size(to), &bytes))
            return false;
        const int64_t off = (*used + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
        if (off < *used || !rc_add_i64(off, bytes, used))
            return false;
        if (narrow && set_dt)
            w->dt = to; /* dry (inspect): the dtype the field will have */
        if (!new_arena || !w->p)
            continue;
        if (narrow) /* the values an engine in dt rounds to (forward.c place(): the same call) */
            rc_wt_convert(*w, 0, numel, dt, dt, new_arena + off);
        else
            memcpy(new_arena + off, w->p, (size_t)bytes);
        *w = (rc_wt){new_arena + off, to, false};
    }
    return true;
}

rc_status rc_model_narrow(rc_model *m, rc_dtype dt)
{
    if (dt != RC_BF16 && dt != RC_F16)
        return RC_OK;
    const rc_config *c = &m->cfg;
    const bool dry = m->arena == NULL; /* rc_model_load_headers */
    int64_t used = 0, n_narrow = 0;
    bool ok = narrow_table(m, k_model_fields, RC_N_MODEL_WEIGHTS, &m->w, -1, dt, dry, NULL, &used, &n_narrow);
    for (int64_t l = 0; ok && l < c->n_layers; l++)
        ok = narrow_table(m, k_layer_fields, RC_N_LAYER_WEIGHTS, &m->w.layers[l], l, dt, dry, NULL, &used,
                          &n_narrow);
    if (!ok)
        return rc_errorf(RC_ERR_INTERNAL, "weight arena size overflows");
    if (n_narrow == 0) /* every copy already in dt (a bf16 checkpoint in a bf16 run): the arena stays */
        return RC_OK;
    if (dry) {
        m->arena_bytes = used;
        return RC_OK;
    }
    unsigned char *arena;
    RC_TRY(rc_alloc_aligned((void **)&arena, used > 0 ? used : 1, 1, "model weights"));
    used = 0;
    n_narrow = 0;
    narrow_table(m, k_model_fields, RC_N_MODEL_WEIGHTS, &m->w, -1, dt, false, arena, &used, &n_narrow);
    for (int64_t l = 0; l < c->n_layers; l++)
        narrow_table(m, k_layer_fields, RC_N_LAYER_WEIGHTS, &m->w.layers[l], l, dt, false, arena, &used,
                     &n_narrow);
    if (c->tie_embeddings)
        m->w.lm_head = m->w.embed;
    free(m->arena);
    m->arena = arena;
    m->arena_bytes = used;
    return RC_OK;
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
    } else if (cfg->rope_type == RC_ROPE_LONGROPE) {
        /* _compute_longrope_parameters (short factors): 1.0 / (ext_factors * base ** (arange(0, dim, 2).float() / dim)),
         * ext_factors an fp32 tensor of short_factor */
        for (int64_t j = 0; j < dim / 2 && j < RC_MAX_ROPE_PAIRS; j++)
            inv[j] = 1.0f / ((float)cfg->rope_short_factor[j] * powf(base, (float)(2 * j) / (float)dim));
    } else if (cfg->rope_type == RC_ROPE_YARN) {
        /* _compute_yarn_parameters: the correction range in Python floats,
         * the ramp and the blend in fp32 tensors (scalars cast to fp32) */
        double lo, hi;
        rc_yarn_range(cfg, &lo, &hi);
        if (lo == hi)
            hi += 0.001; /* linear_ramp_factor: "Prevent singularity" */
        const float fmin = (float)lo, span = (float)(hi - lo), factor = (float)cfg->rope_factor;
        for (int64_t j = 0; j < dim / 2; j++) {
            float e = (float)(2 * j) / (float)dim;
            float pos_freq = powf(base, e);
            float extra = 1.0f / pos_freq, inter = 1.0f / (factor * pos_freq);
            float ramp = ((float)j - fmin) / span;
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            float ef = 1.0f - ramp; /* inv_freq_extrapolation_factor */
            inv[j] = inter * (1.0f - ef) + extra * ef;
        }
    }
}

void rc_yarn_range(const rc_config *cfg, double *low, double *high)
{
    const double dim = (double)cfg->rotary_dim, base = cfg->rope_theta, orig = (double)cfg->rope_orig_max_pos;
    /* find_correction_dim(num_rotations, dim, base, max_position_embeddings) */
    double lo = (dim * log(orig / (cfg->rope_beta_fast * 2 * M_PI))) / (2 * log(base));
    double hi = (dim * log(orig / (cfg->rope_beta_slow * 2 * M_PI))) / (2 * log(base));
    if (cfg->rope_truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    *low = lo > 0 ? lo : 0;
    *high = hi < dim - 1 ? hi : dim - 1;
}

/* Largest power of two <= n (n >= 1). */
static int64_t pow2_floor(int64_t n)
{
    int64_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

/* The ALiBi slopes of each family, computed as its code computes them:
 * BLOOM (modeling_bloom._get_alibi_slopes): fp32 base 2^(-8/n2) raised to
 *   1..n2 by torch.pow in fp32, extra heads: fp32 base 2^(-4/n2) to the odd
 *   powers 1, 3, ...;
 * Baichuan-13B (_get_interleave): the same values from Python floats,
 *   start * ratio**i, then torch.Tensor -> fp32;
 * MPT (build_mpt_alibi_tensor): n2 = the power of two >= heads,
 *   base = arange(1, n2 + 1).float() * (alibi_bias_max / n2) in fp32,
 *   slopes = 1 / 2**base in fp32, then slopes[1::2] ++ slopes[::2] cut to
 *   the heads when heads is not a power of two. */
void rc_alibi_slopes_compute(const rc_config *cfg, float *slopes, double *slopes64)
{
    const int64_t n = cfg->n_heads;
    if (cfg->alibi_slopes == RC_SLOPES_MPT) {
        int64_t n2 = 1;
        while (n2 < n)
            n2 *= 2;
        for (int64_t h = 0; h < n; h++) {
            /* head h takes index k of the n2 slopes: odd indices first */
            int64_t k = n2 == n ? h : (h < n2 / 2 ? 2 * h + 1 : 2 * (h - n2 / 2));
            float base = (float)(k + 1) * (float)(cfg->alibi_bias_max / (double)n2);
            if (slopes)
                slopes[h] = 1.0f / powf(2.0f, base);
            if (slopes64)
                slopes64[h] = 1.0 / pow(2.0, (double)(k + 1) * (cfg->alibi_bias_max / (double)n2));
        }
        return;
    }
    const int64_t n2 = pow2_floor(n);
    for (int64_t h = 0; h < n; h++) {
        /* head h < n2: base 2^(-8/n2) to the power h + 1; else base
         * 2^(-4/n2) to the power 2 (h - n2) + 1 */
        double e = h < n2 ? -8.0 / (double)n2 : -4.0 / (double)n2;
        int64_t k = h < n2 ? h + 1 : 2 * (h - n2) + 1;
        double base = pow(2.0, e);
        if (slopes) {
            if (cfg->alibi_slopes == RC_SLOPES_BLOOM) {
                slopes[h] = powf((float)base, (float)k);
            } else { /* Python floats: start * ratio ** i with start = ratio = base, i = k - 1 */
                slopes[h] = (float)(base * pow(base, (double)(k - 1)));
            }
        }
        if (slopes64)
            slopes64[h] = pow(2.0, e * (double)k);
    }
}

void rc_model_free(rc_model *m)
{
    if (!m)
        return;
    rc_st_close(m->st);
    free(m->arena);
    free(m->tables);
    free(m->w.layers);
    free(m->dir);
    free(m);
}

/* the stored dtype as the files name it: the family's embedding tensor's */
static void stored_dtype(const rc_safetensors *st, const rc_config *c, char *out, size_t n)
{
    const char *ename = NULL, *embed = NULL;
    for (const rc_tensor_spec *t = c->arch->model_tensors; t->name && !embed; t++)
        if (t->field == RC_MW_embed)
            embed = t->name;
    for (int64_t i = 0; i < st->ntensors && !ename && embed; i++)
        if (strstr(st->tensors[i].name, embed))
            ename = st->tensors[i].dtype_name;
    snprintf(out, n, "%s", ename ? ename : "?");
}

/* "org/name": one '/', both parts made of the characters the Hub allows in
 * names (letters, digits, '-', '_', '.'), not "." or ".." */
static bool looks_like_hub_id(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/'))
        return false;
    for (const char *p = s; *p; p++)
        if (p != slash && !((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                            *p == '-' || *p == '_' || *p == '.'))
            return false;
    const size_t a = (size_t)(slash - s);
    return !((a == 1 && s[0] == '.') || (a == 2 && s[0] == '.' && s[1] == '.') || strcmp(slash + 1, ".") == 0 ||
             strcmp(slash + 1, "..") == 0);
}

rc_status rc_model_dir_check(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return rc_errorf(RC_ERR_USAGE,
                             "%s: not a folder: --model takes a Hugging Face model folder (config.json, "
                             "*.safetensors, tokenizer.json)",
                             dir);
        return RC_OK;
    }
    if (errno == ENOENT && looks_like_hub_id(dir))
        return rc_errorf(RC_ERR_IO,
                         "%s: no such folder; this looks like a Hugging Face Hub id, and ratiocheck reads local "
                         "folders only: download it first (`hf download %s --local-dir DIR`, or "
                         "`huggingface-cli download` with older huggingface_hub) and pass --model DIR",
                         dir, dir);
    return rc_errorf(RC_ERR_IO, "%s: %s", dir, strerror(errno));
}

/* the quantized tensors of the text model's layers [0, n_layers) and of no layer: a name is read after the
 * config's first non-empty prefix it begins with (rc_config_prefixes: "model." of a family, a wrapper's
 * "model.language_model." ...); in a wrapper folder a tensor under none of them (vision tower, projector,
 * MTP layers) is not the text model's and not counted, as n_params counts */
static void quant_sizes(const rc_safetensors *st, const rc_config *cfg, int64_t n_layers, rc_quant_sizes *q)
{
    *q = (rc_quant_sizes){0};
    for (int64_t i = 0; i < st->ntensors; i++) {
        const rc_st_tensor *t = &st->tensors[i];
        if (t->quant == RC_ST_Q_NONE)
            continue;
        const char *rest = NULL;
        for (const char *const *p = rc_config_prefixes(cfg); *p && !rest; p++)
            if ((*p)[0] && strncmp(t->name, *p, strlen(*p)) == 0)
                rest = t->name + strlen(*p);
        if (!rest) {
            if (cfg->wrapper && strcmp(t->name, "lm_head.weight") != 0)
                continue;
            rest = t->name;
        }
        long long l;
        if ((sscanf(rest, "layers.%lld.", &l) == 1 || sscanf(t->name, "model.layers.%lld.", &l) == 1) &&
            l >= n_layers)
            continue;
        int64_t n;
        rc_numel(t->shape, t->ndim, &n); /* each fits its file */
        q->tensors++;
        q->deq_bytes += 2 * (uint64_t)n;
        if (t->quant == RC_ST_Q_FP8_BLOCK) {
            const uint64_t ns = (uint64_t)t->qdim[0] * (uint64_t)((t->qdim[1] + t->qblock[0] - 1) / t->qblock[0]) *
                                (uint64_t)((t->qdim[2] + t->qblock[1] - 1) / t->qblock[1]);
            q->code_bytes += (uint64_t)n;
            q->scale_bytes += ns * (t->qscale_dtype == RC_F32 ? 4u : 2u);
            q->block[0] = t->qblock[0];
            q->block[1] = t->qblock[1];
        } else { /* MXFP4: half a byte a value, a byte per 32 */
            q->code_bytes += (uint64_t)n / 2;
            q->scale_bytes += (uint64_t)n / 32;
        }
    }
}

static rc_status model_load(const char *dir, bool dry, int64_t n_layers, rc_model **out)
{
    *out = NULL;
    RC_TRY(rc_model_dir_check(dir));
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
    m->cfg.n_layers_model = m->cfg.n_layers;
    if (n_layers < 0 || n_layers > m->cfg.n_layers) {
        s = rc_errorf(RC_ERR_USAGE, "--layers %lld: %s/config.json has %lld decoder layers", (long long)n_layers,
                      dir, (long long)m->cfg.n_layers);
        goto fail;
    }
    if (n_layers > 0)
        m->cfg.n_layers = n_layers;
    /* the allocation limit on the weights this load keeps (fp32: the widest
     * the engine holds them), before a weight file is opened */
    int64_t n_keep;
    if (rc_weights_numel(&m->cfg, &n_keep) != RC_OK || n_keep > RC_MAX_ALLOC / (int64_t)sizeof(float)) {
        rc_clear_error();
        s = rc_errorf(RC_ERR_FORMAT, "%s/config.json: model sizes are too large (the weights of %lld layers would "
                      "exceed %lld bytes as fp32%s)", dir, (long long)m->cfg.n_layers, (long long)RC_MAX_ALLOC,
                      n_layers > 0 ? "" : "; --layers N loads the first N layers only");
        goto fail;
    }
    s = rc_st_open_dir(dir, &st);
    if (s != RC_OK)
        goto fail;
    const rc_config *c = &m->cfg;
    int64_t nw;
    s = rc_weights_numel(c, &nw);
    if (s != RC_OK) {
        s = rc_error_prefix(s, "%s/config.json", dir);
        goto fail;
    }
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
    if (m->cfg.wrapper) { /* the text model's tensors: under one of its non-empty prefixes, or the head */
        m->n_params = 0;
        for (int64_t i = 0; i < st->ntensors; i++) {
            const rc_st_tensor *t = &st->tensors[i];
            bool text = strcmp(t->name, "lm_head.weight") == 0;
            for (const char *const *p = m->cfg.wrapper->prefixes; *p && !text; p++)
                text = (*p)[0] && strncmp(t->name, *p, strlen(*p)) == 0;
            int64_t n;
            rc_numel(t->shape, t->ndim, &n);
            const bool fl = t->dtype == RC_F32 || t->dtype == RC_F16 || t->dtype == RC_BF16 || t->dtype == RC_F64;
            if (text) {
                m->n_params += fl ? n : 0;
                continue;
            }
            if (m->n_ignored_tensors++ == 0)
                snprintf(m->ignored_first, sizeof m->ignored_first, "%s", t->name);
            m->n_ignored_params += fl ? n : 0;
        }
    }
    const int64_t n_inv = c->rotary_dim / 2 + 1;
    const int64_t n_slopes = c->pos == RC_POS_ALIBI ? c->n_heads : 0;
    s = rc_calloc((void **)&m->w.layers, c->n_layers, sizeof *m->w.layers, "layer table");
    if (s != RC_OK)
        goto fail;
    /* first headers only: every tensor checked, the arena's size counted
     * (at most the bytes of the tensors it copies, plus alignment) */
    rc_loader ld = {.st = st, .cfg = c, .arena = NULL, .used = 0, .cap = INT64_MAX, .dry = true};
    s = load_weights(&ld, c->arch, &m->w);
    if (s != RC_OK) {
        rc_error_prefix(s, "%s", dir);
        goto fail;
    }
    m->arena_bytes = ld.used;
    m->mapped_bytes = ld.mapped;
    stored_dtype(st, c, m->stored_dtype, sizeof m->stored_dtype);
    memcpy(m->stored, st->stored, sizeof m->stored);
    m->nstored = st->nstored;
    memcpy(m->quant_method, st->quant_method, sizeof m->quant_method);
    quant_sizes(st, c, c->n_layers, &m->qsizes);
    if (dry) {
        /* the storage dtypes stay (inspect's plan of an engine's copies), no data */
        rc_st_close(st);
        st = NULL;
        goto done;
    }
    s = rc_alloc_aligned((void **)&m->arena, m->arena_bytes > 0 ? m->arena_bytes : 1, 1, "model weights");
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&m->tables, 2 * n_inv + n_slopes, sizeof(float), "model tables");
    if (s != RC_OK)
        goto fail;
    memset(m->w.layers, 0, (size_t)c->n_layers * sizeof *m->w.layers);
    rc_layer_weights *layers = m->w.layers;
    m->w = (rc_weights){.layers = layers};
    ld = (rc_loader){.st = st, .cfg = c, .arena = m->arena, .used = 0, .cap = m->arena_bytes, .dry = false};
    s = load_weights(&ld, c->arch, &m->w);
    if (s != RC_OK) {
        rc_error_prefix(s, "%s", dir);
        goto fail;
    }
    m->st = st;
    m->w.inv_freq = m->tables;
    rc_rope_inv_freq(c, m->w.inv_freq);
    if (c->rope_theta_local > 0) { /* Gemma 3's, OLMo3's sliding layers: default RoPE of the local base */
        rc_config lc = *c;
        rc_config_local_rope(&lc);
        m->w.inv_freq_local = m->tables + n_inv;
        rc_rope_inv_freq(&lc, m->w.inv_freq_local);
    }
    if (n_slopes > 0) {
        m->w.alibi_slopes = m->tables + 2 * n_inv;
        rc_alibi_slopes_compute(c, m->w.alibi_slopes, NULL);
    }
done:
    *out = m;
    return RC_OK;
fail:
    if (m->st != st)
        rc_st_close(st);
    rc_model_free(m);
    return s;
}

rc_status rc_model_load(const char *dir, rc_model **out) { return model_load(dir, false, 0, out); }

rc_status rc_model_load_headers(const char *dir, rc_model **out) { return model_load(dir, true, 0, out); }

rc_status rc_model_load_layers(const char *dir, int64_t n_layers, bool dry, rc_model **out)
{
    return model_load(dir, dry, n_layers, out);
}
