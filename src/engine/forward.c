/* The forward pass over packed rows of several sequences (no padding: each
 * sequence's rows only ever meet its own keys in attention). */
#include "forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8w.h"
#include "mla.h"
#include "util.h"

#define LOGIT_CHUNK_FLOATS ((int64_t)16 << 20) /* 64 MB of logits per chunk */

rc_numerics rc_numerics_fp32(void)
{
    return (rc_numerics){.dt = RC_F32, .upcast = 0, .logprob_dt = RC_F32, .temperature = 1.0f,
                         .kv_quant = RC_KV_AUTO, .kv_scale = 1.0f};
}

static const struct {
    const char *name;
    unsigned bit;
} k_upcasts[] = {{"softmax", RC_UPCAST_SOFTMAX},
                 {"rope", RC_UPCAST_ROPE},
                 {"norm", RC_UPCAST_NORM},
                 {"lm_head", RC_UPCAST_LM_HEAD}};

rc_status rc_parse_upcast(const char *s, unsigned *out)
{
    *out = 0;
    if (s[0] == '\0')
        return rc_errorf(RC_ERR_USAGE, "--upcast: empty list (give ops such as softmax,norm, or all, or none)");
    if (strcmp(s, "none") == 0)
        return RC_OK;
    if (strcmp(s, "all") == 0) {
        for (size_t i = 0; i < sizeof k_upcasts / sizeof k_upcasts[0]; i++)
            *out |= k_upcasts[i].bit;
        return RC_OK;
    }
    const char *p = s;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0)
            return rc_errorf(RC_ERR_USAGE, "--upcast: '%s' has an empty item", s);
        if ((n == 3 && !strncmp(p, "all", 3)) || (n == 4 && !strncmp(p, "none", 4)))
            return rc_errorf(RC_ERR_USAGE, "--upcast: 'all' and 'none' cannot be combined with other ops ('%s')", s);
        bool found = false;
        for (size_t i = 0; i < sizeof k_upcasts / sizeof k_upcasts[0]; i++)
            if (strlen(k_upcasts[i].name) == n && strncmp(k_upcasts[i].name, p, n) == 0) {
                if (*out & k_upcasts[i].bit)
                    return rc_errorf(RC_ERR_USAGE, "--upcast: '%s' is listed twice", k_upcasts[i].name);
                *out |= k_upcasts[i].bit;
                found = true;
            }
        if (!found)
            return rc_errorf(RC_ERR_USAGE, "--upcast: unknown op '%.*s' (choose from softmax, rope, norm, lm_head)",
                             (int)(n > 40 ? 40 : n), p);
        if (!e)
            break;
        p = e + 1;
    }
    return RC_OK;
}

const char *rc_upcast_str(unsigned upcast, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof k_upcasts / sizeof k_upcasts[0]; i++)
        if (upcast & k_upcasts[i].bit)
            o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%s", o ? "," : "", k_upcasts[i].name);
    if (o == 0)
        snprintf(buf, n, "none");
    return buf;
}

static const char *const k_tp_reduce_names[] = {"fp32", "ring", "chain", "seq"};

rc_status rc_parse_tp_reduce(const char *s, rc_tp_reduce *out)
{
    for (int i = 0; i < (int)(sizeof k_tp_reduce_names / sizeof k_tp_reduce_names[0]); i++)
        if (!strcmp(s, k_tp_reduce_names[i])) {
            *out = (rc_tp_reduce)i;
            return RC_OK;
        }
    return rc_errorf(RC_ERR_USAGE, "'%s' is not one of fp32, ring, chain, seq", s);
}

const char *rc_tp_reduce_name(rc_tp_reduce r)
{
    return (unsigned)r < sizeof k_tp_reduce_names / sizeof k_tp_reduce_names[0] ? k_tp_reduce_names[r] : "?";
}

rc_status rc_tp_check(const rc_config *c, const rc_numerics *num)
{
    const int tp = num->tp;
    const char *side = num->tp_trainer ? "trainer" : "sampler";
    const char *splits = num->tp_trainer ? "Megatron splits" : "vLLM and SGLang split";
    if (tp <= 1)
        return RC_OK;
    if (tp > RC_TP_MAX || (unsigned)num->tp_reduce > RC_TP_REDUCE_SEQ)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s tp=%d, reduce %d: not supported (tp <= %d)", side, tp,
                         (int)num->tp_reduce, RC_TP_MAX);
    if (c->n_heads % tp != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s tp=%d: the model's %lld attention heads are not divisible by %d (%s "
                         "them evenly over the ranks)", side, tp, (long long)c->n_heads, tp, splits);
    if (c->qk_norm == RC_QK_NORM_ALL)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s tp=%d: the model's q / k norm over the whole projection needs the "
                         "ranks' heads gathered; not emulated", side, tp);
    if (c->intermediate % tp != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s tp=%d: the model's MLP intermediate size %lld is not divisible by "
                         "%d (%s it evenly over the ranks)", side, tp, (long long)c->intermediate, tp, splits);
    if (num->tp_trainer && c->n_kv_heads % tp != 0) /* Megatron: num_query_groups % tp == 0 */
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s tp=%d: the model's %lld KV heads are not divisible by %d (Megatron "
                         "splits the query groups, it does not replicate them)", side, tp, (long long)c->n_kv_heads,
                         tp);
    if (!num->tp_trainer && (tp >= c->n_kv_heads ? tp % c->n_kv_heads : c->n_kv_heads % tp) != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s tp=%d: the model's %lld KV heads are neither a multiple nor a "
                         "divisor of %d (vLLM and SGLang split them, or replicate them when tp is a multiple)", side,
                         tp, (long long)c->n_kv_heads, tp);
    return RC_OK;
}

rc_status rc_tp_reduce_partials(rc_backend *be, const rc_numerics *num, float *parts, int64_t M, int64_t N,
                                 const float *bias, rc_dtype out_dt, int64_t elem0, int64_t numel,
                                 const int64_t *zero_rows, float *y)
{
    const rc_backend_ops *op = be->ops;
    const int64_t k = num->tp;
    int64_t MN = 0;
    if (k < 2 || k > RC_TP_MAX || !rc_mul_i64(M, N, &MN) || elem0 < 0 || numel - MN < elem0)
        return rc_errorf(RC_ERR_INTERNAL, "TP reduce: %lld ranks, elements [%lld, +%lld) of %lld", (long long)k,
                         (long long)elem0, (long long)MN, (long long)numel);
    if (MN == 0)
        return RC_OK;
    const float *P[RC_TP_MAX];
    for (int64_t r = 0; r < k; r++)
        P[r] = parts + r * MN;
    switch (num->tp_reduce) {
    case RC_TP_REDUCE_FP32: /* fp32 accumulator, rank order, one rounding at the end */
        for (int64_t r = 1; r < k; r++)
            RC_TRY(op->add(be, r == 1 ? P[0] : y, P[r], MN, r == k - 1 ? out_dt : RC_F32, y));
        break;
    case RC_TP_REDUCE_CHAIN: /* the chain's end first, rank 0 last */
        for (int64_t r = k - 2; r >= 0; r--)
            RC_TRY(op->add(be, r == k - 2 ? P[k - 1] : y, P[r], MN, out_dt, y));
        break;
    case RC_TP_REDUCE_SEQ:
        for (int64_t r = 1; r < k; r++)
            RC_TRY(op->add(be, r == 1 ? P[0] : y, P[r], MN, out_dt, y));
        break;
    case RC_TP_REDUCE_RING:
        /* element e of the tensor belongs to chunk c = floor(e k / numel),
         * i.e. e in [ceil(c numel / k), ceil((c + 1) numel / k)); its sum
         * starts with rank c+1's partial and ends with rank c's */
        for (int64_t c = 0; c < k; c++) {
            int64_t lo, hi;
            if (!rc_mul_i64(c, numel, &lo) || !rc_mul_i64(c + 1, numel, &hi))
                return rc_errorf(RC_ERR_NOMEM, "TP reduce: tensor of %lld elements too large", (long long)numel);
            lo = (lo + k - 1) / k - elem0;
            hi = (hi + k - 1) / k - elem0;
            lo = lo < 0 ? 0 : lo;
            hi = hi > MN ? MN : hi;
            for (int64_t j = 1; j < k && lo < hi; j++)
                RC_TRY(op->add(be, j == 1 ? P[(c + 1) % k] + lo : y + lo, P[(c + 1 + j) % k] + lo, hi - lo, out_dt,
                               y + lo));
        }
        break;
    default:
        return rc_errorf(RC_ERR_INTERNAL, "TP reduce: mode %d", (int)num->tp_reduce);
    }
    if (num->tp_trainer && bias) { /* Megatron: y = R(y + b) on every rank, the bias rows in rank 0's part */
        RC_TRY(op->gather_rows(be, bias, N, zero_rows, M, parts));
        RC_TRY(op->add(be, y, parts, MN, out_dt, y));
    }
    return RC_OK;
}

rc_status rc_row_parallel_linear(rc_backend *be, const rc_numerics *num, const float *x, int64_t M, int64_t K,
                                 rc_wt W, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt,
                                 int64_t elem0, int64_t numel, float *parts, const int64_t *zero_rows, float *y)
{
    const rc_backend_ops *op = be->ops;
    const int64_t k = num->tp;
    if (k <= 1) /* one device: one GEMM, the bias fused */
        return op->matmul(be, x, M, K, W, N, bias, in_dt, out_dt, y);
    int64_t MN = 0;
    if (K % k != 0 || !rc_mul_i64(M, N, &MN))
        return rc_errorf(RC_ERR_INTERNAL, "row-parallel linear: K %lld over %lld ranks", (long long)K, (long long)k);
    const int64_t Ks = K / k;
    /* the partials: rank r's K-slice, rounded once; vLLM / SGLang fuse the
     * bias into rank 0's GEMM only, Megatron adds it after the reduce */
    for (int64_t r = 0; r < k && MN > 0; r++)
        RC_TRY(op->matmul_kslice(be, x, M, K, r * Ks, Ks, W, N, r == 0 && !num->tp_trainer ? bias : NULL, in_dt,
                                 out_dt, parts + r * MN));
    return rc_tp_reduce_partials(be, num, parts, M, N, bias, out_dt, elem0, numel, zero_rows, y);
}

enum { ENGINE_BUFS = 11 }; /* x, h, qkv, att, mlp_a, mlp_b, tmp, logits, mlp_c, lt, lh */

/* A forward call runs over row chunks of CHUNK_ROWS (the last one merged
 * into the one before when it would have 256 rows or fewer), so that only
 * the residual stream grows with the call's rows: every chunk of a call with
 * more than CHUNK_ROWS + CHUNK_MERGE rows has more than 256 rows, so the
 * GEMMs' M class (rco_gemm_order_for), RMSNorm's lanes and so every result
 * are those of one pass over all rows. On the CPU with engine and invariant
 * kernels only: OpenBLAS's order is its own, and a GPU runs one pass. */
#define CHUNK_ROWS 1024
#define CHUNK_MERGE 256 /* a remainder this small joins the chunk before */

static int64_t chunk_rows_for(int64_t max_rows, rc_kernels k, bool host)
{
    const int64_t cap = CHUNK_ROWS + CHUNK_MERGE;
    return !host || k == RC_KERNELS_BLAS || max_rows <= cap ? max_rows : cap;
}

/* the Gated DeltaNet layers among the layers the forward runs (--layers N: the first N) */
static int64_t linear_layers(const rc_config *c)
{
    int64_t n = 0;
    for (int64_t l = 0; l < c->n_layers; l++)
        n += rc_layer_is_linear(c, l);
    return n;
}

/* a hybrid model's state cache and scratch, in floats: conv and recurrent states of n_slots, the scratch
 * rows of max_rows (in_proj_qkvz, in_proj_ba, the mixers' outputs, the attention gate). false on overflow. */
static bool hybrid_sizes(const rc_config *c, int64_t n_slots, int64_t max_rows, int64_t *state_n, int64_t *scratch_n)
{
    *state_n = *scratch_n = 0;
    const int64_t nl = linear_layers(c);
    if (nl == 0 && !c->attn_out_gate)
        return true;
    int64_t per = 0, rec = 0, conv = 0, w = 0;
    return rc_mul_i64(rc_dim_value(c, RC_DIM_LCONV), c->lin_conv_k, &conv) &&
           rc_numel((int64_t[]){c->lin_hv, c->lin_dk, c->lin_dv}, 3, &rec) && rc_add_i64(conv, rec, &per) &&
           rc_numel((int64_t[]){nl, n_slots, per}, 3, state_n) &&
           rc_add_i64(rc_dim_value(c, RC_DIM_LQKVZ), rc_dim_value(c, RC_DIM_LBA), &w) &&
           rc_add_i64(w, rc_dim_value(c, RC_DIM_LV), &w) &&
           rc_add_i64(w, c->attn_out_gate ? c->n_heads * c->head_dim : 0, &w) && rc_mul_i64(max_rows, w, scratch_n);
}

/* rows of the next chunk when `left` rows remain */
static int64_t next_chunk(int64_t left, int64_t chunk_rows)
{
    return left <= chunk_rows ? left : CHUNK_ROWS;
}

/* latent attention's engine form (mla=engine): an absorbed decode whose
 * prefill calls run expanded */
static bool mla_mixed(const rc_config *c, const rc_numerics *num)
{
    return c->mla && num->mla_absorbed && num->mla_prefill_expanded;
}

/* the expanded prefill's K / V cache of the engine form: floats of one of K
 * and V, and its dtype (the expanded form's rule) */
static bool mla_x_kv(const rc_config *c, const rc_numerics *num, int64_t n_slots, int64_t max_len, int64_t *n)
{
    int64_t nx, dx;
    rc_mla_attn_shape(c, false, &nx, &dx);
    const int64_t kv_layers = c->n_layers > 0 ? c->n_layers : 1;
    (void)num;
    return rc_numel((int64_t[]){kv_layers, n_slots, nx, max_len, dx}, 5, n);
}

/* The engine's buffers for these sizes, one place for rc_engine_create and
 * rc_engine_mem_estimate: the activation buffers in the order of
 * ENGINE_BUFS (rows x columns each), the logit rows per chunk, the floats of
 * one of K and V. false when a size overflows. */
typedef struct {
    int64_t dims[ENGINE_BUFS][2];
    int64_t floats[ENGINE_BUFS]; /* what each takes, in floats (a 2-byte buffer: half its elements, rounded up) */
    rc_dtype st[ENGINE_BUFS];    /* each one's storage (engine_act_st) */
    int64_t logit_rows, kv_n;
    int64_t ix_n; /* int64_t index scratch (rc_engine.ix): 7 arrays of max_rows */
} engine_sizes;

static void engine_act_st(const rc_config *c, const rc_numerics *num, bool host, rc_dtype st[ENGINE_BUFS]);
static bool autocast_tied_head(const rc_numerics *num);

static bool engine_sizes_for(const rc_config *c, const rc_numerics *num, rc_kernels k, bool host, int64_t n_slots,
                             int64_t max_len, int64_t max_rows, engine_sizes *z)
{
    const int64_t H = c->hidden, I = c->intermediate;
    int64_t nkv, d; /* the attention's KV heads and width (latent attention: its form's) */
    rc_mla_attn_shape(c, num->mla_absorbed, &nkv, &d);
    int64_t qkv_w = (c->n_heads + 2 * nkv) * d, att_w = c->n_heads * d;
    if (mla_mixed(c, num)) { /* the expanded prefill runs through the same buffers */
        int64_t nx, dx;
        rc_mla_attn_shape(c, false, &nx, &dx);
        qkv_w = qkv_w > (c->n_heads + 2 * nx) * dx ? qkv_w : (c->n_heads + 2 * nx) * dx;
        att_w = att_w > c->n_heads * dx ? att_w : c->n_heads * dx;
    }
    z->logit_rows = LOGIT_CHUNK_FLOATS / c->vocab;
    if (z->logit_rows < 1)
        z->logit_rows = 1;
    if (z->logit_rows > max_rows)
        z->logit_rows = max_rows;
    /* a hybrid model's call runs whole: a linear layer's sequence cannot be cut into row chunks */
    const int64_t cr = linear_layers(c) > 0 ? max_rows : chunk_rows_for(max_rows, k, host), lr = z->logit_rows;
    /* mlp_b: the gate's output, only a gated MLP has one (1 float otherwise: every buffer exists) */
    const int64_t dims[ENGINE_BUFS][2] = {{max_rows, H}, {cr, H}, {cr, qkv_w}, {cr, att_w},
                                          {cr, I},       {cr, c->gated_mlp ? I : 1}, {cr, H}, {lr, c->vocab},
                                          {cr, H},       {lr, H}, {lr, H}};
    memcpy(z->dims, dims, sizeof dims);
    engine_act_st(c, num, host, z->st);
    for (int i = 0; i < ENGINE_BUFS; i++) {
        if (!rc_mul_i64(dims[i][0], dims[i][1], &z->floats[i]))
            return false;
        if (z->st[i] != RC_F32) /* at 2 bytes */
            z->floats[i] = z->floats[i] / 2 + z->floats[i] % 2;
    }
    if (!rc_mul_i64(7, max_rows, &z->ix_n))
        return false;
    const int64_t kv_layers = c->n_layers - linear_layers(c); /* K and V for the attention layers only */
    return rc_numel((int64_t[]){kv_layers > 0 ? kv_layers : 1, n_slots, nkv, max_len, d}, 5, &z->kv_n);
}

/* How an engine holds one weight: in place (the model's storage, read as it
 * is) or a copy whose values are rounded to round_dt, stored as `store`.
 * On the CPU a GEMM weight (MAT) keeps its values' dtype: used in place when
 * they need no rounding (stored in the run's dtype, or any dtype in an fp32
 * run), else copied at the run dtype's width; vectors (VEC) and the BLAS
 * strategy's weights (sgemm reads fp32) are fp32 arrays. A GPU backend gets
 * copies of everything (one upload): a GEMM weight at the run dtype's width
 * when that is bf16 / fp16 (its kernels widen it in registers), fp32 else and
 * for vectors. */
typedef struct {
    bool copy;
    rc_dtype store;
} weight_plan;

static weight_plan plan_weight(rc_weight_kind kind, rc_dtype src_dt, rc_dtype round_dt, bool host, rc_kernels k)
{
    const bool exact = round_dt == RC_F32 || src_dt == round_dt; /* the values need no rounding */
    if (!host)
        return (weight_plan){true, kind == RC_WK_MAT && (round_dt == RC_BF16 || round_dt == RC_F16) ? round_dt : RC_F32};
    if (kind == RC_WK_VEC || k == RC_KERNELS_BLAS)
        return (weight_plan){!(exact && src_dt == RC_F32), RC_F32};
    return exact ? (weight_plan){false, src_dt} : (weight_plan){true, round_dt};
}

/* one pass over the weights: count (fill false) or make the copies */
typedef struct {
    const rc_model *m;
    rc_dtype round_dt;
    bool host, fill;
    rc_kernels kernels;
    int64_t used;      /* bytes of copies, each 64-byte aligned */
    int64_t in_place;  /* bytes used in place from the mapped checkpoint */
    unsigned char *arena; /* host: the engine's arena; device: the fp32 staging copy */
    float *dev;        /* device: the engine's arena */
    bool head;         /* the LM head is placed with the rest (untied, rounded to the dtype) */
    bool autocast;     /* mode autocast: the embedding, positions and norm weights keep fp32 values */
    bool ok;
    /* Gemma (norm_w_offset): the norm weights held as fp32(1 + R(w)), always an own copy */
    bool plus_one;           /* false when a size overflows */
    /* a layer split: layer l's weights go to the arena of its device (l0: the devices' first layers, n_stages
     * + 1 of them); the model's own weights to device 0's. used, arena and dev are device cur's; the others'
     * wait in s_used, s_arena, s_dev. layer_bytes (or NULL): each layer's bytes of copies. */
    int n_stages, cur;
    const int64_t *l0;
    int64_t s_used[RC_MAX_DEVICES];
    unsigned char *s_arena[RC_MAX_DEVICES];
    float *s_dev[RC_MAX_DEVICES];
    int64_t *layer_bytes;
    bool router_dt; /* the router's weight rounded to the dtype though the family keeps it fp32 (router_gate_dt) */
} place_ctx;

/* router=dtype on a family whose router transformers keeps fp32 and vLLM computes in the dtype (DeepSeek-V3):
 * the gate's weight rounded to the dtype once, its logits rounded to the dtype (vLLM's GateLinear) */
static bool router_gate_dt(const rc_config *c, const rc_numerics *num)
{
    return num->router_dtype && !num->router_f32 && c->router_gate_f32 && c->router_gate_engine_dt &&
           num->dt != RC_F32;
}

/* the copies of device s from here on (a layer split) */
static void place_stage(place_ctx *x, int s)
{
    if (s == x->cur)
        return;
    x->s_used[x->cur] = x->used;
    x->s_arena[x->cur] = x->arena;
    x->s_dev[x->cur] = x->dev;
    x->cur = s;
    x->used = x->s_used[s];
    x->arena = x->s_arena[s];
    x->dev = x->s_dev[s];
}

/* the device of layer l in a split with first layers l0[0 .. n] */
static int stage_of_layer(const int64_t *l0, int n, int64_t l)
{
    int s = 0;
    while (s + 1 < n && l >= l0[s + 1])
        s++;
    return s;
}

/* Under autocast the fp32 masters of what torch.autocast never casts keep
 * their values: the embedding table and learned positions (embedding and add
 * are not on its lists), norm weights and biases (the norms see fp32 inputs).
 * GEMM weights and their biases are cast at every GEMM: R(W), R(b) once. */
static bool autocast_keeps_fp32_model(rc_model_weight_id id) { return id != RC_MW_lm_head; }
static bool autocast_keeps_fp32_layer(rc_layer_weight_id id)
{
    return id == RC_LW_ln1_w || id == RC_LW_ln1_b || id == RC_LW_ln2_w || id == RC_LW_ln2_b;
}

static void place(place_ctx *x, rc_wt *dst, rc_wt src, rc_weight_kind kind, bool present, int64_t n, bool keep32,
                  bool plus_one, bool always32)
{
    *dst = (rc_wt){NULL, RC_F32, false};
    if (!present)
        return;
    int64_t bytes;
    /* always32: the family keeps the weight's stored values in every run (a router kept fp32) */
    const rc_dtype round_dt = (x->autocast && keep32) || always32 ? RC_F32 : x->round_dt;
    weight_plan pl = plan_weight(kind, src.dt, round_dt, x->host, x->kernels);
    plus_one = plus_one && x->plus_one && kind == RC_WK_VEC;
    if (plus_one) /* Gemma's (1.0 + self.weight.float()): fp32, from the weight's value in the run's dtype */
        pl = (weight_plan){true, RC_F32};
    if (!rc_mul_i64(n, pl.copy ? rc_dtype_size(pl.store) : rc_dtype_size(src.dt), &bytes)) {
        x->ok = false;
        return;
    }
    if (!pl.copy) {
        *dst = src;
        if (src.mapped && !rc_add_i64(x->in_place, bytes, &x->in_place))
            x->ok = false;
        return;
    }
    const int64_t off = (x->used + 63) / 64 * 64;
    if (off < x->used || !rc_add_i64(off, bytes, &x->used)) {
        x->ok = false;
        return;
    }
    if (!x->fill)
        return;
    if (x->host) { /* rounded now, stored at its width */
        rc_wt_convert(src, 0, n, round_dt, pl.store, x->arena + off);
        *dst = (rc_wt){x->arena + off, pl.store, false};
    } else { /* staged rounded as this weight's rule says, stored as the plan says, uploaded as bytes */
        rc_wt_convert(src, 0, n, round_dt, pl.store, x->arena + off);
        *dst = (rc_wt){(unsigned char *)x->dev + off, pl.store, false};
    }
    if (plus_one) {
        float *f = (float *)(x->arena + off);
        for (int64_t i = 0; i < n; i++)
            f[i] = 1.0f + f[i];
    }
    rc_model_release(x->m, src, n); /* the model's pages of it are not needed while this engine runs */
}

/* the layer's RMSNorm weights (Gemma's (1 + w)) */
static bool norm_weight_layer(rc_layer_weight_id id)
{
    return id == RC_LW_ln1_w || id == RC_LW_ln2_w || id == RC_LW_post_attn_ln_w || id == RC_LW_post_mlp_ln_w ||
           id == RC_LW_q_norm_w || id == RC_LW_k_norm_w;
}

/* every weight field (lm_head when x->head), from the lists in model.h (none can be missed) */
static void place_all(place_ctx *x, rc_weights *dst)
{
    const rc_model *m = x->m;
    const rc_config *c = &m->cfg;
#define PLACE_MODEL_(f, rows, cols, present, kind)                                                              \
    if (RC_MW_##f != RC_MW_lm_head || x->head)                                                                  \
        place(x, &dst->f, m->w.f, RC_WK_##kind, rc_weight_cond_holds(c, present),                              \
              rc_dim_value(c, rows) * rc_dim_value(c, cols), autocast_keeps_fp32_model(RC_MW_##f),              \
              RC_MW_##f == RC_MW_lnf_w, false);
    RC_MODEL_WEIGHT_FIELDS(PLACE_MODEL_)
#undef PLACE_MODEL_
    for (int64_t l = 0; l < c->n_layers; l++) {
        if (x->n_stages > 1)
            place_stage(x, stage_of_layer(x->l0, x->n_stages, l));
        const int64_t before = x->used;
#define PLACE_LAYER_(f, rows, cols, present, kind)                                                              \
    place(x, &dst->layers[l].f, m->w.layers[l].f, RC_WK_##kind, rc_weight_cond_holds_layer(c, present, l),     \
          rc_dim_value(c, rows) * rc_dim_value(c, cols), autocast_keeps_fp32_layer(RC_LW_##f),               \
          norm_weight_layer(RC_LW_##f),                                                                       \
          rc_layer_weight_keeps_f32(c, RC_LW_##f) && !(x->router_dt && RC_LW_##f == RC_LW_w_router));
        RC_LAYER_WEIGHT_FIELDS(PLACE_LAYER_)
#undef PLACE_LAYER_
        if (x->layer_bytes)
            x->layer_bytes[l] = x->used - before;
    }
    place_stage(x, 0);
    x->s_used[0] = x->used;
}

/* The rounding rules, all in one place. MD is the model dtype; an op named
 * in --upcast keeps fp32. (README "Numerics" has the table.) */
typedef struct {
    rc_dtype norm;      /* LayerNorm / RMSNorm output */
    rc_dtype norm_mid;  /* RMSNorm's cast before the weight */
    rc_dtype norm_final; /* the final norm's output (the LM head's input) */
    rc_dtype linear;    /* every GEMM output (bias added in fp32 first) */
    rc_dtype rope_cs;   /* cos / sin tables */
    rc_dtype rope_mid;  /* q*cos, rotate_half(q)*sin */
    rc_dtype rope;      /* their sum */
    rc_attn_numerics attn;
    rc_dtype act;       /* activation outputs, SwiGLU product */
    rc_dtype residual;  /* residual adds */
    rc_dtype residual_pair; /* parallel residual: mlp_out + attn_out, before x is added */
    rc_dtype logits;    /* LM head output */
} rounding;

/* autocast over fp32 masters (docs/research/autocast.md section 4): the
 * residual stream, norms and RoPE stay fp32; what only a GEMM reads (a norm's
 * output, rotated q and k) is rounded where it is produced, which is where
 * the GEMM's cast rounds it; GEMMs, scores, P.V, activations and logits
 * round as in the pure model. */
static rounding autocast_rules(const rc_numerics *n)
{
    const rc_dtype MD = n->dt;
    const bool head32 = (n->upcast & RC_UPCAST_LM_HEAD) != 0;
    rounding r;
    r.norm = MD;
    r.norm_mid = RC_F32;
    r.norm_final = head32 ? RC_F32 : MD; /* an fp32 head reads the fp32 norm output */
    r.linear = MD;
    r.rope_cs = RC_F32;
    r.rope_mid = RC_F32;
    r.rope = MD;
    r.attn.score_dt = MD;
    r.attn.prob_dt = MD;
    r.attn.out_dt = MD;
    r.act = MD;
    r.residual = RC_F32;
    r.residual_pair = MD;
    r.logits = head32 ? RC_F32 : MD;
    return r;
}

static rounding rounding_rules(const rc_numerics *n)
{
    if (n->mode == RC_PREC_AUTOCAST)
        return autocast_rules(n);
    const rc_dtype MD = n->dt;
    const unsigned up = n->upcast;
    rounding r;
    r.norm = (up & RC_UPCAST_NORM) ? RC_F32 : MD;
    r.norm_mid = r.norm;
    r.norm_final = r.norm;
    r.linear = MD;
    r.rope_cs = (up & RC_UPCAST_ROPE) ? RC_F32 : MD;
    r.rope = (up & RC_UPCAST_ROPE) ? RC_F32 : MD;
    r.rope_mid = r.rope;
    /* fp32 q/k (upcast rope) give fp32 scores, as in GPT-NeoX 4.37-4.44 */
    r.attn.score_dt = (up & (RC_UPCAST_ROPE | RC_UPCAST_SOFTMAX)) ? RC_F32 : MD;
    r.attn.prob_dt = MD; /* softmax runs in fp32; probabilities cast to the value dtype */
    r.attn.out_dt = MD;
    r.act = MD;
    r.residual = MD;
    r.residual_pair = MD;
    r.logits = (up & RC_UPCAST_LM_HEAD) ? RC_F32 : MD;
    if (n->residual_f32) { /* Megatron's --fp32-residual-connection: the stream in fp32, each norm one
                            * rounding at its output (gamma * x_hat in fp32; the pair sum stays MD) */
        r.residual = RC_F32;
        r.norm_mid = RC_F32;
    }
    return r;
}

/* The KV cache's dtype: the run's dtype on the CPU when the rounding rules
 * make every cached key and value a value of it (K is RoPE's output or the
 * QKV GEMM's, V the GEMM's; an fp8 cache's dequantised values are too);
 * fp32 otherwise (--upcast rope keeps K fp32). The same on a GPU, whose
 * attention widens the keys and values it reads as the CPU's does. (The CPU
 * attention checks each stored value.) */
static rc_dtype engine_kv_dt(const rc_config *c, const rc_numerics *num)
{
    const rounding rr = rounding_rules(num);
    /* the absorbed latent cache holds kv_a_layernorm's output */
    const bool norm_ok = !(c->mla && num->mla_absorbed) || rr.norm == num->dt;
    /* (a q / k norm kept fp32 by --upcast norm before a partial RoPE needs no fp32 cache: RoPE rounds
     * the dims it passes as the ones it rotates, as PyTorch's torch.cat of the two parts gives one
     * dtype; cpu_rope, rck_rope_thread) */
    return num->dt != RC_F32 && rr.rope == num->dt && rr.linear == num->dt && norm_ok ? num->dt : RC_F32;
}

static int64_t engine_kv_size(const rc_config *c, const rc_numerics *num)
{
    return rc_dtype_size(engine_kv_dt(c, num));
}

/* How the MLP's intermediate buffers mlp_a and mlp_b hold their values -- the activations that take the
 * most device memory, rows x intermediate each: at the dtype's width on a GPU (its 2-byte ops,
 * rc_backend_ops.matmul_st, act_st, act_mul_st) when every value they hold is a value of the dtype and
 * every op that writes or reads them has a 2-byte form there: the up / gate GEMMs' and the activation's
 * outputs are rounded to the dtype (rr.linear, rr.act), the GEMMs' input is one too (the norm's output, or
 * with post_norm the residual stream: a GEMM of 2-byte operands, whose output cuBLAS writes in their type),
 * the weights are in the dtype (no fp8 weights, whose GEMMs quantize fp32 rows), no TP partials (tp > 1:
 * K slices of fp32 rows) and no capture hook (act_f32: the trace reads the buffers as floats). fp32
 * otherwise, and on the CPU (host memory). One rule for the engine and its memory estimate; the results
 * are the same either way (the ops' arithmetic is the same on the same values). */
static rc_dtype engine_mlp_st(const rc_config *c, const rc_numerics *num, bool host)
{
    const rounding rr = rounding_rules(num);
    const rc_dtype dt = num->dt, in = c->post_norm ? rr.residual : rr.norm;
    const bool two = !host && !num->act_f32 && (dt == RC_BF16 || dt == RC_F16) && num->wq.kind == RC_WQ_NONE &&
                     num->tp <= 1 && rr.linear == dt && rr.act == dt && in == dt;
    return two ? dt : RC_F32;
}

/* Every activation buffer's storage, in ENGINE_BUFS' order (rc_engine's x, h, qkv, att, mlp_a, mlp_b, tmp,
 * logits, mlp_c, lt, lh), one rule for the engine and its estimate: RC_F32, or the dtype's width under the
 * conditions of the MLP's buffers (engine_mlp_st: a GPU, no act_f32, a bf16 / fp16 run, weights in the
 * dtype, tp 1, the GEMMs' outputs and the attention block's input rounded to the dtype) and each buffer's
 * own, where every op that writes or reads it has a 2-byte form:
 *  qkv: the QKV GEMM's output, which a q / k norm (its output rounded to the dtype) and RoPE (the same:
 *       not under --upcast rope) work on in place and attention reads (the queries, and the keys and values
 *       it stores); fp32 with MPT's clamp (in place, no 2-byte form), for latent attention (its own
 *       projections fill it) and in a hybrid model (its linear layers);
 *  att: attention's output, rounded to the dtype (num.out_dt), which the output projection reads; fp32 with
 *       Qwen3-Next's output gate (multiplied on the host), latent attention (its own buffers) and a hybrid
 *       model;
 *  h:   the norms' output before the attention block and the MLP (rounded to the dtype: not under --upcast
 *       norm), which the QKV and up / gate GEMMs read; fp32 where other ops read it (an MoE layer's experts,
 *       latent attention's projections, linear layers, Qwen3-Next's output gate) and with BLOOM's embedding
 *       norm (its rows are copied into the residual stream);
 *  tmp: the output projection's output, which the residual add reads (and a parallel residual's pair sum);
 *       fp32 where a norm works on it in place (sandwich norms, OLMo2's post-norm), with learned positions
 *       (it holds the position embeddings' rows first) and for latent attention and linear layers;
 *  mlp_c: the down projection's output, which the residual add reads (a parallel residual's pair sum rounded
 *       to the dtype writes it); fp32 where a norm works on it in place, in an MoE model (the experts
 *       accumulate into it) and a hybrid one;
 *  logits: the LM head's output (rounded to the dtype: not under --upcast lm_head), which the log-softmax
 *       reads (logprobs_st); fp32 where the head is an fp32 array (--upcast lm_head, Baichuan2's NormHead,
 *       autocast's tied head) and with Gemma 2's final soft-cap (it works on them in place);
 *  x:   the residual stream (residual adds rounded to the dtype: not under residual=fp32 or autocast), which
 *       the embedding writes, the norms (and OLMo2's GEMMs) read and the adds update, a layer split's peer
 *       copies move as bytes; and lt, the LM head's rows of it, gathered as they are (whole floats: an even
 *       hidden size) for the final norm. fp32 with Gemma's embedding scale, learned positions, BLOOM's
 *       embedding norm, an MoE model with a post-norm (its experts read x), the output gate, latent attention
 *       and linear layers.
 * Everything else is fp32. The results are the same either way (the same arithmetic on the same values). */
static void engine_act_st(const rc_config *c, const rc_numerics *num, bool host, rc_dtype st[ENGINE_BUFS])
{
    const rounding rr = rounding_rules(num);
    const rc_dtype dt = num->dt, in = c->post_norm ? rr.residual : rr.norm;
    const bool base = !host && !num->act_f32 && (dt == RC_BF16 || dt == RC_F16) && num->wq.kind == RC_WQ_NONE &&
                      num->tp <= 1 && rr.linear == dt && in == dt;
    const bool plain_attn = base && !c->mla && linear_layers(c) == 0;
    const bool rope_ok = c->pos != RC_POS_ROTARY || c->rotary_dim == 0 || rr.rope == dt;
    for (int i = 0; i < ENGINE_BUFS; i++)
        st[i] = RC_F32;
    st[4] = st[5] = engine_mlp_st(c, num, host);
    if (plain_attn && rope_ok && c->clip_qkv <= 0 && (c->qk_norm == RC_QK_NORM_NONE || rr.norm == dt))
        st[2] = dt;
    if (plain_attn && !c->attn_out_gate && rr.attn.out_dt == dt)
        st[3] = dt;
    if (plain_attn && !c->attn_out_gate && c->n_experts == 0 && !c->embed_norm && rr.norm == dt)
        st[1] = dt;
    const bool no_norm_after = !c->sandwich_norm && !c->post_norm;
    const bool pair_ok = !c->parallel_residual || rr.residual_pair == dt;
    if (plain_attn && no_norm_after && pair_ok && c->pos != RC_POS_LEARNED)
        st[6] = dt;
    if (base && linear_layers(c) == 0 && c->n_experts == 0 && no_norm_after && pair_ok)
        st[8] = dt;
    const bool head16 = !(num->upcast & RC_UPCAST_LM_HEAD) && !c->norm_head &&
                        !(c->tie_embeddings && autocast_tied_head(num)); /* the head at 2 bytes (engine_weights) */
    if (base && head16 && rr.norm_final == dt && rr.logits == dt && !(c->final_softcap > 0))
        st[7] = dt;
    if (plain_attn && rr.residual == dt && c->hidden % 2 == 0 && !(c->embed_scale > 0) && c->pos != RC_POS_LEARNED &&
        !c->embed_norm && !c->attn_out_gate && !(c->n_experts > 0 && c->post_norm))
        st[0] = st[9] = dt; /* x, and lt: its rows gathered as they are */
}

/* --upcast lm_head: the head's fp32 values, in place when plan_weight says
 * so (the CPU reads any stored dtype exactly), else an own fp32 copy (a GPU;
 * the blas strategy over a 2-byte checkpoint: sgemm reads fp32) */
static bool lm_head_own_copy(const rc_model *m, const rc_numerics *num, bool host, rc_kernels k)
{
    return (num->upcast & RC_UPCAST_LM_HEAD) && plan_weight(RC_WK_MAT, m->w.lm_head.dt, RC_F32, host, k).copy;
}

/* autocast with a tied head in the dtype: the head needs its own rounded copy */
static bool autocast_tied_head(const rc_numerics *num)
{
    return num->mode == RC_PREC_AUTOCAST && !(num->upcast & RC_UPCAST_LM_HEAD);
}

/* one device's buffers: what run_layers reads through the engine's fields while the device is current */
struct rc_engine_stage {
    float *x, *h, *qkv, *att, *mlp_a, *mlp_b, *tmp, *mlp_c, *tp_parts;
    float *kv_k, *kv_v;                 /* its layers' K and V (2-byte elements when kv.dt is) */
    float *inv_freq_own, *slopes_own;   /* its copies of the RoPE table and ALiBi slopes */
    float *inv_freq, *inv_freq_local, *alibi_slopes;
    rc_moe_scratch *moe;
    rc_mla *mla;
    rc_mla *mla_x;                      /* mla=engine: the expanded prefill's scratch, */
    float *kv_x_k, *kv_x_v, *mla_mix;   /* its K / V cache of this device's layers and the row mix */
    float *w_arena;                     /* its layers' weights (not swapped: the weights point into it) */
    /* a hybrid model: the conv and recurrent states of its linear-attention layers, its own scratch */
    float *st_conv, *st_state, *gdn_qkvz, *gdn_ba, *gdn_out, *attn_gate;
};

static rc_status engine_weights(rc_engine *e)
{
    const rc_model *m = e->model;
    const rc_config *c = &m->cfg;
    rc_backend *be = e->be;
    const bool host = be->ops->host_memory;
    const int64_t VH = c->vocab * c->hidden;
    e->w = (rc_weights){0};
    e->w.layers = calloc((size_t)c->n_layers, sizeof *e->w.layers);
    if (!e->w.layers)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    place_ctx x = {.m = m, .round_dt = e->num.dt, .host = host, .fill = false, .kernels = be->kernels,
                   .head = !(e->num.upcast & RC_UPCAST_LM_HEAD) && !c->tie_embeddings,
                   .autocast = e->num.mode == RC_PREC_AUTOCAST, .ok = true, .plus_one = c->norm_w_offset,
                   .n_stages = e->n_stages, .l0 = e->stage_l0, .router_dt = router_gate_dt(c, &e->num)};
    rc_weights plan = e->w;
    place_all(&x, &plan); /* sizes only */
    if (!x.ok)
        return rc_errorf(RC_ERR_NOMEM, "weight sizes overflow");
    /* one arena per device (a layer split: each device's layers; device 0 also the model's own weights) */
    int64_t total[RC_MAX_DEVICES] = {0};
    unsigned char *staging[RC_MAX_DEVICES] = {0};
    float *arena[RC_MAX_DEVICES] = {0};
    rc_status s = RC_OK;
    for (int d = 0; d < e->n_stages && s == RC_OK; d++) {
        total[d] = x.s_used[d];
        if (total[d] == 0)
            continue;
        if (e->n_stages > 1)
            s = be->ops->set_device(be, d);
        if (s == RC_OK)
            s = be->ops->alloc(be, (total[d] + 3) / 4, d == 0 ? &e->w_arena : &e->stage[d].w_arena);
        if (s == RC_OK)
            arena[d] = d == 0 ? e->w_arena : e->stage[d].w_arena;
        if (s == RC_OK && !host)
            s = rc_alloc_aligned((void **)&staging[d], (total[d] + 3) / 4 * 4, 1, "weight staging");
    }
    if (s == RC_OK && e->n_stages > 1)
        s = be->ops->set_device(be, 0);
    if (s == RC_OK) {
        for (int d = 0; d < e->n_stages; d++) {
            x.s_used[d] = 0;
            x.s_arena[d] = host ? (unsigned char *)arena[d] : staging[d];
            x.s_dev[d] = arena[d];
        }
        x.cur = 0;
        x.used = 0;
        x.arena = x.s_arena[0];
        x.dev = x.s_dev[0];
        x.fill = true;
        place_all(&x, &e->w);
    }
    /* the staged image (each weight rounded by its rule, GEMM weights at the dtype's width, Gemma's
     * fp32(1 + w)) in one upload of its bytes per device, nothing rounded again */
    for (int d = 0; d < e->n_stages; d++) {
        if (!host && s == RC_OK && total[d] > 0)
            s = be->ops->upload(be, (const float *)staging[d], (total[d] + 3) / 4, RC_F32, arena[d]);
        free(staging[d]);
    }
    RC_TRY(s);
    /* the LM head: the embedding when tied (one copy), fp32 values under --upcast lm_head */
    if (e->num.upcast & RC_UPCAST_LM_HEAD) {
        if (lm_head_own_copy(m, &e->num, host, be->kernels)) {
            RC_TRY(be->ops->alloc(be, VH, &e->lm_head_own));
            if (host) {
                rc_wt_convert(m->w.lm_head, 0, VH, RC_F32, RC_F32, e->lm_head_own);
            } else {
                float *tmp;
                RC_TRY(rc_alloc_aligned((void **)&tmp, VH, sizeof *tmp, "LM head"));
                rc_wt_convert(m->w.lm_head, 0, VH, RC_F32, RC_F32, tmp);
                s = be->ops->upload(be, tmp, VH, RC_F32, e->lm_head_own);
                free(tmp);
                RC_TRY(s);
            }
            e->w.lm_head = rc_wt_f32(e->lm_head_own);
        } else {
            e->w.lm_head = m->w.lm_head; /* any stored dtype is exact in fp32 */
        }
    } else if (c->tie_embeddings && autocast_tied_head(&e->num)) {
        /* autocast: the embedding keeps its fp32 values, the head reads R(E) */
        RC_TRY(be->ops->alloc(be, VH, &e->lm_head_own));
        if (host) {
            rc_wt_convert(m->w.embed, 0, VH, e->num.dt, RC_F32, e->lm_head_own);
        } else {
            float *tmp;
            RC_TRY(rc_alloc_aligned((void **)&tmp, VH, sizeof *tmp, "LM head"));
            rc_wt_convert(m->w.embed, 0, VH, e->num.dt, RC_F32, tmp);
            s = be->ops->upload(be, tmp, VH, e->num.dt, e->lm_head_own);
            free(tmp);
            RC_TRY(s);
        }
        e->w.lm_head = rc_wt_f32(e->lm_head_own);
    } else if (c->tie_embeddings) {
        e->w.lm_head = e->w.embed;
    } /* else placed with the rest */
    e->w.inv_freq = m->w.inv_freq; /* an fp32 buffer in HF, never rounded */
    e->w.inv_freq_local = m->w.inv_freq_local;
    if (!host && c->rotary_dim > 0) { /* the global table, then the local one if any */
        const int64_t half = c->rotary_dim / 2;
        RC_TRY(be->ops->alloc(be, m->w.inv_freq_local ? 2 * half : half, &e->inv_freq_own));
        RC_TRY(be->ops->upload(be, m->w.inv_freq, half, RC_F32, e->inv_freq_own));
        e->w.inv_freq = e->inv_freq_own;
        if (m->w.inv_freq_local) {
            RC_TRY(be->ops->upload(be, m->w.inv_freq_local, half, RC_F32, e->inv_freq_own + half));
            e->w.inv_freq_local = e->inv_freq_own + half;
        }
    }
    e->w.alibi_slopes = m->w.alibi_slopes; /* fp32 as the family computes them, never rounded */
    if (!host && m->w.alibi_slopes) {
        RC_TRY(be->ops->alloc(be, c->n_heads, &e->slopes_own));
        RC_TRY(be->ops->upload(be, m->w.alibi_slopes, c->n_heads, RC_F32, e->slopes_own));
        e->w.alibi_slopes = e->slopes_own;
    }
    if (c->norm_head) {
        /* Baichuan2's NormHead, in eval: the weight is replaced once by
         * F.normalize(weight) computed in the weight's dtype (fp32 under
         * --upcast lm_head) */
        const rc_dtype hd = (e->num.upcast & RC_UPCAST_LM_HEAD) ? RC_F32 : e->num.dt;
        float *own;
        RC_TRY(be->ops->alloc(be, VH, &own));
        s = be->ops->normalize_rows(be, e->w.lm_head, c->vocab, c->hidden, 1e-12f, hd, own);
        if (e->lm_head_own)
            be->ops->free(be, e->lm_head_own);
        e->lm_head_own = own;
        e->w.lm_head = rc_wt_f32(own);
        RC_TRY(s);
    }
    return RC_OK;
}

rc_status rc_engine_mem_estimate(const rc_model *m, const rc_numerics *num, bool host_memory, rc_kernels kernels,
                                 int64_t n_slots, int64_t max_len, int64_t max_rows, rc_engine_mem *out)
{
    const rc_config *c = &m->cfg;
    *out = (rc_engine_mem){0, 0, 0, 0, 0, 0, 0};
    engine_sizes z;
    bool ok = engine_sizes_for(c, num, kernels, host_memory, n_slots, max_len, max_rows, &z);
    /* the weights: place_all's plan (the model's storage dtypes are known
     * without its data), plus the LM head's own copies */
    rc_layer_weights *layers = calloc((size_t)c->n_layers, sizeof *layers);
    if (!layers)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_weights plan = {.layers = layers};
    place_ctx x = {.m = m, .round_dt = num->dt, .host = host_memory, .fill = false, .kernels = kernels,
                   .head = !(num->upcast & RC_UPCAST_LM_HEAD) && !c->tie_embeddings,
                   .autocast = num->mode == RC_PREC_AUTOCAST, .ok = true, .router_dt = router_gate_dt(c, num)};
    place_all(&x, &plan);
    free(layers);
    int64_t w = x.used, kv = 0, act = 0, t, total = 0, VH = 0;
    ok = ok && x.ok && rc_mul_i64(c->vocab, c->hidden, &VH);
    if (lm_head_own_copy(m, num, host_memory, kernels)) { /* the fp32 head */
        ok = ok && rc_mul_i64(VH, 4, &t) && rc_add_i64(w, t, &w);
    } else if ((num->upcast & RC_UPCAST_LM_HEAD) && m->w.lm_head.mapped) { /* used in place */
        /* tied: the embedding's storage, counted already when the embedding is in place too */
        const bool embed_in_place = !plan_weight(RC_WK_MAT, m->w.embed.dt, num->dt, host_memory, kernels).copy;
        if (!(c->tie_embeddings && embed_in_place))
            ok = ok && rc_mul_i64(VH, rc_dtype_size(m->w.lm_head.dt), &t) && rc_add_i64(x.in_place, t, &x.in_place);
    }
    if (c->tie_embeddings && autocast_tied_head(num)) /* the head's R(E) */
        ok = ok && rc_mul_i64(VH, 4, &t) && rc_add_i64(w, t, &w);
    if (c->norm_head) /* NormHead's normalised copy */
        ok = ok && rc_mul_i64(VH, 4, &t) && rc_add_i64(w, t, &w);
    int64_t fw, fs; /* fp8 weights: the quantized copies and the W8A8 scratch */
    ok = ok && rc_fp8w_bytes(c, num, host_memory, z.dims[1][0], &fw, &fs) && rc_add_i64(w, fw, &w);
    ok = ok && rc_mul_i64(2 * engine_kv_size(c, num), z.kv_n, &kv);
    for (int i = 0; ok && i < ENGINE_BUFS; i++)
        ok = rc_add_i64(act, z.floats[i], &act);
    ok = ok && rc_mul_i64(2, z.ix_n, &t) && rc_add_i64(act, t, &act); /* int64 indices: 2 floats each */
    if (num->tp > 1) /* the row-parallel partials, and max_rows zero indices */
        ok = ok && rc_numel((int64_t[]){num->tp, z.dims[1][0], c->hidden}, 3, &t) && rc_add_i64(act, t, &act) &&
             rc_mul_i64(2, max_rows, &t) && rc_add_i64(act, t, &act);
    int64_t moe_f, moe_h; /* MoE: the layers' scratch */
    ok = ok && rc_moe_scratch_size(c, z.dims[1][0], num->wq.kind == RC_WQ_STORED, &moe_f, &moe_h) &&
         rc_add_i64(act, moe_f, &act);
    int64_t mla_f, mla_h; /* latent attention: its scratch and absorbed weights, and its host indices */
    ok = ok && rc_mla_scratch_size(c, num->mla_absorbed, z.dims[1][0], &mla_f, &mla_h) &&
         rc_add_i64(act, mla_f, &act) && rc_add_i64(moe_h, mla_h, &moe_h);
    if (mla_mixed(c, num)) { /* the engine form: the expanded form's scratch, K / V cache and row mix too */
        rc_numerics nx = *num;
        nx.mla_absorbed = false;
        int64_t xn;
        ok = ok && rc_mla_scratch_size(c, false, z.dims[1][0], &mla_f, &mla_h) && rc_add_i64(act, mla_f, &act) &&
             rc_add_i64(moe_h, mla_h, &moe_h) && mla_x_kv(c, num, n_slots, max_len, &xn) &&
             rc_mul_i64(2 * engine_kv_size(c, &nx), xn, &t) && rc_add_i64(kv, t, &kv) &&
             rc_mul_i64(3 * z.dims[1][0], c->n_heads * c->v_head_dim, &t) && rc_add_i64(act, t, &act) &&
             rc_mul_i64(z.dims[1][0], 8, &t) && rc_add_i64(moe_h, t, &moe_h);
    }
    int64_t st_n = 0, sc_n = 0, st = 0; /* a hybrid model's states (and their slots' counters) and scratch */
    ok = ok && hybrid_sizes(c, n_slots, max_rows, &st_n, &sc_n) && rc_add_i64(act, sc_n, &act) &&
         rc_mul_i64(4, st_n, &st) && (st_n == 0 || rc_add_i64(st, 8 * n_slots, &st));
    ok = ok && rc_mul_i64(4, act, &act) && rc_add_i64(act, fs, &act) && rc_add_i64(act, moe_h, &act);
    ok = ok && rc_add_i64(w, kv, &total) && rc_add_i64(total, act, &total) && rc_add_i64(total, st, &total);
    if (!ok)
        return rc_errorf(RC_ERR_NOMEM, "engine size overflows");
    *out = (rc_engine_mem){w, x.in_place, kv, act, total, st, 0};
    if (!host_memory) { /* the CUDA backend's workspaces on one GPU */
        int64_t ws[RC_CUWS_N];
        RC_TRY(rc_cuda_ws_bytes(m, num, kernels, n_slots, max_len, max_rows, 0, c->n_layers, true, ws));
        out->workspaces = rc_cuda_ws_total(ws);
    }
    return RC_OK;
}

/* ---- the CUDA backend's workspaces (cuda_ws.h; docs/gpu.md "Choosing the number of GPUs") ---- */

static int64_t ws_max(int64_t a, int64_t b) { return a > b ? a : b; }

rc_status rc_cuda_ws_bytes(const rc_model *m, const rc_numerics *num, rc_kernels k, int64_t n_slots,
                           int64_t max_len, int64_t max_rows, int64_t l_lo, int64_t l_hi, bool dev0,
                           int64_t ws[RC_CUWS_N])
{
    const rc_config *c = &m->cfg;
    for (int i = 0; i < RC_CUWS_N; i++)
        ws[i] = 0;
    engine_sizes z;
    if (!engine_sizes_for(c, num, k, false, n_slots, max_len, max_rows, &z))
        return rc_errorf(RC_ERR_NOMEM, "engine size overflows");
    const rc_dtype dt = num->dt;
    const bool engine = k == RC_KERNELS_ENGINE, dt2 = dt == RC_BF16 || dt == RC_F16;
    /* a call's rows (one pass over all rows on a GPU), sequences (rc_full_forward: at most the slots and the
     * rows), keys (the cache's positions); the LM head's rows per logit chunk */
    const int64_t R = z.dims[1][0], lr = z.logit_rows, S = n_slots < R ? n_slots : R, T = max_len;
    const int64_t V = c->vocab, H = c->hidden, cap = rc_cuws_attn_cap_floats();
    const rounding rr = rounding_rules(num);
    bool attn = false, moe = false;
    for (int64_t l = l_lo; l < l_hi; l++) {
        attn = attn || !rc_layer_is_linear(c, l);
        moe = moe || rc_layer_is_moe(c, l);
    }
    /* the host's index arrays: the batch descriptor (the most: 4 a sequence, 2 a row), the tokens, row lists
     * of at most the call's rows (a MoE expert's rows and their weights' indices: two lists) */
    ws[RC_CUWS_IDX] = rc_cuws_held(ws_max(rc_cuws_batch_bytes(S, R), rc_cuws_i64_bytes(2 * R)));
    /* attention: each form the engine runs (latent attention's absorbed decode and expanded prefill); a 2-byte
     * KV cache is read as it is (each element widened where the kernel reads it): no workspace of its own */
    for (int form = 0; attn && form < (mla_mixed(c, num) ? 2 : 1); form++) {
        int64_t nkv, d;
        rc_mla_attn_shape(c, form == 0 ? num->mla_absorbed : false, &nkv, &d);
        (void)nkv;
        ws[RC_CUWS_ATT] =
            ws_max(ws[RC_CUWS_ATT], rc_cuws_held(rc_cuws_attn_bytes(R, c->n_heads, T, d, cap, RC_SOFTMAX_MAX_CHUNKS)));
    }
    /* the GEMMs: every input is [rows, a weight's columns]; engine kernels copy an fp32 one to 2 bytes for
     * cuBLAS (not the MLP's down projection over 2-byte mlp_a), widen a 2-byte weight whose input is not in the
     * dtype (a rounding rule kept fp32); invariant kernels and cuBLAS over fp32 weights make an own copy of
     * each fp32 weight once (transposed / at 2 bytes), held while the engine lives */
    const bool widen = engine && dt2 &&
                       (num->mode == RC_PREC_AUTOCAST || rr.norm != dt || rr.attn.out_dt != dt || rr.act != dt ||
                        rr.linear != dt || rr.residual != dt || (dev0 && rr.norm_final != dt));
    int64_t kmax = 0, nmax = 0, shadow = 0;
    /* the GEMMs whose input is held at 2 bytes (engine_act_st), which cuBLAS reads as it is: the QKV and up /
     * gate GEMMs' (h, or x under a post-norm: both at 2 bytes), the output projection's (att), the down
     * projection's (mlp_b); every other GEMM input is fp32 */
    bool in2[RC_N_LAYER_WEIGHTS] = {0};
    const bool hx2 = z.st[1] != RC_F32 && z.st[0] != RC_F32;
    in2[RC_LW_w_qkv] = in2[RC_LW_w_up] = in2[RC_LW_w_gate] = hx2;
    in2[RC_LW_w_o] = z.st[3] != RC_F32;
    in2[RC_LW_w_down] = z.st[5] != RC_F32;
    for (int64_t l = l_lo; l < l_hi; l++) {
#define WS_LAYER_(f, rows, cols, present, kind)                                                                   \
    if (RC_WK_##kind == RC_WK_MAT && rc_weight_cond_holds_layer(c, present, l)) {                                \
        const int64_t nr = rc_dim_value(c, rows), nc = rc_dim_value(c, cols);                                    \
        const bool f32w = !dt2 || (rc_layer_weight_keeps_f32(c, RC_LW_##f) &&                                    \
                                   !(router_gate_dt(c, num) && RC_LW_##f == RC_LW_w_router));                    \
        if (!in2[RC_LW_##f])                                                                                     \
            kmax = ws_max(kmax, nc);                                                                             \
        if (!f32w)                                                                                               \
            nmax = ws_max(nmax, rc_cuws_mul(nr, nc));                                                            \
        else if (!engine)                                                                                        \
            shadow = rc_cuws_add(shadow, rc_cuws_elems(rc_cuws_mul(nr, nc), 4));                                 \
    }
        RC_LAYER_WEIGHT_FIELDS(WS_LAYER_)
#undef WS_LAYER_
    }
    int64_t half = rc_cuws_half_bytes(R, kmax);
    const int64_t VH = rc_cuws_mul(V, H);
    if (dev0) { /* the LM head: lr rows of H; the head's own copies */
        half = ws_max(half, rc_cuws_half_bytes(lr, H));
        const bool up_head = num->upcast & RC_UPCAST_LM_HEAD;
        const bool head2 = dt2 && !up_head && !c->norm_head && !(c->tie_embeddings && autocast_tied_head(num));
        if (head2)
            nmax = ws_max(nmax, VH);
        else if (!engine) /* an fp32 head (the dtype's, --upcast lm_head's, NormHead's, autocast's R(E)) */
            shadow = rc_cuws_add(shadow, rc_cuws_elems(VH, 4));
        else if (dt2 && c->tie_embeddings && autocast_tied_head(num) && !c->norm_head) /* R(E) at 2 bytes */
            shadow = rc_cuws_add(shadow, rc_cuws_elems(VH, 2));
        if (c->norm_head && dt2 && !up_head) /* NormHead: the 2-byte head widened once */
            ws[RC_CUWS_WIDE] = rc_cuws_held(rc_cuws_wide_bytes(VH));
        ws[RC_CUWS_LP] = rc_cuws_held(rc_cuws_lp_bytes(lr, V, 1));
        ws[RC_CUWS_TGT] = rc_cuws_held(rc_cuws_i32_bytes(lr));
        ws[RC_CUWS_IDX] = ws_max(ws[RC_CUWS_IDX], rc_cuws_held(rc_cuws_i32_bytes(R))); /* the tokens */
    }
    if (engine && dt2)
        ws[RC_CUWS_HALF] = rc_cuws_held(half);
    if (widen)
        ws[RC_CUWS_WIDE] = ws_max(ws[RC_CUWS_WIDE], rc_cuws_held(rc_cuws_wide_bytes(nmax)));
    if (num->wq.kind != RC_WQ_NONE) /* fp8 activations per tensor: an amax a row */
        ws[RC_CUWS_FP8] = rc_cuws_held(rc_cuws_fp8_bytes(R));
    if (moe)
        ws[RC_CUWS_MOE] = rc_cuws_held(rc_cuws_moe_bytes(R, c->n_experts, c->n_group > 0 ? c->n_group : 0));
    if (c->mla && attn) { /* latent attention: the gathers' index lists (rc_mla_scratch_size's host bytes) */
        for (int form = 0; form < (mla_mixed(c, num) ? 2 : 1); form++) {
            int64_t f, hb;
            if (!rc_mla_scratch_size(c, form == 0 ? num->mla_absorbed : false, R, &f, &hb))
                return rc_errorf(RC_ERR_NOMEM, "engine size overflows");
            ws[RC_CUWS_IDX] = ws_max(ws[RC_CUWS_IDX], rc_cuws_held(hb));
        }
        /* the absorbed form's fp32 W_UK of each layer (mla.c uk_t), one GEMM weight a head: the invariant GEMM's
         * transposed copy of those of the device's layers; cuBLAS's bf16 copy when the one layer's upload made
         * the buffer's values the dtype's */
        const int64_t uk = rc_cuws_mul(c->n_heads, rc_cuws_mul(c->kv_lora_rank, c->qk_nope_dim));
        if (num->mla_absorbed && !engine)
            shadow = rc_cuws_add(shadow, rc_cuws_mul(rc_cuws_mul(uk, l_hi - l_lo), 4));
        else if (num->mla_absorbed && dt2 && c->n_layers == 1)
            shadow = rc_cuws_add(shadow, rc_cuws_mul(uk, 2));
    }
    if (engine)
        ws[RC_CUWS_BLAS] = rc_cuws_blas_bytes(); /* exactly its size: not a growing workspace */
    ws[RC_CUWS_SHADOW] = shadow;
    bool linear = false;
    for (int64_t l = l_lo; l < l_hi; l++)
        linear = linear || rc_layer_is_linear(c, l);
    if (linear) { /* a hybrid model's Gated DeltaNet decode step: per sequence and value head */
        const rc_gdn_dims gd = {c->lin_hk, c->lin_hv, c->lin_dk, c->lin_dv};
        const int64_t step = rc_cuws_gdn_bytes(S, c->lin_hv, rc_gdn_step_scratch(&gd));
        /* the mixer of one sequence's call (up to min(R, T) tokens), its delta rule's scratch in the chunked form
         * (chunk=) or the recurrent one (invariant kernels, a cached token), the larger */
        const int64_t chunk = num->gdn_chunk > 0 ? num->gdn_chunk : RC_GDN_CHUNK_DEFAULT;
        const int64_t rs_c = rco_gdn_chunk_scratch(chunk, gd.dk, gd.dv), rs_r = rc_gdn_step_scratch(&gd);
        const int64_t mix = rc_cuws_gdn_mixer_bytes(R < T ? R : T, gd.hk, gd.hv, gd.dk, gd.dv, c->lin_conv_k,
                                                    rs_c > rs_r ? rs_c : rs_r, rc_cuws_attn_cap_floats());
        ws[RC_CUWS_GDN] = rc_cuws_held(step > mix ? step : mix);
    }
    return RC_OK;
}

int64_t rc_cuda_ws_total(const int64_t ws[RC_CUWS_N])
{
    int64_t t = 0;
    for (int i = 0; i < RC_CUWS_N; i++)
        t = rc_cuws_add(t, ws[i]);
    return t;
}

/* ---- a layer split over several devices (rc_engine.stage; docs/gpu.md "Several GPUs") ---- */


/* the engine's fields become device s's buffers (the current ones wait in stage[cur_stage]) */
static void stage_fields(rc_engine *e, int s)
{
    if (!e->stage || s == e->cur_stage)
        return;
    struct rc_engine_stage *o = &e->stage[e->cur_stage], *n = &e->stage[s];
#define STAGE_SWAP_(field, efield) o->field = e->efield, e->efield = n->field
    STAGE_SWAP_(x, x); STAGE_SWAP_(h, h); STAGE_SWAP_(qkv, qkv); STAGE_SWAP_(att, att); STAGE_SWAP_(mlp_a, mlp_a);
    STAGE_SWAP_(mlp_b, mlp_b); STAGE_SWAP_(tmp, tmp); STAGE_SWAP_(mlp_c, mlp_c); STAGE_SWAP_(tp_parts, tp_parts);
    STAGE_SWAP_(inv_freq_own, inv_freq_own); STAGE_SWAP_(slopes_own, slopes_own);
    STAGE_SWAP_(inv_freq, w.inv_freq); STAGE_SWAP_(inv_freq_local, w.inv_freq_local);
    STAGE_SWAP_(alibi_slopes, w.alibi_slopes); STAGE_SWAP_(moe, moe); STAGE_SWAP_(mla, mla);
    STAGE_SWAP_(mla_x, mla_x); STAGE_SWAP_(mla_mix, mla_mix);
    STAGE_SWAP_(st_conv, st.conv); STAGE_SWAP_(st_state, st.state); STAGE_SWAP_(gdn_qkvz, gdn_qkvz);
    STAGE_SWAP_(gdn_ba, gdn_ba); STAGE_SWAP_(gdn_out, gdn_out); STAGE_SWAP_(attn_gate, attn_gate);
#undef STAGE_SWAP_
    if (e->mla_x) { /* mla=engine: the expanded prefill's cache of this device's layers */
        o->kv_x_k = e->kv_x.k ? e->kv_x.k : (float *)e->kv_x.k16;
        o->kv_x_v = e->kv_x.v ? e->kv_x.v : (float *)e->kv_x.v16;
        if (e->kv_x.dt == RC_F32) {
            e->kv_x.k = n->kv_x_k;
            e->kv_x.v = n->kv_x_v;
        } else {
            e->kv_x.k16 = (uint16_t *)n->kv_x_k;
            e->kv_x.v16 = (uint16_t *)n->kv_x_v;
        }
    }
    o->kv_k = e->kv.k ? e->kv.k : (float *)e->kv.k16;
    o->kv_v = e->kv.v ? e->kv.v : (float *)e->kv.v16;
    if (e->kv.dt == RC_F32) {
        e->kv.k = n->kv_k;
        e->kv.v = n->kv_v;
    } else {
        e->kv.k16 = (uint16_t *)n->kv_k;
        e->kv.v16 = (uint16_t *)n->kv_v;
    }
    e->cur_stage = s;
}

/* carry the residual stream's first n floats to device s, and make s current */
static rc_status stage_enter(rc_engine *e, int s, int64_t n)
{
    if (s == e->cur_stage)
        return RC_OK;
    const int from = e->cur_stage;
    float *src = e->x;
    const int64_t nf = e->x_st == RC_F32 ? n : n / 2 + n % 2; /* n values in floats (engine_act_st) */
    RC_TRY(e->be->ops->copy_peer(e->be, e->stage[s].x, s, src, from, nf));
    RC_TRY(e->be->ops->set_device(e->be, s));
    stage_fields(e, s);
    return RC_OK;
}

/* the layers of [l0, l1) that hold a KV cache: all of them, or a hybrid model's attention layers (one, device
 * 0's, when every layer is linear: the unused layer the cache is sized for) */
static int64_t kv_layers_in(const rc_config *c, int64_t l0, int64_t l1)
{
    if (linear_layers(c) == 0)
        return l1 - l0;
    int64_t n = 0;
    for (int64_t l = l0; l < l1; l++)
        n += !rc_layer_is_linear(c, l);
    return linear_layers(c) == c->n_layers && l0 == 0 ? 1 : n;
}

/* the current device's KV cache index of layer l */
static int64_t kv_index(const rc_engine *e, int64_t l)
{
    const int64_t l0 = e->stage_l0[e->cur_stage];
    return e->st.index ? e->st.index[l] - kv_layers_in(&e->model->cfg, 0, l0) : l - l0;
}

/* the current device's state cache index of linear-attention layer l */
static int64_t state_index(const rc_engine *e, int64_t l)
{
    int64_t n = 0;
    for (int64_t j = 0; j < e->stage_l0[e->cur_stage]; j++)
        n += rc_layer_is_linear(&e->model->cfg, j);
    return e->st.index[l] - n;
}

/* A hybrid model's buffers on the current device for its layers [l0, l1): the conv and recurrent states of
 * their linear-attention layers (every slot's, zeroed; none: NULL) and the scratch rows of max_rows (in_proj_qkvz,
 * in_proj_ba, the mixers' outputs, the attention gate): the floats hybrid_sizes counts */
static rc_status hybrid_buffers(rc_engine *e, int64_t l0, int64_t l1, float **conv, float **state, float **qkvz,
                                float **ba, float **out, float **gate)
{
    const rc_config *c = &e->model->cfg;
    rc_backend *be = e->be;
    int64_t lin = 0, cn, sn;
    for (int64_t l = l0; l < l1; l++)
        lin += rc_layer_is_linear(c, l);
    /* (within hybrid_sizes' total, checked) */
    cn = lin * e->kv.n_slots * rc_dim_value(c, RC_DIM_LCONV) * c->lin_conv_k;
    sn = lin * e->kv.n_slots * c->lin_hv * c->lin_dk * c->lin_dv;
    if (lin > 0) {
        RC_TRY(be->ops->alloc(be, cn, conv));
        RC_TRY(be->ops->alloc(be, sn, state));
        RC_TRY(be->ops->zero(be, *conv, cn));
        RC_TRY(be->ops->zero(be, *state, sn));
    }
    const int64_t rows = e->max_rows;
    RC_TRY(be->ops->alloc(be, rows * rc_dim_value(c, RC_DIM_LQKVZ), qkvz));
    RC_TRY(be->ops->alloc(be, rows * rc_dim_value(c, RC_DIM_LBA), ba));
    RC_TRY(be->ops->alloc(be, rows * rc_dim_value(c, RC_DIM_LV), out));
    if (c->attn_out_gate)
        RC_TRY(be->ops->alloc(be, rows * c->n_heads * c->head_dim, gate));
    return RC_OK;
}

/* device s's buffers (s >= 1), allocated on it: the activations of engine_sizes (all but the LM head's),
 * the TP partials, the MoE and latent-attention scratch, the RoPE table and ALiBi slopes, the KV cache of
 * its layers (kv_per_layer floats of each of K and V a layer) */
static rc_status stage_create(rc_engine *e, int s, const engine_sizes *z, int64_t kv_per_layer)
{
    const rc_model *m = e->model;
    const rc_config *c = &m->cfg;
    rc_backend *be = e->be;
    struct rc_engine_stage *st = &e->stage[s];
    RC_TRY(be->ops->set_device(be, s));
    float **bufs[] = {&st->x, &st->h, &st->qkv, &st->att, &st->mlp_a, &st->mlp_b, &st->tmp, &st->mlp_c};
    const int which[] = {0, 1, 2, 3, 4, 5, 6, 8}; /* their rows of engine_sizes.dims */
    for (int i = 0; i < 8; i++)
        RC_TRY(be->ops->alloc(be, z->floats[which[i]], bufs[i]));
    if (e->num.tp > 1)
        RC_TRY(be->ops->alloc(be, (int64_t)e->num.tp * e->chunk_rows * c->hidden, &st->tp_parts));
    if (c->n_experts > 0)
        RC_TRY(rc_moe_scratch_create(be, c, e->chunk_rows, e->num.wq.kind == RC_WQ_STORED, &st->moe));
    if (c->mla)
        RC_TRY(rc_mla_create(be, m, e->num.mla_absorbed, e->num.dt, e->chunk_rows, &st->mla));
    st->inv_freq = m->w.inv_freq;
    st->inv_freq_local = m->w.inv_freq_local;
    if (c->rotary_dim > 0) {
        const int64_t half = c->rotary_dim / 2;
        RC_TRY(be->ops->alloc(be, m->w.inv_freq_local ? 2 * half : half, &st->inv_freq_own));
        RC_TRY(be->ops->upload(be, m->w.inv_freq, half, RC_F32, st->inv_freq_own));
        st->inv_freq = st->inv_freq_own;
        if (m->w.inv_freq_local) {
            RC_TRY(be->ops->upload(be, m->w.inv_freq_local, half, RC_F32, st->inv_freq_own + half));
            st->inv_freq_local = st->inv_freq_own + half;
        }
    }
    st->alibi_slopes = m->w.alibi_slopes;
    if (m->w.alibi_slopes) {
        RC_TRY(be->ops->alloc(be, c->n_heads, &st->slopes_own));
        RC_TRY(be->ops->upload(be, m->w.alibi_slopes, c->n_heads, RC_F32, st->slopes_own));
        st->alibi_slopes = st->slopes_own;
    }
    const int64_t kv_n = kv_per_layer * kv_layers_in(c, e->stage_l0[s], e->stage_l0[s + 1]);
    const int64_t kv_floats = e->kv.dt == RC_F32 ? kv_n : (kv_n + 1) / 2; /* 2-byte elements */
    if (kv_n > 0) { /* (a hybrid model's device of linear-attention layers only: none) */
        RC_TRY(be->ops->alloc(be, kv_floats, &st->kv_k));
        RC_TRY(be->ops->alloc(be, kv_floats, &st->kv_v));
    }
    if (linear_layers(c) > 0 || c->attn_out_gate) /* its linear layers' states, its own scratch */
        RC_TRY(hybrid_buffers(e, e->stage_l0[s], e->stage_l0[s + 1], &st->st_conv, &st->st_state, &st->gdn_qkvz,
                              &st->gdn_ba, &st->gdn_out, &st->attn_gate));
    return be->ops->set_device(be, 0);
}

static void stage_free(rc_engine *e, struct rc_engine_stage *st)
{
    rc_backend *be = e->be;
    rc_moe_scratch_free(be, st->moe);
    rc_mla_free(be, st->mla);
    rc_mla_free(be, st->mla_x);
    float *bufs[] = {st->x,     st->h,     st->qkv,          st->att,        st->mlp_a, st->mlp_b, st->tmp,
                     st->mlp_c, st->tp_parts, st->kv_k, st->kv_v, st->inv_freq_own, st->slopes_own, st->w_arena,
                     st->kv_x_k, st->kv_x_v, st->mla_mix, st->st_conv, st->st_state, st->gdn_qkvz, st->gdn_ba,
                     st->gdn_out, st->attn_gate};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
}

/* A layer split's estimate under fp8 weights: each layer's quantized copies (rc_fp8w_layer_bytes) added to
 * its bytes lb[l] (they live on the layer's device); *scratch, the W8A8 scratch of `rows` rows each device
 * holds (bytes). false on overflow. */
static bool split_fp8_bytes(const rc_config *c, const rc_numerics *num, int64_t rows, int64_t *lb, int64_t *scratch)
{
    int64_t fw, t;
    *scratch = 0;
    if (num->wq.kind == RC_WQ_NONE)
        return true;
    if (!rc_fp8w_bytes(c, num, false, rows, &fw, scratch))
        return false;
    for (int64_t l = 0; lb && l < c->n_layers; l++)
        if (!rc_fp8w_layer_bytes(c, num, false, l, &t) || !rc_add_i64(lb[l], t, &lb[l]))
            return false;
    return true;
}

/* A hybrid model's share of device d in a layer split l0 over n_dev devices: *kv, the KV cache of its attention
 * layers; *extra, the conv and recurrent states of its linear-attention layers (device 0: and the slots'
 * counters) and, on the devices past 0, their own linear-attention scratch (device 0's is in all's
 * activations). One device: all's KV and state caches. false on overflow. */
static bool split_hybrid_share(const rc_config *c, const rc_engine_mem *all, int64_t n_slots, int64_t max_rows,
                               int n_dev, const int64_t *l0, int d, int64_t *kv, int64_t *extra)
{
    *kv = all->kv_cache;
    *extra = all->state_cache;
    if (n_dev == 1)
        return true;
    const int64_t nl = linear_layers(c), na = c->n_layers - nl;
    int64_t lin = 0, att = 0, st_n, sc_n, t;
    for (int64_t l = l0[d]; l < l0[d + 1]; l++) {
        lin += rc_layer_is_linear(c, l);
        att += !rc_layer_is_linear(c, l);
    }
    /* (every layer linear: the one unused KV layer the engine sizes is device 0's) */
    *kv = na > 0 ? all->kv_cache / na * att : d == 0 ? all->kv_cache : 0;
    if (!hybrid_sizes(c, n_slots, max_rows, &st_n, &sc_n))
        return false;
    const int64_t counters = st_n > 0 ? 8 * n_slots : 0;
    *extra = nl > 0 ? (all->state_cache - counters) / nl * lin : 0;
    return rc_add_i64(*extra, d == 0 ? counters : 0, extra) &&
           (d == 0 || (rc_mul_i64(4, sc_n, &t) && rc_add_i64(*extra, t, extra)));
}

rc_status rc_layer_split(const rc_model *m, const rc_numerics *num, rc_kernels kernels, int n_dev,
                         const int64_t *given, int64_t n_slots, int64_t max_len, int64_t max_rows, int64_t *l0,
                         int64_t *bytes, int64_t *weights, int64_t *kv)
{
    const rc_config *c = &m->cfg;
    const int64_t L = c->n_layers;
    if (n_dev < 1 || n_dev > RC_MAX_DEVICES)
        return rc_errorf(RC_ERR_USAGE, "--gpus %d: between 1 and %d", n_dev, RC_MAX_DEVICES);
    l0[0] = 0;
    l0[n_dev] = L;
    if (n_dev == 1 && !bytes && !weights && !kv)
        return RC_OK;
    if (n_dev > L)
        return rc_errorf(RC_ERR_USAGE, "--gpus %d: the model runs %lld layers, and each GPU holds at least one",
                         n_dev, (long long)L);
    if (given) {
        int64_t sum = 0;
        for (int d = 0; d < n_dev; d++) {
            if (given[d] < 1)
                return rc_errorf(RC_ERR_USAGE, "--layer-split: GPU %d gets %lld layers; each holds at least one", d,
                                 (long long)given[d]);
            sum += given[d];
        }
        if (sum != L)
            return rc_errorf(RC_ERR_USAGE, "--layer-split: %lld layers in all, but the model runs %lld "
                             "(num_hidden_layers, or --layers)", (long long)sum, (long long)L);
    }
    /* each layer's weights as a GPU holds them, and what device 0 holds besides (embedding, final norm, LM head
     * and its own copies): the estimate's weights less the layers' */
    rc_engine_mem all;
    RC_TRY(rc_engine_mem_estimate(m, num, false, kernels, n_slots, max_len, max_rows, &all));
    int64_t *lb = calloc((size_t)L, sizeof *lb);
    rc_layer_weights *layers = calloc((size_t)L, sizeof *layers);
    if (!lb || !layers) {
        free(lb);
        free(layers);
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    rc_weights plan = {.layers = layers};
    place_ctx x = {.m = m, .round_dt = num->dt, .host = false, .fill = false, .kernels = kernels,
                   .head = !(num->upcast & RC_UPCAST_LM_HEAD) && !c->tie_embeddings,
                   .autocast = num->mode == RC_PREC_AUTOCAST, .ok = true, .layer_bytes = lb,
                   .router_dt = router_gate_dt(c, num)};
    place_all(&x, &plan);
    free(layers);
    int64_t fp8_scratch = 0; /* fp8 weights: each layer's copies with its bytes */
    if (!split_fp8_bytes(c, num, 1, lb, &fp8_scratch)) {
        free(lb);
        return rc_errorf(RC_ERR_NOMEM, "engine size overflows");
    }
    int64_t layer_sum = 0;
    for (int64_t l = 0; l < L; l++)
        layer_sum += lb[l];
    const int64_t head = all.weights_copy - layer_sum;
    if (given) {
        for (int d = 0; d < n_dev; d++)
            l0[d + 1] = l0[d] + given[d];
    } else { /* the boundaries nearest to equal shares of the bytes, each GPU at least one layer */
        const double T = (double)all.weights_copy;
        double cum_at_best = 0.0;
        for (int d = 1; d < n_dev; d++) {
            const double want = T * d / n_dev;
            int64_t best = l0[d - 1] + 1;
            double cum = (double)head;
            for (int64_t l = 0; l < best; l++)
                cum += (double)lb[l];
            cum_at_best = cum;
            for (int64_t l = best + 1; l <= L - (n_dev - d); l++) {
                cum += (double)lb[l - 1];
                if (fabs(cum - want) < fabs(cum_at_best - want)) {
                    best = l;
                    cum_at_best = cum;
                }
            }
            l0[d] = best;
        }
    }
    /* each device's share of the estimate: its layers' weights (device 0: and the model's own), its layers'
     * KV cache, and the activations: device 0 all of them, the others all but the LM head's buffers and the
     * host's index arrays (engine_sizes: the 8 buffers of a layer; the TP partials; the MoE and latent-attention
     * scratch; the RoPE table and ALiBi slopes) */
    engine_sizes z;
    int64_t other_act = 0, t = 0, moe_f = 0, moe_h = 0, mla_f = 0, mla_h = 0;
    bool ok = engine_sizes_for(c, num, kernels, false, n_slots, max_len, max_rows, &z);
    const int which[] = {0, 1, 2, 3, 4, 5, 6, 8};
    for (int i = 0; ok && i < 8; i++)
        ok = rc_add_i64(other_act, z.floats[which[i]], &other_act);
    if (ok && num->tp > 1)
        ok = rc_numel((int64_t[]){num->tp, z.dims[1][0], c->hidden}, 3, &t) && rc_add_i64(other_act, t, &other_act);
    ok = ok && rc_moe_scratch_size(c, z.dims[1][0], num->wq.kind == RC_WQ_STORED, &moe_f, &moe_h) &&
         rc_add_i64(other_act, moe_f, &other_act) &&
         rc_mla_scratch_size(c, num->mla_absorbed, z.dims[1][0], &mla_f, &mla_h) &&
         rc_add_i64(other_act, mla_f, &other_act) &&
         rc_add_i64(other_act, c->rotary_dim + (m->w.alibi_slopes ? c->n_heads : 0), &other_act);
    if (ok && mla_mixed(c, num)) /* mla=engine: the expanded prefill's scratch and row mix (mla_x_create) */
        ok = rc_mla_scratch_size(c, false, z.dims[1][0], &mla_f, &mla_h) && rc_add_i64(other_act, mla_f, &other_act) &&
             rc_mul_i64(3 * z.dims[1][0], c->n_heads * c->v_head_dim, &t) && rc_add_i64(other_act, t, &other_act);
    ok = ok && rc_mul_i64(4, other_act, &other_act);
    /* fp8 weights: each device's own W8A8 scratch */
    ok = ok && split_fp8_bytes(c, num, z.dims[1][0], NULL, &fp8_scratch) &&
         rc_add_i64(other_act, fp8_scratch, &other_act);
    const bool hybrid = linear_layers(c) > 0 || c->attn_out_gate;
    for (int d = 0; ok && d < n_dev; d++) {
        int64_t w = d == 0 ? head : 0, k = 0, b = 0, hy = 0;
        for (int64_t l = l0[d]; l < l0[d + 1]; l++)
            w += lb[l];
        /* (one device: the estimate's own KV cache, a hybrid model's attention layers only) */
        ok = (n_dev == 1 ? (k = all.kv_cache, true) : rc_mul_i64(all.kv_cache / L, l0[d + 1] - l0[d], &k)) &&
             rc_add_i64(w, k, &b) &&
             rc_add_i64(b, d == 0 ? all.activations + all.state_cache : other_act, &b);
        if (ok && hybrid) /* its attention layers' KV cache, its linear layers' states, its own scratch */
            ok = split_hybrid_share(c, &all, n_slots, max_rows, n_dev, l0, d, &k, &hy) && rc_add_i64(w, k, &b) &&
                 rc_add_i64(b, d == 0 ? all.activations : other_act, &b) && rc_add_i64(b, hy, &b);
        int64_t ws[RC_CUWS_N]; /* the backend's workspaces on the device */
        if (ok && rc_cuda_ws_bytes(m, num, kernels, n_slots, max_len, max_rows, l0[d], l0[d + 1], d == 0, ws) != RC_OK)
            ok = false;
        ok = ok && rc_add_i64(b, rc_cuda_ws_total(ws), &b);
        if (weights)
            weights[d] = w;
        if (kv)
            kv[d] = k;
        if (bytes)
            bytes[d] = b;
    }
    free(lb);
    if (!ok)
        return rc_errorf(RC_ERR_NOMEM, "engine size overflows");
    return RC_OK;
}

void rc_engine_free(rc_engine *e)
{
    if (!e)
        return;
    if (e->stage) { /* device 0's buffers in the fields, the others' freed here */
        stage_fields(e, 0);
        if (e->be->ops->set_device && e->be->ops->set_device(e->be, 0) != RC_OK)
            rc_clear_error();
        for (int d = 1; d < e->n_stages; d++)
            stage_free(e, &e->stage[d]);
        free(e->stage);
    }
    free(e->w.layers);
    free(e->ix);
    free(e->tp_zero_rows);
    if (e->tp_parts)
        e->be->ops->free(e->be, e->tp_parts);
    rc_fp8w_free(e->fp8w);
    rc_moe_scratch_free(e->be, e->moe);
    rc_mla_free(e->be, e->mla);
    rc_mla_free(e->be, e->mla_x);
    free(e->mla_mix_ix);
    free(e->st.kind);
    free(e->st.index);
    free(e->st.absorbed);
    float *bufs[] = {e->st.conv, e->st.state, e->gdn_qkvz, e->gdn_ba, e->gdn_out, e->attn_gate, e->x, e->h, e->qkv,
                     e->att, e->mlp_a, e->mlp_b, e->tmp, e->logits, e->mlp_c, e->lt, e->lh,
                     e->kv.k ? e->kv.k : (float *)e->kv.k16, e->kv.v ? e->kv.v : (float *)e->kv.v16,
                     e->kv_x.k ? e->kv_x.k : (float *)e->kv_x.k16, e->kv_x.v ? e->kv_x.v : (float *)e->kv_x.v16,
                     e->mla_mix,
                     e->w_arena, e->lm_head_own, e->inv_freq_own, e->slopes_own};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            e->be->ops->free(e->be, bufs[i]);
    free(e);
}

/* What the autocast emulation covers: the rules were checked against
 * torch.autocast for the rotary families (HF Llama / Qwen2 / Mistral,
 * GPT-NeoX, on the CPU and the CUDA backend); the ALiBi families' masks and biases, GPT-2's gelu_new (fp32 on
 * CUDA, bf16 on the CPU) and Baichuan2's fp32 RoPE / SDPA paths were not. */
rc_status rc_autocast_supported(const rc_config *c, const rc_numerics *num)
{
    if (num->residual_f32) { /* checked against the rotary families only (tools/fixtures/make_megatron_fixtures.py) */
        if (num->mode == RC_PREC_AUTOCAST)
            return rc_errorf(RC_ERR_USAGE, "residual=fp32 is Megatron's flag for a pure-dtype model; mode=autocast "
                             "keeps the residual stream in fp32 already");
        if (num->dt == RC_F32)
            return rc_errorf(RC_ERR_USAGE, "residual=fp32 needs dtype=bf16 or fp16 (an fp32 model's residual "
                             "stream is fp32 already)");
        if (c && (c->pos != RC_POS_ROTARY || c->rope_f32 || c->attn_f32 || c->norm_head || c->embed_norm ||
                  c->clip_qkv > 0 || c->qk_norm != RC_QK_NORM_NONE || c->post_norm || c->norm_w_f32 ||
                  c->sandwich_norm || c->n_experts > 0 || c->mla))
            return rc_errorf(RC_ERR_UNSUPPORTED, "residual=fp32 is emulated for the rotary families (llama, qwen2, "
                             "mistral, gpt_neox) only; this model (%s) is not covered", c->model_type);
    }
    if (num->mode != RC_PREC_AUTOCAST)
        return RC_OK;
    if (num->dt == RC_F32)
        return rc_errorf(RC_ERR_USAGE, "mode=autocast needs dtype=bf16 or fp16 (the dtype autocast casts GEMMs to)");
    if (num->upcast & ~(unsigned)RC_UPCAST_LM_HEAD)
        return rc_errorf(RC_ERR_USAGE, "mode=autocast keeps norms, RoPE and softmax in fp32 already; of the upcasts "
                         "only lm-head=fp32 applies");
    if (c && (c->pos != RC_POS_ROTARY || c->rope_f32 || c->attn_f32 || c->norm_head || c->embed_norm || c->clip_qkv > 0 ||
              c->qk_norm != RC_QK_NORM_NONE || c->post_norm || c->norm_w_f32 || c->sandwich_norm || c->n_experts > 0 ||
              c->mla))
        return rc_errorf(RC_ERR_UNSUPPORTED, "mode=autocast is emulated for the rotary families (llama, qwen2, "
                         "mistral, gpt_neox) only; this model (%s) is not covered", c->model_type);
    return RC_OK;
}

/* a hybrid model's cache kinds, and device 0's states and scratch (backend memory; a layer split: the other
 * devices' in stage_create) */
static rc_status hybrid_create(rc_engine *e, int64_t n_slots, int64_t max_rows)
{
    const rc_config *c = &e->model->cfg;
    rc_state_cache *kv = &e->st;
    int64_t st_n, sc_n;
    if (!hybrid_sizes(c, n_slots, max_rows, &st_n, &sc_n))
        return rc_errorf(RC_ERR_NOMEM, "state cache size overflows");
    RC_TRY(rc_calloc((void **)&kv->kind, (size_t)c->n_layers, sizeof *kv->kind, "cache kinds"));
    RC_TRY(rc_calloc((void **)&kv->index, (size_t)c->n_layers, sizeof *kv->index, "cache kinds"));
    RC_TRY(rc_calloc((void **)&kv->absorbed, (size_t)n_slots, sizeof *kv->absorbed, "state cache"));
    int64_t n_kv = 0, n_st = 0;
    for (int64_t l = 0; l < c->n_layers; l++) {
        kv->kind[l] = rc_layer_is_linear(c, l) ? RC_CACHE_STATE : RC_CACHE_KV;
        kv->index[l] = kv->kind[l] == RC_CACHE_STATE ? n_st++ : n_kv++;
    }
    e->kv.n_layers = n_kv > 0 ? n_kv : 1; /* (one unused layer when every layer is linear: sized so) */
    kv->n_state_layers = n_st;
    kv->n_slots = n_slots;
    kv->gd = (rc_gdn_dims){c->lin_hk, c->lin_hv, c->lin_dk, c->lin_dv};
    kv->conv_c = rc_dim_value(c, RC_DIM_LCONV);
    kv->conv_k = c->lin_conv_k;
    kv->state_dt = e->num.state_dtype ? e->num.dt : RC_F32;
    return hybrid_buffers(e, 0, e->n_stages > 1 ? e->stage_l0[1] : c->n_layers, &kv->conv, &kv->state, &e->gdn_qkvz,
                          &e->gdn_ba, &e->gdn_out, &e->attn_gate);
}

/* mla=engine: the expanded form's projections (its own scratch), its K / V
 * cache (zeroed: a prefill call also runs its decode rows expanded, over keys
 * no call wrote; their outputs are not used) and the row mix */
static rc_status mla_x_create(rc_engine *e, const rc_model *m, int64_t n_slots, int64_t max_len)
{
    const rc_config *c = &m->cfg;
    rc_backend *be = e->be;
    rc_numerics nx = e->num;
    nx.mla_absorbed = false;
    int64_t nkv, d, n;
    rc_mla_attn_shape(c, false, &nkv, &d);
    if (!mla_x_kv(c, &e->num, n_slots, max_len, &n))
        return rc_errorf(RC_ERR_NOMEM, "KV cache size overflows");
    /* the prefill's keys and values are the fresh projections, not read back through an fp8 cache */
    e->kv_x = (rc_kv_cache){.n_layers = e->kv.n_layers, .n_slots = n_slots, .n_kv_heads = nkv, .max_len = max_len,
                            .head_dim = d, .dt = engine_kv_dt(c, &nx), .quant = RC_KV_AUTO,
                            .k_scale = 1.0f, .v_scale = 1.0f, .deq_dt = e->num.dt};
    /* a layer split: device 0's cache holds its own layers only, as its KV cache */
    const int64_t per_layer = n / (c->n_layers > 0 ? c->n_layers : 1);
    const int64_t n0 = e->n_stages > 1 ? per_layer * e->stage_l0[1] : n;
    const int64_t fl = e->kv_x.dt == RC_F32 ? n0 : n0 / 2 + 1;
    RC_TRY(rc_mla_create(be, m, false, e->num.dt, e->chunk_rows, &e->mla_x));
    RC_TRY(be->ops->alloc(be, fl, &e->kv_x.k));
    RC_TRY(be->ops->alloc(be, fl, &e->kv_x.v));
    if (!be->ops->zero)
        return rc_errorf(RC_ERR_UNSUPPORTED, "backend %s has no zero op (mla=engine)", be->ops->name);
    RC_TRY(be->ops->zero(be, e->kv_x.k, fl));
    RC_TRY(be->ops->zero(be, e->kv_x.v, fl));
    if (e->kv_x.dt != RC_F32) {
        e->kv_x.k16 = (uint16_t *)e->kv_x.k;
        e->kv_x.v16 = (uint16_t *)e->kv_x.v;
        e->kv_x.k = e->kv_x.v = NULL;
    }
    RC_TRY(be->ops->alloc(be, 3 * e->chunk_rows * c->n_heads * c->v_head_dim, &e->mla_mix));
    /* a layer split: each other device's own scratch, row mix and cache of its layers (stage_fields swaps them) */
    for (int g = 1; g < e->n_stages; g++) {
        struct rc_engine_stage *st = &e->stage[g];
        const int64_t nd = per_layer * (e->stage_l0[g + 1] - e->stage_l0[g]);
        const int64_t fd = e->kv_x.dt == RC_F32 ? nd : nd / 2 + 1;
        RC_TRY(be->ops->set_device(be, g));
        RC_TRY(rc_mla_create(be, m, false, e->num.dt, e->chunk_rows, &st->mla_x));
        RC_TRY(be->ops->alloc(be, fd, &st->kv_x_k));
        RC_TRY(be->ops->alloc(be, fd, &st->kv_x_v));
        RC_TRY(be->ops->zero(be, st->kv_x_k, fd));
        RC_TRY(be->ops->zero(be, st->kv_x_v, fd));
        RC_TRY(be->ops->alloc(be, 3 * e->chunk_rows * c->n_heads * c->v_head_dim, &st->mla_mix));
    }
    if (e->n_stages > 1)
        RC_TRY(be->ops->set_device(be, 0));
    return rc_alloc_aligned((void **)&e->mla_mix_ix, e->chunk_rows, sizeof *e->mla_mix_ix, "MLA row mix");
}

rc_status rc_engine_create(const rc_model *m, rc_backend *be, const rc_numerics *num,
                           int64_t n_slots, int64_t max_len, int64_t max_rows, rc_engine **out)
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
    e->num = *num;
    e->max_rows = max_rows;
    if (!(num->dt == RC_F32 || num->dt == RC_BF16 || num->dt == RC_F16) ||
        !(num->logprob_dt == RC_F32 || num->logprob_dt == num->dt) || !(num->temperature > 0.0f)) {
        free(e);
        return rc_errorf(RC_ERR_USAGE, "invalid numerics (dtype, log-prob dtype or temperature)");
    }
    rc_status s = rc_autocast_supported(c, num);
    if (s == RC_OK)
        s = rc_tp_check(c, num);
    if (s == RC_OK && c->n_experts > 0 && (num->tp > 1 || num->wq.kind == RC_WQ_FP8))
        s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: mixture-of-experts models are not emulated under tp > 1 or "
                      "weights=fp8 yet (weights=as-stored on an FP8 checkpoint is)", c->model_type);
    if (s == RC_OK && c->mla && (num->tp > 1 || num->wq.kind == RC_WQ_FP8))
        s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: latent attention (MLA) is not emulated under tp > 1 or fp8 weights "
                      "yet", c->model_type);
    if (s == RC_OK && c->n_experts == 0 && (num->router_f32 || num->route_replay))
        s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: router= and routing= set a mixture-of-experts router; this model has "
                      "none", c->model_type);
    if (s == RC_OK)
        s = rc_fp8w_supported(c, num);
    if (s == RC_OK && (linear_layers(c) > 0 || c->attn_out_gate) &&
        (num->tp > 1 || num->wq.kind == RC_WQ_FP8 || num->mode == RC_PREC_AUTOCAST || num->residual_f32))
        s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: hybrid linear-attention models run without tp, fp8 weights, autocast "
                      "or residual=fp32 (not emulated yet)", c->model_type);
    if (s == RC_OK && (linear_layers(c) > 0 || c->attn_out_gate) &&
        !(be->ops->gdn_mixer && be->ops->gate_mul && be->ops->zero))
        s = rc_errorf(RC_ERR_INTERNAL, "backend %s has no Gated DeltaNet ops", be->ops->name);
    if (s == RC_OK && (num->gdn_chunk < 0 || num->gdn_chunk > (1 << 16)))
        s = rc_errorf(RC_ERR_USAGE, "invalid numerics (chunk %lld)", (long long)num->gdn_chunk);
    if (s == RC_OK && linear_layers(c) == 0 &&
        (num->state_dtype || num->prefix_cache || (num->gdn_chunk != 0 && num->gdn_chunk != RC_GDN_CHUNK_DEFAULT)))
        s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: state=, chunk= and prefix-cache= set the linear-attention layers of a "
                      "hybrid model; this model has none", c->model_type);
    if (s == RC_OK && num->tp > 1 && num->wq.kind != RC_WQ_NONE && num->wq.act != RC_ACTQ_NONE)
        s = rc_errorf(RC_ERR_UNSUPPORTED, "fp8 weights with fp8 activations (W8A8) under tp=%d are not emulated yet "
                      "(weight-only act=none is)", num->tp);
    e->n_stages = be->n_devices > 1 ? be->n_devices : 1;
    if (s == RC_OK && e->n_stages > 1 && !(be->ops->set_device && be->ops->copy_peer))
        s = rc_errorf(RC_ERR_INTERNAL, "backend %s has no devices to split over", be->ops->name);
    if (s == RC_OK)
        s = rc_layer_split(m, num, be->kernels, e->n_stages,
                           e->n_stages > 1 && be->layer_split[0] > 0 ? be->layer_split : NULL, n_slots, max_len,
                           max_rows, e->stage_l0, NULL, NULL, NULL);
    if (s == RC_OK && e->n_stages > 1 &&
        !(e->stage = calloc((size_t)e->n_stages, sizeof *e->stage)))
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (s != RC_OK) {
        free(e);
        return s;
    }
    if (!(num->kv_quant == RC_KV_AUTO ||
          ((num->kv_quant == RC_KV_FP8_E4M3 || num->kv_quant == RC_KV_FP8_E5M2) && num->kv_scale > 0.0f &&
           num->kv_scale < INFINITY))) {
        free(e);
        return rc_errorf(RC_ERR_USAGE, "invalid numerics (KV cache dtype %d, scale %g)", (int)num->kv_quant,
                         (double)num->kv_scale);
    }
    engine_sizes z;
    if (!engine_sizes_for(c, num, be->kernels, be->ops->host_memory, n_slots, max_len, max_rows, &z))
        s = rc_errorf(RC_ERR_NOMEM, "KV cache size overflows");
    e->logit_rows = z.logit_rows;
    int64_t att_nkv, att_d;
    rc_mla_attn_shape(c, num->mla_absorbed, &att_nkv, &att_d);
    e->kv = (rc_kv_cache){.n_layers = c->n_layers, .n_slots = n_slots, .n_kv_heads = att_nkv,
                          .max_len = max_len, .head_dim = att_d,
                          .dt = engine_kv_dt(c, num), .quant = num->kv_quant,
                          .k_scale = num->kv_scale, .v_scale = num->kv_scale, .deq_dt = num->dt};
    const int64_t kv_n = z.kv_n;
    float **bufs[ENGINE_BUFS] = {&e->x,   &e->h,      &e->qkv,   &e->att, &e->mlp_a, &e->mlp_b,
                                 &e->tmp, &e->logits, &e->mlp_c, &e->lt,  &e->lh};
    e->chunk_rows = z.dims[1][0];
    e->mlp_st = z.st[4];
    e->qkv_st = z.st[2];
    e->att_st = z.st[3];
    e->h_st = z.st[1];
    e->tmp_st = z.st[6];
    e->mlpc_st = z.st[8];
    e->logits_st = z.st[7];
    e->x_st = z.st[0];
    bool two = false;
    for (int i = 0; i < ENGINE_BUFS; i++)
        two = two || z.st[i] != RC_F32;
    if (s == RC_OK && two &&
        (!be->ops->matmul_st || !be->ops->act_st || !be->ops->act_mul_st || !be->ops->norm_st || !be->ops->add_st ||
         !be->ops->logprobs_st || !be->ops->qk_norm_st || !be->ops->embed_st))
        s = rc_errorf(RC_ERR_INTERNAL, "backend %s holds no 2-byte activations", be->ops->name);
    for (int i = 0; s == RC_OK && i < ENGINE_BUFS; i++)
        s = be->ops->alloc(be, z.floats[i], bufs[i]);
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&e->ix, z.ix_n, sizeof *e->ix, "engine index scratch");
    if (s == RC_OK && num->tp > 1) { /* the row-parallel partials; zero_rows: calloc'd zeros */
        int64_t n;
        if (!rc_numel((int64_t[]){num->tp, e->chunk_rows, c->hidden}, 3, &n))
            s = rc_errorf(RC_ERR_NOMEM, "tensor-parallel partials size overflows");
        else
            s = be->ops->alloc(be, n, &e->tp_parts);
        if (s == RC_OK)
            s = rc_alloc_aligned((void **)&e->tp_zero_rows, max_rows, sizeof *e->tp_zero_rows, "engine index scratch");
    }
    if (s == RC_OK && c->n_experts > 0)
        s = rc_moe_scratch_create(be, c, e->chunk_rows, num->wq.kind == RC_WQ_STORED, &e->moe);
    if (s == RC_OK && c->mla)
        s = rc_mla_create(be, m, num->mla_absorbed, num->dt, e->chunk_rows, &e->mla);
    if (s == RC_OK)
        s = engine_weights(e);
    /* (a layer split: each layer's quantized copies on its device, each device its own scratch) */
    if (s == RC_OK && num->wq.kind == RC_WQ_FP8) /* the linear layers quantized from the dtype's weights */
        s = rc_fp8w_create_split(be, c, num, e->chunk_rows, &e->w, e->n_stages, e->stage_l0, &e->fp8w);
    else if (s == RC_OK && num->wq.kind == RC_WQ_STORED) /* the checkpoint's fp8 weights and block scales */
        s = rc_fp8w_create_stored_split(be, m, num, e->chunk_rows, e->n_stages, e->stage_l0, &e->fp8w);
    /* a layer split: device 0's KV cache holds its layers only, each other device's its own (stage_create) */
    const int64_t kv_per_layer = e->n_stages > 1 ? kv_n / kv_layers_in(c, 0, c->n_layers) : 0;
    const int64_t kv_floats0 = e->n_stages > 1 ? kv_per_layer * kv_layers_in(c, 0, e->stage_l0[1]) : kv_n;
    const int64_t kv_floats = e->kv.dt == RC_F32 ? kv_floats0 : (kv_floats0 + 1) / 2;
    for (int d = 1; s == RC_OK && d < e->n_stages; d++)
        s = stage_create(e, d, &z, kv_per_layer);
    if (s == RC_OK && kv_floats0 > 0) /* (a hybrid model's device 0 of linear-attention layers only: none) */
        s = be->ops->alloc(be, kv_floats, &e->kv.k);
    if (s == RC_OK && kv_floats0 > 0)
        s = be->ops->alloc(be, kv_floats, &e->kv.v);
    if (s == RC_OK && e->kv.dt != RC_F32) { /* the same buffers, 2-byte elements */
        e->kv.k16 = (uint16_t *)e->kv.k;
        e->kv.v16 = (uint16_t *)e->kv.v;
        e->kv.k = e->kv.v = NULL;
    }
    if (s == RC_OK && mla_mixed(c, num)) /* the engine form's expanded prefill */
        s = mla_x_create(e, m, n_slots, max_len);
    if (s == RC_OK && (linear_layers(c) > 0 || c->attn_out_gate))
        s = hybrid_create(e, n_slots, max_rows);
    if (s != RC_OK) {
        rc_engine_free(e);
        return s;
    }
    *out = e;
    return RC_OK;
}


/* the family's position encoding as attention sees it (rotary_dim 0 under
 * ROTARY: nothing rotated) */
static rc_attn_pos attn_pos(rc_pos_kind k)
{
    switch (k) {
    case RC_POS_ALIBI:
        return RC_ATTN_POS_ALIBI;
    case RC_POS_LEARNED:
        return RC_ATTN_POS_LEARNED;
    case RC_POS_ROTARY:
        break;
    }
    return RC_ATTN_POS_ROTARY;
}

rc_attn_params rc_attn_params_from_config(const rc_config *cfg, const float *inv_freq, rc_dtype rope_cs_dt,
                                          rc_dtype rope_dt, const rc_attn_numerics *num)
{
    rc_attn_params ap = {
        .n_heads = cfg->n_heads,
        .n_kv_heads = cfg->n_kv_heads,
        .head_dim = cfg->head_dim,
        .pos = attn_pos(cfg->pos),
        .rotary_dim = cfg->pos == RC_POS_ROTARY ? cfg->rotary_dim : 0,
        .inv_freq = inv_freq,
        .rope_cs_dt = rope_cs_dt,
        .rope_mid_dt = rope_dt,
        .rope_dt = rope_dt,
        .rope_attn_factor = cfg->rope_attn_factor > 0 ? (float)cfg->rope_attn_factor : 1.0f,
        .alibi_slopes = NULL,
        .alibi_ref = cfg->alibi_from_last_key ? RC_ALIBI_REF_LAST_KEY : RC_ALIBI_REF_KEY0,
        .alibi_mode = cfg->alibi_add == RC_ALIBI_ADD_FUSED ? RCO_ALIBI_FUSED : RCO_ALIBI_ADD,
        /* BLOOM: alibi.to(hidden dtype) then baddbmm; Baichuan: the mask cast to
         * the hidden dtype and added in it; MPT: an fp32 table, fp32 sum. Under
         * --upcast softmax (score_dt fp32) the bias stays fp32 as well. */
        .alibi_bias_dt = cfg->alibi_add == RC_ALIBI_ADD_F32 ? RC_F32 : num->score_dt,
        .alibi_add_dt = cfg->alibi_add == RC_ALIBI_ADD_F32 ? RC_F32 : num->score_dt,
        /* head_dim ** -0.5 (a Python float), MPT's softmax_scale, or Baichuan's
         * division by math.sqrt(head_dim) */
        .scale = cfg->score_div          ? (float)sqrt((double)cfg->head_dim)
                 : cfg->softmax_scale > 0 ? (float)cfg->softmax_scale
                                          : (float)(1.0 / sqrt((double)cfg->head_dim)),
        .score_div = cfg->score_div,
        .softcap = cfg->attn_softcap > 0 ? (float)cfg->attn_softcap : 0.0f,
        .sliding_window = cfg->sliding_window,
        .mask = RC_MASK_SKIP,
        .num = *num,
        .qkv_st = RC_F32,
        .out_st = RC_F32,
    };
    return ap;
}

void rc_attn_params_set_alibi(rc_attn_params *ap, const float *slopes, bool rowmax)
{
    ap->alibi_slopes = slopes;
    if (rowmax)
        ap->alibi_ref = RC_ALIBI_REF_QUERY;
}

/* the dtype both GEMM operands are exact in (RC_F32 when they differ) */
static rc_dtype gemm_in(rc_dtype x_dt, rc_dtype w_dt)
{
    return x_dt == w_dt ? x_dt : RC_F32;
}

/* A linear layer of layer l (which): the backend's matmul, or under
 * weights=fp8 with quantized activations the fp8 GEMM (fp8w.c). (W8A16's
 * dequantized weights are in e->w: the plain matmul; on a device, its codes
 * dequantized per call: the same matmul.) */
static rc_status linear(rc_engine *e, int64_t l, rc_fp8w_which which, const float *x, int64_t M, int64_t K, rc_wt W,
                        int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    if (rc_fp8w_w8a8(e->fp8w) && rc_fp8w_has(e->fp8w, l, which))
        return rc_fp8w_linear(e->be, e->fp8w, l, which, x, M, bias, out_dt, y);
    if (rc_fp8w_deq_device(e->fp8w) && rc_fp8w_has(e->fp8w, l, which))
        return rc_fp8w_deq_linear(e->be, e->fp8w, l, which, x, M, bias, in_dt, out_dt, y);
    return e->be->ops->matmul(e->be, x, M, K, W, N, bias, in_dt, out_dt, y);
}

/* a row-parallel layer (attention output, MLP down): its TP partials and
 * all-reduce when the side has tp > 1 (the weights in the dtype, or fp8
 * weight-only: dequantized values), else linear() */
static rc_status row_linear(rc_engine *e, int64_t l, rc_fp8w_which which, const float *x, int64_t M, int64_t K,
                            rc_wt W, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, int64_t elem0,
                            int64_t numel, float *y)
{
    if (e->num.tp > 1 && rc_fp8w_deq_device(e->fp8w) && rc_fp8w_has(e->fp8w, l, which)) /* W8A16's copy */
        RC_TRY(rc_fp8w_deq_weight(e->be, e->fp8w, l, which, &W));
    if (e->num.tp > 1)
        return rc_row_parallel_linear(e->be, &e->num, x, M, K, W, N, bias, in_dt, out_dt, elem0, numel, e->tp_parts,
                                      e->tp_zero_rows, y);
    return linear(e, l, which, x, M, K, W, N, bias, in_dt, out_dt, y);
}

/* The MLP's ops over mlp_a / mlp_b as the engine holds them (e->mlp_st): linear, row_linear and the
 * backend's act / act_mul when fp32, else their 2-byte forms (matmul_st, act_st, act_mul_st; engine_mlp_st
 * holds them to plain GEMMs in the dtype). mlp_up's x (the norm's output h, x_st) and mlp_down's y (mlp_c,
 * e->mlpc_st) are held as engine_act_st says; mlp_up's y and mlp_down's x are the MLP buffers. */
static rc_status mlp_up(rc_engine *e, int64_t l, rc_fp8w_which which, const float *x, rc_dtype x_st, int64_t M,
                        int64_t K, rc_wt W, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    if (e->mlp_st == RC_F32 && x_st == RC_F32)
        return linear(e, l, which, x, M, K, W, N, bias, in_dt, out_dt, y);
    return e->be->ops->matmul_st(e->be, x, x_st, M, K, W, N, bias, in_dt, out_dt, y, e->mlp_st);
}

/* A norm whose input or output may be held at the dtype's width (x_st, out_st; engine_act_st): norm or the
 * backend's norm_st */
static rc_status act_norm(rc_engine *e, rc_norm_kind kind, const void *x, rc_dtype x_st, int64_t M, int64_t H,
                          const float *w, const float *b, double eps, rc_dtype mid_dt, rc_dtype out_dt, void *out,
                          rc_dtype out_st)
{
    if (x_st == RC_F32 && out_st == RC_F32)
        return e->be->ops->norm(e->be, kind, x, M, H, w, b, eps, mid_dt, out_dt, out);
    return e->be->ops->norm_st(e->be, kind, x, x_st, M, H, w, b, eps, mid_dt, out_dt, out, out_st);
}

/* rows [r0, ...) of the residual stream as the engine holds it (e->x_st) */
static float *x_rows(const rc_engine *e, int64_t r0)
{
    const int64_t H = e->model->cfg.hidden;
    return e->x_st == RC_F32 ? e->x + r0 * H : (float *)((uint16_t *)e->x + r0 * H);
}

/* out = R(x + y) with operands that may be held at the dtype's width (engine_act_st): add or the backend's
 * add_st */
static rc_status act_add(rc_engine *e, const void *x, rc_dtype x_st, const void *y, rc_dtype y_st, int64_t n,
                         rc_dtype out_dt, void *out, rc_dtype out_st)
{
    if (x_st == RC_F32 && y_st == RC_F32 && out_st == RC_F32)
        return e->be->ops->add(e->be, x, y, n, out_dt, out);
    return e->be->ops->add_st(e->be, x, x_st, y, y_st, n, out_dt, out, out_st);
}

/* A linear layer whose x or y may be held at the dtype's width (x_st, y_st; engine_act_st): linear when both
 * are fp32, else the backend's matmul_st (engine_act_st holds such a layer to a plain GEMM in the dtype) */
static rc_status act_linear(rc_engine *e, int64_t l, rc_fp8w_which which, const void *x, rc_dtype x_st, int64_t M,
                            int64_t K, rc_wt W, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, void *y,
                            rc_dtype y_st)
{
    if (x_st == RC_F32 && y_st == RC_F32)
        return linear(e, l, which, x, M, K, W, N, bias, in_dt, out_dt, y);
    return e->be->ops->matmul_st(e->be, x, x_st, M, K, W, N, bias, in_dt, out_dt, y, y_st);
}

static rc_status mlp_down(rc_engine *e, int64_t l, const float *x, int64_t M, int64_t K, rc_wt W, int64_t N,
                          const float *bias, rc_dtype in_dt, rc_dtype out_dt, int64_t elem0, int64_t numel, float *y)
{
    if (e->mlp_st == RC_F32 && e->mlpc_st == RC_F32)
        return row_linear(e, l, RC_FP8W_DOWN, x, M, K, W, N, bias, in_dt, out_dt, elem0, numel, y);
    return e->be->ops->matmul_st(e->be, x, e->mlp_st, M, K, W, N, bias, in_dt, out_dt, y, e->mlpc_st);
}

static rc_status mlp_act(rc_engine *e, rc_act act, float *x, int64_t n, rc_dtype out_dt)
{
    if (e->mlp_st == RC_F32)
        return e->be->ops->act(e->be, act, x, n, out_dt);
    return e->be->ops->act_st(e->be, act, x, n, out_dt, e->mlp_st);
}

static rc_status mlp_act_mul(rc_engine *e, rc_act act, float *gate, const float *up, int64_t n, rc_dtype act_dt,
                             rc_dtype out_dt)
{
    if (e->mlp_st == RC_F32)
        return e->be->ops->act_mul(e->be, act, gate, up, n, act_dt, out_dt);
    return e->be->ops->act_mul_st(e->be, act, gate, up, n, act_dt, out_dt, e->mlp_st);
}

static const char *const k_trace_op_names[RC_TOP_COUNT] = {
    "embed", "norm1", "qkv", "rope", "scores", "probs", "state", "attn", "o_proj", "resid_attn",
    "norm2", "route", "up", "gate", "act", "down", "resid", "norm_f", "logits"};

const char *rc_trace_op_name(rc_trace_op op)
{
    return (unsigned)op < RC_TOP_COUNT ? k_trace_op_names[op] : "?";
}

/* The capture hook (rc_capture_hook): one call per op output; CAPTURE is a
 * branch on a NULL pointer when no hook is set. */
static rc_status capture(const rc_engine *e, const rc_batch_desc *bd, int64_t layer, rc_trace_op op, int64_t row0,
                         int64_t n, const int64_t *rows, const float *data, int64_t width, int64_t stride,
                         rc_dtype dt, const rc_attn_params *ap)
{
    const rc_capture c = {.layer = layer, .op = op, .side = e->hook.side, .seq0 = e->hook.seq0, .bd = bd, .n = n,
                          .row0 = row0, .rows = rows, .call_rows = n, .data = data, .width = width,
                          .stride = stride, .dt = dt, .ap = ap, .kv = ap ? &e->kv : NULL};
    return e->hook.fn(e->hook.ctx, e->be, &c);
}
#define CAPTURE(...)                            \
    do {                                        \
        if (e->hook.fn)                         \
            RC_TRY(capture(e, __VA_ARGS__));    \
    } while (0)

/* A Gated DeltaNet layer's token mixer over the call's rows (one row chunk: the whole call), from its
 * input rows a_in to out_proj's output in e->tmp: in_proj_qkvz and in_proj_ba (GEMMs), then per sequence
 * the mixer (gdn.c) from its slot's states, which it updates: a fresh sequence (start 0) from zeros, the
 * chunked form over a call's tokens and the recurrent step for one cached token, as transformers runs it
 * with a cache (the full forward is a fresh call of the whole sequence); prefix_cache splits a fresh
 * sequence's call (the state after all but its last token rounded to the dtype, the last token chunked
 * from it); invariant kernels run the recurrent form throughout. */
static rc_status gdn_block(rc_engine *e, const rc_batch_desc *bd, int64_t l, const float *a_in, int64_t n,
                           rc_dtype in_blk, rc_dtype in_att, rc_dtype lin_dt)
{
    const rc_config *c = &e->model->cfg;
    const rc_layer_weights *L = &e->w.layers[l];
    rc_backend *be = e->be;
    rc_state_cache *kv = &e->st;
    const int64_t H = c->hidden, W = rc_dim_value(c, RC_DIM_LQKVZ), B = rc_dim_value(c, RC_DIM_LBA);
    const int64_t LV = rc_dim_value(c, RC_DIM_LV), CK = kv->conv_c * kv->conv_k;
    const int64_t SN = kv->gd.hv * kv->gd.dk * kv->gd.dv;
    const rc_dtype dt = e->num.dt;
    const int64_t chunk = e->num.gdn_chunk > 0 ? e->num.gdn_chunk : RC_GDN_CHUNK_DEFAULT;
    const rc_gdn_form form = be->kernels == RC_KERNELS_INVARIANT ? RC_GDN_FORM_RECURRENT : RC_GDN_FORM_HF;
    if (n != bd->n_rows)
        return rc_errorf(RC_ERR_INTERNAL, "Gated DeltaNet layer over %lld of a call's %lld rows", (long long)n,
                         (long long)bd->n_rows);
    RC_TRY(be->ops->matmul(be, a_in, n, H, L->w_lin_qkvz, W, NULL, in_blk, lin_dt, e->gdn_qkvz));
    RC_TRY(be->ops->matmul(be, a_in, n, H, L->w_lin_ba, B, NULL, in_blk, lin_dt, e->gdn_ba));
    const int64_t li = state_index(e, l);
    rc_gdn_mixer_args ma = {.d = kv->gd, .K = kv->conv_k, .conv_w = rc_wt_vec(L->lin_conv_w),
                            .A_log = rc_wt_vec(L->lin_A_log), .dt_bias = rc_wt_vec(L->lin_dt_bias),
                            .norm_w = rc_wt_vec(L->lin_norm_w), .eps = (float)c->norm_eps, .chunk = chunk, .dt = dt};
    for (int64_t b = 0; b < bd->n_seq; b++) {
        const int64_t slot = bd->slot[b], r = bd->row0[b], T = bd->n_new[b];
        float *conv = kv->conv + (li * kv->n_slots + slot) * CK, *S = kv->state + (li * kv->n_slots + slot) * SN;
        const bool fresh = bd->start[b] == 0;
#define GDN_RUN(r_, T_, fresh_, sdt_, form_, conv_, S_, out_)                                                    \
    (ma.qkvz = e->gdn_qkvz + (r_) * W, ma.ba = e->gdn_ba + (r_) * B, ma.T = (T_), ma.fresh = (fresh_),           \
     ma.state_dt = (sdt_), ma.form = (form_), ma.conv_state = (conv_), ma.state = (S_), ma.out = (out_),         \
     be->ops->gdn_mixer(be, &ma))
        /* trace (a capture hook): the state after the call, at its last position (the call's M: its tokens);
         * for a fresh call of several tokens also the state one token earlier, as the call's own arithmetic
         * reaches it (a full forward holds no state before its end): the prefix cache's stored state, else
         * the same run over all but the last token on copies of the states */
        rc_capture cap = {.layer = l, .op = RC_TOP_STATE, .side = e->hook.side, .seq0 = e->hook.seq0, .bd = bd,
                          .n = 1, .row0 = r + T - 1, .rows = NULL, .call_rows = T, .data = S, .width = SN,
                          .stride = SN, .dt = kv->state_dt, .ap = NULL, .kv = NULL};
        if (fresh && e->num.prefix_cache && T > 1) { /* the stored prefix's state in the dtype, then the rest */
            RC_TRY(GDN_RUN(r, T - 1, true, dt, form, conv, S, e->gdn_out + r * LV));
            if (e->hook.fn) {
                rc_capture c1 = cap;
                c1.row0 = r + T - 2, c1.call_rows = T - 1, c1.dt = dt;
                RC_TRY(e->hook.fn(e->hook.ctx, be, &c1));
            }
            RC_TRY(GDN_RUN(r + T - 1, 1, false, kv->state_dt, form == RC_GDN_FORM_RECURRENT ? form : RC_GDN_FORM_EXTEND,
                           conv, S, e->gdn_out + (r + T - 1) * LV));
        } else {
            if (e->hook.fn && fresh && T > 1) { /* (states and outputs of its own, in the backend's memory) */
                float *cs = NULL, *ss = NULL, *os = NULL;
                rc_status st = be->ops->alloc(be, CK, &cs);
                if (st == RC_OK)
                    st = be->ops->alloc(be, SN, &ss);
                if (st == RC_OK)
                    st = be->ops->alloc(be, (T - 1) * LV, &os);
                if (st == RC_OK)
                    st = GDN_RUN(r, T - 1, true, kv->state_dt, form, cs, ss, os);
                rc_capture c1 = cap;
                c1.row0 = r + T - 2, c1.call_rows = T - 1, c1.data = ss;
                if (st == RC_OK)
                    st = e->hook.fn(e->hook.ctx, be, &c1);
                float *tmp[] = {cs, ss, os};
                for (int i = 0; i < 3; i++)
                    if (tmp[i])
                        be->ops->free(be, tmp[i]);
                RC_TRY(st);
            }
            RC_TRY(GDN_RUN(r, T, fresh, kv->state_dt, form, conv, S, e->gdn_out + r * LV));
        }
#undef GDN_RUN
        if (e->hook.fn)
            RC_TRY(e->hook.fn(e->hook.ctx, be, &cap));
    }
    return be->ops->matmul(be, e->gdn_out, n, LV, L->w_lin_out, H, NULL, in_att, lin_dt, e->tmp);
}

/* true when a sequence of the call brings more than one new token (a
 * prefill, or a prefill chunk, in vLLM's split of a batch) */
static bool call_has_prefill(const rc_batch_desc *bd)
{
    for (int64_t b = 0; b < bd->n_seq; b++)
        if (bd->n_new[b] > 1)
            return true;
    return false;
}

/* mla=engine, a call with prefill sequences: the rows [row_lo, row_lo + n)
 * again in the expanded form (its projections, rope and attention over its
 * own K / V cache), and the o_proj input of each row from the form its
 * sequence takes: expanded when the sequence brings more than one token,
 * else the absorbed decode's (*o_in on entry). *o_in, *o_dt: the mix. */
static rc_status mla_prefill_expanded(rc_engine *e, const rc_batch_desc *cd, int64_t l, const rc_layer_weights *L,
                                      const float *a_in, int64_t n, const rc_mla_rounding *mr,
                                      const rc_attn_params *ap, const float **o_in, rc_dtype *o_dt)
{
    rc_backend *be = e->be;
    const rc_backend_ops *op = be->ops;
    const rc_config *c = &e->model->cfg;
    int64_t nx, dx;
    rc_mla_attn_shape(c, false, &nx, &dx);
    rc_attn_params apx = *ap;
    apx.n_kv_heads = nx;
    apx.head_dim = dx;
    RC_TRY(rc_mla_qkv(be, c, e->mla_x, L, l, a_in, n, mr, e->qkv));
    RC_TRY(op->rope(be, e->qkv, cd, &apx));
    RC_TRY(op->attention(be, e->qkv, cd, &apx, &e->kv_x, kv_index(e, l), rc_mla_att_buf(e->mla_x)));
    const float *ox;
    RC_TRY(rc_mla_out(be, c, e->mla_x, L, n, mr, apx.num.out_dt, &ox));
    const int64_t ow = rc_dim_value(c, RC_DIM_O);
    int64_t *ix = e->mla_mix_ix;
    for (int64_t i = 0; i < n; i++) /* [0, n): the absorbed rows, [n, 2n): the expanded ones */
        ix[i] = i;
    RC_TRY(op->gather_rows(be, *o_in, ow, ix, n, e->mla_mix));
    RC_TRY(op->gather_rows(be, ox, ow, ix, n, e->mla_mix + n * ow));
    for (int64_t i = 0; i < n; i++)
        ix[i] = cd->n_new[cd->seq_of_row[cd->row_lo + i]] > 1 ? n + i : i;
    RC_TRY(op->gather_rows(be, e->mla_mix, ow, ix, n, e->mla_mix + 2 * n * ow));
    *o_in = e->mla_mix + 2 * n * ow;
    if (*o_dt != apx.num.out_dt)
        *o_dt = RC_F32;
    return RC_OK;
}

static rc_status run_layers(rc_engine *e, const rc_batch_desc *bd, const int32_t *tokens)
{
    const rc_dtype sts[] = {e->mlp_st, e->qkv_st, e->att_st, e->h_st, e->tmp_st, e->mlpc_st, e->logits_st, e->x_st};
    bool two = false;
    for (size_t i = 0; i < sizeof sts / sizeof sts[0]; i++)
        two = two || sts[i] != RC_F32;
    if (e->hook.fn && two)
        return rc_errorf(RC_ERR_INTERNAL, "a capture hook needs an engine created with act_f32"); /* floats */
    const rc_model *m = e->model;
    const rc_config *c = &m->cfg;
    const rc_backend_ops *op = e->be->ops;
    rc_backend *be = e->be;
    const rounding rr = rounding_rules(&e->num);
    const int64_t R = bd->n_rows, H = c->hidden, I = c->intermediate;
    int64_t nkv, d; /* latent attention: the shape of its form (mla.h) */
    rc_mla_attn_shape(c, e->num.mla_absorbed, &nkv, &d);
    const int64_t qkv_w = (c->n_heads + 2 * nkv) * d, att_w = c->n_heads * d;
    const rc_dtype wd = e->num.dt; /* the weights' values */
    const rc_dtype in_norm = gemm_in(rr.norm, wd), in_att = gemm_in(rr.attn.out_dt, wd), in_act = gemm_in(rr.act, wd);
    rc_attn_params ap = rc_attn_params_from_config(c, e->w.inv_freq, rr.rope_cs, rr.rope, &rr.attn);
    ap.rope_mid_dt = rr.rope_mid;
    ap.qkv_st = e->qkv_st; /* forward.c engine_act_st: fp32 for latent attention, whose buffers these are too */
    ap.out_st = e->att_st;
    ap.n_kv_heads = nkv;
    ap.head_dim = d;
    const float ap_rope_attn_factor = ap.rope_attn_factor;
    const rc_dtype nmid = c->norm_w_f32 ? RC_F32 : rr.norm_mid; /* OLMo2: (w * x).to(dtype), one rounding */
    /* the attention and MLP inputs: a norm's output, or with post_norm the residual stream itself */
    const rc_dtype in_blk = c->post_norm ? gemm_in(rr.residual, wd) : in_norm;
    if (c->rope_f32) { /* Baichuan2-7B: (q.float() * cos + rotate_half(q.float()) * sin).to(q.dtype) */
        ap.rope_cs_dt = RC_F32;
        ap.rope_mid_dt = RC_F32;
    }
    if (c->attn_f32) { /* Baichuan2-7B: SDPA (math backend) upcasts q, k, v: fp32 scores and probabilities */
        ap.num.score_dt = RC_F32;
        ap.num.prob_dt = RC_F32;
    }
    if (c->pos == RC_POS_ALIBI) {
        rc_attn_params_set_alibi(&ap, e->w.alibi_slopes, e->num.alibi_rowmax);
        /* MPT measures distances from the call's last key, so a prefill row's
         * bias depends on how many tokens the call holds: no kernel order can
         * make that batch-invariant. Invariant kernels measure from the query
         * instead (the same softmax in exact arithmetic; README "Numerics"). */
        if (ap.alibi_ref == RC_ALIBI_REF_LAST_KEY && e->be->kernels == RC_KERNELS_INVARIANT)
            ap.alibi_ref = RC_ALIBI_REF_QUERY;
    }

    if (e->x_st == RC_F32)
        RC_TRY(op->embed(be, tokens, R, e->w.embed, H, e->x));
    else
        RC_TRY(op->embed_st(be, tokens, R, e->w.embed, H, e->x, e->x_st));
    if (c->embed_scale > 0) /* Gemma: embed * embed_scale.to(dtype) (an fp32 tensor of the Python float) */
        RC_TRY(op->scale(be, e->x, R * H, rc_round_to((float)c->embed_scale, wd), rr.residual));
    /* Everything but the residual stream x runs over row chunks (chunk_rows):
     * every chunk of a call with more than chunk_rows rows has more than 256
     * rows, so each GEMM's M class (rco_gemm_order_for) and RMSNorm's lanes
     * are those of one call over all rows, and rope and attention see the
     * whole call (bd) while computing the chunk's rows: results are those of
     * one pass over all rows (test_row_chunks checks it). */
    int64_t *iota = e->ix + 6 * e->max_rows; /* 0, 1, ...: a chunk copied back into x */
    for (int64_t r0 = 0, n; r0 < R; r0 += n) {
        n = next_chunk(R - r0, e->chunk_rows);
        float *xc = x_rows(e, r0);
        if (c->pos == RC_POS_LEARNED) { /* GPT-2: x = R(wte[token] + wpe[position]) */
            RC_TRY(op->gather_rows(be, rc_wt_vec(e->w.wpe), H, bd->pos + r0, n, e->tmp));
            RC_TRY(op->add(be, xc, e->tmp, n * H, rr.residual, xc));
        }
        if (c->embed_norm) { /* BLOOM's word_embeddings_layernorm: the normalised rows are the residual stream */
            RC_TRY(op->norm(be, c->norm, xc, n, H, rc_wt_vec(e->w.emb_ln_w), rc_wt_vec(e->w.emb_ln_b), c->norm_eps,
                            rr.norm, rr.norm, e->h));
            for (int64_t k = 0; k < n; k++)
                iota[k] = k;
            RC_TRY(op->gather_rows(be, e->h, H, iota, n, xc));
        }
        CAPTURE(bd, -1, RC_TOP_EMBED, r0, n, NULL, xc, H, H, c->embed_norm ? rr.norm : rr.residual, NULL);
    }
    for (int64_t l = 0; l < c->n_layers; l++) {
        const rc_layer_weights *L = &e->w.layers[l];
        if (e->n_stages > 1) { /* a layer split: the residual stream moves to the layer's device */
            RC_TRY(stage_enter(e, stage_of_layer(e->stage_l0, e->n_stages, l), R * H));
            ap.inv_freq = e->w.inv_freq; /* that device's copies */
            if (ap.alibi_slopes)
                ap.alibi_slopes = e->w.alibi_slopes;
        }
        ap.sliding_window = rc_layer_window(c, l); /* layer_types: sliding and full layers */
        ap.sinks = c->attn_sinks ? rc_wt_vec(L->sinks) : NULL; /* gpt-oss: this layer's sink logits */
        if (e->w.inv_freq_local) { /* Gemma 3, OLMo3: the sliding layers' own RoPE (default, local base) */
            const bool local = rc_layer_rope_local(c, l);
            ap.inv_freq = local ? e->w.inv_freq_local : e->w.inv_freq;
            ap.rope_attn_factor = local ? 1.0f : ap_rope_attn_factor;
        }
        for (int64_t r0 = 0, n; r0 < R; r0 += n) {
            n = next_chunk(R - r0, e->chunk_rows);
            float *xc = x_rows(e, r0);
            const rc_dtype xs = e->x_st; /* how xc is held */
            rc_batch_desc cd = *bd; /* the whole call, computing rows [r0, r0 + n) */
            cd.row_lo = r0;
            cd.row_hi = r0 + n;
            /* attention block */
            const float *a_in = xc; /* post_norm: the block reads x */
            rc_dtype a_st = xs;     /* how a_in is held */
            if (!c->post_norm) {
                RC_TRY(act_norm(e, c->norm, xc, xs, n, H, rc_wt_vec(L->ln1_w), rc_wt_vec(L->ln1_b), c->norm_eps,
                                nmid, rr.norm, e->h, e->h_st));
                CAPTURE(bd, l, RC_TOP_NORM1, r0, n, NULL, e->h, H, H, rr.norm, NULL);
                a_in = e->h;
                a_st = e->h_st;
            }
            if (rc_layer_is_linear(c, l)) { /* Gated DeltaNet: its mixer's output projection into tmp */
                RC_TRY(gdn_block(e, bd, l, a_in, n, in_blk, in_att, rr.linear));
                /* the trace: in_proj_qkvz as the layer's qkv, the mixer's output (the gated norm's) as its attn */
                const int64_t wq = rc_dim_value(c, RC_DIM_LQKVZ), wv = rc_dim_value(c, RC_DIM_LV);
                CAPTURE(bd, l, RC_TOP_QKV, r0, n, NULL, e->gdn_qkvz, wq, wq, rr.linear, NULL);
                CAPTURE(bd, l, RC_TOP_ATTN, r0, n, NULL, e->gdn_out, wv, wv, e->num.dt, NULL);
                CAPTURE(bd, l, RC_TOP_O, r0, n, NULL, e->tmp, H, H, rr.linear, NULL);
                goto residual;
            }
            if (c->mla) { /* latent attention (mla.c): its projections, the shared rope and attention, o_proj */
                const rc_mla_rounding mr = {rr.linear, nmid, rr.norm, in_blk, wd};
                RC_TRY(rc_mla_qkv(be, c, e->mla, L, l, a_in, n, &mr, e->qkv));
                CAPTURE(bd, l, RC_TOP_QKV, r0, n, NULL, e->qkv, qkv_w, qkv_w, rr.linear, NULL);
                RC_TRY(op->rope(be, e->qkv, &cd, &ap));
                CAPTURE(bd, l, RC_TOP_ROPE, r0, n, NULL, e->qkv, (c->n_heads + nkv) * d, qkv_w, ap.rope_dt, &ap);
                RC_TRY(op->attention(be, e->qkv, &cd, &ap, &e->kv, kv_index(e, l), rc_mla_att_buf(e->mla)));
                const float *o_in;
                RC_TRY(rc_mla_out(be, c, e->mla, L, n, &mr, ap.num.out_dt, &o_in));
                const int64_t ow = rc_dim_value(c, RC_DIM_O);
                rc_dtype o_dt = e->num.mla_absorbed ? rr.linear : ap.num.out_dt;
                if (e->mla_x && call_has_prefill(bd)) /* mla=engine: the prefill's sequences expanded */
                    RC_TRY(mla_prefill_expanded(e, &cd, l, L, a_in, n, &mr, &ap, &o_in, &o_dt));
                CAPTURE(bd, l, RC_TOP_ATTN, r0, n, NULL, o_in, ow, ow, o_dt, NULL);
                RC_TRY(linear(e, l, RC_FP8W_O, o_in, n, ow, L->w_o, H, rc_wt_vec(L->b_o), gemm_in(o_dt, wd), rr.linear,
                              e->tmp));
            } else {
                RC_TRY(act_linear(e, l, RC_FP8W_QKV, a_in, a_st, n, H, L->w_qkv, qkv_w, rc_wt_vec(L->b_qkv), in_blk,
                                  rr.linear, e->qkv, e->qkv_st));
                if (c->clip_qkv > 0) /* MPT: mixed_qkv.clamp(-clip_qkv, clip_qkv), the bound cast to its dtype */
                    RC_TRY(op->clamp(be, e->qkv, n * qkv_w, rc_round_to((float)c->clip_qkv, rr.linear)));
                CAPTURE(bd, l, RC_TOP_QKV, r0, n, NULL, e->qkv, qkv_w, qkv_w, rr.linear, NULL);
                if (c->qk_norm != RC_QK_NORM_NONE) { /* Qwen3: per head over head_dim; OLMo2: the whole projection */
                    const bool all = c->qk_norm == RC_QK_NORM_ALL;
                    const int64_t nq = all ? 1 : c->n_heads, dq = all ? c->n_heads * d : d;
                    const int64_t nk = all ? 1 : c->n_kv_heads, dk = all ? c->n_kv_heads * d : d;
                    if (e->qkv_st == RC_F32)
                        RC_TRY(op->qk_norm(be, e->qkv, n, qkv_w, nq, dq, rc_wt_vec(L->q_norm_w), nk, dk,
                                           rc_wt_vec(L->k_norm_w), c->norm_eps, nmid, rr.norm));
                    else
                        RC_TRY(op->qk_norm_st(be, e->qkv, e->qkv_st, n, qkv_w, nq, dq, rc_wt_vec(L->q_norm_w), nk, dk,
                                              rc_wt_vec(L->k_norm_w), c->norm_eps, nmid, rr.norm));
                }
                RC_TRY(op->rope(be, e->qkv, &cd, &ap));
                CAPTURE(bd, l, RC_TOP_ROPE, r0, n, NULL, e->qkv, (c->n_heads + c->n_kv_heads) * d, qkv_w, ap.rope_dt,
                        &ap);
                RC_TRY(op->attention(be, e->qkv, &cd, &ap, &e->kv, kv_index(e, l), e->att));
                if (c->attn_out_gate) { /* Qwen3-Next: attn_output * sigmoid(gate), each rounded to the dtype */
                    RC_TRY(op->matmul(be, a_in, n, H, L->w_q_gate, att_w, NULL, in_blk, rr.linear, e->attn_gate));
                    RC_TRY(op->gate_mul(be, e->att, e->attn_gate, n * att_w, rr.linear, ap.num.out_dt));
                }
                CAPTURE(bd, l, RC_TOP_ATTN, r0, n, NULL, e->att, att_w, att_w, ap.num.out_dt, NULL);
                if (e->att_st == RC_F32 && e->tmp_st == RC_F32)
                    RC_TRY(row_linear(e, l, RC_FP8W_O, e->att, n, att_w, L->w_o, H, rc_wt_vec(L->b_o), in_att,
                                      rr.linear, r0 * H, R * H, e->tmp)); /* attn_out */
                else
                    RC_TRY(act_linear(e, l, RC_FP8W_O, e->att, e->att_st, n, att_w, L->w_o, H, rc_wt_vec(L->b_o),
                                      in_att, rr.linear, e->tmp, e->tmp_st));
            }
            CAPTURE(bd, l, RC_TOP_O, r0, n, NULL, e->tmp, H, H, rr.linear, NULL);
            if (c->sandwich_norm) /* Gemma: x + post_attention_layernorm(attn_out); GLM-4: post_self_attn_layernorm */
                RC_TRY(op->norm(be, c->norm, e->tmp, n, H, rc_wt_vec(L->post_attn_ln_w), NULL, c->norm_eps, nmid,
                                rr.norm, e->tmp));
            if (c->post_norm) { /* OLMo2: x + post_attention_layernorm(attn_out) */
                RC_TRY(op->norm(be, c->norm, e->tmp, n, H, rc_wt_vec(L->ln1_w), rc_wt_vec(L->ln1_b), c->norm_eps, nmid,
                                rr.norm, e->tmp));
                CAPTURE(bd, l, RC_TOP_NORM1, r0, n, NULL, e->tmp, H, H, rr.norm, NULL);
            }
        residual:
            /* MLP input: parallel residual reads x, sequential reads x + attn_out */
            if (!c->parallel_residual)
                RC_TRY(act_add(e, e->tmp, e->tmp_st, xc, xs, n * H, rr.residual, xc, xs)); /* attn_out + x */
            if (!c->parallel_residual)
                CAPTURE(bd, l, RC_TOP_RESID_ATTN, r0, n, NULL, xc, H, H, rr.residual, NULL);
            const float *m_in = xc;
            rc_dtype m_st = xs; /* how m_in is held */
            if (!c->post_norm) {
                RC_TRY(act_norm(e, c->norm, xc, xs, n, H, rc_wt_vec(L->ln2_w), rc_wt_vec(L->ln2_b), c->norm_eps,
                                nmid, rr.norm, e->h, e->h_st));
                CAPTURE(bd, l, RC_TOP_NORM2, r0, n, NULL, e->h, H, H, rr.norm, NULL);
                m_in = e->h;
                m_st = e->h_st;
            }
            if (rc_layer_is_moe(c, l)) { /* the experts' MLP (moe.c): its output as the down projection's */
                const rc_moe_rounding mr = {rr.linear, rr.act, in_blk, in_act, e->num.router_f32, e->num.route_replay,
                                            rc_fp8w_expert_cb, rc_fp8w_has_experts(e->fp8w) ? e->fp8w : NULL,
                                            router_gate_dt(c, &e->num)};
                RC_TRY(rc_moe_forward(be, c, L, l, m_in, n, bd, r0, &mr, e->moe, &e->routing, e->mlp_c));
                if (e->hook.fn) { /* the trace: the routing the layer used */
                    const float *route;
                    RC_TRY(rc_moe_route_capture(be, c, e->moe, n, &route));
                    CAPTURE(bd, l, RC_TOP_ROUTE, r0, n, NULL, route, 2 * c->n_experts, 2 * c->n_experts, RC_F32, NULL);
                }
                CAPTURE(bd, l, RC_TOP_DOWN, r0, n, NULL, e->mlp_c, H, H, rr.linear, NULL);
                RC_TRY(act_add(e, e->mlp_c, RC_F32, xc, xs, n * H, rr.residual, xc, xs)); /* mlp_out + x */
                CAPTURE(bd, l, RC_TOP_RESID, r0, n, NULL, xc, H, H, rr.residual, NULL);
                continue;
            }
            RC_TRY(mlp_up(e, l, RC_FP8W_UP, m_in, m_st, n, H, L->w_up, I, rc_wt_vec(L->b_up), in_blk, rr.linear,
                          e->mlp_a));
            CAPTURE(bd, l, RC_TOP_UP, r0, n, NULL, e->mlp_a, I, I, rr.linear, NULL);
            if (c->gated_mlp) {
                RC_TRY(mlp_up(e, l, RC_FP8W_GATE, m_in, m_st, n, H, L->w_gate, I, rc_wt_vec(L->b_gate), in_blk,
                              rr.linear, e->mlp_b));
                CAPTURE(bd, l, RC_TOP_GATE, r0, n, NULL, e->mlp_b, I, I, rr.linear, NULL);
                RC_TRY(mlp_act_mul(e, c->act, e->mlp_b, e->mlp_a, n * I, rr.act, rr.act)); /* act(gate) * up */
                CAPTURE(bd, l, RC_TOP_ACT, r0, n, NULL, e->mlp_b, I, I, rr.act, NULL);
                RC_TRY(mlp_down(e, l, e->mlp_b, n, I, L->w_down, H, rc_wt_vec(L->b_down), in_act, rr.linear, r0 * H,
                                R * H, e->mlp_c));
            } else {
                RC_TRY(mlp_act(e, c->act, e->mlp_a, n * I, rr.act));
                CAPTURE(bd, l, RC_TOP_ACT, r0, n, NULL, e->mlp_a, I, I, rr.act, NULL);
                RC_TRY(mlp_down(e, l, e->mlp_a, n, I, L->w_down, H, rc_wt_vec(L->b_down), in_act, rr.linear, r0 * H,
                                R * H, e->mlp_c));
            }
            CAPTURE(bd, l, RC_TOP_DOWN, r0, n, NULL, e->mlp_c, H, H, rr.linear, NULL);
            if (c->sandwich_norm) /* Gemma: x + post_feedforward_layernorm(mlp_out); GLM-4: post_mlp_layernorm */
                RC_TRY(op->norm(be, c->norm, e->mlp_c, n, H, rc_wt_vec(L->post_mlp_ln_w), NULL, c->norm_eps, nmid,
                                rr.norm, e->mlp_c));
            if (c->post_norm) { /* OLMo2: x + post_feedforward_layernorm(mlp_out) */
                RC_TRY(op->norm(be, c->norm, e->mlp_c, n, H, rc_wt_vec(L->ln2_w), rc_wt_vec(L->ln2_b), c->norm_eps,
                                nmid, rr.norm, e->mlp_c));
                CAPTURE(bd, l, RC_TOP_NORM2, r0, n, NULL, e->mlp_c, H, H, rr.norm, NULL);
            }
            if (c->parallel_residual) /* GPTNeoXLayer: (mlp_out + attn_out) + x */
                RC_TRY(act_add(e, e->mlp_c, e->mlpc_st, e->tmp, e->tmp_st, n * H, rr.residual_pair, e->mlp_c,
                               e->mlpc_st));
            RC_TRY(act_add(e, e->mlp_c, e->mlpc_st, xc, xs, n * H, rr.residual, xc, xs)); /* mlp_out + x */
            CAPTURE(bd, l, RC_TOP_RESID, r0, n, NULL, xc, H, H, rr.residual, NULL);
        }
    }
    return e->n_stages > 1 ? stage_enter(e, 0, R * H) : RC_OK; /* the LM head is device 0's */
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
    if (n_seq > e->max_rows)
        return rc_errorf(RC_ERR_USAGE, "%lld sequences exceed the engine's %lld rows", (long long)n_seq,
                         (long long)e->max_rows);
    int64_t *row0 = e->ix, *pos = e->ix + e->max_rows, *seq_of_row = e->ix + 2 * e->max_rows;
    int64_t R = 0;
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
    for (int64_t b = 0; b < n_seq && s == RC_OK; b++)
        for (int64_t i = 0; i < n_new[b]; i++) {
            pos[row0[b] + i] = starts[b] + i;
            seq_of_row[row0[b] + i] = b;
        }
    for (int64_t b = 0; b < n_seq && s == RC_OK; b++)
        s = rc_config_check_positions(c, starts[b] + n_new[b]);
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
    for (int64_t b = 0; b < n_seq && s == RC_OK && e->st.absorbed; b++) /* a state slot continues in order */
        if (starts[b] != 0 && starts[b] != e->st.absorbed[slots[b]])
            s = rc_errorf(RC_ERR_INTERNAL, "sequence %lld: slot %lld's linear-attention state holds %lld tokens, the "
                          "call starts at position %lld", (long long)b, (long long)slots[b],
                          (long long)e->st.absorbed[slots[b]], (long long)starts[b]);
    rc_batch_desc bd = {.n_seq = n_seq, .slot = slots, .start = starts, .n_new = n_new,
                        .row0 = row0, .n_rows = R, .pos = pos, .seq_of_row = seq_of_row};
    const rounding rr = rounding_rules(&e->num);
    if (s == RC_OK)
        s = run_layers(e, &bd, tokens);
    if (e->n_stages > 1 && e->cur_stage != 0) { /* a failed call: device 0 current again */
        stage_fields(e, 0);
        if (e->be->ops->set_device(e->be, 0) != RC_OK && s == RC_OK)
            s = RC_ERR_DEVICE;
    }
    for (int64_t b = 0; b < n_seq && e->st.absorbed; b++) /* a failed call leaves the slot to restart at 0 */
        if (slots[b] >= 0 && slots[b] < e->kv.n_slots)
            e->st.absorbed[slots[b]] = s == RC_OK ? starts[b] + n_new[b] : -1;
    /* final norm + LM head + log-softmax, on the requested rows, in chunks */
    const rc_backend_ops *op = e->be->ops;
    const int64_t H = c->hidden, V = c->vocab;
    for (int64_t i0 = 0; i0 < n_out && s == RC_OK; i0 += e->logit_rows) {
        int64_t n = n_out - i0 < e->logit_rows ? n_out - i0 : e->logit_rows;
        /* a 2-byte x's rows gathered as they are: H / 2 whole floats each (engine_act_st: H even) */
        s = op->gather_rows(e->be, e->x, e->x_st == RC_F32 ? H : H / 2, out_rows + i0, n, e->lt);
        if (s == RC_OK)
            s = act_norm(e, c->norm, e->lt, e->x_st, n, H, rc_wt_vec(e->w.lnf_w), rc_wt_vec(e->w.lnf_b),
                         c->norm_eps, c->norm_w_f32 ? RC_F32 : rr.norm_mid, rr.norm_final, e->lh, RC_F32);
        if (s == RC_OK && e->hook.fn)
            s = capture(e, &bd, c->n_layers, RC_TOP_NORM_F, 0, n, out_rows + i0, e->lh, H, H, rr.norm_final, NULL);
        const rc_dtype head_in = gemm_in(rr.norm_final, (e->num.upcast & RC_UPCAST_LM_HEAD) ? RC_F32 : e->num.dt);
        if (s == RC_OK && e->logits_st == RC_F32)
            s = op->matmul(e->be, e->lh, n, H, e->w.lm_head, V, NULL, head_in, rr.logits, e->logits);
        else if (s == RC_OK) /* the logits at the dtype's width (engine_act_st) */
            s = op->matmul_st(e->be, e->lh, RC_F32, n, H, e->w.lm_head, V, NULL, head_in, rr.logits, e->logits,
                              e->logits_st);
        if (s == RC_OK && c->final_softcap > 0) /* Gemma 2: cap * tanh(logits / cap), each op in the logits' dtype */
            s = op->softcap(e->be, e->logits, n * V, (float)c->final_softcap, rr.logits);
        if (s == RC_OK && e->hook.fn)
            s = capture(e, &bd, c->n_layers, RC_TOP_LOGITS, 0, n, out_rows + i0, e->logits, V, V, rr.logits, NULL);
        const bool th = e->target.fn && targets && target_out && !full_out; /* the rows, then the hook */
        float *lp_full = th ? e->target.buf : full_out ? full_out + i0 * V : NULL;
        const int32_t *lp_tg = targets && !th ? targets + i0 : NULL;
        float *lp_out = target_out && !th ? target_out + i0 : NULL;
        if (s == RC_OK && e->logits_st == RC_F32)
            s = op->logprobs(e->be, e->logits, n, V, e->num.temperature, e->num.logprob_dt, lp_full, lp_tg, lp_out);
        else if (s == RC_OK)
            s = op->logprobs_st(e->be, e->logits, e->logits_st, n, V, e->num.temperature, e->num.logprob_dt, lp_full,
                                lp_tg, lp_out);
        if (s == RC_OK && th)
            s = e->target.fn(e->target.ctx, e->target.buf, n, V, targets + i0, target_out + i0);
    }
    return s;
}

rc_status rc_full_forward(rc_engine *e, const int32_t *tokens, const int64_t *lens, int64_t n_seq,
                          float *full_out)
{
    const int64_t V = e->model->cfg.vocab;
    /* one pass holds at most max_rows sequences (each has >= 1 row) */
    int64_t *slots = e->ix + 3 * e->max_rows, *starts = e->ix + 4 * e->max_rows, *rows = e->ix + 5 * e->max_rows;
    rc_status s = RC_OK;
    /* as many whole sequences per pass as the engine's rows and slots allow */
    int64_t b = 0, tok0 = 0;
    while (s == RC_OK && b < n_seq) {
        int64_t nb = 0, R = 0;
        while (b + nb < n_seq && nb < e->kv.n_slots && nb < e->max_rows && R + lens[b + nb] <= e->max_rows) {
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
        for (int64_t i = 0; i < nb; i++)
            starts[i] = 0;
        s = rc_engine_step(e, slots, starts, lens + b, nb, tokens + tok0, rows, R,
                           full_out ? full_out + tok0 * V : NULL, NULL, NULL);
        b += nb;
        tok0 += R;
    }
    return s;
}
