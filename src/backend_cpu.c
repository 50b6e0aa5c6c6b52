/* CPU backend: the reference implementation of every op.
 *
 * GEMMs go to OpenBLAS cblas_sgemm; everything else is plain C with OpenMP
 * over independent rows. Reductions inside one row run in a fixed sequential
 * order in fp32 (norm statistics, attention dot products and softmax sums),
 * except the log-sum-exp of the log-probs, which accumulates in fp64. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "util.h"

typedef struct {
    rc_backend base;
    rc_gemm_mode gemm;
} cpu_backend;

static void cpu_destroy(rc_backend *be) { free(be); }

static rc_status cpu_alloc(rc_backend *be, int64_t n, float **out)
{
    (void)be;
    return rc_alloc_aligned((void **)out, n, sizeof(float), "activation buffer");
}

static void cpu_free(rc_backend *be, float *p)
{
    (void)be;
    free(p);
}

static rc_status cpu_embed(rc_backend *be, const int32_t *tokens, int64_t n, const float *table,
                           int64_t hidden, float *out)
{
    (void)be;
    for (int64_t r = 0; r < n; r++)
        memcpy(out + r * hidden, table + (int64_t)tokens[r] * hidden, (size_t)hidden * sizeof *out);
    return RC_OK;
}

/* LayerNorm (torch.nn.functional.layer_norm): mean, biased variance, both in
 * fp32; y = (x - mean) * rstd * w + b.
 * RMSNorm (LlamaRMSNorm): variance = mean(x^2) in fp32;
 * y = w * (x * rsqrt(variance + eps)). */
static rc_status cpu_norm(rc_backend *be, rc_norm_kind kind, const float *x, int64_t M, int64_t H,
                          const float *w, const float *b, double eps, float *out)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * H;
        float *yr = out + r * H;
        if (kind == RC_NORM_LAYER) {
            float sum = 0.0f;
            for (int64_t i = 0; i < H; i++)
                sum += xr[i];
            float mean = sum / (float)H;
            float var = 0.0f;
            for (int64_t i = 0; i < H; i++) {
                float d = xr[i] - mean;
                var += d * d;
            }
            var = var / (float)H;
            float rstd = 1.0f / sqrtf(var + (float)eps);
            for (int64_t i = 0; i < H; i++) {
                float v = (xr[i] - mean) * rstd * w[i];
                yr[i] = b ? v + b[i] : v;
            }
        } else {
            float ss = 0.0f;
            for (int64_t i = 0; i < H; i++)
                ss += xr[i] * xr[i];
            float var = ss / (float)H;
            float rs = 1.0f / sqrtf(var + (float)eps);
            for (int64_t i = 0; i < H; i++)
                yr[i] = w[i] * (xr[i] * rs);
        }
    }
    return RC_OK;
}

/* Fixed-order dot product: 16 lanes, lane j accumulates k = j, j+16, ...
 * sequentially (the K tail goes to lanes 0..), then a fixed pairwise tree.
 * The order depends only on K, never on M, N or the row's position, so a row
 * gets bit-identical results whatever batch it is computed in. */
#define DOT_LANES 16
static inline float dot_fixed(const float *a, const float *b, int64_t K)
{
    float acc[DOT_LANES] = {0};
    int64_t k = 0;
    for (; k + DOT_LANES <= K; k += DOT_LANES)
        for (int j = 0; j < DOT_LANES; j++)
            acc[j] += a[k + j] * b[k + j];
    for (int j = 0; k + j < K; j++)
        acc[j] += a[k + j] * b[k + j];
    for (int w = DOT_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

/* y = x W^T (+ bias) with dot_fixed per element. Tiled over N (a block of W
 * rows stays in cache while every x row passes) and parallel over the tiles;
 * tiling changes only which element is computed when, not how. */
#define GEMM_N_TILE 32
static void gemm_fixed(const float *x, int64_t M, int64_t K, const float *W, int64_t N,
                       const float *bias, float *y)
{
    int64_t tiles = (N + GEMM_N_TILE - 1) / GEMM_N_TILE;
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
    for (int64_t mt = 0; mt < (M + 63) / 64; mt++)
        for (int64_t t = 0; t < tiles; t++) {
            int64_t n1 = (t + 1) * GEMM_N_TILE < N ? (t + 1) * GEMM_N_TILE : N;
            int64_t m1 = (mt + 1) * 64 < M ? (mt + 1) * 64 : M;
            for (int64_t m = mt * 64; m < m1; m++)
                for (int64_t n = t * GEMM_N_TILE; n < n1; n++) {
                    float v = dot_fixed(x + m * K, W + n * K, K);
                    y[m * N + n] = bias ? v + bias[n] : v;
                }
        }
}

static rc_status cpu_matmul(rc_backend *be, const float *x, int64_t M, int64_t K, const float *W,
                            int64_t N, const float *bias, float *y)
{
    if (M == 0 || N == 0)
        return RC_OK;
    if (((cpu_backend *)be)->gemm == RC_GEMM_FIXED) {
        gemm_fixed(x, M, K, W, N, bias, y);
        return RC_OK;
    }
    float beta = 0.0f;
    if (bias) { /* like torch.addmm: the bias is the C operand, added in fp32 */
        for (int64_t r = 0; r < M; r++)
            memcpy(y + r * N, bias, (size_t)N * sizeof *y);
        beta = 1.0f;
    }
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return rc_errorf(RC_ERR_UNSUPPORTED, "matmul of %lld x %lld x %lld exceeds BLAS int range",
                         (long long)M, (long long)N, (long long)K);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, W,
                (int)K, beta, y, (int)N);
    return RC_OK;
}

/* HF rotate-half RoPE on the first rotary_dim dims of each head:
 * out = x * cos + rotate_half(x) * sin, with cos/sin of pos * inv_freq in fp32
 * and rotate_half(x) = cat(-x[half:], x[:half]). Three separate roundings, as
 * the three torch ops do (the build disables FMA contraction). */
static rc_status cpu_rope(rc_backend *be, float *qkv, const rc_batch_desc *bd, const rc_config *cfg,
                          const float *inv_freq)
{
    (void)be;
    const int64_t d = cfg->head_dim, rd = cfg->rotary_dim, half = rd / 2;
    const int64_t nheads_rot = cfg->n_heads + cfg->n_kv_heads; /* Q and K heads are adjacent */
    const int64_t row_len = (cfg->n_heads + 2 * cfg->n_kv_heads) * d;
    if (rd == 0)
        return RC_OK;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < bd->n_rows; r++) {
        float c[2048], s[2048]; /* rd <= head_dim <= 4096 -> half <= 2048 */
        const float p = (float)bd->pos[r];
        for (int64_t j = 0; j < half; j++) {
            float f = p * inv_freq[j];
            c[j] = cosf(f);
            s[j] = sinf(f);
        }
        for (int64_t h = 0; h < nheads_rot; h++) {
            float *v = qkv + r * row_len + h * d;
            for (int64_t j = 0; j < half; j++) {
                float x1 = v[j], x2 = v[j + half];
                float a1 = x1 * c[j], b1 = (-x2) * s[j];
                float a2 = x2 * c[j], b2 = x1 * s[j];
                v[j] = a1 + b1;
                v[j + half] = a2 + b2;
            }
        }
    }
    return RC_OK;
}

static rc_status cpu_attention(rc_backend *be, const float *qkv, const rc_batch_desc *bd,
                               const rc_config *cfg, rc_kv_cache *kv, int64_t layer, float *out)
{
    (void)be;
    const int64_t d = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int64_t group = nh / nkv;
    const int64_t row_len = (nh + 2 * nkv) * d;
    const int64_t T = kv->max_len;
    const int64_t slot_stride = nkv * T * d;
    float *K = kv->k + layer * kv->n_slots * slot_stride;
    float *V = kv->v + layer * kv->n_slots * slot_stride;
    /* store the new keys and values */
    for (int64_t b = 0; b < bd->n_seq; b++)
        for (int64_t i = 0; i < bd->n_new[b]; i++) {
            const float *row = qkv + (bd->row0[b] + i) * row_len;
            int64_t p = bd->start[b] + i;
            for (int64_t h = 0; h < nkv; h++) {
                int64_t off = bd->slot[b] * slot_stride + h * T * d + p * d;
                memcpy(K + off, row + (nh + h) * d, (size_t)d * sizeof(float));
                memcpy(V + off, row + (nh + nkv + h) * d, (size_t)d * sizeof(float));
            }
        }
    const float scale = (float)(1.0 / sqrt((double)d));
    int64_t max_keys = 0;
    for (int64_t b = 0; b < bd->n_seq; b++)
        if (bd->start[b] + bd->n_new[b] > max_keys)
            max_keys = bd->start[b] + bd->n_new[b];
    float *scratch = malloc((size_t)omp_get_max_threads() * (size_t)max_keys * sizeof(float));
    if (!scratch)
        return rc_errorf(RC_ERR_NOMEM, "out of memory in attention");
    rc_status st = RC_OK;
    int64_t work = bd->n_rows * nh;
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t wi = 0; wi < work; wi++) {
        int64_t r = wi / nh, h = wi % nh;
        float *sc = scratch + (size_t)omp_get_thread_num() * (size_t)max_keys;
        /* which sequence owns row r */
        int64_t b = 0;
        while (b + 1 < bd->n_seq && bd->row0[b + 1] <= r)
            b++;
        const int64_t p = bd->pos[r];
        int64_t lo = 0;
        if (cfg->sliding_window > 0 && p - cfg->sliding_window + 1 > 0)
            lo = p - cfg->sliding_window + 1;
        const float *q = qkv + r * row_len + h * d;
        const int64_t kvh = h / group;
        const float *Kh = K + bd->slot[b] * slot_stride + kvh * T * d;
        const float *Vh = V + bd->slot[b] * slot_stride + kvh * T * d;
        float mx = -INFINITY;
        for (int64_t j = lo; j <= p; j++) {
            float dot = 0.0f;
            for (int64_t t = 0; t < d; t++)
                dot += q[t] * Kh[j * d + t];
            float s = dot * scale;
            sc[j] = s;
            if (s > mx)
                mx = s;
        }
        float sum = 0.0f;
        for (int64_t j = lo; j <= p; j++) {
            float e = expf(sc[j] - mx);
            sc[j] = e;
            sum += e;
        }
        float *o = out + r * nh * d + h * d;
        for (int64_t t = 0; t < d; t++)
            o[t] = 0.0f;
        for (int64_t j = lo; j <= p; j++) {
            float pj = sc[j] / sum;
            for (int64_t t = 0; t < d; t++)
                o[t] += pj * Vh[j * d + t];
        }
    }
    free(scratch);
    return st;
}

static inline float act1(rc_act act, float x)
{
    switch (act) {
    case RC_ACT_GELU_ERF:
        return x * 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
    case RC_ACT_GELU_TANH: {
        const float kBeta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5);
        float inner = kBeta * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    case RC_ACT_SILU:
        return x / (1.0f + expf(-x));
    }
    return x;
}

static rc_status cpu_act(rc_backend *be, rc_act act, float *x, int64_t n)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] = act1(act, x[i]);
    return RC_OK;
}

static rc_status cpu_act_mul(rc_backend *be, rc_act act, float *gate, const float *up, int64_t n)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        gate[i] = act1(act, gate[i]) * up[i];
    return RC_OK;
}

static rc_status cpu_add(rc_backend *be, const float *a, const float *b, int64_t n, float *out)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
    return RC_OK;
}

static rc_status cpu_logprobs(rc_backend *be, const float *logits, int64_t M, int64_t V,
                              float *full_out, const int32_t *targets, float *target_out)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < M; r++) {
        const float *x = logits + r * V;
        float mx = -INFINITY;
        for (int64_t i = 0; i < V; i++)
            if (x[i] > mx)
                mx = x[i];
        double sum = 0.0;
        for (int64_t i = 0; i < V; i++)
            sum += exp((double)x[i] - (double)mx);
        double lse = (double)mx + log(sum);
        if (full_out)
            for (int64_t i = 0; i < V; i++)
                full_out[r * V + i] = (float)((double)x[i] - lse);
        if (targets && target_out)
            target_out[r] = (float)((double)x[targets[r]] - lse);
    }
    return RC_OK;
}

static const rc_backend_ops k_cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .embed = cpu_embed,
    .norm = cpu_norm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .act = cpu_act,
    .act_mul = cpu_act_mul,
    .add = cpu_add,
    .logprobs = cpu_logprobs,
};

rc_status rc_backend_cpu_create(int n_threads, rc_gemm_mode gemm, rc_backend **out)
{
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (n_threads <= 0)
        n_threads = omp_get_num_procs();
    omp_set_num_threads(n_threads);
    openblas_set_num_threads(n_threads);
    be->base.ops = &k_cpu_ops;
    be->gemm = gemm;
    be->base.n_threads = n_threads;
    *out = &be->base;
    return RC_OK;
}

void rc_backend_destroy(rc_backend *be)
{
    if (be)
        be->ops->destroy(be);
}
