/* --distribution (docs/statistics.md "Distribution"): the per-position KL / total
 * variation / top-1 kernel against PyTorch on the committed row pairs
 * (data/fixtures/dist, tools/checks/dist_ref.py make-fixture), and the pass end to
 * end on the bundled model: the same sides give zero, the window does not
 * change a bit, and the run's other results are those of a run without it. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "prompts.h"
#include "results.h"
#include "rollout.h"

#include "testutil.h"
#include "bundled.h"

static double rel_diff(double got, double want)
{
    if (isinf(want) || isinf(got))
        return got == want ? 0.0 : INFINITY;
    if (got == want)
        return 0.0;
    return fabs(got - want) / fabs(want);
}

/* every case of rows.bin against its line of ref.txt: KL and TV within
 * 1e-12 relative (+inf equal), the two argmax and top-1 equal */
START_TEST(test_fixture_torch)
{
    char p[4096];
    FILE *rows = fopen(rc_test_source_path(p, sizeof p, "data/fixtures/dist/rows.bin"), "rb");
    ck_assert_msg(rows, "%s", p);
    FILE *ref = fopen(rc_test_source_path(p, sizeof p, "data/fixtures/dist/ref.txt"), "r");
    ck_assert_msg(ref, "%s", p);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, ref)) {
        if (line[0] == '#')
            continue;
        int id, top1, pa, qa;
        char kls[64], tvs[64];
        ck_assert_int_eq(sscanf(line, "%d %63s %63s %d %d %d", &id, kls, tvs, &top1, &pa, &qa), 6);
        const double kl = strtod(kls, NULL), tv = strtod(tvs, NULL); /* "inf" included */
        int64_t head[4], t1;
        double kt[2];
        ck_assert(fread(head, sizeof head, 1, rows) == 1 && fread(kt, sizeof kt, 1, rows) == 1 &&
                  fread(&t1, sizeof t1, 1, rows) == 1);
        ck_assert_int_eq(head[0], id);
        const int64_t V = head[3];
        ck_assert(V > 0 && V < (1 << 24));
        float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
        ck_assert(a && b);
        ck_assert(fread(a, sizeof *a, (size_t)V, rows) == (size_t)V && fread(b, sizeof *b, (size_t)V, rows) == (size_t)V);
        const rc_dist_token d = rc_dist_row(a, b, V);
        ck_assert_msg(rel_diff(d.kl, kl) <= 1e-12, "case %d: kl %.17g, torch %.17g", id, d.kl, kl);
        ck_assert_msg(rel_diff(d.tv, tv) <= 1e-12, "case %d: tv %.17g, torch %.17g", id, d.tv, tv);
        ck_assert_int_eq(d.p_argmax, pa);
        ck_assert_int_eq(d.q_argmax, qa);
        ck_assert_int_eq(d.top1, top1);
        free(a);
        free(b);
        n++;
    }
    ck_assert_int_ge(n, 9);
    fclose(rows);
    fclose(ref);
}
END_TEST

/* NaN anywhere: kl and tv NaN, top-1 false */
START_TEST(test_nan_row)
{
    const float a[3] = {-1.0f, NAN, -2.0f}, b[3] = {-1.0f, -1.5f, -2.0f};
    const rc_dist_token d = rc_dist_row(a, b, 3);
    ck_assert(isnan(d.kl) && isnan(d.tv) && !d.top1);
}
END_TEST

static rc_rollout_cfg base_cfg(rc_dtype dt)
{
    rc_rollout_cfg c;
    memset(&c, 0, sizeof c);
    c.n_prompts = g_prompts.n < 5 ? g_prompts.n : 5;
    c.prompt_max = g_prompts.max_len;
    c.prompt_tokens = g_prompts.tokens;
    c.prompt_len = g_prompts.len;
    c.samples = 2;
    c.batch = 3; /* several decode batches */
    c.n_lens = 2;
    c.lens[0] = 6;
    c.lens[1] = 16;
    c.seed = 0;
    c.stop_at_eos = true;
    c.sampling.top_k = 0;
    c.sampling.top_p = 1.0;
    c.num = rc_numerics_fp32();
    c.num.dt = dt;
    c.num.temperature = 2.0f; /* the logits divided by 2: an EOS within 16 tokens */
    return c;
}

static void run(rc_kernels k, const rc_rollout_cfg *cfg, rc_results *r)
{
    rc_backend *be;
    ck_assert(rc_backend_cpu_create(0, k, &be) == RC_OK);
    memset(r, 0, sizeof *r);
    rc_status s = rc_run_check(g_model, be, NULL, cfg, NULL, NULL, NULL, r);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    rc_backend_destroy(be);
}

/* invariant kernels, one side's numerics: the two rows of every position are
 * the same bits, so KL = TV = 0 exactly and the argmax agrees */
START_TEST(test_same_sides_zero)
{
    rc_rollout_cfg cfg = base_cfg(RC_BF16);
    cfg.distribution = true;
    rc_results r;
    run(RC_KERNELS_INVARIANT, &cfg, &r);
    for (int i = 0; i < r.n_lens; i++) {
        const rc_len_result *L = &r.lens[i];
        ck_assert(L->st.dist);
        ck_assert_int_eq(L->st.dist_count, L->st.count);
        for (int64_t k = 0; k < r.n_seq * L->len; k++) {
            const bool valid = (k % L->len) < r.gen_valid[k / L->len];
            ck_assert_int_eq(L->dist_top1[k], valid ? 1 : -1);
            if (valid)
                ck_assert(L->dist_kl[k] == 0.0 && L->dist_tv[k] == 0.0);
            else
                ck_assert(isnan(L->dist_kl[k]) && isnan(L->dist_tv[k]));
        }
        ck_assert(L->st.kl_max == 0.0 && L->st.tv_max == 0.0 && L->st.top1_agree == 1.0);
    }
    rc_results_free(&r);
}
END_TEST

/* engine kernels, fp16 with fp16 log-probs, a trainer of its own (fp32 LM
 * head, its own micro-batch): the window (1, 4, all) does not
 * change a bit of the per-token arrays; the run without --distribution has
 * the same log-probs and statistics; some sequence stopped at EOS */
START_TEST(test_window_and_unchanged)
{
    rc_rollout_cfg cfg = base_cfg(RC_F16);
    cfg.num.logprob_dt = RC_F16; /* rows rounded to fp16: they do not sum to 1 */
    cfg.trainer = true;
    cfg.num_trainer = cfg.num;
    cfg.num_trainer.upcast = RC_UPCAST_LM_HEAD;
    cfg.forward_batch = 4;
    rc_results plain, all, w1, w4;
    run(RC_KERNELS_ENGINE, &cfg, &plain);
    cfg.distribution = true;
    run(RC_KERNELS_ENGINE, &cfg, &all);
    cfg.dist_window = 1;
    run(RC_KERNELS_ENGINE, &cfg, &w1);
    cfg.dist_window = 4;
    run(RC_KERNELS_ENGINE, &cfg, &w4);
    bool stopped = false;
    for (int64_t s = 0; s < plain.n_seq; s++)
        stopped = stopped || plain.gen_valid[s] < plain.gen_len;
    ck_assert_msg(stopped, "no sequence stopped at EOS: the fixture's seed no longer covers it");
    ck_assert(!memcmp(plain.logprob_gen, all.logprob_gen, (size_t)(plain.n_seq * plain.gen_len) * sizeof(float)));
    for (int i = 0; i < plain.n_lens; i++) {
        const int64_t n = plain.n_seq * plain.lens[i].len;
        ck_assert(!plain.lens[i].st.dist && !plain.lens[i].dist_kl);
        ck_assert(!memcmp(plain.lens[i].logprob_fwd, all.lens[i].logprob_fwd, (size_t)n * sizeof(float)));
        ck_assert(!memcmp(&plain.lens[i].st.mean, &all.lens[i].st.mean, sizeof(double)));
        ck_assert(!memcmp(&plain.lens[i].st.k3, &all.lens[i].st.k3, sizeof(double)));
        const rc_results *ws[2] = {&w1, &w4};
        for (int k = 0; k < 2; k++) {
            ck_assert(!memcmp(all.lens[i].dist_kl, ws[k]->lens[i].dist_kl, (size_t)n * sizeof(double)));
            ck_assert(!memcmp(all.lens[i].dist_tv, ws[k]->lens[i].dist_tv, (size_t)n * sizeof(double)));
            ck_assert(!memcmp(all.lens[i].dist_top1, ws[k]->lens[i].dist_top1, (size_t)n * sizeof(int32_t)));
        }
        ck_assert(all.lens[i].st.dist_count == all.lens[i].st.count && all.lens[i].st.kl_max > 0.0);
    }
    rc_results_free(&plain);
    rc_results_free(&all);
    rc_results_free(&w1);
    rc_results_free(&w4);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("dist");
    tcase_add_unchecked_fixture(tc, load, unload);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fixture_torch);
    tcase_add_test(tc, test_nan_row);
    tcase_add_test(tc, test_same_sides_zero);
    tcase_add_test(tc, test_window_and_unchanged);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
