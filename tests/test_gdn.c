/* The Gated DeltaNet ops (src/engine/gdn.c) against transformers' own
 * functions, bit for bit, in fp32 and bf16 (data/fixtures/gdn_ops/,
 * tools/fixtures/make_gdn_op_fixtures.py: the "libm" run, where torch's exp is glibc's
 * expf, the only change to PyTorch's arithmetic; its docstring says why), and
 * both forms of the delta rule against the exact (fp64) recurrence, with
 * PyTorch's unchanged run beside them. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gdn.h"
#include "ops_inline.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static const char *const k_dt[] = {"f32", "bf16"};
static const rc_dtype k_rdt[] = {RC_F32, RC_BF16};

/* the fixture's shapes (its metadata "shape", checked against the tensors' sizes below) */
#define T_FULL 130
#define HK 3
#define HV 3
#define DK 12
#define DV 10
static const int64_t k_lengths[] = {1, 7, 64, 70, 130};
#define N_LENGTHS 5
#define INIT_T 20
#define PREFILL 64
#define GQA_T 20
#define GQA_HV 6
#define NATIVE_T 70

static rc_safetensors *open_fixture(void)
{
    char p[4096];
    rc_safetensors *st;
    rc_test_source_path(p, sizeof p, "data/fixtures/gdn_ops/gdn_ops.safetensors");
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

/* tensor "<dt>.<what>" as fp32 values; its element count must be n */
static float *get(rc_safetensors *st, const char *dt, const char *what, int64_t n)
{
    char name[160];
    snprintf(name, sizeof name, "%s%s%s", dt ? dt : "", dt ? "." : "", what);
    int64_t m;
    float *v = rc_test_st_f32(st, name, &m);
    ck_assert_msg(m == n, "%s: %lld values, expected %lld", name, (long long)m, (long long)n);
    return v;
}

/* how many of n values differ from want in their bits */
static int64_t ndiff(const float *got, const float *want, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += rc_f32_bits(got[i]) != rc_f32_bits(want[i]);
    return d;
}

#define CHECK_BITWISE(got, want, n, ...)                                                                         \
    do {                                                                                                         \
        const int64_t nd_ = ndiff((got), (want), (n));                                                           \
        char what_[200];                                                                                         \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                                              \
        printf("gdn %s: %lld of %lld values differ from the reference\n", what_, (long long)nd_, (long long)(n)); \
        fflush(stdout);                                                                                          \
        ck_assert_msg(nd_ == 0, "%s: %lld of %lld values differ", what_, (long long)nd_, (long long)(n));       \
    } while (0)

static const rc_gdn_dims k_dims = {HK, HV, DK, DV};

typedef struct {
    float *q, *k, *v, *g, *beta;
} inputs;

static inputs get_inputs(rc_safetensors *st, const char *dt)
{
    inputs in = {get(st, dt, "q", T_FULL * HK * DK), get(st, dt, "k", T_FULL * HK * DK),
                 get(st, dt, "v", T_FULL * HV * DV), get(st, dt, "g", T_FULL * HV),
                 get(st, dt, "beta", T_FULL * HV)};
    return in;
}

static void free_inputs(inputs *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->g);
    free(in->beta);
}

/* g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b) */
START_TEST(test_gdn_gates)
{
    rc_safetensors *st = open_fixture();
    const char *dt = k_dt[_i];
    const int64_t n = T_FULL * HV;
    float *a = get(st, dt, "a", n), *b = get(st, dt, "b", n), *al = get(st, dt, "A_log", HV),
          *db = get(st, dt, "dt_bias", HV), *g = get(st, dt, "g", n), *beta = get(st, dt, "beta", n);
    float *og = malloc(sizeof(float) * (size_t)n), *ob = malloc(sizeof(float) * (size_t)n);
    rc_gdn_gates(a, b, T_FULL, HV, al, db, k_rdt[_i], og, ob);
    CHECK_BITWISE(og, g, n, "%s gates g", dt);
    CHECK_BITWISE(ob, beta, n, "%s gates beta", dt);
    free(a), free(b), free(al), free(db), free(g), free(beta), free(og), free(ob);
    rc_st_close(st);
}
END_TEST

/* the fixture's generated values: ((i * 7919) % 2003 - 1001) / 1000 in fp32 */
static float *gen_values(int64_t n)
{
    float *x = malloc(sizeof(float) * (size_t)n);
    ck_assert(x != NULL);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 7919) % 2003 - 1001) / 1000.0f;
    return x;
}

/* torch's fp32 sum orders (rco_tsum_*) at the layer's real sizes: over the rows of [n, m] (the sums over
 * dk: m >= 32 takes the grouped columns' order, m < 8 the scalar kernel's) and over n contiguous values */
START_TEST(test_gdn_sum_orders)
{
    rc_safetensors *st = open_fixture();
    const int64_t outer[][2] = {{128, 128}, {128, 40}, {300, 10}, {64, 6}}, inner[] = {5, 37, 128, 1000};
    char name[64];
    for (int c = 0; c < 4; c++) {
        const int64_t n = outer[c][0], m = outer[c][1];
        float *x = gen_values(n * m), *o = malloc(sizeof(float) * (size_t)m);
        for (int64_t j = 0; j < m; j++)
            o[j] = rco_tsum_outer(x, n, m, j, m);
        snprintf(name, sizeof name, "sum.outer%lldx%lld", (long long)n, (long long)m);
        float *want = get(st, "f32", name, m);
        CHECK_BITWISE(o, want, m, "sum over the %lld rows of %lld columns", (long long)n, (long long)m);
        free(x), free(o), free(want);
    }
    for (int c = 0; c < 4; c++) {
        float *x = gen_values(inner[c]), o = rco_tsum_inner(x, inner[c]);
        snprintf(name, sizeof name, "sum.inner%lld", (long long)inner[c]);
        float *want = get(st, "f32", name, 1);
        CHECK_BITWISE(&o, want, 1, "sum of %lld contiguous values", (long long)inner[c]);
        free(x), free(want);
    }
    rc_st_close(st);
}
END_TEST

/* l2norm over 12 and over 128 values (the inner sum's tail and its lanes) */
START_TEST(test_gdn_l2norm)
{
    rc_safetensors *st = open_fixture();
    const struct {
        const char *x, *out;
        int64_t n, d;
    } c[] = {{"l2.x", "l2.out", 16, DK}, {"l2.x128", "l2.out128", 2, 128}};
    for (int i = 0; i < 2; i++) {
        float *x = get(st, "f32", c[i].x, c[i].n * c[i].d), *want = get(st, "f32", c[i].out, c[i].n * c[i].d);
        float *o = malloc(sizeof(float) * (size_t)(c[i].n * c[i].d));
        ck_assert(rc_gdn_l2norm(x, c[i].n, c[i].d, o) == RC_OK);
        CHECK_BITWISE(o, want, c[i].n * c[i].d, "l2norm over %lld values", (long long)c[i].d);
        free(x), free(want), free(o);
    }
    rc_st_close(st);
}
END_TEST

START_TEST(test_gdn_gated_rmsnorm)
{
    rc_safetensors *st = open_fixture();
    const char *dt = k_dt[_i];
    const int64_t n = 16;
    float *x = get(st, dt, "norm_x", n * DV), *z = get(st, dt, "norm_z", n * DV), *w = get(st, dt, "norm_w", DV);
    float *want = get(st, dt, "norm.out", n * DV), *o = malloc(sizeof(float) * (size_t)(n * DV));
    ck_assert(rc_gdn_gated_rmsnorm(x, z, n, DV, w, 1e-6f, k_rdt[_i], o) == RC_OK);
    CHECK_BITWISE(o, want, n * DV, "%s gated RMSNorm", dt);
    free(x), free(z), free(w), free(want), free(o);
    rc_st_close(st);
}
END_TEST

/* the conv over the whole sequence, and a cached prefill of P tokens then one step per token */
START_TEST(test_gdn_conv)
{
    rc_safetensors *st = open_fixture();
    const char *dt = k_dt[_i];
    const int64_t C = 16, K = 4, T = 12;
    float *x = get(st, dt, "conv.x", T * C), *w = get(st, dt, "conv.w", C * K);
    float *o = malloc(sizeof(float) * (size_t)(T * C)), *state = calloc((size_t)(C * K), sizeof(float));
    float *want = get(st, dt, "conv.full", T * C);
    ck_assert(rc_gdn_conv(x, T, C, w, K, k_rdt[_i], o, NULL) == RC_OK);
    CHECK_BITWISE(o, want, T * C, "%s conv, whole sequence", dt);
    free(want);
    const int64_t prefills[] = {3, 9};
    for (int p = 0; p < 2; p++) {
        const int64_t P = prefills[p];
        char name[64];
        memset(state, 0, sizeof(float) * (size_t)(C * K)); /* a new sequence */
        ck_assert(rc_gdn_conv(x, P, C, w, K, k_rdt[_i], o, state) == RC_OK);
        for (int64_t t = P; t < T; t++)
            rc_gdn_conv_step(x + t * C, C, w, K, k_rdt[_i], state, o + t * C);
        snprintf(name, sizeof name, "conv.prefill%lld", (long long)P);
        want = get(st, dt, name, T * C);
        CHECK_BITWISE(o, want, T * C, "%s conv, prefill of %lld then steps", dt, (long long)P);
        free(want);
        snprintf(name, sizeof name, "conv.state%lld", (long long)P);
        want = get(st, dt, name, C * K);
        CHECK_BITWISE(state, want, C * K, "%s conv state after prefill %lld and steps", dt, (long long)P);
        free(want);
    }
    free(x), free(w), free(o), free(state);
    rc_st_close(st);
}
END_TEST

/* the chunked form: chunks of 64 and 16, every length (the outputs of a length are the first rows of
 * the 130-token run; the final state of each length), and from a given state */
START_TEST(test_gdn_chunked)
{
    rc_safetensors *st = open_fixture();
    const char *dt = k_dt[_i];
    inputs in = get_inputs(st, dt);
    const int64_t chunks[] = {64, 16}, no = T_FULL * HV * DV, ns = HV * DK * DV;
    float *o = malloc(sizeof(float) * (size_t)no), *s = malloc(sizeof(float) * (size_t)ns);
    for (int c = 0; c < 2; c++) {
        const int64_t cs = chunks[c];
        char name[64];
        snprintf(name, sizeof name, "chunk%lld.out", (long long)cs);
        float *want = get(st, dt, name, no);
        for (int l = 0; l < N_LENGTHS; l++) {
            const int64_t L = k_lengths[l];
            ck_assert(rc_gdn_chunked(&k_dims, in.q, in.k, in.v, in.g, in.beta, L, cs, k_rdt[_i], NULL, s, o) == RC_OK);
            CHECK_BITWISE(o, want, L * HV * DV, "%s chunked (chunk %lld), length %lld", dt, (long long)cs,
                          (long long)L);
            snprintf(name, sizeof name, "%s.chunk%lld.state%lld", dt, (long long)cs, (long long)L);
            if (rc_st_find(st, name)) {
                float *ws = get(st, NULL, name, ns);
                CHECK_BITWISE(s, ws, ns, "%s chunked (chunk %lld), final state of length %lld", dt, (long long)cs,
                              (long long)L);
                free(ws);
            }
        }
        free(want);
    }
    float *init = get(st, dt, "init", ns), *want = get(st, dt, "chunk16.init.out", INIT_T * HV * DV);
    float *ws = get(st, dt, "chunk16.init.state", ns);
    ck_assert(rc_gdn_chunked(&k_dims, in.q, in.k, in.v, in.g, in.beta, INIT_T, 16, k_rdt[_i], init, s, o) == RC_OK);
    CHECK_BITWISE(o, want, INIT_T * HV * DV, "%s chunked (chunk 16) from a given state", dt);
    CHECK_BITWISE(s, ws, ns, "%s chunked (chunk 16) from a given state, final state", dt);
    free(init), free(want), free(ws), free(o), free(s);
    free_inputs(&in);
    rc_st_close(st);
}
END_TEST

/* the recurrent form over 130 tokens from zeros and over 20 from a given state */
START_TEST(test_gdn_recurrent)
{
    rc_safetensors *st = open_fixture();
    const char *dt = k_dt[_i];
    inputs in = get_inputs(st, dt);
    const int64_t no = T_FULL * HV * DV, ns = HV * DK * DV;
    float *o = malloc(sizeof(float) * (size_t)no), *s = calloc((size_t)ns, sizeof(float));
    float *want = get(st, dt, "rec.out", no);
    ck_assert(rc_gdn_recurrent(&k_dims, in.q, in.k, in.v, in.g, in.beta, T_FULL, k_rdt[_i], RC_F32, s, o) == RC_OK);
    CHECK_BITWISE(o, want, no, "%s recurrent, 130 tokens", dt);
    free(want);
    float *init = get(st, dt, "init", ns), *ws = get(st, dt, "rec.init.state", ns);
    want = get(st, dt, "rec.init.out", INIT_T * HV * DV);
    memcpy(s, init, sizeof(float) * (size_t)ns);
    ck_assert(rc_gdn_recurrent(&k_dims, in.q, in.k, in.v, in.g, in.beta, INIT_T, k_rdt[_i], RC_F32, s, o) == RC_OK);
    CHECK_BITWISE(o, want, INIT_T * HV * DV, "%s recurrent from a given state", dt);
    CHECK_BITWISE(s, ws, ns, "%s recurrent from a given state, final state", dt);
    free(init), free(ws), free(want), free(o), free(s);
    free_inputs(&in);
    rc_st_close(st);
}
END_TEST

/* the sampler's path: a chunked prefill of 64 tokens, then one recurrent call per token with the
 * state kept in fp32, or (bf16) in bf16, between calls */
START_TEST(test_gdn_decode)
{
    rc_safetensors *st = open_fixture();
    const char *dt = k_dt[_i];
    inputs in = get_inputs(st, dt);
    const int64_t ns = HV * DK * DV, nd = (T_FULL - PREFILL) * HV * DV;
    float *o = malloc(sizeof(float) * (size_t)(T_FULL * HV * DV)), *s = malloc(sizeof(float) * (size_t)ns);
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    for (int sd = 0; sd <= _i; sd++) {
        const rc_dtype sdt = k_rdt[sd];
        char name[64];
        ck_assert(rc_gdn_chunked(&k_dims, in.q, in.k, in.v, in.g, in.beta, PREFILL, 64, k_rdt[_i], NULL, s, o) ==
                  RC_OK);
        for (int64_t i = 0; i < ns; i++)
            s[i] = rc_round_to(s[i], sdt);
        for (int64_t t = PREFILL; t < T_FULL; t++) /* the backend's decode step (the CUDA kernel's twin) */
            ck_assert(be->ops->gdn_step(be, &k_dims, in.q + t * HK * DK, in.k + t * HK * DK, in.v + t * HV * DV,
                                        in.g + t * HV, in.beta + t * HV, 1, k_rdt[_i], sdt, s,
                                        o + (t - PREFILL) * HV * DV) == RC_OK);
        snprintf(name, sizeof name, "decode.state_%s.out", k_dt[sd]);
        float *want = get(st, dt, name, nd);
        CHECK_BITWISE(o, want, nd, "%s decode after a chunked prefill, state %s", dt, k_dt[sd]);
        free(want);
        snprintf(name, sizeof name, "decode.state_%s.state", k_dt[sd]);
        want = get(st, dt, name, ns);
        CHECK_BITWISE(s, want, ns, "%s decode, final state %s", dt, k_dt[sd]);
        free(want);
    }
    free(o), free(s);
    rc_backend_destroy(be);
    free_inputs(&in);
    rc_st_close(st);
}
END_TEST

/* 3 key heads, 6 value heads (fp32) */
START_TEST(test_gdn_gqa)
{
    rc_safetensors *st = open_fixture();
    const rc_gdn_dims d = {HK, GQA_HV, DK, DV};
    const int64_t no = GQA_T * GQA_HV * DV, ns = GQA_HV * DK * DV;
    float *q = get(st, "f32", "gqa_q", GQA_T * HK * DK), *k = get(st, "f32", "gqa_k", GQA_T * HK * DK);
    float *v = get(st, "f32", "gqa_v", no), *g = get(st, "f32", "gqa_g", GQA_T * GQA_HV);
    float *beta = get(st, "f32", "gqa_beta", GQA_T * GQA_HV);
    float *o = malloc(sizeof(float) * (size_t)no), *s = calloc((size_t)ns, sizeof(float));
    float *want = get(st, "f32", "gqa.chunk.out", no), *ws = get(st, "f32", "gqa.chunk.state", ns);
    ck_assert(rc_gdn_chunked(&d, q, k, v, g, beta, GQA_T, 16, RC_F32, NULL, s, o) == RC_OK);
    CHECK_BITWISE(o, want, no, "GQA chunked");
    CHECK_BITWISE(s, ws, ns, "GQA chunked, final state");
    free(want), free(ws);
    want = get(st, "f32", "gqa.rec.out", no);
    ws = get(st, "f32", "gqa.rec.state", ns);
    memset(s, 0, sizeof(float) * (size_t)ns);
    ck_assert(rc_gdn_recurrent(&d, q, k, v, g, beta, GQA_T, RC_F32, RC_F32, s, o) == RC_OK);
    CHECK_BITWISE(o, want, no, "GQA recurrent");
    CHECK_BITWISE(s, ws, ns, "GQA recurrent, final state");
    free(q), free(k), free(v), free(g), free(beta), free(o), free(s), free(want), free(ws);
    rc_st_close(st);
}
END_TEST

/* a bf16 value's place on the ordered line of bf16 values (consecutive values differ by 1) */
static long long bf16_key(float x)
{
    const long long b = (long long)(rc_f32_bits(x) >> 16);
    return b & 0x8000 ? -(b & 0x7fff) : b;
}

/* the layer's mixer from its projections' outputs to out_proj's input (transformers' module, no cache) */
START_TEST(test_gdn_mixer)
{
    rc_safetensors *st = open_fixture();
    const char *dt = k_dt[_i];
    const rc_gdn_dims d = {2, 4, 8, 6};
    const int64_t T = 20, K = 4, rep = 2, C = 2 * 2 * 8 + 4 * 6;
    float *qkvz = get(st, dt, "layer.qkvz", T * d.hk * (2 * d.dk + 2 * rep * d.dv));
    float *ba = get(st, dt, "layer.ba", T * d.hk * 2 * rep), *w = get(st, dt, "layer.conv_w", C * K);
    float *al = get(st, dt, "layer.A_log", d.hv), *db = get(st, dt, "layer.dt_bias", d.hv);
    float *nw = get(st, dt, "layer.norm_w", d.dv), *want = get(st, dt, "layer.out", T * d.hv * d.dv);
    float *o = malloc(sizeof(float) * (size_t)(T * d.hv * d.dv));
    ck_assert(rc_gdn_mixer(&d, qkvz, ba, T, w, K, al, db, nw, 1e-6f, RC_GDN_CHUNK_DEFAULT, k_rdt[_i], o) == RC_OK);
    CHECK_BITWISE(o, want, T * d.hv * d.dv, "%s the layer's mixer (Qwen3NextGatedDeltaNet)", dt);
    free(want);
    /* with a cache: a prefill of 12 tokens, then one call per token */
    const int64_t P = 12, wq = d.hk * (2 * d.dk + 2 * rep * d.dv), wb = d.hk * 2 * rep;
    float *cs = malloc(sizeof(float) * (size_t)(C * K)), *ss = malloc(sizeof(float) * (size_t)(d.hv * d.dk * d.dv));
    want = get(st, dt, "layer.out_cached", T * d.hv * d.dv);
    ck_assert(rc_gdn_mixer_cached(&d, qkvz, ba, P, w, K, al, db, nw, 1e-6f, RC_GDN_CHUNK_DEFAULT, k_rdt[_i], RC_F32,
                                  true, cs, ss, o) == RC_OK);
    for (int64_t t = P; t < T; t++)
        ck_assert(rc_gdn_mixer_cached(&d, qkvz + t * wq, ba + t * wb, 1, w, K, al, db, nw, 1e-6f,
                                      RC_GDN_CHUNK_DEFAULT, k_rdt[_i], RC_F32, false, cs, ss,
                                      o + t * d.hv * d.dv) == RC_OK);
    CHECK_BITWISE(o, want, T * d.hv * d.dv, "%s the layer's mixer with a cache (prefill 12, then steps)", dt);
    free(cs), free(ss);
    free(qkvz), free(ba), free(w), free(al), free(db), free(nw), free(want), free(o);
    rc_st_close(st);
}
END_TEST

/* largest |x - ref| over n values, and the largest |ref| */
static double max_err(const float *x, const double *ref, int64_t n, double *scale)
{
    double m = 0.0, s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - ref[i]);
        m = e > m ? e : m;
        s = fabs(ref[i]) > s ? fabs(ref[i]) : s;
    }
    if (scale)
        *scale = s;
    return m;
}

/* The exact reference is the recurrence in fp64 (rc_gdn_recurrent64) on the fixture's fp32 inputs.
 * 1. The chunked form computed in fp64 (rc_gdn_chunked64: transformers' steps, its padding included)
 *    is the same function: it meets the recurrence to within 2^-40 of the largest output (fp64's own
 *    rounding, far below fp32's 2^-24), outputs and final state, for chunks of 64 and 16 and lengths
 *    that are and are not a multiple of the chunk.
 * 2. The fp32 forms (ours, bitwise transformers' with glibc's exp; and transformers' unchanged run,
 *    MKL's exp, over its first 70 tokens) are measured against it and printed; each is held to the
 *    fp32 scale of the computation, n u max|out| with n = T (dk + dv) the operations along one
 *    output's chain of updates and u = 2^-24. */
START_TEST(test_gdn_vs_fp64)
{
    rc_safetensors *st = open_fixture();
    inputs in = get_inputs(st, "f32");
    const int64_t no = T_FULL * HV * DV, ns = HV * DK * DV, nn = NATIVE_T * HV * DV;
    double *ref = malloc(sizeof(double) * (size_t)no), *s64 = calloc((size_t)ns, sizeof(double));
    double *c64o = malloc(sizeof(double) * (size_t)no), *c64s = malloc(sizeof(double) * (size_t)ns);
    double *r70 = malloc(sizeof(double) * (size_t)no), *s70 = calloc((size_t)ns, sizeof(double));
    ck_assert(rc_gdn_recurrent64(&k_dims, in.q, in.k, in.v, in.g, in.beta, T_FULL, s64, ref) == RC_OK);
    ck_assert(rc_gdn_recurrent64(&k_dims, in.q, in.k, in.v, in.g, in.beta, 70, s70, r70) == RC_OK);
    double scale = 0.0;
    for (int64_t i = 0; i < no; i++)
        scale = fmax(scale, fabs(ref[i]));
    const int64_t lens[] = {70, T_FULL}, chunks[] = {64, 16};
    for (int c = 0; c < 2; c++)
        for (int l = 0; l < 2; l++) {
            const int64_t L = lens[l];
            const double *ro = L == T_FULL ? ref : r70, *rs = L == T_FULL ? s64 : s70;
            ck_assert(rc_gdn_chunked64(&k_dims, in.q, in.k, in.v, in.g, in.beta, L, chunks[c], c64s, c64o) == RC_OK);
            double eo = 0.0, es = 0.0;
            for (int64_t i = 0; i < L * HV * DV; i++)
                eo = fmax(eo, fabs(c64o[i] - ro[i]));
            for (int64_t i = 0; i < ns; i++)
                es = fmax(es, fabs(c64s[i] - rs[i]));
            printf("gdn fp64 chunked (chunk %lld, %lld tokens) vs the fp64 recurrence: outputs %.3g, final state "
                   "%.3g (max |output| %.3g)\n",
                   (long long)chunks[c], (long long)L, eo, es, scale);
            fflush(stdout);
            ck_assert(eo <= ldexp(scale, -40) && es <= ldexp(scale, -40));
        }
    float *rec = malloc(sizeof(float) * (size_t)no), *c64 = malloc(sizeof(float) * (size_t)no);
    float *c16 = malloc(sizeof(float) * (size_t)no), *s = calloc((size_t)ns, sizeof(float));
    ck_assert(rc_gdn_recurrent(&k_dims, in.q, in.k, in.v, in.g, in.beta, T_FULL, RC_F32, RC_F32, s, rec) == RC_OK);
    ck_assert(rc_gdn_chunked(&k_dims, in.q, in.k, in.v, in.g, in.beta, T_FULL, 64, RC_F32, NULL, NULL, c64) == RC_OK);
    ck_assert(rc_gdn_chunked(&k_dims, in.q, in.k, in.v, in.g, in.beta, T_FULL, 16, RC_F32, NULL, NULL, c16) == RC_OK);
    float *nrec = get(st, NULL, "native.f32.rec.out", nn), *nc64 = get(st, NULL, "native.f32.chunk64.out", nn);
    const double e_rec = max_err(rec, ref, no, NULL), e_c64 = max_err(c64, ref, no, NULL);
    const double e_c16 = max_err(c16, ref, no, NULL);
    const double n_rec = max_err(nrec, ref, nn, NULL), n_c64 = max_err(nc64, ref, nn, NULL);
    const double o_rec = max_err(rec, ref, nn, NULL), o_c64 = max_err(c64, ref, nn, NULL);
    double d_rec = 0.0, d_c64 = 0.0;
    for (int64_t i = 0; i < nn; i++) {
        d_rec = fmax(d_rec, fabs((double)rec[i] - nrec[i]));
        d_c64 = fmax(d_c64, fabs((double)c64[i] - nc64[i]));
    }
    printf("gdn fp32 vs fp64, 130 tokens: recurrent %.3g, chunked 64 %.3g, chunked 16 %.3g\n", e_rec, e_c64, e_c16);
    printf("gdn fp32 vs fp64, first 70 tokens: ours recurrent %.3g / chunked 64 %.3g, transformers' unchanged "
           "run %.3g / %.3g; ours vs transformers' unchanged run %.3g / %.3g\n",
           o_rec, o_c64, n_rec, n_c64, d_rec, d_c64);
    for (int64_t h = 0; h < HV; h++) {
        double e[3] = {0.0, 0.0, 0.0}, gm = 0.0;
        for (int64_t t = 0; t < T_FULL; t++) {
            gm += in.g[t * HV + h] / T_FULL;
            for (int64_t j = 0; j < DV; j++) {
                const int64_t i = (t * HV + h) * DV + j;
                e[0] = fmax(e[0], fabs((double)rec[i] - ref[i]));
                e[1] = fmax(e[1], fabs((double)c64[i] - ref[i]));
                e[2] = fmax(e[2], fabs((double)c16[i] - ref[i]));
            }
        }
        printf("gdn fp32 vs fp64, head %lld (mean g %.3g): recurrent %.3g, chunked 64 %.3g, chunked 16 %.3g\n",
               (long long)h, gm, e[0], e[1], e[2]);
    }
    fflush(stdout);
    /* bf16: how far apart the two forms' outputs are (the sampler's recurrent decode against the
     * trainer's chunked forward, same inputs), in bf16 ulps */
    inputs ib = get_inputs(st, "bf16");
    float *brec = malloc(sizeof(float) * (size_t)no), *bc64 = malloc(sizeof(float) * (size_t)no);
    memset(s, 0, sizeof(float) * (size_t)ns);
    ck_assert(rc_gdn_recurrent(&k_dims, ib.q, ib.k, ib.v, ib.g, ib.beta, T_FULL, RC_BF16, RC_F32, s, brec) == RC_OK);
    ck_assert(rc_gdn_chunked(&k_dims, ib.q, ib.k, ib.v, ib.g, ib.beta, T_FULL, 64, RC_BF16, NULL, NULL, bc64) ==
              RC_OK);
    int64_t bdiff = 0, bmax = 0;
    for (int64_t i = 0; i < no; i++) {
        const int64_t u = llabs(bf16_key(brec[i]) - bf16_key(bc64[i]));
        bdiff += u != 0;
        bmax = u > bmax ? u : bmax;
    }
    printf("gdn bf16, 130 tokens: recurrent and chunked (64) outputs differ in %lld of %lld values (at most %lld "
           "bf16 ulps)\n",
           (long long)bdiff, (long long)no, (long long)bmax);
    fflush(stdout);
    free(brec), free(bc64);
    free_inputs(&ib);
    const double bound = (double)T_FULL * (DK + DV) * ldexp(scale, -24);
    ck_assert(e_rec <= bound && e_c64 <= bound && e_c16 <= bound && n_rec <= bound && n_c64 <= bound);
    free(ref), free(s64), free(c64o), free(c64s), free(r70), free(s70);
    free(rec), free(c64), free(c16), free(s), free(nrec), free(nc64);
    free_inputs(&in);
    rc_st_close(st);
}
END_TEST

static Suite *gdn_suite(void)
{
    Suite *s = suite_create("gdn");
    TCase *tc = tcase_create("vs_torch");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_gdn_gates, 0, 2);
    tcase_add_test(tc, test_gdn_sum_orders);
    tcase_add_test(tc, test_gdn_l2norm);
    tcase_add_loop_test(tc, test_gdn_gated_rmsnorm, 0, 2);
    tcase_add_loop_test(tc, test_gdn_conv, 0, 2);
    tcase_add_loop_test(tc, test_gdn_chunked, 0, 2);
    tcase_add_loop_test(tc, test_gdn_recurrent, 0, 2);
    tcase_add_loop_test(tc, test_gdn_decode, 0, 2);
    tcase_add_test(tc, test_gdn_gqa);
    tcase_add_loop_test(tc, test_gdn_mixer, 0, 2);
    tcase_add_test(tc, test_gdn_vs_fp64);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return rc_test_run(gdn_suite()); }
