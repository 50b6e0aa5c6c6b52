/* libFuzzer harness (a): one .safetensors file.
 *
 * Input = the whole file. It is written to a scratch file, opened with
 * rc_st_open_file, and when that succeeds every tensor is looked up and read
 * (rc_st_read_f32 / _i32 / _f64 into a buffer of exactly the right size), so
 * ASan sees any read past the mapping; rc_st_read_weight must give the same
 * bits as rc_st_read_f32 and refuse exactly the tensors holding NaN or Inf.
 *
 * Each file that opens is then read again as a quantized checkpoint's
 * (rc_st_apply_quant with an FP8 16 x 16 block and an MXFP4
 * quantization_config): the checks refuse or every dequantized tensor reads.
 *
 * The custom mutator knows the layout (u64 header length, JSON header, data):
 * half the time it edits the header JSON, rewrites the length and resizes the
 * data to what the offsets ask for, so that deep validation is reached.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "safetensors.h"
#include "util.h"

static char g_path[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    snprintf(g_path, sizeof g_path, "%s/input.safetensors", fz_scratch_dir("st"));
    return 0;
}

/* rc_st_read_weight against rc_st_read_f32: the same values, and an error
 * exactly when one of them is not finite (n floats already read into f). */
static void check_weight_read(const rc_safetensors *st, const rc_st_tensor *t, int64_t n, const float *f,
                              rc_status s_f32)
{
    float *w = malloc(n ? (size_t)n * 4 : 1);
    rc_status s = rc_st_read_weight(st, t->name, t->ndim, t->shape, w);
    fz_check_msg(s, NULL);
    if (s_f32 != RC_OK) {
        if (s != s_f32)
            abort(); /* same refusal (dtype) as rc_st_read_f32 */
    } else {
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += !isfinite(f[i]);
        if ((s == RC_OK) != (bad == 0) || (s != RC_OK && s != RC_ERR_FORMAT))
            abort(); /* refused exactly when a value is NaN or Inf */
        if (s == RC_OK && n && memcmp(w, f, (size_t)n * 4) != 0)
            abort(); /* the same bits */
    }
    free(w);
}

static void read_all(const rc_safetensors *st)
{
    for (int64_t i = 0; i < st->ntensors; i++) {
        const rc_st_tensor *t = &st->tensors[i];
        if (rc_st_find(st, t->name) == NULL)
            abort(); /* every tensor must be findable by its own name */
        char sh[128];
        rc_st_shape_str(sh, sizeof sh, t->ndim, t->shape);
        int64_t n;
        if (!rc_numel(t->shape, t->ndim, &n))
            abort(); /* the reader accepted a shape whose element count overflows */
        if (rc_st_find(st, t->name) != t)
            continue; /* (cannot happen: duplicate names are rejected) */
        size_t bytes;
        if (__builtin_mul_overflow((size_t)n, (size_t)8, &bytes) || bytes > ((size_t)1 << 31))
            abort(); /* data must be bounded by the file size */
        rc_status s;
        if (t->dtype == RC_I32) {
            int32_t *d = malloc(n ? (size_t)n * 4 : 1);
            s = rc_st_read_i32(st, t->name, t->ndim, t->shape, d);
            free(d);
        } else if (t->dtype == RC_F64) {
            double *d = malloc(n ? (size_t)n * 8 : 1);
            s = rc_st_read_f64(st, t->name, t->ndim, t->shape, d);
            free(d);
            float *f = malloc(n ? (size_t)n * 4 : 1);
            s = rc_st_read_f32(st, t->name, t->ndim, t->shape, f);
            check_weight_read(st, t, n, f, s);
            free(f);
        } else {
            float *d = malloc(n ? (size_t)n * 4 : 1);
            s = rc_st_read_f32(st, t->name, t->ndim, t->shape, d);
            check_weight_read(st, t, n, d, s);
            free(d);
        }
        (void)s;
    }
    /* a name that is not there */
    rc_st_find(st, "\x01no such tensor");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(g_path, data, size);
    rc_safetensors *st = NULL;
    rc_status s = rc_st_open_file(g_path, &st);
    fz_check_msg(s, g_path);
    if (s == RC_OK) {
        read_all(st);
        rc_st_close(st);
    } else if (st) {
        abort(); /* *out must stay NULL on failure */
    }
    /* the same file as a quantized checkpoint's (FP8 blocks, MXFP4): the
     * dequantized tensors read like any other */
    static const char *const k_quant[] = {
        "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [16, 16]}}",
        "{\"dtype\": \"float32\", \"quantization_config\": {\"quant_method\": \"mxfp4\"}}"};
    for (size_t q = 0; s == RC_OK && q < sizeof k_quant / sizeof k_quant[0]; q++) {
        rc_safetensors *qs = NULL;
        if (rc_st_open_file(g_path, &qs) != RC_OK)
            abort(); /* it opened above */
        rc_status sq = rc_st_apply_quant(qs, k_quant[q], strlen(k_quant[q]), "config.json");
        fz_check_msg2(sq, "config.json", g_path); /* the config or a malformed tensor of the file */
        if (sq == RC_OK)
            read_all(qs);
        rc_st_close(qs);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */

static const char *const k_keys[] = {"__metadata__", "dtype", "shape", "data_offsets", "t", "w.weight",
                                     "format", NULL};
static const char *const k_strings[] = {
    "F32",     "F16",     "BF16",        "F64",         "I32", "I64", "U8", "I8", "BOOL", "F4", "F6_E2M3",
    "F6_E3M2", "F8_E5M2", "F8_E4M3",     "F8_E8M0",     "I16", "U16", "U32", "U64", "C64",
    "F8_E4M3FNUZ",        "F8_E5M2FNUZ", "pt",          "X",   "",    NULL};
static const fz_json_dict k_dict = {k_keys, k_strings};

/* Largest end offset named in the header (0 when none / not parseable). */
static uint64_t max_end(json_t *root)
{
    uint64_t m = 0;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        json_t *o = json_is_object(v) ? json_object_get(v, "data_offsets") : NULL;
        json_t *e = json_is_array(o) ? json_array_get(o, 1) : NULL;
        if (json_is_integer(e) && json_integer_value(e) > 0 && (uint64_t)json_integer_value(e) > m)
            m = (uint64_t)json_integer_value(e);
    }
    return m;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    uint64_t r = seed * 0x2545F4914F6CDD1Dull + 7;
    if (size < 8 || fz_rand(&r) % 3 == 0)
        return LLVMFuzzerMutate(data, size, max_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | data[i];
    if (n > size - 8)
        return LLVMFuzzerMutate(data, size, max_size);
    json_t *root = json_loadb((const char *)data + 8, (size_t)n, 0, NULL);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    fz_json_edit(root, &r, &k_dict);
    char *hdr = json_dumps(root, JSON_COMPACT);
    uint64_t want = max_end(root);
    json_decref(root);
    if (!hdr)
        return LLVMFuzzerMutate(data, size, max_size);
    size_t hl = strlen(hdr);
    size_t old_data = size - 8 - (size_t)n;
    size_t new_data = old_data;
    unsigned how = (unsigned)(fz_rand(&r) % 4);
    if (how < 2 && want <= max_size)
        new_data = (size_t)want; /* what the offsets ask for */
    else if (how == 2)
        new_data = old_data + (fz_rand(&r) % 3) - 1; /* off by one either way */
    if (new_data > (size_t)1 << 30 || 8 + hl + new_data > max_size) {
        free(hdr);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    uint8_t *out = malloc(8 + hl + new_data + 1);
    uint64_t hl64 = hl;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(hl64 >> (8 * i));
    memcpy(out + 8, hdr, hl);
    size_t keep = old_data < new_data ? old_data : new_data;
    memcpy(out + 8 + hl, data + 8 + n, keep);
    for (size_t i = keep; i < new_data; i++)
        out[8 + hl + i] = (uint8_t)fz_rand(&r);
    size_t total = 8 + hl + new_data;
    memcpy(data, out, total);
    free(out);
    free(hdr);
    return total;
}
