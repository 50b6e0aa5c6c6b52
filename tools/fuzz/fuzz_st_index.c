/* libFuzzer harness (d): sharded checkpoints. The input is
 * model.safetensors.index.json for a scratch copy of data/fixtures/qwen2_bias
 * (three shards), opened with rc_st_open_dir.
 *
 * The folder also holds: sub/shard.safetensors (a copy of shard 3), a symlink
 * inside.safetensors -> model-00003-of-00003.safetensors, a symlink
 * escape.safetensors -> ../outside.safetensors (outside the model folder), a
 * folder dir.safetensors, and an empty file empty.safetensors. Shard names
 * that leave the folder must be rejected; ASan checks memory use.
 *
 * Needs RC_SOURCE_DIR (the repository root).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "safetensors.h"

static char g_dir[600], g_index[700], g_outside[700];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *src = getenv("RC_SOURCE_DIR");
    if (!src) {
        fprintf(stderr, "fuzz_st_index: set RC_SOURCE_DIR to the repository root\n");
        exit(2);
    }
    const char *base = fz_scratch_dir("index");
    snprintf(g_dir, sizeof g_dir, "%s/model", base);
    snprintf(g_index, sizeof g_index, "%s/model.safetensors.index.json", g_dir);
    snprintf(g_outside, sizeof g_outside, "%s/outside.safetensors", base);
    char p[1200], q[1200];
    if (mkdir(g_dir, 0700) != 0)
        abort();
    for (int i = 1; i <= 3; i++) {
        snprintf(p, sizeof p, "%s/data/fixtures/qwen2_bias/model-0000%d-of-00003.safetensors", src, i);
        snprintf(q, sizeof q, "%s/model-0000%d-of-00003.safetensors", g_dir, i);
        fz_copy(p, q);
    }
    snprintf(p, sizeof p, "%s/model-00003-of-00003.safetensors", g_dir);
    fz_copy(p, g_outside);
    snprintf(q, sizeof q, "%s/sub", g_dir);
    mkdir(q, 0700);
    snprintf(q, sizeof q, "%s/sub/shard.safetensors", g_dir);
    fz_copy(p, q);
    snprintf(q, sizeof q, "%s/inside.safetensors", g_dir);
    if (symlink("model-00003-of-00003.safetensors", q) != 0)
        abort();
    snprintf(q, sizeof q, "%s/escape.safetensors", g_dir);
    if (symlink("../outside.safetensors", q) != 0)
        abort();
    snprintf(q, sizeof q, "%s/dir.safetensors", g_dir);
    mkdir(q, 0700);
    snprintf(q, sizeof q, "%s/empty.safetensors", g_dir);
    fz_write(q, (const uint8_t *)"", 0);
    return 0;
}

static const char *const k_keys[] = {"weight_map", "metadata", "model.embed_tokens.weight",
                                     "model.norm.weight", "model.layers.0.input_layernorm.weight",
                                     "lm_head.weight", "x", NULL};
static const char *const k_strings[] = {"model-00001-of-00003.safetensors",
                                        "model-00002-of-00003.safetensors",
                                        "model-00003-of-00003.safetensors",
                                        "./model-00001-of-00003.safetensors",
                                        "sub/shard.safetensors",
                                        "sub/../model-00002-of-00003.safetensors",
                                        "inside.safetensors",
                                        "escape.safetensors",
                                        "dir.safetensors",
                                        "empty.safetensors",
                                        "../outside.safetensors",
                                        "..",
                                        ".",
                                        "/",
                                        "",
                                        "model.safetensors.index.json",
                                        "/dev/null",
                                        "missing.safetensors",
                                        "model-00001-of-00003.safetensors/",
                                        NULL};
static const fz_json_dict k_dict = {k_keys, k_strings};

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    return fz_json_mutate(data, size, max_size, seed, &k_dict);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(g_index, data, size);
    rc_safetensors *st = NULL;
    rc_status s = rc_st_open_dir(g_dir, &st);
    fz_check_msg(s, NULL);
    if (s == RC_OK) {
        size_t dl = strlen(g_dir);
        for (int i = 0; i < st->nfiles; i++)
            if (strncmp(st->files[i].path, g_dir, dl) != 0 || st->files[i].path[dl] != '/') {
                fprintf(stderr, "shard outside the model folder was opened: %s\n", st->files[i].path);
                abort();
            }
        for (int64_t i = 0; i < st->ntensors; i++)
            if (rc_st_find(st, st->tensors[i].name) != &st->tensors[i])
                abort();
        rc_st_close(st);
    } else if (st) {
        abort();
    }
    return 0;
}
