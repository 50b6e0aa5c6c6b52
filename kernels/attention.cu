// Attention over the KV cache, prefill and decode, causal, GQA, sliding
// window, ALiBi: one kernel stores the new rows' K and V, one computes each (row,
// head) in the CPU twin's order for the kernel strategy (engine: prefill in
// key tiles of 64 with online softmax, decode split in chunks of 32 and
// merged; invariant: one fixed order). CPU twin: backend_cpu.c cpu_attention.
// Both kernels here and RoPE's (rope.cu) take their arguments from an
// rc_attn_params (rck_attn_args_from_params), never from the model config.
#include "rck.h"

RCK_DEFINE_KERNEL(k_kv_store, rck_attn_args, rck_kv_store_thread)
RCK_DEFINE_KERNEL(k_attn, rck_attn_args, rck_attn_thread)

rc_status rck_attn_args_from_params(const rc_attn_params &ap, const char *op, rck_attn_args *a)
{
    RC_TRY(rc_attn_params_check(&ap, op));
    // the RoPE table only where there is RoPE: without rotary dims forward.c
    // leaves the model's host table in ap.inv_freq (it uploads it for RoPE
    // only), and a kernel's arguments hold device pointers alone
    const bool rotary = ap.pos == RC_ATTN_POS_ROTARY && ap.rotary_dim > 0;
    a->inv_freq = rotary ? ap.inv_freq : nullptr;
    a->nh = ap.n_heads;
    a->nkv = ap.n_kv_heads;
    a->d = ap.head_dim;
    a->rotary_half = ap.pos == RC_ATTN_POS_ROTARY ? ap.rotary_dim / 2 : 0;
    a->sliding_window = ap.sliding_window;
    a->scale = ap.scale;
    a->cs_dt = ap.rope_cs_dt;
    a->rope_dt = ap.rope_dt;
    a->score_dt = ap.num.score_dt;
    a->prob_dt = ap.num.prob_dt;
    a->out_dt = ap.num.out_dt;
    a->ap = ap;
    if (!rotary)
        a->ap.inv_freq = nullptr;
    return RC_OK;
}

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
