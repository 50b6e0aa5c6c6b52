// LayerNorm and RMSNorm: one thread per row, the row's reduction in the CPU
// twin's order (src/engine/ops_inline.h rco_norm_row; CPU: backend_cpu.c cpu_norm).
#include "rck.h"

RCK_DEFINE_KERNEL(k_norm, rck_norm_args, rck_norm_thread)

rc_status rck_norm(const rck_norm_args &a)
{
    RCK_LAUNCH(k_norm, a, a.M);
    return RC_OK;
}
