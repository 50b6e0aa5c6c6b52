/* The mixture-of-experts MLP (moe.h) and the CPU backend's MoE ops. */
#include "moe.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- CPU ops (backend_cpu.c's table points here) ---------------------------- */

rc_status rc_cpu_zero(rc_backend *be, float *x, int64_t n)
{
    (void)be;
    if (n > 0)
        memset(x, 0, (size_t)n * sizeof *x);
    return RC_OK;
}

rc_status rc_cpu_moe_route(rc_backend *be, const float *logits, int64_t M, int64_t E, int64_t top_k, int renorm,
                           rc_dtype w_dt, float *sel, float *w)
{
    (void)be;
    if (E < 1 || top_k < 1 || top_k > E)
        return rc_errorf(RC_ERR_INTERNAL, "moe_route: top %lld of %lld experts", (long long)top_k, (long long)E);
    float *p;
    RC_TRY(rc_alloc_aligned((void **)&p, 2 * E, sizeof *p, "MoE routing scratch")); /* rco_moe_route_row's 2 E */
    for (int64_t r = 0; r < M; r++)
        rco_moe_route_row(logits + r * E, E, top_k, renorm, w_dt, p, sel + r * top_k, w + r * top_k);
    free(p);
    return RC_OK;
}

rc_status rc_cpu_bias_add(rc_backend *be, float *y, int64_t M, int64_t N, const float *bias, rc_dtype out_dt)
{
    (void)be;
#pragma omp parallel for schedule(static) if (M * N > 65536)
    for (int64_t r = 0; r < M; r++)
        for (int64_t c = 0; c < N; c++)
            y[r * N + c] = rc_round_to(y[r * N + c] + bias[c], out_dt);
    return RC_OK;
}

rc_status rc_cpu_swiglu_clamp(rc_backend *be, float *gate, const float *up, int64_t n, float alpha, float limit,
                              rc_dtype dt)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        gate[i] = rco_swiglu_clamp1(gate[i], up[i], alpha, limit, dt);
    return RC_OK;
}

rc_status rc_moe_grouped_check(const rco_grouped_router *g)
{
    if (!rco_grouped_router_ok(g))
        return rc_errorf(RC_ERR_INTERNAL, "moe_route_grouped: top %lld of %lld experts in %lld groups, best %lld",
                         (long long)g->top_k, (long long)g->E, (long long)g->n_group, (long long)g->topk_group);
    return RC_OK;
}

rc_status rc_cpu_moe_route_grouped(rc_backend *be, const float *logits, const float *bias, int64_t M,
                                   const rco_grouped_router *g, float *sel, float *w)
{
    (void)be;
    RC_TRY(rc_moe_grouped_check(g));
    float *p;
    RC_TRY(rc_alloc_aligned((void **)&p, 2 * (g->E + g->n_group), sizeof *p, "MoE routing scratch"));
    for (int64_t r = 0; r < M; r++)
        rco_moe_route_grouped_row(logits + r * g->E, bias, g, p, sel + r * g->top_k, w + r * g->top_k);
    free(p);
    return RC_OK;
}

rc_status rc_cpu_moe_accumulate(rc_backend *be, const float *y, int64_t n, int64_t H, const int64_t *rows,
                                const float *w, const int64_t *widx, bool sigmoid, rc_dtype dt, float *out)
{
    (void)be;
#pragma omp parallel for schedule(static) if (n * H > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float s = sigmoid ? rco_moe_sigmoid(w[widx[i]], dt) : w[widx[i]];
        float *o = out + rows[i] * H;
        const float *yi = y + i * H;
        for (int64_t j = 0; j < H; j++)
            o[j] = rco_moe_acc(o[j], yi[j], s, dt);
    }
    return RC_OK;
}

/* ---- the layer ------------------------------------------------------------------ */

struct rc_moe_scratch {
    int64_t max_rows;
    /* backend memory */
    float *logits; /* [rows, E] the router's output */
    float *sel, *w; /* [rows, k] */
    float *xin;    /* [rows, H] one expert's input rows */
    float *g, *u;  /* [rows, max(Im, Is)] gate and up outputs */
    float *y;      /* [rows, H] one expert's output */
    float *sig;    /* [rows] the shared expert's gate logits */
    float *route;  /* [rows, 2E] the routing as the trace captures it (rc_moe_route_capture) */
    float *cbuf;   /* fused: [rows, k, H] each row's k weighted expert outputs, in top-k order */
    float *ones;   /* fused: [rows * k] 1.0 */
    float *rw;     /* fused: [rows] one expert's rows' weights */
    /* host */
    float *sel_host, *w_host; /* [rows, k] */
    int64_t *rows_e;          /* [rows] one expert's rows, in torch.where's order */
    int64_t *widx_e;          /* [rows] their weights' index (row * k + j) */
    int64_t *iota;            /* [rows] 0, 1, ... */
};

static int64_t moe_inner(const rc_config *c)
{
    return c->moe_intermediate > c->shared_intermediate ? c->moe_intermediate : c->shared_intermediate;
}

bool rc_moe_scratch_size(const rc_config *c, int64_t R, bool fused, int64_t *backend_floats, int64_t *host_bytes)
{
    *backend_floats = *host_bytes = 0;
    if (c->n_experts <= 0)
        return true;
    const int64_t E = c->n_experts, k = c->top_k, H = c->hidden, I = moe_inner(c);
    int64_t t, b = 0, h = 0;
    bool ok = rc_mul_i64(R, E, &t) && rc_add_i64(b, t, &b) && rc_mul_i64(R, 2 * k, &t) && rc_add_i64(b, t, &b) &&
              rc_mul_i64(R, 2 * H, &t) && rc_add_i64(b, t, &b) && rc_mul_i64(R, 2 * I, &t) &&
              rc_add_i64(b, t, &b) && rc_add_i64(b, R, &b) && rc_mul_i64(R, 2 * E, &t) && rc_add_i64(b, t, &b);
    ok = ok && rc_mul_i64(R, 2 * k * 4, &t) && rc_add_i64(h, t, &h) && rc_mul_i64(R, 3 * 8, &t) &&
         rc_add_i64(h, t, &h);
    if (fused) /* cbuf, ones, rw */
        ok = ok && rc_mul_i64(R, k, &t) && rc_mul_i64(t, H + 1, &t) && rc_add_i64(b, t, &b) && rc_add_i64(b, R, &b);
    *backend_floats = b;
    *host_bytes = h;
    return ok;
}

void rc_moe_scratch_free(rc_backend *be, rc_moe_scratch *s)
{
    if (!s)
        return;
    float *bufs[] = {s->logits, s->sel, s->w, s->xin, s->g, s->u, s->y, s->sig, s->route, s->cbuf, s->ones, s->rw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    free(s->sel_host);
    free(s->w_host);
    free(s->rows_e);
    free(s->widx_e);
    free(s->iota);
    free(s);
}

rc_status rc_moe_scratch_create(rc_backend *be, const rc_config *c, int64_t R, bool fused, rc_moe_scratch **out)
{
    *out = NULL;
    int64_t bf, hb;
    if (!rc_moe_scratch_size(c, R, fused, &bf, &hb))
        return rc_errorf(RC_ERR_NOMEM, "MoE scratch size overflows");
    if (!be->ops->moe_route || !be->ops->moe_accumulate || !be->ops->zero)
        return rc_errorf(RC_ERR_UNSUPPORTED, "backend %s has no MoE ops", be->ops->name);
    rc_moe_scratch *s = calloc(1, sizeof *s);
    if (!s)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    s->max_rows = R;
    const int64_t E = c->n_experts, k = c->top_k, H = c->hidden, I = moe_inner(c);
    rc_status st = RC_OK;
    float **bufs[] = {&s->logits, &s->sel, &s->w, &s->xin, &s->g, &s->u, &s->y, &s->sig, &s->route};
    const int64_t n[] = {R * E, R * k, R * k, R * H, R * I, R * I, R * H, R, R * 2 * E};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && st == RC_OK; i++)
        st = be->ops->alloc(be, n[i] > 0 ? n[i] : 1, bufs[i]);
    if (st == RC_OK && fused) {
        float *one = NULL;
        st = be->ops->alloc(be, R * k * H, &s->cbuf);
        if (st == RC_OK)
            st = be->ops->alloc(be, R * k, &s->ones);
        if (st == RC_OK)
            st = be->ops->alloc(be, R, &s->rw);
        if (st == RC_OK)
            st = rc_alloc_aligned((void **)&one, R * k, sizeof *one, "MoE scratch");
        for (int64_t i = 0; st == RC_OK && i < R * k; i++)
            one[i] = 1.0f;
        if (st == RC_OK)
            st = be->ops->upload(be, one, R * k, RC_F32, s->ones);
        free(one);
    }
    if (st == RC_OK)
        st = rc_alloc_aligned((void **)&s->sel_host, R * k, sizeof(float), "MoE routing");
    if (st == RC_OK)
        st = rc_alloc_aligned((void **)&s->w_host, R * k, sizeof(float), "MoE routing");
    if (st == RC_OK)
        st = rc_alloc_aligned((void **)&s->rows_e, R, sizeof(int64_t), "MoE routing");
    if (st == RC_OK)
        st = rc_alloc_aligned((void **)&s->widx_e, R, sizeof(int64_t), "MoE routing");
    if (st == RC_OK)
        st = rc_alloc_aligned((void **)&s->iota, R, sizeof(int64_t), "MoE routing");
    if (st != RC_OK) {
        rc_moe_scratch_free(be, s);
        return st;
    }
    for (int64_t i = 0; i < R; i++)
        s->iota[i] = i;
    *out = s;
    return RC_OK;
}

/* rows [r0, r0 + rows) of W [*, K] as a weight of its own */
static rc_wt wt_rows(rc_wt W, int64_t r0, int64_t K)
{
    W.p = (const unsigned char *)W.p + r0 * K * rc_dtype_size(W.dt);
    return W;
}

/* SwiGLU of n rows x [n, H] with gate rows Wg and up rows Wu [I, H] and down
 * Wd [H, I]: y = R(down(R(R(silu(R(gate x))) * R(up x)))) (LlamaMLP, the
 * experts' act_fn(gate) * up) */
static rc_status swiglu(rc_backend *be, const rc_config *c, const float *x, int64_t n, rc_wt Wg, rc_wt Wu, rc_wt Wd,
                        int64_t I, const rc_moe_rounding *r, rc_moe_scratch *s, float *y)
{
    const rc_backend_ops *op = be->ops;
    const int64_t H = c->hidden;
    RC_TRY(op->matmul(be, x, n, H, Wg, I, NULL, r->in_norm, r->linear, s->g));
    RC_TRY(op->matmul(be, x, n, H, Wu, I, NULL, r->in_norm, r->linear, s->u));
    RC_TRY(op->act_mul(be, c->act, s->g, s->u, n * I, r->act, r->act));
    return op->matmul(be, s->g, n, I, Wd, H, NULL, r->in_act, r->linear, y);
}

/* gpt-oss's expert (GptOssExperts.forward): gate_up = R(R(x @ W) + b), the
 * clamped SwiGLU (rco_swiglu_clamp1, in the activation's dtype), then
 * R(R(glu @ Wd) + bd). bg, bu, bd: the expert's biases (backend memory). */
static rc_status swiglu_clamped(rc_backend *be, const rc_config *c, const float *x, int64_t n, rc_wt Wg, rc_wt Wu,
                                rc_wt Wd, const float *bg, const float *bu, const float *bd, int64_t I,
                                const rc_moe_rounding *r, rc_moe_scratch *s, float *y)
{
    const rc_backend_ops *op = be->ops;
    const int64_t H = c->hidden;
    if (!op->bias_add || !op->swiglu_clamp)
        return rc_errorf(RC_ERR_UNSUPPORTED, "backend %s has no clamped SwiGLU", op->name);
    RC_TRY(op->matmul(be, x, n, H, Wg, I, NULL, r->in_norm, r->linear, s->g));
    RC_TRY(op->bias_add(be, s->g, n, I, bg, r->linear));
    RC_TRY(op->matmul(be, x, n, H, Wu, I, NULL, r->in_norm, r->linear, s->u));
    RC_TRY(op->bias_add(be, s->u, n, I, bu, r->linear));
    /* the limit cast to the dtype, as torch casts a clamp's scalar bound */
    RC_TRY(op->swiglu_clamp(be, s->g, s->u, n * I, (float)c->swiglu_alpha,
                            rc_round_to((float)c->swiglu_limit, r->act), r->act));
    RC_TRY(op->matmul(be, s->g, n, I, Wd, H, NULL, r->in_act, r->linear, y));
    return op->bias_add(be, y, n, H, bd, r->linear);
}

/* the routing rule of c for the routing op (rco_moe_route_row's renorm) */
static int route_rule(const rc_config *c)
{
    return c->moe_topk_softmax ? RCO_MOE_TOPK_SOFTMAX : c->norm_topk_prob ? 1 : 0;
}

/* the grouped sigmoid router's sizes and constants, its weights rounded to w_dt */
/* unscaled: routed_scaling_factor left out of the weights (a fused MoE
 * kernel's rule: the summed output is scaled instead) */
static rco_grouped_router grouped_router(const rc_config *c, rc_dtype w_dt, bool unscaled)
{
    return (rco_grouped_router){c->n_experts, c->top_k, c->n_group, c->topk_group, c->norm_topk_prob ? 1 : 0,
                                unscaled ? 1.0f : (float)c->routed_scale, w_dt};
}

/* routing=replay: the rows with recorded experts take them, their weights
 * recomputed from this side's logits (rco_moe_route_forced_row, on the host
 * for every backend); the others keep the op's routing */
static rc_status replay_routing(rc_backend *be, const rc_config *c, const rc_batch_desc *bd, int64_t l, int64_t n,
                                int64_t row0, rc_dtype w_dt, rc_moe_scratch *s, const rc_routing_hook *hook)
{
    const rc_backend_ops *op = be->ops;
    const int64_t E = c->n_experts, k = c->top_k;
    float *rec = NULL, *lg = NULL, *p = NULL;
    rc_status st;
    if ((st = rc_alloc_aligned((void **)&rec, n * k, sizeof *rec, "MoE replay")) != RC_OK ||
        (st = rc_alloc_aligned((void **)&lg, n * E, sizeof *lg, "MoE replay")) != RC_OK ||
        (st = rc_alloc_aligned((void **)&p, E, sizeof *p, "MoE replay")) != RC_OK)
        goto done;
    if ((st = hook->replay(hook->ctx, bd, l, row0, n, k, rec)) != RC_OK ||
        (st = op->download(be, s->logits, n * E, lg)) != RC_OK ||
        (st = op->download(be, s->w, n * k, s->w_host)) != RC_OK)
        goto done;
    for (int64_t i = 0; i < n; i++) {
        if (rec[i * k] < 0.0f)
            continue;
        for (int64_t j = 0; j < k; j++)
            if (!(rec[i * k + j] >= 0.0f && rec[i * k + j] < (float)E)) {
                st = rc_errorf(RC_ERR_INTERNAL, "MoE layer %lld: replayed expert %g of %lld", (long long)l,
                               (double)rec[i * k + j], (long long)E);
                goto done;
            }
        memcpy(s->sel_host + i * k, rec + i * k, (size_t)k * sizeof *rec);
        if (c->router == RC_ROUTER_SIGMOID_GROUPED) {
            const rco_grouped_router g = grouped_router(c, w_dt, false);
            rco_moe_route_grouped_forced_row(lg + i * E, &g, rec + i * k, s->w_host + i * k);
        } else {
            rco_moe_route_forced_row(lg + i * E, E, k, route_rule(c), w_dt, p, rec + i * k, s->w_host + i * k);
        }
    }
    if ((st = op->upload(be, s->sel_host, n * k, RC_F32, s->sel)) == RC_OK)
        st = op->upload(be, s->w_host, n * k, RC_F32, s->w);
done:
    free(rec);
    free(lg);
    free(p);
    return st;
}

/* weights=as-stored: the experts as vLLM's fused MoE path computes them
 * (fused_experts_impl with use_fp8_w8a8 and block_shape; docs/numerics.md
 * "Experts as stored"), from the routing in s (sel_host, fp32 weights w):
 * for each expert, over the rows that chose it, gate and up by the block
 * GEMM (R once each), SiluAndMul (R(R(silu(g)) * u)), down by the block GEMM
 * with the row's weight multiplied into the fp32 sum before its one rounding
 * (MUL_ROUTED_WEIGHT); the k outputs of each row summed in top-k order by
 * moe_sum (top_k 2 to 4: in the dtype, R(R(0 + c_0) + c_1) ...; else
 * torch's sum over the k: fp32 from 0, rounded once); the sum times
 * routed_scaling_factor (R, the grouped routers); plus the shared experts
 * (the dense block-FP8 MLP), R(routed + shared). */
static rc_status experts_fused_fp8(rc_backend *be, const rc_config *c, int64_t l, const float *h, int64_t n,
                                   const rc_moe_rounding *r, rc_moe_scratch *s, float *out)
{
    const rc_backend_ops *op = be->ops;
    const int64_t E = c->n_experts, k = c->top_k, H = c->hidden, Im = c->moe_intermediate;
    if (!op->scale || !op->add || !op->act_mul)
        return rc_errorf(RC_ERR_UNSUPPORTED, "backend %s lacks an op of the fused MoE rule", op->name);
    RC_TRY(op->zero(be, s->cbuf, n * k * H));
    for (int64_t e = 0; e < E; e++) {
        int64_t m = 0;
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < n; i++)
                if ((int64_t)s->sel_host[i * k + j] == e) {
                    s->rows_e[m] = i;
                    s->widx_e[m++] = i * k + j;
                }
        if (m == 0)
            continue;
        RC_TRY(op->gather_rows(be, h, H, s->rows_e, m, s->xin));
        RC_TRY(op->gather_rows(be, s->w, 1, s->widx_e, m, s->rw)); /* the rows' fp32 weights */
        RC_TRY(r->fp8_linear(r->fp8, be, l, e, 0, s->xin, m, NULL, r->linear, s->g));
        RC_TRY(r->fp8_linear(r->fp8, be, l, e, 1, s->xin, m, NULL, r->linear, s->u));
        RC_TRY(op->act_mul(be, c->act, s->g, s->u, m * Im, r->act, r->act));
        RC_TRY(r->fp8_linear(r->fp8, be, l, e, 2, s->g, m, s->rw, r->linear, s->y));
        /* into the row's slot j of cbuf, unchanged (times 1.0, added to 0 in fp32) */
        RC_TRY(op->moe_accumulate(be, s->y, m, H, s->widx_e, s->ones, s->iota, false, RC_F32, s->cbuf));
    }
    /* moe_sum: top_k 2..4 its kernel (the dtype's additions), else at::sum_out (fp32, one rounding) */
    const bool in_dt = k >= 2 && k <= 4;
    RC_TRY(op->zero(be, out, n * H));
    for (int64_t j = 0; j < k; j++) {
        for (int64_t i = 0; i < n; i++)
            s->rows_e[i] = i * k + j;
        RC_TRY(op->gather_rows(be, s->cbuf, H, s->rows_e, n, s->y));
        RC_TRY(op->moe_accumulate(be, s->y, n, H, s->iota, s->ones, s->iota, false, in_dt ? r->linear : RC_F32,
                                  out));
    }
    if (!in_dt)
        RC_TRY(op->scale(be, out, n * H, 1.0f, r->linear));
    if (c->router == RC_ROUTER_SIGMOID_GROUPED && c->routed_scale != 1.0) /* final_hidden_states *= scale */
        RC_TRY(op->scale(be, out, n * H, (float)c->routed_scale, r->linear));
    if (c->shared_intermediate > 0) { /* the shared experts: the block-FP8 MLP, R(routed + shared) */
        const int64_t Is = c->shared_intermediate;
        RC_TRY(r->fp8_linear(r->fp8, be, l, E, 0, h, n, NULL, r->linear, s->g));
        RC_TRY(r->fp8_linear(r->fp8, be, l, E, 1, h, n, NULL, r->linear, s->u));
        RC_TRY(op->act_mul(be, c->act, s->g, s->u, n * Is, r->act, r->act));
        RC_TRY(r->fp8_linear(r->fp8, be, l, E, 2, s->g, n, NULL, r->linear, s->y));
        RC_TRY(op->add(be, out, s->y, n * H, r->linear, out));
    }
    return RC_OK;
}

rc_status rc_moe_forward(rc_backend *be, const rc_config *c, const rc_layer_weights *L, int64_t l, const float *h,
                         int64_t n, const rc_batch_desc *bd, int64_t row0, const rc_moe_rounding *r, rc_moe_scratch *s,
                         const rc_routing_hook *hook, float *out)
{
    const rc_backend_ops *op = be->ops;
    const int64_t E = c->n_experts, k = c->top_k, H = c->hidden, Im = c->moe_intermediate;
    if (!s || n > s->max_rows)
        return rc_errorf(RC_ERR_INTERNAL, "MoE layer %lld: %lld rows without scratch for them", (long long)l,
                         (long long)n);
    /* the router: logits in the dtype (router=fp32, or a family that keeps its router fp32: unrounded), then
     * softmax / top-k / weights (cast to the logits' dtype: transformers' .to(router_logits.dtype); Mixtral
     * keeps them fp32), or the grouped sigmoid router (fp32 throughout) */
    const bool kept32 = r->router_f32 || c->router_gate_f32;
    /* vLLM's DeepSeek-V3 gate (router=dtype): the bf16 GEMM's logits rounded to the dtype, the rest as kept32 */
    const bool f32 = kept32 && !(r->router_gate_dt && c->router_gate_engine_dt && !r->router_f32);
    /* the fused MoE kernel reads fp32 weights (vLLM's topk_weights) */
    const rc_dtype w_dt = c->moe_weights_f32 || kept32 || r->fp8 ? RC_F32 : r->linear;
    if (r->fp8 && (!s->cbuf || r->replay || !r->fp8_linear))
        return rc_errorf(RC_ERR_INTERNAL, "MoE layer %lld: the fused rule without its scratch, or with replay",
                         (long long)l);
    RC_TRY(op->matmul(be, h, n, H, L->w_router, E, rc_wt_vec(L->b_router), r->in_norm, f32 ? RC_F32 : r->linear,
                      s->logits));
    if (c->router == RC_ROUTER_SIGMOID_GROUPED) {
        if (!op->moe_route_grouped)
            return rc_errorf(RC_ERR_UNSUPPORTED, "backend %s has no grouped MoE router", op->name);
        const rco_grouped_router g = grouped_router(c, w_dt, r->fp8 != NULL);
        RC_TRY(op->moe_route_grouped(be, s->logits, rc_wt_vec(L->e_bias), n, &g, s->sel, s->w));
    } else {
        RC_TRY(op->moe_route(be, s->logits, n, E, k, route_rule(c), w_dt, s->sel, s->w));
    }
    RC_TRY(op->download(be, s->sel, n * k, s->sel_host));
    if (hook && hook->fn) { /* the router's own choice (under replay too: what miles' R3 check compares) */
        RC_TRY(op->download(be, s->w, n * k, s->w_host));
        RC_TRY(hook->fn(hook->ctx, bd, l, row0, n, k, s->sel_host, s->w_host));
    }
    if (r->replay && hook && hook->replay)
        RC_TRY(replay_routing(be, c, bd, l, n, row0, w_dt, s, hook));
    if (r->fp8)
        return experts_fused_fp8(be, c, l, h, n, r, s, out);
    RC_TRY(op->zero(be, out, n * H));
    /* the experts in index order (Qwen2MoeExperts' loop over expert_hit),
     * each over the rows that chose it in torch.where(expert_mask[e])'s
     * order: by top-k position, then row; each row's contributions are
     * added to out in expert order */
    for (int64_t e = 0; e < E; e++) {
        int64_t m = 0;
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < n; i++)
                if ((int64_t)s->sel_host[i * k + j] == e) {
                    s->rows_e[m] = i;
                    s->widx_e[m++] = i * k + j;
                }
        if (m == 0)
            continue;
        RC_TRY(op->gather_rows(be, h, H, s->rows_e, m, s->xin));
        const rc_wt Wg = wt_rows(L->w_exp_gu, e * 2 * Im, H), Wu = wt_rows(L->w_exp_gu, e * 2 * Im + Im, H);
        const rc_wt Wd = wt_rows(L->w_exp_down, e * H, Im);
        if (c->swiglu_limit > 0) {
            const float *bgu = rc_wt_vec(L->b_exp_gu), *bdn = rc_wt_vec(L->b_exp_down);
            RC_TRY(swiglu_clamped(be, c, s->xin, m, Wg, Wu, Wd, bgu + e * 2 * Im, bgu + e * 2 * Im + Im, bdn + e * H,
                                  Im, r, s, s->y));
        } else {
            RC_TRY(swiglu(be, c, s->xin, m, Wg, Wu, Wd, Im, r, s, s->y));
        }
        RC_TRY(op->moe_accumulate(be, s->y, m, H, s->rows_e, s->w, s->widx_e, false, r->linear, out));
    }
    if (c->shared_intermediate > 0) {
        RC_TRY(swiglu(be, c, h, n, L->w_sh_gate, L->w_sh_up, L->w_sh_down, c->shared_intermediate, r, s, s->y));
        if (c->shared_ungated) /* DeepSeek-V3, GLM-4.5: out = R(out + shared_experts(h)) */
            return op->add(be, out, s->y, n * H, r->linear, out);
        /* Qwen2-MoE: out = R(out + R(R(sigmoid(shared_expert_gate(h))) * shared_expert(h))) */
        RC_TRY(op->matmul(be, h, n, H, L->w_sh_sig, 1, NULL, r->in_norm, r->linear, s->sig));
        RC_TRY(op->moe_accumulate(be, s->y, n, H, s->iota, s->sig, s->iota, true, r->linear, out));
    }
    return RC_OK;
}

rc_status rc_moe_route_capture(rc_backend *be, const rc_config *c, rc_moe_scratch *s, int64_t n, const float **out)
{
    const rc_backend_ops *op = be->ops;
    const int64_t E = c->n_experts, k = c->top_k;
    float *h = NULL;
    RC_TRY(op->download(be, s->w, n * k, s->w_host));
    RC_TRY(rc_calloc((void **)&h, n * 2 * E, sizeof *h, "MoE routing capture"));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t e = (int64_t)s->sel_host[i * k + j];
            h[i * 2 * E + e] = 1.0f;
            h[i * 2 * E + E + e] = s->w_host[i * k + j];
        }
    rc_status st = op->upload(be, h, n * 2 * E, RC_F32, s->route);
    free(h);
    *out = s->route;
    return st;
}

/* ---- fp64 reference ----------------------------------------------------------------- */

static double silu64(double x) { return x / (1.0 + exp(-x)); }

static rc_status swiglu64(const rc_config *c, const double *x, int64_t n, rc_wt Wg, rc_wt Wu, rc_wt Wd, int64_t I,
                          rc_mm64_fn mm64, double *g, double *u, double *y)
{
    const int64_t H = c->hidden;
    RC_TRY(mm64(x, n, H, Wg, I, (rc_wt){0}, g));
    RC_TRY(mm64(x, n, H, Wu, I, (rc_wt){0}, u));
    for (int64_t i = 0; i < n * I; i++)
        g[i] = silu64(g[i]) * u[i];
    return mm64(g, n, I, Wd, H, (rc_wt){0}, y);
}

/* gpt-oss's MLP of one row in double: top-k of the router logits lg (bias
 * included), softmax over them, each expert's R-free x @ W + b, the clamped
 * SwiGLU, down + bias, weighted sum into o (zeroed by the caller). */
static rc_status gptoss_mlp64(const rc_config *c, const rc_layer_weights *L, const double *x, const double *lg,
                              int64_t *sel, rc_mm64_fn mm64, double *g, double *u, double *y, double *o)
{
    const int64_t E = c->n_experts, k = c->top_k, H = c->hidden, Im = c->moe_intermediate;
    const double lim = c->swiglu_limit, alpha = c->swiglu_alpha;
    for (int64_t j = 0; j < k; j++) { /* the k largest logits, lower index first among equals */
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++)
                taken = taken || sel[i] == e;
            if (!taken && (best < 0 || lg[e] > lg[best]))
                best = e;
        }
        sel[j] = best;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < k; j++)
        sum += exp(lg[sel[j]] - lg[sel[0]]);
    for (int64_t j = 0; j < k; j++) {
        const int64_t e = sel[j];
        const double wt = exp(lg[e] - lg[sel[0]]) / sum;
        RC_TRY(mm64(x, 1, H, wt_rows(L->w_exp_gu, e * 2 * Im, H), Im, (rc_wt){0}, g));
        RC_TRY(mm64(x, 1, H, wt_rows(L->w_exp_gu, e * 2 * Im + Im, H), Im, (rc_wt){0}, u));
        for (int64_t i = 0; i < Im; i++) {
            const double gi = fmin(g[i] + (double)rc_wt_at(L->b_exp_gu, e * 2 * Im + i), lim);
            const double ui = fmin(fmax(u[i] + (double)rc_wt_at(L->b_exp_gu, e * 2 * Im + Im + i), -lim), lim);
            g[i] = (ui + 1.0) * (gi / (1.0 + exp(-alpha * gi)));
        }
        RC_TRY(mm64(g, 1, Im, wt_rows(L->w_exp_down, e * H, Im), H, (rc_wt){0}, y));
        for (int64_t i = 0; i < H; i++)
            o[i] += wt * (y[i] + (double)rc_wt_at(L->b_exp_down, e * H + i));
    }
    return RC_OK;
}

/* the grouped sigmoid router in double (rco_moe_route_grouped_row's steps, no
 * rounding): lg [E] the logits, sc [3 E + n_group] scratch, sel [k] the
 * experts, w [k] their weights */
static void grouped64(const rc_config *c, rc_wt bias, const double *lg, double *sc, int64_t *sel, double *w)
{
    const int64_t E = c->n_experts, G = c->n_group, per = E / G, k = c->top_k;
    double *ch = sc + E, *keep = sc + 2 * E, *gs = sc + 3 * E;
    for (int64_t e = 0; e < E; e++) {
        sc[e] = 1.0 / (1.0 + exp(-lg[e]));
        ch[e] = sc[e] + (bias.p ? (double)rc_wt_at(bias, e) : 0.0);
    }
    for (int64_t q = 0; q < G; q++) {
        int64_t i1 = -1, i2 = -1;
        for (int64_t e = q * per; e < (q + 1) * per; e++) {
            if (i1 < 0 || ch[e] > ch[i1]) {
                i2 = i1;
                i1 = e;
            } else if (i2 < 0 || ch[e] > ch[i2]) {
                i2 = e;
            }
        }
        gs[q] = ch[i1] + ch[i2];
    }
    for (int64_t e = 0; e < E; e++)
        keep[e] = 0.0;
    for (int64_t j = 0; j < c->topk_group; j++) { /* the best groups, lower index first among equals */
        int64_t best = -1;
        for (int64_t q = 0; q < G; q++)
            if (keep[q * per] == 0.0 && (best < 0 || gs[q] > gs[best]))
                best = q;
        for (int64_t e = best * per; e < (best + 1) * per; e++)
            keep[e] = 1.0;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = keep[e] == 0.0;
            for (int64_t i = 0; i < j; i++)
                taken = taken || sel[i] == e;
            if (!taken && (best < 0 || ch[e] > ch[best]))
                best = e;
        }
        sel[j] = best;
        w[j] = sc[best];
        sum += w[j];
    }
    for (int64_t j = 0; j < k; j++)
        w[j] = (c->norm_topk_prob ? w[j] / (sum + 1e-20) : w[j]) * c->routed_scale;
}

/* the softmax routers in double: the k largest logits (lower index first
 * among equals), their probabilities, renormalised with norm_topk_prob */
static void softmax64(const rc_config *c, const double *lg, int64_t *sel, double *w)
{
    const int64_t E = c->n_experts, k = c->top_k;
    double mx = lg[0], sum = 0.0, wsum = 0.0;
    for (int64_t e = 1; e < E; e++)
        mx = lg[e] > mx ? lg[e] : mx;
    for (int64_t e = 0; e < E; e++)
        sum += exp(lg[e] - mx);
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++)
                taken = taken || sel[i] == e;
            if (!taken && (best < 0 || lg[e] > lg[best]))
                best = e;
        }
        sel[j] = best;
        w[j] = exp(lg[best] - mx) / sum;
        wsum += w[j];
    }
    if (c->norm_topk_prob)
        for (int64_t j = 0; j < k; j++)
            w[j] /= wsum;
}

rc_status rc_moe_forward64(const rc_config *c, const rc_layer_weights *L, const double *h, int64_t n,
                           rc_mm64_fn mm64, double *out)
{
    const int64_t E = c->n_experts, k = c->top_k, H = c->hidden, Im = c->moe_intermediate;
    const int64_t I = moe_inner(c);
    double *lg = NULL, *g = NULL, *u = NULL, *y = NULL, *wts = NULL;
    int64_t *sel = NULL;
    rc_status s;
    if ((s = rc_calloc((void **)&lg, 4 * E + c->n_group + 1, sizeof *lg, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&g, I, sizeof *g, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&u, I, sizeof *u, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&y, H, sizeof *y, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&wts, k, sizeof *wts, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&sel, k, sizeof *sel, "fp64 reference")) != RC_OK)
        goto done;
    for (int64_t r = 0; r < n && s == RC_OK; r++) {
        const double *x = h + r * H;
        double *o = out + r * H;
        for (int64_t i = 0; i < H; i++)
            o[i] = 0.0;
        if ((s = mm64(x, 1, H, L->w_router, E, L->b_router, lg)) != RC_OK)
            break;
        if (c->moe_topk_softmax) { /* gpt-oss */
            s = gptoss_mlp64(c, L, x, lg, sel, mm64, g, u, y, o);
            continue;
        }
        if (c->router == RC_ROUTER_SIGMOID_GROUPED)
            grouped64(c, L->e_bias, lg, lg + E, sel, wts);
        else
            softmax64(c, lg, sel, wts);
        for (int64_t j = 0; j < k && s == RC_OK; j++) {
            const int64_t e = sel[j];
            s = swiglu64(c, x, 1, wt_rows(L->w_exp_gu, e * 2 * Im, H), wt_rows(L->w_exp_gu, e * 2 * Im + Im, H),
                         wt_rows(L->w_exp_down, e * H, Im), Im, mm64, g, u, y);
            for (int64_t i = 0; i < H; i++)
                o[i] += wts[j] * y[i];
        }
        if (s == RC_OK && c->shared_intermediate > 0) {
            double gl = 0.0;
            s = swiglu64(c, x, 1, L->w_sh_gate, L->w_sh_up, L->w_sh_down, c->shared_intermediate, mm64, g, u, y);
            if (s == RC_OK && !c->shared_ungated)
                s = mm64(x, 1, H, L->w_sh_sig, 1, (rc_wt){0}, &gl);
            const double sg = c->shared_ungated ? 1.0 : 1.0 / (1.0 + exp(-gl)); /* DeepSeek, GLM: ungated */
            for (int64_t i = 0; s == RC_OK && i < H; i++)
                o[i] += sg * y[i];
        }
    }
done:
    free(lg);
    free(g);
    free(u);
    free(y);
    free(wts);
    free(sel);
    return s;
}
