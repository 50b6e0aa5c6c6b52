/* Quantized checkpoints as published (src/formats/quant.h), against
 * transformers' own code (tools/fixtures/make_quant_fixtures.py writes
 * data/fixtures/quant/):
 *  - the FP8 folder (F8_E4M3 + weight_scale_inv, 16 x 16 blocks, quantized by
 *    transformers' Fp8Quantize) reads bitwise as its copy dequantized by
 *    transformers' Fp8Dequantize, tensor by tensor, and a run (a full forward,
 *    bf16 and fp32 numerics) on both gives bitwise equal log-probs; for the
 *    two-layer Qwen3 and the MoE DeepSeek-V3 folders the copy is kept as the
 *    64-bit FNV-1a hash of each of its tensors (quant/fp8_qwen3_deq,
 *    moe_fp8/deepseek_v3_fp8_deq, written by tools/fixtures/deq_hashes.py from
 *    the generators): every tensor we dequantize
 *    hashes as transformers', and the bf16 folder rebuilt from them (HF's
 *    config.json beside them, by tests/testutil_deq.h) is the copy the run
 *    is compared with;
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
#include "fp8w.h"
#include "model.h"
#include "moe.h"
#include "quant.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"
#include "testutil_deq.h"

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

/* every tensor of the Qwen3 and MoE DeepSeek-V3 FP8 folders hashes as
 * transformers' dequantized copy's */
START_TEST(test_fp8_hashed_folder_weights)
{
    static const char *const dirs[][2] = {
        {"data/fixtures/quant/fp8_qwen3", "data/fixtures/quant/fp8_qwen3_deq"},
        {"data/fixtures/moe_fp8/deepseek_v3_fp8", "data/fixtures/moe_fp8/deepseek_v3_fp8_deq"},
    };
    for (int k = 0; k < 2; k++) {
        char p8[4096], pr[4096];
        rc_test_source_path(p8, sizeof p8, "%s", dirs[k][0]);
        rc_test_source_path(pr, sizeof pr, "%s", dirs[k][1]);
        int64_t nt;
        const int64_t nvals = rc_test_deq_folder(p8, "fp8", pr, g_tmp, &nt, NULL);
        printf("fp8 folder %s: %lld tensors, %lld values hash as transformers' dequantized copy's\n", dirs[k][0],
               (long long)nt, (long long)nvals);
        ck_assert_int_gt(nvals, 0);
    }
}
END_TEST

/* the FP8 folders and their dequantized copies: the one-layer Llama in
 * 16 x 16 blocks, the two-layer Qwen3 in 32 x 16 blocks (partial blocks),
 * the three-layer DeepSeek-V3 (latent attention, two MoE layers) in
 * 128 x 128 blocks; the last two copies rebuilt from the hashes (third
 * column) */
static const char *const k_fp8_dirs[][3] = {
    {"data/fixtures/quant/fp8", "data/fixtures/quant/fp8_bf16", NULL},
    {"data/fixtures/quant/fp8_qwen3", NULL, "data/fixtures/quant/fp8_qwen3_deq"},
    {"data/fixtures/moe_fp8/deepseek_v3_fp8", NULL, "data/fixtures/moe_fp8/deepseek_v3_fp8_deq"},
};
#define N_FP8_DIRS ((int)(sizeof k_fp8_dirs / sizeof k_fp8_dirs[0]))

/* a run on the FP8 folder equals a run on its dequantized copy bitwise */
START_TEST(test_fp8_folder_run)
{
    char p8[4096], pb[4096];
    rc_test_source_path(p8, sizeof p8, "%s", k_fp8_dirs[_i][0]);
    if (k_fp8_dirs[_i][2]) {
        char pr[4096];
        int64_t nt;
        rc_test_source_path(pr, sizeof pr, "%s", k_fp8_dirs[_i][2]);
        rc_test_deq_folder(p8, "fp8", pr, g_tmp, &nt, NULL);
        snprintf(pb, sizeof pb, "%s", g_tmp);
    } else {
        rc_test_source_path(pb, sizeof pb, "%s", k_fp8_dirs[_i][1]);
    }
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
        printf("fp8 folder run %s (%s): %lld of %lld log-probs differ from the bf16 copy's\n", k_fp8_dirs[_i][0],
               d ? "fp32" : "bf16", (long long)diff, (long long)(R * V));
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

static void read_f32(const rc_st_tensor *t, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == RC_BF16) {
            uint16_t h;
            memcpy(&h, t->data + 2 * i, 2);
            out[i] = rc_bf16_to_f32(h);
        } else {
            memcpy(&out[i], t->data + 4 * i, 4);
        }
    }
}

static int64_t bf16_ulps(float a, float b)
{
    const int32_t x = (int32_t)(rc_f32_bits(a) >> 16), y = (int32_t)(rc_f32_bits(b) >> 16);
    const int64_t ox = x < 0 ? -(int64_t)(x & 0x7FFF) : x, oy = y < 0 ? -(int64_t)(y & 0x7FFF) : y;
    return ox > oy ? ox - oy : oy - ox;
}

/* weights=as-stored's linear against the explicit torch emulation of the
 * block-FP8 GEMM (asstored_ops.safetensors): the 1 x b1 activation groups'
 * fp8 values and scales bitwise, the outputs within one bf16 ulp (the fp32
 * sum inside a K slice: exact then rounded once there, the kernel's order
 * here; the count that differs is printed) */
START_TEST(test_asstored_ops)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/asstored_ops.safetensors");
    rc_safetensors *st;
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be) == RC_OK);
    int ncases = 0;
    for (int c = 0;; c++) {
        char nm[7][32];
        const char *suf[] = {"block", "x", "w", "s", "xq", "sx", "y"};
        const rc_st_tensor *t[7];
        for (int j = 0; j < 7; j++) {
            snprintf(nm[j], sizeof nm[j], "c%d_%s", c, suf[j]);
            t[j] = rc_st_find(st, nm[j]);
        }
        if (!t[0])
            break;
        int32_t blk[2];
        memcpy(blk, t[0]->data, 8);
        const int64_t M = t[1]->shape[0], K = t[1]->shape[1], N = t[2]->shape[0], b0 = blk[0], b1 = blk[1];
        const int64_t ns = t[3]->shape[0] * t[3]->shape[1];
        ck_assert(t[3]->shape[0] == (N + b0 - 1) / b0 && t[3]->shape[1] == K / b1);
        float *x = malloc(sizeof(float) * (size_t)(M * K)), *q = malloc(sizeof(float) * (size_t)(N * K));
        float *s = malloc(sizeof(float) * (size_t)ns), *y = malloc(sizeof(float) * (size_t)(M * N));
        float *xq = malloc(sizeof(float) * (size_t)(M * K)), *sx = malloc(sizeof(float) * (size_t)(M * K / b1));
        read_f32(t[1], M * K, x);
        read_f32(t[3], ns, s);
        for (int64_t i = 0; i < N * K; i++)
            q[i] = rc_e4m3fn_to_f32(t[2]->data[i]);
        ck_assert_msg(rc_fp8w_stored_linear_once(be, x, M, K, q, s, N, b0, b1, NULL, RC_BF16, y, xq, sx) == RC_OK, "%s",
                      rc_last_error());
        for (int64_t i = 0; i < M * K; i++)
            ck_assert_msg(rc_f32_bits(xq[i]) == rc_f32_bits(rc_e4m3fn_to_f32(t[4]->data[i])),
                          "case %d: xq[%lld] %g", c, (long long)i, (double)xq[i]);
        float *want = malloc(sizeof(float) * (size_t)(M * N));
        read_f32(t[5], M * K / b1, want);
        for (int64_t i = 0; i < M * K / b1; i++)
            ck_assert_msg(rc_f32_bits(sx[i]) == rc_f32_bits(want[i]), "case %d: sx[%lld] %g, torch %g", c,
                          (long long)i, (double)sx[i], (double)want[i]);
        read_f32(t[6], M * N, want);
        int64_t nd = 0, mu = 0;
        for (int64_t i = 0; i < M * N; i++) {
            const int64_t u = bf16_ulps(y[i], want[i]);
            nd += u != 0;
            mu = u > mu ? u : mu;
        }
        printf("as-stored block GEMM case %d (M %lld, K %lld, N %lld, blocks [%lld, %lld]): %lld of %lld outputs "
               "differ from the emulation, max %lld bf16 ulp\n", c, (long long)M, (long long)K, (long long)N,
               (long long)b0, (long long)b1, (long long)nd, (long long)(M * N), (long long)mu);
        ck_assert_int_le(mu, 1);
        free(x), free(q), free(s), free(y), free(xq), free(sx), free(want);
        ncases++;
    }
    ck_assert_int_ge(ncases, 3);
    rc_backend_destroy(be);
    rc_st_close(st);
}
END_TEST

/* the routing rc_moe_forward's hook saw (host copies) */
typedef struct {
    float sel[64], w[64];
    int64_t n, k;
} route_seen;

static rc_status see_route(void *ctx, const rc_batch_desc *bd, int64_t layer, int64_t row0, int64_t n, int64_t top_k,
                           const float *experts, const float *weights)
{
    (void)bd, (void)layer, (void)row0;
    route_seen *r = ctx;
    ck_assert(n * top_k <= 64);
    memcpy(r->sel, experts, sizeof(float) * (size_t)(n * top_k));
    memcpy(r->w, weights, sizeof(float) * (size_t)(n * top_k));
    r->n = n;
    r->k = top_k;
    return RC_OK;
}

/* weights=as-stored on a MoE layer against the explicit torch emulation of
 * vLLM's fused-MoE FP8 block path (data/fixtures/moe_fp8/c0, c1): one
 * layer's stored experts (transformers' Fp8Quantize, 128 x 128 blocks) read
 * by rc_fp8w_create_stored, the block's input h through rc_moe_forward with
 * the fused rule: the routing (experts in order, fp32 weights) bitwise the
 * emulation's, the output within one bf16 ulp as the dense block GEMM's
 * (the count that differs is printed) */
START_TEST(test_moe_asstored_ops)
{
    const char *const cases[] = {"data/fixtures/moe_fp8/c0", "data/fixtures/moe_fp8/c1"};
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be) == RC_OK);
    for (int c = 0; c < 2; c++) {
        char d[4096], p[4200];
        rc_test_source_path(d, sizeof d, "%s", cases[c]);
        rc_model *m = calloc(1, sizeof *m);
        ck_assert(m != NULL);
        ck_assert_msg(rc_config_load(d, &m->cfg) == RC_OK, "%s", rc_last_error());
        const rc_config *cfg = &m->cfg;
        snprintf(p, sizeof p, "%s/model.safetensors", d);
        ck_assert_msg(rc_st_open_file(p, &m->st) == RC_OK, "%s", rc_last_error());
        char *text;
        size_t len;
        snprintf(p, sizeof p, "%s/config.json", d);
        slurp(p, &text, &len);
        ck_assert_msg(rc_st_apply_quant(m->st, text, len, p) == RC_OK, "%s", rc_last_error());
        free(text);
        snprintf(m->quant_method, sizeof m->quant_method, "%s", m->st->quant_method);
        m->dir = d;
        rc_safetensors *ref;
        snprintf(p, sizeof p, "%s/ref.safetensors", d);
        ck_assert_msg(rc_st_open_file(p, &ref) == RC_OK, "%s", rc_last_error());
        const rc_st_tensor *th = rc_st_find(ref, "h"), *ty = rc_st_find(ref, "y"), *ti = rc_st_find(ref, "topk_ids"),
                           *tw = rc_st_find(ref, "topk_w");
        ck_assert(th && ty && ti && tw);
        const int64_t M = th->shape[0], H = th->shape[1], E = cfg->n_experts, k = cfg->top_k;
        ck_assert(H == cfg->hidden && ti->shape[1] == k && M * k <= 64);
        rc_numerics num = rc_numerics_fp32();
        num.dt = RC_BF16;
        num.wq = (rc_wq_numerics){RC_WQ_STORED, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN};
        rc_fp8w *f;
        ck_assert_msg(rc_fp8w_create_stored(be, m, &num, M, &f) == RC_OK, "%s", rc_last_error());
        ck_assert(rc_fp8w_has_experts(f));
        rc_moe_scratch *sc;
        ck_assert_msg(rc_moe_scratch_create(be, cfg, M, true, &sc) == RC_OK, "%s", rc_last_error());
        float *h = malloc(sizeof(float) * (size_t)(M * H)), *y = malloc(sizeof(float) * (size_t)(M * H));
        float *want = malloc(sizeof(float) * (size_t)(M * H)), *wr = malloc(sizeof(float) * (size_t)(E * H));
        float ebias[64] = {0};
        read_f32(th, M * H, h);
        read_f32(ty, M * H, want);
        const rc_st_tensor *tg = rc_st_find(m->st, "model.layers.0.mlp.gate.weight"),
                           *tb = rc_st_find(m->st, "model.layers.0.mlp.gate.e_score_correction_bias");
        ck_assert(tg != NULL && E <= 64);
        read_f32(tg, E * H, wr);
        if (tb)
            read_f32(tb, E, ebias);
        rc_layer_weights L = {0};
        L.w_router = rc_wt_f32(wr);
        if (tb)
            L.e_bias = rc_wt_f32(ebias);
        route_seen seen = {0};
        const rc_routing_hook hook = {see_route, NULL, &seen};
        const rc_moe_rounding r = {RC_BF16, RC_BF16, RC_BF16, RC_BF16, false, false, rc_fp8w_expert_cb, f, false};
        ck_assert_msg(rc_moe_forward(be, cfg, &L, 0, h, M, NULL, 0, &r, sc, &hook, y) == RC_OK, "%s",
                      rc_last_error());
        ck_assert_int_eq(seen.n, M);
        /* the experts in the same order; the weights within 4 fp32 ulps (the router GEMM's fp32 sums are
         * in another order than torch's; the count that differs is printed) */
        int64_t wd = 0;
        for (int64_t i = 0; i < M * k; i++) {
            int32_t id;
            float w;
            memcpy(&id, ti->data + 4 * i, 4);
            memcpy(&w, tw->data + 4 * i, 4);
            const int64_t du = (int64_t)rc_f32_bits(seen.w[i]) - (int64_t)rc_f32_bits(w);
            ck_assert_msg((int32_t)seen.sel[i] == id && du <= 4 && du >= -4,
                          "%s: routing %lld: expert %g weight %.9g, torch %d %.9g", cases[c], (long long)i,
                          (double)seen.sel[i], (double)seen.w[i], id, (double)w);
            wd += du != 0;
        }
        int64_t nd = 0, mu = 0;
        for (int64_t i = 0; i < M * H; i++) {
            const int64_t u = bf16_ulps(y[i], want[i]);
            nd += u != 0;
            mu = u > mu ? u : mu;
        }
        printf("as-stored MoE layer %s (%s, %lld experts, top %lld, %lld rows): %lld of %lld routing weights and "
               "%lld of %lld outputs differ from the emulation, max %lld bf16 ulp\n", cases[c], cfg->model_type,
               (long long)E, (long long)k, (long long)M, (long long)wd, (long long)(M * k), (long long)nd,
               (long long)(M * H), (long long)mu);
        ck_assert_int_le(mu, 1);
        free(h), free(y), free(want), free(wr);
        rc_moe_scratch_free(be, sc);
        rc_fp8w_free(f);
        rc_st_close(ref);
        rc_st_close(m->st);
        free(m);
    }
    rc_backend_destroy(be);
}
END_TEST

/* weights=as-stored on an engine: the FP8 folders run (finite log-probs, not
 * those of the dequantized weights), a folder that is not FP8 is a usage
 * error naming it */
START_TEST(test_asstored_engine)
{
    char p[4096];
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_INVARIANT, &be) == RC_OK);
    for (int k = 0; k <= N_FP8_DIRS; k++) {
        rc_test_source_path(p, sizeof p, "%s", k < N_FP8_DIRS ? k_fp8_dirs[k][0] : k_fp8_dirs[0][1]);
        rc_model *m;
        ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
        const int64_t B = 1, L = 12, V = m->cfg.vocab;
        int32_t tok[12];
        int64_t lens[1] = {L};
        for (int64_t i = 0; i < L; i++)
            tok[i] = (int32_t)((i * 37 + 5) % V);
        rc_numerics num = rc_numerics_fp32();
        num.dt = RC_BF16;
        float *out[2];
        for (int w = 0; w < 2; w++) {
            num.wq = (rc_wq_numerics){w ? RC_WQ_STORED : RC_WQ_NONE, RC_WSCALE_TENSOR, RC_ACTQ_TOKEN};
            rc_engine *e;
            const rc_status s = rc_engine_create(m, be, &num, B, L, L, &e);
            if (k == N_FP8_DIRS && w) {
                ck_assert_int_eq(s, RC_ERR_USAGE);
                ck_assert_msg(strstr(rc_last_error(), "fp8_bf16") && strstr(rc_last_error(), "not an FP8"), "%s",
                              rc_last_error());
                out[1] = NULL;
                continue;
            }
            ck_assert_msg(s == RC_OK, "%s", rc_last_error());
            out[w] = malloc(sizeof(float) * (size_t)(L * V));
            ck_assert(rc_full_forward(e, tok, lens, B, out[w]) == RC_OK);
            rc_engine_free(e);
        }
        if (k < N_FP8_DIRS) {
            int64_t finite = 0, diff = 0;
            for (int64_t i = 0; i < L * V; i++) {
                finite += isfinite(out[1][i]);
                diff += rc_f32_bits(out[0][i]) != rc_f32_bits(out[1][i]);
            }
            printf("as-stored run %s: %lld of %lld log-probs differ from the dequantized weights' run\n", p,
                   (long long)diff, (long long)(L * V));
            ck_assert_int_eq(finite, L * V);
            ck_assert_int_gt(diff, 0);
        }
        free(out[0]);
        free(out[1]);
        rc_model_free(m);
    }
    rc_backend_destroy(be);
}
END_TEST

/* the CLI: weights=as-stored in the run's sampler spec and its log-probs
 * apart from the trainer's; the folder's note; a folder that is not FP8
 * (exit 2, named); the trainer refuses it (exit 5); inspect's memory line */
START_TEST(test_asstored_cli)
{
    static char out[1 << 16], err[1 << 14];
    const char *run = "--out none --model data/fixtures/quant/fp8_qwen3 --prompts data/fixtures/quant/prompts96.ids "
                      "--num-prompts 4 --len 8";
    char args[1024];
    snprintf(args, sizeof args, "%s --sampler dtype=bf16,weights=as-stored", run);
    ck_assert_int_eq(rc_test_run_cli("", args, out, sizeof out, err, sizeof err), 0);
    ck_assert_msg(strstr(out, "weights=as-stored  trainer") != NULL, "%s", out); /* no weight-scale= / act= */
    ck_assert_msg(strstr(err, "FP8 block checkpoint ([32, 16] blocks)") != NULL, "%s", err);
    ck_assert_msg(strstr(out, "1.000000   0.000e+00") == NULL, "%s", out); /* the ratio is not exactly 1 */
    ck_assert_int_eq(rc_test_run_cli("", "--out none -q --model data/fixtures/quant/fp8_bf16 --prompts "
                                         "data/fixtures/quant/prompts96.ids --len 4 --sampler weights=as-stored",
                                     out, sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "data/fixtures/quant/fp8_bf16 is not an FP8 checkpoint") != NULL, "%s", err);
    snprintf(args, sizeof args, "%s -q --trainer weights=as-stored", run);
    ck_assert_int_eq(rc_test_run_cli("", args, out, sizeof out, err, sizeof err), 5);
    ck_assert_msg(strstr(err, "weights=as-stored is the sampler's") != NULL, "%s", err);
    snprintf(args, sizeof args, "%s -q --sampler dtype=fp32,weights=as-stored", run);
    ck_assert_int_eq(rc_test_run_cli("", args, out, sizeof out, err, sizeof err), 2);
    ck_assert_int_eq(rc_test_run_cli("", "inspect --model data/fixtures/quant/fp8_qwen3", out, sizeof out, err,
                                     sizeof err), 0);
    ck_assert_msg(strstr(out, "[32, 16] block scales (--sampler weights=as-stored)") != NULL, "%s", out);
    /* 14 weights: stored 36864 bytes of fp8 (the sum of the fixture's F8_E4M3 shapes), dequantized twice that */
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/fp8_qwen3");
    rc_safetensors *st;
    ck_assert(rc_st_open_dir(p, &st) == RC_OK);
    int64_t nq = 0, codes = 0;
    for (int64_t i = 0; i < st->ntensors; i++)
        if (st->tensors[i].quant == RC_ST_Q_FP8_BLOCK) {
            nq++;
            codes += st->tensors[i].qdim[1] * st->tensors[i].qdim[2];
        }
    rc_st_close(st);
    char want[256];
    snprintf(want, sizeof want, "%lld quantized tensors: stored %.4g MiB", (long long)nq, codes / 1048576.0);
    ck_assert_msg(strstr(out, want) != NULL, "%s not in %s", want, out);
    snprintf(want, sizeof want, "dequantized to 2 bytes %.4g MiB", 2 * codes / 1048576.0);
    ck_assert_msg(strstr(out, want) != NULL, "%s not in %s", want, out);
    /* the default sweep on an FP8 folder has the sampler's weights=as-stored row; not on a plain folder */
    const char *sw = "sweep -q --out none --prompts data/fixtures/quant/prompts96.ids --num-prompts 4 --len 8 --model";
    snprintf(args, sizeof args, "%s data/fixtures/quant/fp8_qwen3", sw);
    ck_assert_int_eq(rc_test_run_cli("", args, out, sizeof out, err, sizeof err), 0);
    ck_assert_msg(strstr(out, "\nsampler: weights=as-stored ") != NULL, "%s", out);
    snprintf(args, sizeof args, "%s data/fixtures/quant/fp8_bf16", sw);
    ck_assert_int_eq(rc_test_run_cli("", args, out, sizeof out, err, sizeof err), 0);
    ck_assert_msg(strstr(out, "weights=as-stored") == NULL && strstr(out, "\nsampler: weights=fp8 ") != NULL, "%s",
                  out);
    /* --layers 1: the first layer's 7 of them */
    ck_assert_int_eq(rc_test_run_cli("", "inspect --no-speed --layers 1 --model data/fixtures/quant/fp8_qwen3", out,
                                     sizeof out, err, sizeof err), 0);
    ck_assert_msg(strstr(out, "layers         1 of 2 (--layers)") != NULL, "%s", out);
    snprintf(want, sizeof want, "%lld quantized tensors: stored %.4g MiB", (long long)nq / 2, codes / 2 / 1048576.0);
    ck_assert_msg(strstr(out, want) != NULL, "%s not in %s", want, out);
}
END_TEST

/* a copy of fp8_qwen3 in g_tmp with n bytes at tensor `name`'s byte `at`
 * replaced by v (name NULL: none), config.json's weight_block_size set to
 * block (NULL: as is), model.safetensors cut to `keep` bytes (< 0: whole) */
static void qwen3_hostile(const char *name, int64_t at, const void *v, size_t n, const char *block, int64_t keep)
{
    char p[4096], q[4200];
    rc_test_source_path(p, sizeof p, "data/fixtures/quant/fp8_qwen3");
    rc_safetensors *st;
    ck_assert(rc_st_open_dir(p, &st) == RC_OK);
    int64_t off = -1;
    if (name) {
        /* the scale tensors are not listed: find them in the file's header by name */
        const rc_st_tensor *t = rc_st_find(st, name);
        if (t)
            off = (int64_t)(t->data - st->files[t->file].map);
        else {
            rc_safetensors *raw;
            snprintf(q, sizeof q, "%s/model.safetensors", p);
            ck_assert(rc_st_open_file(q, &raw) == RC_OK);
            t = rc_st_find(raw, name);
            ck_assert_msg(t != NULL, "%s", name);
            off = (int64_t)(t->data - raw->files[t->file].map);
            rc_st_close(raw);
        }
    }
    rc_st_close(st);
    char *b;
    size_t len;
    snprintf(q, sizeof q, "%s/model.safetensors", p);
    slurp(q, &b, &len);
    if (off >= 0)
        memcpy(b + off + at, v, n);
    snprintf(q, sizeof q, "%s/model.safetensors", g_tmp);
    write_bytes(q, b, keep >= 0 ? (size_t)keep : len);
    free(b);
    snprintf(q, sizeof q, "%s/config.json", p);
    slurp(q, &b, &len);
    char *c = b;
    char *nb = NULL;
    if (block) {
        char *w = strstr(b, "\"weight_block_size\": [");
        ck_assert(w != NULL);
        char *e = strchr(w, ']');
        nb = malloc(len + 64);
        snprintf(nb, len + 64, "%.*s\"weight_block_size\": %s%s", (int)(w - b), b, block, e + 1);
        c = nb;
    }
    snprintf(q, sizeof q, "%s/config.json", g_tmp);
    write_bytes(q, c, strlen(c));
    free(b);
    free(nb);
}

/* hostile FP8 folders under weights=as-stored: exit 4, one line naming the
 * file (a NaN fp8 code, scales NaN / Inf / 0, a scale grid of another block
 * size, a truncated file) */
START_TEST(test_asstored_hostile)
{
    static char out[1 << 14], err[1 << 14];
    const uint8_t nan8 = 0x7F;
    const float bad[] = {NAN, INFINITY, 0.0f};
    struct {
        const char *name, *block;
        const void *v;
        size_t n;
        int64_t keep;
    } cases[] = {
        {"model.layers.1.self_attn.o_proj.weight", NULL, &nan8, 1, -1},
        {"model.layers.0.mlp.down_proj.weight_scale_inv", NULL, &bad[0], 4, -1},
        {"model.layers.0.mlp.down_proj.weight_scale_inv", NULL, &bad[1], 4, -1},
        {"model.layers.1.self_attn.q_proj.weight_scale_inv", NULL, &bad[2], 4, -1},
        {NULL, "[16, 16]", NULL, 0, -1},
        {NULL, NULL, NULL, 0, 40000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qwen3_hostile(cases[i].name, 4, cases[i].v, cases[i].n, cases[i].block, cases[i].keep);
        char args[4096];
        snprintf(args, sizeof args, "--out none -q --model '%s' --prompts data/fixtures/quant/prompts96.ids --len 4 "
                 "--sampler weights=as-stored", g_tmp);
        const int rc = rc_test_run_cli("", args, out, sizeof out, err, sizeof err);
        ck_assert_msg(rc == 4, "case %zu: exit %d: %s", i, rc, err);
        ck_assert_msg(strstr(err, g_tmp) != NULL && strchr(err, '\n') == err + strlen(err) - 1,
                      "case %zu: not one line naming the file: %s", i, err);
        printf("as-stored hostile case %zu: %s", i, err);
    }
}
END_TEST

/* hostile MoE FP8 folders under weights=as-stored (a copy of
 * data/fixtures/moe_fp8/deepseek_v3_fp8 in g_tmp): a NaN code in an
 * expert's weight (exit 4, one line naming the file), an expert tensor
 * missing (exit 4 at load: the model lacks a weight) */
START_TEST(test_moe_asstored_hostile)
{
    static char out[1 << 14], err[1 << 14];
    char p[4096], q[4200];
    rc_test_source_path(p, sizeof p, "data/fixtures/moe_fp8/deepseek_v3_fp8");
    for (int c = 0; c < 2; c++) {
        char *b;
        size_t len;
        snprintf(q, sizeof q, "%s/config.json", p);
        slurp(q, &b, &len);
        snprintf(q, sizeof q, "%s/config.json", g_tmp);
        write_bytes(q, b, len);
        free(b);
        rc_safetensors *raw;
        snprintf(q, sizeof q, "%s/model.safetensors", p);
        ck_assert(rc_st_open_file(q, &raw) == RC_OK);
        const rc_st_tensor *t = rc_st_find(raw, "model.layers.2.mlp.experts.5.down_proj.weight");
        ck_assert(t != NULL);
        const int64_t off = (int64_t)(t->data - raw->files[t->file].map);
        rc_st_close(raw);
        slurp(q, &b, &len);
        if (c == 0) {
            b[off + 7] = 0x7F; /* NaN */
        } else { /* the tensor renamed in the header: the expert's down_proj is missing */
            char *n = strstr(b + 8, "model.layers.2.mlp.experts.5.down_proj.weight\""); /* the JSON header */
            ck_assert(n != NULL && n < b + off);
            n[27] = 'X';
        }
        snprintf(q, sizeof q, "%s/model.safetensors", g_tmp);
        write_bytes(q, b, len);
        free(b);
        char args[4096];
        snprintf(args, sizeof args, "--out none -q --model '%s' --prompts data/fixtures/moe_fp8/prompts.ids --len 4 "
                 "--sampler weights=as-stored", g_tmp);
        const int rc = rc_test_run_cli("", args, out, sizeof out, err, sizeof err);
        ck_assert_msg(rc == 4, "case %d: exit %d: %s", c, rc, err);
        ck_assert_msg(strstr(err, g_tmp) != NULL && strchr(err, '\n') == err + strlen(err) - 1,
                      "case %d: not one line naming the file: %s", c, err);
        printf("as-stored MoE hostile case %d: %s", c, err);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
    tcase_add_test(tc, test_fp8_folder_weights);
    tcase_add_test(tc, test_fp8_hashed_folder_weights);
    tcase_add_loop_test(tc, test_fp8_folder_run, 0, N_FP8_DIRS);
    tcase_add_test(tc, test_asstored_ops);
    tcase_add_test(tc, test_moe_asstored_ops);
    tcase_add_test(tc, test_asstored_engine);
    tcase_add_test(tc, test_asstored_cli);
    tcase_add_test(tc, test_asstored_hostile);
    tcase_add_test(tc, test_moe_asstored_hostile);
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
