/* A float64 forward pass: the --reference fp64 re-scoring, and the answer
 * the fp32 / bf16 / fp16 paths are measured against. Plain loops in double
 * over the fp32 weights (exact widenings of the stored weights); RoPE
 * frequencies, norms, softmax and activations all in double. One sequence
 * at a time, no cache: this is a reference, not an engine. */
#include "forward64.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "mla.h"
#include "moe.h"
#include "util.h"

/* y[M, N] = x[M, K] . W[N, K]^T + bias (a weight row widened once per output column) */
static rc_status mm64(const double *x, int64_t M, int64_t K, rc_wt W, int64_t N, rc_wt bias, double *y)
{
    double *rows;
    const int64_t nt = omp_get_max_threads();
    RC_TRY(rc_alloc_aligned((void **)&rows, nt * K, sizeof *rows, "fp64 reference"));
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        double *w = rows + (int64_t)omp_get_thread_num() * K;
        for (int64_t k = 0; k < K; k++)
            w[k] = (double)rc_wt_at(W, n * K + k);
        const double bn = bias.p ? (double)rc_wt_at(bias, n) : 0.0;
        for (int64_t m = 0; m < M; m++) {
            const double *a = x + m * K;
            double acc[4] = {0, 0, 0, 0};
            int64_t k = 0;
            for (; k + 4 <= K; k += 4)
                for (int j = 0; j < 4; j++)
                    acc[j] += a[k + j] * w[k + j];
            for (; k < K; k++)
                acc[0] += a[k] * w[k];
            y[m * N + n] = (acc[0] + acc[1]) + (acc[2] + acc[3]) + bn;
        }
    }
    free(rows);
    return RC_OK;
}

static void norm64(const rc_config *c, const double *x, int64_t M, rc_wt w, rc_wt b, double *y)
{
    const int64_t H = c->hidden;
    for (int64_t r = 0; r < M; r++) {
        const double *xr = x + r * H;
        double *yr = y + r * H;
        if (c->norm == RC_NORM_LAYER) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < H; i++)
                mean += xr[i];
            mean /= (double)H;
            for (int64_t i = 0; i < H; i++)
                var += (xr[i] - mean) * (xr[i] - mean);
            var /= (double)H;
            double rstd = 1.0 / sqrt(var + c->norm_eps);
            for (int64_t i = 0; i < H; i++)
                yr[i] = (xr[i] - mean) * rstd * (double)rc_wt_at(w, i) + (b.p ? (double)rc_wt_at(b, i) : 0.0);
        } else {
            double ss = 0;
            for (int64_t i = 0; i < H; i++)
                ss += xr[i] * xr[i];
            double rs = 1.0 / sqrt(ss / (double)H + c->norm_eps);
            const double off = c->norm_w_offset ? 1.0 : 0.0; /* Gemma: (1 + w) */
            for (int64_t i = 0; i < H; i++)
                yr[i] = ((double)rc_wt_at(w, i) + off) * (xr[i] * rs);
        }
    }
}

/* HF's rope initialisation, in double */
static void inv_freq64(const rc_config *c, double *inv)
{
    const int64_t dim = c->rotary_dim;
    for (int64_t j = 0; j < dim / 2; j++)
        inv[j] = 1.0 / pow(c->rope_theta, (double)(2 * j) / (double)dim);
    if (c->rope_type == RC_ROPE_LINEAR) {
        for (int64_t j = 0; j < dim / 2; j++)
            inv[j] /= c->rope_factor;
    } else if (c->rope_type == RC_ROPE_LLAMA3) {
        const double old = (double)c->rope_orig_max_pos, lo = c->rope_low_freq, hi = c->rope_high_freq;
        for (int64_t j = 0; j < dim / 2; j++) {
            double wl = 2.0 * M_PI / inv[j];
            double llama = wl > old / lo ? inv[j] / c->rope_factor : inv[j];
            double smooth = (old / wl - lo) / (hi - lo);
            double sm = (1.0 - smooth) * llama / c->rope_factor + smooth * llama;
            bool medium = !(wl < old / hi) && !(wl > old / lo);
            inv[j] = medium ? sm : llama;
        }
    } else if (c->rope_type == RC_ROPE_LONGROPE) { /* short_factor divides each pair's frequency */
        for (int64_t j = 0; j < dim / 2 && j < RC_MAX_ROPE_PAIRS; j++)
            inv[j] /= c->rope_short_factor[j];
    } else if (c->rope_type == RC_ROPE_YARN) { /* extrapolation and interpolation blended by the ramp */
        double lo, hi;
        rc_yarn_range(c, &lo, &hi);
        if (lo == hi)
            hi += 0.001;
        for (int64_t j = 0; j < dim / 2; j++) {
            double ramp = fmin(fmax(((double)j - lo) / (hi - lo), 0.0), 1.0), ef = 1.0 - ramp;
            inv[j] = inv[j] / c->rope_factor * (1.0 - ef) + inv[j] * ef;
        }
    }
}

/* RMSNorm of n values in place (q / k norm); off: added to each weight (Gemma's 1) */
static void rms64(double *x, int64_t n, rc_wt w, double eps, double off)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double rs = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        x[i] = ((double)rc_wt_at(w, i) + off) * (x[i] * rs);
}

/* cap * tanh(x / cap) for cap > 0 (Gemma 2's soft-capping), else x */
static double capped(double x, double cap) { return cap > 0 ? cap * tanh(x / cap) : x; }

static double act64(rc_act a, double x)
{
    switch (a) {
    case RC_ACT_GELU_ERF: return 0.5 * x * erfc(-x / M_SQRT2); /* = x/2 (1 + erf(x/sqrt 2)), no cancellation */
    case RC_ACT_GELU_TANH:
    case RC_ACT_GELU_NEW: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case RC_ACT_SILU: return x / (1.0 + exp(-x));
    case RC_ACT_GELU_BLOOM: return x * 0.5 * (1.0 + tanh(0.79788456 * x * (1.0 + 0.044715 * x * x)));
    }
    return x;
}

/* A Gated DeltaNet layer's mixer in double (Qwen3NextGatedDeltaNet without a cache, the gated delta rule
 * in its recurrent form, token by token: the exact value both of the engine's forms approach): h [n][H]
 * the layer's input rows, out [n][H] out_proj's output. */
static rc_status gdn64(const rc_config *c, const rc_layer_weights *L, const double *hin, int64_t n, double *out)
{
    const int64_t H = c->hidden, hk = c->lin_hk, hv = c->lin_hv, dk = c->lin_dk, dv = c->lin_dv, K = c->lin_conv_k;
    const int64_t rep = hv / hk, W = 2 * hk * dk + 2 * hv * dv, C = 2 * hk * dk + hv * dv;
    double *qkvz = NULL, *ba = NULL, *mixed = NULL, *conv = NULL, *S = NULL, *o = NULL;
    rc_status s;
    if ((s = rc_calloc((void **)&qkvz, n * W, sizeof *qkvz, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&ba, n * 2 * hv, sizeof *ba, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&mixed, n * C, sizeof *mixed, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&conv, n * C, sizeof *conv, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&S, hv * dk * dv, sizeof *S, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&o, n * hv * dv, sizeof *o, "fp64 reference")) != RC_OK ||
        (s = mm64(hin, n, H, L->w_lin_qkvz, W, (rc_wt){0}, qkvz)) != RC_OK ||
        (s = mm64(hin, n, H, L->w_lin_ba, 2 * hv, (rc_wt){0}, ba)) != RC_OK)
        goto done;
    /* fix_query_key_value_ordering: per key head q, k, its value heads' v and z; b, a */
    for (int64_t t = 0; t < n; t++)
        for (int64_t kh = 0; kh < hk; kh++) {
            const double *src = qkvz + t * W + kh * (2 * dk + 2 * rep * dv);
            for (int64_t i = 0; i < dk; i++) {
                mixed[t * C + kh * dk + i] = src[i];
                mixed[t * C + hk * dk + kh * dk + i] = src[dk + i];
            }
            for (int64_t i = 0; i < rep * dv; i++)
                mixed[t * C + 2 * hk * dk + kh * rep * dv + i] = src[2 * dk + i];
        }
    /* the causal depthwise conv (K - 1 zeros before the sequence) and SiLU */
    for (int64_t t = 0; t < n; t++)
        for (int64_t ch = 0; ch < C; ch++) {
            double acc = 0.0;
            for (int64_t j = 0; j < K; j++) {
                const int64_t src = t - (K - 1) + j;
                if (src >= 0)
                    acc += mixed[src * C + ch] * (double)rc_wt_at(L->lin_conv_w, ch * K + j);
            }
            conv[t * C + ch] = acc / (1.0 + exp(-acc));
        }
    /* l2norm of q and k (eps 1e-6), q / sqrt(dk); g, beta; the recurrent form */
    for (int64_t t = 0; t < n; t++) {
        double *ct = conv + t * C;
        for (int64_t hd = 0; hd < 2 * hk; hd++) {
            double ss = 0.0;
            for (int64_t i = 0; i < dk; i++)
                ss += ct[hd * dk + i] * ct[hd * dk + i];
            const double r = 1.0 / sqrt(ss + 1e-6) / (hd < hk ? sqrt((double)dk) : 1.0);
            for (int64_t i = 0; i < dk; i++)
                ct[hd * dk + i] *= r;
        }
        for (int64_t h = 0; h < hv; h++) {
            const int64_t kh = h / rep, j = h % rep;
            const double b = ba[t * 2 * hv + kh * 2 * rep + j], a = ba[t * 2 * hv + kh * 2 * rep + rep + j];
            const double beta = 1.0 / (1.0 + exp(-b));
            const double x = a + (double)rc_wt_at(L->lin_dt_bias, h);
            const double g = -exp((double)rc_wt_at(L->lin_A_log, h)) * (x > 20.0 ? x : log1p(exp(x)));
            const double *q = ct + kh * dk, *k = ct + hk * dk + kh * dk, *v = ct + 2 * hk * dk + h * dv;
            double *Sh = S + h * dk * dv, *oh = o + (t * hv + h) * dv;
            const double dec = exp(g);
            for (int64_t i = 0; i < dk * dv; i++)
                Sh[i] *= dec;
            for (int64_t jv = 0; jv < dv; jv++) {
                double kv = 0.0;
                for (int64_t i = 0; i < dk; i++)
                    kv += Sh[i * dv + jv] * k[i];
                const double delta = (v[jv] - kv) * beta;
                for (int64_t i = 0; i < dk; i++)
                    Sh[i * dv + jv] += k[i] * delta;
            }
            for (int64_t jv = 0; jv < dv; jv++) {
                double acc = 0.0;
                for (int64_t i = 0; i < dk; i++)
                    acc += Sh[i * dv + jv] * q[i];
                oh[jv] = acc;
            }
        }
    }
    /* the gated RMSNorm: rms(o) * w * silu(z) */
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < hv; h++) {
            double *oh = o + (t * hv + h) * dv, ss = 0.0;
            const double *z = qkvz + t * W + (h / rep) * (2 * dk + 2 * rep * dv) + 2 * dk + rep * dv + (h % rep) * dv;
            for (int64_t i = 0; i < dv; i++)
                ss += oh[i] * oh[i];
            const double r = 1.0 / sqrt(ss / (double)dv + c->norm_eps);
            for (int64_t i = 0; i < dv; i++)
                oh[i] = oh[i] * r * (double)rc_wt_at(L->lin_norm_w, i) * (z[i] / (1.0 + exp(-z[i])));
        }
    s = mm64(o, n, hv * dv, L->w_lin_out, H, (rc_wt){0}, out);
done:
    free(qkvz);
    free(ba);
    free(mixed);
    free(conv);
    free(S);
    free(o);
    return s;
}

rc_status rc_forward64(const rc_model *m, const int32_t *tokens, int64_t n, double temperature, const int64_t *rows,
                       const int32_t *targets, int64_t n_out, double *out)
{
    const rc_config *c = &m->cfg;
    const rc_weights *w = &m->w;
    const int64_t H = c->hidden, I = c->intermediate, d = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
    const int64_t qkv_w = (nh + 2 * nkv) * d, V = c->vocab;
    double *x = NULL, *h = NULL, *qkv = NULL, *att = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *logit = NULL;
    double inv[2048], inv_local[2048];
    const double qk_off = c->norm_w_offset ? 1.0 : 0.0;
    double *slopes = NULL, *head_norm = NULL;
    rc_status s = RC_OK;
    int64_t big = I > qkv_w ? I : qkv_w;
    big = big > nh * d ? big : nh * d; /* t1: the attention gate; MLA's o_proj input */
    if ((s = rc_calloc((void **)&x, n * H, sizeof *x, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&h, n * H, sizeof *h, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&qkv, n * qkv_w, sizeof *qkv, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&att, n * nh * d + n, sizeof *att, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&t1, n * big, sizeof *t1, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&t2, n * big, sizeof *t2, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&t3, n * H, sizeof *t3, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&logit, V, sizeof *logit, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&slopes, nh, sizeof *slopes, "fp64 reference")) != RC_OK ||
        (s = rc_calloc((void **)&head_norm, V, sizeof *head_norm, "fp64 reference")) != RC_OK)
        goto done;
    inv_freq64(c, inv);
    if (c->rope_theta_local > 0) { /* Gemma 3's, OLMo3's sliding layers */
        rc_config lc = *c;
        rc_config_local_rope(&lc);
        inv_freq64(&lc, inv_local);
    }
    if ((s = rc_config_check_positions(c, n)) != RC_OK)
        goto done;
    if (c->pos == RC_POS_ALIBI)
        rc_alibi_slopes_compute(c, NULL, slopes); /* the family's formula in double */
    for (int64_t v = 0; v < V; v++) { /* NormHead: each LM-head row divided by its L2 norm */
        double ss = 0;
        for (int64_t i = 0; c->norm_head && i < H; i++)
            ss += (double)rc_wt_at(w->lm_head, v * H + i) * (double)rc_wt_at(w->lm_head, v * H + i);
        head_norm[v] = c->norm_head ? fmax(sqrt(ss), 1e-12) : 1.0;
    }
    for (int64_t r = 0; r < n; r++) {
        if (tokens[r] < 0 || tokens[r] >= V) {
            s = rc_errorf(RC_ERR_USAGE, "token id %d is outside the vocabulary", tokens[r]);
            goto done;
        }
        if (c->pos == RC_POS_LEARNED && r >= c->max_pos) {
            s = rc_errorf(RC_ERR_USAGE, "position %lld is beyond the model's %lld learned positions", (long long)r,
                          (long long)c->max_pos);
            goto done;
        }
        for (int64_t i = 0; i < H; i++)
            x[r * H + i] = (double)rc_wt_at(w->embed, (int64_t)tokens[r] * H + i) +
                           (c->pos == RC_POS_LEARNED ? (double)rc_wt_at(w->wpe, r * H + i) : 0.0);
    }
    for (int64_t i = 0; c->embed_scale > 0 && i < n * H; i++) /* Gemma: sqrt(hidden), unrounded */
        x[i] *= c->embed_scale;
    if (c->embed_norm) {
        norm64(c, x, n, w->emb_ln_w, w->emb_ln_b, h);
        memcpy(x, h, (size_t)(n * H) * sizeof *x);
    }
    /* exact arithmetic: dividing by sqrt(d) is multiplying by 1/sqrt(d), and an
     * ALiBi bias measured from any reference gives the same softmax; the
     * distance j - r is used */
    const double scale = c->softmax_scale > 0 ? c->softmax_scale : 1.0 / sqrt((double)d);
    for (int64_t l = 0; l < c->n_layers; l++) {
        const rc_layer_weights *L = &w->layers[l];
        if (c->post_norm) /* OLMo2: the block reads x; ln1 normalises its output */
            memcpy(h, x, (size_t)(n * H) * sizeof *h);
        else
            norm64(c, x, n, L->ln1_w, L->ln1_b, h);
        if (rc_layer_is_linear(c, l)) { /* Gated DeltaNet */
            if ((s = gdn64(c, L, h, n, t3)) != RC_OK)
                goto done;
            goto residual;
        }
        if (c->mla) { /* latent attention, expanded (mla.c): the same [Q; K; V] rows */
            if ((s = rc_mla_qkv64(c, L, h, n, mm64, qkv)) != RC_OK)
                goto done;
        } else if ((s = mm64(h, n, H, L->w_qkv, qkv_w, L->b_qkv, qkv)) != RC_OK) {
            goto done;
        }
        if (c->clip_qkv > 0)
            for (int64_t i = 0; i < n * qkv_w; i++)
                qkv[i] = fmin(fmax(qkv[i], -c->clip_qkv), c->clip_qkv);
        for (int64_t r = 0; r < n && c->qk_norm != RC_QK_NORM_NONE; r++) {
            double *row = qkv + r * qkv_w;
            if (c->qk_norm == RC_QK_NORM_ALL) {
                rms64(row, nh * d, L->q_norm_w, c->norm_eps, qk_off);
                rms64(row + nh * d, nkv * d, L->k_norm_w, c->norm_eps, qk_off);
            } else {
                for (int64_t hd = 0; hd < nh + nkv; hd++)
                    rms64(row + hd * d, d, hd < nh ? L->q_norm_w : L->k_norm_w, c->norm_eps, qk_off);
            }
        }
        const int64_t half = c->pos == RC_POS_ROTARY ? c->rotary_dim / 2 : 0;
        const bool local = rc_layer_rope_local(c, l); /* Gemma 3, OLMo3: the sliding layers' own RoPE */
        const double *li = local ? inv_local : inv;
        /* YaRN and longrope scale cos and sin */
        const double rope_att = !local && c->rope_attn_factor > 0 ? c->rope_attn_factor : 1.0;
        const int64_t win = rc_layer_window(c, l);
        for (int64_t r = 0; r < n; r++)
            for (int64_t hd = 0; hd < nh + nkv; hd++) {
                double *v = qkv + r * qkv_w + hd * d;
                for (int64_t j = 0; j < half; j++) {
                    double a = (double)r * li[j], cs = cos(a) * rope_att, sn = sin(a) * rope_att;
                    double x1 = v[j], x2 = v[j + half];
                    v[j] = x1 * cs - x2 * sn;
                    v[j + half] = x2 * cs + x1 * sn;
                }
            }
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
        for (int64_t r = 0; r < n; r++)
            for (int64_t hd = 0; hd < nh; hd++) {
                const double *q = qkv + r * qkv_w + hd * d;
                const int64_t kh = hd / (nh / nkv);
                int64_t lo = 0;
                if (win > 0 && r - win + 1 > 0)
                    lo = r - win + 1;
                double mx = -INFINITY, sum = 0;
                double *o = att + r * nh * d + hd * d;
                for (int64_t t = 0; t < d; t++)
                    o[t] = 0;
                /* two passes over the keys: max, then exp-weighted sums */
                for (int64_t j = lo; j <= r; j++) {
                    const double *k = qkv + j * qkv_w + (nh + kh) * d;
                    double dot = 0;
                    for (int64_t t = 0; t < d; t++)
                        dot += q[t] * k[t];
                    mx = fmax(mx, capped(dot * scale, c->attn_softcap) + slopes[hd] * (double)(j - r));
                }
                /* gpt-oss: the sink logit is one more softmax column, no value */
                const double sink = c->attn_sinks ? (double)rc_wt_at(L->sinks, hd) : -INFINITY;
                mx = fmax(mx, sink);
                if (c->attn_sinks)
                    sum = exp(sink - mx);
                for (int64_t j = lo; j <= r; j++) {
                    const double *k = qkv + j * qkv_w + (nh + kh) * d;
                    const double *vv = qkv + j * qkv_w + (nh + nkv + kh) * d;
                    double dot = 0;
                    for (int64_t t = 0; t < d; t++)
                        dot += q[t] * k[t];
                    double e = exp(capped(dot * scale, c->attn_softcap) + slopes[hd] * (double)(j - r) - mx);
                    sum += e;
                    for (int64_t t = 0; t < d; t++)
                        o[t] += e * vv[t];
                }
                for (int64_t t = 0; t < d; t++)
                    o[t] /= sum;
            }
        if (c->mla) { /* each head's first v_head_dim values: the o_proj input (t1 holds n * nh * d) */
            rc_mla_out64(c, att, n, t1);
            memcpy(att, t1, (size_t)(n * nh * c->v_head_dim) * sizeof *att);
        }
        if (c->attn_out_gate) { /* Qwen3-Next: attn_output * sigmoid(gate) */
            if ((s = mm64(h, n, H, L->w_q_gate, nh * d, (rc_wt){0}, t1)) != RC_OK)
                goto done;
            for (int64_t i = 0; i < n * nh * d; i++)
                att[i] /= 1.0 + exp(-t1[i]);
        }
        if ((s = mm64(att, n, rc_dim_value(c, RC_DIM_O), L->w_o, H, L->b_o, t3)) != RC_OK)
            goto done; /* attn_out */
    residual:
        if (c->post_norm || c->sandwich_norm) {
            norm64(c, t3, n, c->sandwich_norm ? L->post_attn_ln_w : L->ln1_w, L->ln1_b, h);
            memcpy(t3, h, (size_t)(n * H) * sizeof *h);
        }
        if (!c->parallel_residual)
            for (int64_t i = 0; i < n * H; i++)
                x[i] += t3[i];
        if (c->post_norm)
            memcpy(h, x, (size_t)(n * H) * sizeof *h);
        else
            norm64(c, x, n, L->ln2_w, L->ln2_b, h);
        if (rc_layer_is_moe(c, l)) { /* moe.c: routing, experts and shared expert in double */
            if ((s = rc_moe_forward64(c, L, h, n, mm64, t3)) != RC_OK)
                goto done;
            for (int64_t i = 0; i < n * H; i++)
                x[i] += t3[i];
            continue;
        }
        if ((s = mm64(h, n, H, L->w_up, I, L->b_up, t1)) != RC_OK)
            goto done;
        if (c->gated_mlp) {
            if ((s = mm64(h, n, H, L->w_gate, I, L->b_gate, t2)) != RC_OK)
                goto done;
            for (int64_t i = 0; i < n * I; i++)
                t2[i] = act64(c->act, t2[i]) * t1[i];
            if ((s = mm64(t2, n, I, L->w_down, H, L->b_down, h)) != RC_OK)
                goto done;
        } else {
            for (int64_t i = 0; i < n * I; i++)
                t1[i] = act64(c->act, t1[i]);
            if ((s = mm64(t1, n, I, L->w_down, H, L->b_down, h)) != RC_OK)
                goto done;
        }
        if (c->post_norm || c->sandwich_norm) {
            norm64(c, h, n, c->sandwich_norm ? L->post_mlp_ln_w : L->ln2_w, L->ln2_b, t3);
            memcpy(h, t3, (size_t)(n * H) * sizeof *h);
        }
        for (int64_t i = 0; i < n * H; i++)
            x[i] += c->parallel_residual ? h[i] + t3[i] : h[i];
    }
    for (int64_t i = 0; i < n_out; i++) {
        if (rows[i] < 0 || rows[i] >= n || targets[i] < 0 || targets[i] >= V) {
            s = rc_errorf(RC_ERR_USAGE, "fp64 reference: output row or target out of range");
            goto done;
        }
        norm64(c, x + rows[i] * H, 1, w->lnf_w, w->lnf_b, h);
        if ((s = mm64(h, 1, H, w->lm_head, V, (rc_wt){0}, logit)) != RC_OK)
            goto done;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++) {
            logit[v] = capped(logit[v] / head_norm[v], c->final_softcap) / temperature;
            mx = fmax(mx, logit[v]);
        }
        for (int64_t v = 0; v < V; v++)
            sum += exp(logit[v] - mx);
        out[i] = logit[targets[i]] - mx - log(sum);
    }
done:
    free(x);
    free(h);
    free(qkv);
    free(att);
    free(t1);
    free(t2);
    free(t3);
    free(logit);
    free(slopes);
    free(head_norm);
    return s;
}
