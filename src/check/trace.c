#include "trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops_inline.h"
#include "util.h"

/* One side's capture of one (sequence, layer slot, op): rows by position. */
typedef struct {
    float *v;            /* [max_pos][width], NaN where not computed */
    int64_t *call_rows;  /* [max_pos]: the M of the row's call, 0 where not computed */
    int64_t width;
    rc_dtype dt;
} tbuf;

/* what the derived scores and probabilities need of a side */
typedef struct {
    bool have;
    rc_attn_params ap;   /* inv_freq / alibi_slopes pointers not used */
    float *slopes;       /* host copy of the ALiBi slopes, or NULL */
    bool invariant;
    rc_kv_quant kv_quant;
    float k_scale;
    rc_dtype kv_deq_dt;
} side_attn;

struct rc_trace {
    const rc_config *c;
    int64_t run_seqs, n_seq, max_pos, n_slots;
    int64_t *seq;     /* [n_seq] */
    int64_t *index;   /* [run_seqs]: k, or -1 when not traced */
    tbuf *buf;        /* [2][n_seq][n_slots][RC_TOP_COUNT] */
    int64_t *n_new, *start; /* [2][n_seq][max_pos]: the attention call of each position */
    side_attn sa[2];
    rc_trace_cell *cells;
    rc_trace_first *seq_first;
    rc_trace_table table;
};

static tbuf *buf_at(const rc_trace *t, int side, int64_t k, int64_t slot, rc_trace_op op)
{
    return &t->buf[((side * t->n_seq + k) * t->n_slots + slot) * RC_TOP_COUNT + op];
}

rc_status rc_trace_create(const rc_config *c, int64_t run_seqs, const int64_t *seq, int64_t n_seq, int64_t max_pos,
                          rc_trace **out)
{
    *out = NULL;
    if (n_seq < 1 || run_seqs < 1 || max_pos < 1)
        return rc_errorf(RC_ERR_INTERNAL, "trace: %lld sequences of %lld, %lld positions", (long long)n_seq,
                         (long long)run_seqs, (long long)max_pos);
    if (c->mla) /* the derived scores assume one attention shape on both sides; MLA's forms differ */
        return rc_errorf(RC_ERR_UNSUPPORTED, "trace: %s uses latent attention (MLA), whose ops are not traced yet",
                         c->model_type);
    rc_trace *t = calloc(1, sizeof *t);
    if (!t)
        return rc_errorf(RC_ERR_NOMEM, "out of memory (trace)");
    t->c = c;
    t->run_seqs = run_seqs;
    t->n_seq = n_seq;
    t->max_pos = max_pos;
    t->n_slots = c->n_layers + 2;
    int64_t nb = 0, nm = 0;
    rc_status s = RC_OK;
    if (!rc_numel((int64_t[]){2, n_seq, t->n_slots, RC_TOP_COUNT}, 4, &nb) ||
        !rc_numel((int64_t[]){2, n_seq, max_pos}, 3, &nm))
        s = rc_errorf(RC_ERR_NOMEM, "trace: %lld sequences of %lld positions are too many", (long long)n_seq,
                      (long long)max_pos);
    if (s == RC_OK)
        s = rc_calloc((void **)&t->seq, n_seq, sizeof *t->seq, "trace");
    if (s == RC_OK)
        s = rc_calloc((void **)&t->index, run_seqs, sizeof *t->index, "trace");
    if (s == RC_OK)
        s = rc_calloc((void **)&t->buf, nb, sizeof *t->buf, "trace");
    if (s == RC_OK)
        s = rc_calloc((void **)&t->n_new, nm, sizeof *t->n_new, "trace");
    if (s == RC_OK)
        s = rc_calloc((void **)&t->start, nm, sizeof *t->start, "trace");
    if (s == RC_OK)
        s = rc_calloc((void **)&t->cells, t->n_slots * RC_TOP_COUNT, sizeof *t->cells, "trace");
    if (s == RC_OK)
        s = rc_calloc((void **)&t->seq_first, n_seq, sizeof *t->seq_first, "trace");
    for (int64_t i = 0; s == RC_OK && i < run_seqs; i++)
        t->index[i] = -1;
    for (int64_t k = 0; s == RC_OK && k < n_seq; k++) {
        if (seq[k] < 0 || seq[k] >= run_seqs || t->index[seq[k]] >= 0)
            s = rc_errorf(RC_ERR_INTERNAL, "trace: sequence %lld out of range or repeated", (long long)seq[k]);
        else {
            t->seq[k] = seq[k];
            t->index[seq[k]] = k;
        }
    }
    if (s != RC_OK) {
        rc_trace_free(t);
        return s;
    }
    *out = t;
    return RC_OK;
}

void rc_trace_free(rc_trace *t)
{
    if (!t)
        return;
    for (int64_t i = 0; t->buf && i < 2 * t->n_seq * t->n_slots * RC_TOP_COUNT; i++) {
        free(t->buf[i].v);
        free(t->buf[i].call_rows);
    }
    for (int s = 0; s < 2; s++)
        free(t->sa[s].slopes);
    free(t->buf);
    free(t->seq);
    free(t->index);
    free(t->n_new);
    free(t->start);
    free(t->cells);
    free(t->seq_first);
    free(t);
}

/* the buffer of (side, k, slot, op), allocated on first use for rows of width */
static rc_status buf_get(rc_trace *t, int side, int64_t k, int64_t slot, rc_trace_op op, int64_t width, rc_dtype dt,
                         tbuf **out)
{
    tbuf *b = buf_at(t, side, k, slot, op);
    if (!b->v) {
        int64_t n;
        if (width < 1 || !rc_mul_i64(width, t->max_pos, &n))
            return rc_errorf(RC_ERR_NOMEM, "trace: %s rows of %lld values are too large", rc_trace_op_name(op),
                             (long long)width);
        RC_TRY(rc_calloc((void **)&b->v, n, sizeof *b->v, "trace"));
        RC_TRY(rc_calloc((void **)&b->call_rows, t->max_pos, sizeof *b->call_rows, "trace"));
        for (int64_t i = 0; i < n; i++)
            b->v[i] = NAN;
        b->width = width;
        b->dt = dt;
    } else if (b->width != width) {
        return rc_errorf(RC_ERR_INTERNAL, "trace: %s rows of %lld and %lld values", rc_trace_op_name(op),
                         (long long)b->width, (long long)width);
    }
    *out = b;
    return RC_OK;
}

rc_status rc_trace_capture(void *ctx, rc_backend *be, const rc_capture *c)
{
    rc_trace *t = ctx;
    const rc_batch_desc *bd = c->bd;
    if (c->side < 0 || c->side > 1 || c->layer < -1 || c->layer > t->c->n_layers || (unsigned)c->op >= RC_TOP_COUNT)
        return rc_errorf(RC_ERR_INTERNAL, "trace: capture of side %d, layer %lld, op %d", c->side,
                         (long long)c->layer, (int)c->op);
    const int64_t slot = RC_TRACE_SLOT(c->layer);
    for (int64_t i = 0; i < c->n; i++) {
        const int64_t r = c->rows ? c->rows[i] : c->row0 + i;
        if (r < 0 || r >= bd->n_rows)
            return rc_errorf(RC_ERR_INTERNAL, "trace: row %lld of %lld", (long long)r, (long long)bd->n_rows);
        const int64_t b = bd->seq_of_row[r], gseq = c->seq0 + bd->slot[b], p = bd->pos[r];
        if (gseq < 0 || gseq >= t->run_seqs || t->index[gseq] < 0)
            continue;
        const int64_t k = t->index[gseq];
        if (p < 0 || p >= t->max_pos)
            return rc_errorf(RC_ERR_INTERNAL, "trace: position %lld of %lld", (long long)p, (long long)t->max_pos);
        tbuf *tb;
        RC_TRY(buf_get(t, c->side, k, slot, c->op, c->width, c->dt, &tb));
        RC_TRY(be->ops->download(be, c->data + i * c->stride, c->width, tb->v + p * c->width));
        tb->call_rows[p] = c->call_rows;
        if (c->op == RC_TOP_ROPE) {
            const int64_t m = (c->side * t->n_seq + k) * t->max_pos + p;
            t->n_new[m] = bd->n_new[b];
            t->start[m] = bd->start[b];
            side_attn *sa = &t->sa[c->side];
            if (!sa->have && c->ap && c->kv) {
                sa->ap = *c->ap;
                sa->invariant = be->kernels == RC_KERNELS_INVARIANT;
                sa->kv_quant = c->kv->quant;
                sa->k_scale = c->kv->k_scale;
                sa->kv_deq_dt = c->kv->deq_dt;
                if (c->ap->pos == RC_ATTN_POS_ALIBI && c->ap->alibi_slopes) {
                    RC_TRY(rc_calloc((void **)&sa->slopes, c->ap->n_heads, sizeof *sa->slopes, "trace"));
                    RC_TRY(be->ops->download(be, c->ap->alibi_slopes, c->ap->n_heads, sa->slopes));
                }
                sa->have = true;
            }
        }
    }
    return RC_OK;
}

/* The scores and probabilities of every head at every position of traced
 * sequence k on a side, from its captured q and k (keys as the cache stores
 * them), with the per-row arithmetic of the attention kernels (ops_inline.h)
 * in the mode of each position's call: [pos][head * max_pos + key], NaN for
 * keys a query does not see. */
static rc_status derive_attention(rc_trace *t, int side, int64_t k, int64_t layer, float *sc, float *ms, float *ls,
                                  float *kbuf)
{
    const side_attn *sa = &t->sa[side];
    const tbuf *rb = buf_at(t, side, k, RC_TRACE_SLOT(layer), RC_TOP_ROPE);
    if (!sa->have || !rb->v)
        return RC_OK;
    const rc_attn_params *ap = &sa->ap;
    if (ap->sinks) /* gpt-oss: the sinks are per layer, the captured parameters layer 0's: not derived */
        return RC_OK;
    const int64_t nh = ap->n_heads, nkv = ap->n_kv_heads, d = ap->head_dim, T = t->max_pos, W = rb->width;
    const int64_t group = nh / nkv;
    int64_t width;
    if (!rc_mul_i64(nh, T, &width))
        return rc_errorf(RC_ERR_NOMEM, "trace: scores of %lld heads x %lld keys", (long long)nh, (long long)T);
    tbuf *sb, *pb;
    RC_TRY(buf_get(t, side, k, RC_TRACE_SLOT(layer), RC_TOP_SCORES, width, ap->num.score_dt, &sb));
    RC_TRY(buf_get(t, side, k, RC_TRACE_SLOT(layer), RC_TOP_PROBS, width, ap->num.prob_dt, &pb));
    for (int64_t p = 0; p < T; p++) {
        if (!rb->call_rows[p])
            continue;
        const int64_t m = (side * t->n_seq + k) * t->max_pos + p;
        /* the layer's window: the captured parameters are layer 0's */
        const int64_t win = t->c ? rc_layer_window(t->c, layer) : ap->sliding_window;
        const int64_t klo = rco_attn_lo(p, win), nk = p - klo + 1;
        const int mode = rco_attn_mode(sa->invariant, t->n_new[m]);
        bool keys = true;
        for (int64_t j = klo; j <= p; j++)
            keys &= rb->call_rows[j] != 0;
        if (!keys) /* a key this side never computed (cannot happen in a replay) */
            return rc_errorf(RC_ERR_INTERNAL, "trace: position %lld's keys were not captured", (long long)p);
        for (int64_t h = 0; h < nh; h++) {
            const int64_t g = h / group;
            for (int64_t j = 0; j < nk; j++)
                for (int64_t x = 0; x < d; x++) {
                    const float kv = rb->v[(klo + j) * W + (nh + g) * d + x];
                    kbuf[j * d + x] = sa->kv_quant == RC_KV_AUTO ? kv
                                                                  : rco_kv_value(kv, sa->kv_quant, sa->k_scale,
                                                                                 sa->kv_deq_dt);
                }
            const rco_score_spec sp =
                rc_attn_score_spec(ap, sa->slopes, h, p, klo, t->start[m] + t->n_new[m] - 1);
            for (int64_t j = 0; j < nk; j++)
                sc[j] = rco_score(rb->v + p * W + h * d, kbuf + j * d, d, mode == 1 ? 8 : 16, &sp, j);
            memcpy(sb->v + p * width + h * T + klo, sc, (size_t)nk * sizeof *sc);
            rco_softmax(sc, nk, mode, ap->num.prob_dt, ms, ls);
            memcpy(pb->v + p * width + h * T + klo, sc, (size_t)nk * sizeof *sc);
        }
        sb->call_rows[p] = pb->call_rows[p] = rb->call_rows[p];
    }
    return RC_OK;
}

static int mant_bits(rc_dtype dt) { return dt == RC_BF16 ? 7 : dt == RC_F16 ? 10 : 23; }

double rc_trace_ulp_distance(float a, float b, rc_dtype dt)
{
    if (a == b || (isnan(a) && isnan(b)))
        return 0.0;
    if (!isfinite(a) || !isfinite(b))
        return INFINITY;
    const double m = fmax(fabs((double)a), fabs((double)b));
    const int emin = dt == RC_F16 ? -14 : -126; /* the smallest normal exponent */
    int e;
    frexp(m, &e); /* m = f 2^e, f in [0.5, 1): the binade's exponent is e - 1 */
    if (e - 1 < emin)
        e = emin + 1;
    return fabs((double)a - (double)b) / ldexp(1.0, e - 1 - mant_bits(dt));
}

/* the coarser of two dtypes (fewer mantissa bits) */
static rc_dtype coarser(rc_dtype a, rc_dtype b) { return mant_bits(a) <= mant_bits(b) ? a : b; }

static bool same_bits(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x == y;
}

rc_status rc_trace_compare(rc_trace *t, const rc_trace_table **out)
{
    const rc_config *c = t->c;
    const int64_t T = t->max_pos;
    float *sc = NULL, *ms = NULL, *ls = NULL, *kbuf = NULL;
    rc_status s = RC_OK;
    int64_t kn;
    if (!rc_mul_i64(T, c->head_dim, &kn))
        return rc_errorf(RC_ERR_NOMEM, "trace: keys of %lld positions", (long long)T);
    if ((s = rc_calloc((void **)&sc, T, sizeof *sc, "trace")) != RC_OK ||
        (s = rc_calloc((void **)&ms, RC_SOFTMAX_MAX_CHUNKS, sizeof *ms, "trace")) != RC_OK ||
        (s = rc_calloc((void **)&ls, RC_SOFTMAX_MAX_CHUNKS, sizeof *ls, "trace")) != RC_OK ||
        (s = rc_calloc((void **)&kbuf, kn, sizeof *kbuf, "trace")) != RC_OK)
        goto done;
    for (int side = 0; side < 2 && s == RC_OK; side++)
        for (int64_t k = 0; k < t->n_seq && s == RC_OK; k++)
            for (int64_t l = 0; l < c->n_layers && s == RC_OK; l++)
                s = derive_attention(t, side, k, l, sc, ms, ls, kbuf);
    if (s != RC_OK)
        goto done;
    rc_trace_first *first = &t->table.first;
    memset(first, 0, sizeof *first);
    for (int64_t k = 0; k < t->n_seq; k++)
        memset(&t->seq_first[k], 0, sizeof t->seq_first[k]);
    for (int64_t slot = 0; slot < t->n_slots; slot++)
        for (int op = 0; op < RC_TOP_COUNT; op++) {
            rc_trace_cell *cell = &t->cells[slot * RC_TOP_COUNT + op];
            double ss_d = 0.0, ss_t = 0.0;
            *cell = (rc_trace_cell){0, 0, NAN, NAN, NAN};
            for (int64_t k = 0; k < t->n_seq; k++) {
                const tbuf *a = buf_at(t, 0, k, slot, (rc_trace_op)op), *b = buf_at(t, 1, k, slot, (rc_trace_op)op);
                if (!a->v || !b->v || a->width != b->width)
                    continue;
                const rc_dtype dt = coarser(a->dt, b->dt);
                rc_trace_first *sf = &t->seq_first[k];
                for (int64_t p = 0; p < T; p++) {
                    if (!a->call_rows[p] || !b->call_rows[p])
                        continue;
                    const float *x = a->v + p * a->width, *y = b->v + p * a->width;
                    for (int64_t i = 0; i < a->width; i++) {
                        if (isnan(x[i]) && isnan(y[i]))
                            continue; /* keys a query does not see */
                        if (cell->count == 0)
                            cell->max_abs = cell->max_ulp = 0.0;
                        cell->count++;
                        if (isfinite(y[i]))
                            ss_t += (double)y[i] * (double)y[i];
                        if (same_bits(x[i], y[i])) {
                            cell->equal++;
                            continue;
                        }
                        const double dd = (double)x[i] - (double)y[i];
                        const double ulp = rc_trace_ulp_distance(x[i], y[i], dt);
                        cell->max_abs = isnan(dd) || fabs(dd) > cell->max_abs ? fabs(dd) : cell->max_abs;
                        cell->max_ulp = isnan(ulp) || ulp > cell->max_ulp ? ulp : cell->max_ulp;
                        ss_d += dd * dd;
                        if (!sf->found) /* forward order: the first cell, position, element of this sequence */
                            *sf = (rc_trace_first){true, slot - 1, (rc_trace_op)op, t->seq[k], p, i, x[i], y[i], ulp,
                                                   a->call_rows[p], b->call_rows[p]};
                    }
                }
            }
            if (cell->count > 0)
                cell->rel_l2 = ss_d == 0.0 ? 0.0 : ss_t > 0.0 ? sqrt(ss_d / ss_t) : INFINITY;
            /* overall: the first cell where any sequence parts, its smallest (position, element) */
            if (!first->found)
                for (int64_t k = 0; k < t->n_seq; k++) {
                    const rc_trace_first *sf = &t->seq_first[k];
                    if (sf->found && sf->layer == slot - 1 && sf->op == (rc_trace_op)op &&
                        (!first->found || sf->position < first->position ||
                         (sf->position == first->position && sf->element < first->element)))
                        *first = *sf;
                }
        }
    t->table = (rc_trace_table){t->n_slots, t->cells, t->table.first, t->n_seq, t->seq, t->seq_first};
    *out = &t->table;
done:
    free(sc);
    free(ms);
    free(ls);
    free(kbuf);
    return s;
}

const float *rc_trace_row(const rc_trace *t, int side, int64_t k, int64_t layer, rc_trace_op op, int64_t pos,
                          int64_t *width, int64_t *call_rows)
{
    if (side < 0 || side > 1 || k < 0 || k >= t->n_seq || layer < -1 || layer > t->c->n_layers ||
        (unsigned)op >= RC_TOP_COUNT || pos < 0 || pos >= t->max_pos)
        return NULL;
    const tbuf *b = buf_at(t, side, k, RC_TRACE_SLOT(layer), op);
    if (!b->v || !b->call_rows[pos])
        return NULL;
    if (width)
        *width = b->width;
    if (call_rows)
        *call_rows = b->call_rows[pos];
    return b->v + pos * b->width;
}
