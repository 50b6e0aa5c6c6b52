/* score_forced: teacher-forced log-probs of given token sequences through
 * ratiocheck's engine, printed as JSON. A measuring aid for
 * tools/experiments/bf16_depth.py; not part of the build.
 *
 * Each sequence is replayed the way tests/test_real.c's run_forced() does it:
 * a one-token prompt (the sequence's first token) and the rest forced through
 * rc_run_check (cfg.forced_tokens), so the cached path scores every position
 * by decoding and the full forward scores them in one batched pass.
 *
 *   score_forced MODEL_DIR SEQS.json DTYPE KERNELS [THREADS]
 *
 *   SEQS.json  an object with "sequences": [{"ids": [..]}, ...] (e.g.
 *              data/fixtures/real/smollm2_refs.json); every sequence >= 2 tokens
 *   DTYPE      fp32 | bf16 | fp16 (both paths; log-softmax in fp32, the CLI default)
 *   KERNELS    invariant | engine | blas
 *   THREADS    CPU threads (default 1)
 *
 * Output (stdout): {"dtype":.., "kernels":.., "full": [[lp(ids[t+1] | ids[..t]) for t]],
 * "cached": [[..]]}, one list per sequence of len-1 values, each float printed
 * with 9 significant digits (exact for a float).
 *
 * Build by hand from the repository root, after `meson compile -C build`
 * (the CUDA stub stands in for the GPU backend, so no CUDA library is needed):
 *
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -fopenmp \
 *      -Ibuild -Isrc/base -Isrc/formats -Isrc/engine -Isrc/check -Imodels \
 *      tools/experiments/score_forced.c src/engine/cuda_stub.c build/src/libratiocheck.a \
 *      $(pkg-config --cflags --libs jansson openblas libpcre2-8 libutf8proc hdf5) \
 *      -lm -o /tmp/score_forced
 *
 * (tools/experiments/bf16_depth.py runs exactly this command.) */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "forward.h"
#include "model.h"
#include "results.h"
#include "rollout.h"

static void die(const char *what)
{
    fprintf(stderr, "score_forced: %s\n", what);
    exit(1);
}

static void print_rows(const char *key, const float *lp, int64_t stride, int64_t n, const int64_t *len)
{
    printf("\"%s\": [", key);
    for (int64_t s = 0; s < n; s++) {
        printf(s ? ",\n[" : "\n[");
        for (int64_t t = 0; t < len[s] - 1; t++)
            printf(t ? ", %.9g" : "%.9g", (double)lp[s * stride + t]);
        printf("]");
    }
    printf("]");
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc > 6)
        die("usage: score_forced MODEL_DIR SEQS.json fp32|bf16|fp16 invariant|engine|blas [THREADS]");
    const char *dir = argv[1], *seqs_path = argv[2], *dts = argv[3], *ks = argv[4];
    const int threads = argc == 6 ? atoi(argv[5]) : 1;
    if (threads < 1)
        die("THREADS must be >= 1");
    rc_dtype dt;
    if (!strcmp(dts, "fp32"))
        dt = RC_F32;
    else if (!strcmp(dts, "bf16"))
        dt = RC_BF16;
    else if (!strcmp(dts, "fp16"))
        dt = RC_F16;
    else
        die("DTYPE must be fp32, bf16 or fp16");
    rc_kernels k;
    if (!strcmp(ks, "invariant"))
        k = RC_KERNELS_INVARIANT;
    else if (!strcmp(ks, "engine"))
        k = RC_KERNELS_ENGINE;
    else if (!strcmp(ks, "blas"))
        k = RC_KERNELS_BLAS;
    else
        die("KERNELS must be invariant, engine or blas");

    json_error_t je;
    json_t *root = json_load_file(seqs_path, 0, &je);
    if (!root)
        die(je.text);
    const json_t *seqs = json_object_get(root, "sequences");
    if (!json_is_array(seqs) || json_array_size(seqs) == 0)
        die("SEQS.json has no \"sequences\" array");
    const int64_t n = (int64_t)json_array_size(seqs);
    int64_t *len = calloc((size_t)n, sizeof *len), G = 0;
    if (!len)
        die("out of memory");
    for (int64_t s = 0; s < n; s++) {
        const json_t *ids = json_object_get(json_array_get(seqs, (size_t)s), "ids");
        if (!json_is_array(ids) || json_array_size(ids) < 2)
            die("every sequence needs an \"ids\" array of at least 2 tokens");
        len[s] = (int64_t)json_array_size(ids);
        G = len[s] - 1 > G ? len[s] - 1 : G;
    }
    int32_t *prompt = malloc(sizeof *prompt * (size_t)n), *plen = malloc(sizeof *plen * (size_t)n);
    int32_t *forced = malloc(sizeof *forced * (size_t)(n * G)), *valid = malloc(sizeof *valid * (size_t)n);
    if (!prompt || !plen || !forced || !valid)
        die("out of memory");
    for (int64_t s = 0; s < n; s++) {
        const json_t *ids = json_object_get(json_array_get(seqs, (size_t)s), "ids");
        prompt[s] = (int32_t)json_integer_value(json_array_get(ids, 0));
        plen[s] = 1;
        valid[s] = (int32_t)(len[s] - 1);
        for (int64_t t = 0; t < G; t++)
            forced[s * G + t] = t < valid[s] ? (int32_t)json_integer_value(json_array_get(ids, (size_t)t + 1)) : -1;
    }

    omp_set_num_threads(threads);
    rc_model *m;
    if (rc_model_load(dir, &m) != RC_OK)
        die(rc_last_error());
    rc_rollout_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_prompts = n;
    cfg.prompt_max = 1;
    cfg.prompt_tokens = prompt;
    cfg.prompt_len = plen;
    cfg.samples = 1;
    cfg.batch = n;
    cfg.n_lens = 1;
    cfg.lens[0] = G;
    cfg.sampling.top_k = 0;
    cfg.sampling.top_p = 1.0;
    cfg.num = rc_numerics_fp32(); /* log-softmax in fp32 with an fp64 log-sum-exp, temperature 1 */
    cfg.num.dt = dt;
    cfg.reference = 0;
    cfg.forced_tokens = forced;
    cfg.forced_valid = valid;
    cfg.forced_len = G;
    rc_backend *be;
    if (rc_backend_cpu_create(threads, k, &be) != RC_OK)
        die(rc_last_error());
    rc_results r;
    memset(&r, 0, sizeof r);
    if (rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, &r) != RC_OK)
        die(rc_last_error());
    if (r.n_seq != n || r.gen_len != G || r.n_lens != 1 || r.lens[0].len != G)
        die("unexpected result shape");
    for (int64_t s = 0; s < n; s++)
        for (int64_t t = 0; t < valid[s]; t++)
            if (r.gen_tokens[s * G + t] != forced[s * G + t])
                die("a forced token was not replayed");

    printf("{\"dtype\": \"%s\", \"kernels\": \"%s\", \"n\": %lld,\n", dts, ks, (long long)n);
    print_rows("full", r.lens[0].logprob_fwd, G, n, len);
    printf(",\n");
    print_rows("cached", r.logprob_gen, G, n, len);
    printf("}\n");

    rc_results_free(&r);
    rc_backend_destroy(be);
    rc_model_free(m);
    json_decref(root);
    free(len);
    free(prompt);
    free(plen);
    free(forced);
    free(valid);
    return 0;
}
