/* The forward pass over packed rows of several sequences (no padding: each
 * sequence's rows only ever meet its own keys in attention). */
#include "forward.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define LOGIT_CHUNK_FLOATS ((int64_t)16 << 20) /* 64 MB of logits per chunk */

void rc_engine_free(rc_engine *e)
{
    if (!e)
        return;
    float *bufs[] = {e->x, e->h, e->qkv, e->att, e->mlp_a, e->mlp_b, e->tmp, e->logits,
                     e->kv.k, e->kv.v};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            e->be->ops->free(e->be, bufs[i]);
    free(e);
}

rc_status rc_engine_create(const rc_model *m, rc_backend *be, int64_t n_slots, int64_t max_len,
                           int64_t max_rows, rc_engine **out)
{
    *out = NULL;
    const rc_config *c = &m->cfg;
    if (n_slots < 1 || max_len < 1 || max_rows < 1)
        return rc_errorf(RC_ERR_USAGE, "engine needs at least one slot, position and row");
    if (max_len > c->max_pos)
        return rc_errorf(RC_ERR_USAGE, "sequence length %lld exceeds the model's max_position_embeddings %lld",
                         (long long)max_len, (long long)c->max_pos);
    rc_engine *e = calloc(1, sizeof *e);
    if (!e)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    e->model = m;
    e->be = be;
    e->max_rows = max_rows;
    const int64_t H = c->hidden, d = c->head_dim, I = c->intermediate;
    const int64_t qkv_w = (c->n_heads + 2 * c->n_kv_heads) * d;
    e->logit_rows = LOGIT_CHUNK_FLOATS / c->vocab;
    if (e->logit_rows < 1)
        e->logit_rows = 1;
    if (e->logit_rows > max_rows)
        e->logit_rows = max_rows;
    e->kv = (rc_kv_cache){.n_layers = c->n_layers, .n_slots = n_slots, .n_kv_heads = c->n_kv_heads,
                          .max_len = max_len, .head_dim = d};
    int64_t kv_n;
    rc_status s = RC_OK;
    if (!rc_numel((int64_t[]){c->n_layers, n_slots, c->n_kv_heads, max_len, d}, 5, &kv_n))
        s = rc_errorf(RC_ERR_NOMEM, "KV cache size overflows");
    struct {
        float **p;
        int64_t a, b;
    } bufs[] = {
        {&e->x, max_rows, H},       {&e->h, max_rows, H},
        {&e->qkv, max_rows, qkv_w}, {&e->att, max_rows, c->n_heads * d},
        {&e->mlp_a, max_rows, I},   {&e->mlp_b, max_rows, I},
        {&e->tmp, max_rows, H},     {&e->logits, e->logit_rows, c->vocab},
    };
    for (size_t i = 0; s == RC_OK && i < sizeof bufs / sizeof bufs[0]; i++) {
        int64_t n;
        if (!rc_mul_i64(bufs[i].a, bufs[i].b, &n))
            s = rc_errorf(RC_ERR_NOMEM, "activation size overflows");
        else
            s = be->ops->alloc(be, n, bufs[i].p);
    }
    if (s == RC_OK)
        s = be->ops->alloc(be, kv_n, &e->kv.k);
    if (s == RC_OK)
        s = be->ops->alloc(be, kv_n, &e->kv.v);
    if (s != RC_OK) {
        rc_engine_free(e);
        return s;
    }
    *out = e;
    return RC_OK;
}

static rc_status run_layers(rc_engine *e, const rc_batch_desc *bd, const int32_t *tokens)
{
    const rc_model *m = e->model;
    const rc_config *c = &m->cfg;
    const rc_backend_ops *op = e->be->ops;
    rc_backend *be = e->be;
    const int64_t R = bd->n_rows, H = c->hidden, I = c->intermediate, d = c->head_dim;
    const int64_t qkv_w = (c->n_heads + 2 * c->n_kv_heads) * d, att_w = c->n_heads * d;

    RC_TRY(op->embed(be, tokens, R, m->w.embed, H, e->x));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const rc_layer_weights *L = &m->w.layers[l];
        /* attention block */
        RC_TRY(op->norm(be, c->norm, e->x, R, H, L->ln1_w, L->ln1_b, c->norm_eps, e->h));
        RC_TRY(op->matmul(be, e->h, R, H, L->w_qkv, qkv_w, L->b_qkv, e->qkv));
        RC_TRY(op->rope(be, e->qkv, bd, c, m->w.inv_freq));
        RC_TRY(op->attention(be, e->qkv, bd, c, &e->kv, l, e->att));
        RC_TRY(op->matmul(be, e->att, R, att_w, L->w_o, H, L->b_o, e->tmp)); /* attn_out */
        /* MLP input: parallel residual reads x, sequential reads x + attn_out */
        if (!c->parallel_residual)
            RC_TRY(op->add(be, e->tmp, e->x, R * H, e->x)); /* x = attn_out + x */
        RC_TRY(op->norm(be, c->norm, e->x, R, H, L->ln2_w, L->ln2_b, c->norm_eps, e->h));
        RC_TRY(op->matmul(be, e->h, R, H, L->w_up, I, L->b_up, e->mlp_a));
        if (c->gated_mlp) {
            RC_TRY(op->matmul(be, e->h, R, H, L->w_gate, I, L->b_gate, e->mlp_b));
            RC_TRY(op->act_mul(be, c->act, e->mlp_b, e->mlp_a, R * I)); /* act(gate) * up */
            RC_TRY(op->matmul(be, e->mlp_b, R, I, L->w_down, H, L->b_down, e->h));
        } else {
            RC_TRY(op->act(be, c->act, e->mlp_a, R * I));
            RC_TRY(op->matmul(be, e->mlp_a, R, I, L->w_down, H, L->b_down, e->h));
        }
        if (c->parallel_residual) { /* GPTNeoXLayer: mlp_out + attn_out + x */
            RC_TRY(op->add(be, e->h, e->tmp, R * H, e->h));
            RC_TRY(op->add(be, e->h, e->x, R * H, e->x));
        } else {
            RC_TRY(op->add(be, e->h, e->x, R * H, e->x)); /* mlp_out + x */
        }
    }
    return RC_OK;
}

rc_status rc_engine_step(rc_engine *e, const int64_t *slots, const int64_t *starts,
                         const int64_t *n_new, int64_t n_seq, const int32_t *tokens,
                         const int64_t *out_rows, int64_t n_out, float *full_out,
                         const int32_t *targets, float *target_out)
{
    const rc_config *c = &e->model->cfg;
    rc_status s = RC_OK;
    if (n_seq < 1)
        return rc_errorf(RC_ERR_USAGE, "forward call with no sequences");
    int64_t *row0 = malloc((size_t)n_seq * sizeof *row0);
    int64_t *pos = NULL;
    int64_t R = 0;
    if (!row0)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < n_seq && s == RC_OK; b++) {
        if (slots[b] < 0 || slots[b] >= e->kv.n_slots)
            s = rc_errorf(RC_ERR_USAGE, "sequence %lld: cache slot %lld out of range", (long long)b,
                          (long long)slots[b]);
        else if (n_new[b] < 1 || starts[b] < 0 || starts[b] + n_new[b] > e->kv.max_len)
            s = rc_errorf(RC_ERR_USAGE, "sequence %lld: %lld tokens at position %lld exceed the cache length %lld",
                          (long long)b, (long long)n_new[b], (long long)starts[b], (long long)e->kv.max_len);
        row0[b] = R;
        R += n_new[b];
    }
    if (s == RC_OK && R > e->max_rows)
        s = rc_errorf(RC_ERR_USAGE, "%lld rows exceed the engine's %lld", (long long)R, (long long)e->max_rows);
    if (s == RC_OK && !(pos = malloc((size_t)R * sizeof *pos)))
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < n_seq && s == RC_OK; b++)
        for (int64_t i = 0; i < n_new[b]; i++)
            pos[row0[b] + i] = starts[b] + i;
    for (int64_t r = 0; r < R && s == RC_OK; r++)
        if (tokens[r] < 0 || tokens[r] >= c->vocab)
            s = rc_errorf(RC_ERR_USAGE, "token id %d is outside the vocabulary [0, %lld)", tokens[r],
                          (long long)c->vocab);
    for (int64_t i = 0; i < n_out && s == RC_OK; i++) {
        if (out_rows[i] < 0 || out_rows[i] >= R)
            s = rc_errorf(RC_ERR_USAGE, "output row %lld out of range", (long long)out_rows[i]);
        else if (targets && (targets[i] < 0 || targets[i] >= c->vocab))
            s = rc_errorf(RC_ERR_USAGE, "target token id %d is outside the vocabulary", targets[i]);
    }
    rc_batch_desc bd = {.n_seq = n_seq, .slot = slots, .start = starts, .n_new = n_new,
                        .row0 = row0, .n_rows = R, .pos = pos};
    if (s == RC_OK)
        s = run_layers(e, &bd, tokens);
    /* final norm + LM head + log-softmax, on the requested rows, in chunks */
    const rc_backend_ops *op = e->be->ops;
    const int64_t H = c->hidden, V = c->vocab;
    for (int64_t i0 = 0; i0 < n_out && s == RC_OK; i0 += e->logit_rows) {
        int64_t n = n_out - i0 < e->logit_rows ? n_out - i0 : e->logit_rows;
        for (int64_t i = 0; i < n; i++) /* gather rows (host-side indices) */
            memcpy(e->tmp + i * H, e->x + out_rows[i0 + i] * H, (size_t)H * sizeof(float));
        s = op->norm(e->be, c->norm, e->tmp, n, H, e->model->w.lnf_w, e->model->w.lnf_b, c->norm_eps,
                     e->h);
        if (s == RC_OK)
            s = op->matmul(e->be, e->h, n, H, e->model->w.lm_head, V, NULL, e->logits);
        if (s == RC_OK)
            s = op->logprobs(e->be, e->logits, n, V, full_out ? full_out + i0 * V : NULL,
                             targets ? targets + i0 : NULL, target_out ? target_out + i0 : NULL);
    }
    free(row0);
    free(pos);
    return s;
}

rc_status rc_full_forward(rc_engine *e, const int32_t *tokens, const int64_t *lens, int64_t n_seq,
                          float *full_out)
{
    const int64_t V = e->model->cfg.vocab;
    int64_t *slots = malloc((size_t)n_seq * sizeof *slots);
    int64_t *starts = calloc((size_t)n_seq, sizeof *starts);
    int64_t *rows = malloc((size_t)e->max_rows * sizeof *rows);
    rc_status s = RC_OK;
    if (!slots || !starts || !rows)
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
    /* as many whole sequences per pass as the engine's rows and slots allow */
    int64_t b = 0, tok0 = 0;
    while (s == RC_OK && b < n_seq) {
        int64_t nb = 0, R = 0;
        while (b + nb < n_seq && nb < e->kv.n_slots && R + lens[b + nb] <= e->max_rows) {
            slots[nb] = nb;
            R += lens[b + nb];
            nb++;
        }
        if (nb == 0) {
            s = rc_errorf(RC_ERR_USAGE, "sequence of %lld tokens does not fit the engine (%lld rows)",
                          (long long)lens[b], (long long)e->max_rows);
            break;
        }
        for (int64_t r = 0; r < R; r++)
            rows[r] = r;
        s = rc_engine_step(e, slots, starts, lens + b, nb, tokens + tok0, rows, R,
                           full_out ? full_out + tok0 * V : NULL, NULL, NULL);
        b += nb;
        tok0 += R;
    }
    free(slots);
    free(starts);
    free(rows);
    return s;
}
