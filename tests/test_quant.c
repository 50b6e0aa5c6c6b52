/* Quantized checkpoints as published (src/formats/quant.h), against
 * transformers' own code (tools/fixtures/make_quant_fixtures.py writes
 * data/fixtures/quant/):
 *  - the FP8 folder (F8_E4M3 + weight_scale_inv, 16 x 16 blocks, quantized by
 *    transformers' Fp8Quantize) reads bitwise as its copy dequantized by
 *    transformers' Fp8Dequantize, tensor by tensor, and a run (a full forward,
 *    bf16 and fp32 numerics) on both gives bitwise equal log-probs;
 *  - MXFP4 blocks and scales dequantize bitwise as
 *    convert_moe_packed_tensors (bf16 and fp32, the Inf of overflowing scales
 *    included), and an FP8 weight the blocks do not divide as the documented
 *    rule computed with torch ops;
 *  - hostile scales, scale shapes and block sizes are refused (RC_ERR_FORMAT,
 *    exit 4) with the file named. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "quant.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static char g_tmp[1024];

static void tmp_setup(void) { rc_test_fresh_dir(g_tmp, sizeof g_tmp, "/tmp"); }
static void tmp_teardown(void) { rc_test_rm_rf(g_tmp); }

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s", path);
    ck_assert(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static void slurp(const char *path, char **b, size_t *n)
{
    ck_assert_msg(rc_read_file(path, b, n, 1u << 24) == RC_OK, "%s", rc_last_error());
}

/* every tensor of the bf16 copy reads bitwise the same from the FP8 folder */
START_TEST(test_fp8_folder_weights)
{
    char p8[4096], pb[4096];
    rc_test_source_path(p8, sizeof p8, "data/fixtures/quant/fp8");
    rc_test_source_path(pb, sizeof pb, "data/fixtures/quant/fp8_bf16");
    rc_safetensors *a, *b;
    ck_assert_msg(rc_st_open_dir(p8, &a) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_st_open_dir(pb, &b) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(a->ntensors, b->ntensors);
    int64_t nq = 0, nvals = 0;
    for (int64_t i = 0; i < b->ntensors; i++) {
        const rc_st_tensor *tb = &b->tensors[i], *ta = rc_st_find(a, tb->name);
        ck_assert_msg(ta != NULL, "%s missing from the FP8 folder", tb->name);
        ck_assert_str_eq(ta->dtype_name, "BF16");
        ck_assert_str_eq(tb->dtype_name, "BF16");
        nq += ta->quant == RC_ST_Q_FP8_BLOCK;
        int64_t n;
        ck_assert(rc_numel(tb->shape, tb->ndim, &n));
        uint16_t *x = malloc(2 * (size_t)n), *y = malloc(2 * (size_t)n);
        ck_assert_msg(rc_st_read_weight_as(a, tb->name, tb->ndim, tb->shape, RC_BF16, x) == RC_OK, "%s",
                      rc_last_error());
        ck_assert(rc_st_read_weight_as(b, tb->name, tb->ndim, tb->shape, RC_BF16, y) == RC_OK);
        ck_assert_msg(memcmp(x, y, 2 * (size_t)n) == 0, "%s differs", tb->name);
        /* and through the fp32 path */
        float *fx = malloc(4 * (size_t)n), *fy = malloc(4 * (size_t)n);
        ck_assert(rc_st_read_weight(a, tb->name, tb->ndim, tb->shape, fx) == RC_OK);
        ck_assert(rc_st_read_weight(b, tb->name, tb->ndim, tb->shape, fy) == RC_OK);
        ck_assert_msg(memcmp(fx, fy, 4 * (size_t)n) == 0, "%s differs as fp32", tb->name);
        nvals += n;
        free(x);
        free(y);
        free(fx);
        free(fy);
    }
    /* the stored formats: the FP8 weights and their scales, counted from the file */
    int64_t f8 = 0, sc = 0;
    for (int k = 0; k < a->nstored; k++) {
        if (strcmp(a->stored[k].dtype_name, "F8_E4M3") == 0)
            f8 = a->stored[k].count;
        if (strcmp(a->stored[k].dtype_name, "F32") == 0)
            sc = a->stored[k].count;
    }
    ck_assert_int_eq(f8, nq);
    ck_assert_int_eq(sc, nq);
    ck_assert_str_eq(a->quant_method, "fp8");
    printf("fp8 folder: %lld tensors (%lld FP8 block-scaled), %lld values bitwise the bf16 copy's\n",
           (long long)b->ntensors, (long long)nq, (long long)nvals);
    ck_assert_int_gt(nq, 0);
    rc_st_close(a);
    rc_st_close(b);
}
END_TEST

/* a run on the FP8 folder equals a run on its dequantized copy bitwise */
START_TEST(test_fp8_folder_run)
{
    char p8[4096], pb[4096];
    rc_test_source_path(p8, sizeof p8, "data/fixtures/quant/fp8");
    rc_test_source_path(pb, sizeof pb, "data/fixtures/quant/fp8_bf16");
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be) == RC_OK);
    rc_model *m[2];
    ck_assert_msg(rc_model_load(p8, &m[0]) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_model_load(pb, &m[1]) == RC_OK, "%s", rc_last_error());
    const int64_t B = 2, L = 24, V = m[0]->cfg.vocab, R = B * L;
    int32_t tok[48];
    int64_t lens[2] = {L, L};
    uint64_t st = 30;
    for (int64_t i = 0; i < R; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((st >> 33) % (uint64_t)V);
    }
    for (int d = 0; d < 2; d++) {
        rc_numerics num = rc_numerics_fp32();
        num.dt = d ? RC_F32 : RC_BF16;
        float *out[2];
        for (int k = 0; k < 2; k++) {
            rc_engine *e;
            ck_assert_msg(rc_engine_create(m[k], be, &num, B, L, R, &e) == RC_OK, "%s", rc_last_error());
            out[k] = malloc(sizeof(float) * (size_t)(R * V));
            ck_assert(rc_full_forward(e, tok, lens, B, out[k]) == RC_OK);
            rc_engine_free(e);
        }
        int64_t diff = 0, finite = 0;
        for (int64_t i = 0; i < R * V; i++) {
            diff += rc_f32_bits(out[0][i]) != rc_f32_bits(out[1][i]);
            finite += isfinite(out[0][i]);
        }
        printf("fp8 folder run (%s): %lld of %lld log-probs differ from the bf16 copy's\n", d ? "fp32" : "bf16",
               (long long)diff, (long long)(R * V));
        ck_assert_int_eq(finite, R * V);
        ck_assert_int_eq(diff, 0);
        free(out[0]);
        free(out[1]);
    }
    rc_model_free(m[0]);
    rc_model_free(m[1]);
    rc_backend_destroy(be);
}
END_TEST

static rc_safetensors *open_ops(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/ops.safetensors");
    rc_safetensors *st;
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

START_TEST(test_mxfp4_op)
{
    rc_safetensors *st = open_ops();
    const rc_st_tensor *bl = rc_st_find(st, "mxfp4_blocks"), *sc = rc_st_find(st, "mxfp4_scales");
    const rc_st_tensor *ob = rc_st_find(st, "mxfp4_out_bf16"), *of = rc_st_find(st, "mxfp4_out_f32");
    ck_assert(bl && sc && ob && of && bl->ndim == 4);
    const int64_t E = bl->shape[0], R = bl->shape[1], G = bl->shape[2], n = E * R * G * 32;
    ck_assert(ob->shape[0] == E && ob->shape[1] == 32 * G && ob->shape[2] == R);
    uint16_t *y = malloc(2 * (size_t)n);
    float *yf = malloc(4 * (size_t)n);
    rc_mxfp4_dequant(bl->data, sc->data, E, R, G, RC_BF16, y);
    rc_mxfp4_dequant(bl->data, sc->data, E, R, G, RC_F32, yf);
    int64_t inf = 0, sub = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t r;
        uint32_t rf, gf;
        memcpy(&r, ob->data + 2 * i, 2);
        memcpy(&rf, of->data + 4 * i, 4);
        memcpy(&gf, yf + i, 4);
        ck_assert_msg(r == y[i], "bf16 element %lld: %04x, transformers %04x", (long long)i, y[i], r);
        ck_assert_msg(rf == gf, "fp32 element %lld: %08x, transformers %08x", (long long)i, gf, rf);
        inf += isinf(yf[i]);
        sub += yf[i] != 0 && fabsf(yf[i]) < 1.17549435e-38f;
    }
    printf("mxfp4: %lld values bitwise convert_moe_packed_tensors' (%lld Inf, %lld subnormal)\n", (long long)n,
           (long long)inf, (long long)sub);
    ck_assert_int_gt(inf, 0); /* the edges are in the case */
    ck_assert_int_gt(sub, 0);
    free(y);
    free(yf);
    rc_st_close(st);
}
END_TEST

START_TEST(test_fp8_op_ragged)
{
    rc_safetensors *st = open_ops();
    const rc_st_tensor *q = rc_st_find(st, "fp8_q"), *s = rc_st_find(st, "fp8_scale_bf16"),
                       *o = rc_st_find(st, "fp8_out_bf16");
    ck_assert(q && s && o);
    const int64_t rows = q->shape[0], cols = q->shape[1], b0 = 16, b1 = 16; /* the fixture's blocks */
    ck_assert(s->shape[0] == (rows + b0 - 1) / b0 && s->shape[1] == (cols + b1 - 1) / b1);
    ck_assert(rows % b0 != 0 && cols % b1 != 0); /* the case is ragged */
    float sf[64];
    ck_assert(s->shape[0] * s->shape[1] <= 64);
    for (int64_t k = 0; k < s->shape[0] * s->shape[1]; k++) {
        uint16_t h;
        memcpy(&h, s->data + 2 * k, 2);
        sf[k] = rc_bf16_to_f32(h);
    }
    uint16_t *y = malloc(2 * (size_t)(rows * cols));
    rc_fp8_block_dequant(q->data, sf, 1, rows, cols, b0, b1, RC_BF16, y);
    ck_assert(memcmp(y, o->data, 2 * (size_t)(rows * cols)) == 0);
    free(y);
    rc_st_close(st);
}
END_TEST

/* e4m3fn decoding of every code against torch's (the fixture's codes) is in
 * the op case above; here the 256 codes' structure: NaN only at 0x7F / 0xFF,
 * the largest 448 */
START_TEST(test_e4m3_codes)
{
    int nan = 0;
    float mx = 0;
    for (int c = 0; c < 256; c++) {
        float v = rc_e4m3fn_to_f32((uint8_t)c);
        if (isnan(v))
            nan++;
        else if (fabsf(v) > mx)
            mx = fabsf(v);
    }
    ck_assert_int_eq(nan, 2);
    ck_assert(mx == 448.0f);
    ck_assert(rc_e4m3fn_to_f32(1) == ldexpf(1, -9));
}
END_TEST

/* a copy of the FP8 folder with byte `off` of model.safetensors patched to
 * v (4 bytes) and config.json's text cfg (NULL: unchanged) */
static void hostile_copy(const char *cfg, int64_t off, const void *v)
{
    char p[4096], q[4096];
    size_t n;
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/fp8/model.safetensors");
    char *b;
    slurp(p, &b, &n);
    if (off >= 0)
        memcpy(b + off, v, 4);
    snprintf(q, sizeof q, "%s/model.safetensors", g_tmp);
    write_bytes(q, b, n);
    free(b);
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/fp8/config.json");
    slurp(p, &b, &n);
    snprintf(q, sizeof q, "%s/config.json", g_tmp);
    if (cfg)
        write_bytes(q, cfg, strlen(cfg));
    else
        write_bytes(q, b, n);
    free(b);
}

static int64_t scale_offset(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/fp8/model.safetensors");
    rc_safetensors *st;
    ck_assert(rc_st_open_file(p, &st) == RC_OK);
    const rc_st_tensor *t = rc_st_find(st, "model.layers.0.mlp.down_proj.weight_scale_inv");
    ck_assert(t != NULL && t->dtype == RC_F32);
    int64_t off = (int64_t)(t->data - st->files[0].map) + 4 * 3;
    rc_st_close(st);
    return off;
}

static void expect_refused(rc_status want, const char *what)
{
    rc_safetensors *st = NULL;
    rc_status s = rc_st_open_dir(g_tmp, &st);
    ck_assert_msg(s == want, "%s: status %d, expected %d (%s)", what, (int)s, (int)want, rc_last_error());
    ck_assert_msg(strstr(rc_last_error(), g_tmp) != NULL, "%s: the error does not name the file: %s", what,
                  rc_last_error());
    ck_assert(st == NULL);
}

START_TEST(test_hostile_scales)
{
    const int64_t off = scale_offset();
    const float bad[] = {NAN, INFINITY, 0.0f, -0.0f, -1.0f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hostile_copy(NULL, off, &bad[i]);
        expect_refused(RC_ERR_FORMAT, "hostile scale");
    }
    /* unchanged: opens */
    hostile_copy(NULL, -1, NULL);
    rc_safetensors *st;
    ck_assert_msg(rc_st_open_dir(g_tmp, &st) == RC_OK, "%s", rc_last_error());
    rc_st_close(st);
}
END_TEST

/* an F8_E4M3 weight whose scale tensor is missing (renamed in the header) */
START_TEST(test_missing_scale)
{
    char q[4096];
    size_t n;
    hostile_copy(NULL, -1, NULL);
    snprintf(q, sizeof q, "%s/model.safetensors", g_tmp);
    char *b;
    slurp(q, &b, &n);
    const char *key = "down_proj.weight_scale_inv";
    char *at = NULL;
    for (size_t i = 0; i + strlen(key) < n && !at; i++)
        if (memcmp(b + i, key, strlen(key)) == 0)
            at = b + i;
    ck_assert(at != NULL);
    at[strlen(key) - 1] = 'w'; /* ..._scale_inw */
    write_bytes(q, b, n);
    free(b);
    expect_refused(RC_ERR_FORMAT, "missing scale");
}
END_TEST

START_TEST(test_hostile_config)
{
    char p[4096];
    size_t n;
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/fp8/config.json");
    char *good;
    slurp(p, &good, &n);
    static const struct {
        const char *from, *to;
        rc_status want;
    } k[] = {
        {"\"weight_block_size\": [\n      16,\n      16\n    ]", "\"weight_block_size\": [16, 32]", RC_ERR_FORMAT},
        {"\"weight_block_size\": [\n      16,\n      16\n    ]", "\"weight_block_size\": [8, 16]", RC_ERR_FORMAT},
        {"\"weight_block_size\": [\n      16,\n      16\n    ]", "\"weight_block_size\": [0, 16]", RC_ERR_FORMAT},
        {"\"weight_block_size\": [\n      16,\n      16\n    ]", "\"weight_block_size\": [16, 1000000]", RC_ERR_FORMAT},
        {"\"weight_block_size\": [\n      16,\n      16\n    ]", "\"weight_block_size\": null", RC_ERR_UNSUPPORTED},
        {"\"quant_method\": \"fp8\"", "\"quant_method\": \"awq\"", RC_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const char *at = strstr(good, k[i].from);
        ck_assert_msg(at != NULL, "config.json has no %s", k[i].from);
        char cfg[8192];
        snprintf(cfg, sizeof cfg, "%.*s%s%s", (int)(at - good), good, k[i].to, at + strlen(k[i].from));
        hostile_copy(cfg, -1, NULL);
        expect_refused(k[i].want, k[i].to);
    }
    free(good);
}
END_TEST

/* an MXFP4 folder written here from the op case's blocks and scales */
static void write_mxfp4_folder_b(const uint8_t *blocks, const uint8_t *scales, int64_t E, int64_t R, int64_t G,
                                 int64_t bl)
{
    const int64_t nb = E * R * G * bl, ns = E * R * G;
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"m.experts.down_proj_blocks\":{\"dtype\":\"U8\",\"shape\":[%lld,%lld,%lld,%lld],"
                      "\"data_offsets\":[0,%lld]},\"m.experts.down_proj_scales\":{\"dtype\":\"U8\",\"shape\":"
                      "[%lld,%lld,%lld],\"data_offsets\":[%lld,%lld]}}",
                      (long long)E, (long long)R, (long long)G, (long long)bl, (long long)nb, (long long)E, (long long)R,
                      (long long)G, (long long)nb, (long long)(nb + ns));
    while (hl % 8)
        hdr[hl++] = ' ';
    const size_t total = 8 + (size_t)hl + (size_t)(nb + ns);
    unsigned char *f = malloc(total);
    uint64_t h = (uint64_t)hl;
    for (int i = 0; i < 8; i++)
        f[i] = (unsigned char)(h >> (8 * i));
    memcpy(f + 8, hdr, (size_t)hl);
    memcpy(f + 8 + hl, blocks, (size_t)nb);
    memcpy(f + 8 + hl + nb, scales, (size_t)ns);
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors", g_tmp);
    write_bytes(p, f, total);
    free(f);
    snprintf(p, sizeof p, "%s/config.json", g_tmp);
    const char *cfg = "{\"dtype\": \"bfloat16\", \"quantization_config\": {\"quant_method\": \"mxfp4\"}}";
    write_bytes(p, cfg, strlen(cfg));
}

static void write_mxfp4_folder(const uint8_t *blocks, const uint8_t *scales, int64_t E, int64_t R, int64_t G)
{
    write_mxfp4_folder_b(blocks, scales, E, R, G, 16);
}

START_TEST(test_mxfp4_folder)
{
    rc_safetensors *ops = open_ops();
    const rc_st_tensor *bl = rc_st_find(ops, "mxfp4_blocks"), *sc = rc_st_find(ops, "mxfp4_scales");
    const rc_st_tensor *ob = rc_st_find(ops, "mxfp4_out_bf16");
    const int64_t E = bl->shape[0], R = bl->shape[1], G = bl->shape[2], ns = E * R * G, n = ns * 32;
    uint8_t *s2 = malloc((size_t)ns);
    memcpy(s2, sc->data, (size_t)ns);
    /* as stored (a scale of 254 overflows): the read refuses the Inf */
    write_mxfp4_folder(bl->data, s2, E, R, G);
    rc_safetensors *st;
    ck_assert_msg(rc_st_open_dir(g_tmp, &st) == RC_OK, "%s", rc_last_error());
    ck_assert(rc_st_find(st, "m.experts.down_proj_scales") == NULL && rc_st_find(st, "m.experts.down_proj_blocks") == NULL);
    const int64_t shape[3] = {E, 32 * G, R};
    uint16_t *y = malloc(2 * (size_t)n);
    ck_assert_int_eq(rc_st_read_weight_as(st, "m.experts.down_proj", 3, shape, RC_BF16, y), RC_ERR_FORMAT);
    rc_st_close(st);
    /* finite scales: bitwise transformers' at every element whose scale is kept */
    for (int64_t k = 0; k < ns; k++)
        if (s2[k] == 254)
            s2[k] = 127;
    write_mxfp4_folder(bl->data, s2, E, R, G);
    ck_assert_msg(rc_st_open_dir(g_tmp, &st) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_st_read_weight_as(st, "m.experts.down_proj", 3, shape, RC_BF16, y) == RC_OK, "%s",
                  rc_last_error());
    uint16_t *want = malloc(2 * (size_t)n);
    rc_mxfp4_dequant(bl->data, s2, E, R, G, RC_BF16, want);
    ck_assert(memcmp(want, y, 2 * (size_t)n) == 0);
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t r;
        memcpy(&r, ob->data + 2 * i, 2);
        same += r == y[i];
    }
    ck_assert_int_gt(same, n / 2);
    rc_st_close(st);
    /* a scale of 255 (e8m0 NaN): refused on open */
    s2[1] = 255;
    write_mxfp4_folder(bl->data, s2, E, R, G);
    expect_refused(RC_ERR_FORMAT, "e8m0 NaN");
    /* truncated blocks: 15 bytes a block */
    s2[1] = 127;
    write_mxfp4_folder_b(bl->data, s2, E, R, G, 15);
    expect_refused(RC_ERR_FORMAT, "15-byte blocks");
    free(s2);
    free(y);
    free(want);
    rc_st_close(ops);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, test_fp8_folder_weights);
    tcase_add_test(tc, test_fp8_folder_run);
    tcase_add_test(tc, test_mxfp4_op);
    tcase_add_test(tc, test_fp8_op_ragged);
    tcase_add_test(tc, test_e4m3_codes);
    tcase_add_test(tc, test_hostile_scales);
    tcase_add_test(tc, test_hostile_config);
    tcase_add_test(tc, test_missing_scale);
    tcase_add_test(tc, test_mxfp4_folder);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
