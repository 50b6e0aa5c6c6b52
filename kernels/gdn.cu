// Gated DeltaNet: one recurrent decode step, one thread per (sequence, value
// head) running rco_gdn_recurrent_token over its state (CPU twin:
// src/engine/gdn.c rc_cpu_gdn_step); a layer's mixer for one sequence's call,
// four launches -- the conv one thread per channel, the gates and the gated
// norm one per (token, value head), the delta rule one per value head running
// the whole chunked (or recurrent) form serially: straightforward, not tuned
// (CPU twin: rc_cpu_gdn_mixer); the attention output gate. The arithmetic is
// in src/engine/ops_inline.h (rco_gdn_*, rco_tsum_*).
#include "rck.h"

RCK_DEFINE_KERNEL(k_gdn_step, rck_gdn_step_args, rck_gdn_step_thread)

rc_status rck_gdn_step(const rck_gdn_step_args &a, int64_t n)
{
    RCK_LAUNCH(k_gdn_step, a, n);
    return RC_OK;
}

RCK_DEFINE_KERNEL(k_gdn_mix_conv, rck_gdn_mix_args, rck_gdn_mix_conv_thread)
RCK_DEFINE_KERNEL(k_gdn_mix_gate, rck_gdn_mix_args, rck_gdn_mix_gate_thread)
RCK_DEFINE_KERNEL(k_gdn_mix_rule, rck_gdn_mix_args, rck_gdn_mix_rule_thread)
RCK_DEFINE_KERNEL(k_gdn_mix_norm, rck_gdn_mix_args, rck_gdn_mix_norm_thread)
RCK_DEFINE_KERNEL(k_gate_mul, rck_gate_mul_args, rck_gate_mul_thread)

rc_status rck_gdn_mix(int stage, const rck_gdn_mix_args &a, int64_t n)
{
    switch (stage) {
    case 0:
        RCK_LAUNCH(k_gdn_mix_conv, a, n);
        break;
    case 1:
        RCK_LAUNCH(k_gdn_mix_gate, a, n);
        break;
    case 2:
        RCK_LAUNCH(k_gdn_mix_rule, a, n);
        break;
    default:
        RCK_LAUNCH(k_gdn_mix_norm, a, n);
        break;
    }
    return RC_OK;
}

rc_status rck_gate_mul(const rck_gate_mul_args &a, int64_t n)
{
    RCK_LAUNCH(k_gate_mul, a, n);
    return RC_OK;
}
