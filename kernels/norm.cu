// LayerNorm and RMSNorm, q / k norm (one thread per row segment), and NormHead's row normalisation: one thread per
// row, the row's reduction in the CPU twin's order (src/engine/ops_inline.h
// rco_norm_row, rco_normalize_row; CPU: backend_cpu.c cpu_norm,
// cpu_normalize_rows).
#include "rck.h"

RCK_DEFINE_KERNEL(k_norm, rck_norm_args, rck_norm_thread)
RCK_DEFINE_KERNEL(k_normalize, rck_normalize_args, rck_normalize_thread)
RCK_DEFINE_KERNEL(k_qk_norm, rck_qk_norm_args, rck_qk_norm_thread)

rc_status rck_norm(const rck_norm_args &a)
{
    RCK_LAUNCH(k_norm, a, a.M);
    return RC_OK;
}

rc_status rck_normalize(const rck_normalize_args &a)
{
    RCK_LAUNCH(k_normalize, a, a.M);
    return RC_OK;
}

rc_status rck_qk_norm(const rck_qk_norm_args &a)
{
    RCK_LAUNCH(k_qk_norm, a, a.M * (a.nq + a.nk));
    return RC_OK;
}
