/* ratiocheck inspect: a model folder described, with a memory and speed estimate. */
#include "cli.h"

static const char *act_name(rc_act a)
{
    switch (a) {
    case RC_ACT_GELU_ERF: return "gelu (erf)";
    case RC_ACT_GELU_TANH: return "gelu (tanh)";
    case RC_ACT_GELU_NEW: return "gelu_new";
    case RC_ACT_GELU_BLOOM: return "gelu (BLOOM's tanh)";
    case RC_ACT_SILU: return "silu";
    }
    return "?";
}

static const char *rope_name(rc_rope_type t)
{
    switch (t) {
    case RC_ROPE_DEFAULT: return "default";
    case RC_ROPE_LINEAR: return "linear";
    case RC_ROPE_LLAMA3: return "llama3";
    case RC_ROPE_YARN: return "yarn";
    case RC_ROPE_LONGROPE: return "longrope";
    }
    return "?";
}

/* ---- inspect -------------------------------------------------------------- */

typedef struct {
    const char *model, *dtype, *weights; /* weights: NULL, dtype, fp8 or as-stored (the sampler's) */
    int64_t batch, seqs, tokens, layers;
    int64_t gpus, layer_split[RC_MAX_DEVICES]; /* --gpus (0: one), --layer-split (n_split counts) */
    int n_split;
    bool json, help, no_speed;
} inspect_opts;

static rc_status op_inspect_split(const opt_spec *o, const char *v, void *dst)
{
    inspect_opts *io = dst;
    (void)o;
    return parse_layer_split(v, io->layer_split, &io->n_split);
}

static const opt_spec k_inspect_opts[] = {
    {"model", 'm', "DIR", "Hugging Face model folder (required)", NULL, op_path, offsetof(inspect_opts, model), 0, 0, 0, 0, 0},
    {"layers", 0, "N", "describe and size the first N decoder layers only, as\nrun --layers N loads them (default all)",
     NULL, op_i64, offsetof(inspect_opts, layers), 1, 4096, 0, 0, 0},
    {"dtype", 0, "fp32|fp16|bf16", "the run's dtype, for the memory estimate (default bf16)", "Memory estimate:",
     op_path, offsetof(inspect_opts, dtype), 0, 0, 0, 0, 0},
    {"batch", 0, "N", "sequences decoded together (default 32, as run)", NULL, op_i64, offsetof(inspect_opts, batch),
     1, 1 << 20, 0, 0, 0},
    {"seqs", 0, "N", "sequences re-scored in one forward (run's --forward-batch,\nby default all of them; default 64)",
     NULL, op_i64, offsetof(inspect_opts, seqs), 1, 1 << 20, 0, 0, 0},
    {"tokens", 0, "N", "prompt + generated tokens per sequence (default 256)", NULL, op_i64,
     offsetof(inspect_opts, tokens), 1, RC_LIM_POS, 0, 0, 0},
    {"weights", 0, "dtype|fp8|as-stored", "the sampler's linear weights, as --sampler weights=:\nfp8 quantized "
     "(per-tensor scales; fp8,weight-scale=S,act=A as\n--sampler's, act=none: W8A16) or an FP8 checkpoint's\nas "
     "stored; their copies are counted (default dtype)", NULL, op_path,
     offsetof(inspect_opts, weights), 0, 0, 0, 0, 0},
    {"gpus", 0, "N", "the GPU memory of a run with --gpus N: each GPU's share\nof the layer split (default 1)", NULL,
     op_i64, offsetof(inspect_opts, gpus), 1, RC_MAX_DEVICES, 0, 0, 0},
    {"layer-split", 0, "LIST", "layers per GPU, as run --layer-split (default: even by\nweight bytes)", NULL,
     op_inspect_split, 0, 0, 0, 0, 0, 0},
    {"no-speed", 0, NULL, "skip the speed estimate (it times GEMMs for about a second)", NULL, op_flag,
     offsetof(inspect_opts, no_speed), 0, 0, 0, 0, 0},
    {"json", 0, NULL, "print one JSON object", "Output:", op_flag, offsetof(inspect_opts, json), 0, 0, 0, 0, 0},
    OPT_HELP(inspect_opts),
};


/* This machine's GEMM rate (GFLOP/s) at M rows, K = hidden, N = min(inner,
 * 2048): the median of a few calls of the CPU backend's engine kernels after
 * one warm-up; 0 when a call fails. */
static double gemm_rate(rc_backend *be, int64_t M, int64_t K, int64_t N, const float *x, rc_wt W, float *y)
{
    double t[5];
    int n = 0;
    if (be->ops->matmul(be, x, M, K, W, N, NULL, RC_F32, RC_F32, y) != RC_OK)
        return 0.0;
    const double t_end = mono_now() + 0.4;
    for (; n < 5 && (n < 2 || mono_now() < t_end); n++) {
        double t0 = mono_now();
        if (be->ops->matmul(be, x, M, K, W, N, NULL, RC_F32, RC_F32, y) != RC_OK)
            return 0.0;
        t[n] = mono_now() - t0;
    }
    for (int i = 1; i < n; i++) /* sort */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double v = t[j];
            t[j] = t[j - 1];
            t[j - 1] = v;
        }
    return 2.0 * (double)M * (double)K * (double)N / (t[n / 2] > 1e-9 ? t[n / 2] : 1e-9) / 1e9;
}

/* The speed estimate of inspect: GEMM FLOPs per token of the model (every
 * layer's projections and the LM head) over the GEMM rate measured now at
 * the decode batch and at a re-score-sized M. GEMMs only: attention,
 * norms, activations and sampling come on top (measured: about half of the
 * bundled model's check, a third of a SmolLM2-135M-shaped generation). */
typedef struct {
    double gflop_per_token, gflops_decode, gflops_forward, s_per_1k_decode, s_per_1k_forward;
    int64_t m_decode, m_forward;
} speed_estimate;

static rc_status estimate_speed(const rc_config *k, int64_t batch, rc_dtype dt, speed_estimate *se)
{
    const int64_t H = k->hidden, I = k->intermediate;
    double layers = 0.0; /* every layer's GEMM FLOPs per token (MoE: the experts a token runs) */
    for (int64_t l = 0; l < k->n_layers; l++) {
        int64_t we;
        double f;
        rc_layer_cost(k, l, &we, &f);
        layers += f;
    }
    se->gflop_per_token = (layers + 2.0 * (double)k->vocab * (double)H) / 1e9;
    const int64_t N = I < 2048 ? I : 2048, Mf = 288;
    se->m_decode = batch < 256 ? batch : 256;
    se->m_forward = Mf;
    rc_backend *be = NULL;
    float *x = NULL, *y = NULL;
    void *W = NULL, *W16 = NULL;
    rc_status s = rc_backend_cpu_create(0, RC_KERNELS_ENGINE, &be);
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&x, Mf * H, sizeof(float), "speed estimate");
    if (s == RC_OK)
        s = rc_alloc_aligned(&W, N * H, sizeof(float), "speed estimate");
    if (s == RC_OK)
        s = rc_alloc_aligned((void **)&y, Mf * N, sizeof(float), "speed estimate");
    if (s == RC_OK) {
        for (int64_t i = 0; i < Mf * H; i++)
            x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
        for (int64_t i = 0; i < N * H; i++)
            ((float *)W)[i] = (float)((i * 104729) % 2001 - 1000) * 1e-5f;
        /* the weights as a run of dtype dt holds them: 2 bytes for bf16 / fp16 */
        rc_wt w = rc_wt_f32(W);
        if (dt != RC_F32 && (s = rc_alloc_aligned(&W16, N * H, 2, "speed estimate")) == RC_OK) {
            rc_wt_convert(w, 0, N * H, dt, dt, W16);
            w = (rc_wt){W16, dt, false};
        }
        se->gflops_decode = s == RC_OK ? gemm_rate(be, se->m_decode, H, N, x, w, y) : 0.0;
        se->gflops_forward = s == RC_OK ? gemm_rate(be, Mf, H, N, x, w, y) : 0.0;
        if (s == RC_OK && !(se->gflops_decode > 0.0 && se->gflops_forward > 0.0))
            s = rc_errorf(RC_ERR_INTERNAL, "inspect: timing the GEMMs failed: %s", rc_last_error());
        se->s_per_1k_decode = 1000.0 * se->gflop_per_token / se->gflops_decode;
        se->s_per_1k_forward = 1000.0 * se->gflop_per_token / se->gflops_forward;
    }
    free(x);
    free(W);
    free(W16);
    free(y);
    if (be)
        rc_backend_destroy(be);
    return s;
}


/* --weights: the sampler's fp8 weights in num (weights=fp8: its default per-tensor scales and per-token
 * activations; as-stored: an FP8 checkpoint's block codes and scales), checked as a run checks them */
static rc_status inspect_weights(const rc_model *m, const char *v, rc_numerics *num)
{
    if (!v || !strcmp(v, "dtype"))
        return RC_OK;
    if (!strncmp(v, "fp8", 3) && (v[3] == '\0' || v[3] == ',')) {
        num->wq = (rc_wq_numerics){RC_WQ_FP8, RC_WSCALE_TENSOR, RC_ACTQ_TOKEN};
        /* fp8,weight-scale=S,act=A: --sampler's keys (tensor | channel | block; dynamic-token | dynamic-tensor |
         * none, W8A16) */
        static const char *const scales[] = {"tensor", "channel", "block"}; /* rc_wscale */
        static const char *const acts[] = {"dynamic-token", "dynamic-tensor", "none"}; /* rc_actquant */
        for (const char *p = v + 3; *p == ',';) {
            const char *key = p + 1, *end = strchr(key, ',');
            const size_t n = end ? (size_t)(end - key) : strlen(key);
            bool ok = false;
            for (int i = 0; i < 3 && !ok; i++) {
                char a[64], b[64];
                snprintf(a, sizeof a, "weight-scale=%s", scales[i]);
                snprintf(b, sizeof b, "act=%s", acts[i]);
                if (strlen(a) == n && !strncmp(key, a, n))
                    num->wq.scale = (rc_wscale)i, ok = true;
                else if (strlen(b) == n && !strncmp(key, b, n))
                    num->wq.act = (rc_actquant)i, ok = true;
            }
            if (!ok)
                return rc_errorf(RC_ERR_USAGE, "--weights %s: after fp8, weight-scale=tensor|channel|block and "
                                 "act=dynamic-token|dynamic-tensor|none (as --sampler's)", v);
            p = key + n;
        }
    } else if (!strcmp(v, "as-stored"))
        num->wq = (rc_wq_numerics){RC_WQ_STORED, RC_WSCALE_BLOCK, RC_ACTQ_TOKEN};
    else
        return rc_errorf(RC_ERR_USAGE, "--weights %s: dtype, fp8 or as-stored (fp8,weight-scale=S,act=A: "
                         "--sampler's keys)", v);
    if (num->wq.kind == RC_WQ_STORED && strcmp(m->quant_method, "fp8") != 0)
        return rc_errorf(RC_ERR_USAGE, "--weights as-stored: %s is not an FP8 checkpoint (its config.json has no "
                         "quantization_config with quant_method fp8)", m->dir);
    return rc_fp8w_supported(&m->cfg, num);
}

int cmd_inspect(int argc, char **argv, const char *cmdline)
{
    inspect_opts io = {.dtype = "bf16", .batch = 32, .seqs = 64, .tokens = 256};
    int code = parse_opts(argc, argv, k_inspect_opts, sizeof k_inspect_opts / sizeof k_inspect_opts[0], &io,
                          offsetof(inspect_opts, help),
                          "Usage: ratiocheck inspect --model DIR [--json] [--dtype D --batch N --seqs N --tokens N]\n\n"
                          "The model's architecture as ratiocheck reads it, the memory a run\nwith these sizes "
                          "allocates and an estimate of its speed on this machine.\nReads config.json and the "
                          "safetensors headers, never the weights.\n\n");
    if (code >= 0)
        return code;
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (!io.model)
        return usage_error("%s: --model DIR is required", "inspect");
    const char *model = io.model;
    const int json = io.json;
    rc_model *m;
    rc_status st = io.layers > 0 ? rc_model_load_layers(model, io.layers, true, &m) : rc_model_load_headers(model, &m);
    if (st != RC_OK)
        return fail(st);
    const rc_config *k = &m->cfg;
    char pc[32];
    rc_numerics num = rc_numerics_fp32();
    if (k->mla) /* the sampler's default form, mla=engine: both caches and both forms' scratch, on each GPU those
                 * of its layers; the trainer's expanded engine, which replaces it, holds less (docs/mla.md) */
        num.mla_absorbed = num.mla_prefill_expanded = true;
    rc_engine_mem em;
    st = rc_dtype_parse_cli(io.dtype, &num.dt);
    if (st == RC_OK)
        st = inspect_weights(m, io.weights, &num);
    if (st == RC_OK) /* as a run in this dtype holds the model's load-time copies */
        st = rc_model_narrow(m, num.dt);
    if (st != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    speed_estimate se = {0};
    if (!io.no_speed && (st = estimate_speed(k, io.batch, num.dt, &se)) != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    /* what a run holds: the model's weights it reads in place from the mapped
     * files and the model's arena (layout fixes), then the engine the run
     * creates (rollout.c: max(batch, seqs) slots, tokens positions, rows for
     * the larger of the decode prefill and the forward batch) */
    const int64_t slots = io.batch > io.seqs ? io.batch : io.seqs;
    int64_t rows;
    if (!rc_mul_i64(slots, io.tokens, &rows))
        rows = INT64_MAX;
    st = rc_engine_mem_estimate(m, &num, true, RC_KERNELS_ENGINE, slots, io.tokens, rows, &em);
    if (st != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    /* the same run with --backend cuda: everything the engine holds is in one GPU's memory (the model's
     * weights copied at the dtype's width, the KV cache, the activations), and the backend's workspaces,
     * cuBLAS's included (docs/gpu.md) */
    rc_engine_mem dm;
    st = rc_engine_mem_estimate(m, &num, false, RC_KERNELS_ENGINE, slots, io.tokens, rows, &dm);
    /* --gpus N: each GPU's share of the layer split (forward.c rc_layer_split) */
    int64_t l0[RC_MAX_DEVICES + 1], gb[RC_MAX_DEVICES], gw[RC_MAX_DEVICES], gk[RC_MAX_DEVICES];
    if (st == RC_OK)
        st = check_gpus(&io.gpus, io.n_split);
    const int n_gpus = io.gpus > 1 ? (int)io.gpus : 1;
    if (st == RC_OK)
        st = rc_layer_split(m, &num, RC_KERNELS_ENGINE, n_gpus, io.n_split > 0 ? io.layer_split : NULL, slots,
                            io.tokens, rows, l0, gb, gw, gk);
    if (st != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    int64_t per_gpu = 0; /* the fullest GPU */
    for (int d = 0; d < n_gpus; d++)
        per_gpu = gb[d] > per_gpu ? gb[d] : per_gpu;
    int64_t gws[RC_MAX_DEVICES][RC_CUWS_N], gwt[RC_MAX_DEVICES]; /* each GPU's workspaces (in gb) */
    for (int d = 0; d < n_gpus && st == RC_OK; d++) {
        st = rc_cuda_ws_bytes(m, &num, RC_KERNELS_ENGINE, slots, io.tokens, rows, l0[d], l0[d + 1], d == 0, gws[d]);
        gwt[d] = rc_cuda_ws_total(gws[d]);
    }
    if (st != RC_OK) {
        rc_model_free(m);
        return fail(st);
    }
    const int64_t model_bytes = m->arena_bytes + em.weights_in_place;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (json) {
        printf("{\"model\": ");
        rc_json_str(stdout, model);
        printf(", \"model_type\": ");
        rc_json_str(stdout, k->model_type);
        printf(", \"family\": ");
        rc_json_str(stdout, k->arch->family);
        if (k->wrapper) {
            printf(", \"wrapper\": {\"model_type\": ");
            rc_json_str(stdout, k->wrapper->model_type);
            printf(", \"class\": ");
            rc_json_str(stdout, k->wrapper->cls);
            printf(", \"ignored_tensors\": %lld, \"ignored_parameters\": %lld}", (long long)m->n_ignored_tensors,
                   (long long)m->n_ignored_params);
        }
        printf(", \"layers_model\": %lld", (long long)k->n_layers_model);
        printf(", \"layers\": %lld, \"hidden\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"head_dim\": %lld, "
               "\"intermediate\": %lld, \"vocab\": %lld, \"max_positions\": %lld, \"parameters\": %lld, "
               "\"positions\": \"%s\", \"norm_head\": %s, \"stored_dtype\": ",
               (long long)k->n_layers, (long long)k->hidden, (long long)k->n_heads, (long long)k->n_kv_heads,
               (long long)k->head_dim, (long long)k->intermediate, (long long)k->vocab, (long long)k->max_pos,
               (long long)m->n_params,
               k->pos == RC_POS_ROTARY ? "rotary" : k->pos == RC_POS_ALIBI ? "alibi" : "learned",
               k->norm_head ? "true" : "false");
        rc_json_str(stdout, m->stored_dtype);
        if (num.wq.kind != RC_WQ_NONE) { /* --weights as given (as-stored, fp8[,weight-scale=S,act=A]): the
                                          * sampler's fp8 copies are in the estimates below */
            printf(", \"weights\": ");
            rc_json_str(stdout, io.weights);
        }
        printf(", \"memory\": {\"dtype\": \"%s\", \"batch\": %lld, \"seqs\": %lld, \"tokens\": %lld, "
               "\"model_bytes\": %lld, \"weights_copy_bytes\": %lld, \"kv_cache_bytes\": %lld, "
               "\"activation_bytes\": %lld, \"total_bytes\": %lld}",
               rc_dtype_str(num.dt), (long long)io.batch, (long long)io.seqs, (long long)io.tokens,
               (long long)model_bytes, (long long)em.weights_copy, (long long)em.kv_cache, (long long)em.activations,
               (long long)(model_bytes + em.total));
        printf(", \"device_memory\": {\"gpus\": %d, \"per_gpu_bytes\": %lld, \"weights_bytes\": %lld, "
               "\"kv_cache_bytes\": %lld, \"activation_bytes\": %lld, \"workspace_bytes\": %lld, \"split\": [",
               n_gpus, (long long)per_gpu, (long long)dm.weights_copy, (long long)dm.kv_cache,
               (long long)dm.activations, (long long)dm.workspaces);
        for (int d = 0; d < n_gpus; d++)
            printf("%s{\"layers\": %lld, \"bytes\": %lld, \"workspace_bytes\": %lld, \"weights_bytes\": %lld, "
                   "\"kv_cache_bytes\": %lld}",
                   d ? ", " : "", (long long)(l0[d + 1] - l0[d]), (long long)gb[d], (long long)gwt[d], (long long)gw[d],
                   (long long)gk[d]);
        printf("]}");
        if (!io.no_speed)
            printf(", \"speed\": {\"gemm_gflop_per_token\": %.6g, \"decode_m\": %lld, \"decode_gflops\": %.4g, "
                   "\"forward_m\": %lld, \"forward_gflops\": %.4g, \"decode_s_per_1k_tokens\": %.4g, "
                   "\"forward_s_per_1k_tokens\": %.4g, \"gemm_only\": true}",
                   se.gflop_per_token, (long long)se.m_decode, se.gflops_decode, (long long)se.m_forward,
                   se.gflops_forward, se.s_per_1k_decode, se.s_per_1k_forward);
        printf(", \"per_layer\": [");
        for (int64_t l = 0; l < k->n_layers; l++) { /* what --layers N keeps: the first N of these */
            int64_t we;
            double f;
            rc_layer_cost(k, l, &we, &f);
            printf("%s{\"layer\": %lld, \"moe\": %s, \"weight_bytes\": %lld, \"gemm_gflop_per_token\": %.6g", l ? ", " : "",
                   (long long)l, rc_layer_is_moe(k, l) ? "true" : "false", (long long)(we * rc_dtype_size(num.dt)),
                   f / 1e9);
            if (!io.no_speed)
                printf(", \"decode_s_per_1k_tokens\": %.4g", 1000.0 * f / 1e9 / se.gflops_decode);
            printf("}");
        }
        printf("], \"stored\": [");
        for (int i = 0; i < m->nstored; i++)
            printf("%s{\"dtype\": \"%s\", \"tensors\": %lld, \"bytes\": %llu}", i ? ", " : "",
                   m->stored[i].dtype_name, (long long)m->stored[i].count, (unsigned long long)m->stored[i].bytes);
        printf("], \"quant_method\": ");
        if (m->quant_method[0])
            printf("\"%s\"", m->quant_method);
        else
            printf("null");
        if (m->quant_method[0])
            printf(", \"quantized\": {\"tensors\": %lld, \"stored_bytes\": %llu, \"scale_bytes\": %llu, "
                   "\"dequantized_bytes\": %llu, \"block\": [%lld, %lld]}",
                   (long long)m->qsizes.tensors, (unsigned long long)m->qsizes.code_bytes,
                   (unsigned long long)m->qsizes.scale_bytes, (unsigned long long)m->qsizes.deq_bytes,
                   (long long)m->qsizes.block[0], (long long)m->qsizes.block[1]);
        printf("}\n");
    } else {
        printf("model          ");
        rc_term_str(stdout, model);
        printf("\narchitecture   ");
        rc_term_str(stdout, k->model_type);
        printf(" (family %s)\n", k->arch->family);
        if (k->wrapper) {
            printf("wrapper        %s (model_type %s): its text model only, from %s, weights under %s",
                   k->wrapper->cls, k->wrapper->model_type, k->wrapper->text_key, k->wrapper->prefixes[0]);
            for (int i = 1; k->wrapper->prefixes[i] && k->wrapper->prefixes[i][0]; i++)
                printf(" or %s", k->wrapper->prefixes[i]);
            printf("; %lld other tensors ignored (%lld parameters", (long long)m->n_ignored_tensors,
                   (long long)m->n_ignored_params);
            if (m->n_ignored_tensors) {
                printf(", first ");
                rc_term_str(stdout, m->ignored_first);
            }
            printf(")%s\n", k->wrapper->no_final_softcap ? "; no final logit soft-capping (the wrapper's head)" : "");
        }
        if (k->n_layers != k->n_layers_model)
            printf("layers         %lld of %lld (--layers)\n", (long long)k->n_layers, (long long)k->n_layers_model);
        else
            printf("layers         %lld\n", (long long)k->n_layers);
        printf("hidden         %lld\n", (long long)k->hidden);
        printf("heads          %lld\n", (long long)k->n_heads);
        printf("kv heads       %lld\n", (long long)k->n_kv_heads);
        printf("head_dim       %lld\n", (long long)k->head_dim);
        printf("intermediate   %lld\n", (long long)k->intermediate);
        printf("vocab          %lld\n", (long long)k->vocab);
        printf("max positions  %lld\n", (long long)k->max_pos);
        printf("norm           %s, eps %g%s%s\n", k->norm == RC_NORM_LAYER ? "LayerNorm" : "RMSNorm", k->norm_eps,
               k->norm_w_offset ? ", weight (1 + w) in fp32" : "",
               k->sandwich_norm ? ", four per layer (before and after attention and MLP)" : "");
        if (k->swiglu_limit > 0) /* gpt-oss's experts */
            printf("activation     clamped SwiGLU, (clamp(up, -%g, %g) + 1) * g * sigmoid(%g g), g = min(gate, %g)\n",
                   k->swiglu_limit, k->swiglu_limit, k->swiglu_alpha, k->swiglu_limit);
        else
            printf("activation     %s%s\n", act_name(k->act), k->gated_mlp ? ", gated (SwiGLU)" : "");
        printf("residual       %s\n", k->parallel_residual ? "parallel" : "sequential");
        if (k->n_experts > 0) { /* mixture of experts */
            int64_t n_moe = 0;
            for (int64_t l = 0; l < k->n_layers; l++)
                n_moe += rc_layer_is_moe(k, l);
            printf("experts        %lld, top %lld%s, expert inner %lld", (long long)k->n_experts, (long long)k->top_k,
                   k->moe_topk_softmax ? " of the logits, softmax over them"
                   : k->norm_topk_prob ? " renormalised"
                                       : "",
                   (long long)k->moe_intermediate);
            if (k->moe_bias)
                printf(", router and expert biases");
            if (k->shared_intermediate > 0)
                printf(", shared expert %lld%s", (long long)k->shared_intermediate,
                       k->shared_ungated ? " (no gate)" : "");
            printf("; %lld of %lld layers MoE\n", (long long)n_moe, (long long)k->n_layers);
            if (k->router == RC_ROUTER_SIGMOID_GROUPED)
                printf("router         sigmoid, fp32%s, %lld groups of %lld, best %lld kept, weights x %g\n",
                       k->router_bias ? ", e_score_correction_bias for the choice" : "", (long long)k->n_group,
                       (long long)(k->n_experts / k->n_group), (long long)k->topk_group, k->routed_scale);
        }
        if (k->mla) /* latent attention: the expanded heads above; the sides' forms (docs/mla.md) */
            printf("attention      latent (MLA): q_lora_rank %lld, kv_lora_rank %lld, qk_nope %lld + qk_rope %lld, "
                   "v_head_dim %lld%s; by default the sampler prefills expanded and decodes absorbed, the trainer expanded "
                   "(mla=)\n",
                   (long long)k->q_lora_rank, (long long)k->kv_lora_rank, (long long)k->qk_nope_dim,
                   (long long)k->qk_rope_dim, (long long)k->v_head_dim, k->rope_interleave ? ", interleaved rope" : "");
        if (k->n_linear > 0) { /* hybrid linear attention */
            int64_t n_lin = 0;
            for (int64_t l = 0; l < k->n_layers; l++)
                n_lin += rc_layer_is_linear(k, l);
            printf("linear attn    Gated DeltaNet in %lld of %lld layers: %lld key / %lld value heads of %lld / %lld, "
                   "conv %lld%s\n", (long long)n_lin, (long long)k->n_layers, (long long)k->lin_hk,
                   (long long)k->lin_hv, (long long)k->lin_dk, (long long)k->lin_dv, (long long)k->lin_conv_k,
                   k->attn_out_gate ? "; attention output gate" : "");
        }
        if (k->pos == RC_POS_ROTARY) {
            printf("rope           %s, theta %g, rotary dims %lld of %lld%s\n", rope_name(k->rope_type),
                   k->rope_theta, (long long)k->rotary_dim, (long long)k->head_dim,
                   k->rope_f32 ? " (fp32 inside)" : "");
            if (k->rope_theta_local > 0)
                printf("rope (local)   default, theta %g on the sliding-window layers\n", k->rope_theta_local);
        } else if (k->pos == RC_POS_ALIBI) {
            static const char *const slopes[] = {"BLOOM", "Baichuan", "MPT"};
            static const char *const add[] = {"fused into the scaled scores", "added in the model dtype",
                                              "added in fp32"};
            printf("positions      ALiBi, %s slopes, bias from %s, %s\n", slopes[k->alibi_slopes],
                   k->alibi_from_last_key ? "the last key" : "key position 0", add[k->alibi_add]);
        } else {
            printf("positions      learned, %lld\n", (long long)k->max_pos);
        }
        if (k->embed_norm)
            printf("embedding norm yes\n");
        if (k->clip_qkv > 0)
            printf("clip_qkv       %g\n", k->clip_qkv);
        if (k->score_div || k->attn_f32)
            printf("scores         %s%s\n", k->score_div ? "divided by sqrt(head_dim)" : "",
                   k->attn_f32 ? ", fp32 (SDPA)" : "");
        if (k->norm_head)
            printf("lm head        NormHead (rows L2-normalised)\n");
        if (k->sliding_window > 0) {
            int64_t n_win = 0;
            for (int64_t l = 0; l < k->n_layers; l++)
                n_win += rc_layer_window(k, l) > 0;
            printf("sliding window %lld on %lld of %lld layers\n", (long long)k->sliding_window, (long long)n_win,
                   (long long)k->n_layers);
        }
        if (k->attn_sinks)
            printf("attention      a learned sink logit per head in every softmax (self_attn.sinks)\n");
        if (k->embed_scale > 0)
            printf("embedding      times %g (rounded to the dtype)\n", k->embed_scale);
        if (k->softmax_scale > 0 || k->attn_softcap > 0 || k->final_softcap > 0) {
            printf("scores         scale %g", k->softmax_scale > 0 ? k->softmax_scale : 1.0 / sqrt((double)k->head_dim));
            if (k->attn_softcap > 0)
                printf(", soft-capped at %g", k->attn_softcap);
            if (k->final_softcap > 0)
                printf("; logits soft-capped at %g", k->final_softcap);
            printf("\n");
        }
        printf("tied embedding %s\n", k->tie_embeddings ? "yes" : "no");
        printf("parameters     %s (%lld)\n", rc_fmt_count(pc, sizeof pc, m->n_params), (long long)m->n_params);
        printf("stored dtype   ");
        rc_term_str(stdout, m->stored_dtype);
        printf("\n");
        printf("stored formats");
        for (int i = 0; i < m->nstored; i++)
            printf("%s %s %lld tensors %.3g MiB", i ? "," : "", m->stored[i].dtype_name,
                   (long long)m->stored[i].count, (double)m->stored[i].bytes / (1024.0 * 1024.0));
        printf("\n");
        if (m->quant_method[0]) {
            const rc_quant_sizes *q = &m->qsizes;
            const double mib = 1024.0 * 1024.0;
            printf("quantization   %s: both sides read the weights dequantized as transformers does (the default; "
                   "docs/numerics.md)", m->quant_method);
            if (!strcmp(m->quant_method, "fp8"))
                printf(", or the sampler the stored fp8 weights and [%lld, %lld] block scales (--sampler "
                       "weights=as-stored)", (long long)q->block[0], (long long)q->block[1]);
            printf("\n               %lld quantized tensors: stored %.4g MiB + scales %.4g MiB (the serving "
                   "engine's), dequantized to 2 bytes %.4g MiB (the trainer's)\n",
                   (long long)q->tensors, (double)q->code_bytes / mib, (double)q->scale_bytes / mib,
                   (double)q->deq_bytes / mib);
        }
        printf("memory         %.2f GiB for a %s run%s, %lld sequences decoded and %lld re-scored together, "
               "%lld tokens each:\n",
               (double)(model_bytes + em.total) / gib, rc_dtype_str(num.dt),
               num.wq.kind == RC_WQ_STORED ? " with the stored fp8 weights"
               : num.wq.kind == RC_WQ_FP8  ? " with fp8 weights"
                                           : "",
               (long long)io.batch, (long long)io.seqs, (long long)io.tokens);
        printf("               weights %.2f GiB (the checkpoint's, read in place or copied at load) + %.2f GiB "
               "(rounded to %s), KV cache %.2f GiB, activations %.2f GiB",
               (double)model_bytes / gib, (double)em.weights_copy / gib, rc_dtype_str(num.dt), (double)em.kv_cache / gib,
               (double)em.activations / gib);
        if (em.state_cache > 0) /* a hybrid model's linear layers: conv and recurrent states per sequence */
            printf(", state cache %.2f GiB", (double)em.state_cache / gib);
        printf("\n");
        if (n_gpus == 1) {
            printf("GPU memory     %.2f GiB on one GPU with --backend cuda: weights %.2f GiB, KV cache %.2f GiB, "
                   "activations %.2f GiB, backend workspaces %.2f GiB\n",
                   (double)gb[0] / gib, (double)dm.weights_copy / gib, (double)dm.kv_cache / gib,
                   (double)dm.activations / gib, (double)gwt[0] / gib);
        } else {
            printf("GPU memory     %.2f GiB on the fullest of %d GPUs with --backend cuda --gpus %d:\n",
                   (double)per_gpu / gib, n_gpus, n_gpus);
            for (int d = 0; d < n_gpus; d++)
                printf("               GPU %d: layers %lld-%lld, %.2f GiB: weights %.2f GiB, KV cache %.2f GiB, "
                       "activations %.2f GiB%s\n", d, (long long)l0[d], (long long)l0[d + 1] - 1,
                       (double)gb[d] / gib, (double)gw[d] / gib, (double)gk[d] / gib,
                       (double)(gb[d] - gw[d] - gk[d] - gwt[d]) / gib, d == 0 ? " (with the embedding and the LM head)" : "");
        }
        { /* the backend's workspaces (in the figures above), GPU 0's by what they hold (docs/gpu.md) */
            const double mib = 1024.0 * 1024.0;
            const int64_t *w = gws[0];
            printf("               backend workspaces %.1f MiB", (double)gwt[0] / mib);
            for (int d = 1; d < n_gpus; d++)
                printf("%s, %.1f MiB on GPU %d", d == 1 ? " on GPU 0" : "", (double)gwt[d] / mib, d);
            printf(" (%s: attention scratch %.1f MiB, cuBLAS operand copies "
                   "%.1f MiB and workspace %.1f MiB, log-probs %.1f MiB, widened weights %.1f MiB, weight copies "
                   "%.1f MiB, indices and other scratch %.1f MiB)\n",
                   n_gpus > 1 ? "GPU 0's" : "in the figure above", (double)w[RC_CUWS_ATT] / mib,
                   (double)w[RC_CUWS_HALF] / mib,
                   (double)w[RC_CUWS_BLAS] / mib, (double)(w[RC_CUWS_LP] + w[RC_CUWS_TGT]) / mib,
                   (double)w[RC_CUWS_WIDE] / mib, (double)w[RC_CUWS_SHADOW] / mib,
                   (double)(w[RC_CUWS_IDX] + w[RC_CUWS_FP8] + w[RC_CUWS_MOE] + w[RC_CUWS_GDN]) / mib);
        }
        if (!io.no_speed)
            printf("speed          about %.3g s per 1k generated tokens (decoding %lld at a time) and %.3g s per 1k "
                   "re-scored tokens on this machine:\n"
                   "               GEMMs only (%.3g GFLOP per token at %.0f / %.0f GFLOP/s measured just now); "
                   "attention, norms and sampling add to it\n",
                   se.s_per_1k_decode, (long long)se.m_decode, se.s_per_1k_forward, se.gflop_per_token,
                   se.gflops_decode, se.gflops_forward);
        /* per decoder layer, once per kind (dense / MoE): what --layers N adds per layer */
        for (int moe = 0; moe < 2; moe++)
            for (int64_t l = 0; l < k->n_layers; l++) {
                if (rc_layer_is_moe(k, l) != (moe == 1))
                    continue;
                int64_t we;
                double f;
                rc_layer_cost(k, l, &we, &f);
                printf("%s %.3g MiB of %s weights, %.3g GEMM GFLOP per token", moe ? "per MoE layer " : "per layer     ",
                       (double)(we * rc_dtype_size(num.dt)) / (1024.0 * 1024.0), rc_dtype_str(num.dt), f / 1e9);
                if (!io.no_speed)
                    printf(", about %.3g s per 1k decoded tokens", 1000.0 * f / 1e9 / se.gflops_decode);
                printf(" (--layers N runs the first N)\n");
                break;
            }
    }
    rc_model_free(m);
    return 0;
}
