/* libFuzzer harness (c): rc_model_load on a real fixture whose config.json is
 * replaced by the input.
 *
 * One scratch model folder per model_type is made at start-up from
 * data/fixtures: the rows of tests/fixtures.h marked for it (qwen2_bias with
 * its three shards and index); the input's "model_type" picks the folder
 * (llama's when it names none of them); two more folders for an input with a
 * quantization_config: quant/fp8 (FP8 block-scaled weights, also read by an
 * engine under weights=as-stored: the stored codes and scales), and gptoss_mxfp4
 * (a gpt_oss with MXFP4 experts) when its quant_method is mxfp4. Seed the corpus with
 * the fixtures' config.json files: the JSON-aware mutator then changes one
 * field at a time, so most inputs stay valid JSON.
 *
 * Run with -rss_limit_mb=4096 -malloc_limit_mb=4096. An accepted config that
 * makes rc_model_load allocate more than that is a finding. Set
 * FUZZ_MAX_ARENA_MB=N to skip inputs whose config is accepted and asks for an
 * arena above N MiB (to look for other problems once that one is known).
 *
 * Needs RC_SOURCE_DIR (the repository root) to find data/fixtures.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FZ_NO_CONFIG_MAIN
#include "fuzz_config.c"

#include "backend.h"
#include "forward.h"
#include "tests/fixtures.h"

#define N_DIRS (RC_N_FIXTURE_MODELS + 2) /* at most: the rows marked for fuzzing, quant/fp8 and gptoss_mxfp4 */
static char g_dirs[N_DIRS][600];
static const char *k_fixtures[N_DIRS]; /* the marked rows' folders and model types, g_n of them */
static const char *k_types[N_DIRS];
static int g_n, g_llama, g_quant, g_mxfp4;
static const char *const k_files[] = {"model.safetensors", "model-00001-of-00003.safetensors",
                                      "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "model.safetensors.index.json",
                                      NULL};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *src = getenv("RC_SOURCE_DIR");
    if (!src) {
        fprintf(stderr, "fuzz_model: set RC_SOURCE_DIR to the repository root\n");
        exit(2);
    }
    const char *base = fz_scratch_dir("model");
    for (int r = 0; r < RC_N_FIXTURE_MODELS; r++) {
        if (!rc_fixture_models[r].fuzz)
            continue;
        if (strcmp(rc_fixture_models[r].model_type, "llama") == 0)
            g_llama = g_n;
        k_fixtures[g_n] = rc_fixture_models[r].name;
        k_types[g_n++] = rc_fixture_models[r].model_type;
    }
    g_quant = g_n;
    k_fixtures[g_n] = "quant/fp8";
    k_types[g_n++] = "";
    g_mxfp4 = g_n;
    k_fixtures[g_n] = "gptoss_mxfp4";
    k_types[g_n++] = "";
    for (int i = 0; i < g_n; i++) {
        snprintf(g_dirs[i], sizeof g_dirs[i], "%s/d%d", base, i);
        if (mkdir(g_dirs[i], 0700) != 0) {
            perror(g_dirs[i]);
            abort();
        }
        for (int f = 0; k_files[f]; f++) {
            char from[1200], to[1200];
            snprintf(from, sizeof from, "%s/data/fixtures/%s/%s", src, k_fixtures[i], k_files[f]);
            snprintf(to, sizeof to, "%s/%s", g_dirs[i], k_files[f]);
            if (access(from, R_OK) == 0)
                fz_copy(from, to);
        }
    }
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    return fz_json_mutate(data, size, max_size, seed, &k_config_dict);
}

static int pick_dir(const uint8_t *data, size_t size)
{
    json_t *j = json_loadb((const char *)data, size, 0, NULL);
    int d = g_llama;
    if (j) {
        const char *mt = json_string_value(json_object_get(j, "model_type"));
        for (int i = 0; mt && i < g_n; i++)
            if (k_types[i][0] && strcmp(mt, k_types[i]) == 0)
                d = i;
        const json_t *q = json_object_get(j, "quantization_config");
        if (q) { /* the FP8 block-scaled llama, or the gpt_oss with MXFP4 experts */
            const char *qm = json_string_value(json_object_get(q, "quant_method"));
            d = qm && strcmp(qm, "mxfp4") == 0 ? g_mxfp4 : g_quant;
        }
        json_decref(j);
    }
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = g_dirs[pick_dir(data, size)];
    char cpath[700];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    fz_write(cpath, data, size);

    const char *lim = getenv("FUZZ_MAX_ARENA_MB");
    if (lim) {
        rc_config cfg;
        int64_t nw;
        if (rc_config_load(dir, &cfg) == RC_OK && rc_weights_numel(&cfg, &nw) == RC_OK &&
            nw / (1 << 18) > atoll(lim))
            return 0;
    }

    rc_model *m = NULL;
    rc_status s = rc_model_load(dir, &m);
    fz_check_msg(s, dir);
    if (s == RC_OK) {
        if (!m || !m->w.inv_freq || !m->w.embed.p || !m->w.lm_head.p || !m->w.layers)
            abort();
        /* touch what forward() would read first */
        volatile float acc = 0;
        for (int64_t j = 0; j < m->cfg.rotary_dim / 2; j++)
            acc += m->w.inv_freq[j];
        for (int64_t l = 0; l < m->cfg.n_layers; l++) { /* the first and last element of two weights */
            const rc_config *c = &m->cfg;
            const rc_layer_weights *L = &m->w.layers[l];
            const int64_t H = c->hidden, qkv = (c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
            if (rc_layer_is_linear(c, l)) { /* a Gated DeltaNet layer: its in and out projections, its conv */
                if (!L->w_lin_qkvz.p || !L->w_lin_out.p || !L->lin_conv_w.p || L->w_qkv.p)
                    abort();
                acc += rc_wt_at(L->w_lin_qkvz, rc_dim_value(c, RC_DIM_LQKVZ) * H - 1);
                acc += rc_wt_at(L->w_lin_out, H * rc_dim_value(c, RC_DIM_LV) - 1);
                acc += rc_wt_at(L->lin_conv_w, rc_dim_value(c, RC_DIM_LCONV) * c->lin_conv_k - 1);
            } else if (c->mla) { /* latent attention: q_b_proj / q_proj and kv_b_proj instead of the fused QKV */
                const int64_t nq = rc_dim_value(c, RC_DIM_MQ) * rc_dim_value(c, RC_DIM_MQIN);
                const int64_t nkv = rc_dim_value(c, RC_DIM_KVB) * c->kv_lora_rank;
                acc += rc_wt_at(L->w_mq, 0) + rc_wt_at(L->w_mq, nq - 1) + rc_wt_at(L->w_mkvb, nkv - 1);
            } else {
                acc += rc_wt_at(L->w_qkv, 0) + rc_wt_at(L->w_qkv, qkv * H - 1);
            }
            if (!rc_layer_is_moe(c, l)) {
                acc += rc_wt_at(L->w_down, 0) + rc_wt_at(L->w_down, H * c->intermediate - 1);
            } else { /* a MoE layer: the router and every expert's down_proj */
                const int64_t E = c->n_experts;
                acc += rc_wt_at(L->w_router, 0) + rc_wt_at(L->w_router, E * H - 1);
                acc += rc_wt_at(L->w_exp_down, 0) + rc_wt_at(L->w_exp_down, E * H * c->moe_intermediate - 1);
                if (c->router_bias)
                    acc += rc_wt_at(L->e_bias, E - 1);
            }
        }
        if (m->cfg.pos == RC_POS_ALIBI) {
            if (!m->w.alibi_slopes)
                abort();
            for (int64_t h = 0; h < m->cfg.n_heads; h++)
                acc += m->w.alibi_slopes[h];
        }
        if (m->cfg.pos == RC_POS_LEARNED)
            acc += rc_wt_at(m->w.wpe, m->cfg.max_pos * m->cfg.hidden - 1);
        (void)acc;
        if (!strcmp(m->quant_method, "fp8")) { /* the stored fp8 weights, as weights=as-stored reads them */
            static rc_backend *be;
            if (!be && rc_backend_cpu_create(1, RC_KERNELS_INVARIANT, &be) != RC_OK)
                abort();
            rc_numerics num = rc_numerics_fp32();
            num.dt = RC_BF16;
            num.wq.kind = RC_WQ_STORED;
            rc_engine *e = NULL;
            const int64_t len = m->cfg.max_pos < 4 ? m->cfg.max_pos : 4;
            if (rc_engine_create(m, be, &num, 1, len, len, &e) == RC_OK)
                rc_engine_free(e);
        }
        rc_model_free(m);
    } else if (m) {
        abort();
    }
    return 0;
}
