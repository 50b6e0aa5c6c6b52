/* The gate: --fail-above and --fail-on on a run's results (gate.h). */
#include "gate.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "util.h"

/* --fail-above's metrics (larger is worse): the rows of rc_len_fields with a gate name */
void rc_gate_names(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < rc_n_len_fields && k < n; i++)
        if (rc_len_fields[i].gate) {
            const int w = snprintf(buf + k, n - k, "%s%s", k ? ", " : "", rc_len_fields[i].gate);
            k += w > 0 ? (size_t)w : 0;
        }
}

int rc_gate_verdict_objective(const char *metric)
{
    if (!strcmp(metric, "verdict"))
        return RC_N_OBJECTIVES;
    if (strncmp(metric, "verdict.", 8))
        return -1;
    for (int o = 0; o < RC_N_OBJECTIVES; o++)
        if (!strcmp(metric + 8, rc_objectives[o].name))
            return o;
    return -1;
}

double rc_gate_value(const rc_verdict *v, const rc_len_stats *st, const char *metric)
{
    const int o = rc_gate_verdict_objective(metric);
    if (o == RC_N_OBJECTIVES) {
        int worst = RC_VERDICT_OK;
        for (int k = 0; k < RC_N_OBJECTIVES; k++)
            worst = (int)v->level[k] > worst ? (int)v->level[k] : worst;
        return worst;
    }
    if (o >= 0)
        return v->level[o];
    const rc_len_field *f = rc_len_gate(metric);
    if (f)
        return rc_len_value(st, f);
    const rc_corr_stat *c = rc_corr_gate(metric);
    return c ? rc_corr_value(&st->corr, c) : NAN;
}

/* append "; " and the printf text to buf (cut at its end) */
__attribute__((format(printf, 3, 4))) static void append(char *buf, size_t n, const char *fmt, ...)
{
    size_t k = strlen(buf);
    if (k + 3 >= n)
        return;
    if (k) {
        memcpy(buf + k, "; ", 3);
        k += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
}

bool rc_gates_eval(const rc_gate *gates, int n_gates, int fail_on, const rc_results *res, char *rules, size_t rn,
                   char *failed, size_t fn, FILE *err)
{
    bool fail = false;
    rules[0] = failed[0] = '\0';
    if (n_gates == 0 && fail_on == 0)
        return false;
    for (int g = 0; g < n_gates; g++) {
        size_t k = strlen(rules);
        snprintf(rules + k, rn - k, "%s%s=%.17g", g ? "," : "--fail-above ", gates[g].metric, gates[g].limit);
    }
    if (fail_on) {
        size_t k = strlen(rules);
        snprintf(rules + k, rn - k, "%s--fail-on %s", k ? " " : "", fail_on == RC_VERDICT_WARN ? "warn" : "fail");
    }
    const rc_verdict *v = &res->verdict;
    for (int g = 0; g < n_gates; g++) {
        const rc_gate *gt = &gates[g];
        if (rc_gate_verdict_objective(gt->metric) >= 0) { /* once: the verdict is the run's */
            const double x = rc_gate_value(v, NULL, gt->metric);
            if (!(x <= gt->limit)) {
                fail = true;
                append(failed, fn, "%s = %g exceeds %.6g", gt->metric, x, gt->limit);
                if (err)
                    fprintf(err, "ratiocheck: %s = %g exceeds %.6g (0 OK, 1 WARN, 2 FAIL)\n", gt->metric, x,
                            gt->limit);
            }
            continue;
        }
        const rc_len_field *f = rc_len_gate(gt->metric);
        for (int i = 0; i < res->n_lens; i++) {
            if (f && (f->where & RC_LF_ROUTING) && !res->lens[i].st.routing) { /* a dense model: no record */
                fail = true;
                append(failed, fn, "%s: no routing record at L=%lld", gt->metric, (long long)res->lens[i].len);
                if (err)
                    fprintf(err, "ratiocheck: --fail-above %s: the run has no routing record at L=%lld (a "
                            "mixture-of-experts model has one)\n", gt->metric, (long long)res->lens[i].len);
                continue;
            }
            const double x = rc_gate_value(v, &res->lens[i].st, gt->metric);
            if (!(x <= gt->limit)) { /* NaN fails too */
                fail = true;
                append(failed, fn, "%s = %.6g exceeds %.6g at L=%lld", gt->metric, x, gt->limit,
                       (long long)res->lens[i].len);
                if (err)
                    fprintf(err, "ratiocheck: %s = %.6g exceeds %.6g at L=%lld\n", gt->metric, x, gt->limit,
                            (long long)res->lens[i].len);
            }
        }
    }
    for (int o = 0; fail_on && o < RC_N_OBJECTIVES; o++)
        if ((int)v->level[o] >= fail_on) {
            fail = true;
            append(failed, fn, "%s %s", rc_objectives[o].name, rc_verdict_name(v->level[o]));
            if (err)
                fprintf(err, "ratiocheck: --fail-on %s: %s is %s: %s\n", fail_on == RC_VERDICT_WARN ? "warn" : "fail",
                        rc_objectives[o].name, rc_verdict_name(v->level[o]), v->reason[o]);
        }
    return fail;
}

rc_status rc_gates_parse(const char *v, rc_gate *g, int *n)
{
    *n = 0;
    const char *p = v;
    if (!*p)
        return rc_errorf(RC_ERR_USAGE, "--fail-above: expected METRIC=VALUE[,...], got an empty list");
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || *n == RC_MAX_GATES)
            return rc_errorf(RC_ERR_USAGE, "--fail-above: expected METRIC=VALUE[,...], got '%s'", v);
        size_t ml = (size_t)(eq - p);
        if (ml >= sizeof g[0].metric)
            return rc_errorf(RC_ERR_USAGE, "--fail-above: unknown metric '%.*s'", (int)(ml > 40 ? 40 : ml), p);
        memcpy(g[*n].metric, p, ml);
        g[*n].metric[ml] = '\0';
        if (!rc_len_gate(g[*n].metric) && !rc_corr_gate(g[*n].metric) && rc_gate_verdict_objective(g[*n].metric) < 0) {
            char known[512];
            rc_gate_names(known, sizeof known);
            return rc_errorf(RC_ERR_USAGE,
                             "--fail-above: unknown metric '%s' (known: %s, every other number of --json's \"lens\" "
                             "entries, verdict, verdict.OBJECTIVE)",
                             g[*n].metric, known);
        }
        char num[64];
        size_t vl = len - ml - 1;
        if (vl == 0 || vl >= sizeof num)
            return rc_errorf(RC_ERR_USAGE, "--fail-above: bad value for %s", g[*n].metric);
        memcpy(num, eq + 1, vl);
        num[vl] = '\0';
        RC_TRY(rc_parse_f64("--fail-above", num, -1e300, 1e300, &g[*n].limit));
        (*n)++;
        if (!end)
            break;
        p = end + 1; /* an empty item after a comma fails above */
    }
    return RC_OK;
}


rc_status rc_gates_parse_fail_on(const char *v, int *fail_on)
{
    if (!strcmp(v, "warn"))
        *fail_on = RC_VERDICT_WARN;
    else if (!strcmp(v, "fail"))
        *fail_on = RC_VERDICT_FAIL;
    else
        return rc_errorf(RC_ERR_USAGE, "--fail-on: expected warn or fail, got '%s'", v);
    return RC_OK;
}
