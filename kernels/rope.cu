// RoPE (partial rotary too): one thread per rotary pair of each Q and K head
// (CPU twin: backend_cpu.c cpu_rope). Its arguments come from an
// rc_attn_params (attention.cu rck_attn_args_from_params).
#include "rck.h"

RCK_DEFINE_KERNEL(k_rope, rck_attn_args, rck_rope_thread)

rc_status rck_rope(const rck_attn_args &a, int64_t n_rows)
{
    RCK_LAUNCH(k_rope, a, n_rows * (a.nh + a.nkv) * a.rotary_half);
    return RC_OK;
}
