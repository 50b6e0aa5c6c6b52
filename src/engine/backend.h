/* The backend interface: every numeric op the forward pass needs. forward.c
 * is written once against it; backend_cpu.c is the reference implementation
 * (and the CPU twin of every CUDA kernel in kernels/).
 *
 * Activations are float32 arrays (a device backend may hold some at the
 * dtype's width: matmul_st, act_st, act_mul_st, norm_st, add_st, logprobs_st,
 * qk_norm_st, embed_st, rc_attn_params.qkv_st / out_st); weights passed to matmul, embed and
 * normalize_rows are rc_wt (fp32, bf16 or fp16 storage, converted exactly
 * to fp32 where they are read, on the CPU and the GPU alike). The dtype
 * model works by rounding: every op
 * takes the dtype its output is rounded to (RC_F32: not rounded; RC_BF16 /
 * RC_F16: rounded to nearest-even into that dtype's values). Which op rounds
 * where is decided in one place, forward.c; how each reduction is ordered is
 * the backend's kernel strategy (rc_kernels). */
#ifndef RC_BACKEND_H
#define RC_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "gdn.h"
#include "model.h"
#include "ops_inline.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Description of the sequences in one forward call (host memory). Tokens of
 * all sequences are packed: sequence b owns rows [row0[b], row0[b] + n_new[b]). */
typedef struct {
    int64_t n_seq;
    const int64_t *slot;  /* [n_seq] KV-cache slot */
    const int64_t *start; /* [n_seq] position of the first new token */
    const int64_t *n_new; /* [n_seq] new tokens (>= 1) */
    const int64_t *row0;  /* [n_seq] first packed row */
    int64_t n_rows;       /* sum of n_new */
    const int64_t *pos;   /* [n_rows] absolute position of each row */
    const int64_t *seq_of_row; /* [n_rows] which sequence owns the row */
    /* rope and attention compute rows [row_lo, row_hi) of the call only (the
     * engine's row chunks): qkv and out hold just those rows, and only their
     * keys and values are stored. Everything else above describes the whole
     * call, so what depends on it (the longest sequence's key length, a
     * sequence's new tokens) is unchanged. row_hi 0: every row. */
    int64_t row_lo, row_hi;
} rc_batch_desc;

/* the end of the rows a call computes */
static inline int64_t rc_bd_row_hi(const rc_batch_desc *bd) { return bd->row_hi > 0 ? bd->row_hi : bd->n_rows; }

/* KV cache: for each layer, K and V of [n_slots, n_kv_heads, max_len, head_dim],
 * stored as dt: RC_F32 in k / v; RC_BF16 or RC_F16 (any backend, when
 * every cached value is a value of that dtype) in k16 / v16. quant: what a
 * new key or value becomes when stored (rco_kv_value: as it is, or vLLM's
 * fp8 round trip with k_scale / v_scale, dequantised to deq_dt); attention
 * then reads the stored values, the new rows' included, as vLLM's backends
 * read their paged cache. */
typedef struct {
    int64_t n_layers, n_slots, n_kv_heads, max_len, head_dim;
    rc_dtype dt;
    float *k;      /* [n_layers][n_slots][n_kv_heads][max_len][head_dim] (RC_F32), else NULL */
    float *v;      /* same */
    uint16_t *k16; /* the same layout in 2-byte elements (RC_BF16 / RC_F16), else NULL */
    uint16_t *v16;
    rc_kv_quant quant;
    float k_scale, v_scale; /* fp8: the per-tensor scales (vLLM's _k_scale / _v_scale) */
    rc_dtype deq_dt;        /* fp8: the dequantised values' dtype (the run's) */
} rc_kv_cache;

/* How reductions are ordered (see README "Kernel strategies").
 *  ENGINE:    organised like inference engines: GEMMs with M <= 16 split K in
 *             4 slices, larger M accumulate 8 interleaved partial sums;
 *             prefill attention in key tiles of 64 with online softmax
 *             statistics, decode attention split over the KV length in chunks
 *             of 32 and merged; RMSNorm's row reduction depends on M.
 *  INVARIANT: every reduction in one fixed order that depends only on its
 *             length: cached decode and full forward agree bit for bit.
 *  BLAS:      GEMMs from OpenBLAS cblas_sgemm, single-threaded (what PyTorch on
 *             CPU does; its order changes with M), everything else as ENGINE. */
typedef enum { RC_KERNELS_ENGINE, RC_KERNELS_INVARIANT, RC_KERNELS_BLAS } rc_kernels;

const char *rc_kernels_name(rc_kernels k);

/* Rounding points inside attention. */
typedef struct {
    rc_dtype score_dt; /* scores = R(R(q.k) * scale) when MD, f32 otherwise */
    rc_dtype prob_dt;  /* softmax (fp32 inside) output rounding */
    rc_dtype out_dt;   /* P.V output rounding */
} rc_attn_numerics;

/* How positions enter attention (rc_config.pos says which family uses which;
 * this is what the kernels implement). ROTARY: RoPE on the first rotary_dim
 * dims of each Q and K head; ALIBI: a per-head linear bias on the scores
 * (BLOOM, MPT, Baichuan-13B); LEARNED: position embeddings added to the input
 * (GPT-2: nothing for rope or attention to do); NONE: no positions. */
typedef enum { RC_ATTN_POS_ROTARY, RC_ATTN_POS_ALIBI, RC_ATTN_POS_LEARNED, RC_ATTN_POS_NONE } rc_attn_pos;

/* How causal / sliding-window masked keys enter the softmax. SKIP: they take
 * no part in it, exactly as an additive -inf mask. Every family's HF mask
 * (0 / finfo.min added, or masked_fill / torch.max with finfo.min) gives the
 * same probabilities: exp(finfo.min - max) is exactly 0 in fp32 for any
 * finite score, so SKIP is what every family uses; FINFO_MIN is kept as a
 * name for a mask the kernels do not implement (refused). */
typedef enum { RC_MASK_SKIP, RC_MASK_FINFO_MIN } rc_mask_kind;

/* Which position the ALiBi distance of key j is measured from: bias =
 * slope * (pos(j) - ref). KEY0: ref 0, bias grows with the key position
 * (BLOOM's slope * arange, Baichuan-13B's alibi mask); LAST_KEY: ref = the
 * last key of this call for the sequence (MPT: its bias table is sliced to
 * the key length, so a prefill row's bias depends on the prompt length);
 * QUERY: ref = the query's own position, bias = -slope * distance <= 0 (the
 * row max subtracted: --alibi-bias rowmax, what FlashAttention and vLLM
 * compute). Softmax is the same for all three in exact arithmetic; they
 * differ by rounding. */
typedef enum { RC_ALIBI_REF_KEY0, RC_ALIBI_REF_LAST_KEY, RC_ALIBI_REF_QUERY } rc_alibi_ref;

/* Everything rope and attention need, and nothing more: built once per
 * forward call from the model config (rc_attn_params_from_config) instead of
 * the ops reading the whole rc_config. The backends refuse a value they do
 * not implement with RC_ERR_UNSUPPORTED rather than ignore it
 * (rc_attn_params_check). */
typedef struct {
    int64_t n_heads, n_kv_heads, head_dim;
    /* position encoding */
    rc_attn_pos pos;
    int64_t rotary_dim;       /* leading dims of each head rotated (even; 0 unless ROTARY) */
    const float *inv_freq;    /* [rotary_dim / 2], backend memory, fp32 as HF computes it */
    rc_dtype rope_cs_dt;      /* cos / sin tables */
    rc_dtype rope_mid_dt;     /* q*cos and rotate_half(q)*sin (rope_dt, or fp32: Baichuan2-7B) */
    rc_dtype rope_dt;         /* their sum: the rotated q and k */
    float rope_attn_factor;   /* cos and sin multiplied by it in fp32 before their rounding (YaRN's
                               * attention factor; 1 otherwise) */
    /* ALiBi (pos == ALIBI): score(j) gets slope[h] * (pos(j) - ref) */
    const float *alibi_slopes; /* [n_heads] fp32, backend memory; NULL unless ALIBI */
    rc_alibi_ref alibi_ref;
    rco_alibi_mode alibi_mode; /* ADD or FUSED (rco_score_spec) */
    rc_dtype alibi_bias_dt;   /* rounding of slope * distance */
    rc_dtype alibi_add_dt;    /* ADD: rounding of score + bias */
    /* scores */
    float scale;              /* multiplier head_dim ** -0.5 (a Python float, then fp32), or the
                               * divisor sqrt(head_dim) when score_div */
    bool score_div;           /* scores divided by scale (Baichuan) instead of multiplied */
    float softcap;            /* > 0: scaled scores soft-capped, R(R(tanh(R(s / softcap))) * softcap) in
                               * score_dt (Gemma 2's attn_logit_softcapping); 0: none */
    int64_t sliding_window;   /* 0: none */
    const float *sinks;       /* [n_heads] fp32 attention sink logits (backend memory; gpt-oss), or NULL:
                               * one more softmax column per head (rco_softmax_sink) */
    rc_mask_kind mask;
    rc_attn_numerics num;     /* rounding points inside attention */
    /* how rope and attention's qkv and attention's out are held (forward.c engine_act_st; docs/gpu.md
     * "Activations at the dtype's width"): RC_F32 (float arrays), or on a device backend RC_BF16 / RC_F16,
     * that dtype's 2-byte bit patterns, every value one of it (qkv_st: RoPE's output rounded to it, rope_dt;
     * out_st: num.out_dt), read widened and written as the bits of the rounded value: the same arithmetic on
     * the same values. The CPU backend refuses anything but RC_F32. */
    rc_dtype qkv_st, out_st;
} rc_attn_params;

/* The attention parameters of a model (forward.c): shapes, position
 * encoding (cfg->pos), RoPE (inv_freq: the model's table in backend memory),
 * sliding window, the family's scaling and ALiBi rule from cfg (rounding of
 * the bias from num->score_dt and cfg->alibi_add), rounding points as given.
 * An ALiBi model's slopes are not set here: rc_attn_params_set_alibi. */
rc_attn_params rc_attn_params_from_config(const rc_config *cfg, const float *inv_freq, rc_dtype rope_cs_dt,
                                          rc_dtype rope_dt, const rc_attn_numerics *num);
/* The ALiBi slopes (backend memory, [n_heads]) and, with rowmax, distances
 * measured from the query (--alibi-bias rowmax) instead of the family's
 * reference. */
void rc_attn_params_set_alibi(rc_attn_params *ap, const float *slopes, bool rowmax);

/* The per-row score spec of head h for a query at position p whose key range
 * starts at position key0, in a call whose last key of this sequence is at
 * last_key (host and device; slopes: ap->alibi_slopes in the caller's
 * memory). */
RC_HD static inline rco_score_spec rc_attn_score_spec(const rc_attn_params *ap, const float *slopes, int64_t h,
                                                      int64_t p, int64_t key0, int64_t last_key)
{
    rco_score_spec sp;
    sp.scale = ap->scale;
    sp.div = ap->score_div ? 1 : 0;
    sp.score_dt = ap->num.score_dt;
    sp.softcap = ap->softcap;
    sp.alibi = ap->pos == RC_ATTN_POS_ALIBI ? ap->alibi_mode : RCO_ALIBI_NONE;
    sp.slope = sp.alibi != RCO_ALIBI_NONE ? slopes[h] : 0.0f;
    sp.key0 = key0;
    sp.ref = ap->alibi_ref == RC_ALIBI_REF_QUERY ? p : ap->alibi_ref == RC_ALIBI_REF_LAST_KEY ? last_key : 0;
    sp.bias_dt = ap->alibi_bias_dt;
    sp.add_dt = ap->alibi_add_dt;
    sp.has_sink = ap->sinks != NULL;
    sp.sink = ap->sinks ? ap->sinks[h] : 0.0f;
    return sp;
}

/* RC_OK when the backends implement every field of ap; otherwise one line
 * naming op and the field: RC_ERR_UNSUPPORTED for what is not implemented
 * (the finfo.min mask), RC_ERR_INTERNAL for parameters that contradict
 * themselves. */
static inline rc_status rc_attn_params_check(const rc_attn_params *ap, const char *op)
{
    if (ap->mask != RC_MASK_SKIP)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: finfo.min attention masks are not supported", op);
    if (ap->pos != RC_ATTN_POS_ROTARY && ap->pos != RC_ATTN_POS_ALIBI && ap->pos != RC_ATTN_POS_LEARNED &&
        ap->pos != RC_ATTN_POS_NONE)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: unknown position encoding %d", op, (int)ap->pos);
    if (ap->pos == RC_ATTN_POS_ALIBI) {
        if (!ap->alibi_slopes)
            return rc_errorf(RC_ERR_INTERNAL, "%s: ALiBi without slopes", op);
        if (ap->alibi_mode != RCO_ALIBI_ADD && ap->alibi_mode != RCO_ALIBI_FUSED)
            return rc_errorf(RC_ERR_INTERNAL, "%s: ALiBi mode %d", op, (int)ap->alibi_mode);
        if (ap->alibi_ref != RC_ALIBI_REF_KEY0 && ap->alibi_ref != RC_ALIBI_REF_LAST_KEY &&
            ap->alibi_ref != RC_ALIBI_REF_QUERY)
            return rc_errorf(RC_ERR_INTERNAL, "%s: ALiBi reference %d", op, (int)ap->alibi_ref);
    } else if (ap->alibi_slopes) {
        return rc_errorf(RC_ERR_INTERNAL, "%s: ALiBi slopes without ALiBi positions", op);
    }
    for (int i = 0; i < 2; i++) { /* a 2-byte qkv holds RoPE's rounded output, a 2-byte out P.V's */
        const rc_dtype st = i ? ap->out_st : ap->qkv_st;
        const rc_dtype dt = i ? ap->num.out_dt : ap->pos == RC_ATTN_POS_ROTARY && ap->rotary_dim > 0 ? ap->rope_dt : st;
        if (st != RC_F32 && ((st != RC_BF16 && st != RC_F16) || dt != st))
            return rc_errorf(RC_ERR_INTERNAL, "%s: %s held as %s, its values rounded to %s", op, i ? "out" : "qkv",
                             rc_dtype_name(st), rc_dtype_name(dt));
    }
    if (ap->pos != RC_ATTN_POS_ROTARY && ap->rotary_dim != 0)
        return rc_errorf(RC_ERR_INTERNAL, "%s: rotary_dim %lld without rotary positions", op,
                         (long long)ap->rotary_dim);
    if (ap->n_heads <= 0 || ap->n_kv_heads <= 0 || ap->n_heads % ap->n_kv_heads != 0 || ap->head_dim <= 0 ||
        ap->rotary_dim < 0 || ap->rotary_dim % 2 != 0 || ap->rotary_dim > ap->head_dim || !(ap->scale > 0.0f) ||
        !(ap->softcap >= 0.0f) ||
        !(ap->rope_attn_factor > 0.0f))
        return rc_errorf(RC_ERR_INTERNAL, "%s: bad attention shape (%lld/%lld heads, head_dim %lld, rotary %lld)",
                         op, (long long)ap->n_heads, (long long)ap->n_kv_heads, (long long)ap->head_dim,
                         (long long)ap->rotary_dim);
    return RC_OK;
}

/* fp8 weights on a device backend (fp8w.c; README "Numerics: fp8 weights").
 * How a call's activations are quantized: per token (one scale per row), per
 * tensor (one scale for the call), or in 1 x 128 groups of a row (block
 * weights; K a multiple of 128). */
typedef enum { RC_FP8_ACT_TOKEN, RC_FP8_ACT_TENSOR, RC_FP8_ACT_GROUP } rc_fp8_act;

/* One step of an fp8 GEMM's epilogue over y [M, N] (backend memory), each
 * output from the scalar rules of ops_inline.h:
 *  SCALED:    y = rco_fp8w_epilogue(y, s_x, s_w, bias): y holds the fp32 GEMM
 *             of the fp8 values; s_x = sx[0] when sx_tensor else sx[row],
 *             s_w = sw[0] when sw_tensor else sw[col];
 *  BLOCK_ACC: y = rco_fp8w_block_acc(k ? y : 0, part, sx[row * kb + k],
 *             sw[(col / 128) * kb + k]) for K slice k of kb;
 *  BLOCK_OUT: y = rco_fp8w_block_out(y, bias), or with rw
 *             rco_fp8w_block_out_w(y, rw[row]) (a fused MoE kernel's
 *             routed weight). */
typedef enum { RC_FP8_EPI_SCALED, RC_FP8_EPI_BLOCK_ACC, RC_FP8_EPI_BLOCK_OUT } rc_fp8_epi_kind;

typedef struct {
    rc_fp8_epi_kind kind;
    float *y;
    const float *part;     /* BLOCK_ACC: the slice's fp32 partial [M, N] */
    const float *sx, *sw;  /* activation and weight scales */
    bool sx_tensor, sw_tensor;
    const float *bias;     /* [N] or NULL (SCALED, BLOCK_OUT) */
    const float *rw;       /* [M] or NULL (BLOCK_OUT; no bias with it) */
    int64_t M, N, kb, k;   /* kb, k: BLOCK_ACC */
    rc_dtype out_dt;       /* SCALED, BLOCK_OUT */
} rc_fp8_epi;

typedef struct rc_backend rc_backend;

typedef struct {
    const char *name;
    /* true when the backend's buffers are host memory (the CPU): forward.c
     * then computes with the model's own weights in place where their values
     * need no rounding, and keeps GEMM weights at the dtype's width */
    bool host_memory;
    void (*destroy)(rc_backend *be);
    rc_status (*alloc)(rc_backend *be, int64_t n_floats, float **out);
    void (*free)(rc_backend *be, float *p);
    /* copy n floats host -> backend memory, rounding them to dt */
    rc_status (*upload)(rc_backend *be, const float *host, int64_t n, rc_dtype dt, float *dst);
    /* copy n floats backend memory -> host */
    rc_status (*download)(rc_backend *be, const float *src, int64_t n, float *host);
    /* dst[i, :] = src[rows[i], :] for i < n, rows of row_len floats (rows: host) */
    rc_status (*gather_rows)(rc_backend *be, const float *src, int64_t row_len, const int64_t *rows,
                             int64_t n, float *dst);
    /* out[r, :] = table[tokens[r], :], r < n (exact: a copy, or a widening to fp32) */
    rc_status (*embed)(rc_backend *be, const int32_t *tokens, int64_t n, rc_wt table, int64_t hidden,
                       float *out);
    /* LayerNorm: out = R_out(((x - mean) * rstd) * w + b), fp32 inside.
     * RMSNorm (HF Llama order): out = R_out(w * R_mid(x * rsqrt(mean(x^2) + eps))). */
    rc_status (*norm)(rc_backend *be, rc_norm_kind kind, const float *x, int64_t M, int64_t H,
                      const float *w, const float *b, double eps, rc_dtype mid_dt, rc_dtype out_dt,
                      float *out);
    /* y[M, N] = R(x[M, K] . W[N, K]^T + bias[N]), fp32 accumulation, bias added
     * in fp32 before the single rounding. in_dt: a dtype every value of x and
     * W is exactly representable in (RC_F32 when they differ); a backend may
     * feed the GEMM operands of that dtype (cuBLAS bf16 / fp16 GEMMs, as
     * frameworks do), which changes nothing but the speed. */
    rc_status (*matmul)(rc_backend *be, const float *x, int64_t M, int64_t K, rc_wt W, int64_t N,
                        const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y);
    /* The same over the K-slice [k0, k0 + Ks) of x[M, K] and W[N, K] (one TP
     * rank's partial of a row-parallel layer): y[M, N] = R(x[:, k0:k0+Ks] .
     * W[:, k0:k0+Ks]^T + bias), summed in the order of a GEMM of depth Ks
     * (what matmul gives for x and W holding just those columns). */
    rc_status (*matmul_kslice)(rc_backend *be, const float *x, int64_t M, int64_t K, int64_t k0, int64_t Ks,
                               rc_wt W, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y);
    /* RoPE in place on the Q and K heads of packed qkv rows
     * [n_rows, (nh + 2 nkv) * d], first rotary_dim dims of each head:
     * x = R_out(R_out(x * c) + R_out(rotate_half(x) * s)), c, s = R_cs(cos/sin
     * of the fp32 angle), R_cs / R_out: ap->rope_cs_dt / ap->rope_dt (the two
     * products rounded to ap->rope_mid_dt before the sum). Nothing
     * to do unless ap->pos is ROTARY with rotary_dim > 0. */
    rc_status (*rope)(rc_backend *be, float *qkv, const rc_batch_desc *bd, const rc_attn_params *ap);
    /* Append K, V of the new rows to the cache and compute causal attention of
     * every new row over its sequence's cache (rounding: ap->num). out:
     * [n_rows, nh * d]. */
    rc_status (*attention)(rc_backend *be, const float *qkv, const rc_batch_desc *bd,
                           const rc_attn_params *ap, rc_kv_cache *kv, int64_t layer, float *out);
    /* q / k RMSNorm in place on packed qkv rows [M, stride] (rco_qk_norm_seg
     * for each row and segment): nq segments of dq values (Q) with wq [dq],
     * then nk segments of dk values (K) with wk [dk]; RMSNorm's lanes as
     * norm's for M rows */
    rc_status (*qk_norm)(rc_backend *be, float *qkv, int64_t M, int64_t stride, int64_t nq, int64_t dq,
                         const float *wq, int64_t nk, int64_t dk, const float *wk, double eps, rc_dtype mid_dt,
                         rc_dtype out_dt);
    /* x = min(max(x, -c), c) in place (MPT's clip_qkv; exact, no rounding) */
    rc_status (*clamp)(rc_backend *be, float *x, int64_t n, float c);
    /* x = R(x * s) in place, fp32 product (Gemma's embedding scale; rco_scale1) */
    rc_status (*scale)(rc_backend *be, float *x, int64_t n, float s, rc_dtype out_dt);
    /* x = R(R(tanh(R(x / cap))) * cap) in place (Gemma 2's final logit
     * soft-capping; rco_softcap1) */
    rc_status (*softcap)(rc_backend *be, float *x, int64_t n, float cap, rc_dtype out_dt);
    /* out[r, :] = F.normalize(W[r, :]) for r < M rows of H (Baichuan2's
     * NormHead; rco_normalize_row), rounded to out_dt; out may alias W when W is fp32 */
    rc_status (*normalize_rows)(rc_backend *be, rc_wt W, int64_t M, int64_t H, float eps,
                                rc_dtype out_dt, float *out);
    /* x = R(act(x)), fp32 inside */
    rc_status (*act)(rc_backend *be, rc_act act, float *x, int64_t n, rc_dtype out_dt);
    /* gate = R_out(R_act(act(gate)) * up) */
    rc_status (*act_mul)(rc_backend *be, rc_act act, float *gate, const float *up, int64_t n,
                         rc_dtype act_dt, rc_dtype out_dt);
    /* out = R(a + b) (out may alias a or b) */
    rc_status (*add)(rc_backend *be, const float *a, const float *b, int64_t n, rc_dtype out_dt,
                     float *out);
    /* Next-token log-probs of the temperature-scaled logits [M, V]:
     * z = R_lp(x / temperature); lp = R_lp(z - logsumexp(z)) with the
     * log-sum-exp accumulated in fp64. full_out (host, [M, V]) if non-NULL;
     * target_out[r] = lp[targets[r]] (host) if both non-NULL. */
    rc_status (*logprobs)(rc_backend *be, const float *logits, int64_t M, int64_t V,
                          float temperature, rc_dtype lp_dt, float *full_out,
                          const int32_t *targets, float *target_out);
    /* fp8 weights (fp8w.c), device backends only; NULL on a host-memory
     * backend, whose fp8 steps fp8w.c computes on its arrays (the CPU twin).
     * fp8_quant_act: x [M, K] (values of the dtype) to fp8 values q [M, K]
     * and scales sa ([M], [1], or [M][K / 128] for groups), as
     * rc_fp8w_quant_act. fp8_epilogue: one step of rc_fp8_epi. */
    rc_status (*fp8_quant_act)(rc_backend *be, const float *x, int64_t M, int64_t K, rc_fp8_act mode, float *q,
                               float *sa);
    rc_status (*fp8_epilogue)(rc_backend *be, const rc_fp8_epi *e);
    /* Mixture of experts (moe.c; the arithmetic: rco_moe_* in ops_inline.h).
     * x[0, n) = 0 */
    rc_status (*zero)(rc_backend *be, float *x, int64_t n);
    /* Routing of M rows of router logits [M, E]: rco_moe_route_row per row
     * into sel and w [M, top_k] (backend memory) */
    rc_status (*moe_route)(rc_backend *be, const float *logits, int64_t M, int64_t E, int64_t top_k, int renorm,
                           rc_dtype w_dt, float *sel, float *w);
    /* out[rows[i], :] = rco_moe_acc(out[rows[i], :], y[i, :], s_i, dt) for
     * i < n, s_i = w[widx[i]], or rco_moe_sigmoid(w[widx[i]], dt) when
     * sigmoid (rows, widx: host; the rows distinct) */
    rc_status (*moe_accumulate)(rc_backend *be, const float *y, int64_t n, int64_t H, const int64_t *rows,
                                const float *w, const int64_t *widx, bool sigmoid, rc_dtype dt, float *out);
    /* Gated DeltaNet (gdn.h): one recurrent decode step of n sequences
     * (rc_cpu_gdn_step; per sequence and value head rco_gdn_recurrent_token):
     * q, k [n][hk][dk], v [n][hv][dv], g, beta [n][hv], state
     * [n][hv][dk][dv] updated and rounded to state_dt, out [n][hv][dv] */
    rc_status (*gdn_step)(rc_backend *be, const rc_gdn_dims *d, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, int64_t n, rc_dtype out_dt, rc_dtype state_dt,
                          float *state, float *out);
    /* y[r, c] = R(y[r, c] + bias[c]) for M rows of N (a bias added after its
     * GEMM as a tensor op of its own: gpt-oss's experts, x @ W + b) */
    rc_status (*bias_add)(rc_backend *be, float *y, int64_t M, int64_t N, const float *bias, rc_dtype out_dt);
    /* gate = rco_swiglu_clamp1(gate, up, alpha, limit, dt) (gpt-oss's experts) */
    rc_status (*swiglu_clamp)(rc_backend *be, float *gate, const float *up, int64_t n, float alpha, float limit,
                              rc_dtype dt);
    /* The grouped sigmoid router (DeepSeek-V3, GLM-4.5) over M rows of fp32
     * router logits [M, E]: rco_moe_route_grouped_row per row into sel and w
     * [M, top_k]; bias: [E] e_score_correction_bias or NULL (backend memory) */
    rc_status (*moe_route_grouped)(rc_backend *be, const float *logits, const float *bias, int64_t M,
                                   const rco_grouped_router *g, float *sel, float *w);
    /* Several devices for one model (a layer split, forward.c; docs/gpu.md "Several GPUs"); NULL on a
     * backend of one device (the CPU). use_devices: span devices 0 .. n - 1 (RC_ERR_DEVICE when fewer are
     * visible; sets be->n_devices). set_device: the device of the allocations and ops that follow (free,
     * upload and download follow their buffer's device). copy_peer: n floats from src on device src_dev to
     * dst on device dst_dev (a copy: the values unchanged). */
    rc_status (*use_devices)(rc_backend *be, int n);
    rc_status (*set_device)(rc_backend *be, int dev);
    rc_status (*copy_peer)(rc_backend *be, float *dst, int dst_dev, const float *src, int src_dev, int64_t n);
    /* Activations held at the dtype's width (forward.c engine_act_st; docs/gpu.md "Activations at the
     * dtype's width"); NULL on a backend that holds every activation as fp32 (the CPU). Each is its fp32
     * op (matmul, act, act_mul) with an operand's storage given: x_st, y_st, st RC_F32 (a float array) or
     * RC_BF16 / RC_F16 (that dtype's 2-byte bit patterns, every value one of it; a 2-byte y gets the bits
     * of the rounded value, so y_st is then out_dt). The same arithmetic on the same values: the results
     * are those of the fp32 op. matmul_st's 2-byte operands need W at the dtype's width (RC_ERR_INTERNAL
     * otherwise). */
    rc_status (*matmul_st)(rc_backend *be, const void *x, rc_dtype x_st, int64_t M, int64_t K, rc_wt W, int64_t N,
                           const float *bias, rc_dtype in_dt, rc_dtype out_dt, void *y, rc_dtype y_st);
    rc_status (*act_st)(rc_backend *be, rc_act act, void *x, int64_t n, rc_dtype out_dt, rc_dtype st);
    rc_status (*act_mul_st)(rc_backend *be, rc_act act, void *gate, const void *up, int64_t n, rc_dtype act_dt,
                            rc_dtype out_dt, rc_dtype st);
    /* fp8 weights held as 1-byte codes on a device (fp8w.c); NULL on a host-memory backend. y[M, N] = the
     * fp32 GEMM (no bias, not rounded) of x[:, k0:k0+Ks] (x [M, K], fp32 arrays of e4m3 values) and the
     * columns [k0, k0 + Ks) of the weight held as float8_e4m3fn codes [N][K]: matmul_kslice's result with
     * in_dt RC_BF16 over the codes' values as a bf16 weight, to the bit. wb: a workspace of N * K 2-byte
     * values the backend may widen the codes into (engine kernels: cuBLAS's bf16 operand), widened when
     * widen is true; a K-slice that follows passes false and reads it as left. Invariant kernels read the
     * codes, each widened in registers (wb may be NULL). */
    rc_status (*fp8_matmul)(rc_backend *be, const float *x, int64_t M, int64_t K, int64_t k0, int64_t Ks,
                            const void *codes, int64_t N, void *wb, bool widen, float *y);
    /* Hybrid linear-attention models (gdn.h): gdn_mixer, a Gated DeltaNet layer's mixer for one sequence's
     * call (rc_gdn_mixer_args: from in_proj_qkvz / in_proj_ba's outputs to out_proj's input, the slot's
     * conv and recurrent states updated; CPU: rc_cpu_gdn_mixer); gate_mul, x[i] = R_out(x[i] *
     * R_gate(sigmoid(gate[i]))) (the attention output gate; rco_gate_sigmoid_mul) */
    rc_status (*gdn_mixer)(rc_backend *be, const rc_gdn_mixer_args *a);
    rc_status (*gate_mul)(rc_backend *be, float *x, const float *gate, int64_t n, rc_dtype gate_dt, rc_dtype out_dt);
    /* W8A16's weights held as 1-byte codes on a device (fp8w.c); NULL on a host-memory backend. y[M, N] =
     * matmul's result (bias, in_dt, out_dt as there) with the weight W'[n][k] = R(q * rs) in dt
     * (ops_inline.h rco_fp8w_deq; codes [N][K] float8_e4m3fn, rs the scales rounded to dt, laid out by
     * scale_mode: rco_fp8w_scale_at), to the bit matmul over W' held at 2 bytes of dt. Invariant kernels
     * dequantize each code in registers (wb may be NULL); engine kernels dequantize the weight into wb (N * K
     * 2-byte values) and run that matmul over it. fp8_dequant: the dequantization into wb alone (a GEMM in K
     * slices over W', TP's row-parallel partials). */
    rc_status (*fp8_deq_matmul)(rc_backend *be, const float *x, int64_t M, int64_t K, const void *codes,
                                const float *rs, int scale_mode, rc_dtype dt, int64_t N, const float *bias,
                                rc_dtype in_dt, rc_dtype out_dt, void *wb, float *y);
    rc_status (*fp8_dequant)(rc_backend *be, const void *codes, const float *rs, int scale_mode, rc_dtype dt,
                             int64_t N, int64_t K, void *wb);
    /* norm with its input held as x_st and its output as out_st (RC_F32: floats; RC_BF16 / RC_F16: the 2-byte
     * bits of one dtype, a 2-byte output's values rounded to it, out_dt): the same arithmetic on the same
     * values (forward.c engine_act_st); NULL on a backend that holds every activation as fp32 (the CPU) */
    rc_status (*norm_st)(rc_backend *be, rc_norm_kind kind, const void *x, rc_dtype x_st, int64_t M, int64_t H,
                         const float *w, const float *b, double eps, rc_dtype mid_dt, rc_dtype out_dt, void *out,
                         rc_dtype out_st);
    /* add with each operand's storage given (x_st, y_st, out_st: RC_F32, or the 2-byte bits of one dtype, a
     * 2-byte out of out_dt); out may alias x or y; NULL as norm_st */
    rc_status (*add_st)(rc_backend *be, const void *x, rc_dtype x_st, const void *y, rc_dtype y_st, int64_t n,
                        rc_dtype out_dt, void *out, rc_dtype out_st);
    /* logprobs over logits held as st (RC_F32 floats, or the 2-byte bits of RC_BF16 / RC_F16: rco_logprob_row_st,
     * the arithmetic of logprobs on the same values); NULL as norm_st */
    rc_status (*logprobs_st)(rc_backend *be, const void *logits, rc_dtype st, int64_t M, int64_t V, float temperature,
                             rc_dtype lp_dt, float *full_out, const int32_t *targets, float *target_out);
    /* qk_norm over qkv held as st (RC_F32 floats, or the 2-byte bits of out_dt): the same arithmetic on the same
     * values (rco_norm_stats_st, rco_norm_out); NULL as norm_st */
    rc_status (*qk_norm_st)(rc_backend *be, void *qkv, rc_dtype st, int64_t M, int64_t stride, int64_t nq, int64_t dq,
                            const float *wq, int64_t nk, int64_t dk, const float *wk, double eps, rc_dtype mid_dt,
                            rc_dtype out_dt);
    /* embed into rows held as out_st (2 bytes: the table's values, of that dtype, as bits); NULL as norm_st */
    rc_status (*embed_st)(rc_backend *be, const int32_t *tokens, int64_t n, rc_wt table, int64_t hidden, void *out,
                          rc_dtype out_st);
} rc_backend_ops;

#define RC_MAX_DEVICES 8 /* the most devices one model is split over */

struct rc_backend {
    const rc_backend_ops *ops;
    int n_threads;
    rc_kernels kernels;
    /* the devices an engine splits its layers over (0 or 1: one), and how many layers each holds
     * (layer_split[0 .. n_devices - 1]; all 0: the engine splits them evenly by weight bytes) */
    int n_devices;
    int64_t layer_split[RC_MAX_DEVICES];
};

/* CPU backend (backend_cpu.c). n_threads <= 0: all cores. In a build
 * without OpenBLAS (meson -Dblas=disabled) RC_KERNELS_BLAS is refused with
 * RC_ERR_UNSUPPORTED and rc_blas_missing_msg. */
extern const char *const rc_blas_missing_msg;
bool rc_have_blas(void); /* was this build linked with OpenBLAS? */
rc_status rc_backend_cpu_create(int n_threads, rc_kernels kernels, rc_backend **out);
void rc_backend_destroy(rc_backend *be);

#ifdef __cplusplus
}
#endif

#endif
