// Elementwise kernels: dtype rounding and conversion, embedding gather, row
// gather, residual add, activations, SwiGLU product, bias + rounding after a
// cuBLAS GEMM. CPU twins: backend_cpu.c (cpu_upload, cpu_embed,
// cpu_gather_rows, cpu_add, cpu_act, cpu_act_mul, the bias step of cpu_matmul).
#include "rck.h"

RCK_DEFINE_KERNEL(k_round, rck_round_args, rck_round_thread)
RCK_DEFINE_KERNEL(k_to_half, rck_to_half_args, rck_to_half_thread)
RCK_DEFINE_KERNEL(k_widen, rck_widen_args, rck_widen_thread)
RCK_DEFINE_KERNEL(k_fp8_widen, rck_fp8_widen_args, rck_fp8_widen_thread)
RCK_DEFINE_KERNEL(k_fp8_deq, rck_fp8_deq_args, rck_fp8_deq_thread)
RCK_DEFINE_KERNEL(k_embed, rck_embed_args, rck_embed_thread)
RCK_DEFINE_KERNEL(k_gather, rck_gather_args, rck_gather_thread)
RCK_DEFINE_KERNEL(k_ew, rck_ew_args, rck_ew_thread)

rc_status rck_round(const rck_round_args &a)
{
    RCK_LAUNCH(k_round, a, a.n);
    return RC_OK;
}

rc_status rck_to_half(const rck_to_half_args &a)
{
    RCK_LAUNCH(k_to_half, a, a.n);
    return RC_OK;
}

rc_status rck_widen(const rck_widen_args &a)
{
    RCK_LAUNCH(k_widen, a, a.n);
    return RC_OK;
}

rc_status rck_fp8_widen(const rck_fp8_widen_args &a)
{
    RCK_LAUNCH(k_fp8_widen, a, a.n);
    return RC_OK;
}

rc_status rck_fp8_deq(const rck_fp8_deq_args &a)
{
    RCK_LAUNCH(k_fp8_deq, a, a.N * a.K);
    return RC_OK;
}

rc_status rck_embed(const rck_embed_args &a)
{
    RCK_LAUNCH(k_embed, a, a.n_rows * a.hidden);
    return RC_OK;
}

rc_status rck_gather(const rck_gather_args &a)
{
    RCK_LAUNCH(k_gather, a, a.n * a.row_len);
    return RC_OK;
}

rc_status rck_ew(const rck_ew_args &a)
{
    RCK_LAUNCH(k_ew, a, a.n);
    return RC_OK;
}
