/* libFuzzer harness (b): config.json text -> rc_json_parse_object ->
 * rc_config_parse (common fields, rope settings, family fields).
 *
 * Also checks rc_utf8_valid against an independent strict decoder (Unicode
 * Table 3-7, "well-formed UTF-8 byte sequences") on every input, and, when
 * the config is accepted, that the sizes it implies fit the allocation limit
 * and are consistent with the weight count (rc_weights_numel).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "json_util.h"
#include "model.h"
#include "util.h"

/* Independent reference: returns the offset of the first ill-formed sequence,
 * or len when the whole buffer is well formed. */
static size_t ref_utf8(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        unsigned lo = 0x80, hi = 0xbf;
        size_t need;
        if (c <= 0x7f) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
        } else if (c == 0xe0) {
            need = 2;
            lo = 0xa0;
        } else if (c >= 0xe1 && c <= 0xec) {
            need = 2;
        } else if (c == 0xed) {
            need = 2;
            hi = 0x9f;
        } else if (c >= 0xee && c <= 0xef) {
            need = 2;
        } else if (c == 0xf0) {
            need = 3;
            lo = 0x90;
        } else if (c >= 0xf1 && c <= 0xf3) {
            need = 3;
        } else if (c == 0xf4) {
            need = 3;
            hi = 0x8f;
        } else {
            return i;
        }
        if (need >= len - i) /* truncated */
            return i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf)
                return i;
        i += need + 1;
    }
    return len;
}

static const char *const k_keys[] = {
    "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "max_position_embeddings", "bos_token_id", "eos_token_id",
    "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "layer_norm_eps",
    "tie_word_embeddings", "pretraining_tp", "use_sliding_window", "attention_bias", "mlp_bias",
    "sliding_window", "use_parallel_residual", "rope_parameters", "rope_scaling", "rope_theta",
    "partial_rotary_factor", "rotary_emb_base", "rotary_pct", "rope_type", "type", "factor",
    "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
    /* gpt2, bloom, mpt, baichuan */
    "n_embd", "n_layer", "n_head", "n_positions", "n_inner", "activation_function", "layer_norm_epsilon",
    "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_embed",
    "apply_residual_connection_post_layernorm", "slow_but_exact", "d_model", "n_heads", "n_layers",
    "expansion_ratio", "max_seq_len", "no_bias", "attn_config", "alibi", "alibi_bias_max", "clip_qkv",
    "softmax_scale", "qk_ln", "prefix_lm", "logit_scale", "model_max_length", "z_loss_weight", "norm_head",
    "architectures",
    /* qwen3, yarn */
    "layer_types", "max_window_layers", "beta_fast", "beta_slow", "truncate", "attention_factor", "mscale",
    "mscale_all_dim",
    /* gemma2, gemma3_text */
    "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
    "sliding_window_pattern", "rope_local_base_freq", "use_bidirectional_attention", "full_attention",
    "sliding_attention",
    /* olmo3, phi3, glm4, longrope */
    "short_factor", "long_factor",
    /* MoE: qwen2_moe, mixtral, qwen3_moe, glm4_moe */
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "qkv_bias",
    "n_routed_experts", "n_shared_experts", "n_group", "topk_group", "first_k_dense_replace",
    "routed_scaling_factor", "use_qk_norm", "num_nextn_predict_layers", NULL};
static const char *const k_strings[] = {
    "gpt_neox", "llama", "mistral", "qwen2", "gpt2", "bloom", "mpt", "baichuan", "BaiChuanForCausalLM",
    "BaichuanForCausalLM", "gelu", "gelu_new", "gelu_pytorch_tanh", "silu", "relu",
    "default", "linear", "llama3", "dynamic", "yarn", "qwen3", "olmo2", "gemma2", "gemma3_text", "full_attention",
    "sliding_attention", "attention", "olmo3", "phi3", "glm4", "longrope", "qwen2_moe", "mixtral", "qwen3_moe", "glm4_moe", "su", "line\nbreak", "\xc3\xa9", "", NULL};
const fz_json_dict k_config_dict = {k_keys, k_strings};

#ifndef FZ_NO_CONFIG_MAIN
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    return fz_json_mutate(data, size, max_size, seed, &k_config_dict);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t bad = (size_t)-1;
    bool ok = rc_utf8_valid(data, size, &bad);
    size_t ref = ref_utf8(data, size);
    if (ok != (ref == size) || (!ok && bad != ref)) {
        fprintf(stderr, "rc_utf8_valid=%d bad_at=%zu, reference says first bad at %zu (len %zu)\n", ok,
                bad, ref, size);
        abort();
    }

    json_t *root = NULL;
    rc_status s = rc_json_parse_object((const char *)data, size, "fuzz/config.json", &root);
    fz_check_msg(s, "fuzz/config.json");
    if (s != RC_OK) {
        if (root)
            abort();
        return 0;
    }
    rc_config cfg;
    s = rc_config_parse(root, "fuzz/config.json", &cfg);
    fz_check_msg(s, "fuzz/config.json");
    json_decref(root);
    if (s != RC_OK)
        return 0;
    /* accepted: the invariants later code relies on */
    if (!cfg.arch || cfg.n_kv_heads < 1 || cfg.n_heads % cfg.n_kv_heads || cfg.head_dim < 1 ||
        cfg.rotary_dim < 0 || cfg.rotary_dim > cfg.head_dim || cfg.rotary_dim % 2 || cfg.n_eos > RC_MAX_EOS ||
        cfg.bos_id >= cfg.vocab)
        abort();
    int64_t nw = -1;
    if (rc_weights_numel(&cfg, &nw) != RC_OK)
        return 0;
    if (nw < 0 || nw > RC_MAX_ALLOC / 4 * 1024) { /* rc_config_finish's bound (the loader's is RC_MAX_ALLOC) */
        fprintf(stderr, "accepted config needs %lld floats of weights\n", (long long)nw);
        abort();
    }
    return 0;
}
#endif
