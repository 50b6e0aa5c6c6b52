/* One side of the check (--sampler / --trainer), from one table of its keys
 * (k_keys): the spec parser, its list of known keys, the printer, equality
 * and the engine numerics all read the table. A new key is one row (and its
 * field in rc_side, and its use in the engine). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8w.h"
#include "side.h"
#include "util.h"

/* the names of the enums only the sides name */
static const char *const k_wscale_names[] = {"tensor", "channel", "block"};            /* rc_wscale */
static const char *const k_act_names[] = {"dynamic-token", "dynamic-tensor", "none"}; /* rc_actquant */
static const char *const k_kv_names[] = {"auto", "fp8_e4m3", "fp8_e5m2"};            /* rc_kv_quant */
static const char *const k_mode_names[] = {"pure", "autocast"};                       /* rc_precision */
static const char *const k_lpdt_names[] = {"fp32", "same"};                           /* lp_same false / true */
static const char *const k_f32_names[] = {"dtype", "fp32"};                           /* residual_f32, lm-head */
static const char *const k_weights_names[] = {"dtype", "fp8", "as-stored"};           /* rc_wquant */
static const char *const k_routing_names[] = {"own", "replay"};                       /* route_replay */
static const char *const k_mla_names[] = {"expanded", "absorbed", "engine"};          /* mla_form */
static const char *const k_state_names[] = {"fp32", "dtype"};                         /* state_dtype */
static const char *const k_onoff_names[] = {"off", "on"};                             /* prefix_cache */

typedef enum {
    K_DTYPE,   /* rc_dtype: fp32 / fp16 / bf16 (base/dtype.c's names) */
    K_KERNELS, /* rc_kernels (backend.h's names) */
    K_REDUCE,  /* rc_tp_reduce (forward.h's names) */
    K_ENUM,    /* an enum field named by names[] */
    K_BOOL,    /* a bool field: names[0] false, names[1] true */
    K_I64,     /* int64_t in [lo, hi] */
    K_SCALE,   /* a positive finite fp32 value */
    K_UPCAST,  /* the RC_UPCAST_* set, ops joined with '+' */
    K_LM_HEAD, /* the RC_UPCAST_LM_HEAD bit of upcast, decided after the whole spec */
    K_WEIGHTS, /* rc_wquant: dtype (or the side's dtype's name) or fp8 */
} key_kind;

enum { S_SAMPLER = 1, S_TRAINER = 2, S_BOTH = 3 };
/* when the printer shows a key: always, when it is not its default, with the row before it */
typedef enum { P_NEVER, P_ALWAYS, P_NOT_DEFAULT, P_WITH_PREVIOUS } print_rule;
/* equality of two sides (equal sides share one engine) */
typedef enum {
    E_NONE,     /* not part of the engine (batch sizes, chunks) */
    E_FIELD,    /* the field */
    E_KV,       /* the field, when the KV cache is fp8 */
    E_WQ,       /* the field, when the weights are fp8 */
    E_TP,       /* never equal with TP on either side */
} eq_rule;

/* why a key is refused on a side (RC_ERR_UNSUPPORTED; R_OTHER_SIDE: a usage error) */
typedef enum { R_OTHER_SIDE, R_KV, R_WQ } refuse_why;

typedef struct {
    const char *name;
    key_kind kind;
    size_t off;                /* the field in rc_side */
    unsigned listed;           /* S_*: listed as known for these sides */
    unsigned allowed;          /* S_*: accepted for these sides; else refused with `refuse` */
    refuse_why refuse;
    bool refuse_after_value;   /* the value is checked before the side */
    const char *values;        /* what the error says it is not */
    const char *const *names;  /* K_ENUM / K_BOOL */
    int n_names;
    double lo, hi;             /* K_I64 */
    double def_sampler, def_trainer; /* the default value (rc_side_defaults) */
    print_rule print;
    eq_rule eq;
    size_t num_off;            /* the same field in rc_numerics, or NO_NUM (see side_numerics) */
    const char *alias;         /* K_ENUM: another name of alias_of (vLLM's kv-cache=fp8), or NULL */
    int alias_of;
} side_key;

#define NO_NUM ((size_t)-1)
#define F(field) offsetof(rc_side, field)
#define N(field) offsetof(rc_numerics, field)
#define NAMES(a) a, (int)(sizeof a / sizeof a[0])

/* in the printer's order (the spec strings stored in result files) */
static const side_key k_keys[] = {
    {"dtype", K_DTYPE, F(dt), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "one of fp32, fp16, bf16", NULL, 0, 0, 0, RC_BF16,
     RC_BF16, P_ALWAYS, E_FIELD, N(dt), NULL, 0},
    {"kernels", K_KERNELS, F(kernels), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "one of engine, invariant, blas", NULL, 0,
     0, 0,
     RC_KERNELS_ENGINE, RC_KERNELS_ENGINE, P_ALWAYS, E_FIELD, NO_NUM, NULL, 0},
    {"upcast", K_UPCAST, F(upcast), S_BOTH, S_BOTH, R_OTHER_SIDE, false,
     "a list of softmax, rope, norm, lm_head joined with '+', or all, or none", NULL, 0, 0, 0, 0, 0, P_ALWAYS,
     E_FIELD, N(upcast), NULL, 0},
    {"lm-head", K_LM_HEAD, F(upcast), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "fp32 or dtype", NAMES(k_f32_names), 0, 0,
     0, 0,
     P_NEVER, E_NONE, NO_NUM, NULL, 0},
    {"logprob-dtype", K_BOOL, F(lp_same), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "fp32 or same", NAMES(k_lpdt_names), 0,
     0, 0,
     0, P_ALWAYS, E_FIELD, NO_NUM, NULL, 0},
    {"batch", K_I64, F(batch), S_SAMPLER, S_SAMPLER, R_OTHER_SIDE, false, NULL, NULL, 0, 1, 1 << 20, 0, 0,
     P_NOT_DEFAULT,
     E_NONE, NO_NUM, NULL, 0},
    {"micro-batch", K_I64, F(batch), S_TRAINER, S_TRAINER, R_OTHER_SIDE, false, NULL, NULL, 0, 1, 1 << 20, 0, 0,
     P_NOT_DEFAULT, E_NONE, NO_NUM, NULL, 0},
    /* sampler: the prompts' prefill; trainer: the whole forward, through the cache */
    {"prefill-chunk", K_I64, F(prefill_chunk), S_BOTH, S_BOTH, R_OTHER_SIDE, false, NULL, NULL, 0, 1, 1 << 24, 0, 0,
     P_NOT_DEFAULT, E_NONE, NO_NUM, NULL, 0},
    {"mode", K_ENUM, F(mode), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "pure or autocast", NAMES(k_mode_names), 0, 0,
     RC_PREC_PURE, RC_PREC_PURE, P_NOT_DEFAULT, E_FIELD, N(mode), NULL, 0},
    /* Megatron's --fp32-residual-connection */
    {"residual", K_BOOL, F(residual_f32), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "fp32 or dtype", NAMES(k_f32_names), 0,
     0, 0,
     0, P_NOT_DEFAULT, E_FIELD, N(residual_f32), NULL, 0},
    /* a trainer (FSDP, Megatron) attends over the keys and values it computed, in the model's dtype (even
     * chunked, prefill-chunk=): vLLM's fp8 KV cache is the sampler's */
    {"kv-cache", K_ENUM, F(kv_quant), S_SAMPLER, S_SAMPLER, R_KV, false,
     "auto, fp8_e4m3 (or fp8) or fp8_e5m2", NAMES(k_kv_names), 0, 0, RC_KV_AUTO, RC_KV_AUTO, P_NOT_DEFAULT,
     E_FIELD, N(kv_quant), "fp8", RC_KV_FP8_E4M3},
    {"kv-scale", K_SCALE, F(kv_scale), S_SAMPLER, S_SAMPLER, R_KV, false,
     "a positive finite number (an fp32 scale)", NULL, 0, 0, 0, 1.0, 1.0, P_WITH_PREVIOUS, E_KV, N(kv_scale), NULL, 0},
    /* whether the model's shapes allow it is checked with the model (rc_tp_check) */
    {"tp", K_I64, F(tp), S_BOTH, S_BOTH, R_OTHER_SIDE, false, NULL, NULL, 0, 1, RC_TP_MAX, 1, 1, P_NOT_DEFAULT, E_TP,
     NO_NUM, NULL, 0},
    {"tp-reduce", K_REDUCE, F(tp_reduce), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "one of fp32, ring, chain, seq", NULL,
     0, 0,
     0, RC_TP_REDUCE_FP32, RC_TP_REDUCE_RING, P_WITH_PREVIOUS, E_NONE, N(tp_reduce), NULL, 0},
    /* weights=dtype (or the dtype's name) | fp8 (fp8_e4m3); FSDP / Megatron trainers compute with the bf16 (or
     * fp32) masters: fp8 weights are the rollout engine's */
    {"weights", K_WEIGHTS, F(wq.kind), S_SAMPLER, S_BOTH, R_OTHER_SIDE, false, "dtype, bf16, fp16, fp32, fp8 or as-stored",
     NAMES(k_weights_names), 0, 0, RC_WQ_NONE, RC_WQ_NONE, P_NOT_DEFAULT, E_FIELD, N(wq.kind), NULL, 0},
    {"weight-scale", K_ENUM, F(wq.scale), S_SAMPLER, S_SAMPLER, R_WQ, true, NULL, NAMES(k_wscale_names), 0,
     0, RC_WSCALE_TENSOR, RC_WSCALE_TENSOR, P_WITH_PREVIOUS, E_WQ, N(wq.scale), NULL, 0},
    {"act", K_ENUM, F(wq.act), S_SAMPLER, S_SAMPLER, R_WQ, true, NULL, NAMES(k_act_names), 0, 0,
     RC_ACTQ_TOKEN, RC_ACTQ_TOKEN, P_WITH_PREVIOUS, E_WQ, N(wq.act), NULL, 0},
    /* MoE: the router's logits and weights in fp32 (prime-rl's moe_router_dtype, Megatron's --moe-router-dtype)
     * or in the dtype (transformers, vLLM) */
    {"router", K_BOOL, F(router_f32), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "fp32 or dtype", NAMES(k_f32_names), 0, 0,
     0, 0, P_NOT_DEFAULT, E_FIELD, N(router_f32), NULL, 0},
    /* R3 (rollout routing replay): the trainer takes the sampler's experts and recomputes their weights */
    {"routing", K_BOOL, F(route_replay), S_TRAINER, S_TRAINER, R_OTHER_SIDE, false, "own or replay",
     NAMES(k_routing_names), 0, 0, 0, 0, P_NOT_DEFAULT, E_FIELD, N(route_replay), NULL, 0},
    /* latent attention (DeepSeek-V3): the sampler decodes from the latent cache with absorbed weights as vLLM /
     * SGLang do (engine: prefills expanded, decode steps absorbed; absorbed: every row), the trainer expands K
     * and V as transformers does (docs/mla.md). Not part of the sides' equality: a model without latent attention ignores it, and one with it gets the trainer its own engine
     * when the forms differ (rollout.c) */
    {"mla", K_ENUM, F(mla_form), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "expanded, absorbed or engine",
     NAMES(k_mla_names), 0, 0, 2, 0, P_NOT_DEFAULT, E_NONE, NO_NUM, NULL, 0},
    /* hybrid linear attention (docs/linear-attention-cache.md): the recurrent state's precision (vLLM's
     * mamba_ssm_cache_dtype), the chunked form's chunk (transformers' and FLA's 64), and the sampler's prefix
     * cache (SGLang: a prompt's state restored from a stored copy in the dtype) */
    {"state", K_BOOL, F(state_dtype), S_BOTH, S_BOTH, R_OTHER_SIDE, false, "fp32 or dtype", NAMES(k_state_names), 0,
     0, 0, 0, P_NOT_DEFAULT, E_FIELD, N(state_dtype), NULL, 0},
    {"chunk", K_I64, F(gdn_chunk), S_BOTH, S_BOTH, R_OTHER_SIDE, false, NULL, NULL, 0, 1, 1 << 16,
     RC_GDN_CHUNK_DEFAULT, RC_GDN_CHUNK_DEFAULT, P_NOT_DEFAULT, E_FIELD, N(gdn_chunk), NULL, 0},
    {"prefix-cache", K_BOOL, F(prefix_cache), S_SAMPLER, S_SAMPLER, R_OTHER_SIDE, false, "on or off",
     NAMES(k_onoff_names), 0, 0, 0, 0, P_NOT_DEFAULT, E_FIELD, N(prefix_cache), NULL, 0},
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])
#undef F
#undef N

static int *ifield(rc_side *sd, const side_key *k) { return (int *)(void *)((char *)sd + k->off); }
static int iget(const rc_side *sd,
     const side_key *k) { return *(const int *)(const void *)((const char *)sd + k->off); }
static bool *bfield(rc_side *sd, const side_key *k) { return (bool *)(void *)((char *)sd + k->off); }
static int64_t *lfield(rc_side *sd, const side_key *k) { return (int64_t *)(void *)((char *)sd + k->off); }
static float *ffield(rc_side *sd, const side_key *k) { return (float *)(void *)((char *)sd + k->off); }
static const side_key *find_key(const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(k_keys[i].name, name))
            return &k_keys[i];
    return NULL;
}

/* the value of k in sd as the spec writes it (buf: numbers) */
static const char *value_str(const side_key *k, const rc_side *sd, char *buf, size_t n)
{
    rc_side *s = (rc_side *)(uintptr_t)sd; /* read only */
    switch (k->kind) {
    case K_DTYPE: return rc_dtype_str((rc_dtype)iget(sd, k));
    case K_KERNELS: return rc_kernels_name((rc_kernels)iget(sd, k));
    case K_REDUCE: return rc_tp_reduce_name((rc_tp_reduce)iget(sd, k));
    case K_ENUM:
    case K_WEIGHTS: {
        const int v = iget(sd, k);
        return v >= 0 && v < k->n_names ? k->names[v] : "?";
    }
    case K_BOOL: return k->names[*bfield(s, k) ? 1 : 0];
    case K_LM_HEAD: return k->names[(sd->upcast & RC_UPCAST_LM_HEAD) ? 1 : 0];
    case K_I64: snprintf(buf, n, "%lld", (long long)*lfield(s, k)); return buf;
    case K_SCALE: snprintf(buf, n, "%.9g", (double)*ffield(s, k)); return buf;
    case K_UPCAST:
        rc_upcast_str(sd->upcast, buf, n);
        for (char *c = buf; *c; c++)
            *c = *c == ',' ? '+' : *c;
        return buf;
    }
    return "?";
}

static bool is_default(const side_key *k, const rc_side *sd, bool trainer)
{
    rc_side *s = (rc_side *)(uintptr_t)sd;
    const double def = trainer ? k->def_trainer : k->def_sampler;
    switch (k->kind) {
    case K_BOOL: return *bfield(s, k) == (def != 0);
    case K_I64: return *lfield(s, k) == (int64_t)def;
    case K_SCALE: return *ffield(s, k) == (float)def;
    case K_UPCAST:
    case K_LM_HEAD: return sd->upcast == (unsigned)def;
    default: return iget(sd, k) == (int)def;
    }
}

void rc_side_defaults(bool trainer, rc_side *sd)
{
    memset(sd, 0, sizeof *sd);
    for (size_t i = 0; i < N_KEYS; i++) {
        const side_key *k = &k_keys[i];
        const double def = trainer ? k->def_trainer : k->def_sampler;
        switch (k->kind) {
        case K_BOOL: *bfield(sd, k) = def != 0; break;
        case K_I64: *lfield(sd, k) = (int64_t)def; break;
        case K_SCALE: *ffield(sd, k) = (float)def; break;
        case K_UPCAST: sd->upcast = (unsigned)def; break;
        case K_LM_HEAD: break;
        default: *ifield(sd, k) = (int)def; break;
        }
    }
}

/* what a spec's keys decide after all of them were read */
typedef struct {
    int lm_head;    /* -1 not given, 0 dtype, 1 fp32 */
    int weights_dt; /* weights=bf16|fp16|fp32: must be the side's dtype; -1 not given */
    bool kv_scale_given, wq_keys;
} spec_state;

static rc_status refuse(const side_key *k, const char *opt, bool trainer)
{
    switch (k->refuse) {
    case R_KV:
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s= is the sampler's (a trainer keeps its keys and values in the "
                         "model's dtype; --sampler kv-cache=fp8_e4m3)", opt, k->name);
    case R_WQ: return rc_errorf(RC_ERR_UNSUPPORTED, "%s: %s= belongs to weights=fp8, the sampler's", opt, k->name);
    case R_OTHER_SIDE: break;
    }
    return rc_errorf(RC_ERR_USAGE, "%s: %s belongs to the %s", opt, k->name, trainer ? "sampler" : "trainer");
}

/* one KEY=VALUE of a spec into sd; what: "OPT KEY" for the errors */
static rc_status parse_value(const side_key *k, const char *opt, const char *what, const char *v, bool trainer,
                             rc_side *sd, spec_state *ps)
{
    const unsigned me = trainer ? S_TRAINER : S_SAMPLER;
    const bool refused = !(k->allowed & me);
    if (refused && !k->refuse_after_value)
        return refuse(k, opt, trainer);
    int found = -1;
    switch (k->kind) {
    case K_DTYPE:
        if ((found = rc_dtype_from_str(v)) < 0)
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not %s", what, v, k->values);
        *ifield(sd, k) = found;
        break;
    case K_KERNELS:
        for (int i = 0; i <= (int)RC_KERNELS_BLAS; i++)
            if (!strcmp(v, rc_kernels_name((rc_kernels)i)))
                found = i;
        if (found < 0)
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not %s", what, v, k->values);
        *ifield(sd, k) = found;
        break;
    case K_REDUCE: {
        rc_tp_reduce r;
        if (rc_parse_tp_reduce(v, &r) != RC_OK)
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not %s", what, v, k->values);
        *ifield(sd, k) = (int)r;
        break;
    }
    case K_ENUM:
    case K_BOOL:
    case K_LM_HEAD:
        for (int i = 0; i < k->n_names; i++)
            if (!strcmp(v, k->names[i]))
                found = i;
        if (k->alias && !strcmp(v, k->alias))
            found = k->alias_of;
        if (found < 0 && k->values)
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not %s", what, v, k->values);
        if (found < 0)
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not one of %s, %s, %s", what, v, k->names[0], k->names[1],
                             k->names[2]);
        if (k->off == offsetof(rc_side, router_f32)) /* router=dtype, given: not the family's default */
            sd->router_dtype = found == 0;
        if (k->kind == K_BOOL)
            *bfield(sd, k) = found == 1;
        else if (k->kind == K_LM_HEAD)
            ps->lm_head = found;
        else
            *ifield(sd, k) = found;
        break;
    case K_WEIGHTS: {
        rc_dtype wd;
        if (!strcmp(v, "fp8") || !strcmp(v, "fp8_e4m3")) {
            /* Transformer Engine's fp8 training recipes are another scheme */
            if (trainer)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: weights=fp8 is the sampler's (an fp8 rollout engine); "
                                 "the trainer's fp8 training (Transformer Engine recipes) is not emulated", opt);
            *ifield(sd, k) = RC_WQ_FP8;
        } else if (!strcmp(v, "as-stored")) { /* an FP8 block checkpoint's own weights: the rollout engine's */
            if (trainer)
                return rc_errorf(RC_ERR_UNSUPPORTED, "%s: weights=as-stored is the sampler's (vLLM / SGLang serving "
                                 "the FP8 checkpoint); the trainer computes with the dequantized weights", opt);
            *ifield(sd, k) = RC_WQ_STORED;
        } else if (!strcmp(v, "dtype")) {
            *ifield(sd, k) = RC_WQ_NONE;
        } else if (rc_dtype_parse_cli(v, &wd) == RC_OK) {
            *ifield(sd, k) = RC_WQ_NONE;
            ps->weights_dt = (int)wd;
        } else {
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not %s", what, v, k->values);
        }
        break;
    }
    case K_I64:
        RC_TRY(rc_parse_i64(what, v, (int64_t)k->lo, (int64_t)k->hi, lfield(sd, k)));
        break;
    case K_SCALE: {
        char *end;
        errno = 0;
        const double x = strtod(v, &end);
        if (*end || end == v || errno || !(x > 0.0) || !((float)x > 0.0f) || !((float)x < INFINITY))
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not %s", what, v, k->values);
        *ffield(sd, k) = (float)x;
        ps->kv_scale_given = true;
        break;
    }
    case K_UPCAST: { /* ops joined with '+': "softmax+rope" */
        char list[128];
        if (strlen(v) >= sizeof list)
            return rc_errorf(RC_ERR_USAGE, "%s: too long", what);
        snprintf(list, sizeof list, "%s", v);
        for (char *c = list; *c; c++) /* no ',' gets here: the spec was split at them */
            *c = *c == '+' ? ',' : *c;
        unsigned up;
        if (rc_parse_upcast(list, &up) != RC_OK)
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not %s", what, v, k->values);
        sd->upcast = up; /* the whole set; lm-head= (in any order) decides the head */
        break;
    }
    }
    if (refused) /* refuse_after_value */
        return refuse(k, opt, trainer);
    ps->wq_keys |= k->eq == E_WQ;
    return RC_OK;
}

rc_status rc_side_parse(const char *opt, const char *spec, bool trainer, rc_side *sd)
{
    if (!*spec)
        return rc_errorf(RC_ERR_USAGE, "%s: empty; expected KEY=VALUE[,...]", opt);
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return rc_errorf(RC_ERR_USAGE, "%s: longer than %zu bytes", opt, sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    bool seen[N_KEYS] = {0};
    spec_state ps = {-1, -1, false, false};
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1])
            return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not KEY=VALUE", opt, item);
        *eq = '\0';
        const char *key = item, *v = eq + 1;
        const side_key *k = find_key(key);
        if (!k) { /* the known keys: both sides' first, then this side's own */
            char known[512];
            size_t n = 0;
            for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < N_KEYS; i++) {
                    const unsigned l = k_keys[i].listed;
                    if (pass == 0 ? l == S_BOTH : l == (trainer ? S_TRAINER : S_SAMPLER))
                        n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", k_keys[i].name);
                }
            return rc_errorf(RC_ERR_USAGE, "%s: unknown key '%s' (known: %s)", opt, key, known);
        }
        if (seen[k - k_keys])
            return rc_errorf(RC_ERR_USAGE, "%s: %s is given twice", opt, key);
        seen[k - k_keys] = true;
        char what[600];
        snprintf(what, sizeof what, "%s %s", opt, key);
        RC_TRY(parse_value(k, opt, what, v, trainer, sd, &ps));
    }
    if (ps.kv_scale_given && sd->kv_quant == RC_KV_AUTO)
        return rc_errorf(RC_ERR_USAGE, "%s: kv-scale= scales an fp8 KV cache: give kv-cache=fp8_e4m3 or fp8_e5m2",
                         opt);
    if (ps.lm_head == 1)
        sd->upcast |= RC_UPCAST_LM_HEAD;
    else if (ps.lm_head == 0)
        sd->upcast &= ~RC_UPCAST_LM_HEAD;
    if (ps.weights_dt >= 0 && (rc_dtype)ps.weights_dt != sd->dt)
        return rc_errorf(RC_ERR_USAGE, "%s: weights=%s but dtype=%s (the weights are held in the dtype unless "
                         "weights=fp8)", opt, rc_dtype_str((rc_dtype)ps.weights_dt), rc_dtype_str(sd->dt));
    if (ps.wq_keys && sd->wq.kind != RC_WQ_FP8) /* weight-scale=, act= */
        return rc_errorf(RC_ERR_USAGE, "%s: weight-scale= and act= need weights=fp8", opt);
    return RC_OK;
}

rc_status rc_side_set(const char *opt, const char *key, const char *value, bool trainer, rc_side *sd)
{
    char spec[256];
    const side_key *k = find_key(key);
    if (!k)
        return rc_errorf(RC_ERR_INTERNAL, "no side key '%s'", key);
    if (snprintf(spec, sizeof spec, "%s=%s", key, value) >= (int)sizeof spec)
        return rc_errorf(RC_ERR_USAGE, "%s: '%s' is too long", opt, value);
    return rc_side_parse(opt, spec, trainer, sd);
}

rc_status rc_side_parse_kernels(const char *opt, const char *v, rc_kernels *out)
{
    rc_side sd;
    spec_state ps = {-1, -1, false, false};
    rc_side_defaults(false, &sd);
    RC_TRY(parse_value(find_key("kernels"), opt, opt, v, false, &sd, &ps));
    *out = sd.kernels;
    return RC_OK;
}

rc_status rc_side_parse_lpdt(const char *opt, const char *v, bool *same)
{
    rc_side sd;
    spec_state ps = {-1, -1, false, false};
    rc_side_defaults(false, &sd);
    RC_TRY(parse_value(find_key("logprob-dtype"), opt, opt, v, false, &sd, &ps));
    *same = sd.lp_same;
    return RC_OK;
}

void rc_side_str(const rc_side *sd, bool trainer, char *buf, size_t n)
{
    size_t k = 0;
    bool shown = false;
    buf[0] = '\0';
    for (size_t i = 0; i < N_KEYS && k < n; i++) {
        const side_key *key = &k_keys[i];
        const bool mine = key->allowed & (trainer ? S_TRAINER : S_SAMPLER);
        switch (key->print) {
        case P_NEVER: shown = false; continue;
        case P_ALWAYS: shown = true; break;
        case P_NOT_DEFAULT: shown = mine && !is_default(key, sd, trainer); break;
        case P_WITH_PREVIOUS: /* as the row before; weights=as-stored has its checkpoint's scales */
            shown = shown && !(key->eq == E_WQ && sd->wq.kind == RC_WQ_STORED);
            break;
        }
        if (!shown)
            continue;
        char v[64];
        const int w = snprintf(buf + k, n - k, "%s%s=%s", k ? "," : "", key->name, value_str(key, sd, v, sizeof v));
        if (w < 0)
            break;
        k += (size_t)w;
    }
}

void rc_side_key_str(const char *key, const rc_side *sd, char *buf, size_t n)
{
    const side_key *k = find_key(key);
    char v[64];
    snprintf(buf, n, "%s=%s", key, k ? value_str(k, sd, v, sizeof v) : "?");
}

/* Equal sides share one engine. With TP on either side they never do: the
 * sampler's bias goes into rank 0's partial, the trainer's after the reduce. */
bool rc_side_equal(const rc_side *a, const rc_side *b)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const side_key *k = &k_keys[i];
        const void *fa = (const char *)a + k->off, *fb = (const char *)b + k->off;
        const size_t sz = k->kind == K_BOOL ? sizeof(bool) : k->kind == K_I64 ? sizeof(int64_t)
                        : k->kind == K_SCALE ? sizeof(float) : sizeof(int);
        switch (k->eq) {
        case E_NONE: break;
        case E_TP:
            if (a->tp > 1 || b->tp > 1)
                return false;
            break;
        case E_KV:
            if (a->kv_quant != RC_KV_AUTO && memcmp(fa, fb, sz))
                return false;
            break;
        case E_WQ:
            if (a->wq.kind != RC_WQ_NONE && memcmp(fa, fb, sz))
                return false;
            break;
        case E_FIELD:
            if (k->kind == K_UPCAST ? a->upcast != b->upcast : memcmp(fa, fb, sz) != 0)
                return false;
            break;
        }
    }
    return a->router_dtype == b->router_dtype; /* router=dtype given (the field beside router_f32) */
}

/* the engine numerics of a side: each key's field into its numerics field,
 * then the two that are not one field: the log-softmax's dtype and tp */
rc_numerics rc_side_numerics(const rc_side *sd, const rc_numerics *base, bool trainer)
{
    rc_numerics n = *base;
    for (size_t i = 0; i < N_KEYS; i++) {
        const side_key *k = &k_keys[i];
        if (k->num_off == NO_NUM)
            continue;
        const size_t sz = k->kind == K_BOOL ? sizeof(bool) : k->kind == K_SCALE ? sizeof(float)
                        : k->kind == K_UPCAST ? sizeof(unsigned) : k->kind == K_I64 ? sizeof(int64_t) : sizeof(int);
        memcpy((char *)&n + k->num_off, (const char *)sd + k->off, sz);
    }
    n.logprob_dt = sd->lp_same ? sd->dt : RC_F32;
    n.router_dtype = sd->router_dtype && !sd->router_f32;
    n.mla_absorbed = sd->mla_form != 0; /* absorbed, or engine: the latent cache and absorbed decode */
    n.mla_prefill_expanded = sd->mla_form == 2;
    n.tp = (int)sd->tp;
    n.tp_trainer = trainer;
    return n;
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
    rc_status st = sd->wq.kind != RC_WQ_NONE ? rc_fp8w_supported(NULL, &n) : RC_OK;
    if (st == RC_OK)
        st = rc_autocast_supported(NULL, &n);
    return st == RC_OK ? RC_OK : rc_error_prefix(st, "%s", who);
}
