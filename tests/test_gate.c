/* The gate (src/results/gate.c: --fail-on, --fail-above) and the verdict's
 * routing line (docs/verdict.md), handed numbers: a run whose ratios are all
 * 1 (every other line OK) and whose routing record has a chosen number of
 * tokens with no expert in common between the sides. The expected level and
 * gate outcome are computed here from the record's experts against miles'
 * 1% (RC_ROUTING_MILES_MAX), not typed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "results.h"
#include "routing.h"

#include "testutil.h"

#define S 4
#define G 50 /* 200 tokens: one is 0.5% of them */
#define LM 2
#define K 2

/* a run of S sequences of G tokens, every log r = 0; with moe, a routing record over LM layers (decoder layers
 * 1 and 3), top K of 6 experts, the sides agreeing ({0, 1}) except: the first `disjoint` tokens in the second
 * layer ({2, 3} on the trainer: no expert in common) and the next `partial` tokens in the first ({0, 2}: a
 * flip with one in common) */
static void make_run(rc_results *r, bool moe, int disjoint, int partial)
{
    memset(r, 0, sizeof *r);
    r->n_seq = S;
    r->gen_len = G;
    r->n_lens = 1;
    r->lens = calloc(1, sizeof *r->lens);
    r->gen_valid = calloc(S, sizeof *r->gen_valid);
    r->logprob_gen = calloc(S * G, sizeof *r->logprob_gen);
    ck_assert(r->lens && r->gen_valid && r->logprob_gen);
    r->lens[0].len = G;
    r->lens[0].logprob_fwd = calloc(S * G, sizeof(float));
    ck_assert(r->lens[0].logprob_fwd);
    for (int q = 0; q < S; q++) {
        r->gen_valid[q] = G;
        for (int t = 0; t < G; t++)
            r->logprob_gen[q * G + t] = r->lens[0].logprob_fwd[q * G + t] = -1.0f;
    }
    snprintf(r->dtype, sizeof r->dtype, "bf16");
    if (moe) {
        ck_assert(rc_routing_create(S, G, LM, K, 6, &r->routing) == RC_OK);
        r->routing->layer[0] = 1;
        r->routing->layer[1] = 3;
        for (int i = 0; i < S * G; i++)
            for (int m = 0; m < LM; m++)
                for (int side = 0; side < 2; side++) {
                    int16_t *e = r->routing->experts[side] + (i * LM + m) * K;
                    e[0] = 0;
                    e[1] = 1;
                    if (side == 1 && m == 1 && i < disjoint) {
                        e[0] = 2;
                        e[1] = 3;
                    } else if (side == 1 && m == 0 && i >= disjoint && i < disjoint + partial) {
                        e[1] = 2;
                    }
                    r->routing->weights[side][(i * LM + m) * K] = r->routing->weights[side][(i * LM + m) * K + 1] =
                        0.5f;
                }
        rc_routing_compute(r->routing, r->logprob_gen, r->lens[0].logprob_fwd, G);
    }
    ck_assert_msg(rc_compute_stats(r) == RC_OK, "%s", rc_last_error());
}

/* miles' share from the record: per layer the tokens whose two sets share no expert, the largest over the
 * layers, over the tokens */
static double miles_share(const rc_routing *rt)
{
    int64_t worst = 0, tokens = 0;
    for (int m = 0; m < LM; m++) {
        int64_t none = 0;
        tokens = 0;
        for (int i = 0; i < S * G; i++) {
            const int16_t *a = rt->experts[0] + (i * LM + m) * K, *b = rt->experts[1] + (i * LM + m) * K;
            if (a[0] < 0 || b[0] < 0)
                continue;
            tokens++;
            int common = 0;
            for (int x = 0; x < K; x++)
                for (int y = 0; y < K; y++)
                    common += a[x] == b[y];
            none += common == 0;
        }
        worst = none > worst ? none : worst;
    }
    return (double)worst / (double)tokens;
}

static bool eval(const rc_results *r, const char *above, int fail_on, char *failed, size_t fn)
{
    rc_gate g[RC_MAX_GATES];
    int n = 0;
    if (above)
        ck_assert_msg(rc_gates_parse(above, g, &n) == RC_OK, "%s", rc_last_error());
    char rules[256];
    return rc_gates_eval(g, n, fail_on, r, rules, sizeof rules, failed, fn, NULL);
}

/* the routing line and --fail-on / --fail-above on both sides of miles' 1% */
START_TEST(test_routing_line_gates)
{
    int seen[2] = {0, 0};
    for (int disjoint = 0; disjoint <= 4; disjoint++) {
        rc_results r;
        make_run(&r, true, disjoint, 3);
        const double share = miles_share(r.routing);
        const bool warn = share > RC_ROUTING_MILES_MAX;
        seen[warn]++;
        const rc_verdict *v = &r.verdict;
        for (int o = 0; o < RC_N_OBJECTIVES; o++) /* the other lines: every ratio is 1 */
            if (o != RC_OBJ_ROUTING)
                ck_assert_int_eq(v->level[o], RC_VERDICT_OK);
        ck_assert_int_eq(v->level[RC_OBJ_ROUTING], warn ? RC_VERDICT_WARN : RC_VERDICT_OK);
        ck_assert_double_eq(r.lens[0].st.rt.miles_mismatch, share);
        ck_assert_int_eq(r.lens[0].st.rt.tokens_flip, disjoint + 3);
        ck_assert_int_eq(r.lens[0].st.rt.miles_layer, disjoint ? 3 : 1);
        ck_assert_int_eq(r.lens[0].st.rt.first_layer, 1); /* the partial flips are in decoder layer 1 */
        ck_assert_msg(strstr(v->reason[RC_OBJ_ROUTING], "miles' R3 check"), "%s", v->reason[RC_OBJ_ROUTING]);
        char failed[512];
        ck_assert(eval(&r, NULL, RC_VERDICT_WARN, failed, sizeof failed) == warn);
        ck_assert(!warn || strstr(failed, "routing WARN"));
        ck_assert(!eval(&r, NULL, RC_VERDICT_FAIL, failed, sizeof failed)); /* the line is at most WARN */
        ck_assert(eval(&r, "verdict.routing=0", 0, failed, sizeof failed) == warn);
        ck_assert(eval(&r, "verdict=0", 0, failed, sizeof failed) == warn);
        char g[96];
        snprintf(g, sizeof g, "routing_miles_mismatch=%.17g", RC_ROUTING_MILES_MAX);
        ck_assert(eval(&r, g, 0, failed, sizeof failed) == warn);
        const double flips = (double)(disjoint + 3) / (S * G);
        snprintf(g, sizeof g, "routing_share_flip=%.17g", flips);
        ck_assert(!eval(&r, g, 0, failed, sizeof failed));
        snprintf(g, sizeof g, "routing_share_flip=%.17g", nextafter(flips, 0.0));
        ck_assert(eval(&r, g, 0, failed, sizeof failed));
        rc_results_free(&r);
    }
    ck_assert_int_gt(seen[0], 0); /* both sides of the threshold */
    ck_assert_int_gt(seen[1], 0);
}
END_TEST

/* a dense run: no routing line, so --fail-on and verdict.routing ignore it; a routing metric fails, naming why */
START_TEST(test_dense_no_routing_line)
{
    rc_results r;
    make_run(&r, false, 0, 0);
    ck_assert_int_eq(r.verdict.level[RC_OBJ_ROUTING], RC_VERDICT_NONE);
    ck_assert(!r.lens[0].st.routing);
    char failed[512];
    ck_assert(!eval(&r, NULL, RC_VERDICT_WARN, failed, sizeof failed));
    ck_assert(!eval(&r, "verdict.routing=0", 0, failed, sizeof failed));
    ck_assert(eval(&r, "routing_share_flip=1", 0, failed, sizeof failed));
    ck_assert_msg(strstr(failed, "no routing record at L=50"), "%s", failed);
    rc_results_free(&r);
}
END_TEST

/* --fail-above and --fail-on's parse errors name the option */
START_TEST(test_gate_parse)
{
    rc_gate g[RC_MAX_GATES];
    int n, on = 0;
    ck_assert(rc_gates_parse("k3=0.01,verdict.routing=0,routing_miles_mismatch=0.01", g, &n) == RC_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(g[1].metric, "verdict.routing");
    ck_assert(rc_gates_parse("verdict.nope=1", g, &n) == RC_ERR_USAGE);
    ck_assert(rc_gates_parse_fail_on("warn", &on) == RC_OK && on == RC_VERDICT_WARN);
    ck_assert(rc_gates_parse_fail_on("error", &on) == RC_ERR_USAGE);
    ck_assert(strstr(rc_last_error(), "--fail-on"));
    rc_clear_error();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");
    tcase_add_test(tc, test_routing_line_gates);
    tcase_add_test(tc, test_dense_no_routing_line);
    tcase_add_test(tc, test_gate_parse);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return rc_test_run(suite()); }
