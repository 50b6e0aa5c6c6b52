/* The routing recorder (routing_rec.h). */
#include "routing_rec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "routing.h"
#include "util.h"

struct rc_routing_rec {
    int64_t S, T, Lm, k, E, n_layers;
    int64_t *moe_index;    /* [n_layers] the MoE index of a decoder layer, -1 */
    int32_t *layer;        /* [Lm] */
    int16_t *experts[2];   /* [S][T][Lm][k], -1 where nothing was recorded */
    float *weights[2];
    int side;
    int64_t seq0;
};

void rc_routing_rec_free(rc_routing_rec *r)
{
    if (!r)
        return;
    free(r->moe_index);
    free(r->layer);
    for (int s = 0; s < 2; s++) {
        free(r->experts[s]);
        free(r->weights[s]);
    }
    free(r);
}

rc_status rc_routing_rec_create(const rc_config *c, int64_t S, int64_t T, rc_routing_rec **out)
{
    *out = NULL;
    int64_t Lm = 0;
    for (int64_t l = 0; l < c->n_layers; l++)
        Lm += rc_layer_is_moe(c, l);
    if (Lm == 0 || c->n_experts < 1)
        return RC_OK;
    if (c->n_experts > INT16_MAX)
        return rc_errorf(RC_ERR_UNSUPPORTED, "routing record: %lld experts (at most %d)", (long long)c->n_experts,
                         INT16_MAX);
    int64_t n;
    if (!rc_mul_i64(S, T, &n) || !rc_mul_i64(n, Lm, &n) || !rc_mul_i64(n, c->top_k, &n))
        return rc_errorf(RC_ERR_NOMEM, "routing record too large");
    rc_routing_rec *r = calloc(1, sizeof *r);
    if (!r)
        return rc_errorf(RC_ERR_NOMEM, "out of memory (routing record)");
    *r = (rc_routing_rec){.S = S, .T = T, .Lm = Lm, .k = c->top_k, .E = c->n_experts, .n_layers = c->n_layers};
    rc_status st = rc_calloc((void **)&r->moe_index, c->n_layers, sizeof *r->moe_index, "routing record");
    if (st == RC_OK)
        st = rc_calloc((void **)&r->layer, Lm, sizeof *r->layer, "routing record");
    for (int s = 0; s < 2 && st == RC_OK; s++) {
        st = rc_calloc((void **)&r->experts[s], n, sizeof *r->experts[s], "routing record");
        if (st == RC_OK)
            st = rc_calloc((void **)&r->weights[s], n, sizeof *r->weights[s], "routing record");
        for (int64_t i = 0; st == RC_OK && i < n; i++) {
            r->experts[s][i] = -1;
            r->weights[s][i] = NAN;
        }
    }
    if (st != RC_OK) {
        rc_routing_rec_free(r);
        return st;
    }
    for (int64_t l = 0, m = 0; l < c->n_layers; l++) {
        r->moe_index[l] = rc_layer_is_moe(c, l) ? m : -1;
        if (r->moe_index[l] >= 0)
            r->layer[m++] = (int32_t)l;
    }
    *out = r;
    return RC_OK;
}

/* the record of row `row` of call bd at layer l: its offset in experts[side], or -1 */
static int64_t slot_of(const rc_routing_rec *r, const rc_batch_desc *bd, int64_t l, int64_t row)
{
    if (l < 0 || l >= r->n_layers || r->moe_index[l] < 0)
        return -1;
    const int64_t seq = r->seq0 + bd->slot[bd->seq_of_row[row]], pos = bd->pos[row];
    if (seq < 0 || seq >= r->S || pos < 0 || pos >= r->T)
        return -1;
    return ((seq * r->T + pos) * r->Lm + r->moe_index[l]) * r->k;
}

static rc_status record(void *ctx, const rc_batch_desc *bd, int64_t l, int64_t row0, int64_t n, int64_t k,
                        const float *experts, const float *weights)
{
    rc_routing_rec *r = ctx;
    if (k != r->k)
        return rc_errorf(RC_ERR_INTERNAL, "routing record: top %lld, recorder for %lld", (long long)k,
                         (long long)r->k);
    for (int64_t i = 0; i < n; i++) {
        const int64_t o = slot_of(r, bd, l, row0 + i);
        if (o < 0)
            continue;
        for (int64_t j = 0; j < k; j++) {
            r->experts[r->side][o + j] = (int16_t)experts[i * k + j];
            r->weights[r->side][o + j] = weights[i * k + j];
        }
    }
    return RC_OK;
}

/* routing=replay: the sampler's experts of each row (-1: none recorded) */
static rc_status replay(void *ctx, const rc_batch_desc *bd, int64_t l, int64_t row0, int64_t n, int64_t k,
                        float *experts)
{
    const rc_routing_rec *r = ctx;
    for (int64_t i = 0; i < n; i++) {
        const int64_t o = k == r->k ? slot_of(r, bd, l, row0 + i) : -1;
        for (int64_t j = 0; j < k; j++)
            experts[i * k + j] = o < 0 ? -1.0f : (float)r->experts[0][o + j];
    }
    return RC_OK;
}

void rc_routing_rec_attach(rc_routing_rec *r, rc_engine *e, int side, int64_t seq0)
{
    if (!r || !e)
        return;
    r->side = side;
    r->seq0 = seq0;
    e->routing = (rc_routing_hook){record, side == 1 ? replay : NULL, r};
}

rc_status rc_routing_rec_finish(const rc_routing_rec *r, const int32_t *prompt_len, rc_results *out)
{
    if (!r)
        return RC_OK;
    const int64_t S = out->n_seq, G = out->gen_len, Lm = r->Lm, k = r->k, w = Lm * k;
    rc_routing *rt;
    RC_TRY(rc_routing_create(S, G, Lm, k, r->E, &rt));
    memcpy(rt->layer, r->layer, (size_t)Lm * sizeof *rt->layer);
    for (int64_t s = 0; s < S && s < r->S; s++) {
        const int64_t P = prompt_len[out->seq_prompt[s]];
        for (int64_t t = 0; t < out->gen_valid[s] && t < G; t++) {
            const int64_t pos = P + t - 1;
            if (pos < 0 || pos >= r->T)
                continue;
            for (int side = 0; side < 2; side++) {
                memcpy(rt->experts[side] + (s * G + t) * w, r->experts[side] + (s * r->T + pos) * w,
                       (size_t)w * sizeof(int16_t));
                memcpy(rt->weights[side] + (s * G + t) * w, r->weights[side] + (s * r->T + pos) * w,
                       (size_t)w * sizeof(float));
            }
        }
    }
    const rc_len_result *L = &out->lens[out->n_lens - 1];
    rc_routing_compute(rt, out->logprob_gen, L->logprob_fwd, L->len);
    rc_routing_free(out->routing);
    out->routing = rt;
    return RC_OK;
}
