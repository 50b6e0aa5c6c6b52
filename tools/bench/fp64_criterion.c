/* The fp64 criterion of tests/test_forward.c on any fixture folder: for each
 * kernel strategy (invariant, engine, blas) and path (the full forward of the
 * fixture's sequences in one batch; the cached decode of HF's fp32 greedy
 * tokens, prompt in one step then one token a step), the max and mean
 * |log p - HF true fp64| of ratiocheck's fp32 and of HF's own fp32, and the
 * share of elements where ratiocheck is the closer of the two (ties apart).
 *
 *   build/fp64_criterion data/fixtures/gemma3_local [more folders]
 *
 * One line per strategy and path:
 *   <folder> <strategy> <full|cached> max <ours> <hf> <ratio> mean <ours> <hf> <ratio> closer <n> farther <n>
 *   excess_ulp <(our max - HF's max) in fp32 ulps of the log-prob where ours is furthest>
 * tools/fixtures/fp64_seeds.py runs it over fixtures rebuilt at other seeds
 * (docs/testing.md "The fp64 criterion across draws").
 *
 *   build/fp64_criterion --dump OUT.f32 data/fixtures/gemma3_local [invariant|engine|blas]
 *
 * writes instead the full forward's residual stream after every layer and the
 * LM head's logits (invariant kernels unless named), raw float32 in the
 * order [layer 0 .. n_layers - 1, logits] x [packed rows] x [width], for
 * tools/fixtures/fp64_layers.py to set beside HF's fp32 and true-fp64 runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "safetensors.h"
#include "util.h"

typedef struct {
    double max_o, max_h, sum_o, sum_h;
    double at_o; /* the fp64 log-prob where ours is furthest */
    int64_t n, closer, farther;
} stats;

static void acc(stats *s, double ours, double hf32, double hf64)
{
    const double o = fabs(ours - hf64), h = fabs(hf32 - hf64);
    if (o > s->max_o) {
        s->max_o = o;
        s->at_o = hf64;
    }
    s->max_h = h > s->max_h ? h : s->max_h;
    s->sum_o += o;
    s->sum_h += h;
    s->n++;
    s->closer += o < h;
    s->farther += o > h;
}

static void report(const char *dir, const char *kern, const char *path, const stats *s)
{
    /* the excess of our max over HF's in fp32 ulps of the log-prob where ours is furthest */
    const float a = (float)fabs(s->at_o);
    const double ulp = (double)nextafterf(a, INFINITY) - (double)a;
    printf("%s %s %s max %.3e %.3e %.3f mean %.3e %.3e %.3f closer %lld farther %lld excess_ulp %.2f\n", dir, kern,
           path, s->max_o, s->max_h, s->max_o / s->max_h, s->sum_o / (double)s->n, s->sum_h / (double)s->n,
           s->sum_o / s->sum_h, (long long)s->closer, (long long)s->farther, (s->max_o - s->max_h) / ulp);
}

static int fail(const char *what)
{
    fprintf(stderr, "fp64_criterion: %s: %s\n", what, rc_last_error());
    return 1;
}

/* a packed [sum(lengths), V] reference of fp32 or fp64 rows, as doubles */
static double *read_rows(rc_safetensors *st, const char *name, int64_t rows, int64_t V)
{
    const rc_st_tensor *t = rc_st_find(st, name);
    int64_t cells;
    if (t == NULL || !rc_numel((int64_t[]){rows, V}, 2, &cells))
        return NULL;
    double *d = malloc(sizeof(double) * (size_t)cells);
    float *f = malloc(sizeof(float) * (size_t)cells);
    const int64_t shape[2] = {rows, V};
    bool ok = d && f;
    if (ok && t->dtype == RC_F64)
        ok = rc_st_read_f64(st, name, 2, shape, d) == RC_OK;
    else if (ok) {
        ok = rc_st_read_f32(st, name, 2, shape, f) == RC_OK;
        for (int64_t i = 0; ok && i < cells; i++)
            d[i] = f[i];
    }
    free(f);
    if (!ok) {
        free(d);
        return NULL;
    }
    return d;
}

typedef struct {
    float *buf; /* [n_layers + 1][rows][width] */
    int64_t n_layers, rows, H, V;
    rc_status st;
} dump_ctx;

static rc_status dump_fn(void *ctx, rc_backend *be, const rc_capture *c)
{
    dump_ctx *d = ctx;
    const bool logits = c->op == RC_TOP_LOGITS;
    if (!(c->op == RC_TOP_RESID || logits))
        return RC_OK;
    const int64_t slot = logits ? d->n_layers : c->layer, width = logits ? d->V : d->H;
    float *base = d->buf + slot * d->rows * (d->H > d->V ? d->H : d->V);
    for (int64_t i = 0; i < c->n; i++) {
        const int64_t r = c->rows ? c->rows[i] : c->row0 + i;
        RC_TRY(be->ops->download(be, c->data + i * c->stride, width, base + r * width));
    }
    return RC_OK;
}

static int run_one(const char *dir, rc_kernels kern, const char *kname, const char *dump)
{
    rc_model *m;
    rc_safetensors *ref;
    rc_backend *be;
    char rp[4096];
    snprintf(rp, sizeof rp, "%s/reference.safetensors", dir);
    if (rc_model_load(dir, &m) != RC_OK)
        return fail(dir);
    if (rc_st_open_file(rp, &ref) != RC_OK)
        return fail(rp);
    if (rc_backend_cpu_create(0, kern, &be) != RC_OK)
        return fail("backend");
    const int64_t V = m->cfg.vocab;
    const rc_st_tensor *tt = rc_st_find(ref, "tokens"), *tp = rc_st_find(ref, "gen_prompts"),
                       *tg = rc_st_find(ref, "gen_tokens_f32");
    if (!tt || !tp || !tg) {
        fprintf(stderr, "fp64_criterion: %s: tokens, gen_prompts or gen_tokens_f32 missing\n", rp);
        return 1;
    }
    const int64_t B = tt->shape[0], T = tt->shape[1], G = tp->shape[0], P = tp->shape[1], N = tg->shape[1];
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(B * T)), *lengths = malloc(sizeof(int32_t) * (size_t)B);
    int32_t *gp = malloc(sizeof(int32_t) * (size_t)(G * P)), *gpl = malloc(sizeof(int32_t) * (size_t)G);
    int32_t *gt = malloc(sizeof(int32_t) * (size_t)(G * N));
    double *g32 = malloc(sizeof(double) * (size_t)(G * N * V)), *g64 = malloc(sizeof(double) * (size_t)(G * N * V));
    float *g32f = malloc(sizeof(float) * (size_t)(G * N * V));
    if (rc_st_read_i32(ref, "tokens", 2, (int64_t[]){B, T}, tokens) != RC_OK ||
        rc_st_read_i32(ref, "lengths", 1, (int64_t[]){B}, lengths) != RC_OK ||
        rc_st_read_i32(ref, "gen_prompts", 2, (int64_t[]){G, P}, gp) != RC_OK ||
        rc_st_read_i32(ref, "gen_prompt_lengths", 1, (int64_t[]){G}, gpl) != RC_OK ||
        rc_st_read_i32(ref, "gen_tokens_f32", 2, (int64_t[]){G, N}, gt) != RC_OK ||
        rc_st_read_f32(ref, "gen_logprobs_f32", 3, (int64_t[]){G, N, V}, g32f) != RC_OK ||
        rc_st_read_f64(ref, "gen_logprobs_f64", 3, (int64_t[]){G, N, V}, g64) != RC_OK)
        return fail(rp);
    for (int64_t i = 0; i < G * N * V; i++)
        g32[i] = g32f[i];
    int64_t total = 0, lens[256];
    if (B > 256 || G > 256) {
        fprintf(stderr, "fp64_criterion: %s: more than 256 sequences\n", rp);
        return 1;
    }
    for (int64_t b = 0; b < B; b++)
        total += lens[b] = lengths[b];
    double *f32 = read_rows(ref, "forward_logprobs_f32", total, V), *f64 = read_rows(ref, "forward_logprobs_f64", total, V);
    if (!f32 || !f64)
        return fail(rp);

    /* full forward, every sequence in one batch */
    rc_numerics num = rc_numerics_fp32();
    rc_engine *e;
    int64_t maxlen = T > P + N ? T : P + N, rows = total > G * P ? total : G * P;
    if (rc_engine_create(m, be, &num, B > G ? B : G, maxlen, rows, &e) != RC_OK)
        return fail("engine");
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(total > G * P ? total : G * P));
    float *out = malloc(sizeof(float) * (size_t)(total * V));
    for (int64_t b = 0, o = 0; b < B; b++)
        for (int64_t t = 0; t < lens[b]; t++)
            tok[o++] = tokens[b * T + t];
    dump_ctx dc = {0};
    if (dump) {
        const int64_t W = m->cfg.hidden > V ? m->cfg.hidden : V;
        dc = (dump_ctx){.n_layers = m->cfg.n_layers, .rows = total, .H = m->cfg.hidden, .V = V};
        dc.buf = calloc((size_t)((dc.n_layers + 1) * total * W), sizeof(float));
        if (!dc.buf)
            return fail("dump buffer");
        e->hook = (rc_capture_hook){.fn = dump_fn, .ctx = &dc};
    }
    if (rc_full_forward(e, tok, lens, B, out) != RC_OK)
        return fail("full forward");
    if (dump) {
        const int64_t W = m->cfg.hidden > V ? m->cfg.hidden : V;
        FILE *fo = fopen(dump, "wb");
        bool ok = fo != NULL;
        for (int64_t l = 0; ok && l <= dc.n_layers; l++)
            ok = fwrite(dc.buf + l * total * W, sizeof(float), (size_t)(total * (l < dc.n_layers ? dc.H : V)), fo) ==
                 (size_t)(total * (l < dc.n_layers ? dc.H : V));
        if (fo == NULL || fclose(fo) != 0 || !ok) {
            fprintf(stderr, "fp64_criterion: %s: cannot write\n", dump);
            return 6;
        }
        printf("%s: %lld layers + logits x %lld rows (hidden %lld, vocab %lld)\n", dump, (long long)dc.n_layers,
               (long long)total, (long long)dc.H, (long long)V);
        free(dc.buf);
        return 0;
    }
    stats s = {0};
    for (int64_t i = 0; i < total * V; i++)
        acc(&s, out[i], f32[i], f64[i]);
    report(dir, kname, "full", &s);
    rc_engine_free(e);

    /* cached decode of HF's fp32 greedy tokens */
    if (rc_engine_create(m, be, &num, G, P + N, G * P, &e) != RC_OK)
        return fail("engine");
    int64_t slots[256], starts[256], n_new[256], rws[256], n = 0;
    for (int64_t b = 0; b < G; b++) {
        slots[b] = b;
        starts[b] = 0;
        n_new[b] = gpl[b];
        for (int64_t t = 0; t < gpl[b]; t++)
            tok[n + t] = gp[b * P + t];
        n += gpl[b];
        rws[b] = n - 1;
    }
    float *lp = malloc(sizeof(float) * (size_t)(G * V));
    memset(&s, 0, sizeof s);
    for (int64_t step = 0; step < N; step++) {
        if (rc_engine_step(e, slots, starts, n_new, G, tok, rws, G, lp, NULL, NULL) != RC_OK)
            return fail("step");
        for (int64_t b = 0; b < G; b++)
            for (int64_t v = 0; v < V; v++)
                acc(&s, lp[b * V + v], g32[(b * N + step) * V + v], g64[(b * N + step) * V + v]);
        for (int64_t b = 0; b < G; b++) {
            starts[b] += n_new[b];
            n_new[b] = 1;
            tok[b] = gt[b * N + step];
            rws[b] = b;
        }
    }
    report(dir, kname, "cached", &s);
    rc_engine_free(e);
    free(lp);
    free(tok);
    free(out);
    free(f32);
    free(f64);
    free(tokens);
    free(lengths);
    free(gp);
    free(gpl);
    free(gt);
    free(g32);
    free(g32f);
    free(g64);
    rc_backend_destroy(be);
    rc_st_close(ref);
    rc_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fp64_criterion FIXTURE_DIR [...] | --dump OUT.f32 FIXTURE_DIR [KERNELS]\n");
        return 2;
    }
    static const struct {
        rc_kernels k;
        const char *name;
    } ks[] = {{RC_KERNELS_INVARIANT, "invariant"}, {RC_KERNELS_ENGINE, "engine"}, {RC_KERNELS_BLAS, "blas"}};
    if (strcmp(argv[1], "--dump") == 0) {
        if (argc < 4 || argc > 5) {
            fprintf(stderr, "usage: fp64_criterion --dump OUT.f32 FIXTURE_DIR [invariant|engine|blas]\n");
            return 2;
        }
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
            if (strcmp(argc == 5 ? argv[4] : "invariant", ks[i].name) == 0)
                return run_one(argv[3], ks[i].k, ks[i].name, argv[2]);
        fprintf(stderr, "fp64_criterion: kernels %s: not invariant, engine or blas\n", argv[4]);
        return 2;
    }
    for (int a = 1; a < argc; a++)
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
            if (run_one(argv[a], ks[i].k, ks[i].name, NULL) != 0)
                return 1;
    return 0;
}
