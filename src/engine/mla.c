/* Multi-head latent attention: the expanded and absorbed forms (mla.h,
 * docs/mla.md). */
#include "mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void rc_mla_attn_shape(const rc_config *c, bool absorbed, int64_t *nkv, int64_t *d)
{
    if (c->mla && absorbed) {
        *nkv = 1;
        *d = c->qk_rope_dim + c->kv_lora_rank;
    } else {
        *nkv = c->n_kv_heads;
        *d = c->head_dim;
    }
}

/* scratch regions, in floats of one allocation (offsets multiples of u, so
 * that one gather reads any of them) */
enum { R_QA, R_QAN, R_Q, R_KVA, R_C, R_CN, R_KV, R_QN, R_QL, R_ATT, R_OL, R_OV, R_OUT, R_ZERO, R_COUNT };

struct rc_mla {
    bool absorbed;
    int64_t u, cr, nkv, d;
    int64_t off[R_COUNT + 1];
    float *buf;      /* backend memory */
    int64_t *idx;    /* host: gather indices */
    int64_t idx_n;
    float *uk_t;     /* absorbed: [n_layers][nh][kv_lora][nope] fp32 (backend memory), else NULL */
};

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t unit_of(const rc_config *c)
{
    int64_t u = gcd64(gcd64(c->qk_rope_dim, c->qk_nope_dim), gcd64(c->v_head_dim, c->kv_lora_rank));
    return u > 0 ? u : 1;
}

/* region sizes (floats) for cr rows; false on overflow */
static bool layout(const rc_config *c, bool absorbed, int64_t cr, int64_t u, int64_t *off, int64_t *idx_n)
{
    const int64_t nh = c->n_heads, R = c->qk_rope_dim, N = c->qk_nope_dim, V = c->v_head_dim,
                  KVL = c->kv_lora_rank, QL = c->q_lora_rank > 0 ? c->q_lora_rank : 0;
    int64_t nkv, d;
    rc_mla_attn_shape(c, absorbed, &nkv, &d);
    const int64_t w[R_COUNT] = {
        [R_QA] = QL,           [R_QAN] = QL,
        [R_Q] = nh * (R + N),  [R_KVA] = KVL + R,
        [R_C] = KVL,           [R_CN] = KVL,
        [R_KV] = absorbed ? 0 : nh * (N + V),
        [R_QN] = absorbed ? nh * N : 0,
        [R_QL] = absorbed ? nh * KVL : 0,
        [R_ATT] = nh * d,
        [R_OL] = absorbed ? nh * KVL : 0,
        [R_OV] = absorbed ? nh * V : 0,
        [R_OUT] = nh * V,      [R_ZERO] = 0,
    };
    int64_t o = 0, t;
    for (int i = 0; i < R_COUNT; i++) {
        off[i] = o;
        if (i == R_ZERO)
            t = u;
        else if (!rc_mul_i64(cr, w[i], &t))
            return false;
        t = (t + u - 1) / u * u; /* a multiple of u (every width is) */
        if (!rc_add_i64(o, t, &o))
            return false;
    }
    off[R_COUNT] = o;
    return rc_numel((int64_t[]){cr, (nh + 2 * nkv) * d / u}, 2, idx_n);
}

bool rc_mla_scratch_size(const rc_config *c, bool absorbed, int64_t chunk_rows, int64_t *floats, int64_t *host_bytes)
{
    *floats = *host_bytes = 0;
    if (!c->mla)
        return true;
    int64_t off[R_COUNT + 1], idx_n, uk = 0;
    if (!layout(c, absorbed, chunk_rows, unit_of(c), off, &idx_n) || !rc_mul_i64(idx_n, 8, host_bytes))
        return false;
    if (absorbed && !rc_numel((int64_t[]){c->n_layers, c->n_heads, c->kv_lora_rank, c->qk_nope_dim}, 4, &uk))
        return false;
    return rc_add_i64(off[R_COUNT], uk, floats);
}

void rc_mla_free(rc_backend *be, rc_mla *x)
{
    if (!x)
        return;
    if (x->buf)
        be->ops->free(be, x->buf);
    if (x->uk_t)
        be->ops->free(be, x->uk_t);
    free(x->idx);
    free(x);
}

rc_status rc_mla_create(rc_backend *be, const rc_model *m, bool absorbed, rc_dtype dt, int64_t chunk_rows,
                        rc_mla **out)
{
    const rc_config *c = &m->cfg;
    *out = NULL;
    if (!c->mla)
        return RC_OK;
    rc_mla *x = calloc(1, sizeof *x);
    if (!x)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    x->absorbed = absorbed;
    x->u = unit_of(c);
    x->cr = chunk_rows;
    rc_mla_attn_shape(c, absorbed, &x->nkv, &x->d);
    rc_status s = RC_OK;
    if (!layout(c, absorbed, chunk_rows, x->u, x->off, &x->idx_n))
        s = rc_errorf(RC_ERR_NOMEM, "latent attention scratch size overflows");
    if (s == RC_OK)
        s = be->ops->alloc(be, x->off[R_COUNT], &x->buf);
    if (s == RC_OK)
        s = be->ops->zero(be, x->buf + x->off[R_ZERO], x->u);
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&x->idx, x->idx_n, sizeof *x->idx, "latent attention indices");
    if (s == RC_OK && absorbed) {
        /* W_UK^T of each layer and head: element [l][h][j][p] = kv_b_proj[h * (nope + v) + p][j], rounded to dt */
        const int64_t nh = c->n_heads, N = c->qk_nope_dim, V = c->v_head_dim, KVL = c->kv_lora_rank;
        const int64_t per = nh * KVL * N;
        float *tmp = NULL;
        s = be->ops->alloc(be, c->n_layers * per, &x->uk_t);
        if (s == RC_OK)
            s = rc_alloc_aligned((void **)&tmp, per, sizeof *tmp, "latent attention W_UK");
        for (int64_t l = 0; s == RC_OK && l < c->n_layers; l++) {
            const rc_wt kvb = m->w.layers[l].w_mkvb;
            if (!kvb.p) {
                s = rc_errorf(RC_ERR_INTERNAL, "latent attention: layer %lld has no kv_b_proj", (long long)l);
                break;
            }
            for (int64_t h = 0; h < nh; h++)
                for (int64_t p = 0; p < N; p++)
                    for (int64_t j = 0; j < KVL; j++)
                        tmp[(h * KVL + j) * N + p] = rc_round_to(rc_wt_at(kvb, (h * (N + V) + p) * KVL + j), dt);
            if (be->ops->host_memory)
                memcpy(x->uk_t + l * per, tmp, (size_t)per * sizeof *tmp);
            else
                s = be->ops->upload(be, tmp, per, dt, x->uk_t + l * per);
        }
        free(tmp);
    }
    if (s != RC_OK) {
        rc_mla_free(be, x);
        return s;
    }
    *out = x;
    return RC_OK;
}

float *rc_mla_att_buf(rc_mla *x) { return x->buf + x->off[R_ATT]; }

/* append the units of [src, src + width) (floats from buf) to idx */
static int64_t put(int64_t *idx, int64_t k, int64_t src, int64_t width, int64_t u)
{
    for (int64_t w = 0; w < width; w += u)
        idx[k++] = (src + w) / u;
    return k;
}

static int64_t put_zero(const rc_mla *x, int64_t *idx, int64_t k, int64_t width)
{
    for (int64_t w = 0; w < width; w += x->u)
        idx[k++] = x->off[R_ZERO] / x->u;
    return k;
}

static rc_status gather(rc_backend *be, rc_mla *x, int64_t k, float *dst)
{
    if (k > x->idx_n)
        return rc_errorf(RC_ERR_INTERNAL, "latent attention: %lld gather units exceed %lld", (long long)k,
                         (long long)x->idx_n);
    return be->ops->gather_rows(be, x->buf, x->u, x->idx, k, dst);
}

/* the rows of weight W from row r0 on ([.., cols]) */
static rc_wt wt_rows(rc_wt W, int64_t r0, int64_t cols)
{
    W.p = (const unsigned char *)W.p + r0 * cols * rc_dtype_size(W.dt);
    return W;
}

static rc_dtype gin(rc_dtype x_dt, rc_dtype w_dt) { return x_dt == w_dt ? x_dt : RC_F32; }

rc_status rc_mla_qkv(rc_backend *be, const rc_config *c, rc_mla *x, const rc_layer_weights *L, int64_t l,
                     const float *a_in, int64_t n, const rc_mla_rounding *r, float *qkv)
{
    const rc_backend_ops *op = be->ops;
    const int64_t H = c->hidden, nh = c->n_heads, R = c->qk_rope_dim, N = c->qk_nope_dim, V = c->v_head_dim,
                  KVL = c->kv_lora_rank, QL = c->q_lora_rank, D = R + N, u = x->u;
    const int64_t *o = x->off;
    float *b = x->buf;
    if (n > x->cr)
        return rc_errorf(RC_ERR_INTERNAL, "latent attention: %lld rows exceed %lld", (long long)n, (long long)x->cr);
    /* q: q_b_proj(q_a_layernorm(q_a_proj(x))) or q_proj(x); each head [rope, nope] */
    if (QL > 0) {
        RC_TRY(op->matmul(be, a_in, n, H, L->w_mqa, QL, rc_wt_vec(L->b_mqa), r->in_dt, r->linear, b + o[R_QA]));
        RC_TRY(op->norm(be, RC_NORM_RMS, b + o[R_QA], n, QL, rc_wt_vec(L->mq_ln_w), NULL, c->mla_norm_eps,
                        r->norm_mid, r->norm, b + o[R_QAN]));
        RC_TRY(op->matmul(be, b + o[R_QAN], n, QL, L->w_mq, nh * D, NULL, gin(r->norm, r->wd), r->linear,
                          b + o[R_Q]));
    } else {
        RC_TRY(op->matmul(be, a_in, n, H, L->w_mq, nh * D, NULL, r->in_dt, r->linear, b + o[R_Q]));
    }
    /* [latent, k_rope] = kv_a_proj_with_mqa(x); latent = kv_a_layernorm(latent) */
    RC_TRY(op->matmul(be, a_in, n, H, L->w_mkva, KVL + R, rc_wt_vec(L->b_mkva), r->in_dt, r->linear, b + o[R_KVA]));
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k = put(x->idx, k, o[R_KVA] + i * (KVL + R), KVL, u);
    RC_TRY(gather(be, x, k, b + o[R_C]));
    RC_TRY(op->norm(be, RC_NORM_RMS, b + o[R_C], n, KVL, rc_wt_vec(L->mkv_ln_w), NULL, c->mla_norm_eps, r->norm_mid,
                    r->norm, b + o[R_CN]));
    const rc_dtype in_cn = gin(r->norm, r->wd);
    k = 0;
    if (!x->absorbed) {
        /* [k_nope, v] of every head = kv_b_proj(latent) */
        RC_TRY(op->matmul(be, b + o[R_CN], n, KVL, L->w_mkvb, nh * (N + V), NULL, in_cn, r->linear, b + o[R_KV]));
        for (int64_t i = 0; i < n; i++) { /* Q heads, K heads [k_rope, k_nope], V heads [v, 0] */
            const int64_t q0 = o[R_Q] + i * nh * D, kv0 = o[R_KV] + i * nh * (N + V);
            k = put(x->idx, k, q0, nh * D, u);
            for (int64_t h = 0; h < nh; h++) {
                k = put(x->idx, k, o[R_KVA] + i * (KVL + R) + KVL, R, u);
                k = put(x->idx, k, kv0 + h * (N + V), N, u);
            }
            for (int64_t h = 0; h < nh; h++) {
                k = put(x->idx, k, kv0 + h * (N + V) + N, V, u);
                k = put_zero(x, x->idx, k, D - V);
            }
        }
        return gather(be, x, k, qkv);
    }
    /* absorbed: q_nope of head h gathered into [h][n][nope], then R(q_nope . W_UK) per head */
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < n; i++)
            k = put(x->idx, k, o[R_Q] + i * nh * D + h * D + R, N, u);
    RC_TRY(gather(be, x, k, b + o[R_QN]));
    const int64_t per = nh * KVL * N;
    for (int64_t h = 0; h < nh; h++)
        RC_TRY(op->matmul(be, b + o[R_QN] + h * n * N, n, N, rc_wt_f32(x->uk_t + l * per + h * KVL * N), KVL, NULL,
                          gin(r->linear, r->wd), r->linear, b + o[R_QL] + h * n * KVL));
    k = 0;
    for (int64_t i = 0; i < n; i++) { /* Q heads [q_rope, q_nope W_UK], K [k_rope, latent], V [0, latent] */
        for (int64_t h = 0; h < nh; h++) {
            k = put(x->idx, k, o[R_Q] + i * nh * D + h * D, R, u);
            k = put(x->idx, k, o[R_QL] + (h * n + i) * KVL, KVL, u);
        }
        k = put(x->idx, k, o[R_KVA] + i * (KVL + R) + KVL, R, u);
        k = put(x->idx, k, o[R_CN] + i * KVL, KVL, u);
        k = put_zero(x, x->idx, k, R);
        k = put(x->idx, k, o[R_CN] + i * KVL, KVL, u);
    }
    return gather(be, x, k, qkv);
}

rc_status rc_mla_out(rc_backend *be, const rc_config *c, rc_mla *x, const rc_layer_weights *L, int64_t n,
                     const rc_mla_rounding *r, rc_dtype att_dt, const float **out)
{
    const int64_t nh = c->n_heads, R = c->qk_rope_dim, N = c->qk_nope_dim, V = c->v_head_dim,
                  KVL = c->kv_lora_rank, u = x->u, d = x->d;
    const int64_t *o = x->off;
    float *b = x->buf;
    int64_t k = 0;
    if (!x->absorbed) { /* each head's first v_head_dim values */
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < nh; h++)
                k = put(x->idx, k, o[R_ATT] + i * nh * d + h * d, V, u);
        RC_TRY(gather(be, x, k, b + o[R_OUT]));
        *out = b + o[R_OUT];
        return RC_OK;
    }
    /* the latent output of head h into [h][n][kv_lora], R(o . W_UV^T) per head, back to [n][nh * v] */
    for (int64_t h = 0; h < nh; h++)
        for (int64_t i = 0; i < n; i++)
            k = put(x->idx, k, o[R_ATT] + i * nh * d + h * d + R, KVL, u);
    RC_TRY(gather(be, x, k, b + o[R_OL]));
    for (int64_t h = 0; h < nh; h++)
        RC_TRY(be->ops->matmul(be, b + o[R_OL] + h * n * KVL, n, KVL, wt_rows(L->w_mkvb, h * (N + V) + N, KVL), V,
                               NULL, gin(att_dt, r->wd), r->linear, b + o[R_OV] + h * n * V));
    k = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < nh; h++)
            k = put(x->idx, k, o[R_OV] + (h * n + i) * V, V, u);
    RC_TRY(gather(be, x, k, b + o[R_OUT]));
    *out = b + o[R_OUT];
    return RC_OK;
}

/* RMSNorm of n values of x into y, in double (eps as given) */
static void rms64(const double *x, int64_t n, rc_wt w, double eps, double *y)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double rs = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (double)rc_wt_at(w, i) * (x[i] * rs);
}

rc_status rc_mla_qkv64(const rc_config *c, const rc_layer_weights *L, const double *h, int64_t n, rc_mla_mm64 mm,
                       double *qkv)
{
    const int64_t H = c->hidden, nh = c->n_heads, R = c->qk_rope_dim, N = c->qk_nope_dim, V = c->v_head_dim,
                  KVL = c->kv_lora_rank, QL = c->q_lora_rank, D = R + N;
    double *qa = NULL, *q = NULL, *kva = NULL, *cn = NULL, *kv = NULL;
    rc_status s = RC_OK;
    if ((s = rc_calloc((void **)&q, n * nh * D, sizeof *q, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&kva, n * (KVL + R), sizeof *kva, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&cn, n * KVL, sizeof *cn, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&kv, n * nh * (N + V), sizeof *kv, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&qa, n * (QL > 0 ? QL : 1), sizeof *qa, "fp64 reference")) != RC_OK)
        goto done;
    if (QL > 0) {
        if ((s = mm(h, n, H, L->w_mqa, QL, L->b_mqa, qa)) != RC_OK)
            goto done;
        for (int64_t i = 0; i < n; i++)
            rms64(qa + i * QL, QL, L->mq_ln_w, c->mla_norm_eps, qa + i * QL);
        if ((s = mm(qa, n, QL, L->w_mq, nh * D, (rc_wt){0}, q)) != RC_OK)
            goto done;
    } else if ((s = mm(h, n, H, L->w_mq, nh * D, (rc_wt){0}, q)) != RC_OK) {
        goto done;
    }
    if ((s = mm(h, n, H, L->w_mkva, KVL + R, L->b_mkva, kva)) != RC_OK)
        goto done;
    for (int64_t i = 0; i < n; i++)
        rms64(kva + i * (KVL + R), KVL, L->mkv_ln_w, c->mla_norm_eps, cn + i * KVL);
    if ((s = mm(cn, n, KVL, L->w_mkvb, nh * (N + V), (rc_wt){0}, kv)) != RC_OK)
        goto done;
    for (int64_t i = 0; i < n; i++) {
        double *row = qkv + i * 3 * nh * D;
        memcpy(row, q + i * nh * D, (size_t)(nh * D) * sizeof *row);
        for (int64_t hd = 0; hd < nh; hd++) {
            double *kh = row + (nh + hd) * D, *vh = row + (2 * nh + hd) * D;
            const double *src = kv + (i * nh + hd) * (N + V);
            memcpy(kh, kva + i * (KVL + R) + KVL, (size_t)R * sizeof *kh);
            memcpy(kh + R, src, (size_t)N * sizeof *kh);
            memcpy(vh, src + N, (size_t)V * sizeof *vh);
            for (int64_t t = V; t < D; t++)
                vh[t] = 0.0;
        }
    }
done:
    free(qa);
    free(q);
    free(kva);
    free(cn);
    free(kv);
    return s;
}

void rc_mla_out64(const rc_config *c, const double *att, int64_t n, double *out)
{
    const int64_t nh = c->n_heads, D = c->head_dim, V = c->v_head_dim;
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < nh; h++)
            memcpy(out + (i * nh + h) * V, att + (i * nh + h) * D, (size_t)V * sizeof *out);
}
