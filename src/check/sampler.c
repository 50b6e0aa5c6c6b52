#include "sampler.h"

#include "cpu_ops.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rc_rng_seed(rc_rng *r, uint64_t seed, uint64_t a, uint64_t b)
{
    uint64_t x = seed;
    uint64_t h = splitmix64(&x) ^ (a * 0xd1342543de82ef95ull);
    h = splitmix64(&h) ^ (b * 0xaf251af3b0f025b5ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&h);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rc_rng_next(rc_rng *r) /* xoshiro256** */
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rc_rng_uniform(rc_rng *r) { return (double)(rc_rng_next(r) >> 11) * 0x1.0p-53; }

/* x[n] sorted descending (the values a comparison sort gives; -0 and +0 may
 * come in either order, equal as numbers), through tmp[n]: an LSD radix sort
 * of the floats' bits mapped to descending unsigned keys, 4 passes of 8 bits,
 * ~20x faster than qsort over a 49k vocabulary. No NaN (log-probs). */
static void sort_desc(float *x, int64_t n, float *tmp)
{
    uint32_t *a = (uint32_t *)x, *b = (uint32_t *)tmp;
    for (int64_t i = 0; i < n; i++) { /* ascending key = descending value */
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        a[i] = (u & 0x80000000u) ? u : ~(u | 0x80000000u) & 0xffffffffu;
    }
    for (int shift = 0; shift < 32; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++)
            count[((a[i] >> shift) & 0xffu) + 1]++;
        for (int k = 0; k < 256; k++)
            count[k + 1] += count[k];
        for (int64_t i = 0; i < n; i++)
            b[count[(a[i] >> shift) & 0xffu]++] = a[i];
        uint32_t *t = a;
        a = b;
        b = t;
    }
    for (int64_t i = 0; i < n; i++) { /* 4 passes: the keys are back in x */
        const uint32_t k = a[i];
        const uint32_t u = (k & 0x80000000u) ? k : ~k & 0x7fffffffu;
        memcpy(&x[i], &u, sizeof u);
    }
}

/* the smallest log-prob that top-k then top-p keep (-inf: keep all); work: 2V floats */
static float filter_cut(const float *lp, int64_t V, const rc_sampling *sp, float *work)
{
    float cut = -INFINITY;
    float *sorted = work;
    bool need_sort = (sp->top_k > 0 && sp->top_k < V) || sp->top_p < 1.0;
    if (!need_sort)
        return cut;
    memcpy(sorted, lp, (size_t)V * sizeof *sorted);
    sort_desc(sorted, V, work + V);
    int64_t n_keep = V;
    if (sp->top_k > 0 && sp->top_k < V) {
        cut = sorted[sp->top_k - 1];
        n_keep = sp->top_k;
        while (n_keep < V && sorted[n_keep] == cut) /* ties with the k-th stay */
            n_keep++;
    }
    if (sp->top_p < 1.0) {
        /* renormalise over the top-k survivors, then keep the most likely
         * tokens until their mass reaches top_p */
        double z = 0.0;
        for (int64_t i = 0; i < n_keep; i++)
            z += exp((double)sorted[i]);
        double mass = 0.0;
        int64_t i = 0;
        for (; i < n_keep; i++) {
            mass += exp((double)sorted[i]) / z;
            if (mass >= sp->top_p) {
                i++;
                break;
            }
        }
        if (i < 1)
            i = 1;
        if (i < n_keep)
            cut = sorted[i - 1];
    }
    return cut;
}

double rc_entropy(const float *lp, int64_t V)
{
    double h = 0.0;
    for (int64_t i = 0; i < V; i++)
        if (lp[i] != -INFINITY) {
            const double l = (double)lp[i];
            h -= rco_exp64(l) * l;
        }
    return h;
}

/* e[i] = exp(lp[i]) for the whole row (rco_exp64, 8 at a time: the exps of
 * every sum below, computed once), in work (2V floats = V doubles) */
static const double *row_exps(const float *lp, int64_t V, float *work)
{
    double *e = (double *)(void *)work;
    rc_exp64_floats(lp, V, e);
    return e;
}

/* The mass of the tokens top-k / top-p keep (lp >= cut), in order; with
 * `entropy`, also rc_entropy of the whole distribution (the same terms in the
 * same order) */
static double kept_mass(const float *lp, const double *e, int64_t V, float cut, int64_t *kept, double *entropy)
{
    double z = 0.0;
    *kept = 0;
    for (int64_t i = 0; i < V; i++)
        if (lp[i] >= cut) {
            z += e[i];
            (*kept)++;
        }
    if (entropy) {
        double h = 0.0;
        for (int64_t i = 0; i < V; i++)
            if (lp[i] != -INFINITY)
                h -= e[i] * (double)lp[i];
        *entropy = h;
    }
    return z;
}

int32_t rc_sample(const float *lp, int64_t V, const rc_sampling *sp, rc_rng *rng, float *work,
                  float *lp_processed, double *entropy)
{
    float cut = filter_cut(lp, V, sp, work);
    const double *e = row_exps(lp, V, work);
    int64_t kept;
    double z = kept_mass(lp, e, V, cut, &kept, entropy);
    double u = rc_rng_uniform(rng) * z, acc = 0.0;
    int32_t tok = -1;
    for (int64_t i = 0; i < V; i++) {
        if (lp[i] < cut || lp[i] == -INFINITY)
            continue;
        tok = (int32_t)i;
        acc += e[i];
        if (acc > u)
            break;
    }
    if (tok < 0) /* cannot happen with finite log-probs; fall back to argmax */
        for (int64_t i = 0; i < V; i++)
            if (tok < 0 || lp[i] > lp[tok])
                tok = (int32_t)i;
    /* one survivor (greedy): its renormalised probability is exactly 1 */
    *lp_processed = kept == 1 ? 0.0f : (float)((double)lp[tok] - log(z));
    return tok;
}

float rc_processed_logprob(const float *lp, int64_t V, const rc_sampling *sp, int32_t tok, float *work,
                           double *entropy)
{
    float cut = filter_cut(lp, V, sp, work);
    const double *e = row_exps(lp, V, work);
    int64_t kept;
    double z = kept_mass(lp, e, V, cut, &kept, entropy);
    if (lp[tok] < cut)
        return -INFINITY;
    return kept == 1 ? 0.0f : (float)((double)lp[tok] - log(z));
}

float rc_truncated_logprob(const float *lp, int64_t V, const rc_sampling *sp, int32_t tok, float *work,
                           bool *outside)
{
    float cut = filter_cut(lp, V, sp, work);
    *outside = lp[tok] < cut;
    if (*outside)
        cut = lp[tok];
    const double *e = row_exps(lp, V, work);
    int64_t kept;
    const double z = kept_mass(lp, e, V, cut, &kept, NULL);
    return kept == 1 ? 0.0f : (float)((double)lp[tok] - log(z));
}
