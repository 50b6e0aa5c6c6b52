// Gated DeltaNet: one recurrent decode step, one thread per (sequence, value
// head) running rco_gdn_recurrent_token over its state. CPU twin:
// src/engine/gdn.c (rc_cpu_gdn_step), the arithmetic in
// src/engine/ops_inline.h (rco_gdn_*, rco_tsum_*).
#include "rck.h"

RCK_DEFINE_KERNEL(k_gdn_step, rck_gdn_step_args, rck_gdn_step_thread)

rc_status rck_gdn_step(const rck_gdn_step_args &a, int64_t n)
{
    RCK_LAUNCH(k_gdn_step, a, n);
    return RC_OK;
}
