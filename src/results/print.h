/* The results printed to a stream: the run's table and its JSON object (with
 * the sweep's rows when there are some), the completions with their
 * per-token ratios, and the escapes every printed string goes through. */
#ifndef RC_PRINT_H
#define RC_PRINT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "results.h"
#include "tokenizer.h"

/* s with control characters and bytes that are not UTF-8 shown as \xNN, so
 * that a file name or a string read from a file cannot drive the terminal */
void rc_term_str(FILE *f, const char *s);
/* s as a JSON string literal; bytes that are not UTF-8 become U+FFFD */
void rc_json_str(FILE *f, const char *s);
/* "key": v (null when not finite), then ", " when comma */
void rc_json_num(FILE *f, const char *key, double v, bool comma);

/* the completions to show (--show / --show-worst): sequences idx[n], or none */
typedef struct {
    const rc_tokenizer *tok;
    const int64_t *idx; /* sequences to show, or NULL */
    int64_t n;
} rc_show_sel;

/* gates: -1 no --fail-above, 0 every gate holds, 1 one failed */
void rc_print_json(const rc_results *r, const char *out_path, int gates, const rc_show_sel *show);
/* by: the strata tables to print (bit RC_STRATA_*) */
void rc_print_table(const rc_results *r, const char *out_path, int gates, unsigned by);
/* --show N / --show-worst N: the first N sequences, or the N with the
 * largest |S| at the longest length, largest first (malloc'd, NULL on OOM) */
int64_t *rc_show_pick(const rc_results *r, int64_t first, int64_t worst, int64_t *n_out);
void rc_print_show(const rc_results *r, const rc_tokenizer *tok, const int64_t *idx, int64_t n, bool worst_first);

#endif
