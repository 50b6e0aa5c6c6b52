/* Whole-distribution agreement of the two sides (docs/statistics.md "Distribution"):
 * one position's KL, total variation and top-1 agreement from the sampler's
 * and the trainer's full log-prob rows, and their summaries per length and
 * per position. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "results.h"
#include "util.h"

/* Neumaier's compensated sum: s + c is the running total */
static void nsum(double *s, double *c, double x)
{
    const double t = *s + x;
    if (fabs(*s) >= fabs(x))
        *c += (*s - t) + x;
    else
        *c += (x - t) + *s;
    *s = t;
}

/* phi(x) = e^x - 1 - x >= 0, to a few ulps: its Taylor series x^2 (1/2! +
 * x/3! + ...) for |x| < 1/2 (where expm1(x) - x would cancel), else
 * expm1(x) - x; +inf at x = +inf, at -inf: +inf (e^-inf - 1 + inf) */
static double phi(double x)
{
    if (fabs(x) < 0.5) {
        double s = 0.0, f = 1.0;
        double c[17];
        for (int k = 2; k <= 18; k++) { /* 1/k! */
            f *= (double)k;
            c[k - 2] = 1.0 / f;
        }
        for (int k = 16; k >= 0; k--) /* 0.5^17 / 19! < 1e-22: the rest is below an ulp */
            s = c[k] + x * s;
        return x * x * s;
    }
    return isinf(x) ? INFINITY : expm1(x) - x;
}
rc_dist_token rc_dist_row(const float *p_lp, const float *q_lp, int64_t V)
{
    rc_dist_token d = {0.0, 0.0, false, -1, -1};
    double ks = 0.0, kc = 0.0, ts = 0.0, tc = 0.0;
    bool nan = false, inf = false;
    float pm = -INFINITY, qm = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        const float a = p_lp[v], b = q_lp[v];
        if (isnan(a) || isnan(b)) {
            nan = true;
            break;
        }
        if (d.p_argmax < 0 || a > pm) {
            pm = a;
            d.p_argmax = (int32_t)v;
        }
        if (d.q_argmax < 0 || b > qm) {
            qm = b;
            d.q_argmax = (int32_t)v;
        }
        const double p = exp((double)a), q = exp((double)b);
        /* |p - q| without the cancellation of two close exps: from the larger
         * side, max(p, q) (1 - e^-|a - b|) = -max(p, q) expm1(-|a - b|) */
        if (a != b)
            nsum(&ts, &tc, a > b ? -p * expm1((double)b - (double)a) : -q * expm1((double)a - (double)b));
        /* KL term p (r - 1 - log r), r = q / p: p phi(b - a) (b - a: two floats' difference, exact in
         * double), q where p = 0 */
        if (p > 0.0) {
            if (b == -INFINITY)
                inf = true;
            else
                nsum(&ks, &kc, p * phi((double)b - (double)a));
        } else {
            nsum(&ks, &kc, q);
        }
    }
    if (nan)
        return (rc_dist_token){NAN, NAN, false, -1, -1};
    d.kl = inf ? INFINITY : ks + kc;
    d.tv = 0.5 * (ts + tc);
    d.top1 = d.p_argmax == d.q_argmax;
    return d;
}

rc_status rc_dist_stats(rc_len_result *lr, int64_t n_seq)
{
    rc_len_stats *st = &lr->st;
    st->dist = lr->dist_kl && lr->dist_tv && lr->dist_top1;
    st->dist_count = 0;
    st->kl_mean = st->kl_std = st->kl_min = st->kl_max = NAN;
    st->tv_mean = st->tv_std = st->tv_min = st->tv_max = NAN;
    st->top1_agree = NAN;
    free(lr->pos_kl_mean);
    free(lr->pos_tv_mean);
    free(lr->pos_top1_agree);
    lr->pos_kl_mean = lr->pos_tv_mean = lr->pos_top1_agree = NULL;
    if (!st->dist)
        return RC_OK;
    const int64_t L = lr->len;
    int64_t *pc = NULL;
    rc_status s = rc_calloc((void **)&pc, L + 1, sizeof *pc, "distribution");
    if (s == RC_OK)
        s = rc_calloc((void **)&lr->pos_kl_mean, L + 1, sizeof(double), "distribution");
    if (s == RC_OK)
        s = rc_calloc((void **)&lr->pos_tv_mean, L + 1, sizeof(double), "distribution");
    if (s == RC_OK)
        s = rc_calloc((void **)&lr->pos_top1_agree, L + 1, sizeof(double), "distribution");
    if (s != RC_OK) {
        free(pc);
        return s;
    }
    /* sums in token order (sequence-major), two-pass std */
    int64_t n = 0, agree = 0;
    double ksum = 0.0, tsum = 0.0, kmin = INFINITY, kmax = -INFINITY, tmin = INFINITY, tmax = -INFINITY;
    for (int64_t sq = 0; sq < n_seq; sq++)
        for (int64_t t = 0; t < L; t++) {
            const int64_t i = sq * L + t;
            if (lr->dist_top1[i] < 0)
                continue;
            const double k = lr->dist_kl[i], v = lr->dist_tv[i];
            n++;
            agree += lr->dist_top1[i];
            ksum += k;
            tsum += v;
            kmin = fmin(kmin, k);
            kmax = fmax(kmax, k);
            tmin = fmin(tmin, v);
            tmax = fmax(tmax, v);
            pc[t]++;
            lr->pos_kl_mean[t] += k;
            lr->pos_tv_mean[t] += v;
            lr->pos_top1_agree[t] += lr->dist_top1[i];
        }
    st->dist_count = n;
    if (n > 0) {
        st->kl_mean = ksum / (double)n;
        st->tv_mean = tsum / (double)n;
        double kv = 0.0, tv = 0.0;
        for (int64_t sq = 0; sq < n_seq; sq++)
            for (int64_t t = 0; t < L; t++) {
                const int64_t i = sq * L + t;
                if (lr->dist_top1[i] < 0)
                    continue;
                kv += (lr->dist_kl[i] - st->kl_mean) * (lr->dist_kl[i] - st->kl_mean);
                tv += (lr->dist_tv[i] - st->tv_mean) * (lr->dist_tv[i] - st->tv_mean);
            }
        st->kl_std = sqrt(kv / (double)n);
        st->tv_std = sqrt(tv / (double)n);
        st->kl_min = kmin;
        st->kl_max = kmax;
        st->tv_min = tmin;
        st->tv_max = tmax;
        st->top1_agree = (double)agree / (double)n;
    }
    for (int64_t t = 0; t < L; t++) {
        const double c = (double)pc[t];
        lr->pos_kl_mean[t] = pc[t] ? lr->pos_kl_mean[t] / c : NAN;
        lr->pos_tv_mean[t] = pc[t] ? lr->pos_tv_mean[t] / c : NAN;
        lr->pos_top1_agree[t] = pc[t] ? lr->pos_top1_agree[t] / c : NAN;
    }
    free(pc);
    return RC_OK;
}
