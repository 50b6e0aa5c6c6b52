/* A quantized checkpoint against transformers' dequantized copy kept as
 * per-tensor hashes (tools/fixtures/deq_hashes.py writes the reference
 * folder: config.json and tensors.txt), shared by tests/test_quant.c (FP8
 * folders) and tests/test_gptoss.c (the MXFP4 folder).
 *
 * Header-only, `static inline`, like testutil.h. */
#ifndef RC_TESTUTIL_DEQ_H
#define RC_TESTUTIL_DEQ_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "util.h"

/* 64-bit FNV-1a of p[n], as deq_hashes.py's fnv1a64 */
static inline uint64_t rc_test_fnv1a64(const unsigned char *p, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

/* The quantized folder qdir (config.json's quant_method must be method)
 * against the hashes of transformers' dequantized copy (ref/tensors.txt:
 * hash, dtype, shape, name per line): the folder holds exactly those
 * tensors, each read as bf16 hashes as transformers' bytes and reads as fp32
 * as their widening. Writes the copy rebuilt from our dequantization
 * (ref/config.json, model.safetensors) to out; returns the number of values,
 * with the number of tensors in *ntensors and, when nquant is not NULL, the
 * number of them stored quantized in *nquant. */
static inline int64_t rc_test_deq_folder(const char *qdir, const char *method, const char *ref, const char *out,
                                         int64_t *ntensors, int64_t *nquant)
{
    char p[4200];
    rc_safetensors *a;
    ck_assert_msg(rc_st_open_dir(qdir, &a) == RC_OK, "%s", rc_last_error());
    ck_assert_str_eq(a->quant_method, method);
    char *txt, *cfg;
    size_t ntxt, ncfg;
    snprintf(p, sizeof p, "%s/tensors.txt", ref);
    ck_assert_msg(rc_read_file(p, &txt, &ntxt, 1u << 24) == RC_OK, "%s", rc_last_error());
    snprintf(p, sizeof p, "%s/config.json", ref);
    ck_assert_msg(rc_read_file(p, &cfg, &ncfg, 1u << 24) == RC_OK, "%s", rc_last_error());
    snprintf(p, sizeof p, "%s/config.json", out);
    FILE *fc = fopen(p, "wb");
    ck_assert_msg(fc != NULL, "%s", p);
    ck_assert(fwrite(cfg, 1, ncfg, fc) == ncfg);
    fclose(fc);
    free(cfg);
    const size_t cap = 1u << 16;
    char *hdr = malloc(cap);
    ck_assert(hdr != NULL);
    size_t hl = (size_t)snprintf(hdr, cap, "{");
    unsigned char *data = NULL;
    uint64_t nd = 0;
    int64_t nt = 0, nvals = 0, nq = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        char hex[20], dt[16], shp[128], name[256];
        ck_assert_msg(sscanf(line, "%19s %15s %127s %255s", hex, dt, shp, name) == 4, "%s: bad line %s", ref, line);
        ck_assert_str_eq(dt, "BF16");
        const uint64_t want = strtoull(hex, NULL, 16);
        int64_t shape[RC_ST_MAX_DIMS];
        int nd_ = 0;
        for (char *q = shp; *q;) {
            ck_assert(nd_ < RC_ST_MAX_DIMS);
            shape[nd_++] = strtoll(q, &q, 10);
            if (*q == 'x')
                q++;
        }
        const rc_st_tensor *ta = rc_st_find(a, name);
        ck_assert_msg(ta != NULL, "%s missing from %s", name, qdir);
        nq += ta->quant != RC_ST_Q_NONE;
        ck_assert_str_eq(ta->dtype_name, "BF16");
        ck_assert_int_eq(ta->ndim, nd_);
        for (int d = 0; d < nd_; d++)
            ck_assert_int_eq(ta->shape[d], shape[d]);
        int64_t n;
        ck_assert(rc_numel(shape, nd_, &n));
        uint16_t *x = malloc(2 * (size_t)n);
        float *fx = malloc(4 * (size_t)n);
        ck_assert_msg(rc_st_read_weight_as(a, name, nd_, shape, RC_BF16, x) == RC_OK, "%s", rc_last_error());
        ck_assert(rc_st_read_weight(a, name, nd_, shape, fx) == RC_OK);
        unsigned char *grown = realloc(data, nd + 2 * (uint64_t)n);
        ck_assert(grown != NULL);
        data = grown;
        for (int64_t i = 0; i < n; i++) { /* little-endian, as the hash was taken */
            data[nd + 2 * (uint64_t)i] = (unsigned char)(x[i] & 0xFF);
            data[nd + 2 * (uint64_t)i + 1] = (unsigned char)(x[i] >> 8);
            ck_assert_msg(rc_f32_bits(fx[i]) == (uint32_t)x[i] << 16, "%s element %lld differs as fp32", name,
                          (long long)i);
        }
        const uint64_t got = rc_test_fnv1a64(data + nd, 2 * (size_t)n);
        ck_assert_msg(got == want, "%s: dequantized bf16 hash %016llx, transformers' %016llx", name,
                      (unsigned long long)got, (unsigned long long)want);
        hl += (size_t)snprintf(hdr + hl, cap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[", nt ? "," : "", name);
        for (int d = 0; d < nd_; d++)
            hl += (size_t)snprintf(hdr + hl, cap - hl, "%s%lld", d ? "," : "", (long long)shape[d]);
        hl += (size_t)snprintf(hdr + hl, cap - hl, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)nd,
                               (unsigned long long)(nd + 2 * (uint64_t)n));
        ck_assert(hl + 8 < cap);
        nd += 2 * (uint64_t)n;
        nvals += n;
        nt++;
        free(x);
        free(fx);
    }
    ck_assert_int_eq(nt, a->ntensors); /* no tensor of the folder unaccounted for */
    hdr[hl++] = '}';
    while (hl % 8)
        hdr[hl++] = ' ';
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    FILE *f = fopen(p, "wb");
    ck_assert_msg(f != NULL, "%s", p);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    ck_assert(fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, hl, f) == hl && fwrite(data, 1, nd, f) == nd);
    fclose(f);
    free(hdr);
    free(data);
    free(txt);
    rc_st_close(a);
    *ntensors = nt;
    if (nquant)
        *nquant = nq;
    return nvals;
}

#endif
