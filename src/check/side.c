/* One side of the check (--sampler / --trainer): its spec parsed, printed,
 * compared, and turned into the engine's numerics. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8w.h"
#include "side.h"
#include "util.h"

/* ---- the run command's options: one table ------------------------------- */

/* --kernels and a side's kernels= ("engine", "invariant", "blas"); opt names the option in errors */
rc_status rc_side_parse_kernels(const char *opt, const char *v, rc_kernels *k)
{
    if (!strcmp(v, "engine")) *k = RC_KERNELS_ENGINE;
    else if (!strcmp(v, "invariant")) *k = RC_KERNELS_INVARIANT;
    else if (!strcmp(v, "blas")) *k = RC_KERNELS_BLAS;
    else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of engine, invariant, blas", opt, v);
    return RC_OK;
}

/* --logprob-dtype and a side's logprob-dtype= ("fp32", "same": in the dtype) */
rc_status rc_side_parse_lpdt(const char *opt, const char *v, bool *same)
{
    if (!strcmp(v, "same")) *same = true;
    else if (!strcmp(v, "fp32")) *same = false;
    else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not fp32 or same", opt, v);
    return RC_OK;
}

/* One side of the check (--sampler / --trainer): what it computes with. */

/* Equal sides share one engine. With TP on either rc_side they never do: the
 * sampler's bias goes into rank 0's partial, the trainer's after the reduce. */
bool rc_side_equal(const rc_side *a, const rc_side *b)
{
    return a->dt == b->dt && a->kernels == b->kernels && a->upcast == b->upcast && a->lp_same == b->lp_same &&
           a->mode == b->mode && a->residual_f32 == b->residual_f32 && a->kv_quant == b->kv_quant &&
           (a->kv_quant == RC_KV_AUTO || a->kv_scale == b->kv_scale) && a->tp <= 1 && b->tp <= 1 &&
           a->wq.kind == b->wq.kind &&
           (a->wq.kind == RC_WQ_NONE || (a->wq.scale == b->wq.scale && a->wq.act == b->wq.act));
}

static const char *kv_quant_str(rc_kv_quant q)
{
    return q == RC_KV_FP8_E4M3 ? "fp8_e4m3" : q == RC_KV_FP8_E5M2 ? "fp8_e5m2" : "auto";
}

/* the engine numerics of a side (trainer: Megatron's TP) */
rc_numerics rc_side_numerics(const rc_side *sd, const rc_numerics *base, bool trainer)
{
    rc_numerics n = *base;
    n.dt = sd->dt;
    n.upcast = sd->upcast;
    n.logprob_dt = sd->lp_same ? sd->dt : RC_F32;
    n.mode = sd->mode;
    n.residual_f32 = sd->residual_f32;
    n.kv_quant = sd->kv_quant;
    n.kv_scale = sd->kv_scale;
    n.tp = (int)sd->tp;
    n.tp_reduce = sd->tp_reduce;
    n.tp_trainer = trainer;
    n.wq = sd->wq;
    return n;
}

/* "dtype=bf16,kernels=engine,upcast=softmax,logprob-dtype=fp32" (+ the batch) */
static const char *const k_wscale_names[] = {"tensor", "channel", "block"};  /* rc_wscale */
static const char *const k_act_names[] = {"dynamic-token", "dynamic-tensor", "none"}; /* rc_actquant */

void rc_side_str(const rc_side *sd, bool trainer, char *buf, size_t n)
{
    char up[64];
    rc_upcast_str(sd->upcast, up, sizeof up);
    for (char *c = up; *c; c++)
        *c = *c == ',' ? '+' : *c;
    int k = snprintf(buf, n, "dtype=%s,kernels=%s,upcast=%s,logprob-dtype=%s", rc_dtype_str(sd->dt),
                     rc_kernels_name(sd->kernels), up, sd->lp_same ? "same" : "fp32");
    if (sd->batch > 0 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",%s=%lld", trainer ? "micro-batch" : "batch", (long long)sd->batch);
    if (sd->prefill_chunk > 0 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",prefill-chunk=%lld", (long long)sd->prefill_chunk);
    if (sd->mode == RC_PREC_AUTOCAST && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",mode=autocast");
    if (sd->residual_f32 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",residual=fp32");
    if (sd->kv_quant != RC_KV_AUTO && k > 0 && (size_t)k < n) /* auto: the string of a run without the key */
        k += snprintf(buf + k, n - (size_t)k, ",kv-cache=%s,kv-scale=%.9g", kv_quant_str(sd->kv_quant),
                 (double)sd->kv_scale);
    if (sd->tp > 1 && k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, ",tp=%lld,tp-reduce=%s", (long long)sd->tp, rc_tp_reduce_name(sd->tp_reduce));
    if (sd->wq.kind == RC_WQ_FP8 && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ",weights=fp8,weight-scale=%s,act=%s", k_wscale_names[sd->wq.scale],
                 k_act_names[sd->wq.act]);
}

/* Apply SPEC (KEY=VALUE,...) of --sampler / --trainer (`opt`) to sd. The keys
 * of the sampler/trainer emulations still to come are refused by name. */
rc_status rc_side_parse(const char *opt, const char *spec, bool trainer, rc_side *sd)
{
    if (!*spec)
        return rc_errorf(RC_ERR_USAGE, "%s: empty; expected KEY=VALUE[,...]", opt);
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return rc_errorf(RC_ERR_USAGE, "%s: longer than %zu bytes", opt, sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    unsigned seen = 0;
    int lm_head = -1, weights_dt = -1; /* weights=bf16|fp16|fp32: must be the side's dtype */
    bool kv_scale_given = false;
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1])
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not KEY=VALUE", opt, item);
        *eq = '\0';
        const char *key = item, *v = eq + 1;
        static const char *const keys[] = {"dtype", "kernels", "upcast", "lm-head", "logprob-dtype", "batch",
                                           "micro-batch", "prefill-chunk", "mode", "kv-cache", "kv-scale", "tp",
                                           "tp-reduce", "weights", "weight-scale", "act", "residual", NULL};
        int ki = -1;
        for (int i = 0; keys[i]; i++)
            if (!strcmp(keys[i], key))
                ki = i;
        if (ki < 0) {
            return rc_errorf(RC_ERR_USAGE, "%s: unknown key '%s' (known: dtype, kernels, upcast, lm-head, "
                             "logprob-dtype, mode, residual, tp, tp-reduce, %s)", opt, key,
                             trainer ? "micro-batch, prefill-chunk"
                                     : "batch, prefill-chunk, kv-cache, kv-scale, weights, weight-scale, act");
        }
        if (seen & (1u << ki))
            return rc_errorf(RC_ERR_USAGE, "%s: %s is given twice", opt, key);
        seen |= 1u << ki;
        char what[600];
        snprintf(what, sizeof what, "%s %s", opt, key);
        switch (ki) {
        case 0:
            if (rc_dtype_parse_cli(v, &sd->dt) != RC_OK)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of fp32, fp16, bf16", what, v);
            break;
        case 1:
            RC_TRY(rc_side_parse_kernels(what, v, &sd->kernels));
            break;
        case 2: { /* ops joined with '+': "softmax+rope" */
            char list[128];
            if (strlen(v) >= sizeof list)
                return rc_errorf(RC_ERR_USAGE, "%s: too long", what);
            snprintf(list, sizeof list, "%s", v);
            for (char *c = list; *c; c++) /* no ',' gets here: the spec was split at them */
                *c = *c == '+' ? ',' : *c;
            unsigned up;
            if (rc_parse_upcast(list, &up) != RC_OK)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not a list of softmax, rope, norm, lm_head joined with "
                                 "'+', or all, or none", what, v);
            sd->upcast = up; /* the whole set; lm-head= (in any order) decides the head */
            break;
        }
        case 3:
            if (!strcmp(v, "fp32")) lm_head = 1;
            else if (!strcmp(v, "dtype")) lm_head = 0;
            else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not fp32 or dtype", what, v);
            break;
        case 4:
            RC_TRY(rc_side_parse_lpdt(what, v, &sd->lp_same));
            break;
        case 16: /* Megatron's --fp32-residual-connection */
            if (!strcmp(v, "fp32")) sd->residual_f32 = true;
            else if (!strcmp(v, "dtype")) sd->residual_f32 = false;
            else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not fp32 or dtype", what, v);
            break;
        case 8:
            if (!strcmp(v, "pure")) sd->mode = RC_PREC_PURE;
            else if (!strcmp(v, "autocast")) sd->mode = RC_PREC_AUTOCAST;
            else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not pure or autocast", what, v);
            break;
        case 13: { /* weights=dtype (or the dtype's name) | fp8 (fp8_e4m3) */
            rc_dtype wd;
            if (!strcmp(v, "fp8") || !strcmp(v, "fp8_e4m3")) {
                /* FSDP / Megatron trainers compute with the bf16 (or fp32) masters; fp8 weights are the
                 * rollout engine's. Transformer Engine's fp8 training recipes are another scheme. */
                if (trainer)
                    return rc_errorf(RC_ERR_UNSUPPORTED, "%s: weights=fp8 is the sampler's (an fp8 rollout "
                                     "engine); the trainer's fp8 training (Transformer Engine recipes) is not "
                                     "emulated", opt);
                sd->wq.kind = RC_WQ_FP8;
            } else if (!strcmp(v, "dtype")) {
                sd->wq.kind = RC_WQ_NONE;
            } else if (rc_dtype_parse_cli(v, &wd) == RC_OK) {
                sd->wq.kind = RC_WQ_NONE;
                weights_dt = (int)wd;
            } else {
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not dtype, bf16, fp16, fp32 or fp8", what, v);
            }
            break;
        }
        case 14:
        case 15: {
            const char *const *names = ki == 14 ? k_wscale_names : k_act_names;
            int found = -1;
            for (int i = 0; i < 3; i++)
                if (!strcmp(names[i], v))
                    found = i;
            if (found < 0)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of %s, %s, %s", what, v, names[0], names[1],
                                 names[2]);
            if (trainer)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s= belongs to weights=fp8, the sampler's", opt, key);
            if (ki == 14)
                sd->wq.scale = (rc_wscale)found;
            else
                sd->wq.act = (rc_actquant)found;
            break;
        }
        case 7: /* sampler: the prompts' prefill; trainer: the whole forward, through the cache */
            RC_TRY(rc_parse_i64(what, v, 1, 1 << 24, &sd->prefill_chunk));
            break;
        case 9:
        case 10:
            /* a trainer (FSDP, Megatron) attends over the keys and values it
             * computed, in the model's dtype (even chunked, prefill-chunk=):
             * vLLM's fp8 KV cache is the sampler's */
            if (trainer)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s= is the sampler's (a trainer keeps its keys and values in "
                                 "the model's dtype; --sampler kv-cache=fp8_e4m3)", opt, key);
            if (ki == 9) {
                if (!strcmp(v, "auto")) sd->kv_quant = RC_KV_AUTO;
                else if (!strcmp(v, "fp8_e4m3") || !strcmp(v, "fp8")) sd->kv_quant = RC_KV_FP8_E4M3;
                else if (!strcmp(v, "fp8_e5m2")) sd->kv_quant = RC_KV_FP8_E5M2;
                else return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not auto, fp8_e4m3 (or fp8) or fp8_e5m2", what, v);
            } else {
                char *end;
                errno = 0;
                const double x = strtod(v, &end);
                if (*end || end == v || errno || !(x > 0.0) || !((float)x > 0.0f) || !((float)x < INFINITY))
                    return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not a positive finite number (an fp32 scale)",
                                     what, v);
                sd->kv_scale = (float)x;
                kv_scale_given = true;
            }
            break;
        case 11: /* whether the model's shapes allow it is checked with the model (rc_tp_check) */
            RC_TRY(rc_parse_i64(what, v, 1, RC_TP_MAX, &sd->tp));
            break;
        case 12:
            if (rc_parse_tp_reduce(v, &sd->tp_reduce) != RC_OK)
                return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of fp32, ring, chain, seq", what, v);
            break;
        default: { /* batch (sampler) / micro-batch (trainer) */
            if ((ki == 5) == trainer)
                return rc_errorf(RC_ERR_USAGE, "%s: %s belongs to the %s", opt, key, trainer ? "sampler" : "trainer");
            RC_TRY(rc_parse_i64(what, v, 1, 1 << 20, &sd->batch));
            break;
        }
        }
    }
    if (kv_scale_given && sd->kv_quant == RC_KV_AUTO)
        return rc_errorf(RC_ERR_USAGE, "%s: kv-scale= scales an fp8 KV cache: give kv-cache=fp8_e4m3 or fp8_e5m2",
                         opt);
    if (lm_head == 1)
        sd->upcast |= RC_UPCAST_LM_HEAD;
    else if (lm_head == 0)
        sd->upcast &= ~RC_UPCAST_LM_HEAD;
    if (weights_dt >= 0 && (rc_dtype)weights_dt != sd->dt)
        return rc_errorf(RC_ERR_USAGE, "%s: weights=%s but dtype=%s (the weights are held in the dtype unless "
                         "weights=fp8)", opt, rc_dtype_str((rc_dtype)weights_dt), rc_dtype_str(sd->dt));
    if ((seen & (3u << 14)) && sd->wq.kind != RC_WQ_FP8) /* weight-scale=, act= */
        return rc_errorf(RC_ERR_USAGE, "%s: weight-scale= and act= need weights=fp8", opt);
    return RC_OK;
}

/* The two sides into a rollout configuration: each side's numerics, the
 * sampler's batch and prefill chunks, the trainer's micro-batch. */
void rc_side_apply(const rc_side *sm, const rc_side *tr, double temperature, rc_rollout_cfg *cfg)
{
    cfg->num.temperature = (float)temperature;
    cfg->num = rc_side_numerics(sm, &cfg->num, false);
    cfg->trainer = !rc_side_equal(sm, tr);
    cfg->num_trainer = rc_side_numerics(tr, &cfg->num, true);
    cfg->batch = sm->batch;
    cfg->forward_batch = tr->batch;
    cfg->prefill_chunk = sm->prefill_chunk;
    cfg->forward_chunk = tr->prefill_chunk;
}

/* What the engine cannot take whatever the model: a side's mode=autocast
 * with fp32 or with upcasts other than the LM head (who: "--sampler" ...). */
rc_status rc_side_check(const char *who, const rc_side *sd)
{
    /* the model-free checks of the engine's own (the model's at load) */
    const rc_numerics n = rc_side_numerics(sd, &(rc_numerics){.temperature = 1.0f}, false);
    rc_status st = sd->wq.kind == RC_WQ_FP8 ? rc_fp8w_supported(NULL, &n) : RC_OK;
    if (st == RC_OK)
        st = rc_autocast_supported(NULL, &n);
    return st == RC_OK ? RC_OK : rc_error_prefix(st, "%s", who);
}
