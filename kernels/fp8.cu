// fp8 weights (--sampler weights=fp8, src/engine/fp8w.c): the activations'
// dynamic quantization (scales, then values) and the scaled GEMM's epilogue
// steps; the GEMM itself is the backend's matmul over the fp8 values (cuBLAS
// with bf16 operands under engine kernels, the fixed-order kernel under
// invariant). CPU twin: fp8w.c's host path (rc_fp8w_quant_act,
// fp8w_scaled_gemm, fp8w_block_gemm), the same scalar rules (ops_inline.h).
#include "rck.h"

RCK_DEFINE_KERNEL(k_fp8_scale, rck_fp8_act_args, rck_fp8_scale_thread)
RCK_DEFINE_KERNEL(k_fp8_tensor_scale, rck_fp8_act_args, rck_fp8_tensor_scale_thread)
RCK_DEFINE_KERNEL(k_fp8_quant, rck_fp8_act_args, rck_fp8_quant_thread)
RCK_DEFINE_KERNEL(k_fp8_epi, rc_fp8_epi, rck_fp8_epi_thread)

rc_status rck_fp8_quant_act(const rck_fp8_act_args &a)
{
    RCK_LAUNCH(k_fp8_scale, a, a.mode == RC_FP8_ACT_GROUP ? a.M * (a.K / RCO_FP8W_BLOCK) : a.M);
    if (a.mode == RC_FP8_ACT_TENSOR)
        RCK_LAUNCH(k_fp8_tensor_scale, a, 1);
    RCK_LAUNCH(k_fp8_quant, a, a.M * a.K);
    return RC_OK;
}

rc_status rck_fp8_epilogue(const rc_fp8_epi &e)
{
    RCK_LAUNCH(k_fp8_epi, e, e.M * e.N);
    return RC_OK;
}
