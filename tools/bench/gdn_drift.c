/* How the Gated DeltaNet rule's error grows with the position, at the op
 * level: one layer's delta rule over T tokens of random inputs (a slowly and
 * a fast decaying head, Qwen3-Next's head dims 128 / 128), each way of
 * computing it against the exact recurrence (fp64), by position bucket:
 * the recurrent form in fp32; in bf16 (bf16 inputs, output rounded) with the
 * state kept in fp32 and with the state rounded to bf16 after every token
 * (`state=dtype`, one call per token as a decode does); the chunked form
 * (chunk 64) in fp32 and bf16. Mean |output - exact| per bucket, per head.
 *
 *     build/gdn_drift [T]        (default 4096)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdn.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static double uniform(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
}

static float normal(void) { return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform())); }

enum { HK = 2, HV = 2, DK = 128, DV = 128, NWAYS = 5 };
static const char *const k_ways[NWAYS] = {"fp32 recurrent", "fp32 chunked 64", "bf16 recurrent, state fp32",
                                          "bf16 recurrent, state bf16", "bf16 chunked 64"};

int main(int argc, char **argv)
{
    const int64_t T = argc > 1 ? atoll(argv[1]) : 4096;
    if (T < 64 || T > (1 << 20)) {
        fprintf(stderr, "gdn_drift: T from 64 to 1048576\n");
        return 2;
    }
    const rc_gdn_dims d = {HK, HV, DK, DV};
    const int64_t nq = T * HK * DK, nv = T * HV * DV, ng = T * HV, ns = HV * DK * DV;
    float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nq);
    float *v = malloc(sizeof(float) * (size_t)nv), *g = malloc(sizeof(float) * (size_t)ng);
    float *beta = malloc(sizeof(float) * (size_t)ng), *out = malloc(sizeof(float) * (size_t)nv);
    float *qb = malloc(sizeof(float) * (size_t)nq), *kb = malloc(sizeof(float) * (size_t)nq);
    float *vb = malloc(sizeof(float) * (size_t)nv), *bb = malloc(sizeof(float) * (size_t)ng);
    float *s = malloc(sizeof(float) * (size_t)ns);
    double *ref = malloc(sizeof(double) * (size_t)nv), *s64 = calloc((size_t)ns, sizeof(double));
    if (!q || !k || !v || !g || !beta || !out || !qb || !kb || !vb || !bb || !s || !ref || !s64) {
        fprintf(stderr, "gdn_drift: out of memory\n");
        return 7;
    }
    /* head 0 decays slowly (g about -0.06 per token), head 1 fast (about -3) */
    for (int64_t i = 0; i < nq; i++) {
        q[i] = normal();
        k[i] = normal();
    }
    for (int64_t i = 0; i < nv; i++)
        v[i] = normal();
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < HV; h++) {
            const float a = normal(), x = a + 1.0f;
            const float sp = x > 20.0f ? x : log1pf(expf(x));
            g[t * HV + h] = -(h == 0 ? 0.05f : 2.5f) * sp;
            beta[t * HV + h] = 1.0f / (1.0f + expf(-normal()));
        }
    /* the bf16 run's inputs: the same values rounded to bf16 (g stays fp32, as the layer computes it) */
    for (int64_t i = 0; i < nq; i++) {
        qb[i] = rc_round_bf16(q[i]);
        kb[i] = rc_round_bf16(k[i]);
    }
    for (int64_t i = 0; i < nv; i++)
        vb[i] = rc_round_bf16(v[i]);
    for (int64_t i = 0; i < ng; i++)
        bb[i] = rc_round_bf16(beta[i]);
    static const int64_t edges[] = {0, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576};
    int nb = 0;
    while (nb + 1 < (int)(sizeof edges / sizeof edges[0]) && edges[nb] < T)
        nb++;
    double err[NWAYS][2][9] = {{{0}}}, mag[2][9] = {{0}};
    for (int w = 0; w < NWAYS; w++) {
        const bool bf = w >= 2;
        const float *qq = bf ? qb : q, *kk = bf ? kb : k, *vv = bf ? vb : v, *be = bf ? bb : beta;
        /* the exact recurrence on this run's inputs */
        memset(s64, 0, sizeof(double) * (size_t)ns);
        if (rc_gdn_recurrent64(&d, qq, kk, vv, g, be, T, s64, ref) != RC_OK)
            return 1;
        memset(s, 0, sizeof(float) * (size_t)ns);
        rc_status st = RC_OK;
        if (w == 0)
            st = rc_gdn_recurrent(&d, qq, kk, vv, g, be, T, RC_F32, RC_F32, s, out);
        else if (w == 1 || w == 4)
            st = rc_gdn_chunked(&d, qq, kk, vv, g, be, T, 64, w == 1 ? RC_F32 : RC_BF16, NULL, NULL, out);
        else
            for (int64_t t = 0; st == RC_OK && t < T; t++) /* one call per token, as a decode */
                st = rc_gdn_recurrent(&d, qq + t * HK * DK, kk + t * HK * DK, vv + t * HV * DV, g + t * HV,
                                      be + t * HV, 1, RC_BF16, w == 3 ? RC_BF16 : RC_F32, s, out + t * HV * DV);
        if (st != RC_OK) {
            fprintf(stderr, "gdn_drift: %s\n", rc_last_error());
            return 1;
        }
        for (int64_t t = 0; t < T; t++) {
            int b = 0;
            while (t >= edges[b + 1])
                b++;
            for (int64_t h = 0; h < HV; h++)
                for (int64_t j = 0; j < DV; j++) {
                    const int64_t i = (t * HV + h) * DV + j;
                    err[w][h][b] += fabs((double)out[i] - ref[i]);
                    if (w == 0)
                        mag[h][b] += fabs(ref[i]);
                }
        }
    }
    printf("Gated DeltaNet, %lld tokens, dk = dv = %d: mean |output - exact (fp64)| by position\n", (long long)T, DK);
    for (int h = 0; h < HV; h++) {
        printf("\nhead %d (%s decay)\n| way |", h, h == 0 ? "slow" : "fast");
        for (int b = 0; b < nb; b++)
            printf(" %lld-%lld |", (long long)edges[b], (long long)(edges[b + 1] < T ? edges[b + 1] : T) - 1);
        printf("\n|---|");
        for (int b = 0; b < nb; b++)
            printf("---|");
        printf("\n| (mean \\|exact\\|) |");
        for (int b = 0; b < nb; b++) {
            const int64_t hi = edges[b + 1] < T ? edges[b + 1] : T;
            printf(" %.2e |", mag[h][b] / (double)((hi - edges[b]) * DV));
        }
        printf("\n");
        for (int w = 0; w < NWAYS; w++) {
            printf("| %s |", k_ways[w]);
            for (int b = 0; b < nb; b++) {
                const int64_t hi = edges[b + 1] < T ? edges[b + 1] : T;
                printf(" %.2e |", err[w][h][b] / (double)((hi - edges[b]) * DV));
            }
            printf("\n");
        }
    }
    free(q), free(k), free(v), free(g), free(beta), free(out), free(qb), free(kb), free(vb), free(bb), free(s);
    free(ref), free(s64);
    return 0;
}
