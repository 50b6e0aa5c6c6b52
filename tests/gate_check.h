/* The gate (--fail-on, --fail-above) checked against the JSON of the same
 * command without one: exit 3 exactly when a verdict line reaches the level
 * or a metric exceeds its limit, 0 otherwise; the JSON's "gates" and
 * "gate_failed" say the same. Included by the tests that run the CLI
 * (test_cli.c: run, test_score.c: score), each with its own runner. */
#ifndef RC_GATE_CHECK_H
#define RC_GATE_CHECK_H

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* runf: `ratiocheck ARGS`'s exit code, its stdout then in out */
typedef int (*rc_gate_run_fn)(const char *args);

static int rc_gate_level(const json_t *verdict, const char *obj)
{
    const char *l = json_string_value(json_object_get(json_object_get(verdict, obj), "level"));
    ck_assert_ptr_nonnull(l);
    return !strcmp(l, "OK") ? 0 : !strcmp(l, "WARN") ? 1 : !strcmp(l, "FAIL") ? 2 : -1;
}

/* one gated command (with --json): its exit code against fail; "gates" and "gate_failed" too */
static void rc_gate_expect(rc_gate_run_fn runf, const char *out, const char *base, const char *gate, bool fail)
{
    char a[8192];
    snprintf(a, sizeof a, "%s %s --json", base, gate);
    ck_assert_msg(runf(a) == (fail ? 3 : 0), "%s: want exit %d", a, fail ? 3 : 0);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", a, e.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "gates")), fail ? "FAIL" : "PASS");
    const char *failed = json_string_value(json_object_get(j, "gate_failed"));
    ck_assert_ptr_nonnull(failed);
    ck_assert_msg((failed[0] != '\0') == fail, "%s: gate_failed '%s'", a, failed);
    json_decref(j);
}

/* base: a command without --json or a gate. seen[w]++ for its worst verdict level w.
 * metrics: also --fail-above on metrics of each length (the largest over the
 * lengths holds, just below it fails). */
static void rc_gate_check(rc_gate_run_fn runf, const char *out, const char *base, int seen[3], bool metrics_too)
{
    char a[8192], g[256];
    snprintf(a, sizeof a, "%s --json", base);
    ck_assert_int_eq(runf(a), 0);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", a, e.text);
    ck_assert_ptr_null(json_object_get(j, "gates"));
    const json_t *v = json_object_get(j, "verdict");
    static const char *const objs[] = {"token_ppo", "sequence_is", "gspo"};
    int worst = 0, lv[3];
    for (int o = 0; o < 3; o++) {
        lv[o] = rc_gate_level(v, objs[o]);
        ck_assert_int_ge(lv[o], 0);
        worst = lv[o] > worst ? lv[o] : worst;
    }
    seen[worst]++;
    /* the largest value over the lengths of metrics --fail-above did not know before, and a correction */
    static const char *const metrics[] = {"seq_frac_outside_band", "mean", "chi2_token"};
    double mx[3];
    for (int m = 0; m < 3; m++) {
        mx[m] = -INFINITY;
        const json_t *lens = json_object_get(j, "lens");
        ck_assert_int_gt((int)json_array_size(lens), 0);
        for (size_t i = 0; i < json_array_size(lens); i++) {
            const json_t *x = json_object_get(json_array_get(lens, i), metrics[m]);
            ck_assert_msg(json_is_number(x), "%s: %s is not a number", a, metrics[m]);
            mx[m] = fmax(mx[m], json_number_value(x));
        }
    }
    json_decref(j);
    rc_gate_expect(runf, out, base, "--fail-on warn", worst >= 1);
    rc_gate_expect(runf, out, base, "--fail-on fail", worst >= 2);
    snprintf(g, sizeof g, "--fail-above verdict=%d", worst);
    rc_gate_expect(runf, out, base, g, false);
    snprintf(g, sizeof g, "--fail-above verdict=%g", worst - 0.5);
    rc_gate_expect(runf, out, base, g, true);
    if (!metrics_too)
        return;
    snprintf(g, sizeof g, "--fail-above verdict.gspo=%d", lv[2]);
    rc_gate_expect(runf, out, base, g, false);
    snprintf(g, sizeof g, "--fail-above verdict.token_ppo=%g --fail-on fail", lv[0] - 0.5);
    rc_gate_expect(runf, out, base, g, true);
    for (int m = 0; m < 3; m++) {
        snprintf(g, sizeof g, "--fail-above %s=%.17g", metrics[m], mx[m]); /* at the limit: holds */
        rc_gate_expect(runf, out, base, g, false);
        snprintf(g, sizeof g, "--fail-above %s=%.17g", metrics[m], mx[m] - fmax(fabs(mx[m]) * 1e-9, 1e-12));
        rc_gate_expect(runf, out, base, g, true);
    }
}

#endif
