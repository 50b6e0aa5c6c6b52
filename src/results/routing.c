/* The routing record's storage, statistics and printing (routing.h). */
#include "routing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void rc_routing_free(rc_routing *r)
{
    if (!r)
        return;
    free(r->layer);
    for (int s = 0; s < 2; s++) {
        free(r->experts[s]);
        free(r->weights[s]);
    }
    free(r->layer_flips);
    free(r->layer_miles);
    free(r->layer_first);
    free(r->token_flips);
    free(r);
}

rc_status rc_routing_create(int64_t S, int64_t G, int64_t Lm, int64_t k, int64_t E, rc_routing **out)
{
    *out = NULL;
    int64_t n, tok;
    if (Lm < 1 || k < 1 || E < 1 || E > INT16_MAX || !rc_mul_i64(S, G, &tok) || !rc_mul_i64(tok, Lm, &n) ||
        !rc_mul_i64(n, k, &n))
        return rc_errorf(RC_ERR_NOMEM, "routing record: %lld x %lld tokens, %lld layers, top %lld of %lld experts",
                         (long long)S, (long long)G, (long long)Lm, (long long)k, (long long)E);
    rc_routing *r = calloc(1, sizeof *r);
    if (!r)
        return rc_errorf(RC_ERR_NOMEM, "out of memory (routing record)");
    *r = (rc_routing){.n_seq = S, .gen_len = G, .n_layers = Lm, .top_k = k, .n_experts = E};
    rc_status st = rc_calloc((void **)&r->layer, Lm, sizeof *r->layer, "routing record");
    for (int s = 0; s < 2 && st == RC_OK; s++) {
        st = rc_calloc((void **)&r->experts[s], n, sizeof *r->experts[s], "routing record");
        if (st == RC_OK)
            st = rc_calloc((void **)&r->weights[s], n, sizeof *r->weights[s], "routing record");
        for (int64_t i = 0; st == RC_OK && i < n; i++) {
            r->experts[s][i] = -1;
            r->weights[s][i] = NAN;
        }
    }
    if (st == RC_OK)
        st = rc_calloc((void **)&r->layer_flips, Lm, sizeof(int64_t), "routing record");
    if (st == RC_OK)
        st = rc_calloc((void **)&r->layer_miles, Lm, sizeof(int64_t), "routing record");
    if (st == RC_OK)
        st = rc_calloc((void **)&r->layer_first, Lm, sizeof(int64_t), "routing record");
    if (st == RC_OK)
        st = rc_calloc((void **)&r->token_flips, tok, sizeof(int32_t), "routing record");
    if (st != RC_OK) {
        rc_routing_free(r);
        return st;
    }
    *out = r;
    return RC_OK;
}

/* experts of both sides at one token and layer in common: the entries of a
 * that b holds. With `seen` (E + 1 stamps, expert e at e + 1, -1 at 0; all
 * below `stamp`) in O(k): a file may declare top_k up to 32767, and the
 * pairwise comparison is O(k^2) per token and layer (minutes for a
 * 0.5 MB file); without it (out of memory), pairwise. */
static int64_t overlap(const int16_t *a, const int16_t *b, int64_t k, int64_t *seen, int64_t E, int64_t stamp)
{
    int64_t n = 0;
    bool inr = seen != NULL;
    for (int64_t j = 0; inr && j < k; j++)
        inr = b[j] >= -1 && b[j] < E;
    for (int64_t i = 0; inr && i < k; i++)
        inr = a[i] >= -1 && a[i] < E;
    if (inr) {
        for (int64_t j = 0; j < k; j++)
            seen[b[j] + 1] = stamp;
        for (int64_t i = 0; i < k; i++)
            n += seen[a[i] + 1] == stamp;
        return n;
    }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            if (a[i] == b[j]) {
                n++;
                break;
            }
    return n;
}

/* the statistics over the tokens t < tmax into st; per layer into lf (flips), lm (no expert in
 * common), lfirst (first flips), each [n_layers] and zeroed here; token_flips [n_seq, gen_len] or NULL */
static void routing_stats(const rc_routing *r, const float *gen, const float *fwd, int64_t len, int64_t tmax,
                          rc_routing_stats *st, int64_t *lf, int64_t *lm, int64_t *lfirst, int32_t *token_flips)
{
    const int64_t S = r->n_seq, G = r->gen_len, Lm = r->n_layers, k = r->top_k;
    memset(st, 0, sizeof *st);
    memset(lf, 0, (size_t)Lm * sizeof(int64_t));
    memset(lm, 0, (size_t)Lm * sizeof(int64_t));
    memset(lfirst, 0, (size_t)Lm * sizeof(int64_t));
    st->first_layer = st->miles_layer = -1;
    st->len = len;
    int64_t pairs = 0, flips = 0, n_flip_lr = 0, n_same_lr = 0, first_m = -1;
    double ov = 0.0, lr_flip = 0.0, lr_same = 0.0;
    int64_t *seen = calloc((size_t)r->n_experts + 1, sizeof *seen), stamp = 0;
    for (int64_t s = 0; s < S; s++)
        for (int64_t t = 0; t < G; t++) {
            const int16_t *a = r->experts[0] + (s * G + t) * Lm * k, *b = r->experts[1] + (s * G + t) * Lm * k;
            if (token_flips)
                token_flips[s * G + t] = -1;
            if (t >= tmax || a[0] < 0 || b[0] < 0)
                continue;
            int32_t nf = 0;
            for (int64_t m = 0; m < Lm; m++) {
                const int64_t o = overlap(a + m * k, b + m * k, k, seen, r->n_experts, ++stamp);
                ov += (double)o / (double)k;
                if (o < k) {
                    if (nf == 0) {
                        lfirst[m]++;
                        first_m = first_m < 0 || m < first_m ? m : first_m;
                    }
                    nf++;
                    lf[m]++;
                }
                if (o == 0)
                    lm[m]++;
            }
            pairs += Lm;
            flips += nf;
            if (token_flips)
                token_flips[s * G + t] = nf;
            st->tokens++;
            st->tokens_flip += nf > 0;
            const double lr = t < len ? (double)fwd[s * len + t] - (double)gen[s * G + t] : NAN;
            if (isnan(lr))
                continue;
            if (nf > 0) {
                lr_flip += fabs(lr);
                n_flip_lr++;
            } else {
                lr_same += fabs(lr);
                n_same_lr++;
            }
        }
    free(seen);
    st->share_flip = st->tokens ? (double)st->tokens_flip / (double)st->tokens : NAN;
    st->decision_share = pairs ? (double)flips / (double)pairs : NAN;
    st->mean_overlap = pairs ? ov / (double)pairs : NAN;
    st->miles_mismatch = st->tokens ? 0.0 : NAN;
    for (int64_t m = 0; m < Lm && st->tokens; m++) {
        const double f = (double)lm[m] / (double)st->tokens;
        if (st->miles_layer < 0 || f > st->miles_mismatch) {
            st->miles_mismatch = f;
            st->miles_layer = r->layer[m];
        }
    }
    st->first_layer = first_m >= 0 ? r->layer[first_m] : -1;
    st->abs_lr_flip = n_flip_lr ? lr_flip / (double)n_flip_lr : NAN;
    st->abs_lr_same = n_same_lr ? lr_same / (double)n_same_lr : NAN;
    st->share_abs_lr_flip = lr_flip + lr_same > 0.0 ? lr_flip / (lr_flip + lr_same) : NAN;
}

void rc_routing_compute(rc_routing *r, const float *gen, const float *fwd, int64_t len)
{
    routing_stats(r, gen, fwd, len, r->gen_len, &r->st, r->layer_flips, r->layer_miles, r->layer_first,
                  r->token_flips);
}

rc_status rc_routing_len_stats(const rc_routing *r, const float *gen, const float *fwd, int64_t len,
                               rc_routing_stats *st)
{
    int64_t *w = NULL;
    RC_TRY(rc_calloc((void **)&w, 3 * r->n_layers, sizeof *w, "routing statistics"));
    routing_stats(r, gen, fwd, len, len, st, w, w + r->n_layers, w + 2 * r->n_layers, NULL);
    free(w);
    return RC_OK;
}

rc_status rc_routing_compare(const rc_routing *a, const rc_routing *b, int side, int64_t *tokens, int64_t *differ)
{
    *tokens = *differ = 0;
    if (side < 0 || side > 1)
        return rc_errorf(RC_ERR_INTERNAL, "rc_routing_compare: side %d", side);
    if (a->n_seq != b->n_seq || a->gen_len != b->gen_len || a->n_layers != b->n_layers || a->top_k != b->top_k ||
        a->n_experts != b->n_experts || memcmp(a->layer, b->layer, (size_t)a->n_layers * sizeof *a->layer) != 0)
        return rc_errorf(RC_ERR_USAGE,
                         "the routing records differ in shape (%lld MoE layers, top %lld of %lld vs %lld, top %lld "
                         "of %lld)",
                         (long long)a->n_layers, (long long)a->top_k, (long long)a->n_experts, (long long)b->n_layers,
                         (long long)b->top_k, (long long)b->n_experts);
    const int64_t Lm = a->n_layers, k = a->top_k, n = a->n_seq * a->gen_len;
    int64_t *seen = calloc((size_t)a->n_experts + 1, sizeof *seen), stamp = 0;
    for (int64_t i = 0; i < n; i++) {
        const int16_t *x = a->experts[side] + i * Lm * k, *y = b->experts[side] + i * Lm * k;
        if (x[0] < 0 || y[0] < 0)
            continue;
        (*tokens)++;
        for (int64_t m = 0; m < Lm; m++)
            if (overlap(x + m * k, y + m * k, k, seen, a->n_experts, ++stamp) < k) {
                (*differ)++;
                break;
            }
    }
    free(seen);
    return RC_OK;
}

const char *rc_routing_verdict(const rc_routing *r)
{
    return r->st.miles_mismatch > RC_ROUTING_MILES_MAX ? "WARN" : "OK";
}

void rc_routing_print(const rc_routing *r)
{
    const rc_routing_stats *st = &r->st;
    printf("\nrouting (docs/routing.md): %lld MoE layers, top %lld of %lld experts, %lld tokens\n",
           (long long)r->n_layers, (long long)r->top_k, (long long)r->n_experts, (long long)st->tokens);
    printf("  tokens with a flip in any layer %lld (%.4g%%), decisions flipped %.4g%%, mean top-k overlap %.6g\n",
           (long long)st->tokens_flip, 100.0 * st->share_flip, 100.0 * st->decision_share, st->mean_overlap);
    if (st->first_layer >= 0)
        printf("  first layer where the sides part: %lld\n", (long long)st->first_layer);
    else
        printf("  the sides pick the same experts everywhere\n");
    printf("  %6s %10s %10s %10s\n", "layer", "flips", "first", "no common");
    for (int64_t m = 0; m < r->n_layers; m++)
        printf("  %6d %10lld %10lld %10lld\n", r->layer[m], (long long)r->layer_flips[m],
               (long long)r->layer_first[m], (long long)r->layer_miles[m]);
    printf("  |log r| (L=%lld): mean %.4g with a flip, %.4g without; tokens with a flip hold %.4g%% of the sum\n",
           (long long)st->len, st->abs_lr_flip, st->abs_lr_same, 100.0 * st->share_abs_lr_flip);
    printf("  miles' R3 check: %.4g%% of a layer's tokens share no expert (layer %lld), at most %g%%: the "
           "verdict's routing line\n",
           100.0 * st->miles_mismatch, (long long)st->miles_layer, 100.0 * RC_ROUTING_MILES_MAX);
}

/* "key": v (null when not finite), then ", " when comma: print.h's rc_json_num (print.c includes routing.h,
 * so this module does not include print.h) */
static void json_num(const char *key, double v, bool comma)
{
    if (isfinite(v))
        printf("\"%s\": %.17g%s", key, v, comma ? ", " : "");
    else
        printf("\"%s\": null%s", key, comma ? ", " : "");
}

static void i64_array(const char *key, const int64_t *v, int64_t n)
{
    printf(", \"%s\": [", key);
    for (int64_t i = 0; i < n; i++)
        printf("%s%lld", i ? ", " : "", (long long)v[i]);
    putchar(']');
}

void rc_routing_print_json(const rc_routing *r)
{
    const rc_routing_stats *st = &r->st;
    printf(", \"routing\": {\"moe_layers\": %lld, \"top_k\": %lld, \"experts\": %lld, \"tokens\": %lld, "
           "\"tokens_flip\": %lld, ",
           (long long)r->n_layers, (long long)r->top_k, (long long)r->n_experts, (long long)st->tokens,
           (long long)st->tokens_flip);
    json_num("share_flip", st->share_flip, true);
    json_num("decision_share", st->decision_share, true);
    json_num("mean_overlap", st->mean_overlap, true);
    json_num("miles_mismatch", st->miles_mismatch, true);
    printf("\"miles_layer\": %lld, \"miles_max\": %g, \"verdict\": \"%s\", \"first_layer\": %lld, \"len\": %lld, ",
           (long long)st->miles_layer, RC_ROUTING_MILES_MAX, rc_routing_verdict(r), (long long)st->first_layer,
           (long long)st->len);
    json_num("abs_log_ratio_flip", st->abs_lr_flip, true);
    json_num("abs_log_ratio_same", st->abs_lr_same, true);
    json_num("share_abs_log_ratio_flip", st->share_abs_lr_flip, false);
    printf(", \"layers\": [");
    for (int64_t m = 0; m < r->n_layers; m++)
        printf("%s%d", m ? ", " : "", r->layer[m]);
    putchar(']');
    i64_array("layer_flips", r->layer_flips, r->n_layers);
    i64_array("layer_first", r->layer_first, r->n_layers);
    i64_array("layer_no_common", r->layer_miles, r->n_layers);
    putchar('}');
}
