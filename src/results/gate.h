/* The gate (docs/verdict.md, docs/cli.md): --fail-above METRIC=LIMIT on a
 * statistic of each length or on the verdict, and --fail-on warn|fail on the
 * verdict's lines (every row of rc_objectives, the routing line of a MoE run
 * included). Evaluated on a run's results; the CLI exits 3 when it fails. */
#ifndef RC_GATE_H
#define RC_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "results.h"
#include "status.h"

#define RC_MAX_GATES 16
typedef struct {
    char metric[48];
    double limit;
} rc_gate;

/* --fail-above's named metrics (the rc_len_fields rows with a gate name), ", "-joined into buf */
void rc_gate_names(char *buf, size_t n);
/* a --fail-above metric of the whole run: "verdict" (the worst line's level:
 * 0 OK, 1 WARN, 2 FAIL) -> RC_N_OBJECTIVES, or "verdict.OBJECTIVE" -> its
 * index; -1 for a metric of each length */
int rc_gate_verdict_objective(const char *metric);
/* metric's value: of length st for a metric of each length, of the verdict v
 * for a verdict metric (a line that does not apply to the run: -1) */
double rc_gate_value(const rc_verdict *v, const rc_len_stats *st, const char *metric);
/* --fail-above's list METRIC=VALUE[,...] into g[0..*n) (at most RC_MAX_GATES); RC_ERR_USAGE naming what is
 * wrong */
rc_status rc_gates_parse(const char *v, rc_gate *g, int *n);
/* --fail-on's level: "warn" or "fail" -> RC_VERDICT_WARN / RC_VERDICT_FAIL */
rc_status rc_gates_parse_fail_on(const char *v, int *fail_on);
/* Evaluate gates g[0..n) and fail_on (0: none, else the lowest level that
 * fails) on res: true when one fails. rules: the rules as given ("" without a
 * gate), failed: what failed ("; "-separated, cut at fn); err: one line per
 * failure there (NULL: none). A metric of each length fails where it
 * exceeds its limit or is NaN; a routing metric fails on a length without a
 * routing record. */
bool rc_gates_eval(const rc_gate *g, int n, int fail_on, const rc_results *res, char *rules, size_t rn,
                   char *failed, size_t fn, FILE *err);

#endif
