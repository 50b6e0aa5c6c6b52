// Log-softmax of the temperature-scaled logits and the gather of the sampled
// token: one thread per row (fp64 log-sum-exp for fp32 log-probs, 16 fp32
// lanes in the model dtype). CPU twin: backend_cpu.c cpu_logprobs.
#include "rck.h"

RCK_DEFINE_KERNEL(k_logprobs, rck_lp_args, rck_logprob_thread)

rc_status rck_logprobs(const rck_lp_args &a)
{
    RCK_LAUNCH(k_logprobs, a, a.M);
    return RC_OK;
}
