/* Check suite for the safetensors reader (src/formats/safetensors.c).
 *
 * Every test builds its files by hand in a fresh temporary folder: an 8-byte
 * little-endian header length, the JSON header, then the data bytes. Expected
 * float values are written as IEEE-754 bit patterns worked out by hand from
 * the stored bits, and compared bit for bit (so -0.0 and subnormals count).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "safetensors.h"
#include "status.h"

#include "testutil.h"

/* ------------------------------------------------------------------------ */
/* temp folders                                                             */

static char g_base[256];  /* per-run folder, removed by main() */
static char g_dir[512];   /* per-test folder */
static char g_model[768]; /* g_dir/model: the model folder */

static void setup(void)
{
    rc_test_fresh_dir(g_dir, sizeof g_dir, g_base);
    snprintf(g_model, sizeof g_model, "%s/model", g_dir);
    ck_assert_int_eq(mkdir(g_model, 0700), 0);
}

static void teardown(void) { rc_test_rm_rf(g_dir); }

/* Path of `name` inside the model folder (a few rotating static buffers). */
static const char *mpath(const char *name)
{
    static char bufs[8][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", g_model, name);
    return b;
}

/* Path of `name` in the test folder, outside the model folder. */
static const char *opath(const char *name)
{
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", g_dir, name);
    return b;
}

static void write_file(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
    if (n)
        ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_text(const char *path, const char *text) { write_file(path, text, strlen(text)); }

/* Write a safetensors file: 8-byte LE `hlen`, then `hbytes` header bytes, then
 * `ndata` data bytes. hlen may disagree with hbytes (to lie about the length). */
static void write_st_raw(const char *path, uint64_t hlen, const void *hdr, size_t hbytes,
                         const void *data, size_t ndata)
{
    size_t n = 8 + hbytes + ndata;
    unsigned char *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hlen >> (8 * i));
    if (hbytes)
        memcpy(buf + 8, hdr, hbytes);
    if (ndata)
        memcpy(buf + 8 + hbytes, data, ndata);
    write_file(path, buf, n);
    free(buf);
}

/* Header given as a C string with ' for " (for readability). */
static char *dq(const char *sq)
{
    char *s = strdup(sq);
    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return s;
}

/* The usual case: header length = strlen(header). */
static void write_st(const char *path, const char *hdr_sq, const void *data, size_t ndata)
{
    char *h = dq(hdr_sq);
    write_st_raw(path, strlen(h), h, strlen(h), data, ndata);
    free(h);
}

/* Little-endian byte writers. */
static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

/* Assert a status and that the error message contains every given phrase. */
static void expect_err_(const char *file, int line, int got, int want, ...)
{
    const char *msg = rc_last_error();
    ck_assert_msg(got == want, "%s:%d: status \"%s\", expected \"%s\" (message: %s)", file, line,
                  rc_status_name((rc_status)got), rc_status_name((rc_status)want), msg);
    va_list ap;
    va_start(ap, want);
    const char *sub;
    while ((sub = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(strstr(msg, sub) != NULL, "%s:%d: error \"%s\" does not contain \"%s\"", file,
                      line, msg, sub);
    va_end(ap);
}
#define EXPECT_ERR(expr, want, ...)                                                \
    do {                                                                           \
        rc_clear_error();                                                          \
        rc_status st_got_ = (expr);                                                \
        expect_err_(__FILE__, __LINE__, st_got_, (want), __VA_ARGS__, (char *)NULL); \
    } while (0)

#define EXPECT_OK(expr)                                                                    \
    do {                                                                                   \
        rc_clear_error();                                                                  \
        rc_status st_got_ = (expr);                                                        \
        ck_assert_msg(st_got_ == RC_OK, "%s failed: %s: %s", #expr, rc_status_name(st_got_), \
                      rc_last_error());                                                    \
    } while (0)

/* Open `path` as a single file and expect RC_ERR_FORMAT naming path + phrases. */
#define EXPECT_FILE_REJECTED(path, ...)                                  \
    do {                                                                 \
        rc_safetensors *st_ = (rc_safetensors *)1;                       \
        EXPECT_ERR(rc_st_open_file((path), &st_), RC_ERR_FORMAT, (path), __VA_ARGS__); \
        ck_assert_ptr_null(st_);                                         \
    } while (0)

#define EXPECT_DIR_REJECTED(want, ...)                                   \
    do {                                                                 \
        rc_safetensors *st_ = (rc_safetensors *)1;                       \
        EXPECT_ERR(rc_st_open_dir(g_model, &st_), (want), __VA_ARGS__);  \
        ck_assert_ptr_null(st_);                                         \
    } while (0)

static rc_safetensors *open_ok(const char *path)
{
    rc_safetensors *st = NULL;
    EXPECT_OK(rc_st_open_file(path, &st));
    ck_assert_ptr_nonnull(st);
    return st;
}

static rc_safetensors *open_dir_ok(void)
{
    rc_safetensors *st = NULL;
    EXPECT_OK(rc_st_open_dir(g_model, &st));
    ck_assert_ptr_nonnull(st);
    return st;
}

/* A minimal valid tensor for files that only need one: F32 [2] = {1, 2}. */
static const unsigned char k_two_f32[8] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};

/* ------------------------------------------------------------------------ */
/* valid files                                                              */

START_TEST(test_all_dtypes_exact)
{
    unsigned char d[96];
    memset(d, 0xAA, sizeof d);
    /* f32 [2, 2] at [0, 16) */
    put32(d + 0, 0x3F800000u);  /* 1.0 */
    put32(d + 4, 0x80000000u);  /* -0.0 */
    put32(d + 8, 0x00000001u);  /* 2^-149, smallest subnormal */
    put32(d + 12, 0x40490FDBu); /* pi as float */
    /* f16 [8] at [16, 32) */
    const uint16_t h[8] = {0x3C00, 0x0001, 0x8000, 0x03FF, 0x0400, 0xC000, 0x7BFF, 0x3555};
    for (int i = 0; i < 8; i++)
        put16(d + 16 + 2 * i, h[i]);
    /* bf16 [2, 3] at [32, 44) */
    const uint16_t b[6] = {0x3FC0, 0xC010, 0x8000, 0x0001, 0x7F80, 0x4049};
    for (int i = 0; i < 6; i++)
        put16(d + 32 + 2 * i, b[i]);
    /* f64 [5] at [44, 84) (only 4-byte aligned in the buffer) */
    const uint64_t f64[5] = {
        0x3FF0000010000000ull, /* 1 + 2^-24: a tie, rounds to even 1.0f */
        0x3FF0000030000000ull, /* 1 + 2^-23 + 2^-24: a tie, rounds up to 1 + 2^-22 */
        0x3FB999999999999Aull, /* 0.1 */
        0x7E37E43C8800759Cull, /* 1e300: overflows float -> +inf */
        0xB6A0000000000000ull, /* -2^-149 */
    };
    for (int i = 0; i < 5; i++)
        put64(d + 44 + 8 * i, f64[i]);
    /* i32 [3] at [84, 96) */
    put32(d + 84, 0xFFFFFFFFu); /* -1 */
    put32(d + 88, 0x7FFFFFFFu);
    put32(d + 92, 7u);
    const char *p = mpath("all.safetensors");
    write_st(p,
             "{'f32':{'dtype':'F32','shape':[2,2],'data_offsets':[0,16]},"
             "'f16':{'dtype':'F16','shape':[8],'data_offsets':[16,32]},"
             "'bf16':{'dtype':'BF16','shape':[2,3],'data_offsets':[32,44]},"
             "'f64':{'dtype':'F64','shape':[5],'data_offsets':[44,84]},"
             "'i32':{'dtype':'I32','shape':[3],'data_offsets':[84,96]}}",
             d, sizeof d);
    rc_safetensors *st = open_ok(p);
    ck_assert_int_eq(st->ntensors, 5);
    ck_assert_int_eq(st->nfiles, 1);

    const rc_st_tensor *t = rc_st_find(st, "bf16");
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t->dtype_name, "BF16");
    ck_assert_int_eq(t->dtype, RC_BF16);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 3);
    ck_assert_uint_eq(t->begin, 32);
    ck_assert_uint_eq(t->end, 44);
    ck_assert_str_eq(rc_st_path_of(st, t), p);

    float out[8];
    EXPECT_OK(rc_st_read_f32(st, "f32", 2, (int64_t[]){2, 2}, out));
    const uint32_t e32[4] = {0x3F800000u, 0x80000000u, 0x00000001u, 0x40490FDBu};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(fbits(out[i]) == e32[i], "f32[%d] = 0x%08x, expected 0x%08x", i, fbits(out[i]),
                      e32[i]);

    EXPECT_OK(rc_st_read_f32(st, "f16", 1, (int64_t[]){8}, out));
    const uint32_t e16[8] = {
        0x3F800000u, /* 0x3C00 = 1.0 */
        0x33800000u, /* 0x0001 = 2^-24 (smallest f16 subnormal) */
        0x80000000u, /* 0x8000 = -0.0 */
        0x387FC000u, /* 0x03FF = 1023 * 2^-24 = 2^-15 * (2 - 2^-9) (largest subnormal) */
        0x38800000u, /* 0x0400 = 2^-14 (smallest normal) */
        0xC0000000u, /* 0xC000 = -2.0 */
        0x477FE000u, /* 0x7BFF = 65504 */
        0x3EAAA000u, /* 0x3555 = 1365/4096 = 0.333251953125 */
    };
    for (int i = 0; i < 8; i++)
        ck_assert_msg(fbits(out[i]) == e16[i], "f16[%d] = 0x%08x, expected 0x%08x", i, fbits(out[i]),
                      e16[i]);
    ck_assert(out[1] == 0x1p-24f);
    ck_assert(out[6] == 65504.0f);

    EXPECT_OK(rc_st_read_f32(st, "bf16", 2, (int64_t[]){2, 3}, out));
    const uint32_t eb[6] = {
        0x3FC00000u, /* 1.5 */
        0xC0100000u, /* -2.25 */
        0x80000000u, /* -0.0 */
        0x00010000u, /* 2^-133, a bf16 subnormal */
        0x7F800000u, /* +inf */
        0x40490000u, /* 3.140625 */
    };
    for (int i = 0; i < 6; i++)
        ck_assert_msg(fbits(out[i]) == eb[i], "bf16[%d] = 0x%08x, expected 0x%08x", i, fbits(out[i]),
                      eb[i]);
    ck_assert(out[0] == 1.5f);
    ck_assert(out[1] == -2.25f);

    EXPECT_OK(rc_st_read_f32(st, "f64", 1, (int64_t[]){5}, out));
    const uint32_t e64[5] = {0x3F800000u, 0x3F800002u, 0x3DCCCCCDu, 0x7F800000u, 0x80000001u};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(fbits(out[i]) == e64[i], "f64->f32[%d] = 0x%08x, expected 0x%08x", i,
                      fbits(out[i]), e64[i]);

    double dd[5];
    EXPECT_OK(rc_st_read_f64(st, "f64", 1, (int64_t[]){5}, dd));
    for (int i = 0; i < 5; i++)
        ck_assert_msg(dbits(dd[i]) == f64[i], "f64[%d] bits differ", i);
    ck_assert(dd[2] == 0.1);

    int32_t ii[3];
    EXPECT_OK(rc_st_read_i32(st, "i32", 1, (int64_t[]){3}, ii));
    ck_assert_int_eq(ii[0], -1);
    ck_assert_int_eq(ii[1], INT32_MAX);
    ck_assert_int_eq(ii[2], 7);

    /* the typed readers refuse the other dtypes */
    EXPECT_ERR(rc_st_read_i32(st, "f32", 2, (int64_t[]){2, 2}, ii), RC_ERR_UNSUPPORTED, p, "\"f32\"",
               "F32", "I32");
    EXPECT_ERR(rc_st_read_f64(st, "f32", 2, (int64_t[]){2, 2}, dd), RC_ERR_UNSUPPORTED, p, "\"f32\"",
               "F32", "F64");
    EXPECT_ERR(rc_st_read_f32(st, "i32", 1, (int64_t[]){3}, out), RC_ERR_UNSUPPORTED, p, "\"i32\"",
               "I32");
    rc_st_close(st);
}
END_TEST

START_TEST(test_header_whitespace_padding)
{
    /* leading JSON whitespace and trailing spaces up to an 8-byte boundary, as
     * the HF writer pads */
    char *core = dq("{'x':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},"
                    "'__metadata__':{'format':'pt'}}");
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "\t\n \r%s", core);
    while ((8 + n) % 8 != 0 || n < (int)strlen(core) + 12)
        hdr[n++] = ' ';
    hdr[n] = '\0';
    const char *p = mpath("pad.safetensors");
    write_st_raw(p, (uint64_t)n, hdr, (size_t)n, k_two_f32, sizeof k_two_f32);
    free(core);
    rc_safetensors *st = open_ok(p);
    ck_assert_int_eq(st->ntensors, 1);
    float v[2];
    EXPECT_OK(rc_st_read_f32(st, "x", 1, (int64_t[]){2}, v));
    ck_assert(v[0] == 1.0f && v[1] == 2.0f);
    rc_st_close(st);
}
END_TEST

START_TEST(test_metadata_strings_ok)
{
    const char *p = mpath("meta.safetensors");
    write_st(p,
             "{'__metadata__':{'format':'pt','note':'x'},"
             "'x':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    rc_safetensors *st = open_ok(p);
    ck_assert_int_eq(st->ntensors, 1);
    ck_assert_ptr_null(rc_st_find(st, "__metadata__"));
    ck_assert_ptr_nonnull(rc_st_find(st, "x"));
    rc_st_close(st);
}
END_TEST

START_TEST(test_metadata_non_string_rejected)
{
    const char *p = mpath("meta.safetensors");
    write_st(p,
             "{'__metadata__':{'format':'pt','step':3},"
             "'x':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "__metadata__", "\"step\"", "not a string");
}
END_TEST

START_TEST(test_metadata_non_string_long_key)
{
    /* The message must name the offending key. The key is long (its jansson
     * storage is too big for malloc's tcache) and freed memory is perturbed,
     * so a message built from already-freed JSON cannot pass by luck. */
    mallopt(M_PERTURB, 0xA5);
    char key[1501];
    memcpy(key, "step", 4);
    memset(key + 4, 'k', sizeof key - 5);
    key[sizeof key - 1] = '\0';
    char *hdr = malloc(2000);
    ck_assert_ptr_nonnull(hdr);
    snprintf(hdr, 2000,
             "{'__metadata__':{'%s':3},"
             "'x':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             key);
    const char *p = mpath("meta.safetensors");
    write_st(p, hdr, k_two_f32, sizeof k_two_f32);
    free(hdr);
    EXPECT_FILE_REJECTED(p, "__metadata__", "\"stepkkkkkkkk");
}
END_TEST

START_TEST(test_metadata_not_object_rejected)
{
    const char *p = mpath("meta.safetensors");
    write_st(p,
             "{'__metadata__':['format','pt'],"
             "'x':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "__metadata__", "not a JSON object");
}
END_TEST

START_TEST(test_empty_and_scalar)
{
    unsigned char d[4];
    put32(d, 0xC0490FDBu); /* -pi */
    const char *p = mpath("es.safetensors");
    write_st(p,
             "{'empty':{'dtype':'F32','shape':[0],'data_offsets':[0,0]},"
             "'scalar':{'dtype':'F32','shape':[],'data_offsets':[0,4]},"
             "'empty2':{'dtype':'BF16','shape':[3,0],'data_offsets':[4,4]}}",
             d, sizeof d);
    rc_safetensors *st = open_ok(p);
    ck_assert_int_eq(st->ntensors, 3);
    float v = 0.0f, dummy[1] = {42.0f};
    EXPECT_OK(rc_st_read_f32(st, "scalar", 0, NULL, &v));
    ck_assert_uint_eq(fbits(v), 0xC0490FDBu);
    EXPECT_OK(rc_st_read_f32(st, "empty", 1, (int64_t[]){0}, dummy));
    EXPECT_OK(rc_st_read_f32(st, "empty2", 2, (int64_t[]){3, 0}, dummy));
    ck_assert(dummy[0] == 42.0f); /* nothing written */
    const rc_st_tensor *t = rc_st_find(st, "scalar");
    ck_assert_int_eq(t->ndim, 0);
    /* a scalar is not a [1] tensor */
    EXPECT_ERR(rc_st_read_f32(st, "scalar", 1, (int64_t[]){1}, &v), RC_ERR_FORMAT, "\"scalar\"",
               "[]", "[1]");
    rc_st_close(st);

    /* a file with no tensors at all: "{}" and no data */
    const char *q = mpath("none.safetensors");
    write_st(q, "{}", NULL, 0);
    st = open_ok(q);
    ck_assert_int_eq(st->ntensors, 0);
    rc_st_close(st);
}
END_TEST

START_TEST(test_misaligned_data)
{
    /* 8 + N odd: the data of an F32 tensor starts at an odd file offset */
    char *core = dq("{'w':{'dtype':'F32','shape':[3],'data_offsets':[0,12]},"
                    "'h':{'dtype':'F16','shape':[3],'data_offsets':[12,18]}}");
    char hdr[256];
    int n = snprintf(hdr, sizeof hdr, "%s", core);
    if ((8 + n) % 2 == 0)
        hdr[n++] = ' ';
    while ((8 + n) % 4 != 1) /* odd and not even 2-aligned: worst case */
        hdr[n++] = ' ';
    hdr[n] = '\0';
    free(core);
    unsigned char d[18];
    put32(d, 0x3F800001u);  /* 1 + 2^-23 */
    put32(d + 4, 0xBF000000u); /* -0.5 */
    put32(d + 8, 0x7F7FFFFFu); /* FLT_MAX */
    put16(d + 12, 0x3C01);  /* 1 + 2^-10 */
    put16(d + 14, 0x8001);  /* -2^-24 */
    put16(d + 16, 0xFC00);  /* -inf */
    const char *p = mpath("odd.safetensors");
    write_st_raw(p, (uint64_t)n, hdr, (size_t)n, d, sizeof d);
    rc_safetensors *st = open_ok(p);
    const rc_st_tensor *t = rc_st_find(st, "w");
    ck_assert_ptr_nonnull(t);
    ck_assert_msg(((uintptr_t)t->data) % 4 != 0, "test setup: data is aligned");
    float v[3];
    EXPECT_OK(rc_st_read_f32(st, "w", 1, (int64_t[]){3}, v));
    ck_assert_uint_eq(fbits(v[0]), 0x3F800001u);
    ck_assert_uint_eq(fbits(v[1]), 0xBF000000u);
    ck_assert_uint_eq(fbits(v[2]), 0x7F7FFFFFu);
    EXPECT_OK(rc_st_read_f32(st, "h", 1, (int64_t[]){3}, v));
    ck_assert_uint_eq(fbits(v[0]), 0x3F802000u);
    ck_assert_uint_eq(fbits(v[1]), 0xB3800000u);
    ck_assert_uint_eq(fbits(v[2]), 0xFF800000u);
    rc_st_close(st);
}
END_TEST

START_TEST(test_header_order_differs_from_offsets)
{
    unsigned char d[12];
    put32(d, 0x40400000u);     /* a = 3 */
    put32(d + 4, 0x40800000u); /* b = 4 */
    put32(d + 8, 0x40A00000u); /* c = 5 */
    const char *p = mpath("order.safetensors");
    write_st(p,
             "{'c':{'dtype':'F32','shape':[1],'data_offsets':[8,12]},"
             "'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]},"
             "'b':{'dtype':'F32','shape':[1],'data_offsets':[4,8]}}",
             d, sizeof d);
    rc_safetensors *st = open_ok(p);
    float v;
    EXPECT_OK(rc_st_read_f32(st, "a", 1, (int64_t[]){1}, &v));
    ck_assert(v == 3.0f);
    EXPECT_OK(rc_st_read_f32(st, "b", 1, (int64_t[]){1}, &v));
    ck_assert(v == 4.0f);
    EXPECT_OK(rc_st_read_f32(st, "c", 1, (int64_t[]){1}, &v));
    ck_assert(v == 5.0f);
    rc_st_close(st);
}
END_TEST

START_TEST(test_unsupported_dtype_read)
{
    unsigned char d[20] = {1, 2, 3, 4};
    put64(d + 4, 5);
    put32(d + 12, 0x3F800000u);
    d[16] = 1; /* BOOL */
    const char *p = mpath("u.safetensors");
    write_st(p,
             "{'bytes':{'dtype':'U8','shape':[4],'data_offsets':[0,4]},"
             "'position_ids':{'dtype':'I64','shape':[1,1],'data_offsets':[4,12]},"
             "'w':{'dtype':'F32','shape':[1],'data_offsets':[12,16]},"
             "'mask':{'dtype':'BOOL','shape':[2,2],'data_offsets':[16,20]}}",
             d, sizeof d);
    rc_safetensors *st = open_ok(p);
    ck_assert_int_eq(st->ntensors, 4);
    float v[4];
    EXPECT_OK(rc_st_read_f32(st, "w", 1, (int64_t[]){1}, v));
    ck_assert(v[0] == 1.0f);
    EXPECT_ERR(rc_st_read_f32(st, "bytes", 1, (int64_t[]){4}, v), RC_ERR_UNSUPPORTED, p,
               "\"bytes\"", "U8");
    EXPECT_ERR(rc_st_read_f32(st, "position_ids", 2, (int64_t[]){1, 1}, v), RC_ERR_UNSUPPORTED, p,
               "\"position_ids\"", "I64");
    EXPECT_ERR(rc_st_read_f32(st, "mask", 2, (int64_t[]){2, 2}, v), RC_ERR_UNSUPPORTED, p,
               "\"mask\"", "BOOL");
    rc_st_close(st);
}
END_TEST

START_TEST(test_wrong_shape_and_missing)
{
    unsigned char d[24] = {0};
    const char *p = mpath("model.safetensors");
    write_st(p, "{'layer.w':{'dtype':'F32','shape':[3,2],'data_offsets':[0,24]}}", d, sizeof d);
    rc_safetensors *st = open_ok(p);
    float v[6];
    EXPECT_ERR(rc_st_read_f32(st, "layer.w", 2, (int64_t[]){2, 3}, v), RC_ERR_FORMAT, p,
               "\"layer.w\"", "[2, 3]", "[3, 2]", "F32");
    EXPECT_ERR(rc_st_read_f32(st, "layer.w", 1, (int64_t[]){6}, v), RC_ERR_FORMAT, "\"layer.w\"",
               "[6]", "[3, 2]");
    EXPECT_ERR(rc_st_read_f32(st, "layer.b", 1, (int64_t[]){3}, v), RC_ERR_FORMAT, "\"layer.b\"",
               "missing");
    EXPECT_ERR(rc_st_read_i32(st, "nope", 1, (int64_t[]){3}, NULL), RC_ERR_FORMAT, "\"nope\"",
               "missing");
    EXPECT_ERR(rc_st_read_f64(st, "nope", 1, (int64_t[]){3}, NULL), RC_ERR_FORMAT, "\"nope\"",
               "missing");
    ck_assert_ptr_null(rc_st_find(st, "layer.b"));
    rc_st_close(st);
}
END_TEST

/* two shards + index */
static void write_sharded(const char *index_sq)
{
    unsigned char d1[12], d2[8];
    put32(d1, 0x3F800000u);     /* a[0] = 1 */
    put32(d1 + 4, 0x40000000u); /* a[1] = 2 */
    put16(d1 + 8, 0x3FC0);      /* b = 1.5 (bf16) */
    put16(d1 + 10, 0xC010);     /* b = -2.25 */
    put64(d2, 0x3FF8000000000000ull); /* c = 1.5 (f64) */
    write_st(mpath("model-00001-of-00002.safetensors"),
             "{'__metadata__':{'format':'pt'},"
             "'model.a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},"
             "'model.b':{'dtype':'BF16','shape':[2],'data_offsets':[8,12]}}",
             d1, sizeof d1);
    write_st(mpath("model-00002-of-00002.safetensors"),
             "{'model.c':{'dtype':'F64','shape':[1],'data_offsets':[0,8]}}", d2, sizeof d2);
    char *idx = dq(index_sq);
    write_text(mpath("model.safetensors.index.json"), idx);
    free(idx);
}

static const char *k_good_index =
    "{'metadata':{'total_size':20},'weight_map':{"
    "'model.a':'model-00001-of-00002.safetensors',"
    "'model.c':'model-00002-of-00002.safetensors',"
    "'model.b':'model-00001-of-00002.safetensors'}}";

START_TEST(test_sharded_ok)
{
    write_sharded(k_good_index);
    /* a model.safetensors next to the index is ignored: the index wins */
    write_text(mpath("model.safetensors"), "junk");
    rc_safetensors *st = open_dir_ok();
    ck_assert_int_eq(st->nfiles, 2);
    ck_assert_int_eq(st->ntensors, 3);
    const rc_st_tensor *a = rc_st_find(st, "model.a"), *b = rc_st_find(st, "model.b"),
                       *c = rc_st_find(st, "model.c");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(rc_st_path_of(st, a), mpath("model-00001-of-00002.safetensors"));
    ck_assert_str_eq(rc_st_path_of(st, b), mpath("model-00001-of-00002.safetensors"));
    ck_assert_str_eq(rc_st_path_of(st, c), mpath("model-00002-of-00002.safetensors"));
    float v[2];
    EXPECT_OK(rc_st_read_f32(st, "model.a", 1, (int64_t[]){2}, v));
    ck_assert(v[0] == 1.0f && v[1] == 2.0f);
    EXPECT_OK(rc_st_read_f32(st, "model.b", 1, (int64_t[]){2}, v));
    ck_assert(v[0] == 1.5f && v[1] == -2.25f);
    EXPECT_OK(rc_st_read_f32(st, "model.c", 1, (int64_t[]){1}, v));
    ck_assert(v[0] == 1.5f);
    double dv;
    EXPECT_OK(rc_st_read_f64(st, "model.c", 1, (int64_t[]){1}, &dv));
    ck_assert(dv == 1.5);
    rc_st_close(st);
}
END_TEST

START_TEST(test_single_file_dir_ok)
{
    write_st(mpath("model.safetensors"), "{'x':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    rc_safetensors *st = open_dir_ok();
    ck_assert_int_eq(st->nfiles, 1);
    ck_assert_int_eq(st->ntensors, 1);
    ck_assert_str_eq(rc_st_path_of(st, rc_st_find(st, "x")), mpath("model.safetensors"));
    float v[2];
    EXPECT_OK(rc_st_read_f32(st, "x", 1, (int64_t[]){2}, v));
    ck_assert(v[0] == 1.0f && v[1] == 2.0f);
    rc_st_close(st);
}
END_TEST

START_TEST(test_shard_symlink_inside_ok)
{
    /* a shard that is a symlink to a file inside the folder is fine */
    write_sharded(k_good_index);
    ck_assert_int_eq(rename(mpath("model-00002-of-00002.safetensors"), mpath("blob-2")), 0);
    ck_assert_int_eq(symlink("blob-2", mpath("model-00002-of-00002.safetensors")), 0);
    rc_safetensors *st = open_dir_ok();
    ck_assert_int_eq(st->ntensors, 3);
    rc_st_close(st);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* malformed single files                                                   */

START_TEST(test_bad_short_file)
{
    const char *p = mpath("short.safetensors");
    write_file(p, "\x02\0\0\0\0", 5);
    EXPECT_FILE_REJECTED(p, "5 bytes", "too small");
    const char *q = mpath("empty.safetensors");
    write_file(q, "", 0);
    EXPECT_FILE_REJECTED(q, "0 bytes", "too small");
}
END_TEST

START_TEST(test_bad_header_too_large)
{
    const char *p = mpath("big.safetensors");
    write_st_raw(p, 100000001ull, "{}", 2, NULL, 0);
    EXPECT_FILE_REJECTED(p, "header length 100000001", "100000000");
    /* a huge length that would overflow 8 + N */
    const char *q = mpath("huge.safetensors");
    write_st_raw(q, UINT64_MAX, "{}", 2, NULL, 0);
    EXPECT_FILE_REJECTED(q, "header length", "exceeds");
}
END_TEST

START_TEST(test_bad_header_past_eof)
{
    const char *p = mpath("past.safetensors");
    write_st_raw(p, 1000, "{}", 2, NULL, 0);
    EXPECT_FILE_REJECTED(p, "header length 1000", "past the end", "10-byte file");
}
END_TEST

START_TEST(test_bad_header_utf8)
{
    const char *hdr = "{\"x\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    const char *p = mpath("utf8.safetensors");
    write_st_raw(p, strlen(hdr), hdr, strlen(hdr), k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "UTF-8", "byte 3");
    /* an overlong encoding of '/' (C0 AF) and a lone surrogate (ED A0 80) */
    const char *h2 = "{\"__metadata__\":{\"a\":\"\xc0\xaf\"}}";
    const char *q = mpath("overlong.safetensors");
    write_st_raw(q, strlen(h2), h2, strlen(h2), NULL, 0);
    EXPECT_FILE_REJECTED(q, "UTF-8");
    const char *h3 = "{\"__metadata__\":{\"a\":\"\xed\xa0\x80\"}}";
    const char *r = mpath("surrogate.safetensors");
    write_st_raw(r, strlen(h3), h3, strlen(h3), NULL, 0);
    EXPECT_FILE_REJECTED(r, "UTF-8");
}
END_TEST

START_TEST(test_bad_header_not_json)
{
    const char *p = mpath("nojson.safetensors");
    write_st(p, "{'x':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}", k_two_f32,
             sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "not valid JSON");
    /* two JSON values back to back */
    const char *q = mpath("two.safetensors");
    write_st(q, "{}{}", NULL, 0);
    EXPECT_FILE_REJECTED(q, "not valid JSON");
}
END_TEST

START_TEST(test_bad_header_not_object)
{
    const char *p = mpath("arr.safetensors");
    write_st(p, "[]", NULL, 0);
    EXPECT_FILE_REJECTED(p, "not a JSON object");
}
END_TEST

START_TEST(test_bad_entry_missing_offsets)
{
    const char *p = mpath("nooff.safetensors");
    write_st(p, "{'layer.0.w':{'dtype':'F32','shape':[2]}}", k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "\"layer.0.w\"", "data_offsets");
}
END_TEST

START_TEST(test_bad_entry_not_object)
{
    const char *p = mpath("ent.safetensors");
    write_st(p, "{'w':[0,8]}", k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "\"w\"", "not a JSON object");
}
END_TEST

START_TEST(test_bad_offsets_arity)
{
    const char *p = mpath("arity.safetensors");
    write_st(p, "{'w':{'dtype':'F32','shape':[2],'data_offsets':[0,4,8]}}", k_two_f32,
             sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "\"w\"", "[begin, end]");
    const char *q = mpath("negoff.safetensors");
    write_st(q, "{'w':{'dtype':'F32','shape':[2],'data_offsets':[-8,0]}}", k_two_f32,
             sizeof k_two_f32);
    EXPECT_FILE_REJECTED(q, "\"w\"", "non-negative");
}
END_TEST

START_TEST(test_bad_unknown_dtype)
{
    const char *p = mpath("f128.safetensors");
    write_st(p, "{'w':{'dtype':'F128','shape':[1],'data_offsets':[0,16]}}", NULL, 0);
    EXPECT_FILE_REJECTED(p, "\"w\"", "unknown dtype", "F128");
    /* dtype names are case-sensitive */
    const char *q = mpath("lower.safetensors");
    write_st(q, "{'w':{'dtype':'f32','shape':[2],'data_offsets':[0,8]}}", k_two_f32,
             sizeof k_two_f32);
    EXPECT_FILE_REJECTED(q, "\"w\"", "unknown dtype", "f32");
}
END_TEST

START_TEST(test_bad_shape_negative)
{
    const char *p = mpath("neg.safetensors");
    write_st(p, "{'w':{'dtype':'F32','shape':[2,-1],'data_offsets':[0,8]}}", k_two_f32,
             sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "\"w\"", "shape[1]", "non-negative integer");
}
END_TEST

START_TEST(test_bad_shape_non_integer)
{
    const char *p = mpath("real.safetensors");
    write_st(p, "{'w':{'dtype':'F32','shape':[2.0],'data_offsets':[0,8]}}", k_two_f32,
             sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "\"w\"", "shape[0]", "non-negative integer");
    const char *q = mpath("str.safetensors");
    write_st(q, "{'w':{'dtype':'F32','shape':['2'],'data_offsets':[0,8]}}", k_two_f32,
             sizeof k_two_f32);
    EXPECT_FILE_REJECTED(q, "\"w\"", "shape[0]");
}
END_TEST

START_TEST(test_bad_too_many_dims)
{
    const char *p = mpath("dims.safetensors");
    write_st(p, "{'w':{'dtype':'F32','shape':[1,1,1,1,1,1,1,1,2],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "\"w\"", "9 dimensions");
}
END_TEST

START_TEST(test_bad_hole)
{
    unsigned char d[12] = {0};
    const char *p = mpath("hole.safetensors");
    write_st(p,
             "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]},"
             "'b':{'dtype':'F32','shape':[1],'data_offsets':[8,12]}}",
             d, sizeof d);
    EXPECT_FILE_REJECTED(p, "\"b\"", "hole", "expected begin 4");
}
END_TEST

START_TEST(test_bad_overlap)
{
    unsigned char d[8] = {0};
    const char *p = mpath("overlap.safetensors");
    write_st(p,
             "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]},"
             "'b':{'dtype':'F32','shape':[1],'data_offsets':[2,6]},"
             "'c':{'dtype':'U8','shape':[2],'data_offsets':[6,8]}}",
             d, sizeof d);
    EXPECT_FILE_REJECTED(p, "\"b\"", "overlap");
    /* two tensors on the same bytes */
    const char *q = mpath("alias.safetensors");
    write_st(q,
             "{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},"
             "'b':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             d, sizeof d);
    EXPECT_FILE_REJECTED(q, "overlap");
}
END_TEST

START_TEST(test_bad_first_not_zero)
{
    unsigned char d[8] = {0};
    const char *p = mpath("first.safetensors");
    write_st(p, "{'a':{'dtype':'F32','shape':[1],'data_offsets':[4,8]}}", d, sizeof d);
    EXPECT_FILE_REJECTED(p, "\"a\"", "hole", "expected begin 0");
}
END_TEST

START_TEST(test_bad_end_before_begin)
{
    unsigned char d[4] = {0};
    const char *p = mpath("endbegin.safetensors");
    write_st(p,
             "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]},"
             "'b':{'dtype':'F32','shape':[0],'data_offsets':[4,0]}}",
             d, sizeof d);
    EXPECT_FILE_REJECTED(p, "\"b\"", "end before begin");
}
END_TEST

START_TEST(test_bad_size_mismatch)
{
    unsigned char d[20] = {0};
    const char *p = mpath("size.safetensors");
    write_st(p, "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[0,20]}}", d, sizeof d);
    EXPECT_FILE_REJECTED(p, "\"w\"", "F32 [2, 3]", "needs 24 bytes", "span 20");
    /* same bytes, wrong dtype width */
    unsigned char e[8] = {0};
    const char *q = mpath("size2.safetensors");
    write_st(q, "{'w':{'dtype':'BF16','shape':[2],'data_offsets':[0,8]}}", e, sizeof e);
    EXPECT_FILE_REJECTED(q, "\"w\"", "needs 4 bytes", "span 8");
}
END_TEST

START_TEST(test_bad_shape_overflow)
{
    const char *p = mpath("ovf.safetensors");
    write_st(p,
             "{'w':{'dtype':'F32','shape':[4294967296,4294967296,16],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(p, "\"w\"", "overflow");
    /* elements fit in 64 bits but bits (x 32) do not */
    const char *q = mpath("ovf2.safetensors");
    write_st(q, "{'w':{'dtype':'F32','shape':[4611686018427387904],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    EXPECT_FILE_REJECTED(q, "\"w\"", "overflow");
}
END_TEST

START_TEST(test_bad_sub_byte)
{
    /* F4 with an odd element count is not a whole number of bytes */
    unsigned char d[2] = {0};
    const char *p = mpath("f4.safetensors");
    write_st(p, "{'w':{'dtype':'F4','shape':[3],'data_offsets':[0,2]}}", d, sizeof d);
    EXPECT_FILE_REJECTED(p, "\"w\"", "12 bits", "whole number of bytes");
}
END_TEST

START_TEST(test_bad_trailing_bytes)
{
    unsigned char d[9] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0x00};
    const char *p = mpath("trail.safetensors");
    write_st(p, "{'w':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", d, sizeof d);
    EXPECT_FILE_REJECTED(p, "trailing");
}
END_TEST

START_TEST(test_bad_truncated_data)
{
    unsigned char d[7] = {0};
    const char *p = mpath("trunc.safetensors");
    write_st(p, "{'w':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", d, sizeof d);
    EXPECT_FILE_REJECTED(p, "truncated");
}
END_TEST

START_TEST(test_bad_duplicate_names)
{
    unsigned char d[8] = {0};
    const char *p = mpath("dup.safetensors");
    write_st(p,
             "{'w':{'dtype':'F32','shape':[1],'data_offsets':[0,4]},"
             "'w':{'dtype':'F32','shape':[1],'data_offsets':[4,8]}}",
             d, sizeof d);
    EXPECT_FILE_REJECTED(p, "duplicate", "w");
}
END_TEST

START_TEST(test_bad_missing_file)
{
    const char *p = mpath("absent.safetensors");
    rc_safetensors *st = (rc_safetensors *)1;
    EXPECT_ERR(rc_st_open_file(p, &st), RC_ERR_IO, p, "cannot open");
    ck_assert_ptr_null(st);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* malformed model folders / indexes                                        */

START_TEST(test_bad_dir_empty)
{
    EXPECT_DIR_REJECTED(RC_ERR_IO, g_model, "model.safetensors");
}
END_TEST

START_TEST(test_bad_same_name_two_shards)
{
    write_sharded(k_good_index);
    /* shard 2 also holds model.a */
    unsigned char d2[16];
    put64(d2, 0x3FF8000000000000ull);
    memcpy(d2 + 8, k_two_f32, 8);
    write_st(mpath("model-00002-of-00002.safetensors"),
             "{'model.c':{'dtype':'F64','shape':[1],'data_offsets':[0,8]},"
             "'model.a':{'dtype':'F32','shape':[2],'data_offsets':[8,16]}}",
             d2, sizeof d2);
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, "\"model.a\"", "also appears in",
                        mpath("model-00001-of-00002.safetensors"),
                        mpath("model-00002-of-00002.safetensors"));
}
END_TEST

START_TEST(test_bad_index_dotdot)
{
    write_sharded("{'weight_map':{'model.a':'../x.safetensors'}}");
    write_st(opath("x.safetensors"), "{'model.a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "../x.safetensors",
                        "leaves the model folder");
}
END_TEST

START_TEST(test_bad_index_absolute)
{
    write_sharded("{'weight_map':{'model.a':'/etc/passwd'}}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "/etc/passwd",
                        "leaves the model folder");
}
END_TEST

START_TEST(test_bad_index_symlink_outside)
{
    write_sharded(k_good_index);
    /* shard 2 becomes a symlink to an identical, valid file outside the folder */
    ck_assert_int_eq(rename(mpath("model-00002-of-00002.safetensors"), opath("outside.safetensors")),
                     0);
    ck_assert_int_eq(symlink(opath("outside.safetensors"), mpath("model-00002-of-00002.safetensors")),
                     0);
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"),
                        "model-00002-of-00002.safetensors", "leaves the model folder",
                        "outside.safetensors");
    /* a relative link that climbs out is caught too */
    unlink(mpath("model-00002-of-00002.safetensors"));
    ck_assert_int_eq(symlink("../outside.safetensors", mpath("model-00002-of-00002.safetensors")), 0);
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, "leaves the model folder");
}
END_TEST

START_TEST(test_bad_index_tensor_not_in_shard)
{
    write_sharded("{'weight_map':{"
                  "'model.a':'model-00001-of-00002.safetensors',"
                  "'model.b':'model-00001-of-00002.safetensors',"
                  "'model.c':'model-00002-of-00002.safetensors',"
                  "'model.d':'model-00002-of-00002.safetensors'}}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "\"model.d\"",
                        "model-00002-of-00002.safetensors", "not in it");
}
END_TEST

START_TEST(test_bad_index_tensor_in_other_shard)
{
    /* model.b is listed for shard 2 but lives in shard 1 */
    write_sharded("{'weight_map':{"
                  "'model.a':'model-00001-of-00002.safetensors',"
                  "'model.b':'model-00002-of-00002.safetensors',"
                  "'model.c':'model-00002-of-00002.safetensors'}}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "\"model.b\"",
                        "found in", mpath("model-00001-of-00002.safetensors"));
}
END_TEST

START_TEST(test_bad_index_shard_name_suffix)
{
    /* Shard names where one is a suffix of the other: "model.w" is listed for
     * "a.safetensors" but is stored in "ba.safetensors". The index is wrong and
     * must be rejected, whatever the file names look like. */
    write_st(mpath("a.safetensors"), "{'model.z':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}",
             k_two_f32, sizeof k_two_f32);
    unsigned char d[16];
    memcpy(d, k_two_f32, 8);
    memcpy(d + 8, k_two_f32, 8);
    write_st(mpath("ba.safetensors"),
             "{'model.w':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},"
             "'model.y':{'dtype':'F32','shape':[2],'data_offsets':[8,16]}}",
             d, sizeof d);
    char *idx = dq("{'weight_map':{'model.z':'a.safetensors','model.w':'a.safetensors',"
                   "'model.y':'ba.safetensors'}}");
    write_text(mpath("model.safetensors.index.json"), idx);
    free(idx);
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "\"model.w\"",
                        "found in", mpath("ba.safetensors"));
}
END_TEST

START_TEST(test_bad_index_weight_map_not_object)
{
    write_sharded("{'metadata':{},'weight_map':['model-00001-of-00002.safetensors']}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "weight_map");
    write_sharded("{'metadata':{}}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "weight_map");
    write_sharded("{'weight_map':{'model.a':7}}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "\"model.a\"",
                        "not a string");
}
END_TEST

START_TEST(test_bad_index_not_json)
{
    write_sharded("{'weight_map':{'model.a':'model-00001-of-00002.safetensors',}}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "JSON");
    write_sharded("{'weight_map':{'model.a':'model-00001-of-00002.safetensors',"
                  "'model.a':'model-00001-of-00002.safetensors'}}");
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "duplicate");
}
END_TEST

START_TEST(test_bad_index_missing_shard)
{
    write_sharded("{'weight_map':{'model.a':'model-00001-of-00002.safetensors',"
                  "'model.q':'model-00003-of-00003.safetensors'}}");
    EXPECT_DIR_REJECTED(RC_ERR_IO, mpath("model.safetensors.index.json"),
                        "model-00003-of-00003.safetensors");
}
END_TEST

START_TEST(test_bad_shard_malformed)
{
    /* an error inside a shard names that shard */
    write_sharded(k_good_index);
    unsigned char d[9] = {0};
    write_st(mpath("model-00002-of-00002.safetensors"),
             "{'model.c':{'dtype':'F64','shape':[1],'data_offsets':[0,8]}}", d, sizeof d);
    EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model-00002-of-00002.safetensors"), "trailing");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* shard paths with "." / ".." / empty components (issue: robustness, 6)    */

START_TEST(test_bad_index_dot_components)
{
    /* each of these names a real shard of the folder, but not in the plain
     * form: the index must give plain relative paths */
    ck_assert_int_eq(mkdir(mpath("sub"), 0700), 0);
    static const char *const k_bad[] = {
        "./model-00001-of-00002.safetensors", /* accepted before the fix */
        "sub/../model-00001-of-00002.safetensors",
        "sub/./../model-00001-of-00002.safetensors",
        "sub//../model-00001-of-00002.safetensors",
        ".//model-00001-of-00002.safetensors",
        "model-00001-of-00002.safetensors/.",
        "",
        ".",
        "..",
    };
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        char idx[512];
        snprintf(idx, sizeof idx,
                 "{'weight_map':{'model.a':'%s','model.b':'model-00001-of-00002.safetensors',"
                 "'model.c':'model-00002-of-00002.safetensors'}}",
                 k_bad[i]);
        write_sharded(idx);
        EXPECT_DIR_REJECTED(RC_ERR_FORMAT, mpath("model.safetensors.index.json"), "\"model.a\"",
                            "shard path");
    }
    /* a shard in a subfolder, named plainly, is fine */
    write_sharded(k_good_index);
    ck_assert_int_eq(rename(mpath("model-00002-of-00002.safetensors"),
                            mpath("sub/model-00002-of-00002.safetensors")),
                     0);
    write_text(mpath("model.safetensors.index.json"),
               "{\"weight_map\":{\"model.a\":\"model-00001-of-00002.safetensors\","
               "\"model.b\":\"model-00001-of-00002.safetensors\","
               "\"model.c\":\"sub/model-00002-of-00002.safetensors\"}}");
    rc_safetensors *st = open_dir_ok();
    ck_assert_int_eq(st->nfiles, 2);
    ck_assert_int_eq(st->ntensors, 3);
    rc_st_close(st);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* many shards and tensors: linear handling and the documented caps (5)     */

/* n one-tensor shards "s<i>.safetensors" holding "t<i>" = {i, -i} (F32 [2]),
 * listed in an index in reverse order */
static void write_many_shards(int n)
{
    for (int i = 0; i < n; i++) {
        char name[64], hdr[160];
        unsigned char d[8];
        put32(d, fbits((float)i));
        put32(d + 4, fbits(-(float)i));
        snprintf(name, sizeof name, "s%05d.safetensors", i);
        snprintf(hdr, sizeof hdr, "{'t%05d':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}", i);
        write_st(mpath(name), hdr, d, sizeof d);
    }
    size_t cap = (size_t)n * 48 + 64, o = 0;
    char *idx = malloc(cap);
    ck_assert_ptr_nonnull(idx);
    o += (size_t)snprintf(idx + o, cap - o, "{\"weight_map\":{");
    for (int i = n - 1; i >= 0; i--)
        o += (size_t)snprintf(idx + o, cap - o, "%s\"t%05d\":\"s%05d.safetensors\"", i == n - 1 ? "" : ",",
                              i, i);
    snprintf(idx + o, cap - o, "}}");
    write_text(mpath("model.safetensors.index.json"), idx);
    free(idx);
}

START_TEST(test_many_shards_ok)
{
    const int n = 3000;
    write_many_shards(n);
    rc_safetensors *st = open_dir_ok();
    ck_assert_int_eq(st->nfiles, n);
    ck_assert_int_eq(st->ntensors, n);
    for (int i = 0; i < n; i += 7) {
        char name[32], shard[32];
        snprintf(name, sizeof name, "t%05d", i);
        snprintf(shard, sizeof shard, "s%05d.safetensors", i);
        const rc_st_tensor *t = rc_st_find(st, name);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(rc_st_path_of(st, t), mpath(shard));
        float v[2];
        EXPECT_OK(rc_st_read_f32(st, name, 1, (int64_t[]){2}, v));
        ck_assert(v[0] == (float)i && v[1] == -(float)i);
    }
    rc_st_close(st);
}
END_TEST

START_TEST(test_bad_too_many_shards)
{
    /* one more distinct shard than the cap: refused before any is opened
     * (none of these files exists) */
    const int n = RC_ST_MAX_SHARDS + 1;
    size_t cap = (size_t)n * 48 + 64, o = 0;
    char *idx = malloc(cap);
    ck_assert_ptr_nonnull(idx);
    o += (size_t)snprintf(idx + o, cap - o, "{\"weight_map\":{");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(idx + o, cap - o, "%s\"t%06d\":\"s%06d.safetensors\"", i ? "," : "", i, i);
    snprintf(idx + o, cap - o, "}}");
    write_text(mpath("model.safetensors.index.json"), idx);
    free(idx);
    char lim[32];
    snprintf(lim, sizeof lim, "%d", RC_ST_MAX_SHARDS);
    EXPECT_DIR_REJECTED(RC_ERR_UNSUPPORTED, mpath("model.safetensors.index.json"), "shards", lim);
}
END_TEST

/* a header with n empty F32 tensors */
static void write_many_empty_tensors(const char *path, int64_t n)
{
    size_t cap = (size_t)n * 64 + 64, o = 0;
    char *h = malloc(cap);
    ck_assert_ptr_nonnull(h);
    o += (size_t)snprintf(h + o, cap - o, "{");
    for (int64_t i = 0; i < n; i++)
        o += (size_t)snprintf(h + o, cap - o, "%s\"e%lld\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                              i ? "," : "", (long long)i);
    o += (size_t)snprintf(h + o, cap - o, "}");
    write_st_raw(path, o, h, o, NULL, 0);
    free(h);
}

START_TEST(test_bad_too_many_tensors_in_file)
{
    const char *p = mpath("model.safetensors");
    write_many_empty_tensors(p, RC_ST_MAX_TENSORS_PER_FILE + 1);
    char lim[32];
    snprintf(lim, sizeof lim, "%d", RC_ST_MAX_TENSORS_PER_FILE);
    rc_safetensors *st = (rc_safetensors *)1;
    EXPECT_ERR(rc_st_open_file(p, &st), RC_ERR_UNSUPPORTED, p, "tensors", lim);
    ck_assert_ptr_null(st);
    /* exactly the cap is fine */
    write_many_empty_tensors(p, RC_ST_MAX_TENSORS_PER_FILE);
    st = open_ok(p);
    ck_assert_int_eq(st->ntensors, RC_ST_MAX_TENSORS_PER_FILE);
    ck_assert_ptr_nonnull(rc_st_find(st, "e12345"));
    rc_st_close(st);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* whole models: data/fixtures copies with one tensor rewritten (1, 4)       */

typedef struct {
    const char *name;  /* tensor to rewrite (or to add, when absent) */
    const char *dtype; /* its new dtype, as written in the header */
    int64_t nbytes;    /* its new byte size (shape unchanged unless shape_str) */
    const char *shape_str; /* e.g. "[2,2]" for an added tensor; NULL: keep */
    void (*patch)(unsigned char *data, int64_t nbytes);
} tensor_edit;

/* Copy data/fixtures/<fx> (config.json + model.safetensors) into g_model,
 * applying `ed` (may be NULL). Tensors are written in name order. */
static void copy_fixture(const char *fx, const tensor_edit *ed)
{
    char src[PATH_MAX];
    rc_test_source_path(src, sizeof src, "data/fixtures/%s/config.json", fx);
    FILE *f = fopen(src, "rb");
    ck_assert_msg(f != NULL, "%s: %s", src, strerror(errno));
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_file(mpath("config.json"), buf, n);

    rc_test_source_path(src, sizeof src, "data/fixtures/%s/model.safetensors", fx);
    rc_safetensors *st = open_ok(src);
    size_t hcap = 1 << 20, ho = 0, dcap = 0;
    char *hdr = malloc(hcap);
    ck_assert_ptr_nonnull(hdr);
    for (int64_t i = 0; i < st->ntensors; i++)
        dcap += (size_t)(st->tensors[i].end - st->tensors[i].begin);
    if (ed)
        dcap += (size_t)ed->nbytes;
    unsigned char *data = malloc(dcap + 1);
    ck_assert_ptr_nonnull(data);
    size_t off = 0;
    bool edited = false;
    ho += (size_t)snprintf(hdr + ho, hcap - ho, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int64_t i = 0; i <= st->ntensors; i++) {
        const rc_st_tensor *t = i < st->ntensors ? &st->tensors[i] : NULL;
        bool is_ed = ed && ((t && strcmp(t->name, ed->name) == 0) || (!t && !edited));
        if (!t && !is_ed)
            break;
        const char *name = t ? t->name : ed->name;
        const char *dt = is_ed ? ed->dtype : t->dtype_name;
        char shape[128];
        if (is_ed && ed->shape_str)
            snprintf(shape, sizeof shape, "%s", ed->shape_str);
        else
            rc_st_shape_str(shape, sizeof shape, t->ndim, t->shape);
        size_t nb = is_ed ? (size_t)ed->nbytes : (size_t)(t->end - t->begin);
        if (is_ed) {
            memset(data + off, 0, nb); /* zeros, unless the dtype is unchanged */
            if (t && strcmp(t->dtype_name, ed->dtype) == 0)
                memcpy(data + off, t->data, nb < t->end - t->begin ? nb : (size_t)(t->end - t->begin));
            if (ed->patch)
                ed->patch(data + off, (int64_t)nb);
            edited = true;
        } else {
            memcpy(data + off, t->data, nb);
        }
        ho += (size_t)snprintf(hdr + ho, hcap - ho, ",\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                               name, dt, shape, off, off + nb);
        off += nb;
    }
    ho += (size_t)snprintf(hdr + ho, hcap - ho, "}");
    ck_assert(ho < hcap);
    write_st_raw(mpath("model.safetensors"), ho, hdr, ho, data, off);
    free(hdr);
    free(data);
    rc_st_close(st);
}

#define EXPECT_MODEL_REJECTED(want, ...)                                  \
    do {                                                                  \
        rc_model *m_ = (rc_model *)1;                                     \
        EXPECT_ERR(rc_model_load(g_model, &m_), (want), __VA_ARGS__);     \
        ck_assert_ptr_null(m_);                                           \
    } while (0)

static void model_ok(void)
{
    rc_model *m = NULL;
    EXPECT_OK(rc_model_load(g_model, &m));
    ck_assert_ptr_nonnull(m);
    rc_model_free(m);
}

/* NaN at element 5 and 77, +Inf at 100, -Inf at 101: F32 */
static void patch_f32_nonfinite(unsigned char *d, int64_t nb)
{
    ck_assert_int_ge(nb, 102 * 4);
    put32(d + 5 * 4, 0x7FC00000u);
    put32(d + 77 * 4, 0xFFC00001u);
    put32(d + 100 * 4, 0x7F800000u);
    put32(d + 101 * 4, 0xFF800000u);
}
/* one +Inf at element 3 (BF16 / F16) */
static void patch_bf16_inf(unsigned char *d, int64_t nb)
{
    ck_assert_int_ge(nb, 8);
    put16(d + 6, 0x7F80);
}
static void patch_f16_nan(unsigned char *d, int64_t nb)
{
    ck_assert_int_ge(nb, 8);
    put16(d + 2, 0x7E00);
    put16(d + 4, 0xFC00); /* -Inf */
}
static void patch_f64_nan(unsigned char *d, int64_t nb)
{
    ck_assert_int_ge(nb, 16);
    put64(d + 8, 0x7FF8000000000000ull);
}
/* a finite F64 above FLT_MAX: becomes +Inf as fp32 */
static void patch_f64_huge(unsigned char *d, int64_t nb)
{
    ck_assert_int_ge(nb, 16);
    put64(d, dbits(1e300));
}

START_TEST(test_model_nonfinite_weights)
{
    const char *file = mpath("model.safetensors");
    /* sanity: the unmodified copies load */
    copy_fixture("neox_parallel", NULL);
    model_ok();
    copy_fixture("neox_bf16", NULL);
    model_ok();

    tensor_edit e1 = {"embed_out.weight", "F32", 320 * 64 * 4, NULL, patch_f32_nonfinite};
    copy_fixture("neox_parallel", &e1);
    EXPECT_MODEL_REJECTED(RC_ERR_FORMAT, file, "\"embed_out.weight\"", "4 non-finite", "NaN", "[320, 64]");

    tensor_edit e2 = {"gpt_neox.final_layer_norm.weight", "BF16", 64 * 2, NULL, patch_bf16_inf};
    copy_fixture("neox_bf16", &e2);
    EXPECT_MODEL_REJECTED(RC_ERR_FORMAT, file, "\"gpt_neox.final_layer_norm.weight\"", "1 non-finite");

    tensor_edit e3 = {"model.layers.1.self_attn.k_proj.weight", "F16", 32 * 64 * 2, NULL, patch_f16_nan};
    copy_fixture("llama_gqa", &e3);
    EXPECT_MODEL_REJECTED(RC_ERR_FORMAT, file, "\"model.layers.1.self_attn.k_proj.weight\"", "2 non-finite");

    tensor_edit e4 = {"model.norm.weight", "F64", 64 * 8, NULL, patch_f64_nan};
    copy_fixture("llama_gqa", &e4);
    EXPECT_MODEL_REJECTED(RC_ERR_FORMAT, file, "\"model.norm.weight\"", "1 non-finite");

    /* finite in the file, but too large for fp32 */
    tensor_edit e5 = {"model.norm.weight", "F64", 64 * 8, NULL, patch_f64_huge};
    copy_fixture("llama_gqa", &e5);
    EXPECT_MODEL_REJECTED(RC_ERR_FORMAT, file, "\"model.norm.weight\"", "1 non-finite");
}
END_TEST

START_TEST(test_model_unsupported_weight_dtype)
{
    const char *file = mpath("model.safetensors");
    /* known safetensors dtypes that are not weight dtypes: exit 5, naming
     * the tensor and the dtype */
    static const struct {
        const char *dt;
        int bits;
    } k[] = {{"I32", 32}, {"C64", 64}, {"U8", 8}, {"I64", 64}, {"I8", 8}, {"BOOL", 8},
             {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"U16", 16}, {"F4", 4}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        tensor_edit e = {"embed_out.weight", k[i].dt, 320 * 64 * k[i].bits / 8, NULL, NULL};
        copy_fixture("neox_parallel", &e);
        EXPECT_MODEL_REJECTED(RC_ERR_UNSUPPORTED, file, "\"embed_out.weight\"", k[i].dt);
    }
    tensor_edit e2 = {"model.layers.0.mlp.gate_proj.weight", "C64", 128 * 64 * 8, NULL, NULL};
    copy_fixture("llama_gqa", &e2);
    EXPECT_MODEL_REJECTED(RC_ERR_UNSUPPORTED, file, "\"model.layers.0.mlp.gate_proj.weight\"", "C64");
    /* a dtype safetensors does not know is a malformed file: exit 4 */
    tensor_edit e3 = {"embed_out.weight", "F128", 320 * 64 * 4, NULL, NULL};
    copy_fixture("neox_parallel", &e3);
    EXPECT_MODEL_REJECTED(RC_ERR_FORMAT, file, "\"embed_out.weight\"", "unknown dtype", "F128");
    /* tensors the model does not read may have any known dtype (pythia
     * checkpoints carry BOOL attention masks) */
    tensor_edit e4 = {"gpt_neox.layers.0.attention.bias", "BOOL", 4, "[1,1,2,2]", NULL};
    copy_fixture("neox_parallel", &e4);
    model_ok();
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *st_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *ok = tcase_create("valid");
    tcase_add_checked_fixture(ok, setup, teardown);
    tcase_add_test(ok, test_all_dtypes_exact);
    tcase_add_test(ok, test_header_whitespace_padding);
    tcase_add_test(ok, test_metadata_strings_ok);
    tcase_add_test(ok, test_empty_and_scalar);
    tcase_add_test(ok, test_misaligned_data);
    tcase_add_test(ok, test_header_order_differs_from_offsets);
    tcase_add_test(ok, test_unsupported_dtype_read);
    tcase_add_test(ok, test_wrong_shape_and_missing);
    tcase_add_test(ok, test_sharded_ok);
    tcase_add_test(ok, test_single_file_dir_ok);
    tcase_add_test(ok, test_shard_symlink_inside_ok);
    tcase_add_test(ok, test_many_shards_ok);
    suite_add_tcase(s, ok);

    TCase *bad = tcase_create("malformed_file");
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_add_test(bad, test_metadata_non_string_rejected);
    tcase_add_test(bad, test_metadata_non_string_long_key);
    tcase_add_test(bad, test_metadata_not_object_rejected);
    tcase_add_test(bad, test_bad_short_file);
    tcase_add_test(bad, test_bad_header_too_large);
    tcase_add_test(bad, test_bad_header_past_eof);
    tcase_add_test(bad, test_bad_header_utf8);
    tcase_add_test(bad, test_bad_header_not_json);
    tcase_add_test(bad, test_bad_header_not_object);
    tcase_add_test(bad, test_bad_entry_missing_offsets);
    tcase_add_test(bad, test_bad_entry_not_object);
    tcase_add_test(bad, test_bad_offsets_arity);
    tcase_add_test(bad, test_bad_unknown_dtype);
    tcase_add_test(bad, test_bad_shape_negative);
    tcase_add_test(bad, test_bad_shape_non_integer);
    tcase_add_test(bad, test_bad_too_many_dims);
    tcase_add_test(bad, test_bad_hole);
    tcase_add_test(bad, test_bad_overlap);
    tcase_add_test(bad, test_bad_first_not_zero);
    tcase_add_test(bad, test_bad_end_before_begin);
    tcase_add_test(bad, test_bad_size_mismatch);
    tcase_add_test(bad, test_bad_shape_overflow);
    tcase_add_test(bad, test_bad_sub_byte);
    tcase_add_test(bad, test_bad_trailing_bytes);
    tcase_add_test(bad, test_bad_truncated_data);
    tcase_add_test(bad, test_bad_duplicate_names);
    tcase_add_test(bad, test_bad_missing_file);
    tcase_add_test(bad, test_bad_too_many_tensors_in_file);
    suite_add_tcase(s, bad);

    TCase *dir = tcase_create("malformed_folder");
    tcase_add_checked_fixture(dir, setup, teardown);
    tcase_add_test(dir, test_bad_dir_empty);
    tcase_add_test(dir, test_bad_same_name_two_shards);
    tcase_add_test(dir, test_bad_index_dotdot);
    tcase_add_test(dir, test_bad_index_absolute);
    tcase_add_test(dir, test_bad_index_symlink_outside);
    tcase_add_test(dir, test_bad_index_tensor_not_in_shard);
    tcase_add_test(dir, test_bad_index_tensor_in_other_shard);
    tcase_add_test(dir, test_bad_index_shard_name_suffix);
    tcase_add_test(dir, test_bad_index_weight_map_not_object);
    tcase_add_test(dir, test_bad_index_not_json);
    tcase_add_test(dir, test_bad_index_missing_shard);
    tcase_add_test(dir, test_bad_shard_malformed);
    tcase_add_test(dir, test_bad_index_dot_components);
    tcase_add_test(dir, test_bad_too_many_shards);
    suite_add_tcase(s, dir);

    TCase *model = tcase_create("model");
    tcase_add_checked_fixture(model, setup, teardown);
    tcase_add_test(model, test_model_nonfinite_weights);
    tcase_add_test(model, test_model_unsupported_weight_dtype);
    suite_add_tcase(s, model);
    return s;
}

int main(void)
{
    if (!rc_test_mkdtemp(g_base, sizeof g_base, "/tmp/rc_test_st_")) {
        perror("mkdtemp");
        return 1;
    }
    int status = rc_test_run(st_suite());
    rc_test_rm_rf(g_base);
    return status;
}
