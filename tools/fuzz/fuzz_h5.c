/* libFuzzer harness (h5): the HDF5 results reader, rc_h5_read, and the
 * --rollouts-from check, rc_results_check_replay.
 *
 * Design: structure-aware. Flipping bytes of an HDF5 container mostly finds
 * bugs inside libhdf5 1.10 itself (corrupt B-trees, heaps, object headers),
 * which ratiocheck cannot fix; what our reader must survive is a well-formed
 * HDF5 file whose *contents* are hostile. So the fuzz input is not a file: it
 * is a little program, consumed byte by byte, that builds one through the
 * HDF5 API:
 *   1. a valid rc_results of a few prompts / samples / tokens / lengths whose
 *      sizes, ids, valid counts, log-probs (NaN, -inf, ...) and optional text
 *      come from the input, written with rc_h5_write: the exact layout the
 *      writer produces; each with or without score's trainer_logprobs
 *      (/rollouts/logprob_trainer, with or without logprob_ratiocheck and
 *      /threeway), --distribution's kl / tv / top1_agree on every length,
 *      and a MoE run's /routing (1..3 layers, top 1..3 of up to 8 experts,
 *      a side that recorded none on some tokens);
 *   2. up to 12 edits of that file, reopened read-write with the HDF5 API:
 *      replace a dataset the reader reads (rank 0..3, extents from "what the
 *      attributes say" +-1 to 2^40, type class and size: signed / unsigned /
 *      big-endian integers, floats, variable / fixed strings, compound, enum,
 *      opaque; contiguous, chunked or compact; deflate, shuffle, fletcher32,
 *      n-bit, scale-offset; a fill value; data written or not, values from the
 *      input incl. NaN, +-inf, huge and negative), replace a root attribute
 *      (same type choices, scalar, null or 0..300 elements, interesting
 *      integers such as 2^62 + 2 and INT64_MIN, NaN, strings from the input),
 *      patch one element of a dataset (an expert near the count or -2, a
 *      top-1 flag near {-1, 0, 1}, a layer out of order, NaN / inf / huge
 *      weights, kl, tv and trainer log-probs), replace an attribute of
 *      /routing (moe_layers, top_k, experts near the written ones or
 *      INT64_MIN / 2^62, another type, none), /threeway or /sweep, delete a
 *      dataset, group or attribute (/routing, /threeway, ...), or "inflate": declare up to 2^24 prompts / sequences /
 *      tokens consistently in the attributes and every dataset (chunked, at
 *      most one chunk written; /routing also with up to 2^24 layers and
 *      top-k), the small file that declares gigabytes;
 *   3. rc_h5_read on the result, then rc_results_check_replay with a
 *      vocabulary and context taken from the input.
 * Oracles (abort on violation), besides ASan / UBSan:
 *   - a failure leaves *out zeroed, and its message is one line naming the
 *     file; HDF5's error printing is still off afterwards;
 *   - an accepted file has sizes within the reader's bounds (including
 *     the storage bound: about 1032 x 8 x the file size in bytes), every
 *     index in range, and every array is read end to end (ASan checks that
 *     each is as long as its shape says);
 *   - an accepted /routing has the results' shape, experts -1 or in
 *     [0, experts), layers increasing, its statistics in range, every
 *     length's routing statistics (the record's at the longest length) and
 *     the verdict's routing line (none without a record); kl / tv /
 *     top1_agree on every length or none, top-1 flags in {-1, 0, 1};
 *     ratiocheck's column only with the trainer's, and then /threeway;
 *   - a file accepted for replay has every id usable as a row index of a
 *     [vocab] log-prob array (read through one, as generate() does) and
 *     prompts that fit the context;
 *   - an accepted file can be written again with rc_h5_write and read back
 *     with the same sizes and the same optional parts, and `diff`'s
 *     comparison of the two routing records (rc_routing_compare) finds every
 *     token both recorded and none that differs.
 *
 * Build (until tools/fuzz/build.sh builds every fuzz_*.c against the whole
 * library), from the repository root, with BUILD a meson build folder (for
 * rc_build_config.h):
 *   clang -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -g -O1 \
 *     -Isrc/base -Isrc/formats -Isrc/engine -Isrc/results -Isrc/check -Imodels -Itools/fuzz -IBUILD tools/fuzz/fuzz_h5.c src/results/h5in.c src/results/h5out.c src/results/h5stream.c src/results/h5path.c \
 *     src/results/stats.c src/base/status.c src/base/util.c -o fuzz_h5 $(pkg-config --cflags --libs hdf5-serial jansson) -lm
 * Run: ./fuzz_h5 -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 CORPUS tools/fuzz/corpus/h5
 * FUZZ_H5_TRACE=1 prints each replaced dataset, inflation, and the reader's
 * and the replay check's verdicts (to see what an input builds).
 * Not fuzzed, on purpose: data through n-bit / scale-offset (libhdf5 1.10
 * corrupts its heap writing some types with them; the datasets are still
 * made, unwritten, for the reader to refuse) and byte-level damage to the
 * container (libhdf5's own parser).
 */
#include <hdf5.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "results.h"
#include "routing.h"
#include "status.h"
#include "util.h"

static char g_path[600], g_path2[600];
static bool g_trace; /* FUZZ_H5_TRACE=1: print each edit (to replay a crash) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fz_scratch_dir("h5");
    snprintf(g_path, sizeof g_path, "%s/input.h5", dir);
    snprintf(g_path2, sizeof g_path2, "%s/again.h5", dir);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    g_trace = getenv("FUZZ_H5_TRACE") != NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* the input, consumed byte by byte (zeros once it runs out)                 */

typedef struct {
    const uint8_t *d;
    size_t n, i;
} fin;

static uint64_t take(fin *in, int bytes)
{
    uint64_t v = 0;
    for (int b = 0; b < bytes; b++)
        v |= (uint64_t)(in->i < in->n ? in->d[in->i++] : 0) << (8 * b);
    return v;
}

static uint32_t pick(fin *in, uint32_t n) { return n <= 1 ? 0 : (uint32_t)(take(in, n > 256 ? 2 : 1) % n); }

static const int64_t k_ints[] = {0,
                                 1,
                                 -1,
                                 2,
                                 3,
                                 -5,
                                 7,
                                 63,
                                 64,
                                 65,
                                 255,
                                 256,
                                 287,
                                 288,
                                 319,
                                 320,
                                 4096,
                                 65535,
                                 65536,
                                 (int64_t)1 << 18,
                                 (int64_t)1 << 24,
                                 ((int64_t)1 << 24) + 1,
                                 INT32_MAX,
                                 (int64_t)INT32_MAX + 1,
                                 INT32_MIN,
                                 (int64_t)1 << 40,
                                 ((int64_t)1 << 62) + 2,
                                 INT64_MAX,
                                 INT64_MIN};
static const double k_dbls[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.5, 1e30, -1e30, 1e300, 3e9, -3e9, 1e-320};

static int64_t any_int(fin *in, int64_t near)
{
    switch (pick(in, 4)) {
    case 0: return near;
    case 1: return (int64_t)((uint64_t)near + (uint64_t)pick(in, 3) - 1u); /* wraps, never overflows */
    case 2: return (int64_t)pick(in, 400) - 8;
    default: return k_ints[pick(in, sizeof k_ints / sizeof k_ints[0])];
    }
}

static double any_dbl(fin *in)
{
    switch (pick(in, 6)) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return -(double)pick(in, 2000) / 100.0;
    default: return k_dbls[pick(in, sizeof k_dbls / sizeof k_dbls[0])];
    }
}

/* a NUL-terminated string of up to 24 input bytes, in a static ring */
static const char *any_str(fin *in)
{
    static char bufs[64][32];
    static unsigned next;
    char *b = bufs[next++ % 64];
    size_t n = pick(in, 25);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)(take(in, 1) | 1); /* no NUL inside */
    b[n] = '\0';
    return b;
}

/* ------------------------------------------------------------------------ */
/* 1. a valid results file                                                  */

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p)
        abort();
    return p;
}

static const float k_lps[] = {-0.5f, -1.25f, -7.0f, 0.0f, -1e-7f, -30.0f, -INFINITY, NAN};

/* what score, --distribution and a MoE run add: the trainer's (and
 * ratiocheck's) log-probs with /threeway, each length's kl / tv /
 * top1_agree, and /routing; each present or not, from the input */
static void make_extras(fin *in, rc_results *r)
{
    const int64_t S = r->n_seq, G = r->gen_len;
    if (pick(in, 3) == 0) {
        r->logprob_trainer = xcalloc((size_t)(S * G), sizeof(float));
        for (int64_t s = 0; s < S; s++)
            for (int64_t t = 0; t < G; t++)
                r->logprob_trainer[s * G + t] = t < r->gen_valid[s] ? k_lps[pick(in, 8)] : NAN;
        if (pick(in, 2)) {
            r->logprob_ratiocheck = xcalloc((size_t)(S * G), sizeof(float));
            for (int64_t s = 0; s < S; s++)
                for (int64_t t = 0; t < G; t++)
                    r->logprob_ratiocheck[s * G + t] = t < r->gen_valid[s] ? k_lps[pick(in, 8)] : NAN;
            r->threeway = xcalloc(1, sizeof *r->threeway);
            snprintf(r->threeway->ratiocheck, sizeof r->threeway->ratiocheck, "%s", any_str(in));
            rc_threeway_acc a;
            memset(&a, 0, sizeof a);
            for (int64_t s = 0; s < S; s++)
                for (int64_t i = s * G; i < s * G + r->gen_valid[s]; i++)
                    rc_threeway_add(&a, r->logprob_gen[i], r->logprob_trainer[i], r->logprob_ratiocheck[i],
                                    r->logprob_ref ? r->logprob_ref[i] : NAN);
            r->threeway->len = G;
            rc_threeway_finish(&a, r->threeway);
        }
    }
    if (pick(in, 3) == 0) /* --distribution */
        for (int i = 0; i < r->n_lens; i++) {
            rc_len_result *lr = &r->lens[i];
            const int64_t L = lr->len;
            lr->dist_kl = xcalloc((size_t)(S * L), sizeof(double));
            lr->dist_tv = xcalloc((size_t)(S * L), sizeof(double));
            lr->dist_top1 = xcalloc((size_t)(S * L), sizeof(int32_t));
            for (int64_t s = 0; s < S; s++)
                for (int64_t t = 0; t < L; t++) {
                    const bool v = t < r->gen_valid[s];
                    lr->dist_kl[s * L + t] = v ? (pick(in, 4) ? (double)pick(in, 100) / 50.0 : any_dbl(in)) : NAN;
                    lr->dist_tv[s * L + t] = v ? (pick(in, 4) ? (double)pick(in, 100) / 100.0 : any_dbl(in)) : NAN;
                    lr->dist_top1[s * L + t] = v ? (int32_t)pick(in, 2) : -1;
                }
        }
    if (pick(in, 3) == 0 && S * G > 0) { /* a MoE run's routing record */
        const int64_t Lm = 1 + pick(in, 3), k = 1 + pick(in, 3), E = k + pick(in, 6);
        rc_routing *rt;
        if (rc_routing_create(S, G, Lm, k, E, &rt) != RC_OK)
            abort();
        for (int64_t m = 0; m < Lm; m++)
            rt->layer[m] = (int32_t)(2 * m + pick(in, 2));
        for (int64_t s = 0; s < S; s++)
            for (int64_t t = 0; t < r->gen_valid[s]; t++)
                for (int side = 0; side < 2; side++) {
                    if (pick(in, 16) == 0)
                        continue; /* a side that recorded none */
                    for (int64_t j = 0; j < Lm * k; j++) {
                        rt->experts[side][(s * G + t) * Lm * k + j] = (int16_t)pick(in, (uint32_t)E);
                        rt->weights[side][(s * G + t) * Lm * k + j] = (float)pick(in, 100) / 100.0f;
                    }
                }
        const rc_len_result *L = &r->lens[r->n_lens - 1];
        rc_routing_compute(rt, r->logprob_gen, L->logprob_fwd, L->len);
        r->routing = rt;
    }
    if (g_trace)
        fprintf(stderr, "made: %lld sequences x %lld, trainer %d, ratiocheck %d, distribution %d, routing %d\n",
                (long long)S, (long long)G, r->logprob_trainer != NULL, r->logprob_ratiocheck != NULL,
                r->lens[0].dist_kl != NULL, r->routing != NULL);
}

static bool make_results(fin *in, rc_results *r, int64_t *lens_out, int *nlens_out)
{
    memset(r, 0, sizeof *r);
    snprintf(r->version, sizeof r->version, "0.1.0");
    snprintf(r->model_type, sizeof r->model_type, "gpt_neox");
    snprintf(r->dtype, sizeof r->dtype, "bf16");
    snprintf(r->kernels, sizeof r->kernels, "engine");
    snprintf(r->upcast, sizeof r->upcast, "none");
    snprintf(r->logprob_dtype, sizeof r->logprob_dtype, "fp32");
    snprintf(r->backend, sizeof r->backend, "cpu");
    snprintf(r->created, sizeof r->created, "2026-01-01T00:00:00Z");
    r->command_line = strdup(any_str(in));
    r->model_path = strdup("data/fixtures/neox_parallel");
    const int64_t P = pick(in, 5), Pmax = pick(in, 8) ? 1 + pick(in, 6) : 0, samples = 1 + pick(in, 3),
                  G = 1 + pick(in, 8);
    const int64_t S = P * samples;
    const bool ref = pick(in, 2);
    snprintf(r->reference, sizeof r->reference, ref ? "fp32" : "none");
    r->samples = samples;
    r->temperature = 1.0;
    r->top_p = 1.0;
    r->n_prompts = P;
    r->prompt_max = Pmax;
    r->n_seq = S;
    r->gen_len = G;
    r->prompt_tokens = xcalloc((size_t)(P * Pmax), sizeof(int32_t));
    r->prompt_len = xcalloc((size_t)P, sizeof(int32_t));
    for (int64_t p = 0; p < P; p++) {
        r->prompt_len[p] = (int32_t)(pick(in, 8) && Pmax ? 1 + pick(in, (uint32_t)Pmax) : pick(in, (uint32_t)Pmax + 1));
        for (int64_t t = 0; t < Pmax; t++)
            r->prompt_tokens[p * Pmax + t] = t < r->prompt_len[p] ? (int32_t)pick(in, 330) : -1;
    }
    if (pick(in, 2)) {
        r->prompt_text = xcalloc((size_t)P, sizeof(char *));
        for (int64_t p = 0; p < P; p++)
            r->prompt_text[p] = strdup(any_str(in));
    }
    r->seq_prompt = xcalloc((size_t)S, sizeof(int32_t));
    r->seq_sample = xcalloc((size_t)S, sizeof(int32_t));
    r->gen_valid = xcalloc((size_t)S, sizeof(int32_t));
    r->gen_tokens = xcalloc((size_t)(S * G), sizeof(int32_t));
    r->logprob_gen = xcalloc((size_t)(S * G), sizeof(float));
    r->logprob_gen_processed = xcalloc((size_t)(S * G), sizeof(float));
    if (ref)
        r->logprob_ref = xcalloc((size_t)(S * G), sizeof(double));
    const bool shuffled = pick(in, 8) == 0; /* not prompts x samples order */
    for (int64_t s = 0; s < S; s++) {
        r->seq_prompt[s] = (int32_t)(shuffled ? pick(in, (uint32_t)P) : s / samples);
        r->seq_sample[s] = (int32_t)(shuffled ? pick(in, 4) : s % samples);
        r->gen_valid[s] = pick(in, 4) ? (int32_t)G : (int32_t)pick(in, (uint32_t)G + 1);
        for (int64_t t = 0; t < G; t++) {
            bool v = t < r->gen_valid[s];
            r->gen_tokens[s * G + t] = v ? (int32_t)pick(in, 330) : -1;
            r->logprob_gen[s * G + t] = v ? k_lps[pick(in, 8)] : NAN;
            r->logprob_gen_processed[s * G + t] = v ? k_lps[pick(in, 8)] : NAN;
            if (ref)
                r->logprob_ref[s * G + t] = v ? (double)k_lps[pick(in, 8)] : NAN;
        }
    }
    if (pick(in, 2)) {
        r->completion = xcalloc((size_t)S, sizeof(char *));
        for (int64_t s = 0; s < S; s++)
            r->completion[s] = strdup(any_str(in));
    }
    /* 1..3 distinct lengths in 1..G, ascending */
    int nl = 0;
    int64_t lens[3];
    for (int64_t L = 1; L <= G && nl < 3; L++)
        if (L == G || pick(in, 3) == 0)
            lens[nl++] = L;
    r->lens = xcalloc((size_t)nl, sizeof *r->lens);
    r->n_lens = nl;
    for (int i = 0; i < nl; i++) {
        r->lens[i].len = lens[i];
        r->lens[i].logprob_fwd = xcalloc((size_t)(S * lens[i]), sizeof(float));
        for (int64_t s = 0; s < S; s++)
            for (int64_t t = 0; t < lens[i]; t++)
                r->lens[i].logprob_fwd[s * lens[i] + t] =
                    t < r->gen_valid[s] ? (pick(in, 2) ? r->logprob_gen[s * G + t] : k_lps[pick(in, 8)]) : NAN;
        lens_out[i] = lens[i];
    }
    *nlens_out = nl;
    make_extras(in, r);
    return rc_compute_stats(r) == RC_OK;
}

/* ------------------------------------------------------------------------ */
/* 2. edits through the HDF5 API                                            */

static const char *const k_attrs[] = {
    "format",       "format_version", "version",       "command_line",     "model_path",      "model_type",
    "dtype",        "kernels",        "upcast",        "logprob_dtype",    "reference",       "backend",
    "device",       "created",        "threads",       "seed",             "top_k",           "samples",
    "batch",        "forward_batch",  "num_prompts",   "num_sequences",    "gen_len",         "stop_at_eos",
    "temperature",  "top_p",          "seconds_generate", "seconds_forward", "seconds_total", "lengths"};

static const char *const k_dsets[] = {"/prompts/tokens",         "/prompts/lengths",   "/prompts/text",
                                      "/rollouts/prompt_index",  "/rollouts/sample_index", "/rollouts/tokens",
                                      "/rollouts/lengths",       "/rollouts/logprob_gen",
                                      "/rollouts/logprob_gen_processed", "/rollouts/completion",
                                      "/reference/logprob",      "LEN",
                                      "/rollouts/logprob_trainer", "/rollouts/logprob_ratiocheck",
                                      "/rollouts/entropy",       "KL", "TV", "TOP1",
                                      "/routing/sampler_experts", "/routing/trainer_experts",
                                      "/routing/sampler_weights", "/routing/trainer_weights",
                                      "/routing/layer"};

/* a file type; *str: a string type (variable when *vlen) */
static hid_t any_type(fin *in, bool *str, bool *vlen)
{
    *str = *vlen = false;
    switch (pick(in, 16)) {
    case 0: return H5Tcopy(H5T_STD_I8LE);
    case 1: return H5Tcopy(H5T_STD_U8LE);
    case 2: return H5Tcopy(H5T_STD_I16LE);
    case 3: return H5Tcopy(H5T_STD_U32LE);
    case 4: return H5Tcopy(H5T_STD_I64LE);
    case 5: return H5Tcopy(H5T_STD_U64LE);
    case 6: return H5Tcopy(H5T_STD_I32BE);
    case 7: return H5Tcopy(H5T_IEEE_F32LE);
    case 8: return H5Tcopy(H5T_IEEE_F64BE);
    case 9: {
        *str = *vlen = true;
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        H5Tset_cset(t, pick(in, 4) ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
        return t;
    }
    case 10: {
        *str = true;
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, 1 + pick(in, 16));
        return t;
    }
    case 11: {
        hid_t t = H5Tcreate(H5T_COMPOUND, 8);
        H5Tinsert(t, "v", 0, H5T_STD_I32LE);
        H5Tinsert(t, "w", 4, H5T_IEEE_F32LE);
        return t;
    }
    case 12: {
        hid_t t = H5Tenum_create(H5T_STD_I32LE);
        int v = 0;
        H5Tenum_insert(t, "zero", &v);
        v = 1;
        H5Tenum_insert(t, "one", &v);
        return t;
    }
    case 13: {
        hid_t t = H5Tcreate(H5T_OPAQUE, 4);
        H5Tset_tag(t, "x");
        return t;
    }
    case 14: return H5Tcopy(H5T_STD_I32LE);
    default: return H5Tcopy(H5T_IEEE_F32LE);
    }
}

/* write n elements of type t from the input (n small) */
static herr_t fill_write(fin *in, hid_t obj, bool attr, hid_t t, bool str, bool vlen, size_t n)
{
    herr_t e;
    H5T_class_t c = H5Tget_class(t);
    if (str && vlen) {
        const char **v = xcalloc(n, sizeof *v);
        for (size_t i = 0; i < n; i++)
            v[i] = any_str(in);
        e = attr ? H5Awrite(obj, t, v) : H5Dwrite(obj, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        free(v);
        return e;
    }
    if (c == H5T_INTEGER) {
        int64_t *v = xcalloc(n, sizeof *v);
        int64_t base = any_int(in, 1);
        for (size_t i = 0; i < n; i++)
            /* base plus a small step, wrapping (unsigned) rather than overflowing near INT64_MAX */
            v[i] = pick(in, 3) ? (int64_t)((uint64_t)base + (uint64_t)(i % 7)) : any_int(in, (int64_t)i);
        e = attr ? H5Awrite(obj, H5T_NATIVE_INT64, v) : H5Dwrite(obj, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        free(v);
        return e;
    }
    if (c == H5T_FLOAT) {
        double *v = xcalloc(n, sizeof *v);
        for (size_t i = 0; i < n; i++)
            v[i] = pick(in, 2) ? (double)(int64_t)pick(in, 400) : any_dbl(in);
        e = attr ? H5Awrite(obj, H5T_NATIVE_DOUBLE, v) : H5Dwrite(obj, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        free(v);
        return e;
    }
    size_t sz = H5Tget_size(t);
    unsigned char *b = xcalloc(n, sz);
    for (size_t i = 0; i < n * sz; i++)
        b[i] = (unsigned char)take(in, 1);
    if (c == H5T_ENUM)
        for (size_t i = 0; i < n; i++)
            memset(b + i * sz, 0, sz); /* a valid member */
    e = attr ? H5Awrite(obj, t, b) : H5Dwrite(obj, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, b);
    free(b);
    return e;
}

typedef struct {
    int64_t P, Pmax, S, G, lens[3];
    int nlens;
    int64_t Lm, k, E; /* /routing's attributes as written (0: none) */
} shape;

/* "/len_%04lld/SUFFIX" for a length of the file, or one near gen_len */
static void len_name(fin *in, const shape *sh, const char *suffix, char *name, size_t n, int64_t *L_out)
{
    int64_t L = pick(in, 3) ? sh->lens[pick(in, (uint32_t)sh->nlens)] : any_int(in, sh->G);
    snprintf(name, n, "/len_%04lld/%s", (long long)L, suffix);
    *L_out = L;
}

static void ensure_groups(hid_t f, const char *name)
{
    char g[128];
    for (const char *p = strchr(name + 1, '/'); p; p = strchr(p + 1, '/')) {
        size_t n = (size_t)(p - name);
        if (n >= sizeof g)
            return;
        memcpy(g, name, n);
        g[n] = '\0';
        if (H5Lexists(f, g, H5P_DEFAULT) <= 0) {
            hid_t gr = H5Gcreate2(f, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (gr >= 0)
                H5Gclose(gr);
        }
    }
}

static void edit_dataset(fin *in, hid_t f, const shape *sh)
{
    char name[128];
    const char *nm = k_dsets[pick(in, sizeof k_dsets / sizeof k_dsets[0])];
    int64_t natural[4] = {0, 0, 0, 0};
    int nat_rank = 1;
    static const char *const lsuf[4][2] = {{"LEN", "logprob_forward"}, {"KL", "kl"}, {"TV", "tv"}, {"TOP1", "top1_agree"}};
    int li = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(nm, lsuf[i][0]))
            li = i;
    if (li >= 0) {
        int64_t L;
        len_name(in, sh, lsuf[li][1], name, sizeof name, &L);
        natural[0] = sh->S, natural[1] = L, nat_rank = 2;
    } else if (!strcmp(nm, "/routing/layer")) {
        snprintf(name, sizeof name, "%s", nm);
        natural[0] = sh->Lm;
    } else if (!strncmp(nm, "/routing/", 9)) {
        snprintf(name, sizeof name, "%s", nm);
        natural[0] = sh->S, natural[1] = sh->G, natural[2] = sh->Lm, natural[3] = sh->k, nat_rank = 4;
    } else {
        snprintf(name, sizeof name, "%s", nm);
        if (strstr(nm, "/prompts/tokens"))
            natural[0] = sh->P, natural[1] = sh->Pmax, nat_rank = 2;
        else if (strstr(nm, "/prompts/"))
            natural[0] = sh->P;
        else if (strstr(nm, "tokens") || strstr(nm, "logprob"))
            natural[0] = sh->S, natural[1] = sh->G, nat_rank = 2;
        else
            natural[0] = sh->S;
    }
    if (H5Lexists(f, name, H5P_DEFAULT) > 0 || pick(in, 2))
        H5Ldelete(f, name, H5P_DEFAULT);
    if (pick(in, 6) == 0)
        return; /* just deleted */
    ensure_groups(f, name);
    int rank = pick(in, 5) ? nat_rank : (int)pick(in, 5);
    hsize_t dims[4] = {1, 1, 1, 1}, maxd[4];
    uint64_t n = 1;
    for (int i = 0; i < rank; i++) {
        int64_t v = any_int(in, i < nat_rank ? natural[i] : 1);
        if (v < 0)
            v = v == INT64_MIN ? 0 : -v;
        if (v > ((int64_t)1 << 40))
            v = (int64_t)1 << 40;
        dims[i] = (hsize_t)v;
        maxd[i] = H5S_UNLIMITED;
        if (!rc_mul_u64(n, dims[i], &n))
            n = UINT64_MAX;
    }
    bool str, vlen;
    hid_t t = any_type(in, &str, &vlen);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    unsigned lay = pick(in, 3), flt = 0;
    if (lay == 1 && rank > 0) {
        hsize_t ch[4];
        for (int i = 0; i < rank; i++)
            ch[i] = dims[i] == 0 ? 1 : (dims[i] < 64 ? dims[i] : 1 + pick(in, 64));
        H5Pset_chunk(dcpl, rank, ch);
        flt = (unsigned)take(in, 1);
        if (flt & 1)
            H5Pset_shuffle(dcpl);
        if (flt & 2)
            H5Pset_deflate(dcpl, 1 + pick(in, 9));
        if (flt & 4)
            H5Pset_fletcher32(dcpl);
        if ((flt & 8) && !str)
            H5Pset_nbit(dcpl);
        if ((flt & 16) && !str)
            H5Pset_scaleoffset(dcpl, H5Tget_class(t) == H5T_FLOAT ? H5Z_SO_FLOAT_DSCALE : H5Z_SO_INT, 2);
    } else if (lay == 2) {
        H5Pset_layout(dcpl, H5D_COMPACT);
    }
    if (!vlen && pick(in, 3) == 0) { /* a fill value for what is never written */
        if (H5Tget_class(t) == H5T_INTEGER) {
            int64_t fv = any_int(in, -5);
            H5Pset_fill_value(dcpl, H5T_NATIVE_INT64, &fv);
        } else if (H5Tget_class(t) == H5T_FLOAT) {
            double fv = any_dbl(in);
            H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &fv);
        }
    }
    hid_t sp = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, lay == 1 ? maxd : NULL);
    hid_t ds = sp >= 0 ? H5Dcreate2(f, name, t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    /* n-bit and scale-offset are there for the reader to refuse; their 1.10
     * implementations corrupt memory on some types, so no data goes through
     * them (the chunks stay unwritten) */
    bool write = ds >= 0 && n <= 4096 && pick(in, 5) && !(flt & 24);
    if (g_trace) {
        int nf = H5Pget_nfilters(dcpl);
        fprintf(stderr, "dataset %s: rank %d [%llu %llu %llu %llu] class %d size %zu layout %u filters", name, rank,
                (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)dims[2],
                (unsigned long long)dims[3],
                (int)H5Tget_class(t), H5Tget_size(t), lay);
        for (int i = 0; i < nf; i++)
            fprintf(stderr, " %d", (int)H5Pget_filter2(dcpl, (unsigned)i, NULL, NULL, NULL, 0, NULL, NULL));
        fprintf(stderr, " created %d written %d\n", ds >= 0, write);
    }
    if (write)
        fill_write(in, ds, false, t, str, vlen, (size_t)n);
    if (ds >= 0)
        H5Dclose(ds);
    if (sp >= 0)
        H5Sclose(sp);
    H5Pclose(dcpl);
    H5Tclose(t);
}

static void edit_attr(fin *in, hid_t f, const shape *sh)
{
    const char *name = k_attrs[pick(in, sizeof k_attrs / sizeof k_attrs[0])];
    if (H5Aexists(f, name) > 0)
        H5Adelete(f, name);
    if (pick(in, 6) == 0)
        return; /* just deleted */
    bool str, vlen;
    hid_t t;
    unsigned k = pick(in, 4);
    if (k == 0) { /* the type the writer uses, a hostile value */
        bool is_str = !strcmp(name, "format") || !strcmp(name, "version") || !strcmp(name, "command_line") ||
                      !strcmp(name, "model_path") || !strcmp(name, "model_type") || !strcmp(name, "dtype") ||
                      !strcmp(name, "kernels") || !strcmp(name, "upcast") || !strcmp(name, "logprob_dtype") ||
                      !strcmp(name, "reference") || !strcmp(name, "backend") || !strcmp(name, "device") ||
                      !strcmp(name, "created");
        bool is_dbl = !strcmp(name, "temperature") || !strcmp(name, "top_p") || !strncmp(name, "seconds_", 8);
        str = vlen = is_str;
        if (is_str) {
            t = H5Tcopy(H5T_C_S1);
            H5Tset_size(t, H5T_VARIABLE);
            H5Tset_cset(t, H5T_CSET_UTF8);
        } else {
            t = H5Tcopy(is_dbl ? H5T_IEEE_F64LE : H5T_STD_I64LE);
        }
    } else {
        t = any_type(in, &str, &vlen);
    }
    hsize_t n = 0;
    if (!strcmp(name, "lengths") && pick(in, 2))
        n = (hsize_t)sh->nlens + pick(in, 3);
    else if (pick(in, 4) == 0)
        n = (hsize_t[]){0, 1, 2, 3, 64, 65, 300}[pick(in, 7)];
    hid_t sp = n == 0 && pick(in, 8) ? H5Screate(H5S_SCALAR)
               : n == 0            ? H5Screate(H5S_NULL)
                                   : H5Screate_simple(1, &n, NULL);
    hid_t a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        size_t cnt = n ? (size_t)n : (H5Sget_simple_extent_type(sp) == H5S_SCALAR ? 1 : 0);
        if (cnt && str && vlen) {
            const char **v = xcalloc(cnt, sizeof *v);
            static const char *const good[] = {"ratiocheck-results", "fp32", "none", "engine", "cpu"};
            for (size_t i = 0; i < cnt; i++)
                v[i] = pick(in, 2) ? good[pick(in, 5)] : any_str(in);
            H5Awrite(a, t, v);
            free(v);
        } else if (cnt && H5Tget_class(t) == H5T_INTEGER && !strcmp(name, "lengths")) {
            int64_t *v = xcalloc(cnt, sizeof *v);
            for (size_t i = 0; i < cnt; i++)
                v[i] = any_int(in, i < (size_t)sh->nlens ? sh->lens[i] : sh->G);
            H5Awrite(a, H5T_NATIVE_INT64, v);
            free(v);
        } else if (cnt && H5Tget_class(t) == H5T_INTEGER) {
            int64_t *v = xcalloc(cnt, sizeof *v);
            int64_t near = !strcmp(name, "num_prompts") ? sh->P : !strcmp(name, "num_sequences") ? sh->S
                           : !strcmp(name, "gen_len") ? sh->G : !strcmp(name, "format_version") ? 1 : 2;
            for (size_t i = 0; i < cnt; i++)
                v[i] = any_int(in, near);
            H5Awrite(a, H5T_NATIVE_INT64, v);
            free(v);
        } else if (cnt) {
            fill_write(in, a, true, t, str, vlen, cnt);
        }
        H5Aclose(a);
    }
    H5Sclose(sp);
    H5Tclose(t);
}

/* an n-bit or scale-offset filter in the dataset's pipeline (libhdf5 1.10
 * corrupts its heap writing some types through them) */
static bool has_unsafe_filter(hid_t ds)
{
    hid_t dcpl = H5Dget_create_plist(ds);
    bool bad = false;
    int nf = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0;
    for (int i = 0; i < nf && !bad; i++) {
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, NULL, NULL, NULL, 0, NULL, NULL);
        bad = id == H5Z_FILTER_NBIT || id == H5Z_FILTER_SCALEOFFSET;
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return bad;
}

/* set one element of a small integer dataset (never one with n-bit or
 * scale-offset: see edit_dataset) */
static void edit_element(fin *in, hid_t f, const shape *sh)
{
    static const char *const names[] = {"/prompts/tokens",          "/prompts/lengths",
                                        "/rollouts/prompt_index",   "/rollouts/sample_index",
                                        "/rollouts/tokens",         "/rollouts/lengths",
                                        "/routing/sampler_experts", "/routing/trainer_experts",
                                        "/routing/layer",           "TOP1",
                                        "/routing/sampler_weights", "/routing/trainer_weights",
                                        "/rollouts/logprob_trainer", "/rollouts/logprob_ratiocheck",
                                        "KL",                       "TV"};
    const uint32_t which = pick(in, 16);
    const bool flt = which >= 10;
    char name[128];
    int64_t L;
    if (!strcmp(names[which], "TOP1"))
        len_name(in, sh, "top1_agree", name, sizeof name, &L);
    else if (!strcmp(names[which], "KL") || !strcmp(names[which], "TV"))
        len_name(in, sh, which == 14 ? "kl" : "tv", name, sizeof name, &L);
    else
        snprintf(name, sizeof name, "%s", names[which]);
    /* near what breaks it: an expert near the count, a top-1 flag near {-1, 0, 1}, a layer near the last */
    const int64_t near = which == 6 || which == 7 ? sh->E : which == 8 ? 2 * sh->Lm : which == 9 ? 1 : 0;
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
        return;
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : 0;
    if (ds >= 0 && has_unsafe_filter(ds))
        n = 0; /* edit_dataset made it for the reader to refuse: no data through n-bit / scale-offset */
    if (n > 0 && n <= 4096 && !flt) {
        int64_t *v = xcalloc((size_t)n, sizeof *v);
        if (H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0) {
            v[pick(in, (uint32_t)n)] = any_int(in, near);
            H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        }
        free(v);
    } else if (n > 0 && n <= 4096) {
        double *v = xcalloc((size_t)n, sizeof *v);
        if (H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0) {
            v[pick(in, (uint32_t)n)] = pick(in, 2) ? any_dbl(in) : (double)pick(in, 400) / 10.0;
            H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        }
        free(v);
    }
    if (sp >= 0)
        H5Sclose(sp);
    if (ds >= 0)
        H5Dclose(ds);
}

/* replace an attribute of /routing (moe_layers, top_k, experts), /threeway
 * (ratiocheck) or /sweep (settings): an integer near the written one, a
 * value of another type, or none */
static void edit_group_attr(fin *in, hid_t f, const shape *sh)
{
    static const struct {
        const char *g, *a;
    } k[] = {{"/routing", "moe_layers"}, {"/routing", "top_k"},  {"/routing", "experts"},
             {"/threeway", "ratiocheck"}, {"/sweep", "settings"}, {"/threeway", "len"}};
    const uint32_t w = pick(in, 6);
    if (H5Lexists(f, k[w].g, H5P_DEFAULT) <= 0) {
        if (pick(in, 4))
            return;
        hid_t g = H5Gcreate2(f, k[w].g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT); /* a group the writer did not write */
        if (g < 0)
            return;
        H5Gclose(g);
    }
    hid_t g = H5Gopen2(f, k[w].g, H5P_DEFAULT);
    if (g < 0)
        return;
    if (H5Aexists(g, k[w].a) > 0)
        H5Adelete(g, k[w].a);
    const unsigned how = pick(in, 6);
    if (how == 0) { /* just deleted */
        H5Gclose(g);
        return;
    }
    bool str = false, vlen = false;
    hid_t t = how < 4 ? H5Tcopy(H5T_STD_I64LE) : any_type(in, &str, &vlen);
    hsize_t n = pick(in, 8) ? 1 : (hsize_t)pick(in, 3);
    hid_t sp = n == 1 && pick(in, 2) ? H5Screate(H5S_SCALAR) : n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_NULL);
    hid_t a = H5Acreate2(g, k[w].a, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0 && n > 0) {
        if (how < 4) {
            const int64_t near = w == 0 ? sh->Lm : w == 1 ? sh->k : w == 2 ? sh->E : w == 5 ? sh->G : 1;
            int64_t v[2];
            for (hsize_t i = 0; i < n; i++)
                v[i] = any_int(in, near);
            H5Awrite(a, H5T_NATIVE_INT64, v);
        } else {
            fill_write(in, a, true, t, str, vlen, (size_t)n);
        }
    }
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    H5Gclose(g);
    if (g_trace)
        fprintf(stderr, "attribute %s %s: how %u, %llu values\n", k[w].g, k[w].a, how, (unsigned long long)n);
}

/* Declare bigger sizes consistently: num_prompts, num_sequences and gen_len
 * (and `lengths`) from the input, and every dataset the reader reads
 * recreated with the matching extent, chunked (deflated or not), with at
 * most its first chunk written: a small file that declares a lot. */
static void edit_inflate(fin *in, hid_t f, shape *sh)
{
    static const int64_t big[] = {1, 2, 5, 64, 1000, 4096, 65536, (int64_t)1 << 18, (int64_t)1 << 22,
                                  (int64_t)1 << 24};
    const int64_t P = pick(in, 2) ? sh->P : big[pick(in, 10)];
    const int64_t S = pick(in, 2) ? sh->S : big[pick(in, 10)];
    const int64_t G = pick(in, 2) ? sh->G : big[pick(in, 10)];
    const int64_t Pm = pick(in, 2) ? sh->Pmax : big[pick(in, 10)];
    const bool deflate = pick(in, 2);
    int64_t L = G;
    if (H5Aexists(f, "num_prompts") > 0)
        H5Adelete(f, "num_prompts");
    if (H5Aexists(f, "num_sequences") > 0)
        H5Adelete(f, "num_sequences");
    if (H5Aexists(f, "gen_len") > 0)
        H5Adelete(f, "gen_len");
    if (H5Aexists(f, "lengths") > 0)
        H5Adelete(f, "lengths");
    const struct {
        const char *n;
        const int64_t *v;
        hsize_t cnt;
    } attrs[] = {{"num_prompts", &P, 0}, {"num_sequences", &S, 0}, {"gen_len", &G, 0}, {"lengths", &L, 1}};
    for (int i = 0; i < 4; i++) {
        hid_t sp = attrs[i].cnt ? H5Screate_simple(1, &attrs[i].cnt, NULL) : H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(f, attrs[i].n, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0) {
            H5Awrite(a, H5T_NATIVE_INT64, attrs[i].v);
            H5Aclose(a);
        }
        H5Sclose(sp);
    }
    char lname[64], kname[64], tname[64], oname[64];
    snprintf(lname, sizeof lname, "/len_%04lld/logprob_forward", (long long)L);
    snprintf(kname, sizeof kname, "/len_%04lld/kl", (long long)L);
    snprintf(tname, sizeof tname, "/len_%04lld/tv", (long long)L);
    snprintf(oname, sizeof oname, "/len_%04lld/top1_agree", (long long)L);
    /* /routing's layers and top-k: as written, or more */
    const int64_t Lm = sh->Lm && pick(in, 2) ? sh->Lm : big[pick(in, 6)], K = sh->k && pick(in, 2) ? sh->k : big[pick(in, 5)];
    const bool dist = H5Lexists(f, "/len_0001", H5P_DEFAULT) > 0 && pick(in, 2); /* the first length's kl decides */
    /* optional: recreated when present (the first 9 always) */
    const struct {
        const char *n;
        int rank;
        int64_t d[4];
        hid_t t;
    } ds[] = {{"/prompts/tokens", 2, {P, Pm}, H5T_STD_I32LE},
              {"/prompts/lengths", 1, {P}, H5T_STD_I32LE},
              {"/rollouts/prompt_index", 1, {S}, H5T_STD_I32LE},
              {"/rollouts/sample_index", 1, {S}, H5T_STD_I32LE},
              {"/rollouts/lengths", 1, {S}, H5T_STD_I32LE},
              {"/rollouts/tokens", 2, {S, G}, H5T_STD_I32LE},
              {"/rollouts/logprob_gen", 2, {S, G}, H5T_IEEE_F32LE},
              {"/rollouts/logprob_gen_processed", 2, {S, G}, H5T_IEEE_F32LE},
              {lname, 2, {S, L}, H5T_IEEE_F32LE},
              {"/reference/logprob", 2, {S, G}, H5T_IEEE_F64LE},
              {"/rollouts/logprob_trainer", 2, {S, G}, H5T_IEEE_F32LE},
              {"/rollouts/logprob_ratiocheck", 2, {S, G}, H5T_IEEE_F32LE},
              {"/rollouts/entropy", 2, {S, G}, H5T_IEEE_F32LE},
              {kname, 2, {S, L}, H5T_IEEE_F64LE},
              {tname, 2, {S, L}, H5T_IEEE_F64LE},
              {oname, 2, {S, L}, H5T_STD_I32LE},
              {"/routing/sampler_experts", 4, {S, G, Lm, K}, H5T_STD_I16LE},
              {"/routing/trainer_experts", 4, {S, G, Lm, K}, H5T_STD_I16LE},
              {"/routing/sampler_weights", 4, {S, G, Lm, K}, H5T_IEEE_F32LE},
              {"/routing/trainer_weights", 4, {S, G, Lm, K}, H5T_IEEE_F32LE},
              {"/routing/layer", 1, {Lm}, H5T_STD_I32LE}};
    if (H5Lexists(f, "/routing", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(f, "/routing", H5P_DEFAULT);
        static const char *const an[3] = {"moe_layers", "top_k", "experts"};
        const int64_t av[3] = {Lm, K, sh->E > K ? sh->E : K};
        for (int i = 0; g >= 0 && i < 3; i++) {
            if (H5Aexists(g, an[i]) > 0)
                H5Adelete(g, an[i]);
            hid_t sp = H5Screate(H5S_SCALAR);
            hid_t a = H5Acreate2(g, an[i], H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
            if (a >= 0) {
                H5Awrite(a, H5T_NATIVE_INT64, &av[i]);
                H5Aclose(a);
            }
            H5Sclose(sp);
        }
        if (g >= 0)
            H5Gclose(g);
    }
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        const bool kl = i >= 13 && i <= 15;
        if (i >= 9 && !(kl && dist) && H5Lexists(f, ds[i].n, H5P_DEFAULT) <= 0)
            continue;
        if (H5Lexists(f, ds[i].n, H5P_DEFAULT) > 0)
            H5Ldelete(f, ds[i].n, H5P_DEFAULT);
        ensure_groups(f, ds[i].n);
        hsize_t dims[4], maxd[4], ch[4];
        for (int j = 0; j < 4; j++) {
            dims[j] = (hsize_t)ds[i].d[j];
            maxd[j] = H5S_UNLIMITED;
            const hsize_t cap = j == 0 ? 256 : j == 1 ? 64 : 4; /* a first chunk of at most 2^18 cells */
            ch[j] = dims[j] < cap ? (dims[j] ? dims[j] : 1) : cap;
        }
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, ds[i].rank, ch);
        if (deflate) {
            H5Pset_shuffle(dcpl);
            H5Pset_deflate(dcpl, 4);
        }
        if (H5Tget_class(ds[i].t) == H5T_INTEGER && pick(in, 2)) {
            int32_t fv = (int32_t)any_int(in, 0);
            H5Pset_fill_value(dcpl, H5T_NATIVE_INT32, &fv);
        }
        hid_t sp = H5Screate_simple(ds[i].rank, dims, maxd);
        hid_t d = H5Dcreate2(f, ds[i].n, ds[i].t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (d >= 0 && pick(in, 2)) { /* the first chunk, zeros */
            hsize_t start[4] = {0, 0, 0, 0}, cnt[4];
            size_t cells = 1;
            for (int j = 0; j < 4; j++) {
                cnt[j] = j < ds[i].rank ? (ch[j] < dims[j] ? ch[j] : dims[j]) : 1;
                cells *= (size_t)cnt[j];
            }
            if (cells > 0) {
                hid_t ms = H5Screate_simple(ds[i].rank, cnt, NULL);
                H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, cnt, NULL);
                double *z = xcalloc(cells, sizeof *z);
                H5Dwrite(d, H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, z);
                free(z);
                H5Sclose(ms);
            }
        }
        if (d >= 0)
            H5Dclose(d);
        H5Sclose(sp);
        H5Pclose(dcpl);
    }
    if (g_trace)
        fprintf(stderr, "inflate: P %lld x %lld, S %lld x %lld, deflate %d\n", (long long)P, (long long)Pm,
                (long long)S, (long long)G, deflate);
    sh->P = P, sh->S = S, sh->G = G, sh->Pmax = Pm, sh->nlens = 1, sh->lens[0] = L;
    if (sh->Lm)
        sh->Lm = Lm, sh->k = K, sh->E = sh->E > K ? sh->E : K;
}

/* ------------------------------------------------------------------------ */
/* 3. read, check                                                           */

static void check_msg(rc_status s, const char *path)
{
    if (s == RC_OK)
        return;
    const char *m = rc_last_error();
    for (const char *c = m; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            fprintf(stderr, "error message has control byte 0x%02x: %s\n", (unsigned char)*c, m);
            abort();
        }
    if (!strstr(m, path)) {
        fprintf(stderr, "error message does not name %s: %s\n", path, m);
        abort();
    }
}

static void check_quiet(void)
{
    H5E_auto2_t fn = NULL;
    void *data = NULL;
    if (H5Eget_auto2(H5E_DEFAULT, &fn, &data) < 0 || fn != NULL) {
        fprintf(stderr, "HDF5 error printing is on after rc_h5_read\n");
        abort();
    }
}

static volatile double g_sink;

/* every array end to end, every index in range */
static void check_accepted(const rc_results *r, uint64_t file_size)
{
    const int64_t P = r->n_prompts, Pm = r->prompt_max, S = r->n_seq, G = r->gen_len;
    const int64_t lim = (int64_t)1 << 24;
    if (P < 0 || P > lim || Pm < 0 || Pm > lim || S < 0 || S > lim || G < 0 || G > lim || r->n_lens < 1 ||
        r->n_lens > RC_MAX_LENS_READ || !r->lens || !r->prompt_tokens || !r->prompt_len || !r->seq_prompt ||
        !r->seq_sample || !r->gen_valid || !r->gen_tokens || !r->logprob_gen || !r->logprob_gen_processed ||
        !r->command_line || !r->model_path)
        abort();
    /* the storage bound: elements (>= 1 byte each in the file) <= 1032 x file size */
    uint64_t elems = (uint64_t)(P * Pm) + (uint64_t)(S * G);
    if (elems > 1032 * file_size + 64)
        abort();
    double acc = 0;
    for (int64_t i = 0; i < P * Pm; i++)
        acc += r->prompt_tokens[i];
    for (int64_t p = 0; p < P; p++) {
        if (r->prompt_len[p] < 0 || r->prompt_len[p] > Pm)
            abort();
        if (r->prompt_text)
            acc += (double)strlen(r->prompt_text[p]);
    }
    for (int64_t s = 0; s < S; s++) {
        if (r->seq_prompt[s] < 0 || r->seq_prompt[s] >= P || r->seq_sample[s] < 0 || r->gen_valid[s] < 0 ||
            r->gen_valid[s] > G)
            abort();
        if (r->completion)
            acc += (double)strlen(r->completion[s]);
    }
    for (int64_t i = 0; i < S * G; i++) {
        acc += r->gen_tokens[i] + (double)r->logprob_gen[i] + (double)r->logprob_gen_processed[i];
        if (r->logprob_ref)
            acc += r->logprob_ref[i];
    }
    for (int i = 0; i < r->n_lens; i++) {
        const int64_t L = r->lens[i].len;
        if (L < 1 || L > G || (S > 0 && !r->lens[i].logprob_fwd))
            abort();
        for (int j = 0; j < i; j++)
            if (r->lens[j].len == L)
                abort();
        for (int64_t k = 0; k < S * L; k++)
            acc += (double)r->lens[i].logprob_fwd[k];
        for (int64_t t = 0; t < L; t++)
            acc += (double)r->lens[i].pos_count[t];
        /* --distribution: on every length or none, top-1 flags in {-1, 0, 1} */
        const rc_len_result *lr = &r->lens[i];
        if (!lr->dist_kl != !r->lens[0].dist_kl || !lr->dist_tv != !lr->dist_kl || !lr->dist_top1 != !lr->dist_kl)
            abort();
        for (int64_t k = 0; lr->dist_kl && k < S * L; k++) {
            if (lr->dist_top1[k] < -1 || lr->dist_top1[k] > 1)
                abort();
            acc += lr->dist_kl[k] + lr->dist_tv[k];
        }
        for (int64_t t = 0; lr->pos_kl_mean && t < L; t++)
            acc += lr->pos_kl_mean[t] + lr->pos_tv_mean[t] + lr->pos_top1_agree[t];
    }
    /* score's columns: ratiocheck's only with the trainer's, and then the three-way summary */
    if ((r->logprob_ratiocheck && !r->logprob_trainer) || (!r->threeway != !r->logprob_ratiocheck))
        abort();
    for (int64_t i = 0; r->logprob_trainer && i < S * G; i++)
        acc += (double)r->logprob_trainer[i] + (r->logprob_ratiocheck ? (double)r->logprob_ratiocheck[i] : 0.0);
    if (r->threeway && (memchr(r->threeway->ratiocheck, 0, sizeof r->threeway->ratiocheck) == NULL ||
                        memchr(r->threeway->summary, 0, sizeof r->threeway->summary) == NULL))
        abort();
    /* /routing: the results' shape, experts -1 or in [0, experts), layers increasing */
    const rc_routing *rt = r->routing;
    if (rt) {
        if (rt->n_seq != S || rt->gen_len != G || rt->n_layers < 1 || rt->top_k < 1 || rt->n_experts < rt->top_k ||
            rt->n_experts > INT16_MAX)
            abort();
        const int64_t n = S * G * rt->n_layers * rt->top_k;
        for (int side = 0; side < 2; side++)
            for (int64_t i = 0; i < n; i++) {
                if (rt->experts[side][i] < -1 || rt->experts[side][i] >= rt->n_experts)
                    abort();
                acc += (double)rt->weights[side][i];
            }
        for (int64_t m = 0; m < rt->n_layers; m++) {
            if (rt->layer[m] < 0 || (m > 0 && rt->layer[m] <= rt->layer[m - 1]))
                abort();
            acc += (double)(rt->layer_flips[m] + rt->layer_miles[m] + rt->layer_first[m]);
        }
        for (int64_t i = 0; i < S * G; i++)
            if (rt->token_flips[i] < -1 || rt->token_flips[i] > rt->n_layers)
                abort();
        if (rt->st.tokens_flip > rt->st.tokens || rt->st.first_layer < -1 || rt->st.miles_layer < -1)
            abort();
    }
    /* each length's routing statistics (the tokens t < L) exactly with a record, within its counts; at the
     * longest length, when it is the generated length, the record's own; the verdict's routing line with a
     * record only */
    for (int i = 0; i < r->n_lens; i++) {
        const rc_len_stats *st = &r->lens[i].st;
        if (st->routing != (rt != NULL))
            abort();
        if (!rt)
            continue;
        if (st->rt.tokens > rt->st.tokens || st->rt.tokens_flip > st->rt.tokens ||
            (st->rt.tokens > 0) != (st->rt.share_flip >= 0.0) || st->rt.len != r->lens[i].len)
            abort();
        if (i == r->n_lens - 1 && r->lens[i].len == G) {
            const rc_routing_stats *a = &st->rt, *b = &rt->st;
            const double x[] = {a->share_flip, a->decision_share, a->mean_overlap, a->miles_mismatch, a->abs_lr_flip,
                                a->abs_lr_same, a->share_abs_lr_flip};
            const double y[] = {b->share_flip, b->decision_share, b->mean_overlap, b->miles_mismatch, b->abs_lr_flip,
                                b->abs_lr_same, b->share_abs_lr_flip};
            for (size_t q = 0; q < sizeof x / sizeof x[0]; q++)
                if (!(x[q] == y[q] || (isnan(x[q]) && isnan(y[q]))))
                    abort();
            if (a->tokens != b->tokens || a->tokens_flip != b->tokens_flip || a->miles_layer != b->miles_layer ||
                a->first_layer != b->first_layer)
                abort();
        }
    }
    int64_t scored = 0;
    for (int i = 0; i < r->n_lens; i++)
        scored += r->lens[i].st.count;
    const rc_verdict_level lv = r->verdict.level[RC_OBJ_ROUTING];
    if (rt && scored > 0 ? lv != RC_VERDICT_OK && lv != RC_VERDICT_WARN : lv != RC_VERDICT_NONE)
        abort();
    g_sink = acc;
}

/* what generate() and the prefill do with a replayed file */
static void check_replayable(const rc_results *r, int64_t vocab, int64_t max_pos)
{
    float *lp = xcalloc((size_t)vocab, sizeof *lp);
    double acc = 0;
    for (int64_t s = 0; s < r->n_seq; s++) {
        const int64_t p = s / r->samples;
        if (r->seq_prompt[s] != p || r->prompt_len[p] < 1 || r->prompt_len[p] >= max_pos)
            abort();
        for (int64_t t = 0; t < r->prompt_len[p]; t++)
            acc += lp[r->prompt_tokens[p * r->prompt_max + t]];
        for (int64_t t = 0; t < r->gen_valid[s]; t++)
            acc += lp[r->gen_tokens[s * r->gen_len + t]];
    }
    g_sink = acc;
    free(lp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fin in = {data, size, 0};
    rc_results r;
    shape sh;
    memset(&sh, 0, sizeof sh);
    bool made = make_results(&in, &r, sh.lens, &sh.nlens);
    sh.P = r.n_prompts, sh.Pmax = r.prompt_max, sh.S = r.n_seq, sh.G = r.gen_len;
    if (r.routing)
        sh.Lm = r.routing->n_layers, sh.k = r.routing->top_k, sh.E = r.routing->n_experts;
    rc_status s = made ? rc_h5_write(&r, g_path, true) : RC_ERR_INTERNAL;
    rc_results_free(&r);
    if (s != RC_OK) {
        fprintf(stderr, "the writer refused a valid result: %s\n", rc_last_error());
        abort();
    }
    /* edits */
    hid_t f = H5Fopen(g_path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0)
        abort();
    int edits = (int)pick(&in, 13);
    for (int e = 0; e < edits; e++) {
        switch (pick(&in, 14)) {
        case 0:
        case 1:
        case 2:
        case 3: edit_dataset(&in, f, &sh); break;
        case 4:
        case 5:
        case 6:
        case 7: edit_attr(&in, f, &sh); break;
        case 8:
        case 9: edit_element(&in, f, &sh); break;
        case 10: edit_inflate(&in, f, &sh); break;
        case 11:
        case 12: edit_group_attr(&in, f, &sh); break;
        default: { /* delete a group (or one of the optional datasets) */
            static const char *const groups[] = {"/prompts",          "/rollouts",
                                                 "/reference",        "/cross_length",
                                                 "/routing",          "/threeway",
                                                 "/rollouts/logprob_trainer", "/rollouts/logprob_ratiocheck",
                                                 "/routing/layer",    "/sweep"};
            H5Ldelete(f, groups[pick(&in, 10)], H5P_DEFAULT);
            break;
        }
        }
    }
    H5Fclose(f);
    /* (zeros, i.e. an input that ran out, give a vocabulary and context that fit) */
    static const int64_t vocabs[] = {330, 320, 288, 256, 1};
    const int64_t vocab = pick(&in, 4) == 3 ? 1 + (int64_t)pick(&in, 400) : vocabs[pick(&in, 5)];
    const int64_t max_pos = pick(&in, 4) == 3 ? 1 + (int64_t)pick(&in, 80) : 64;

    /* read */
    FILE *fp = fopen(g_path, "rb");
    if (!fp)
        abort();
    fseek(fp, 0, SEEK_END);
    uint64_t file_size = (uint64_t)ftell(fp);
    fclose(fp);
    rc_clear_error();
    s = rc_h5_read(g_path, &r);
    check_quiet();
    check_msg(s, g_path);
    if (g_trace)
        fprintf(stderr, "read: %s\n", s == RC_OK ? "ok" : rc_last_error());
    if (s != RC_OK) {
        static const rc_results zero;
        if (memcmp(&r, &zero, sizeof r) != 0)
            abort(); /* a failed read leaves nothing behind */
        return 0;
    }
    check_accepted(&r, file_size);
    rc_clear_error();
    rc_status rs = rc_results_check_replay(&r, g_path, vocab, max_pos);
    check_msg(rs, g_path);
    if (g_trace)
        fprintf(stderr, "replay: %s\n", rs == RC_OK ? "ok" : rc_last_error());
    if (rs == RC_OK)
        check_replayable(&r, vocab, max_pos);
    else if (rs != RC_ERR_FORMAT)
        abort();
    /* what the reader accepts, the writer writes and the reader reads again */
    s = rc_h5_write(&r, g_path2, true);
    if (s != RC_OK) {
        fprintf(stderr, "the writer refused what the reader accepted: %s\n", rc_last_error());
        abort();
    }
    rc_results back;
    s = rc_h5_read(g_path2, &back);
    if (s != RC_OK || back.n_seq != r.n_seq || back.gen_len != r.gen_len || back.n_lens != r.n_lens ||
        back.prompt_max != r.prompt_max || !back.routing != !r.routing || !back.threeway != !r.threeway ||
        !back.logprob_trainer != !r.logprob_trainer || !back.lens[0].dist_kl != !r.lens[0].dist_kl) {
        fprintf(stderr, "the written copy does not read back: %s\n", rc_last_error());
        abort();
    }
    /* diff's comparison of the copy's routing with the original's: every token both recorded, none differing */
    for (int side = 0; r.routing && side < 2; side++) {
        int64_t tok = -1, dif = -1, want = 0;
        if (rc_routing_compare(r.routing, back.routing, side, &tok, &dif) != RC_OK)
            abort();
        for (int64_t i = 0; i < r.n_seq * r.gen_len; i++)
            want += r.routing->experts[side][i * r.routing->n_layers * r.routing->top_k] >= 0;
        if (tok != want || dif != 0)
            abort();
    }
    rc_results_free(&back);
    rc_results_free(&r);
    return 0;
}
