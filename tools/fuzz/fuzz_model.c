/* libFuzzer harness (c): rc_model_load on a real fixture whose config.json is
 * replaced by the input.
 *
 * Four scratch model folders are made at start-up from data/fixtures
 * (neox_parallel, llama_gqa, mistral_headdim, qwen2_bias with its three shards
 * and index); the input's "model_type" picks the folder. Seed the corpus with
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

static char g_dirs[4][600];
static const char *const k_fixtures[4] = {"neox_parallel", "llama_gqa", "mistral_headdim", "qwen2_bias"};
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
    for (int i = 0; i < 4; i++) {
        snprintf(g_dirs[i], sizeof g_dirs[i], "%s/%s", base, k_fixtures[i]);
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
    int d = 1;
    if (j) {
        const char *mt = json_string_value(json_object_get(j, "model_type"));
        if (mt && strcmp(mt, "gpt_neox") == 0)
            d = 0;
        else if (mt && strcmp(mt, "mistral") == 0)
            d = 2;
        else if (mt && strcmp(mt, "qwen2") == 0)
            d = 3;
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
        if (!m || !m->w.inv_freq || !m->w.embed || !m->w.lm_head || !m->w.layers)
            abort();
        /* touch what forward() would read first */
        volatile float acc = 0;
        for (int64_t j = 0; j < m->cfg.rotary_dim / 2; j++)
            acc += m->w.inv_freq[j];
        for (int64_t l = 0; l < m->cfg.n_layers; l++)
            acc += m->w.layers[l].w_qkv[0] + m->w.layers[l].w_down[0];
        (void)acc;
        rc_model_free(m);
    } else if (m) {
        abort();
    }
    return 0;
}
