// Every pointer in each kernel argument struct of kernels/rck_threads.h (and
// rc_fp8_epi of src/engine/backend.h), for the host stand-in's launch check
// (cuda_runtime.h: each non-null one must lie in a live device allocation).
// A kernel whose argument struct is not listed here does not compile in the
// host build: list its pointers when adding one.
#ifndef RC_CUDA_SHIM_PTRS_H
#define RC_CUDA_SHIM_PTRS_H

#include "rck_threads.h"

#define RCK_SHIM_PTR(f, a, field) f((const void *)(a).field, #field)

template <typename F> static inline void rck_shim_ptrs(const rck_round_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, x);
    RCK_SHIM_PTR(f, a, y);
}

template <typename F> static inline void rck_shim_ptrs(const rck_to_half_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, x);
    RCK_SHIM_PTR(f, a, bits);
}

template <typename F> static inline void rck_shim_ptrs(const rck_embed_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, tokens);
    RCK_SHIM_PTR(f, a, table);
    RCK_SHIM_PTR(f, a, out);
    RCK_SHIM_PTR(f, a, table16);
}

template <typename F> static inline void rck_shim_ptrs(const rck_widen_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, bits);
    RCK_SHIM_PTR(f, a, x);
}

template <typename F> static inline void rck_shim_ptrs(const rck_fp8_widen_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, codes);
    RCK_SHIM_PTR(f, a, bits);
}

template <typename F> static inline void rck_shim_ptrs(const rck_fp8_deq_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, codes);
    RCK_SHIM_PTR(f, a, rs);
    RCK_SHIM_PTR(f, a, bits);
}

template <typename F> static inline void rck_shim_ptrs(const rck_gather_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, src);
    RCK_SHIM_PTR(f, a, rows);
    RCK_SHIM_PTR(f, a, dst);
}

template <typename F> static inline void rck_shim_ptrs(const rck_ew_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, a);
    RCK_SHIM_PTR(f, a, b);
    RCK_SHIM_PTR(f, a, out);
    RCK_SHIM_PTR(f, a, a16);
    RCK_SHIM_PTR(f, a, b16);
    RCK_SHIM_PTR(f, a, out16);
}

template <typename F> static inline void rck_shim_ptrs(const rck_normalize_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, W);
    RCK_SHIM_PTR(f, a, out);
}

template <typename F> static inline void rck_shim_ptrs(const rck_norm_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, x);
    RCK_SHIM_PTR(f, a, w);
    RCK_SHIM_PTR(f, a, b);
    RCK_SHIM_PTR(f, a, out);
}

template <typename F> static inline void rck_shim_ptrs(const rck_gemm_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, x);
    RCK_SHIM_PTR(f, a, W);
    RCK_SHIM_PTR(f, a, bias);
    RCK_SHIM_PTR(f, a, y);
    RCK_SHIM_PTR(f, a, Wt);
    RCK_SHIM_PTR(f, a, W16);
    RCK_SHIM_PTR(f, a, x16);
    RCK_SHIM_PTR(f, a, y16);
    RCK_SHIM_PTR(f, a, W8);
    RCK_SHIM_PTR(f, a, W8s);
}

template <typename F> static inline void rck_shim_ptrs(const rck_bias16_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, bias);
    RCK_SHIM_PTR(f, a, y);
}

template <typename F> static inline void rck_shim_ptrs(const rck_transpose_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, x);
    RCK_SHIM_PTR(f, a, y);
}

template <typename F> static inline void rck_shim_ptrs(const rck_attn_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, bd.slot);
    RCK_SHIM_PTR(f, a, bd.start);
    RCK_SHIM_PTR(f, a, bd.n_new);
    RCK_SHIM_PTR(f, a, bd.row0);
    RCK_SHIM_PTR(f, a, bd.pos);
    RCK_SHIM_PTR(f, a, bd.seq_of_row);
    RCK_SHIM_PTR(f, a, inv_freq);
    RCK_SHIM_PTR(f, a, qkv);
    RCK_SHIM_PTR(f, a, k_cache);
    RCK_SHIM_PTR(f, a, v_cache);
    RCK_SHIM_PTR(f, a, out);
    RCK_SHIM_PTR(f, a, scratch);
    RCK_SHIM_PTR(f, a, ap.inv_freq);
    RCK_SHIM_PTR(f, a, ap.alibi_slopes);
    RCK_SHIM_PTR(f, a, k16);
    RCK_SHIM_PTR(f, a, v16);
}

template <typename F> static inline void rck_shim_ptrs(const rck_lp_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, logits);
    RCK_SHIM_PTR(f, a, full);
    RCK_SHIM_PTR(f, a, targets);
    RCK_SHIM_PTR(f, a, target_out);
}

template <typename F> static inline void rck_shim_ptrs(const rck_fp8_act_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, x);
    RCK_SHIM_PTR(f, a, q);
    RCK_SHIM_PTR(f, a, sa);
    RCK_SHIM_PTR(f, a, amax);
}

template <typename F> static inline void rck_shim_ptrs(const rc_fp8_epi &a, F &&f)
{
    RCK_SHIM_PTR(f, a, y);
    RCK_SHIM_PTR(f, a, part);
    RCK_SHIM_PTR(f, a, sx);
    RCK_SHIM_PTR(f, a, sw);
    RCK_SHIM_PTR(f, a, bias);
}

template <typename F> static inline void rck_shim_ptrs(const rck_qk_norm_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, qkv);
    RCK_SHIM_PTR(f, a, wq);
    RCK_SHIM_PTR(f, a, wk);
}

template <typename F> static inline void rck_shim_ptrs(const rck_zero_args &a, F &&f) { RCK_SHIM_PTR(f, a, x); }

template <typename F> static inline void rck_shim_ptrs(const rck_moe_route_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, logits);
    RCK_SHIM_PTR(f, a, sel);
    RCK_SHIM_PTR(f, a, w);
    RCK_SHIM_PTR(f, a, scratch);
}

template <typename F> static inline void rck_shim_ptrs(const rck_moe_route_grouped_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, logits);
    RCK_SHIM_PTR(f, a, bias);
    RCK_SHIM_PTR(f, a, sel);
    RCK_SHIM_PTR(f, a, w);
    RCK_SHIM_PTR(f, a, scratch);
}

template <typename F> static inline void rck_shim_ptrs(const rck_moe_acc_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, y);
    RCK_SHIM_PTR(f, a, w);
    RCK_SHIM_PTR(f, a, rows);
    RCK_SHIM_PTR(f, a, widx);
    RCK_SHIM_PTR(f, a, out);
}

template <typename F> static inline void rck_shim_ptrs(const rck_gdn_step_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, q);
    RCK_SHIM_PTR(f, a, k);
    RCK_SHIM_PTR(f, a, v);
    RCK_SHIM_PTR(f, a, g);
    RCK_SHIM_PTR(f, a, beta);
    RCK_SHIM_PTR(f, a, state);
    RCK_SHIM_PTR(f, a, out);
    RCK_SHIM_PTR(f, a, scratch);
}

template <typename F> static inline void rck_shim_ptrs(const rck_gdn_mix_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, m.qkvz);
    RCK_SHIM_PTR(f, a, m.ba);
    RCK_SHIM_PTR(f, a, m.conv_w);
    RCK_SHIM_PTR(f, a, m.A_log);
    RCK_SHIM_PTR(f, a, m.dt_bias);
    RCK_SHIM_PTR(f, a, m.norm_w);
    RCK_SHIM_PTR(f, a, m.conv_state);
    RCK_SHIM_PTR(f, a, m.state);
    RCK_SHIM_PTR(f, a, m.out);
    RCK_SHIM_PTR(f, a, m.conv);
    RCK_SHIM_PTR(f, a, m.g);
    RCK_SHIM_PTR(f, a, m.beta);
    RCK_SHIM_PTR(f, a, scratch);
}

template <typename F> static inline void rck_shim_ptrs(const rck_gate_mul_args &a, F &&f)
{
    RCK_SHIM_PTR(f, a, x);
    RCK_SHIM_PTR(f, a, gate);
}

#undef RCK_SHIM_PTR

#endif
