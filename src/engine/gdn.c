/* The Gated DeltaNet ops (gdn.h); the per-output arithmetic is in
 * ops_inline.h. docs/numerics.md "Gated DeltaNet" states each rule. */
#include "gdn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_inline.h"
#include "util.h"

rc_status rc_gdn_dims_check(const rc_gdn_dims *d)
{
    if (d->hk < 1 || d->hv < 1 || d->dk < 1 || d->dv < 1)
        return rc_errorf(RC_ERR_UNSUPPORTED, "Gated DeltaNet: heads %lld / %lld, head dims %lld / %lld",
                         (long long)d->hk, (long long)d->hv, (long long)d->dk, (long long)d->dv);
    if (d->hv % d->hk != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "Gated DeltaNet: %lld value heads are not a multiple of %lld key heads",
                         (long long)d->hv, (long long)d->hk);
    int64_t n;
    if (!rc_mul_i64(d->hv, d->dk, &n) || !rc_mul_i64(n, d->dv, &n) || n > RC_MAX_ALLOC / 8)
        return rc_errorf(RC_ERR_NOMEM, "Gated DeltaNet: a state of %lld x %lld x %lld is too large", (long long)d->hv,
                         (long long)d->dk, (long long)d->dv);
    return RC_OK;
}

void rc_gdn_gates(const float *a, const float *b, int64_t T, int64_t hv, const float *A_log, const float *dt_bias,
                  rc_dtype dt, float *g, float *beta)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < hv; h++)
            rco_gdn_gate(a[t * hv + h], b[t * hv + h], A_log[h], dt_bias[h], dt, &g[t * hv + h], &beta[t * hv + h]);
}

rc_status rc_gdn_l2norm(const float *x, int64_t n, int64_t d, float *out)
{
    float *sq;
    RC_TRY(rc_alloc_aligned((void **)&sq, d, sizeof *sq, "l2norm scratch"));
    for (int64_t r = 0; r < n; r++)
        rco_gdn_l2norm_row(x + r * d, d, sq, out + r * d);
    free(sq);
    return RC_OK;
}

rc_status rc_gdn_gated_rmsnorm(const float *x, const float *z, int64_t n, int64_t d, const float *w, float eps,
                               rc_dtype dt, float *out)
{
    float *sq;
    RC_TRY(rc_alloc_aligned((void **)&sq, d, sizeof *sq, "gated RMSNorm scratch"));
    for (int64_t r = 0; r < n; r++)
        rco_gdn_gated_rmsnorm_row(x + r * d, z + r * d, d, w, eps, dt, sq, out + r * d);
    free(sq);
    return RC_OK;
}

rc_status rc_gdn_conv(const float *x, int64_t T, int64_t C, const float *w, int64_t K, rc_dtype dt, float *out,
                      float *state)
{
    float *taps;
    RC_TRY(rc_alloc_aligned((void **)&taps, K, sizeof *taps, "conv scratch"));
    for (int64_t c = 0; c < C; c++)
        rco_gdn_conv_channel(x + c, C, T, w + c * K, K, dt, out + c, C, state ? state + c * K : NULL, false, false,
                             taps);
    free(taps);
    return RC_OK;
}

void rc_gdn_conv_step(const float *x, int64_t C, const float *w, int64_t K, rc_dtype dt, float *state, float *out)
{
    for (int64_t c = 0; c < C; c++)
        rco_gdn_conv_channel(x + c, C, 1, w + c * K, K, dt, out + c, C, state + c * K, false, true, NULL);
}

/* the query's scaling: Python's dk ** 0.5 (recurrent: a division) and
 * dk ** -0.5 (chunked: a product), each rounded to fp32 as torch does with
 * a Python float */
float rc_gdn_qdiv(int64_t dk) { return (float)pow((double)dk, 0.5); }
static float q_mul(int64_t dk) { return (float)pow((double)dk, -0.5); }

int64_t rc_gdn_step_scratch(const rc_gdn_dims *d) { return d->dk * d->dv + 3 * d->dk + 2 * d->dv; }

rc_status rc_gdn_recurrent(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                           const float *beta, int64_t T, rc_dtype out_dt, rc_dtype state_dt, float *state,
                           float *out)
{
    RC_TRY(rc_gdn_dims_check(d));
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, rep = hv / hk;
    float *scratch;
    RC_TRY(rc_alloc_aligned((void **)&scratch, rc_gdn_step_scratch(d), sizeof *scratch, "recurrent scratch"));
    const float div = rc_gdn_qdiv(dk);
    for (int64_t h = 0; h < hv; h++)
        rco_gdn_recurrent_head(state + h * dk * dv, false, q + (h / rep) * dk, hk * dk, k + (h / rep) * dk, hk * dk,
                               v + h * dv, hv * dv, g + h, beta + h, hv, T, dk, dv, div, out_dt, state_dt, scratch,
                               out + h * dv, hv * dv);
    free(scratch);
    return RC_OK;
}

rc_status rc_cpu_gdn_step(rc_backend *be, const rc_gdn_dims *d, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, int64_t n, rc_dtype out_dt, rc_dtype state_dt,
                          float *state, float *out)
{
    (void)be;
    RC_TRY(rc_gdn_dims_check(d));
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, rep = hv / hk, ns = rc_gdn_step_scratch(d);
    float *scratch;
    RC_TRY(rc_alloc_aligned((void **)&scratch, ns, sizeof *scratch, "recurrent step scratch"));
    const float div = rc_gdn_qdiv(dk);
    for (int64_t i = 0; i < n * hv; i++) {
        const int64_t s = i / hv, h = i % hv;
        rco_gdn_recurrent_token(state + i * dk * dv, q + (s * hk + h / rep) * dk, k + (s * hk + h / rep) * dk,
                                v + i * dv, g[i], beta[i], dk, dv, div, out_dt, true, state_dt, scratch, out + i * dv);
    }
    free(scratch);
    return RC_OK;
}

rc_status rc_gdn_chunked(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                         const float *beta, int64_t T, int64_t chunk, rc_dtype out_dt, const float *init,
                         float *final_state, float *out)
{
    RC_TRY(rc_gdn_dims_check(d));
    if (chunk < 1 || chunk > 4096)
        return rc_errorf(RC_ERR_UNSUPPORTED, "Gated DeltaNet: chunk size %lld (1 to 4096)", (long long)chunk);
    if (T < 0 || T > ((int64_t)1 << 40))
        return rc_errorf(RC_ERR_INTERNAL, "Gated DeltaNet: %lld tokens", (long long)T);
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, rep = hv / hk, SN = dk * dv;
    float *buf; /* one value head's: the chunk's padded tokens, its products, the state */
    RC_TRY(rc_alloc_aligned((void **)&buf, rco_gdn_chunk_scratch(chunk, dk, dv), sizeof *buf,
                            "chunked delta rule scratch"));
    const float scale = q_mul(dk);
    for (int64_t h = 0; h < hv; h++)
        rco_gdn_chunked_head(q + (h / rep) * dk, hk * dk, k + (h / rep) * dk, hk * dk, v + h * dv, hv * dv, g + h,
                             beta + h, hv, T, chunk, dk, dv, scale, out_dt, init ? init + h * SN : NULL,
                             final_state ? final_state + h * SN : NULL, RC_F32, out + h * dv, hv * dv, buf);
    free(buf);
    return RC_OK;
}

rc_status rc_gdn_recurrent64(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                             const float *beta, int64_t T, double *state, double *out)
{
    RC_TRY(rc_gdn_dims_check(d));
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, rep = hv / hk;
    double *buf;
    RC_TRY(rc_alloc_aligned((void **)&buf, 2 * dk + dv, sizeof *buf, "fp64 recurrent scratch"));
    double *qn = buf, *kn = qn + dk, *kv = kn + dk;
    for (int64_t h = 0; h < hv; h++) {
        double *S = state + h * dk * dv;
        const int64_t kh = h / rep;
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + (t * hk + kh) * dk, *kt = k + (t * hk + kh) * dk;
            double sq = 0.0, sk = 0.0;
            for (int64_t i = 0; i < dk; i++) {
                sq += (double)qt[i] * qt[i];
                sk += (double)kt[i] * kt[i];
            }
            const double iq = 1.0 / sqrt(sq + 1e-6) / sqrt((double)dk), ik = 1.0 / sqrt(sk + 1e-6);
            for (int64_t i = 0; i < dk; i++) {
                qn[i] = qt[i] * iq;
                kn[i] = kt[i] * ik;
            }
            const double dec = exp((double)g[t * hv + h]), bt = beta[t * hv + h];
            for (int64_t i = 0; i < dk * dv; i++)
                S[i] *= dec;
            for (int64_t j = 0; j < dv; j++) {
                double a = 0.0;
                for (int64_t i = 0; i < dk; i++)
                    a += S[i * dv + j] * kn[i];
                kv[j] = ((double)v[(t * hv + h) * dv + j] - a) * bt;
            }
            for (int64_t i = 0; i < dk; i++)
                for (int64_t j = 0; j < dv; j++)
                    S[i * dv + j] += kn[i] * kv[j];
            for (int64_t j = 0; j < dv; j++) {
                double a = 0.0;
                for (int64_t i = 0; i < dk; i++)
                    a += S[i * dv + j] * qn[i];
                out[(t * hv + h) * dv + j] = a;
            }
        }
    }
    free(buf);
    return RC_OK;
}

rc_status rc_gdn_chunked64(const rc_gdn_dims *d, const float *q, const float *k, const float *v, const float *g,
                           const float *beta, int64_t T, int64_t chunk, double *final_state, double *out)
{
    RC_TRY(rc_gdn_dims_check(d));
    if (chunk < 1 || chunk > 4096 || T < 0 || T > ((int64_t)1 << 40))
        return rc_errorf(RC_ERR_UNSUPPORTED, "Gated DeltaNet: chunk size %lld, %lld tokens", (long long)chunk,
                         (long long)T);
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, rep = hv / hk, C = chunk;
    const int64_t nc = (T + C - 1) / C, Tp = nc * C;
    int64_t n;
    if (!rc_mul_i64(2 * dk + dv + 2, Tp, &n) || !rc_add_i64(n, 2 * C * C + C * (dk + 2 * dv) + dk * dv, &n))
        return rc_errorf(RC_ERR_NOMEM, "Gated DeltaNet: fp64 scratch for %lld tokens", (long long)T);
    double *buf;
    RC_TRY(rc_alloc_aligned((void **)&buf, n, sizeof *buf, "fp64 chunked scratch"));
    double *qn = buf, *kn = qn + Tp * dk, *vv = kn + Tp * dk, *bt = vv + Tp * dv, *cum = bt + Tp;
    double *A = cum + Tp, *Qk = A + C * C, *W = Qk + C * C, *U = W + C * dk, *Vn = U + C * dv, *S = Vn + C * dv;
    for (int64_t h = 0; h < hv; h++) {
        const int64_t kh = h / rep;
        memset(buf, 0, sizeof *buf * (size_t)((2 * dk + dv + 2) * Tp));
        for (int64_t t = 0; t < T; t++) {
            const float *qt = q + (t * hk + kh) * dk, *kt = k + (t * hk + kh) * dk;
            double sq = 0.0, sk = 0.0;
            for (int64_t i = 0; i < dk; i++) {
                sq += (double)qt[i] * qt[i];
                sk += (double)kt[i] * kt[i];
            }
            const double iq = 1.0 / sqrt(sq + 1e-6) / sqrt((double)dk), ik = 1.0 / sqrt(sk + 1e-6);
            for (int64_t i = 0; i < dk; i++) {
                qn[t * dk + i] = qt[i] * iq;
                kn[t * dk + i] = kt[i] * ik;
            }
            for (int64_t j = 0; j < dv; j++)
                vv[t * dv + j] = v[(t * hv + h) * dv + j];
            bt[t] = beta[t * hv + h];
        }
        for (int64_t c = 0; c < nc; c++) {
            double acc = 0.0;
            for (int64_t i = 0; i < C; i++) {
                const int64_t t = c * C + i;
                acc += t < T ? (double)g[t * hv + h] : 0.0;
                cum[t] = acc;
            }
        }
        memset(S, 0, sizeof *S * (size_t)(dk * dv));
        for (int64_t c = 0; c < nc; c++) {
            const int64_t t0 = c * C;
            const double *cc = cum + t0, *kc = kn + t0 * dk, *qc = qn + t0 * dk;
            /* A[i][j] = beta_i k_i.k_j exp(cum_i - cum_j), Qk[i][j] = q_i.k_j exp(cum_i - cum_j), j < i / j <= i */
            for (int64_t i = 0; i < C; i++)
                for (int64_t j = 0; j < C; j++) {
                    double dkk = 0.0, dqk = 0.0;
                    for (int64_t kk = 0; kk < dk; kk++) {
                        dkk += kc[i * dk + kk] * kc[j * dk + kk];
                        dqk += qc[i * dk + kk] * kc[j * dk + kk];
                    }
                    const double e = j <= i ? exp(cc[i] - cc[j]) : 0.0;
                    A[i * C + j] = j < i ? bt[t0 + i] * dkk * e : 0.0;
                    Qk[i * C + j] = dqk * e;
                }
            /* (I + A) U = beta v, (I + A) W = beta k exp(cum), forward substitution */
            for (int64_t i = 0; i < C; i++) {
                for (int64_t j = 0; j < dv; j++) {
                    double x = bt[t0 + i] * vv[(t0 + i) * dv + j];
                    for (int64_t m = 0; m < i; m++)
                        x -= A[i * C + m] * U[m * dv + j];
                    U[i * dv + j] = x;
                }
                for (int64_t kk = 0; kk < dk; kk++) {
                    double x = bt[t0 + i] * kc[i * dk + kk] * exp(cc[i]);
                    for (int64_t m = 0; m < i; m++)
                        x -= A[i * C + m] * W[m * dk + kk];
                    W[i * dk + kk] = x;
                }
            }
            /* v_new = U - W S; out = exp(cum) q S + Qk v_new; S = exp(cum_last) S + sum_i exp(cum_last - cum_i) k_i v_new_i */
            for (int64_t i = 0; i < C; i++)
                for (int64_t j = 0; j < dv; j++) {
                    double x = U[i * dv + j];
                    for (int64_t kk = 0; kk < dk; kk++)
                        x -= W[i * dk + kk] * S[kk * dv + j];
                    Vn[i * dv + j] = x;
                }
            for (int64_t i = 0; i < C; i++) {
                const int64_t t = t0 + i;
                if (t >= T)
                    continue;
                for (int64_t j = 0; j < dv; j++) {
                    double x = 0.0, y = 0.0;
                    for (int64_t kk = 0; kk < dk; kk++)
                        x += qc[i * dk + kk] * S[kk * dv + j];
                    for (int64_t m = 0; m <= i; m++)
                        y += Qk[i * C + m] * Vn[m * dv + j];
                    out[(t * hv + h) * dv + j] = exp(cc[i]) * x + y;
                }
            }
            const double last = cc[C - 1];
            for (int64_t kk = 0; kk < dk; kk++)
                for (int64_t j = 0; j < dv; j++) {
                    double x = 0.0;
                    for (int64_t i = 0; i < C; i++)
                        x += kc[i * dk + kk] * exp(last - cc[i]) * Vn[i * dv + j];
                    S[kk * dv + j] = S[kk * dv + j] * exp(last) + x;
                }
        }
        if (final_state)
            memcpy(final_state + h * dk * dv, S, sizeof *S * (size_t)(dk * dv));
    }
    free(buf);
    return RC_OK;
}

void rc_gdn_split_qkvz(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, float *mixed, float *z,
                       float *b, float *a)
{
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, rep = hv / hk;
    const int64_t w = 2 * dk + 2 * rep * dv, C = 2 * hk * dk + hv * dv;
    for (int64_t t = 0; t < T; t++)
        for (int64_t kh = 0; kh < hk; kh++) {
            const float *src = qkvz + (t * hk + kh) * w, *sba = ba + (t * hk + kh) * 2 * rep;
            float *m = mixed + t * C;
            memcpy(m + kh * dk, src, sizeof *m * (size_t)dk);
            memcpy(m + hk * dk + kh * dk, src + dk, sizeof *m * (size_t)dk);
            memcpy(m + 2 * hk * dk + kh * rep * dv, src + 2 * dk, sizeof *m * (size_t)(rep * dv));
            memcpy(z + (t * hv + kh * rep) * dv, src + 2 * dk + rep * dv, sizeof *z * (size_t)(rep * dv));
            memcpy(b + t * hv + kh * rep, sba, sizeof *b * (size_t)rep);
            memcpy(a + t * hv + kh * rep, sba + rep, sizeof *a * (size_t)rep);
        }
}

rc_status rc_gdn_mixer(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                       int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                       int64_t chunk, rc_dtype dt, float *out)
{
    RC_TRY(rc_gdn_dims_check(d));
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, C = 2 * hk * dk + hv * dv;
    int64_t n;
    if (T < 0 || K < 1 || !rc_mul_i64(T, 2 * C + 2 * hk * dk + 2 * hv * dv + 4 * hv, &n))
        return rc_errorf(RC_ERR_NOMEM, "Gated DeltaNet: mixer scratch for %lld tokens", (long long)T);
    float *buf;
    RC_TRY(rc_alloc_aligned((void **)&buf, n > 0 ? n : 1, sizeof *buf, "Gated DeltaNet mixer scratch"));
    float *mixed = buf, *conv = mixed + T * C, *q = conv + T * C, *k = q + T * hk * dk, *v = k + T * hk * dk;
    float *z = v + T * hv * dv, *b = z + T * hv * dv, *a = b + T * hv, *g = a + T * hv, *beta = g + T * hv;
    rc_gdn_split_qkvz(d, qkvz, ba, T, mixed, z, b, a);
    rc_status s = rc_gdn_conv(mixed, T, C, conv_w, K, dt, conv, NULL);
    for (int64_t t = 0; s == RC_OK && t < T; t++) {
        memcpy(q + t * hk * dk, conv + t * C, sizeof *q * (size_t)(hk * dk));
        memcpy(k + t * hk * dk, conv + t * C + hk * dk, sizeof *k * (size_t)(hk * dk));
        memcpy(v + t * hv * dv, conv + t * C + 2 * hk * dk, sizeof *v * (size_t)(hv * dv));
    }
    if (s == RC_OK) {
        rc_gdn_gates(a, b, T, hv, A_log, dt_bias, dt, g, beta);
        s = rc_gdn_chunked(d, q, k, v, g, beta, T, chunk, dt, NULL, NULL, mixed); /* mixed is free now */
    }
    if (s == RC_OK)
        s = rc_gdn_gated_rmsnorm(mixed, z, T * hv, dv, norm_w, eps, dt, out);
    free(buf);
    return s;
}

float rc_gdn_qmul(int64_t dk) { return q_mul(dk); }

rc_status rc_gdn_mix_prepare(const rc_gdn_mixer_args *m, rco_gdn_mix *a)
{
    if ((unsigned)m->form > RC_GDN_FORM_RECURRENT)
        return rc_errorf(RC_ERR_INTERNAL, "Gated DeltaNet: form %d", (int)m->form);
    RC_TRY(rc_gdn_dims_check(&m->d));
    if (m->T < 1 || m->T > ((int64_t)1 << 40) || m->K < 1)
        return rc_errorf(RC_ERR_NOMEM, "Gated DeltaNet: mixer scratch for %lld tokens", (long long)m->T);
    /* causal_conv1d_update and the recurrent step for one cached token */
    const bool step = m->T == 1 && !m->fresh && m->form == RC_GDN_FORM_HF;
    if (!(step || m->form == RC_GDN_FORM_RECURRENT) && (m->chunk < 1 || m->chunk > 4096))
        return rc_errorf(RC_ERR_UNSUPPORTED, "Gated DeltaNet: chunk size %lld (1 to 4096)", (long long)m->chunk);
    *a = (rco_gdn_mix){.qkvz = m->qkvz, .ba = m->ba, .conv_w = m->conv_w, .A_log = m->A_log, .dt_bias = m->dt_bias,
                       .norm_w = m->norm_w, .conv_state = m->conv_state, .state = m->state, .out = m->out,
                       .hk = m->d.hk, .hv = m->d.hv, .dk = m->d.dk, .dv = m->d.dv, .T = m->T, .K = m->K,
                       .chunk = m->chunk, .eps = m->eps, .qdiv = rc_gdn_qdiv(m->d.dk), .scale = q_mul(m->d.dk),
                       .dt = m->dt, .state_dt = m->state_dt, .fresh = m->fresh, .step = step,
                       .recurrent = step || m->form == RC_GDN_FORM_RECURRENT};
    return RC_OK;
}

rc_status rc_cpu_gdn_mixer(rc_backend *be, const rc_gdn_mixer_args *m)
{
    (void)be;
    rco_gdn_mix a;
    RC_TRY(rc_gdn_mix_prepare(m, &a));
    const int64_t hk = a.hk, hv = a.hv, dk = a.dk, dv = a.dv, T = a.T, C = 2 * hk * dk + hv * dv;
    const int64_t rs = rco_gdn_mix_rule_scratch(&a);
    int64_t n, sn = rs > a.K ? rs : a.K;
    sn = sn > dv ? sn : dv;
    if (!rc_mul_i64(T, C + 2 * hv, &n) || !rc_add_i64(n, sn, &n))
        return rc_errorf(RC_ERR_NOMEM, "Gated DeltaNet: mixer scratch for %lld tokens", (long long)T);
    float *buf; /* the conv's outputs [T][C], g, beta [T][hv], one thread's scratch */
    RC_TRY(rc_alloc_aligned((void **)&buf, n, sizeof *buf, "Gated DeltaNet mixer scratch"));
    a.conv = buf;
    a.g = a.conv + T * C;
    a.beta = a.g + T * hv;
    float *scratch = a.beta + T * hv;
    for (int64_t c = 0; c < C; c++)
        rco_gdn_mix_conv(&a, c, scratch);
    for (int64_t i = 0; i < T * hv; i++)
        rco_gdn_mix_gate(&a, i);
    for (int64_t h = 0; h < hv; h++)
        rco_gdn_mix_rule(&a, h, scratch);
    for (int64_t i = 0; i < T * hv; i++)
        rco_gdn_mix_norm(&a, i, scratch);
    free(buf);
    return RC_OK;
}

rc_status rc_cpu_gate_mul(rc_backend *be, float *x, const float *gate, int64_t n, rc_dtype gate_dt, rc_dtype out_dt)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        x[i] = rco_gate_sigmoid_mul(x[i], gate[i], gate_dt, out_dt);
    return RC_OK;
}

rc_status rc_gdn_mixer_form(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                            int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                            int64_t chunk, rc_dtype dt, rc_dtype state_dt, bool fresh, rc_gdn_form form,
                            float *conv_state, float *state, float *out)
{
    const rc_gdn_mixer_args m = {*d, qkvz, ba, T, conv_w, K, A_log, dt_bias, norm_w, eps, chunk, dt, state_dt, fresh,
                                 form, conv_state, state, out};
    return rc_cpu_gdn_mixer(NULL, &m);
}

rc_status rc_gdn_mixer_cached(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                              int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                              int64_t chunk, rc_dtype dt, rc_dtype state_dt, bool fresh, float *conv_state,
                              float *state, float *out)
{
    return rc_gdn_mixer_form(d, qkvz, ba, T, conv_w, K, A_log, dt_bias, norm_w, eps, chunk, dt, state_dt, fresh,
                             RC_GDN_FORM_HF, conv_state, state, out);
}
