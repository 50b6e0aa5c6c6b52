// Mixture-of-experts kernels: zero, routing (softmax or grouped sigmoid; one thread per row), weighted
// accumulation (one thread per output element). CPU twins: src/engine/moe.c
// (rc_cpu_zero, rc_cpu_moe_route, rc_cpu_moe_route_grouped, rc_cpu_moe_accumulate), the arithmetic in
// src/engine/ops_inline.h (rco_moe_*).
#include "rck.h"

RCK_DEFINE_KERNEL(k_zero, rck_zero_args, rck_zero_thread)
RCK_DEFINE_KERNEL(k_moe_route, rck_moe_route_args, rck_moe_route_thread)
RCK_DEFINE_KERNEL(k_moe_acc, rck_moe_acc_args, rck_moe_acc_thread)
RCK_DEFINE_KERNEL(k_moe_route_grouped, rck_moe_route_grouped_args, rck_moe_route_grouped_thread)

rc_status rck_zero(const rck_zero_args &a, int64_t n)
{
    RCK_LAUNCH(k_zero, a, n);
    return RC_OK;
}

rc_status rck_moe_route(const rck_moe_route_args &a, int64_t M)
{
    RCK_LAUNCH(k_moe_route, a, M);
    return RC_OK;
}

rc_status rck_moe_acc(const rck_moe_acc_args &a, int64_t n)
{
    RCK_LAUNCH(k_moe_acc, a, n);
    return RC_OK;
}

rc_status rck_moe_route_grouped(const rck_moe_route_grouped_args &a, int64_t M)
{
    RCK_LAUNCH(k_moe_route_grouped, a, M);
    return RC_OK;
}
