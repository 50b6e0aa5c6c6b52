/* The fp8 KV cache (kv-cache=fp8_e4m3 / fp8_e5m2) against PyTorch and CUDA.
 *
 * data/fixtures/fp8/fp8.safetensors (tools/fixtures/make_fp8_fixtures.py; versions in
 * its README): the fp8 codes of 88590 float32 inputs (every bf16 bit pattern,
 * every fp8 midpoint and its float32 neighbours, overflow, subnormals, inf,
 * NaN, random bits) from torch's .to(float8_*) and from CUDA's
 * __nv_cvt_float_to_fp8(__NV_SATFINITE), the conversion vLLM stores with;
 * every code's value; and causal prefills of 24 tokens through an fp8 cache
 * computed with PyTorch eager ops. Conversions are compared bitwise; the
 * attention output within 1 ulp of bf16 (the GEMM-like sums' order, as
 * tests/test_ops.c), the cached keys and values bitwise. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static rc_safetensors *g_st;

static void open_file(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/fp8/fp8.safetensors");
    ck_assert_msg(rc_st_open_file(p, &g_st) == RC_OK, "%s", rc_last_error());
}

static float *get(const char *name, int64_t *n) { return rc_test_st_f32(g_st, name, n); }

static int32_t *get_i32(const char *name, int64_t *n)
{
    const rc_st_tensor *t = rc_st_find(g_st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    rc_numel(t->shape, t->ndim, n);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    ck_assert_msg(rc_st_read_i32(g_st, name, t->ndim, t->shape, v) == RC_OK, "%s", rc_last_error());
    return v;
}

/* float32 -> fp8 codes: RC_FP8_TORCH bitwise against torch's .to(), RC_FP8_SATFINITE
 * bitwise against CUDA's __nv_cvt_float_to_fp8(__NV_SATFINITE) */
START_TEST(test_convert)
{
    open_file();
    int64_t ne, nc;
    float *extra = get("convert.extra_x", &ne);
    int32_t *codes = get_i32("convert.codes", &nc);
    ck_assert_int_eq(nc, 65536 + ne);
    const char *names[4] = {"e4m3 torch", "e5m2 torch", "e4m3 SATFINITE", "e5m2 SATFINITE"};
    int64_t diff[4] = {0}, first[4] = {-1, -1, -1, -1}, sat_vs_torch = 0;
    for (int64_t i = 0; i < nc; i++) {
        const float x = i < 65536 ? rc_bits_f32((uint32_t)i << 16) : extra[i - 65536];
        const uint32_t c = (uint32_t)codes[i];
        for (int k = 0; k < 4; k++) {
            const uint8_t got = rc_f32_to_fp8(x, (k & 1) ? RC_FP8_E5M2 : RC_FP8_E4M3,
                                              k >= 2 ? RC_FP8_SATFINITE : RC_FP8_TORCH);
            const uint8_t want = (uint8_t)(c >> (8 * k));
            if (got != want && diff[k]++ == 0)
                first[k] = i;
        }
        sat_vs_torch += ((c >> 8) & 0xff) != (c >> 24);
    }
    for (int k = 0; k < 4; k++) {
        printf("fp8 %-15s %lld inputs, %lld differ bitwise\n", names[k], (long long)nc, (long long)diff[k]);
        if (diff[k]) {
            const int64_t i = first[k];
            const float x = i < 65536 ? rc_bits_f32((uint32_t)i << 16) : extra[i - 65536];
            ck_abort_msg("%s: %lld differ, first x = %a (bits %08x)", names[k], (long long)diff[k], (double)x,
                         rc_f32_bits(x));
        }
    }
    printf("fp8 e5m2: torch and SATFINITE differ on %lld inputs (overflow: inf / max; NaN's sign)\n",
           (long long)sat_vs_torch);
    ck_assert_int_gt(sat_vs_torch, 0); /* the fixture does exercise the difference */
    free(extra);
    free(codes);
    rc_st_close(g_st);
}
END_TEST

/* fp8 codes -> float32: bitwise against torch (NaN codes: NaN) */
START_TEST(test_decode)
{
    open_file();
    for (int f = 0; f < 2; f++) {
        int64_t n;
        float *want = get(f ? "decode.e5m2" : "decode.e4m3", &n);
        ck_assert_int_eq(n, 256);
        for (int c = 0; c < 256; c++) {
            const float got = rc_fp8_to_f32((uint8_t)c, f ? RC_FP8_E5M2 : RC_FP8_E4M3);
            ck_assert_msg(isnan(want[c]) ? isnan(got) : rc_f32_bits(got) == rc_f32_bits(want[c]),
                          "%s code 0x%02x: %a, torch %a", f ? "e5m2" : "e4m3", c, (double)got, (double)want[c]);
            if (!isnan(got)) /* every value round-trips to its code */
                ck_assert_int_eq(rc_f32_to_fp8(got, f ? RC_FP8_E5M2 : RC_FP8_E4M3, RC_FP8_TORCH), c);
        }
        free(want);
    }
    rc_st_close(g_st);
}
END_TEST

/* distance in bf16 values (both bf16 values) */
static int64_t ulp_bf16(float a, float b)
{
    int32_t ia = rc_f32_to_bf16(a), ib = rc_f32_to_bf16(b);
    ia = (ia & 0x8000) ? -(ia & 0x7fff) : ia;
    ib = (ib & 0x8000) ? -(ib & 0x7fff) : ib;
    return llabs((long long)ia - ib);
}

enum { T = 24, NH = 4, NKV = 2, D = 64 };

/* One causal prefill of T tokens through the backends' attention op with an
 * fp8 KV cache (kv->quant), against PyTorch eager on keys and values that
 * went through vLLM's quantisation: the cached values bitwise, the output
 * within 1 bf16 ulp, for each kernel strategy. And kv-cache=auto leaves the
 * cache as the values were. */
START_TEST(test_attention)
{
    open_file();
    const int c = _i;
    char name[64];
#define GET(x, v)                                                                                                   \
    snprintf(name, sizeof name, "attn.c%d.%s", c, x);                                                              \
    float *v = get(name, &n)
    int64_t n;
    GET("q", q);
    GET("k", k);
    GET("v", v);
    GET("kd", kd);
    GET("vd", vd);
    GET("out", want);
#undef GET
    double scale;
    snprintf(name, sizeof name, "attn.c%d.scale", c);
    ck_assert(rc_st_read_f64(g_st, name, 1, (int64_t[]){1}, &scale) == RC_OK);
    int32_t e5m2;
    snprintf(name, sizeof name, "attn.c%d.e5m2", c);
    ck_assert(rc_st_read_i32(g_st, name, 1, (int64_t[]){1}, &e5m2) == RC_OK);
    const rc_kv_quant quant = e5m2 ? RC_KV_FP8_E5M2 : RC_KV_FP8_E4M3;
    const float s = (float)scale;
    /* the scalar rule first: every key and value bitwise */
    int64_t nbad = 0, nmoved = 0, nsat = 0;
    const rc_fp8_fmt fmt = e5m2 ? RC_FP8_E5M2 : RC_FP8_E4M3;
    for (int64_t i = 0; i < T * NKV * D; i++) {
        nbad += rco_kv_value(k[i], quant, s, RC_BF16) != kd[i] || rco_kv_value(v[i], quant, s, RC_BF16) != vd[i];
        nmoved += kd[i] != k[i];
        nsat += (rc_f32_to_fp8(k[i] / s, fmt, RC_FP8_SATFINITE) & 0x7f) == (e5m2 ? 0x7b : 0x7e);
    }
    ck_assert_msg(scale == 1.0 ? nsat == 0 : nsat > 0, "case %d: %lld keys saturate", c, (long long)nsat);
    ck_assert_msg(nbad == 0, "case %d: %lld keys / values differ from torch's quantise-dequantise", c,
                  (long long)nbad);
    ck_assert_int_gt(nmoved, 0);
    /* packed qkv rows [T, (NH + 2 NKV) D] */
    const int64_t W = (NH + 2 * NKV) * D;
    float *qkv = malloc(sizeof(float) * T * W), *out = malloc(sizeof(float) * T * NH * D);
    for (int64_t t = 0; t < T; t++) {
        memcpy(qkv + t * W, q + t * NH * D, sizeof(float) * NH * D);
        memcpy(qkv + t * W + NH * D, k + t * NKV * D, sizeof(float) * NKV * D);
        memcpy(qkv + t * W + (NH + NKV) * D, v + t * NKV * D, sizeof(float) * NKV * D);
    }
    rc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_heads = NH, cfg.n_kv_heads = NKV, cfg.head_dim = D;
    const rc_attn_numerics an = {RC_BF16, RC_BF16, RC_BF16};
    const rc_attn_params ap = rc_attn_params_from_config(&cfg, NULL, RC_BF16, RC_BF16, &an);
    int64_t slot = 0, start = 0, nn = T, row0 = 0, pos[T], seq[T];
    for (int64_t t = 0; t < T; t++)
        pos[t] = t, seq[t] = 0;
    const rc_batch_desc bd = {.n_seq = 1, .slot = &slot, .start = &start, .n_new = &nn, .row0 = &row0,
                              .n_rows = T, .pos = pos, .seq_of_row = seq};
    const rc_kernels ks[3] = {RC_KERNELS_INVARIANT, RC_KERNELS_ENGINE, RC_KERNELS_BLAS};
    for (int ki = 0; ki < (rc_have_blas() ? 3 : 2); ki++) {
        rc_backend *be;
        ck_assert(rc_backend_cpu_create(1, ks[ki], &be) == RC_OK);
        for (int auto_ = 0; auto_ < 2; auto_++) {
            uint16_t kc[T * NKV * D], vc[T * NKV * D];
            rc_kv_cache kv = {.n_layers = 1, .n_slots = 1, .n_kv_heads = NKV, .max_len = T, .head_dim = D,
                              .dt = RC_BF16, .k16 = kc, .v16 = vc, .quant = auto_ ? RC_KV_AUTO : quant,
                              .k_scale = s, .v_scale = s, .deq_dt = RC_BF16};
            ck_assert_msg(be->ops->attention(be, qkv, &bd, &ap, &kv, 0, out) == RC_OK, "%s", rc_last_error());
            /* the cache, [NKV][T][D], holds the dequantised values (auto: the values) */
            for (int64_t h = 0; h < NKV; h++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t j = 0; j < D; j++) {
                        const int64_t src = (t * NKV + h) * D + j, dst = (h * T + t) * D + j;
                        ck_assert(rc_bf16_to_f32(kc[dst]) == (auto_ ? k : kd)[src]);
                        ck_assert(rc_bf16_to_f32(vc[dst]) == (auto_ ? v : vd)[src]);
                    }
            if (auto_)
                continue;
            int64_t umax = 0, ndiff = 0;
            for (int64_t i = 0; i < T * NH * D; i++) {
                const int64_t u = ulp_bf16(out[i], want[i]);
                umax = u > umax ? u : umax;
                ndiff += u != 0;
            }
            printf("fp8 attention case %d (%s, scale %g), %s kernels: max %lld ulp, %lld of %d differ bitwise\n", c,
                   e5m2 ? "e5m2" : "e4m3", scale, rc_kernels_name(ks[ki]), (long long)umax, (long long)ndiff,
                   T * NH * D);
            ck_assert_msg(umax <= 1, "case %d: attention output %lld ulp from torch", c, (long long)umax);
        }
        rc_backend_destroy(be);
    }
    free(q); free(k); free(v); free(kd); free(vd); free(want); free(qkv); free(out);
    rc_st_close(g_st);
}
END_TEST

/* The engine refuses an fp8 cache without a usable scale, and kv-cache=auto
 * (the default numerics) is the engine of before: checked end to end by
 * tests/test_cli.c (test_kv_cache). */
START_TEST(test_numerics_refused)
{
    char dir[4096];
    rc_test_source_path(dir, sizeof dir, "data/fixtures/neox_parallel");
    rc_model *m;
    ck_assert_msg(rc_model_load(dir, &m) == RC_OK, "%s", rc_last_error());
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    const float bad_scales[3] = {0.0f, -1.0f, INFINITY};
    for (int i = 0; i < 4; i++) {
        rc_numerics num = rc_numerics_fp32();
        num.dt = RC_BF16;
        num.kv_quant = i < 3 ? RC_KV_FP8_E4M3 : (rc_kv_quant)7;
        num.kv_scale = i < 3 ? bad_scales[i] : 1.0f;
        rc_engine *e = NULL;
        ck_assert_int_eq(rc_engine_create(m, be, &num, 1, 8, 8, &e), RC_ERR_USAGE);
        ck_assert(e == NULL);
    }
    rc_backend_destroy(be);
    rc_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("vs_pytorch");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_convert);
    tcase_add_test(tc, test_decode);
    tcase_add_loop_test(tc, test_attention, 0, 4);
    tcase_add_test(tc, test_numerics_refused);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
