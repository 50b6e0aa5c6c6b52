/* test_h5out_routing.c: test_h5out's tests of what score, --distribution and a MoE run add:
 * /routing, the distribution arrays, the trainer's columns, diff of two runs' routing
 * (test_h5out.c holds the fixtures and the suite). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "results.h"
#include "rollout.h"
#include "routing.h"
#include "status.h"

#include "testutil.h"
#include "test_h5out.h"

/* --- what score, --distribution and a MoE run add: /routing, /len_NNNN/ kl, tv and top1_agree, the trainer's columns --- */

/* build_default(false) (5 sequences x 7 tokens) with a routing record of lm layers, top k of e experts: on every
 * valid token the sampler picks experts 0..k-1 and the trainer 1..k (so they share k - 1), weights 1 / k */
static rc_results *build_routed(int64_t lm, int64_t k, int64_t e)
{
    rc_results *r = build_default(false);
    rc_routing *rt;
    ck_assert_msg(rc_routing_create(r->n_seq, r->gen_len, lm, k, e, &rt) == RC_OK, "%s", rc_last_error());
    for (int64_t m = 0; m < lm; m++)
        rt->layer[m] = (int32_t)(2 * m + 1);
    const int64_t G = r->gen_len;
    for (int64_t s = 0; s < r->n_seq; s++)
        for (int64_t t = 0; t < r->gen_valid[s]; t++)
            for (int64_t j = 0; j < lm * k; j++) {
                const int64_t i = (s * G + t) * lm * k + j;
                rt->experts[0][i] = (int16_t)(j % k);
                rt->experts[1][i] = (int16_t)(j % k + 1);
                rt->weights[0][i] = rt->weights[1][i] = 1.0f / (float)k;
            }
    const rc_len_result *L = &r->lens[r->n_lens - 1];
    rc_routing_compute(rt, r->logprob_gen, L->logprob_fwd, L->len);
    r->routing = rt;
    return r;
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A file may declare top_k up to 32767: the overlap of the two sides' experts was computed pairwise, O(k^2) per
 * token and layer (about 16 s of CPU for these 35 tokens at -O2; minutes for a 0.5 MB file of more tokens). It
 * is O(k) now, and gives what the definition (entries of the sampler's set the trainer's holds) gives. */
START_TEST(test_read_routing_wide_topk)
{
    const int64_t k = 32766, e = 32767;
    rc_results *r = build_routed(1, k, e);
    int64_t valid = 0;
    for (int64_t s = 0; s < r->n_seq; s++)
        valid += r->gen_valid[s];
    const char *t = tpath("wide.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    rc_routing *b = back.routing;
    ck_assert(b != NULL && b->top_k == k && b->n_experts == e);
    /* the statistics the reader computed, computed again and timed (pairwise: 4.4 s of CPU in a release build) */
    const rc_routing_stats st = b->st;
    const rc_len_result *L = &back.lens[back.n_lens - 1];
    const double c0 = cpu_seconds();
    rc_routing_compute(b, back.logprob_gen, L->logprob_fwd, L->len);
    const double cpu = cpu_seconds() - c0;
    ck_assert_msg(cpu < 1.0, "the statistics of %lld tokens of top %lld took %.2f s of CPU", (long long)valid,
                  (long long)k, cpu);
    ck_assert(!memcmp(&st, &b->st, sizeof st));
    /* the definition, by a membership table of the trainer's experts */
    char *in = xcalloc((size_t)e, 1);
    int64_t common = 0, tokens = 0;
    for (int64_t s = 0; s < back.n_seq; s++)
        for (int64_t tt = 0; tt < back.gen_valid[s]; tt++) {
            const int16_t *x = b->experts[0] + (s * back.gen_len + tt) * k, *y = b->experts[1] + (s * back.gen_len + tt) * k;
            memset(in, 0, (size_t)e);
            for (int64_t j = 0; j < k; j++)
                in[y[j]] = 1;
            for (int64_t j = 0; j < k; j++)
                common += in[x[j]];
            tokens++;
        }
    free(in);
    ck_assert_int_eq(tokens, valid);
    ck_assert_int_eq(b->st.tokens, tokens);
    ck_assert_int_eq(b->st.tokens_flip, tokens);
    ck_assert(fabs(b->st.mean_overlap - (double)common / (double)(tokens * k)) < 1e-12);
    ck_assert_int_eq(b->layer_miles[0], 0);
    rc_results_free(&back);
    destroy(r);
}
END_TEST

/* the same O(k) count on what the reader lets through: repeated experts and -1 (a side that recorded none past
 * the first slot) count as the pairwise definition counts them */
START_TEST(test_routing_overlap_repeats)
{
    rc_routing *rt;
    ck_assert(rc_routing_create(1, 3, 1, 3, 6, &rt) == RC_OK);
    const int16_t a[3][3] = {{3, 3, 5}, {2, -1, -1}, {0, 1, 2}}, b[3][3] = {{3, 4, 1}, {2, -1, 4}, {5, 4, 3}};
    int64_t want[3];
    for (int t = 0; t < 3; t++) {
        want[t] = 0;
        for (int i = 0; i < 3; i++) {
            memcpy(rt->experts[0] + t * 3, a[t], sizeof a[t]);
            memcpy(rt->experts[1] + t * 3, b[t], sizeof b[t]);
            bool hit = false;
            for (int j = 0; j < 3; j++)
                hit = hit || a[t][i] == b[t][j];
            want[t] += hit;
        }
    }
    const float z[3] = {0, 0, 0};
    rc_routing_compute(rt, z, z, 3);
    ck_assert_int_eq(rt->st.tokens, 3);
    ck_assert(fabs(rt->st.mean_overlap - (double)(want[0] + want[1] + want[2]) / 9.0) < 1e-15);
    ck_assert_int_eq(rt->layer_miles[0], (want[0] == 0) + (want[1] == 0) + (want[2] == 0));
    ck_assert_int_eq(rt->st.tokens_flip, (want[0] < 3) + (want[1] < 3) + (want[2] < 3));
    rc_routing_free(rt);
}
END_TEST

/* Set a scalar int64 attribute of group g */
static void put_group_attr_i64(const char *path, const char *group, const char *name, int64_t v)
{
    hid_t f = h5_open_rw(path);
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    ck_assert_msg(g >= 0, "H5Gopen2 %s", group);
    put_attr_i64(g, name, v);
    H5Gclose(g);
    H5Fclose(f);
}

/* /routing's attributes out of range, its datasets of another shape or class, experts out of range: refused,
 * one line naming the file */
START_TEST(test_read_routing_hostile)
{
    rc_results *r = build_routed(2, 2, 4);
    const char *t = tpath("routed.h5"), *c = tpath("routed_copy.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.routing != NULL && !memcmp(&back.routing->st, &r->routing->st, sizeof back.routing->st));
    rc_results_free(&back);
    static const struct {
        const char *a;
        int64_t v;
        const char *mention;
    } attrs[] = {{"moe_layers", 0, "MoE layers"},  {"moe_layers", INT64_MIN, "MoE layers"},
                 {"top_k", 5, "top 5 of 4"},      {"top_k", 0, "MoE layers"},
                 {"experts", 1, "top 2 of 1"},    {"experts", 32768, "of 32768 experts"},
                 {"moe_layers", 3, "/routing/sampler_experts"}, {"top_k", 1, "/routing/sampler_experts"}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        copy_file(t, c);
        put_group_attr_i64(c, "/routing", attrs[i].a, attrs[i].v);
        expect_read_error(c, RC_ERR_FORMAT, attrs[i].mention);
    }
    /* an attribute missing, or a string */
    copy_file(t, c);
    hid_t f = h5_open_rw(c);
    ck_assert_int_ge(H5Adelete_by_name(f, "/routing", "experts", H5P_DEFAULT), 0);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "experts");
    /* experts out of range (the trainer's -2; the sampler's = experts) */
    copy_file(t, c);
    patch_i32(c, "/routing/trainer_experts", 3, -2);
    expect_read_error(c, RC_ERR_FORMAT, "trainer_experts holds expert -2");
    copy_file(t, c);
    patch_i32(c, "/routing/sampler_experts", 0, 4);
    expect_read_error(c, RC_ERR_FORMAT, "sampler_experts holds expert 4");
    ck_assert_int_eq(report(c), 4);
    assert_one_line(c);
    /* layers not increasing */
    copy_file(t, c);
    patch_i32(c, "/routing/layer", 1, 1);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/layer[1]");
    /* weights as integers, experts as floats, a rank-3 experts array */
    int32_t wi[5 * 7 * 2 * 2] = {0};
    float ef[5 * 7 * 2 * 2] = {0};
    hsize_t d4[4] = {5, 7, 2, 2};
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/routing/trainer_weights", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, d4, wi, false);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/trainer_weights holds integers");
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/routing/sampler_experts", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d4, ef, false);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/sampler_experts holds floats");
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/routing/sampler_experts", H5T_STD_I16LE, H5T_NATIVE_INT32, 3, d4, wi, false);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/sampler_experts has rank 3");
    /* a missing dataset */
    copy_file(t, c);
    f = h5_open_rw(c);
    ck_assert_int_ge(H5Ldelete(f, "/routing/trainer_weights", H5P_DEFAULT), 0);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/routing/trainer_weights is missing");
    destroy(r);
}
END_TEST

/* --distribution's arrays: a top-1 flag outside {-1, 0, 1}, a length without them, another shape */
START_TEST(test_read_dist_hostile)
{
    rc_results *r = build_default(false);
    const int64_t S = r->n_seq;
    for (int i = 0; i < r->n_lens; i++) {
        rc_len_result *lr = &r->lens[i];
        const int64_t L = lr->len;
        lr->dist_kl = xcalloc((size_t)(S * L), sizeof(double));
        lr->dist_tv = xcalloc((size_t)(S * L), sizeof(double));
        lr->dist_top1 = xcalloc((size_t)(S * L), sizeof(int32_t));
        for (int64_t s = 0; s < S; s++)
            for (int64_t tt = 0; tt < L; tt++) {
                const bool v = tt < r->gen_valid[s];
                lr->dist_kl[s * L + tt] = v ? 0.01 * (double)(tt + 1) : NAN;
                lr->dist_tv[s * L + tt] = v ? 0.002 * (double)(s + 1) : NAN;
                lr->dist_top1[s * L + tt] = v ? (int32_t)((s + tt) % 2) : -1;
            }
    }
    ck_assert(rc_compute_stats(r) == RC_OK);
    const char *t = tpath("dist.h5"), *c = tpath("dist_copy.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.lens[1].dist_top1 != NULL &&
              !memcmp(back.lens[1].dist_top1, r->lens[1].dist_top1, (size_t)(S * 7) * sizeof(int32_t)));
    rc_results_free(&back);
    /* 2 and INT32_MIN where -1, 0 or 1 belong */
    copy_file(t, c);
    patch_i32(c, "/len_0007/top1_agree", 9, 2);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0007/top1_agree[1, 2] = 2 is not -1, 0 or 1");
    copy_file(t, c);
    patch_i32(c, "/len_0003/top1_agree", 0, INT32_MIN);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0003/top1_agree[0, 0]");
    ck_assert_int_eq(report(c), 4);
    assert_one_line(c);
    /* the first length has them, the second not */
    copy_file(t, c);
    hid_t f = h5_open_rw(c);
    ck_assert_int_ge(H5Ldelete(f, "/len_0007/tv", H5P_DEFAULT), 0);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0007/tv is missing");
    /* kl of another length's shape, and as integers */
    double kl[5 * 7] = {0};
    int32_t ki[5 * 3] = {0};
    hsize_t d[2] = {5, 7};
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/len_0003/kl", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, d, kl, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0003/kl is 5 x 7, not 5 x 3");
    d[1] = 3;
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/len_0003/kl", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d, ki, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/len_0003/kl holds integers");
    destroy(r);
}
END_TEST

/* score's columns: the trainer's and ratiocheck's log-probs of another shape or class are refused; ratiocheck's
 * without the trainer's are not read (no /threeway) */
START_TEST(test_read_trainer_hostile)
{
    rc_results *r = build_default(false);
    const int64_t n = r->n_seq * r->gen_len;
    r->logprob_trainer = xcalloc((size_t)n, sizeof(float));
    r->logprob_ratiocheck = xcalloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        r->logprob_trainer[i] = r->logprob_gen[i] - 0.001f;
        r->logprob_ratiocheck[i] = r->logprob_gen[i] + 0.002f;
    }
    r->threeway = xcalloc(1, sizeof *r->threeway);
    snprintf(r->threeway->ratiocheck, sizeof r->threeway->ratiocheck, "dtype=fp32");
    const char *t = tpath("tw.h5"), *c = tpath("tw_copy.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.threeway != NULL && !strcmp(back.threeway->ratiocheck, "dtype=fp32"));
    rc_results_free(&back);
    float v[5 * 8] = {0};
    int32_t vi[5 * 7] = {0};
    hsize_t d[2] = {5, 8};
    copy_file(t, c);
    hid_t f = h5_open_rw(c);
    put_ds(f, "/rollouts/logprob_ratiocheck", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d, v, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/rollouts/logprob_ratiocheck is 5 x 8, not 5 x 7");
    d[1] = 7;
    copy_file(t, c);
    f = h5_open_rw(c);
    put_ds(f, "/rollouts/logprob_trainer", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d, vi, true);
    H5Fclose(f);
    expect_read_error(c, RC_ERR_FORMAT, "/rollouts/logprob_trainer holds integers");
    /* /threeway's spec as an integer */
    copy_file(t, c);
    put_group_attr_i64(c, "/threeway", "ratiocheck", 7);
    expect_read_error(c, RC_ERR_FORMAT, "ratiocheck");
    /* ratiocheck's column without the trainer's: read as a file without either */
    copy_file(t, c);
    f = h5_open_rw(c);
    ck_assert_int_ge(H5Ldelete(f, "/rollouts/logprob_trainer", H5P_DEFAULT), 0);
    H5Fclose(f);
    ck_assert_msg(rc_h5_read(c, &back) == RC_OK, "%s", rc_last_error());
    ck_assert(back.logprob_trainer == NULL && back.logprob_ratiocheck == NULL && back.threeway == NULL);
    rc_results_free(&back);
    destroy(r);
}
END_TEST

/* `ratiocheck ARGS` from the source root, stdout into out (NUL-terminated); returns the exit code */
static int run_cli_out(const char *args, char *out, size_t cap)
{
    char outp[PATH_MAX + 32], cmd[16384];
    snprintf(outp, sizeof outp, "%s/stdout.txt", g_dir);
    const char *root = getenv("RC_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s' 2>/dev/null </dev/null", root ? root : ".", RC_CLI, args, outp);
    int st = system(cmd);
    FILE *f = fopen(outp, "rb");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    unlink(outp);
    ck_assert_msg(st != -1 && WIFEXITED(st), "ratiocheck %s did not exit normally", args);
    return WEXITSTATUS(st);
}

static int cmp_i16(const void *x, const void *y)
{
    return (int)*(const int16_t *)x - (int)*(const int16_t *)y;
}

/* tokens recorded by both runs on `side`, and those whose sorted expert lists differ in some layer */
static void routing_differ(const rc_routing *a, const rc_routing *b, int side, int64_t *tokens, int64_t *differ)
{
    const int64_t Lm = a->n_layers, k = a->top_k;
    int16_t x[16], y[16];
    *tokens = *differ = 0;
    for (int64_t i = 0; i < a->n_seq * a->gen_len; i++) {
        if (a->experts[side][i * Lm * k] < 0 || b->experts[side][i * Lm * k] < 0)
            continue;
        (*tokens)++;
        bool d = false;
        for (int64_t m = 0; m < Lm; m++) {
            memcpy(x, a->experts[side] + (i * Lm + m) * k, (size_t)k * sizeof *x);
            memcpy(y, b->experts[side] + (i * Lm + m) * k, (size_t)k * sizeof *y);
            qsort(x, (size_t)k, sizeof *x, cmp_i16);
            qsort(y, (size_t)k, sizeof *y, cmp_i16);
            d = d || memcmp(x, y, (size_t)k * sizeof *x) != 0;
        }
        *differ += d;
    }
}

/* `diff` of two MoE runs: the share of tokens whose experts differ between the runs, the sampler's and the
 * trainer's (an order that differs over the same set does not count), in the table and in --json; a run
 * without a record is named */
START_TEST(test_diff_routing)
{
    rc_results *a = build_routed(2, 2, 4), *b = build_routed(2, 2, 4);
    rc_routing *rb = b->routing;
    const int64_t Lm = 2, k = 2, n = b->n_seq * b->gen_len;
    for (int64_t i = 0; i < n; i++) {
        int16_t *tr = rb->experts[1] + i * Lm * k, *sa = rb->experts[0] + i * Lm * k;
        if (tr[0] < 0)
            continue;
        if (i % 3 == 0) /* the trainer's layer 1: the same set, the other order */
            tr[2] = 2, tr[3] = 1;
        else if (i % 3 == 1) /* another expert */
            tr[2] = 3;
        if (i % 4 == 1) /* the sampler's layer 0: the same set, the other order */
            sa[0] = 1, sa[1] = 0;
        if (i % 7 == 2) /* another expert */
            sa[1] = 3;
    }
    const rc_len_result *L = &b->lens[b->n_lens - 1];
    rc_routing_compute(rb, b->logprob_gen, L->logprob_fwd, L->len);
    int64_t tok[2], dif[2];
    for (int side = 0; side < 2; side++) {
        routing_differ(a->routing, rb, side, &tok[side], &dif[side]);
        ck_assert_int_gt(dif[side], 0);
        ck_assert_int_lt(dif[side], tok[side]);
    }
    const char *pa = tpath("ra.h5"), *pb = tpath("rb.h5"), *pc = tpath("rc.h5");
    ck_assert_msg(rc_h5_write(a, pa, true) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(rc_h5_write(b, pb, true) == RC_OK, "%s", rc_last_error());
    rc_routing_free(b->routing);
    b->routing = NULL;
    ck_assert_msg(rc_h5_write(b, pc, true) == RC_OK, "%s", rc_last_error());
    static char out[65536];
    char args[3 * PATH_MAX], want[256];
    snprintf(args, sizeof args, "diff '%s' '%s' --json", pa, pb);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    for (int side = 0; side < 2; side++) {
        const char *nm = side ? "trainer" : "sampler";
        snprintf(want, sizeof want, "\"%s_tokens\": %lld, \"%s_tokens_differ\": %lld", nm, (long long)tok[side], nm,
                 (long long)dif[side]);
        ck_assert_msg(strstr(out, want) != NULL, "no [%s] in %s", want, out);
    }
    snprintf(args, sizeof args, "diff '%s' '%s'", pa, pb);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "routing, A vs B: experts differ on %lld of %lld sampler tokens", (long long)dif[0],
             (long long)tok[0]);
    ck_assert_msg(strstr(out, want) != NULL, "no [%s] in %s", want, out);
    snprintf(want, sizeof want, ", %lld of %lld trainer tokens", (long long)dif[1], (long long)tok[1]);
    ck_assert_msg(strstr(out, want) != NULL, "no [%s] in %s", want, out);
    /* a run without a record */
    snprintf(args, sizeof args, "diff '%s' '%s' --json", pa, pc);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "\"routing\": null") != NULL, "%s", out);
    snprintf(args, sizeof args, "diff '%s' '%s'", pa, pc);
    ck_assert_int_eq(run_cli_out(args, out, sizeof out), 0);
    ck_assert_msg(strstr(out, "not compared (only A has a routing record)") != NULL, "%s", out);
    destroy(a);
    destroy(b);
}
END_TEST

void routing_tests_in_reader(TCase *tc)
{
    tcase_add_test(tc, test_read_routing_wide_topk);
    tcase_add_test(tc, test_routing_overlap_repeats);
    tcase_add_test(tc, test_read_routing_hostile);
    tcase_add_test(tc, test_read_dist_hostile);
    tcase_add_test(tc, test_read_trainer_hostile);
}

void routing_tests_in_replay(TCase *tc)
{
    tcase_add_test(tc, test_diff_routing);
}
