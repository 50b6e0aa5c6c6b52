// Attention over the KV cache, prefill and decode, causal, GQA, sliding
// window: one kernel stores the new rows' K and V, one computes each (row,
// head) in the CPU twin's order for the kernel strategy (engine: prefill in
// key tiles of 64 with online softmax, decode split in chunks of 32 and
// merged; invariant: one fixed order). CPU twin: backend_cpu.c cpu_attention.
#include "rck.h"

RCK_DEFINE_KERNEL(k_kv_store, rck_attn_args, rck_kv_store_thread)
RCK_DEFINE_KERNEL(k_attn, rck_attn_args, rck_attn_thread)

rc_status rck_kv_store(const rck_attn_args &a, int64_t n_rows)
{
    RCK_LAUNCH(k_kv_store, a, n_rows * a.nkv * a.d);
    return RC_OK;
}

rc_status rck_attn(const rck_attn_args &a, int64_t n_rows_in_launch)
{
    RCK_LAUNCH(k_attn, a, n_rows_in_launch * a.nh);
    return RC_OK;
}
