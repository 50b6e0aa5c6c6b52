/* The Gated DeltaNet ops (gdn.h); the per-output arithmetic is in
 * ops_inline.h. docs/numerics.md "Gated DeltaNet" states each rule. */
#include "gdn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_inline.h"
#include "util.h"

/* MKL's order for the small triangular solves (measured, docs/numerics.md):
 * rows in blocks of this many */
#define RC_GDN_TRSM_BLOCK 48

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
    for (int64_t c = 0; c < C; c++) {
        float *st = state ? state + c * K : NULL;
        for (int64_t t = 0; t < T; t++) {
            for (int64_t k = 0; k < K; k++) {
                const int64_t s = t - (K - 1) + k; /* before the call: the state's columns, or zeros */
                taps[k] = s >= 0 ? x[s * C + c] : st ? st[K + s] : 0.0f;
            }
            out[t * C + c] = rco_gdn_conv_out(taps, w + c * K, K, dt);
        }
        if (st) { /* the last K inputs: the state's tail, then the call's */
            for (int64_t k = 0; k < K; k++) {
                const int64_t s = T - K + k;
                taps[k] = s >= 0 ? x[s * C + c] : st[K + s];
            }
            memcpy(st, taps, sizeof *st * (size_t)K);
        }
    }
    free(taps);
    return RC_OK;
}

void rc_gdn_conv_step(const float *x, int64_t C, const float *w, int64_t K, rc_dtype dt, float *state, float *out)
{
    for (int64_t c = 0; c < C; c++) {
        float *st = state + c * K;
        for (int64_t k = 0; k + 1 < K; k++)
            st[k] = st[k + 1];
        st[K - 1] = x[c];
        out[c] = rco_gdn_conv_out(st, w + c * K, K, dt);
    }
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
        for (int64_t t = 0; t < T; t++)
            rco_gdn_recurrent_token(state + h * dk * dv, q + (t * hk + h / rep) * dk, k + (t * hk + h / rep) * dk,
                                    v + (t * hv + h) * dv, g[t * hv + h], beta[t * hv + h], dk, dv, div, out_dt,
                                    t == T - 1, state_dt, scratch, out + (t * hv + h) * dv);
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

/* C[M][N] = A B with A[i][kk] at A[i * ar + kk * ak], B[kk][j] at
 * B[kk * bk + j]: each output a chain of fused multiply-adds from 0 in kk
 * order (MKL's sgemm at these sizes, measured) */
static void mm_chain(const float *A, int64_t ar, int64_t ak, const float *B, int64_t bk, int64_t M, int64_t K,
                     int64_t N, float *Cm)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t kk = 0; kk < K; kk++)
                acc = fmaf(A[i * ar + kk * ak], B[kk * bk + j], acc);
            Cm[i * N + j] = acc;
        }
}

/* X [M][N] = L^-1 X for L [M][M] unit lower triangular (its diagonal and
 * upper part not read): torch.linalg.solve_triangular(upper=False,
 * unitriangular=True) as MKL's strsm computes it here: rows in blocks of 48;
 * a block first subtracts the product of its rows of L with all earlier
 * solved rows (one fused multiply-add chain from 0 per output, then one
 * subtraction), then substitutes forward inside the block, column by column
 * (x_i = fma(-L[i][c], x_c, x_i) for c ascending). */
static void trsm_unit_lower(const float *L, int64_t M, float *X, int64_t N)
{
    for (int64_t s = 0; s < M; s += RC_GDN_TRSM_BLOCK) {
        const int64_t e = s + RC_GDN_TRSM_BLOCK < M ? s + RC_GDN_TRSM_BLOCK : M;
        if (s > 0)
            for (int64_t i = s; i < e; i++)
                for (int64_t j = 0; j < N; j++) {
                    float acc = 0.0f;
                    for (int64_t c = 0; c < s; c++)
                        acc = fmaf(L[i * M + c], X[c * N + j], acc);
                    X[i * N + j] = X[i * N + j] - acc;
                }
        for (int64_t c = s; c < e; c++)
            for (int64_t i = c + 1; i < e; i++)
                for (int64_t j = 0; j < N; j++)
                    X[i * N + j] = fmaf(-L[i * M + c], X[c * N + j], X[i * N + j]);
    }
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
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, rep = hv / hk, C = chunk;
    const int64_t nc = (T + C - 1) / C, Tp = nc * C; /* padded as transformers pads: (C - T % C) % C zeros */
    /* scratch: per padded token qn, kn, kb [dk], vb [dv], cum; per chunk P, ut, attn [C][C], nv, vnew [C][dv],
     * tmp [max(C, dk)][dv] (the state's update key^T @ v_new is [dk][dv]), kcd, dkb, qd, kd [C][dk], e1 [C];
     * S [dk][dv], sq [dk] */
    const int64_t tr = C > dk ? C : dk;
    int64_t per_tok = 3 * dk + dv + 1, n;
    if (!rc_mul_i64(per_tok, Tp, &n) ||
        !rc_add_i64(n, 3 * C * C + 2 * C * dv + tr * dv + 4 * C * dk + C + dk * dv + dk, &n))
        return rc_errorf(RC_ERR_NOMEM, "Gated DeltaNet: scratch for %lld tokens", (long long)T);
    float *buf;
    RC_TRY(rc_alloc_aligned((void **)&buf, n, sizeof *buf, "chunked delta rule scratch"));
    float *qn = buf, *kn = qn + Tp * dk, *kb = kn + Tp * dk, *vb = kb + Tp * dk, *cum = vb + Tp * dv;
    float *P = cum + Tp, *ut = P + C * C, *attn = ut + C * C, *nv = attn + C * C, *vnew = nv + C * dv;
    float *tmp = vnew + C * dv, *kcd = tmp + tr * dv, *dkb = kcd + C * dk, *qd = dkb + C * dk, *kd = qd + C * dk;
    float *e1 = kd + C * dk, *S = e1 + C, *sq = S + dk * dv;
    const float scale = q_mul(dk);
    for (int64_t h = 0; h < hv; h++) {
        const int64_t kh = h / rep;
        /* fp32, l2norm, scaling, padding, beta applied */
        memset(buf, 0, sizeof *buf * (size_t)(per_tok * Tp));
        for (int64_t t = 0; t < T; t++) {
            rco_gdn_l2norm_row(q + (t * hk + kh) * dk, dk, sq, qn + t * dk);
            for (int64_t i = 0; i < dk; i++)
                qn[t * dk + i] = qn[t * dk + i] * scale;
            rco_gdn_l2norm_row(k + (t * hk + kh) * dk, dk, sq, kn + t * dk);
            const float bt = beta[t * hv + h];
            for (int64_t j = 0; j < dv; j++)
                vb[t * dv + j] = v[(t * hv + h) * dv + j] * bt;
            for (int64_t i = 0; i < dk; i++)
                kb[t * dk + i] = kn[t * dk + i] * bt;
        }
        /* the decay's cumulative sum in each chunk: torch's CPU cumsum accumulates in double */
        for (int64_t c = 0; c < nc; c++) {
            double acc = 0.0;
            for (int64_t i = 0; i < C; i++) {
                const int64_t t = c * C + i;
                acc += t < T ? (double)g[t * hv + h] : 0.0;
                cum[t] = (float)acc;
            }
        }
        if (init)
            memcpy(S, init + h * dk * dv, sizeof *S * (size_t)(dk * dv));
        else
            memset(S, 0, sizeof *S * (size_t)(dk * dv));
        for (int64_t c = 0; c < nc; c++) {
            const float *cc = cum + c * C, *qc = qn + c * C * dk, *kc = kn + c * C * dk;
            const float *kbc = kb + c * C * dk, *vbc = vb + c * C * dv;
            for (int64_t i = 0; i < C; i++) {
                e1[i] = expf(cc[i]);
                for (int64_t j = 0; j < C; j++)
                    P[i * C + j] = j <= i ? expf(cc[i] - cc[j]) : 0.0f; /* -inf masked, then exp */
            }
            /* ut = (k_beta @ key^T) * P; attn = (q @ key^T) * P: B[kk][j] = key[j][kk] */
            for (int64_t i = 0; i < C; i++)
                for (int64_t j = 0; j < C; j++) {
                    float a1 = 0.0f, a2 = 0.0f;
                    for (int64_t kk = 0; kk < dk; kk++) {
                        a1 = fmaf(kbc[i * dk + kk], kc[j * dk + kk], a1);
                        a2 = fmaf(qc[i * dk + kk], kc[j * dk + kk], a2);
                    }
                    ut[i * C + j] = a1 * P[i * C + j];
                    attn[i * C + j] = a2 * P[i * C + j];
                }
            for (int64_t i = 0; i < C; i++)
                for (int64_t kk = 0; kk < dk; kk++)
                    dkb[i * dk + kk] = kbc[i * dk + kk] * e1[i];
            memcpy(nv, vbc, sizeof *nv * (size_t)(C * dv));
            trsm_unit_lower(ut, C, nv, dv);
            memcpy(kcd, dkb, sizeof *kcd * (size_t)(C * dk));
            trsm_unit_lower(ut, C, kcd, dk);
            for (int64_t i = 0; i < C; i++)
                for (int64_t kk = 0; kk < dk; kk++) {
                    qd[i * dk + kk] = qc[i * dk + kk] * e1[i];
                    kd[i * dk + kk] = kc[i * dk + kk] * expf(cc[C - 1] - cc[i]);
                }
            const float cd = expf(cc[C - 1]);
            /* the scan: v_new = new_values - k_cumdecay @ S; out = q @ S + attn @ v_new;
             * S = S * decay + key^T @ v_new */
            mm_chain(kcd, dk, 1, S, dv, C, dk, dv, tmp);
            for (int64_t i = 0; i < C * dv; i++)
                vnew[i] = nv[i] - tmp[i];
            mm_chain(qd, dk, 1, S, dv, C, dk, dv, tmp);
            mm_chain(attn, C, 1, vnew, dv, C, C, dv, nv); /* nv is free now */
            for (int64_t i = 0; i < C; i++) {
                const int64_t t = c * C + i;
                if (t < T)
                    for (int64_t j = 0; j < dv; j++)
                        out[(t * hv + h) * dv + j] = rc_round_to(tmp[i * dv + j] + nv[i * dv + j], out_dt);
            }
            mm_chain(kd, 1, dk, vnew, dv, dk, C, dv, tmp);
            for (int64_t i = 0; i < dk * dv; i++)
                S[i] = S[i] * cd + tmp[i];
        }
        if (final_state)
            memcpy(final_state + h * dk * dv, S, sizeof *S * (size_t)(dk * dv));
    }
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

rc_status rc_gdn_mixer_form(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                            int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                            int64_t chunk, rc_dtype dt, rc_dtype state_dt, bool fresh, rc_gdn_form form,
                            float *conv_state, float *state, float *out)
{
    if ((unsigned)form > RC_GDN_FORM_RECURRENT)
        return rc_errorf(RC_ERR_INTERNAL, "Gated DeltaNet: form %d", (int)form);
    const bool step = T == 1 && !fresh && form == RC_GDN_FORM_HF; /* causal_conv1d_update and the recurrent step */
    RC_TRY(rc_gdn_dims_check(d));
    const int64_t hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, C = 2 * hk * dk + hv * dv;
    int64_t n;
    if (T < 1 || K < 1 || !rc_mul_i64(T, 2 * C + 2 * hk * dk + 2 * hv * dv + 4 * hv, &n))
        return rc_errorf(RC_ERR_NOMEM, "Gated DeltaNet: mixer scratch for %lld tokens", (long long)T);
    float *buf;
    RC_TRY(rc_alloc_aligned((void **)&buf, n, sizeof *buf, "Gated DeltaNet mixer scratch"));
    float *mixed = buf, *conv = mixed + T * C, *q = conv + T * C, *k = q + T * hk * dk, *v = k + T * hk * dk;
    float *z = v + T * hv * dv, *b = z + T * hv * dv, *a = b + T * hv, *g = a + T * hv, *beta = g + T * hv;
    rc_gdn_split_qkvz(d, qkvz, ba, T, mixed, z, b, a);
    if (fresh)
        memset(conv_state, 0, sizeof *conv_state * (size_t)(C * K));
    rc_status s = RC_OK;
    if (step)
        rc_gdn_conv_step(mixed, C, conv_w, K, dt, conv_state, conv);
    else
        s = rc_gdn_conv(mixed, T, C, conv_w, K, dt, conv, conv_state);
    for (int64_t t = 0; s == RC_OK && t < T; t++) {
        memcpy(q + t * hk * dk, conv + t * C, sizeof *q * (size_t)(hk * dk));
        memcpy(k + t * hk * dk, conv + t * C + hk * dk, sizeof *k * (size_t)(hk * dk));
        memcpy(v + t * hv * dv, conv + t * C + 2 * hk * dk, sizeof *v * (size_t)(hv * dv));
    }
    if (s == RC_OK) {
        rc_gdn_gates(a, b, T, hv, A_log, dt_bias, dt, g, beta);
        if (fresh && form == RC_GDN_FORM_RECURRENT)
            memset(state, 0, sizeof *state * (size_t)(hv * dk * dv));
        if (step || form == RC_GDN_FORM_RECURRENT) {
            s = rc_gdn_recurrent(d, q, k, v, g, beta, T, dt, state_dt, state, mixed);
        } else {
            s = rc_gdn_chunked(d, q, k, v, g, beta, T, chunk, dt, fresh ? NULL : state, state, mixed);
            for (int64_t i = 0; s == RC_OK && i < hv * dk * dv; i++)
                state[i] = rc_round_to(state[i], state_dt);
        }
    }
    if (s == RC_OK)
        s = rc_gdn_gated_rmsnorm(mixed, z, T * hv, dv, norm_w, eps, dt, out);
    free(buf);
    return s;
}

rc_status rc_gdn_mixer_cached(const rc_gdn_dims *d, const float *qkvz, const float *ba, int64_t T, const float *conv_w,
                              int64_t K, const float *A_log, const float *dt_bias, const float *norm_w, float eps,
                              int64_t chunk, rc_dtype dt, rc_dtype state_dt, bool fresh, float *conv_state,
                              float *state, float *out)
{
    return rc_gdn_mixer_form(d, qkvz, ba, T, conv_w, K, A_log, dt_bias, norm_w, eps, chunk, dt, state_dt, fresh,
                             RC_GDN_FORM_HF, conv_state, state, out);
}
