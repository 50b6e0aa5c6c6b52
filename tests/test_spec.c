/* Spec-conformance tests: ratiocheck against the upstream code it claims
 * to follow, run by the fixture generators (docs/testing-spec-conformance.md
 * lists every such test, and which "references" elsewhere are the project's
 * rule written twice).
 *
 * tp_gloo            the TP reduce (rc_tp_reduce_partials) against
 *                    torch.distributed.all_reduce with the gloo backend on
 *                    stored partials (tools/fixtures/make_tp_gloo_fixtures.py,
 *                    data/fixtures/tp/tp_gloo.*): bitwise, in every mode at
 *                    tp 2 (RN(P0 + P1)) and in `ring` at tp 3 where gloo's
 *                    chunks are the rule's (6 divides M N); the generator
 *                    checks that gloo's order is the ring's reversed for the
 *                    other sizes and degrees.
 * verl_rollout_corr  the corrections of rc_compute_stats (rc_corr_stats)
 *                    against verl 0.9.1's rollout_corr_helper run on the same
 *                    stored log-probs (tools/fixtures/make_verl_corr_fixtures.py,
 *                    data/fixtures/spec/verl_corr.*): relative 2^-23 (verl's
 *                    masked_mean divides by count + 1e-8, some of its
 *                    fractions are float32).
 * openai_completion  the `vllm` rollout reader on OpenAI completions
 *                    responses written by the openai library's own models
 *                    (tools/fixtures/make_openai_fixtures.py): every id and log-prob
 *                    equal to the same rollouts read from the generic JSONL. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "results.h"
#include "rollouts_in.h"
#include "safetensors.h"
#include "util.h"

#include "testutil.h"

static rc_safetensors *open_fixture(const char *rel)
{
    char p[4096];
    rc_safetensors *st = NULL;
    rc_test_source_path(p, sizeof p, "%s", rel);
    ck_assert_msg(rc_st_open_file(p, &st) == RC_OK, "%s", rc_last_error());
    return st;
}

/* a float tensor of any dtype as float32 (exact for bf16 / f16), its shape in shape[] */
static float *get_f32(const rc_safetensors *st, const char *name, int64_t *shape, int *ndim)
{
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    int64_t n;
    ck_assert(rc_numel(t->shape, t->ndim, &n));
    float *v = malloc(sizeof(float) * (size_t)(n + 1));
    ck_assert_msg(rc_st_read_f32(st, name, t->ndim, t->shape, v) == RC_OK, "%s", rc_last_error());
    for (int i = 0; i < t->ndim; i++)
        shape[i] = t->shape[i];
    *ndim = t->ndim;
    return v;
}

static const char *const k_modes[] = {"fp32", "ring", "chain", "seq"};
static const rc_tp_reduce k_mode_ids[] = {RC_TP_REDUCE_FP32, RC_TP_REDUCE_RING, RC_TP_REDUCE_CHAIN,
                                          RC_TP_REDUCE_SEQ};

/* Every "<dt>.m<M>n<N>.tp<k>.P" of the file: ratiocheck's reduce of the
 * stored partials gives gloo's bits (k = 2: every mode; k = 3: ring). */
START_TEST(test_tp_gloo)
{
    rc_safetensors *st = open_fixture("data/fixtures/tp/tp_gloo.safetensors");
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be) == RC_OK);
    int64_t checked = 0, tensors = 0, by_k[4] = {0};
    for (int64_t i = 0; i < st->ntensors; i++) {
        const char *name = st->tensors[i].name;
        const size_t ln = strlen(name);
        if (ln < 2 || strcmp(name + ln - 2, ".P") != 0)
            continue;
        char dt[8], gname[256];
        int M, N, k;
        ck_assert_msg(sscanf(name, "%7[^.].m%dn%d.tp%d.P", dt, &M, &N, &k) == 4, "%s", name);
        ck_assert(k == 2 || k == 3);
        const rc_dtype d = strcmp(dt, "bf16") == 0 ? RC_BF16 : RC_F16;
        ck_assert(d == RC_BF16 || strcmp(dt, "f16") == 0);
        snprintf(gname, sizeof gname, "%.*s.gloo", (int)(ln - 2), name);
        int64_t sp[4], sg[4];
        int np, ng;
        float *P = get_f32(st, name, sp, &np), *want = get_f32(st, gname, sg, &ng);
        ck_assert(np == 3 && sp[0] == k && sp[1] == M && sp[2] == N && ng == 2 && sg[0] == M && sg[1] == N);
        const int64_t MN = (int64_t)M * N;
        float *parts = malloc(sizeof(float) * (size_t)(k * MN)), *y = malloc(sizeof(float) * (size_t)MN);
        int64_t *zeros = calloc((size_t)M, sizeof *zeros);
        for (int mi = 0; mi < 4; mi++) {
            if (k == 3 && k_mode_ids[mi] != RC_TP_REDUCE_RING)
                continue;
            rc_numerics num = rc_numerics_fp32();
            num.dt = d;
            num.tp = k;
            num.tp_reduce = k_mode_ids[mi];
            memcpy(parts, P, sizeof(float) * (size_t)(k * MN)); /* the reduce overwrites rank 0's */
            ck_assert(rc_tp_reduce_partials(be, &num, parts, M, N, NULL, d, 0, MN, zeros, y) == RC_OK);
            int64_t nd = 0;
            for (int64_t e = 0; e < MN; e++)
                nd += rc_f32_bits(y[e]) != rc_f32_bits(want[e]);
            ck_assert_msg(nd == 0, "%s, mode %s: %lld of %lld elements differ from gloo's all_reduce", name,
                          k_modes[mi], (long long)nd, (long long)MN);
            checked += MN;
        }
        by_k[k]++;
        tensors++;
        free(P), free(want), free(parts), free(y), free(zeros);
    }
    printf("TP reduce vs gloo all_reduce: %lld tensors (%lld at tp 2, %lld at tp 3), %lld outputs bitwise\n",
           (long long)tensors, (long long)by_k[2], (long long)by_k[3], (long long)checked);
    ck_assert_msg(by_k[2] > 0 && by_k[3] > 0, "tp_gloo.safetensors holds no tp 2 or no tp 3 tensors");
    rc_backend_destroy(be);
    rc_st_close(st);
}
END_TEST

/* verl's rollout corrections on the stored log-probs vs rc_compute_stats'. */
START_TEST(test_verl_rollout_corr)
{
    rc_safetensors *st = open_fixture("data/fixtures/spec/verl_corr.safetensors");
    int64_t sg[4], sf[4];
    int ng, nf;
    float *gen = get_f32(st, "logprob_gen", sg, &ng), *fwd = get_f32(st, "logprob_fwd", sf, &nf);
    ck_assert(ng == 2 && nf == 2 && sg[0] == sf[0] && sg[1] == sf[1]);
    const int64_t S = sg[0], G = sg[1];
    rc_results r;
    memset(&r, 0, sizeof r);
    r.n_seq = S;
    r.gen_len = G;
    r.gen_valid = malloc(sizeof(int32_t) * (size_t)S);
    ck_assert(rc_st_read_i32(st, "gen_valid", 1, (int64_t[]){S}, r.gen_valid) == RC_OK);
    r.logprob_gen = gen;
    r.n_lens = 1;
    r.lens = calloc(1, sizeof *r.lens);
    r.lens[0].len = G;
    r.lens[0].logprob_fwd = fwd;
    ck_assert_msg(rc_compute_stats(&r) == RC_OK, "%s", rc_last_error());
    const rc_corrections *c = &r.lens[0].st.corr;
    const double rtol = ldexp(1.0, -23);
    int compared = 0;
    for (size_t i = 0; i < rc_n_corr_stats; i++) {
        char key[96];
        snprintf(key, sizeof key, "verl.%s", rc_corr_stats[i].name);
        if (!rc_st_find(st, key))
            continue; /* not a verl correction (TRL, prime-rl, slime) */
        double want;
        ck_assert(rc_st_read_f64(st, key, 1, (int64_t[]){1}, &want) == RC_OK);
        const double got = rc_corr_value(c, &rc_corr_stats[i]);
        printf("%-22s ratiocheck %.17g  verl %.17g  rel %.2e\n", rc_corr_stats[i].name, got, want,
               fabs(got - want) / fabs(want));
        ck_assert_msg(fabs(got - want) <= rtol * fabs(want) + 1e-15, "%s: ratiocheck %.17g, verl %.17g",
                      rc_corr_stats[i].name, got, want);
        compared++;
    }
    /* every verl value of the file has its ratiocheck statistic */
    int in_file = 0;
    for (int64_t i = 0; i < st->ntensors; i++)
        in_file += strncmp(st->tensors[i].name, "verl.", 5) == 0;
    ck_assert_int_eq(compared, in_file);
    ck_assert_int_gt(compared, 0);
    rc_results_free(&r);
    rc_st_close(st);
}
END_TEST

/* The same rollouts as openai.types.Completion JSON (format vllm) and as
 * the generic JSONL: the same ids and log-probs, bit for bit. */
START_TEST(test_openai_completion)
{
    char pa[4096], pb[4096];
    rc_test_source_path(pa, sizeof pa, "data/fixtures/spec/openai_completions_fp32.jsonl");
    rc_test_source_path(pb, sizeof pb, "data/fixtures/score/hf_fp32.jsonl");
    rc_rollout_set a, b;
    ck_assert_msg(rc_rollouts_load(pa, RC_RFMT_VLLM, 1 << 20, 0, NULL, NULL, &a) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_rollouts_load(pb, RC_RFMT_JSONL, 1 << 20, 0, NULL, NULL, &b) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(a.n, b.n);
    ck_assert_int_gt(a.n, 0);
    ck_assert(a.tok_off[a.n] == b.tok_off[b.n] && a.lp_off[a.n] == b.lp_off[b.n]);
    for (int64_t i = 0; i < a.n; i++)
        ck_assert(a.plen[i] == b.plen[i] && a.rlen[i] == b.rlen[i]);
    ck_assert(memcmp(a.tok, b.tok, sizeof(int32_t) * (size_t)a.tok_off[a.n]) == 0);
    ck_assert(memcmp(a.lp, b.lp, sizeof(float) * (size_t)a.lp_off[a.n]) == 0);
    printf("openai Completion JSON (vllm reader): %lld rollouts, %lld tokens, %lld log-probs as the JSONL's\n",
           (long long)a.n, (long long)a.tok_off[a.n], (long long)a.lp_off[a.n]);
    rc_rollouts_free(&a);
    rc_rollouts_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("tp_gloo");
    tcase_add_test(tc, test_tp_gloo);
    suite_add_tcase(s, tc);
    tc = tcase_create("verl_rollout_corr");
    tcase_add_test(tc, test_verl_rollout_corr);
    suite_add_tcase(s, tc);
    tc = tcase_create("openai_completion");
    tcase_add_test(tc, test_openai_completion);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
