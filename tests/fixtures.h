/* The HF reference fixtures: one folder each under data/fixtures/ (config.json,
 * model.safetensors, reference.safetensors; written by tools/fixtures/make_fixtures.py,
 * make_family_fixtures.py, make_moe_fixtures.py, make_gptoss_fixtures.py and make_mla_fixtures.py). The one list that
 * tests/test_forward.c, tests/test_cuda.c and tools/fuzz/fuzz_model.c read: a new
 * fixture is one row here.
 *
 * X(name, model_type, fuzz)
 *   name        the folder under data/fixtures/
 *   model_type  its config.json's "model_type" (test_forward's fixture_table test checks it)
 *   fuzz        1: tools/fuzz/fuzz_model.c's scratch folder for that model_type (one per type)
 */
#ifndef RC_TEST_FIXTURES_H
#define RC_TEST_FIXTURES_H

#define RC_FIXTURE_MODELS(X)                                                                                           \
    X(neox_parallel, gpt_neox, 1)                                                                                      \
    X(neox_sequential, gpt_neox, 0)                                                                                    \
    X(llama_gqa, llama, 1)                                                                                             \
    X(qwen2_bias, qwen2, 1)                                                                                            \
    X(mistral_headdim, mistral, 1)                                                                                     \
    X(neox_bf16, gpt_neox, 0)                                                                                          \
    X(gpt2_learned, gpt2, 1)                                                                                           \
    X(bloom_alibi, bloom, 1)                                                                                           \
    X(mpt_alibi, mpt, 1)                                                                                               \
    X(baichuan_7b, baichuan, 0)                                                                                        \
    X(baichuan_13b, baichuan, 1)                                                                                       \
    X(baichuan2_7b, baichuan, 0)                                                                                       \
    X(baichuan2_13b, baichuan, 0)                                                                                      \
    X(qwen3_yarn, qwen3, 0)                                                                                            \
    X(olmo2_postnorm, olmo2, 0)                                                                                        \
    X(qwen2_moe, qwen2_moe, 0)                                                                                         \
    X(mixtral_fused, mixtral, 0)                                                                                       \
    X(qwen3_moe, qwen3_moe, 0)                                                                                         \
    X(gemma2_softcap, gemma2, 1)                                                                                       \
    X(gemma3_local, gemma3_text, 1)                                                                                    \
    X(olmo3_sliding, olmo3, 1)                                                                                         \
    X(phi3_longrope, phi3, 1)                                                                                          \
    X(glm4_partial, glm4, 1)                                                                                           \
    X(gptoss_sinks, gpt_oss, 1)                                                                                        \
    X(deepseek_v3_mla, deepseek_v3, 1)                                                                                 \
    X(deepseek_v3_qproj, deepseek_v3, 0)                                                                               \
    X(deepseek_v3_moe, deepseek_v3, 0)                                                                                 \
    X(glm4_moe, glm4_moe, 1)                                                                                           \
    X(glm4_moe_air_fused, glm4_moe, 0)                                                                                 \
    X(qnext_hybrid, qwen3_next, 1)

typedef struct {
    const char *name;       /* data/fixtures/NAME */
    const char *model_type; /* config.json's "model_type" */
    int fuzz;               /* fuzz_model's folder for its model_type */
} rc_fixture_model;

#define RC_FIXTURE_ROW_(name, type, fuzz) {#name, #type, fuzz},
static const rc_fixture_model rc_fixture_models[] = {RC_FIXTURE_MODELS(RC_FIXTURE_ROW_)};
#undef RC_FIXTURE_ROW_
#define RC_N_FIXTURE_MODELS ((int)(sizeof rc_fixture_models / sizeof rc_fixture_models[0]))

#endif
