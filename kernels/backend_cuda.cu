// The CUDA backend: rc_backend_ops on device memory (src/engine/backend.h), the same
// dtype model as the CPU backend. Activations and weights live on the device
// as fp32 arrays holding dtype-rounded values (the CPU keeps them at the dtype's width); GEMMs in
// engine mode go through cuBLAS with real bf16 / fp16 operands (weights
// converted once, activations per call: both exact), fp32 compute and output,
// then one kernel adds the bias in fp32 and rounds. Invariant mode uses our
// fixed-order GEMM and attention kernels. Host arrays the ops receive (batch
// descriptor, tokens, row lists, targets) are copied to device workspaces;
// log-probs come back to the host, where sampling runs.
//
// Every CUDA and cuBLAS call is checked (rck.h); errors carry the call, file
// and line. Everything runs on the legacy default stream, so the order of
// copies and kernels is the program order.
#include <stdlib.h>
#include <string.h>

#include <new>

#include "cuda_ws.h"
#include "rc_cuda.h"
#include "rck.h"

namespace {

struct alloc_rec {
    float *p;
    int64_t n;
    rc_dtype values; // dtype all values were rounded to by upload (RC_F32: any)
    int dev;         // the device it was allocated on
};

// copies of a weight matrix [rows, cols], made once: its bf16 / fp16 bit
// patterns for cuBLAS, or its fp32 transpose for the invariant GEMM
enum shadow_kind { SHADOW_BF16, SHADOW_F16, SHADOW_TRANSPOSED };

struct shadow_rec {
    const float *src;
    int64_t rows, cols;
    shadow_kind kind;
    void *data;
    int dev;
};

struct workspace {
    void *p = nullptr;
    size_t bytes = 0;
};

struct cuda_backend {
    rc_backend base;
    cublasHandle_t blas = nullptr;
    char device[256] = "";
    alloc_rec *allocs = nullptr;
    int64_t n_allocs = 0, cap_allocs = 0;
    shadow_rec *shadows = nullptr;
    int64_t n_shadows = 0, cap_shadows = 0;
    workspace ws_idx, ws_att, ws_half, ws_lp, ws_tgt, ws_fp8, ws_moe, ws_gdn, ws_wide;
    // Several devices (use_devices): the fields above are the current device's; each device's own cuBLAS
    // handle and workspaces are kept here while another device is current (switch_device swaps them)
    static const int n_ws = 9;
    struct device_slot {
        cublasHandle_t blas;
        workspace ws[n_ws];
    } slot[RC_MAX_DEVICES] = {};
    int n_dev = 1, cur = 0;
    void *blas_ws[RC_MAX_DEVICES] = {}; // each device's cuBLAS workspace (engine kernels; rc_cuws_blas_bytes)
};

cuda_backend *cb(rc_backend *be) { return reinterpret_cast<cuda_backend *>(be); }

// ---- several devices: the current device's handle and workspaces in the fields every op reads ----
void ws_fields(cuda_backend *c, workspace **w)
{
    workspace *l[cuda_backend::n_ws] = {&c->ws_idx, &c->ws_att, &c->ws_half, &c->ws_lp,  &c->ws_tgt, &c->ws_fp8,
                                        &c->ws_moe, &c->ws_gdn, &c->ws_wide};
    for (int i = 0; i < cuda_backend::n_ws; i++)
        w[i] = l[i];
}

// make device d current: cudaSetDevice, and its cuBLAS handle and workspaces the fields'
rc_status switch_device(cuda_backend *c, int d)
{
    if (d == c->cur)
        return RC_OK;
    RCK_CUDA(cudaSetDevice(d));
    workspace *w[cuda_backend::n_ws];
    ws_fields(c, w);
    c->slot[c->cur].blas = c->blas;
    for (int i = 0; i < cuda_backend::n_ws; i++)
        c->slot[c->cur].ws[i] = *w[i];
    c->blas = c->slot[d].blas;
    for (int i = 0; i < cuda_backend::n_ws; i++)
        *w[i] = c->slot[d].ws[i];
    c->cur = d;
    return RC_OK;
}

// Before the first cuBLAS call on the current device: its handle gets a workspace of rc_cuws_blas_bytes
// (cublasSetWorkspace), so cuBLAS allocates none of its own and the device-memory estimate counts it exactly
// (engine kernels: the invariant ones call no cuBLAS); held until the backend is destroyed
rc_status blas_ready(cuda_backend *c)
{
    if (c->blas_ws[c->cur])
        return RC_OK;
    const int64_t bytes = rc_cuws_blas_bytes();
    void *p = nullptr;
    RCK_CUDA(cudaMalloc(&p, (size_t)bytes));
    c->blas_ws[c->cur] = p;
    RCK_BLAS(cublasSetWorkspace(c->blas, p, (size_t)bytes));
    return RC_OK;
}

// attention scratch per launch, in floats: 256 MB, or RC_CUDA_ATTN_SCRATCH_MB
// (rows are split into launches so that it is not exceeded)
int64_t attn_scratch_floats() { return rc_cuws_attn_cap_floats(); }

// a workspace of at least `bytes` (a size of cuda_ws.h), grown to rc_cuws_held(bytes) when smaller
rc_status ws_get(workspace *w, int64_t bytes64, void **out)
{
    if (bytes64 < 0 || (uint64_t)bytes64 > SIZE_MAX / 2)
        return rc_errorf(RC_ERR_NOMEM, "CUDA backend: a workspace of %lld bytes is too large", (long long)bytes64);
    const size_t bytes = (size_t)bytes64;
    if (bytes > w->bytes) {
        if (w->p) {
            RCK_CUDA(cudaDeviceSynchronize()); // no kernel may still read it
            RCK_CUDA(cudaFree(w->p));
            w->p = nullptr;
            w->bytes = 0;
        }
        const size_t want = (size_t)rc_cuws_held(bytes64);
        RCK_CUDA(cudaMalloc(&w->p, want));
        w->bytes = want;
    }
    *out = w->p;
    return RC_OK;
}

template <typename T> bool grow(T **arr, int64_t *cap, int64_t need)
{
    if (need <= *cap)
        return true;
    int64_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    T *p = static_cast<T *>(realloc(*arr, (size_t)nc * sizeof(T)));
    if (!p)
        return false;
    *arr = p;
    *cap = nc;
    return true;
}

alloc_rec *find_alloc(cuda_backend *c, const float *p)
{
    for (int64_t i = 0; i < c->n_allocs; i++)
        if (p >= c->allocs[i].p && p < c->allocs[i].p + c->allocs[i].n)
            return &c->allocs[i];
    return nullptr;
}

void cuda_destroy(rc_backend *be)
{
    cuda_backend *c = cb(be);
    for (int d = c->n_dev - 1; d >= 0; d--) { // each device's memory, handle and workspaces, device 0 last
        if (switch_device(c, d) != RC_OK) {
            rc_clear_error();
            continue;
        }
        for (int64_t i = 0; i < c->n_shadows; i++)
            if (c->shadows[i].dev == d)
                cudaFree(c->shadows[i].data);
        for (int64_t i = 0; i < c->n_allocs; i++)
            if (c->allocs[i].dev == d)
                cudaFree(c->allocs[i].p);
        workspace *ws[cuda_backend::n_ws];
        ws_fields(c, ws);
        for (workspace *w : ws)
            if (w->p)
                cudaFree(w->p);
        if (c->blas)
            cublasDestroy(c->blas);
        if (c->blas_ws[d])
            cudaFree(c->blas_ws[d]);
    }
    free(c->allocs);
    free(c->shadows);
    c->~cuda_backend();
    free(c);
}

rc_status cuda_alloc(rc_backend *be, int64_t n, float **out)
{
    cuda_backend *c = cb(be);
    *out = nullptr;
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(float))
        return rc_errorf(RC_ERR_NOMEM, "CUDA backend: buffer of %lld floats is too large", (long long)n);
    if (!grow(&c->allocs, &c->cap_allocs, c->n_allocs + 1))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    float *p = nullptr;
    RCK_CUDA(cudaMalloc(&p, (size_t)(n > 0 ? n : 1) * sizeof(float)));
    c->allocs[c->n_allocs++] = alloc_rec{p, n, RC_F32, c->cur};
    *out = p;
    return RC_OK;
}

// forget the cuBLAS copies made of matrices inside [p, p + n)
void drop_shadows(cuda_backend *c, const float *p, int64_t n)
{
    int64_t k = 0;
    for (int64_t s = 0; s < c->n_shadows; s++) {
        if (c->shadows[s].src >= p && c->shadows[s].src < p + n)
            cudaFree(c->shadows[s].data); // (the caller made the buffer's device current)
        else
            c->shadows[k++] = c->shadows[s];
    }
    c->n_shadows = k;
}

void cuda_free(rc_backend *be, float *p)
{
    cuda_backend *c = cb(be);
    const int prev = c->cur;
    const alloc_rec *a = find_alloc(c, p);
    if (a && switch_device(c, a->dev) != RC_OK) // freed on its own device
        rc_clear_error();
    int64_t k = 0;
    for (int64_t i = 0; i < c->n_allocs; i++) {
        if (c->allocs[i].p == p) {
            drop_shadows(c, p, c->allocs[i].n);
            continue;
        }
        c->allocs[k++] = c->allocs[i];
    }
    c->n_allocs = k;
    cudaFree(p);
    if (switch_device(c, prev) != RC_OK)
        rc_clear_error();
}

rc_status cuda_upload_here(rc_backend *be, const float *host, int64_t n, rc_dtype dt, float *dst);

// upload and download run on their buffer's device, then the current one is restored
rc_status cuda_upload(rc_backend *be, const float *host, int64_t n, rc_dtype dt, float *dst)
{
    cuda_backend *c = cb(be);
    const int prev = c->cur;
    const alloc_rec *a = find_alloc(c, dst);
    RC_TRY(switch_device(c, a ? a->dev : prev));
    rc_status s = cuda_upload_here(be, host, n, dt, dst);
    rc_status s2 = switch_device(c, prev);
    return s != RC_OK ? s : s2;
}

rc_status cuda_upload_here(rc_backend *be, const float *host, int64_t n, rc_dtype dt, float *dst)
{
    cuda_backend *c = cb(be);
    alloc_rec *a = find_alloc(c, dst);
    if (a) { // new contents: no stale cuBLAS copies, and the dtype is known only for a whole buffer
        drop_shadows(c, a->p, a->n);
        a->values = RC_F32;
    }
    RCK_CUDA(cudaMemcpy(dst, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    if (dt != RC_F32) {
        RC_TRY(rck_round(rck_round_args{dst, dst, n, dt}));
        if (a && a->p == dst && a->n == n)
            a->values = dt; // the whole buffer holds dt values: its matrices may go to cuBLAS as dt
    }
    return RC_OK;
}

rc_status cuda_download(rc_backend *be, const float *src, int64_t n, float *host)
{
    cuda_backend *c = cb(be);
    const int prev = c->cur;
    const alloc_rec *a = find_alloc(c, src);
    RC_TRY(switch_device(c, a ? a->dev : prev));
    cudaError_t e = cudaMemcpy(host, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost);
    RC_TRY(switch_device(c, prev));
    if (e != cudaSuccess)
        return rck_cuda_fail(e, "cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost)", __FILE__, __LINE__);
    return RC_OK;
}

// copy a host array into a device workspace
template <typename T> rc_status to_device(workspace *w, const T *host, int64_t n, T **dev)
{
    void *p = nullptr;
    RC_TRY(ws_get(w, rc_cuws_elems(n, (int64_t)sizeof(T)), &p));
    if (n > 0)
        RCK_CUDA(cudaMemcpy(p, host, (size_t)n * sizeof(T), cudaMemcpyHostToDevice));
    *dev = static_cast<T *>(p);
    return RC_OK;
}

// a weight as the device holds it (forward.c plan_weight): fp32, or a GEMM
// operand / embedding table at its dtype's width (bf16 / fp16 bits)
struct dev_w {
    const float *f32;     // RC_F32 storage, else nullptr
    const uint16_t *h16;  // RC_BF16 / RC_F16 storage, else nullptr
    rc_dtype dt;
};

rc_status device_w(rc_wt w, const char *op, dev_w *out)
{
    *out = dev_w{nullptr, nullptr, w.dt};
    if (w.dt == RC_F32)
        out->f32 = static_cast<const float *>(w.p);
    else if (w.dt == RC_BF16 || w.dt == RC_F16)
        out->h16 = static_cast<const uint16_t *>(w.p);
    else
        return rc_errorf(RC_ERR_INTERNAL, "%s: the CUDA backend takes fp32, bf16 or fp16 weights, not %s", op,
                         rc_dtype_name(w.dt));
    return RC_OK;
}

rc_status cuda_embed(rc_backend *be, const int32_t *tokens, int64_t n, rc_wt tablew, int64_t hidden, float *out)
{
    dev_w t{};
    RC_TRY(device_w(tablew, "embed", &t));
    int32_t *dtok = nullptr;
    RC_TRY(to_device(&cb(be)->ws_idx, tokens, n, &dtok));
    return rck_embed(rck_embed_args{dtok, t.f32, out, n, hidden, t.h16, t.dt, nullptr, RC_F32});
}

// the embedding into rows held at 2 bytes (rc_backend_ops.embed_st; out_st RC_F32: embed)
rc_status cuda_embed_st(rc_backend *be, const int32_t *tokens, int64_t n, rc_wt tablew, int64_t hidden, void *out,
                        rc_dtype out_st)
{
    if (out_st == RC_F32)
        return cuda_embed(be, tokens, n, tablew, hidden, static_cast<float *>(out));
    dev_w t{};
    RC_TRY(device_w(tablew, "embed", &t));
    if ((out_st != RC_BF16 && out_st != RC_F16) || (t.h16 && t.dt != out_st))
        return rc_errorf(RC_ERR_INTERNAL, "embed: a %s table into rows held as %s", rc_dtype_name(t.dt),
                         rc_dtype_name(out_st));
    int32_t *dtok = nullptr;
    RC_TRY(to_device(&cb(be)->ws_idx, tokens, n, &dtok));
    return rck_embed(rck_embed_args{dtok, t.f32, nullptr, n, hidden, t.h16, t.dt, static_cast<uint16_t *>(out),
                                    out_st});
}

rc_status cuda_gather_rows(rc_backend *be, const float *src, int64_t row_len, const int64_t *rows, int64_t n,
                           float *dst)
{
    int64_t *drows = nullptr;
    RC_TRY(to_device(&cb(be)->ws_idx, rows, n, &drows));
    return rck_gather(rck_gather_args{src, drows, dst, n, row_len});
}

rc_status cuda_norm(rc_backend *be, rc_norm_kind kind, const float *x, int64_t M, int64_t H, const float *w,
                    const float *b, double eps, rc_dtype mid_dt, rc_dtype out_dt, float *out)
{
    rck_norm_args a{kind, x, w, b, out, M, H, (float)eps,
                    rco_rms_lanes(be->kernels == RC_KERNELS_INVARIANT, M), mid_dt, out_dt, nullptr, RC_F32, nullptr};
    return rck_norm(a);
}

// norm with its output held at 2 bytes (rc_backend_ops.norm_st): out_st RC_F32 is norm
rc_status cuda_norm_st(rc_backend *be, rc_norm_kind kind, const void *x, rc_dtype x_st, int64_t M, int64_t H,
                       const float *w, const float *b, double eps, rc_dtype mid_dt, rc_dtype out_dt, void *out,
                       rc_dtype out_st)
{
    if (out_st == RC_F32 && x_st == RC_F32)
        return cuda_norm(be, kind, static_cast<const float *>(x), M, H, w, b, eps, mid_dt, out_dt,
                         static_cast<float *>(out));
    const rc_dtype st = out_st != RC_F32 ? out_st : x_st;
    if ((st != RC_BF16 && st != RC_F16) || (out_st != RC_F32 && out_st != out_dt) || (x_st != RC_F32 && x_st != st))
        return rc_errorf(RC_ERR_INTERNAL, "norm: input held as %s, output as %s, its values rounded to %s",
                         rc_dtype_name(x_st), rc_dtype_name(out_st), rc_dtype_name(out_dt));
    rck_norm_args a{kind, x_st == RC_F32 ? static_cast<const float *>(x) : nullptr, w, b,
                    out_st == RC_F32 ? static_cast<float *>(out) : nullptr, M, H, (float)eps,
                    rco_rms_lanes(be->kernels == RC_KERNELS_INVARIANT, M), mid_dt, out_dt,
                    out_st == RC_F32 ? nullptr : static_cast<uint16_t *>(out), st,
                    x_st == RC_F32 ? nullptr : static_cast<const uint16_t *>(x)};
    return rck_norm(a);
}

// one elementwise kernel (rck_threads.h rck_ew_thread)
rc_status elementwise(int op, const float *a, const float *b, float *out, int64_t n, rc_dtype out_dt,
                      rc_act act = RC_ACT_SILU, rc_dtype act_dt = RC_F32, int64_t n_cols = 1, float c = 0.0f)
{
    rck_ew_args e{};
    e.op = op;
    e.a = a;
    e.b = b;
    e.out = out;
    e.n = n;
    e.n_cols = n_cols;
    e.act = act;
    e.act_dt = act_dt;
    e.out_dt = out_dt;
    e.c = c;
    return rck_ew(e);
}

// the copy of weight W [rows, cols] of the given kind, made on first use
rc_status weight_shadow(cuda_backend *c, const float *W, int64_t rows, int64_t cols, shadow_kind kind,
                        const void **out)
{
    for (int64_t i = 0; i < c->n_shadows; i++) {
        const shadow_rec &r = c->shadows[i];
        if (r.src == W && r.rows == rows && r.cols == cols && r.kind == kind) {
            *out = r.data;
            return RC_OK;
        }
    }
    if (!grow(&c->shadows, &c->cap_shadows, c->n_shadows + 1))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    const int64_t n = rows * cols;
    void *data = nullptr;
    RCK_CUDA(cudaMalloc(&data, (size_t)n * (kind == SHADOW_TRANSPOSED ? sizeof(float) : sizeof(uint16_t))));
    rc_status s = kind == SHADOW_TRANSPOSED
                      ? rck_transpose(rck_transpose_args{W, static_cast<float *>(data), rows, cols})
                      : rck_to_half(rck_to_half_args{W, static_cast<uint16_t *>(data), n,
                                                     kind == SHADOW_BF16 ? RC_BF16 : RC_F16});
    if (s != RC_OK) {
        cudaFree(data);
        return s;
    }
    c->shadows[c->n_shadows++] = shadow_rec{W, rows, cols, kind, data, c->cur};
    *out = data;
    return RC_OK;
}

// y[M, N] = R(x[:, k0:k0+Ks] . W[:, k0:k0+Ks]^T + bias) for x[M, K], W[N, K]
// (k0 = 0, Ks = K: the whole GEMM). The weight's shadows are of the whole W;
// a K-slice reads its columns in place (leading dimension K). x_st, y_st: how
// x and y are held (RC_F32 floats, or 2-byte bits of in_dt / out_dt: an
// activation at the dtype's width, rc_backend_ops.matmul_st); a 2-byte x is
// cuBLAS's operand as it is, a 2-byte y its output type (with a bias: y first
// holds the bias and the GEMM adds it with beta = 1, the same fp32 sum as the
// bias step after an fp32 output).
rc_status cuda_gemm(rc_backend *be, const void *xv, rc_dtype x_st, int64_t M, int64_t K, int64_t k0, int64_t Ks,
                    rc_wt Ww, int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, void *yv, rc_dtype y_st)
{
    cuda_backend *c = cb(be);
    dev_w w{};
    RC_TRY(device_w(Ww, "matmul", &w));
    if (k0 < 0 || Ks < 1 || k0 > K - Ks)
        return rc_errorf(RC_ERR_INTERNAL, "matmul: K-slice [%lld, +%lld) outside K = %lld", (long long)k0,
                         (long long)Ks, (long long)K);
    const bool x16 = x_st != RC_F32, y16 = y_st != RC_F32;
    if ((x16 && (x_st != in_dt || !w.h16 || w.dt != in_dt)) || (y16 && (y_st != out_dt || !w.h16 || w.dt != out_dt)))
        return rc_errorf(RC_ERR_INTERNAL, "matmul: 2-byte activations (x %s, y %s) need %s weights at 2 bytes, "
                         "in_dt %s, out_dt %s", rc_dtype_name(x_st), rc_dtype_name(y_st), rc_dtype_name(w.dt),
                         rc_dtype_name(in_dt), rc_dtype_name(out_dt));
    const float *x = x16 ? nullptr : static_cast<const float *>(xv);
    const uint16_t *xh = x16 ? static_cast<const uint16_t *>(xv) : nullptr;
    float *y = y16 ? nullptr : static_cast<float *>(yv);
    if (M == 0 || N == 0)
        return RC_OK;
    if (be->kernels == RC_KERNELS_INVARIANT) {
        if (w.h16) { // 2-byte weights read as stored, widened in registers (no transposed copy)
            return rck_gemm_invariant(rck_gemm_args{x16 ? nullptr : x + k0, nullptr, bias, y, M, Ks, N, out_dt,
                                                    nullptr, K, K, w.h16 + k0, w.dt, x16 ? xh + k0 : nullptr, x_st,
                                                    y16 ? static_cast<uint16_t *>(yv) : nullptr, nullptr, nullptr, 0});
        }
        const float *W = w.f32;
        const void *wt = nullptr;
        RC_TRY(weight_shadow(c, W, N, K, SHADOW_TRANSPOSED, &wt));
        // the slice of the transposed copy Wt[K, N] is its rows [k0, k0 + Ks): contiguous
        return rck_gemm_invariant(rck_gemm_args{x + k0, W + k0, bias, y, M, Ks, N, out_dt,
                                                static_cast<const float *>(wt) + k0 * N, K, K, nullptr, RC_F32,
                                                nullptr, RC_F32, nullptr, nullptr, nullptr, 0});
    }
    const bool half_in = in_dt == RC_BF16 || in_dt == RC_F16;
    RC_TRY(blas_ready(c));
    if (w.h16 && half_in && in_dt == w.dt) { // the weight's own bits; x converted (exact: its values are in_dt's)
        const void *xb = xh;
        if (!x16) {
            void *p = nullptr;
            RC_TRY(ws_get(&c->ws_half, rc_cuws_half_bytes(M, K), &p));
            RC_TRY(rck_to_half(rck_to_half_args{x, static_cast<uint16_t *>(p), M * K, in_dt}));
            xb = p;
        }
        if (y16) { // the dtype's bits out of cuBLAS: its fp32 result rounded to nearest-even, + bias first
            if (bias)
                RC_TRY(rck_bias16(rck_bias16_args{bias, static_cast<uint16_t *>(yv), M * N, N, out_dt}));
            return rck_gemm_cublas(c->blas, static_cast<const uint16_t *>(xb) + k0, w.h16 + k0, in_dt, M, Ks, N, K,
                                   yv, out_dt, bias ? 1.0f : 0.0f);
        }
        RC_TRY(rck_gemm_cublas(c->blas, static_cast<const uint16_t *>(xb) + k0, w.h16 + k0, in_dt, M, Ks, N, K, y,
                               RC_F32, 0.0f));
    } else if (w.h16) { // fp32 activations (or the other 2-byte dtype): the weight widened for one fp32 GEMM
        void *wf = nullptr;
        RC_TRY(ws_get(&c->ws_wide, rc_cuws_wide_bytes(N * K), &wf));
        RC_TRY(rck_widen(rck_widen_args{w.h16, static_cast<float *>(wf), N * K, w.dt}));
        RC_TRY(rck_gemm_cublas(c->blas, x + k0, static_cast<const float *>(wf) + k0, RC_F32, M, Ks, N, K, y, RC_F32,
                               0.0f));
    } else {
        const float *W = w.f32;
        const alloc_rec *wa = find_alloc(c, W);
        if (half_in && wa && wa->values == in_dt) {
            const void *wbits = nullptr;
            RC_TRY(weight_shadow(c, W, N, K, in_dt == RC_BF16 ? SHADOW_BF16 : SHADOW_F16, &wbits));
            void *xb = nullptr;
            RC_TRY(ws_get(&c->ws_half, rc_cuws_half_bytes(M, K), &xb));
            RC_TRY(rck_to_half(rck_to_half_args{x, static_cast<uint16_t *>(xb), M * K, in_dt}));
            RC_TRY(rck_gemm_cublas(c->blas, static_cast<const uint16_t *>(xb) + k0,
                                   static_cast<const uint16_t *>(wbits) + k0, in_dt, M, Ks, N, K, y, RC_F32, 0.0f));
        } else {
            RC_TRY(rck_gemm_cublas(c->blas, x + k0, W + k0, RC_F32, M, Ks, N, K, y, RC_F32, 0.0f));
        }
    }
    if (bias || out_dt != RC_F32)
        RC_TRY(elementwise(RCK_EW_BIAS, y, bias, y, M * N, out_dt, RC_ACT_SILU, RC_F32, N));
    return RC_OK;
}

rc_status cuda_matmul(rc_backend *be, const float *x, int64_t M, int64_t K, rc_wt Ww, int64_t N,
                      const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    return cuda_gemm(be, x, RC_F32, M, K, 0, K, Ww, N, bias, in_dt, out_dt, y, RC_F32);
}

rc_status cuda_matmul_kslice(rc_backend *be, const float *x, int64_t M, int64_t K, int64_t k0, int64_t Ks, rc_wt Ww,
                             int64_t N, const float *bias, rc_dtype in_dt, rc_dtype out_dt, float *y)
{
    return cuda_gemm(be, x, RC_F32, M, K, k0, Ks, Ww, N, bias, in_dt, out_dt, y, RC_F32);
}

// fp8 e4m3 weights held as 1-byte codes (rc_backend_ops.fp8_matmul): invariant kernels widen each code in
// registers (rck_gemm_dot8: rck_gemm_dot16's products and order); engine kernels widen the codes into the
// 2-byte workspace wb (when widen) and run cuda_gemm's bf16 path over it, the operands of a bf16 weight
rc_status cuda_fp8_matmul(rc_backend *be, const float *x, int64_t M, int64_t K, int64_t k0, int64_t Ks,
                          const void *codes, int64_t N, void *wb, bool widen, float *y)
{
    if (k0 < 0 || Ks < 1 || k0 > K - Ks)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 matmul: K-slice [%lld, +%lld) outside K = %lld", (long long)k0,
                         (long long)Ks, (long long)K);
    const uint8_t *q = static_cast<const uint8_t *>(codes);
    if (be->kernels == RC_KERNELS_INVARIANT) {
        if (M == 0 || N == 0)
            return RC_OK;
        rck_gemm_args a{};
        a.x = x + k0;
        a.y = y;
        a.M = M;
        a.K = Ks;
        a.N = N;
        a.out_dt = RC_F32;
        a.ldx = K;
        a.ldw = K;
        a.w_dt = RC_BF16;
        a.x_dt = RC_F32;
        a.W8 = q + k0;
        return rck_gemm_invariant(a);
    }
    if (!wb)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 matmul: engine kernels need a 2-byte workspace");
    if (widen)
        RC_TRY(rck_fp8_widen(rck_fp8_widen_args{q, static_cast<uint16_t *>(wb), N * K}));
    return cuda_gemm(be, x, RC_F32, M, K, k0, Ks, rc_wt{wb, RC_BF16, false}, N, nullptr, RC_BF16, RC_F32, y,
                     RC_F32);
}

// W8A16 held as 1-byte codes (rc_backend_ops.fp8_dequant): the 2-byte copy of the weight, dt's bits of
// R(q * rs) (rck_fp8_deq_thread), in wb
rc_status cuda_fp8_dequant(rc_backend *be, const void *codes, const float *rs, int scale_mode, rc_dtype dt,
                           int64_t N, int64_t K, void *wb)
{
    (void)be;
    if (!wb || (dt != RC_BF16 && dt != RC_F16) || scale_mode < 0 || scale_mode > 2)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 dequant: a 2-byte workspace of bf16 / fp16 (%s), scales %d",
                         rc_dtype_name(dt), scale_mode);
    if (N * K == 0)
        return RC_OK;
    return rck_fp8_deq(rck_fp8_deq_args{static_cast<const uint8_t *>(codes), rs, static_cast<uint16_t *>(wb), N, K,
                                        scale_mode, dt});
}

// W8A16 held as 1-byte codes (rc_backend_ops.fp8_deq_matmul): invariant kernels dequantize each code in
// registers (rck_gemm_dot8d: rck_gemm_dot16's products and order over the 2-byte copy's values); engine kernels
// dequantize the weight into wb, then cuda_gemm over it as a 2-byte weight of dt, the plain matmul's operands
rc_status cuda_fp8_deq_matmul(rc_backend *be, const float *x, int64_t M, int64_t K, const void *codes,
                              const float *rs, int scale_mode, rc_dtype dt, int64_t N, const float *bias,
                              rc_dtype in_dt, rc_dtype out_dt, void *wb, float *y)
{
    if ((dt != RC_BF16 && dt != RC_F16) || scale_mode < 0 || scale_mode > 2)
        return rc_errorf(RC_ERR_INTERNAL, "fp8 dequant matmul: weights of %s, scales %d", rc_dtype_name(dt),
                         scale_mode);
    if (be->kernels == RC_KERNELS_INVARIANT) {
        if (M == 0 || N == 0)
            return RC_OK;
        rck_gemm_args a{};
        a.x = x;
        a.bias = bias;
        a.y = y;
        a.M = M;
        a.K = K;
        a.N = N;
        a.out_dt = out_dt;
        a.ldx = K;
        a.ldw = K;
        a.w_dt = dt;
        a.x_dt = RC_F32;
        a.W8 = static_cast<const uint8_t *>(codes);
        a.W8s = rs;
        a.w8_mode = scale_mode;
        return rck_gemm_invariant(a);
    }
    RC_TRY(cuda_fp8_dequant(be, codes, rs, scale_mode, dt, N, K, wb));
    return cuda_gemm(be, x, RC_F32, M, K, 0, K, rc_wt{wb, dt, false}, N, bias, in_dt, out_dt, y, RC_F32);
}

rc_status cuda_matmul_st(rc_backend *be, const void *x, rc_dtype x_st, int64_t M, int64_t K, rc_wt Ww, int64_t N,
                         const float *bias, rc_dtype in_dt, rc_dtype out_dt, void *y, rc_dtype y_st)
{
    return cuda_gemm(be, x, x_st, M, K, 0, K, Ww, N, bias, in_dt, out_dt, y, y_st);
}

// The batch descriptor in device memory: one copy of the packed int64 arrays.
rc_status batch_to_device(cuda_backend *c, const rc_batch_desc *bd, rc_batch_desc *dbd)
{
    const int64_t S = bd->n_seq, R = bd->n_rows;
    int64_t *h = static_cast<int64_t *>(malloc((size_t)(4 * S + 2 * R) * sizeof(int64_t)));
    if (!h)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    memcpy(h, bd->slot, (size_t)S * sizeof(int64_t));
    memcpy(h + S, bd->start, (size_t)S * sizeof(int64_t));
    memcpy(h + 2 * S, bd->n_new, (size_t)S * sizeof(int64_t));
    memcpy(h + 3 * S, bd->row0, (size_t)S * sizeof(int64_t));
    memcpy(h + 4 * S, bd->pos, (size_t)R * sizeof(int64_t));
    memcpy(h + 4 * S + R, bd->seq_of_row, (size_t)R * sizeof(int64_t));
    int64_t *d = nullptr;
    rc_status s = to_device(&c->ws_idx, h, 4 * S + 2 * R, &d);
    free(h);
    RC_TRY(s);
    *dbd = rc_batch_desc{S, d, d + S, d + 2 * S, d + 3 * S, R, d + 4 * S, d + 4 * S + R, 0, 0};
    return RC_OK;
}

// the engine runs one pass over all rows on a GPU (forward.c chunk_rows_for): no row ranges here
rc_status whole_call(const rc_batch_desc *bd, const char *op)
{
    if (bd->row_lo != 0 || rc_bd_row_hi(bd) != bd->n_rows)
        return rc_errorf(RC_ERR_INTERNAL, "%s: the CUDA backend computes whole calls, not rows [%lld, %lld)", op,
                         (long long)bd->row_lo, (long long)bd->row_hi);
    return RC_OK;
}

// qkv and out as the arguments hold them: floats, or with ap.qkv_st / out_st their 2-byte bits
static void set_qkv(rck_attn_args *a, float *qkv, float *out, const rc_attn_params &ap)
{
    a->qkv = ap.qkv_st == RC_F32 ? qkv : nullptr;
    a->qkv16 = ap.qkv_st == RC_F32 ? nullptr : reinterpret_cast<uint16_t *>(qkv);
    a->out = ap.out_st == RC_F32 ? out : nullptr;
    a->out16 = ap.out_st == RC_F32 ? nullptr : reinterpret_cast<uint16_t *>(out);
    a->st = ap.qkv_st != RC_F32 ? ap.qkv_st : ap.out_st;
}

rc_status cuda_rope(rc_backend *be, float *qkv, const rc_batch_desc *bd, const rc_attn_params *ap)
{
    RC_TRY(whole_call(bd, "rope"));
    rck_attn_args a{};
    RC_TRY(rck_attn_args_from_params(*ap, "rope", &a));
    if (a.rotary_half == 0)
        return RC_OK;
    RC_TRY(batch_to_device(cb(be), bd, &a.bd));
    set_qkv(&a, qkv, nullptr, *ap);
    return rck_rope(a, bd->n_rows);
}

rc_status cuda_attention(rc_backend *be, const float *qkv, const rc_batch_desc *bd, const rc_attn_params *ap,
                         rc_kv_cache *kv, int64_t layer, float *out)
{
    cuda_backend *c = cb(be);
    RC_TRY(whole_call(bd, "attention"));
    const bool half = kv->dt != RC_F32;
    if (half ? !(kv->k16 && kv->v16 && (kv->dt == RC_BF16 || kv->dt == RC_F16)) : !(kv->k && kv->v))
        return rc_errorf(RC_ERR_INTERNAL, "attention: KV cache storage does not match its dtype %s",
                         rc_dtype_name(kv->dt));
    rck_attn_args a{};
    RC_TRY(rck_attn_args_from_params(*ap, "attention", &a));
    const int64_t d = a.d, nkv = a.nkv, T = kv->max_len;
    const int64_t slot_stride = nkv * T * d;
    RC_TRY(batch_to_device(c, bd, &a.bd));
    if (ap->qkv_st != RC_F32 && ap->out_st != RC_F32 && ap->qkv_st != ap->out_st)
        return rc_errorf(RC_ERR_INTERNAL, "attention: qkv held as %s, out as %s", rc_dtype_name(ap->qkv_st),
                         rc_dtype_name(ap->out_st));
    set_qkv(&a, const_cast<float *>(qkv), out, *ap);
    if (half) {
        a.k16 = kv->k16 + layer * kv->n_slots * slot_stride;
        a.v16 = kv->v16 + layer * kv->n_slots * slot_stride;
        a.kv_dt = kv->dt;
    } else {
        a.k_cache = kv->k + layer * kv->n_slots * slot_stride;
        a.v_cache = kv->v + layer * kv->n_slots * slot_stride;
    }
    a.T = T;
    a.invariant = be->kernels == RC_KERNELS_INVARIANT;
    a.kv_quant = kv->quant; /* the CPU twin's kv_store_row: stored as the cache keeps them */
    a.k_scale = kv->k_scale;
    a.v_scale = kv->v_scale;
    a.kv_deq_dt = kv->deq_dt;
    if (a.kv_quant != RC_KV_AUTO && !(a.k_scale > 0.0f && a.v_scale > 0.0f))
        return rc_errorf(RC_ERR_INTERNAL, "attention: KV cache quantisation with scales %g, %g", (double)a.k_scale,
                         (double)a.v_scale);
    for (int64_t b = 0; b < bd->n_seq; b++)
        if (bd->start[b] + bd->n_new[b] > a.max_keys)
            a.max_keys = bd->start[b] + bd->n_new[b];
    RC_TRY(rck_kv_store(a, bd->n_rows));
    const int64_t cap = attn_scratch_floats();
    const int64_t per = rck_attn_rows_per_launch(bd->n_rows, a.nh, a.max_keys, d, cap);
    void *scratch = nullptr; // (at least per launch's rows x nh x rck_attn_scratch floats)
    RC_TRY(ws_get(&c->ws_att, rc_cuws_attn_bytes(bd->n_rows, a.nh, a.max_keys, d, cap, RC_SOFTMAX_MAX_CHUNKS),
                  &scratch));
    a.scratch = static_cast<float *>(scratch);
    for (int64_t r0 = 0; r0 < bd->n_rows; r0 += per) {
        a.row_begin = r0;
        RC_TRY(rck_attn(a, bd->n_rows - r0 < per ? bd->n_rows - r0 : per));
    }
    return RC_OK;
}

rc_status cuda_clamp(rc_backend *be, float *x, int64_t n, float cval)
{
    (void)be;
    return elementwise(RCK_EW_CLAMP, x, nullptr, x, n, RC_F32, RC_ACT_SILU, RC_F32, 1, cval);
}

rc_status cuda_scale(rc_backend *be, float *x, int64_t n, float sc, rc_dtype out_dt)
{
    (void)be;
    return elementwise(RCK_EW_SCALE, x, nullptr, x, n, out_dt, RC_ACT_SILU, RC_F32, 1, sc);
}

rc_status cuda_softcap(rc_backend *be, float *x, int64_t n, float cap, rc_dtype out_dt)
{
    (void)be;
    return elementwise(RCK_EW_SOFTCAP, x, nullptr, x, n, out_dt, RC_ACT_SILU, RC_F32, 1, cap);
}

rc_status cuda_qk_norm(rc_backend *be, float *qkv, int64_t M, int64_t stride, int64_t nq, int64_t dq, const float *wq,
                       int64_t nk, int64_t dk, const float *wk, double eps, rc_dtype mid_dt, rc_dtype out_dt)
{
    rck_qk_norm_args a{qkv, wq, wk, M, stride, nq, dq, nk, dk, (float)eps,
                       rco_rms_lanes(be->kernels == RC_KERNELS_INVARIANT, M), mid_dt, out_dt, nullptr, RC_F32};
    return rck_qk_norm(a);
}

// qk_norm over a qkv held at 2 bytes (rc_backend_ops.qk_norm_st; st RC_F32: qk_norm)
rc_status cuda_qk_norm_st(rc_backend *be, void *qkv, rc_dtype st, int64_t M, int64_t stride, int64_t nq, int64_t dq,
                          const float *wq, int64_t nk, int64_t dk, const float *wk, double eps, rc_dtype mid_dt,
                          rc_dtype out_dt)
{
    if (st == RC_F32)
        return cuda_qk_norm(be, static_cast<float *>(qkv), M, stride, nq, dq, wq, nk, dk, wk, eps, mid_dt, out_dt);
    if ((st != RC_BF16 && st != RC_F16) || st != out_dt)
        return rc_errorf(RC_ERR_INTERNAL, "qk_norm: qkv held as %s, its values rounded to %s", rc_dtype_name(st),
                         rc_dtype_name(out_dt));
    rck_qk_norm_args a{nullptr, wq, wk, M, stride, nq, dq, nk, dk, (float)eps,
                       rco_rms_lanes(be->kernels == RC_KERNELS_INVARIANT, M), mid_dt, out_dt,
                       static_cast<uint16_t *>(qkv), st};
    return rck_qk_norm(a);
}

rc_status cuda_normalize_rows(rc_backend *be, rc_wt Ww, int64_t M, int64_t H, float eps, rc_dtype out_dt,
                              float *out)
{
    dev_w w{};
    RC_TRY(device_w(Ww, "normalize_rows", &w));
    const float *W = w.f32;
    if (w.h16) { // widened into a workspace first (the CPU's rows are fp32 here too)
        void *p = nullptr;
        RC_TRY(ws_get(&cb(be)->ws_wide, rc_cuws_wide_bytes(M * H), &p));
        RC_TRY(rck_widen(rck_widen_args{w.h16, static_cast<float *>(p), M * H, w.dt}));
        W = static_cast<const float *>(p);
    }
    return rck_normalize(rck_normalize_args{W, out, M, H, eps, out_dt});
}

rc_status cuda_act(rc_backend *be, rc_act act, float *x, int64_t n, rc_dtype out_dt)
{
    (void)be;
    return elementwise(RCK_EW_ACT, x, nullptr, x, n, out_dt, act);
}

rc_status cuda_act_mul(rc_backend *be, rc_act act, float *gate, const float *up, int64_t n, rc_dtype act_dt,
                       rc_dtype out_dt)
{
    (void)be;
    return elementwise(RCK_EW_ACT_MUL, gate, up, gate, n, out_dt, act, act_dt);
}

// the activation kernels over operands held at 2 bytes (st) or as floats (RC_F32)
rc_status cuda_act_st(rc_backend *be, rc_act act, void *x, int64_t n, rc_dtype out_dt, rc_dtype st)
{
    if (st == RC_F32)
        return cuda_act(be, act, static_cast<float *>(x), n, out_dt);
    if (st != out_dt)
        return rc_errorf(RC_ERR_INTERNAL, "act: 2-byte %s storage of %s values", rc_dtype_name(st),
                         rc_dtype_name(out_dt));
    rck_ew_args e{};
    e.op = RCK_EW_ACT;
    e.n = n;
    e.n_cols = 1;
    e.act = act;
    e.out_dt = out_dt;
    e.a16 = static_cast<const uint16_t *>(x);
    e.out16 = static_cast<uint16_t *>(x);
    e.st = st;
    return rck_ew(e);
}

rc_status cuda_act_mul_st(rc_backend *be, rc_act act, void *gate, const void *up, int64_t n, rc_dtype act_dt,
                          rc_dtype out_dt, rc_dtype st)
{
    if (st == RC_F32)
        return cuda_act_mul(be, act, static_cast<float *>(gate), static_cast<const float *>(up), n, act_dt, out_dt);
    if (st != out_dt)
        return rc_errorf(RC_ERR_INTERNAL, "act_mul: 2-byte %s storage of %s values", rc_dtype_name(st),
                         rc_dtype_name(out_dt));
    rck_ew_args e{};
    e.op = RCK_EW_ACT_MUL;
    e.n = n;
    e.n_cols = 1;
    e.act = act;
    e.act_dt = act_dt;
    e.out_dt = out_dt;
    e.a16 = static_cast<const uint16_t *>(gate);
    e.b16 = static_cast<const uint16_t *>(up);
    e.out16 = static_cast<uint16_t *>(gate);
    e.st = st;
    return rck_ew(e);
}

rc_status cuda_add(rc_backend *be, const float *x, const float *y, int64_t n, rc_dtype out_dt, float *out)
{
    (void)be;
    return elementwise(RCK_EW_ADD, x, y, out, n, out_dt);
}

// add with operands held at 2 bytes (rc_backend_ops.add_st): every 2-byte one of one dtype, a 2-byte out of out_dt
rc_status cuda_add_st(rc_backend *be, const void *x, rc_dtype x_st, const void *y, rc_dtype y_st, int64_t n,
                      rc_dtype out_dt, void *out, rc_dtype out_st)
{
    (void)be;
    const rc_dtype st = x_st != RC_F32 ? x_st : y_st != RC_F32 ? y_st : out_st;
    const rc_dtype sts[3] = {x_st, y_st, out_st};
    for (int k = 0; k < 3; k++)
        if (sts[k] != RC_F32 && (sts[k] != st || (st != RC_BF16 && st != RC_F16) || (k == 2 && st != out_dt)))
            return rc_errorf(RC_ERR_INTERNAL, "add: operands held as %s, %s, out as %s of %s values",
                             rc_dtype_name(x_st), rc_dtype_name(y_st), rc_dtype_name(out_st), rc_dtype_name(out_dt));
    rck_ew_args e{};
    e.op = RCK_EW_ADD;
    e.n = n;
    e.n_cols = 1;
    e.out_dt = out_dt;
    e.a = x_st == RC_F32 ? static_cast<const float *>(x) : nullptr;
    e.a16 = x_st == RC_F32 ? nullptr : static_cast<const uint16_t *>(x);
    e.b = y_st == RC_F32 ? static_cast<const float *>(y) : nullptr;
    e.b16 = y_st == RC_F32 ? nullptr : static_cast<const uint16_t *>(y);
    e.out = out_st == RC_F32 ? static_cast<float *>(out) : nullptr;
    e.out16 = out_st == RC_F32 ? nullptr : static_cast<uint16_t *>(out);
    e.st = st;
    return rck_ew(e);
}

// the log-probs of logits held as st (rc_backend_ops.logprobs_st; RC_F32: logprobs)
rc_status cuda_logprobs_st(rc_backend *be, const void *logits, rc_dtype st, int64_t M, int64_t V, float temperature,
                           rc_dtype lp_dt, float *full_out, const int32_t *targets, float *target_out)
{
    cuda_backend *c = cb(be);
    if (st != RC_F32 && st != RC_BF16 && st != RC_F16)
        return rc_errorf(RC_ERR_INTERNAL, "logprobs: logits held as %s", rc_dtype_name(st));
    rck_lp_args a{st == RC_F32 ? static_cast<const float *>(logits) : nullptr, M, V, temperature, lp_dt, nullptr,
                  nullptr, nullptr, st == RC_F32 ? nullptr : static_cast<const uint16_t *>(logits), st};
    const bool want_t = targets && target_out;
    if (!full_out && !want_t)
        return RC_OK;
    void *p = nullptr;
    // [M, V] full log-probs (if asked), then [M] target log-probs
    RC_TRY(ws_get(&c->ws_lp, rc_cuws_lp_bytes(M, V, full_out != nullptr), &p));
    float *dev = static_cast<float *>(p);
    if (full_out)
        a.full = dev;
    if (want_t) {
        int32_t *dt = nullptr;
        RC_TRY(to_device(&c->ws_tgt, targets, M, &dt));
        a.targets = dt;
        a.target_out = dev + (full_out ? M * V : 0);
    }
    RC_TRY(rck_logprobs(a));
    if (full_out)
        RCK_CUDA(cudaMemcpy(full_out, a.full, (size_t)(M * V) * sizeof(float), cudaMemcpyDeviceToHost));
    if (want_t)
        RCK_CUDA(cudaMemcpy(target_out, a.target_out, (size_t)M * sizeof(float), cudaMemcpyDeviceToHost));
    return RC_OK;
}

rc_status cuda_logprobs(rc_backend *be, const float *logits, int64_t M, int64_t V, float temperature,
                        rc_dtype lp_dt, float *full_out, const int32_t *targets, float *target_out)
{
    return cuda_logprobs_st(be, logits, RC_F32, M, V, temperature, lp_dt, full_out, targets, target_out);
}

// fp8 weights: x [M, K] to fp8 values and scales (fp8.cu); per tensor the
// rows' amax go through a workspace
rc_status cuda_fp8_quant_act(rc_backend *be, const float *x, int64_t M, int64_t K, rc_fp8_act mode, float *q,
                             float *sa)
{
    if (M < 0 || K < 1 || (mode == RC_FP8_ACT_GROUP && K % RCO_FP8W_BLOCK != 0) ||
        (mode != RC_FP8_ACT_TOKEN && mode != RC_FP8_ACT_TENSOR && mode != RC_FP8_ACT_GROUP))
        return rc_errorf(RC_ERR_INTERNAL, "fp8 activations: mode %d over %lld x %lld", (int)mode, (long long)M,
                         (long long)K);
    rck_fp8_act_args a{x, q, sa, nullptr, M, K, mode};
    if (mode == RC_FP8_ACT_TENSOR) {
        void *p = nullptr;
        RC_TRY(ws_get(&cb(be)->ws_fp8, rc_cuws_fp8_bytes(M), &p));
        a.amax = static_cast<float *>(p);
    }
    return rck_fp8_quant_act(a);
}

rc_status cuda_fp8_epilogue(rc_backend *be, const rc_fp8_epi *e)
{
    (void)be;
    if (e->M < 0 || e->N < 0 || (e->kind == RC_FP8_EPI_BLOCK_ACC && !(e->k >= 0 && e->k < e->kb && e->part)) ||
        (e->kind != RC_FP8_EPI_SCALED && e->kind != RC_FP8_EPI_BLOCK_ACC && e->kind != RC_FP8_EPI_BLOCK_OUT))
        return rc_errorf(RC_ERR_INTERNAL, "fp8 epilogue: step %d, %lld x %lld, slice %lld of %lld", (int)e->kind,
                         (long long)e->M, (long long)e->N, (long long)e->k, (long long)e->kb);
    return rck_fp8_epilogue(*e);
}

// mixture of experts (moe.cu; CPU twins in src/engine/moe.c)
rc_status cuda_zero(rc_backend *be, float *x, int64_t n)
{
    (void)be;
    return rck_zero(rck_zero_args{x}, n);
}

rc_status cuda_moe_route(rc_backend *be, const float *logits, int64_t M, int64_t E, int64_t top_k, int renorm,
                         rc_dtype w_dt, float *sel, float *w)
{
    if (E < 1 || top_k < 1 || top_k > E)
        return rc_errorf(RC_ERR_INTERNAL, "moe_route: top %lld of %lld experts", (long long)top_k, (long long)E);
    void *p = nullptr;
    RC_TRY(ws_get(&cb(be)->ws_moe, rc_cuws_moe_bytes(M, E, 0), &p)); // 2 E a row
    return rck_moe_route(rck_moe_route_args{logits, sel, w, static_cast<float *>(p), E, top_k, renorm, w_dt},
                         M);
}

rc_status cuda_bias_add(rc_backend *be, float *y, int64_t M, int64_t N, const float *bias, rc_dtype out_dt)
{
    (void)be;
    return elementwise(RCK_EW_BIAS, y, bias, y, M * N, out_dt, RC_ACT_SILU, RC_F32, N);
}

rc_status cuda_swiglu_clamp(rc_backend *be, float *gate, const float *up, int64_t n, float alpha, float limit,
                            rc_dtype dt)
{
    (void)be;
    rck_ew_args e{};
    e.op = RCK_EW_SWIGLU_CLAMP;
    e.a = gate;
    e.b = up;
    e.out = gate;
    e.n = n;
    e.n_cols = 1;
    e.act = RC_ACT_SILU;
    e.act_dt = RC_F32;
    e.out_dt = dt;
    e.c = alpha;
    e.c2 = limit;
    return rck_ew(e);
}

rc_status cuda_moe_accumulate(rc_backend *be, const float *y, int64_t n, int64_t H, const int64_t *rows,
                              const float *w, const int64_t *widx, bool sigmoid, rc_dtype dt, float *out)
{
    void *p = nullptr;
    RC_TRY(ws_get(&cb(be)->ws_idx, rc_cuws_i64_bytes(2 * n), &p));
    int64_t *d = static_cast<int64_t *>(p);
    if (n > 0) {
        RCK_CUDA(cudaMemcpy(d, rows, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice));
        RCK_CUDA(cudaMemcpy(d + n, widx, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice));
    }
    return rck_moe_acc(rck_moe_acc_args{y, w, d, d + n, out, H, sigmoid ? 1 : 0, dt}, n * H);
}

rc_status cuda_moe_route_grouped(rc_backend *be, const float *logits, const float *bias, int64_t M,
                                 const rco_grouped_router *g, float *sel, float *w)
{
    if (!rco_grouped_router_ok(g))
        return rc_errorf(RC_ERR_INTERNAL, "moe_route_grouped: top %lld of %lld experts in %lld groups, best %lld",
                         (long long)g->top_k, (long long)g->E, (long long)g->n_group, (long long)g->topk_group);
    if (M < 0)
        return rc_errorf(RC_ERR_NOMEM, "moe_route_grouped: scratch for %lld rows", (long long)M);
    void *p = nullptr;
    RC_TRY(ws_get(&cb(be)->ws_moe, rc_cuws_moe_bytes(M, g->E, g->n_group), &p));
    return rck_moe_route_grouped(rck_moe_route_grouped_args{logits, bias, sel, w, static_cast<float *>(p), *g}, M);
}

rc_status cuda_gdn_step(rc_backend *be, const rc_gdn_dims *d, const float *q, const float *k, const float *v,
                        const float *g, const float *beta, int64_t n, rc_dtype out_dt, rc_dtype state_dt,
                        float *state, float *out)
{
    RC_TRY(rc_gdn_dims_check(d));
    const int64_t per = rc_gdn_step_scratch(d);
    int64_t threads = 0;
    if (n < 0 || __builtin_mul_overflow(n, d->hv, &threads))
        return rc_errorf(RC_ERR_NOMEM, "gdn_step: scratch for %lld sequences", (long long)n);
    void *p = nullptr;
    RC_TRY(ws_get(&cb(be)->ws_gdn, rc_cuws_gdn_bytes(n, d->hv, per), &p));
    return rck_gdn_step(rck_gdn_step_args{q, k, v, g, beta, state, out, static_cast<float *>(p), d->hk, d->hv, d->dk,
                                          d->dv, per, rc_gdn_qdiv(d->dk), out_dt, state_dt},
                        threads);
}

// a hybrid model's mixer for one sequence (gdn.h rc_gdn_mixer_args; CPU twin rc_cpu_gdn_mixer): the conv's
// outputs, the gates and each thread's scratch in the gdn workspace; the delta rule's value heads in launches
// whose scratch stays within the attention scratch's limit (a chunk of 4096 needs ~200 MB a head); the gated
// norm's scratch (dv floats a (token, head): at most tokens x C) where the conv's outputs were, read no more
rc_status cuda_gdn_mixer(rc_backend *be, const rc_gdn_mixer_args *m)
{
    rco_gdn_mix a;
    RC_TRY(rc_gdn_mix_prepare(m, &a));
    const int64_t C = 2 * a.hk * a.dk + a.hv * a.dv, rs = rco_gdn_mix_rule_scratch(&a), cap = attn_scratch_floats();
    int64_t nh = cap / rs;
    nh = nh < 1 ? 1 : nh > a.hv ? a.hv : nh;
    const int64_t th = a.T * a.hv; // (within the bytes below, which saturate: a failed ws_get)
    void *p = nullptr;
    RC_TRY(ws_get(&cb(be)->ws_gdn, rc_cuws_gdn_mixer_bytes(a.T, a.hk, a.hv, a.dk, a.dv, a.K, rs, cap), &p));
    a.conv = static_cast<float *>(p);
    a.g = a.conv + a.T * C;
    a.beta = a.g + th;
    rck_gdn_mix_args x{a, a.beta + th, a.K, 0};
    RC_TRY(rck_gdn_mix(0, x, C));
    RC_TRY(rck_gdn_mix(1, x, th));
    x.per = rs;
    for (int64_t h0 = 0; h0 < a.hv; h0 += nh) {
        x.h0 = h0;
        RC_TRY(rck_gdn_mix(2, x, a.hv - h0 < nh ? a.hv - h0 : nh));
    }
    x.per = a.dv;
    x.scratch = a.conv;
    return rck_gdn_mix(3, x, th);
}

rc_status cuda_gate_mul(rc_backend *be, float *x, const float *gate, int64_t n, rc_dtype gate_dt, rc_dtype out_dt)
{
    (void)be;
    return rck_gate_mul(rck_gate_mul_args{x, gate, gate_dt, out_dt}, n);
}

// ---- several devices (backend.h use_devices, set_device, copy_peer) ----
rc_status cuda_use_devices(rc_backend *be, int n)
{
    cuda_backend *c = cb(be);
    if (n < 1 || n > RC_MAX_DEVICES)
        return rc_errorf(RC_ERR_USAGE, "--gpus %d: between 1 and %d", n, RC_MAX_DEVICES);
    if (n < c->n_dev)
        return rc_errorf(RC_ERR_INTERNAL, "CUDA backend: already spans %d devices", c->n_dev);
    int count = 0;
    RCK_CUDA(cudaGetDeviceCount(&count));
    if (count < n)
        return rc_errorf(RC_ERR_DEVICE, "CUDA backend: --gpus %d needs %d GPUs; %d %s visible (CUDA_VISIBLE_DEVICES)",
                         n, n, count, count == 1 ? "is" : "are");
    const int prev = c->cur;
    for (int d = c->n_dev; d < n; d++) { // each device's own cuBLAS handle, fp32 GEMMs without TF32
        RCK_CUDA(cudaSetDevice(d));
        cublasHandle_t h = nullptr;
        cublasStatus_t bs = cublasCreate(&h);
        if (bs == CUBLAS_STATUS_SUCCESS && (bs = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
            cublasDestroy(h);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            cudaSetDevice(prev);
            return rck_blas_fail(bs, "cublasCreate", __FILE__, __LINE__);
        }
        c->slot[d].blas = h;
        c->n_dev = d + 1;
    }
    // direct peer copies where the GPUs can (NVLink, PCIe P2P); else cudaMemcpyPeer goes through the host.
    // Either way a copy: the values are the same.
    for (int d = 0; d < n; d++) {
        RCK_CUDA(cudaSetDevice(d));
        for (int p = 0; p < n; p++) {
            int can = 0;
            if (p == d || cudaDeviceCanAccessPeer(&can, d, p) != cudaSuccess || !can)
                continue;
            cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled)
                cudaGetLastError(); // (enabled by an earlier backend of this process)
            else if (e != cudaSuccess)
                return rck_cuda_fail(e, "cudaDeviceEnablePeerAccess(p, 0)", __FILE__, __LINE__);
        }
    }
    RCK_CUDA(cudaSetDevice(prev));
    be->n_devices = n;
    return RC_OK;
}

rc_status cuda_set_device(rc_backend *be, int dev)
{
    cuda_backend *c = cb(be);
    if (dev < 0 || dev >= c->n_dev)
        return rc_errorf(RC_ERR_INTERNAL, "CUDA backend: device %d of %d", dev, c->n_dev);
    return switch_device(c, dev);
}

rc_status cuda_copy_peer(rc_backend *be, float *dst, int dst_dev, const float *src, int src_dev, int64_t n)
{
    cuda_backend *c = cb(be);
    if (dst_dev < 0 || dst_dev >= c->n_dev || src_dev < 0 || src_dev >= c->n_dev || n < 0)
        return rc_errorf(RC_ERR_INTERNAL, "CUDA backend: copy of %lld floats from device %d to %d", (long long)n,
                         src_dev, dst_dev);
    if (n > 0) // ordered after the work queued on both devices (legacy default streams)
        RCK_CUDA(cudaMemcpyPeer(dst, dst_dev, src, src_dev, (size_t)n * sizeof(float)));
    return RC_OK;
}

const rc_backend_ops k_cuda_ops = {
    "cuda",
    false, // host_memory
    cuda_destroy,
    cuda_alloc,
    cuda_free,
    cuda_upload,
    cuda_download,
    cuda_gather_rows,
    cuda_embed,
    cuda_norm,
    cuda_matmul,
    cuda_matmul_kslice,
    cuda_rope,
    cuda_attention,
    cuda_qk_norm,
    cuda_clamp,
    cuda_scale,
    cuda_softcap,
    cuda_normalize_rows,
    cuda_act,
    cuda_act_mul,
    cuda_add,
    cuda_logprobs,
    cuda_fp8_quant_act,
    cuda_fp8_epilogue,
    cuda_zero,
    cuda_moe_route,
    cuda_moe_accumulate,
    cuda_gdn_step,
    cuda_bias_add,
    cuda_swiglu_clamp,
    cuda_moe_route_grouped,
    cuda_use_devices,
    cuda_set_device,
    cuda_copy_peer,
    cuda_matmul_st,
    cuda_act_st,
    cuda_act_mul_st,
    cuda_fp8_matmul,
    cuda_gdn_mixer,
    cuda_gate_mul,
    cuda_fp8_deq_matmul,
    cuda_fp8_dequant,
    cuda_norm_st,
    cuda_add_st,
    cuda_logprobs_st,
    cuda_qk_norm_st,
    cuda_embed_st,
};

} // namespace

extern "C" bool rc_cuda_compiled(void) { return true; }

extern "C" rc_status rc_backend_cuda_create(rc_kernels kernels, rc_backend **out)
{
    *out = nullptr;
    if (kernels == RC_KERNELS_BLAS)
        return rc_errorf(RC_ERR_USAGE, "--kernels blas is OpenBLAS on the CPU; with --backend cuda use engine "
                                       "(cuBLAS) or invariant");
    int n = 0;
    char name[256];
    RC_TRY(rc_cuda_probe(&n, name, sizeof name));
    RCK_CUDA(cudaSetDevice(0));
    void *mem = calloc(1, sizeof(cuda_backend));
    if (!mem)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    cuda_backend *c = new (mem) cuda_backend();
    c->base.ops = &k_cuda_ops;
    c->base.n_threads = 1;
    c->base.kernels = kernels;
    snprintf(c->device, sizeof c->device, "%s", name);
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        c->blas = nullptr;
        rc_status s = rck_blas_fail(bs, "cublasCreate(&c->blas)", __FILE__, __LINE__);
        cuda_destroy(&c->base);
        return s;
    }
    // fp32 GEMMs stay fp32 (no TF32), as PyTorch's default allow_tf32=False
    bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        rc_status s = rck_blas_fail(bs, "cublasSetMathMode", __FILE__, __LINE__);
        cuda_destroy(&c->base);
        return s;
    }
    *out = &c->base;
    return RC_OK;
}
