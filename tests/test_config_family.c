/* test_config_family.c: test_config's family structure tests: keys with aliases, weight
 * lists, tables, helpers (test_config.c holds the fixtures and the suite). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../models/common.h" /* the layout helpers the family files share */
#include "model.h"
#include "util.h"
#include "status.h"

#include "testutil.h"
#include "test_config.h"

/* ------------------------------------------------------------------------ */
/* the family structure: keys with aliases, weight lists, tables, helpers    */

static json_t *obj_sq(const char *json_sq)
{
    char *text = dq(json_sq);
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    ck_assert_msg(root != NULL, "test JSON does not parse: %s: %s", err.text, text);
    free(text);
    return root;
}

START_TEST(test_int_alias_reader)
{
    static const char *const keys[] = {"hidden_size", "n_embd", "n_embed", NULL};
    int64_t v = 0;
    bool present = true;
    json_t *r = obj_sq("{'n_embd': 768}");
    ck_assert_int_eq(rc_config_get_int_alias(r, CFG, keys, 1, 1 << 20, 0, &v, &present), RC_OK);
    ck_assert(present);
    ck_assert_int_eq(v, 768);
    json_decref(r);
    r = obj_sq("{'n_embed': 64, 'hidden_size': null}"); /* null counts as absent */
    ck_assert_int_eq(rc_config_get_int_alias(r, CFG, keys, 1, 1 << 20, 0, &v, &present), RC_OK);
    ck_assert_int_eq(v, 64);
    json_decref(r);
    r = obj_sq("{'other': 1}");
    ck_assert_int_eq(rc_config_get_int_alias(r, CFG, keys, 1, 1 << 20, 7, &v, &present), RC_OK);
    ck_assert(!present);
    ck_assert_int_eq(v, 7);
    json_decref(r);
    /* two aliases at once: ambiguous, named both */
    r = obj_sq("{'hidden_size': 64, 'n_embd': 64}");
    rc_clear_error();
    expect_msg_(__FILE__, __LINE__, rc_config_get_int_alias(r, CFG, keys, 1, 1 << 20, 0, &v, &present),
                RC_ERR_FORMAT, CFG, "\"hidden_size\" and \"n_embd\" are both given", (char *)NULL);
    json_decref(r);
    /* the range check names the alias that was read */
    r = obj_sq("{'n_embed': 0}");
    rc_clear_error();
    expect_msg_(__FILE__, __LINE__, rc_config_get_int_alias(r, CFG, keys, 1, 1 << 20, 0, &v, &present),
                RC_ERR_FORMAT, CFG, "\"n_embed\" = 0 is out of range", (char *)NULL);
    json_decref(r);
}
END_TEST

/* The new families' published config keys (GPT-2's n_embd / n_layer /
 * n_head / n_positions / n_inner, BLOOM's n_embed or hidden_size, MPT's
 * d_model / attn_config, Baichuan's two position encodings and Baichuan2's
 * NormHead) and what each family's forward details become. */
START_TEST(test_new_family_configs)
{
    rc_config c;
    parse_ok("{'model_type':'gpt2','n_embd':64,'n_layer':3,'n_head':4,'n_positions':64,'n_inner':null,"
             "'vocab_size':272,'activation_function':'gelu_new','layer_norm_epsilon':1e-5}",
             &c);
    ck_assert(c.pos == RC_POS_LEARNED && c.rotary_dim == 0 && c.tie_embeddings && c.norm == RC_NORM_LAYER);
    ck_assert_int_eq(c.intermediate, 256);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.max_pos, 64);
    ck_assert_int_eq(c.act, RC_ACT_GELU_NEW);
    parse_ok("{'model_type':'bloom','n_embed':96,'n_layer':3,'n_head':6,'vocab_size':304,"
             "'layer_norm_epsilon':1e-5}",
             &c);
    ck_assert(c.pos == RC_POS_ALIBI && c.embed_norm && c.alibi_slopes == RC_SLOPES_BLOOM &&
              c.alibi_add == RC_ALIBI_ADD_FUSED && !c.alibi_from_last_key);
    ck_assert_int_eq(c.intermediate, 384);
    parse_ok("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':6,'expansion_ratio':4,'max_seq_len':64,"
             "'vocab_size':288,'no_bias':true,'attn_config':{'alibi':true,'alibi_bias_max':12,'clip_qkv':0.5}}",
             &c);
    ck_assert(c.pos == RC_POS_ALIBI && !c.norm_bias && c.alibi_slopes == RC_SLOPES_MPT && c.alibi_from_last_key);
    /* HF's MptModel computes with alibi_bias_max 8 whatever the config says */
    ck_assert(c.alibi_bias_max == 8.0 && c.clip_qkv == 0.5 && c.max_pos == 64);
    parse_ok("{'model_type':'baichuan','hidden_size':64,'num_hidden_layers':2,'num_attention_heads':4,"
             "'intermediate_size':128,'vocab_size':300,'max_position_embeddings':512}",
             &c);
    ck_assert(c.pos == RC_POS_ROTARY && c.rotary_dim == 16 && !c.norm_head && c.score_div);
    parse_ok("{'model_type':'baichuan','hidden_size':96,'num_hidden_layers':2,'num_attention_heads':6,"
             "'intermediate_size':128,'vocab_size':300,'model_max_length':512,'z_loss_weight':0}",
             &c);
    ck_assert(c.pos == RC_POS_ALIBI && c.rotary_dim == 0 && c.norm_head && c.alibi_slopes == RC_SLOPES_BAICHUAN &&
              c.alibi_add == RC_ALIBI_ADD_MODEL_DT);
    ck_assert_int_eq(c.max_pos, 512);
    /* published Baichuan2-13B: no marker but the vocabulary size */
    parse_ok("{'model_type':'baichuan','architectures':['BaichuanForCausalLM'],'hidden_size':5120,"
             "'num_hidden_layers':40,'num_attention_heads':40,'intermediate_size':13696,'vocab_size':125696,"
             "'model_max_length':4096}",
             &c);
    ck_assert(c.pos == RC_POS_ALIBI && c.norm_head && c.head_dim == 128);
    /* Baichuan-13B: same keys, 64000 vocabulary, no NormHead; an explicit norm_head key wins */
    parse_ok("{'model_type':'baichuan','architectures':['BaichuanForCausalLM'],'hidden_size':5120,"
             "'num_hidden_layers':40,'num_attention_heads':40,'intermediate_size':13696,'vocab_size':64000,"
             "'model_max_length':4096}",
             &c);
    ck_assert(c.pos == RC_POS_ALIBI && !c.norm_head);
    parse_ok("{'model_type':'baichuan','hidden_size':64,'num_hidden_layers':2,'num_attention_heads':4,"
             "'intermediate_size':128,'vocab_size':300,'model_max_length':512,'norm_head':true}",
             &c);
    ck_assert(c.pos == RC_POS_ALIBI && c.norm_head);
    /* Baichuan-7B: BaiChuanForCausalLM means RoPE (max_position_embeddings defaults to 4096) */
    parse_ok("{'model_type':'baichuan','architectures':['BaiChuanForCausalLM'],'hidden_size':64,"
             "'num_hidden_layers':2,'num_attention_heads':4,'intermediate_size':128,'vocab_size':64000}",
             &c);
    ck_assert(c.pos == RC_POS_ROTARY && !c.norm_head && c.max_pos == 4096);
}
END_TEST

/* Bad configs of the new families are one line naming the file and the key
 * (exit 4 for malformed, 5 for what is valid but not supported). */
START_TEST(test_new_family_bad_configs)
{
    /* ALiBi together with rotary settings */
    EXPECT_REJECT("{'model_type':'bloom','hidden_size':96,'n_layer':3,'n_head':6,'vocab_size':304,"
                  "'rope_theta':10000}",
                  RC_ERR_FORMAT, "\"rope_theta\"", "ALiBi", "contradict");
    EXPECT_REJECT("{'model_type':'baichuan','hidden_size':96,'num_hidden_layers':2,'num_attention_heads':6,"
                  "'intermediate_size':128,'vocab_size':300,'model_max_length':512,"
                  "'rope_scaling':{'type':'linear','factor':2}}",
                  RC_ERR_FORMAT, "\"rope_scaling\"", "ALiBi");
    /* alibi_bias_max <= 0 */
    EXPECT_REJECT("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':6,'vocab_size':288,"
                  "'attn_config':{'alibi_bias_max':0}}",
                  RC_ERR_FORMAT, "alibi_bias_max", "> 0");
    EXPECT_REJECT("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':6,'vocab_size':288,"
                  "'attn_config':{'alibi_bias_max':-8}}",
                  RC_ERR_FORMAT, "alibi_bias_max");
    EXPECT_REJECT("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':6,'vocab_size':288,"
                  "'attn_config':{'clip_qkv':-1}}",
                  RC_ERR_FORMAT, "clip_qkv");
    EXPECT_REJECT("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':6,'vocab_size':288,"
                  "'attn_config':7}",
                  RC_ERR_FORMAT, "attn_config", "object");
    EXPECT_REJECT("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':6,'vocab_size':288,"
                  "'attn_config':{'alibi':false}}",
                  RC_ERR_UNSUPPORTED, "alibi = false");
    /* heads not dividing hidden */
    EXPECT_REJECT("{'model_type':'gpt2','n_embd':64,'n_layer':3,'n_head':5,'n_positions':64,'vocab_size':272}",
                  RC_ERR_FORMAT, "n_embd 64", "n_head 5");
    EXPECT_REJECT("{'model_type':'bloom','hidden_size':96,'n_layer':3,'n_head':7,'vocab_size':304}",
                  RC_ERR_FORMAT, "hidden_size 96", "n_head 7");
    EXPECT_REJECT("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':5,'vocab_size':288}",
                  RC_ERR_FORMAT, "d_model 96", "n_heads 5");
    EXPECT_REJECT("{'model_type':'baichuan','hidden_size':96,'num_hidden_layers':2,'num_attention_heads':7,"
                  "'intermediate_size':128,'vocab_size':300,'model_max_length':512}",
                  RC_ERR_FORMAT, "hidden_size 96", "num_attention_heads 7");
    /* which Baichuan is it? */
    EXPECT_REJECT("{'model_type':'baichuan','hidden_size':96,'num_hidden_layers':2,'num_attention_heads':6,"
                  "'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "max_position_embeddings", "model_max_length");
    EXPECT_REJECT("{'model_type':'baichuan','architectures':['BaiChuanForCausalLM'],'hidden_size':64,"
                  "'num_hidden_layers':2,'num_attention_heads':4,'intermediate_size':128,'vocab_size':300,"
                  "'norm_head':true}",
                  RC_ERR_FORMAT, "BaiChuanForCausalLM", "NormHead");
    /* GPT-2 settings HF supports and we do not run: refused, not ignored */
    EXPECT_REJECT("{'model_type':'gpt2','n_embd':64,'n_layer':3,'n_head':4,'n_positions':64,'vocab_size':272,"
                  "'scale_attn_by_inverse_layer_idx':true}",
                  RC_ERR_UNSUPPORTED, "scale_attn_by_inverse_layer_idx");
    EXPECT_REJECT("{'model_type':'gpt2','n_embd':64,'n_layer':3,'n_head':4,'vocab_size':272}", RC_ERR_FORMAT,
                  "\"n_positions\" is missing");
}
END_TEST

START_TEST(test_registry_list)
{
    ck_assert_str_eq(rc_arch_supported_list(),
                     "gpt_neox, llama, mistral, qwen2, gpt2, bloom, mpt, baichuan, qwen3, olmo2, qwen2_moe, mixtral, "
                     "qwen3_moe, gemma2, gemma3_text, olmo3, phi3, glm4, gpt_oss, deepseek_v3, glm4_moe, qwen3_next");
    ck_assert_ptr_eq(rc_arch_for_model_type("mistral"), rc_arch_for_model_type("llama"));
    ck_assert_ptr_null(rc_arch_for_model_type("falcon"));
}
END_TEST

/* rc_weights_numel (from the lists in model.h) against the per-family sums
 * the family files computed by hand before the lists. */
START_TEST(test_weights_numel_matches_families)
{
    rc_config c;
    int64_t n;
    parse_ok("{'model_type':'gpt_neox','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
             "'intermediate_size':96,'vocab_size':300}",
             &c);
    for (int tie = 0; tie < 2; tie++)
        for (int bias = 0; bias < 2; bias++) {
            c.tie_embeddings = tie;
            c.qkv_bias = c.o_bias = bias;
            int64_t H = c.hidden, I = c.intermediate;
            int64_t layer = 4 * H + 3 * H * H + H * H + I * H + I + H * I + H + (bias ? 4 * H : 0);
            ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
            ck_assert_int_eq(n, c.vocab * H * (tie ? 1 : 2) + 2 * H + c.n_layers * layer);
        }
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
             "'head_dim':24,'num_hidden_layers':2,'intermediate_size':80,'vocab_size':500}",
             &c);
    for (int m = 0; m < 8; m++) {
        c.tie_embeddings = m & 1;
        c.qkv_bias = (m >> 1) & 1;
        c.o_bias = c.qkv_bias;
        c.mlp_bias = (m >> 2) & 1;
        int64_t H = c.hidden, I = c.intermediate, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
        int64_t layer = 2 * H + (q + 2 * kv) * H + H * q + 3 * I * H + (c.qkv_bias ? q + 2 * kv : 0) +
                        (c.o_bias ? H : 0) + (c.mlp_bias ? 2 * I + H : 0);
        ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
        ck_assert_int_eq(n, c.vocab * H * (c.tie_embeddings ? 1 : 2) + H + c.n_layers * layer);
    }
}
END_TEST

/* A config whose weights just exceed the allocation limit (RC_MAX_ALLOC
 * bytes in fp32) only through its biases and norms is refused: the old check
 * estimated the size without them (fuzz_config found a config accepted with
 * 275,088,670,720 weights). Here the estimate without biases and norms is
 * exactly 2^38 weights (85 layers x 3,221,225,472 + 2 x 32768 x 16384). */
/* A config whose fp32 weights pass RC_MAX_ALLOC (1 TiB) parses (--layers N may keep fewer layers), and the
 * loader refuses it before it opens a weight file: the folder below has no safetensors file, so a refusal for
 * the size (RC_ERR_FORMAT) rather than for the missing files (RC_ERR_IO) shows the order; with --layers 1 the
 * size passes and the missing files are what stops it. A config whose weight count overflows 64-bit byte
 * counts is refused when parsed. */
START_TEST(test_weights_too_large_by_biases)
{
    rc_config c;
    static const char big[] = "{\"model_type\":\"gpt_neox\",\"hidden_size\":16384,\"num_attention_heads\":128,"
                              "\"num_hidden_layers\":85,\"intermediate_size\":65536,\"vocab_size\":32768}";
    parse_ok("{'model_type':'gpt_neox','hidden_size':16384,'num_attention_heads':128,'num_hidden_layers':85,"
             "'intermediate_size':65536,'vocab_size':32768}",
             &c);
    int64_t n = -1;
    ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
    ck_assert_int_gt(n, RC_MAX_ALLOC / 4); /* 85 layers: past the limit, by the biases and norms */
    char dir[4096], path[4200];
    rc_test_fresh_dir(dir, sizeof dir, "/tmp");
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(big, f);
    fclose(f);
    rc_model *m = NULL;
    ck_assert_int_eq(rc_model_load_headers(dir, &m), RC_ERR_FORMAT);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "model sizes are too large"));
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "--layers N"));
    ck_assert_int_eq(rc_model_load_layers(dir, 1, true, &m), RC_ERR_IO);
    ck_assert_ptr_null(m);
    ck_assert_ptr_null(strstr(rc_last_error(), "model sizes are too large"));
    remove(path);
    rmdir(dir);
    /* one layer fewer fits, and the exact count is what the arena gets */
    parse_ok("{'model_type':'gpt_neox','hidden_size':16384,'num_attention_heads':128,'num_hidden_layers':84,"
             "'intermediate_size':65536,'vocab_size':32768}",
             &c);
    ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
    ck_assert_int_le(n, RC_MAX_ALLOC / 4);
    /* 65536 experts of 3 x 2^20 x 2^22 in 4096 layers: past 64 bits, refused at parse */
    EXPECT_REJECT("{'model_type':'glm4_moe','hidden_size':1048576,'num_attention_heads':4096,'num_hidden_layers':4096,"
                  "'intermediate_size':64,'vocab_size':300,'n_routed_experts':65536,'moe_intermediate_size':4194304,"
                  "'first_k_dense_replace':0}",
                  RC_ERR_FORMAT, "model sizes are too large");
}
END_TEST

/* Every family table: field ids in range, and every field the lists say is
 * present under the family's forward details has a tensor. */
START_TEST(test_family_tables_cover_fields)
{
    const rc_arch *const *all = rc_arch_all();
    ck_assert_ptr_eq(all[0], rc_arch_for_model_type("gpt_neox"));
    ck_assert_ptr_eq(all[1], rc_arch_for_model_type("llama"));
    for (size_t i = 0; all[i]; i++) {
        const rc_arch *a = all[i];
        ck_assert_ptr_eq(rc_arch_for_model_type(a->model_types[0]), a);
        ck_assert_ptr_nonnull(a->keys);
        ck_assert_str_eq(a->keys[0].keys[0], "vocab_size");
        bool model_seen[RC_N_MODEL_WEIGHTS] = {0}, layer_seen[RC_N_LAYER_WEIGHTS] = {0};
        for (const rc_tensor_spec *t = a->model_tensors; t->name; t++) {
            ck_assert(t->field >= 0 && t->field < RC_N_MODEL_WEIGHTS);
            model_seen[t->field] = true;
        }
        for (const rc_tensor_spec *t = a->layer_tensors; t->name; t++) {
            ck_assert(t->field >= 0 && t->field < RC_N_LAYER_WEIGHTS);
            layer_seen[t->field] = true;
        }
        ck_assert_msg(model_seen[RC_MW_embed] && model_seen[RC_MW_lnf_w] &&
                          (model_seen[RC_MW_lm_head] || a->forward.head == RC_HEAD_TIED),
                      "%s", a->family);
        /* the fused q/k/v projection, or latent attention's (DeepSeek-V3: q, kv_a with its norm, kv_b) */
        const bool mla = layer_seen[RC_LW_w_mq] && layer_seen[RC_LW_w_mkva] && layer_seen[RC_LW_mkv_ln_w] &&
                         layer_seen[RC_LW_w_mkvb];
        ck_assert_msg(layer_seen[RC_LW_ln1_w] && layer_seen[RC_LW_ln2_w] && (layer_seen[RC_LW_w_qkv] || mla) &&
                          layer_seen[RC_LW_w_o],
                      "%s", a->family);
        /* a dense MLP in every family that can have a dense layer (Mixtral's are all MoE: its experts and
         * router come from rc_expert_spec) */
        const bool all_moe = a->experts && (strcmp(a->family, "mixtral") == 0 || strcmp(a->family, "gpt_oss") == 0);
        ck_assert_msg(all_moe || (layer_seen[RC_LW_w_up] && layer_seen[RC_LW_w_down]), "%s", a->family);
        ck_assert_int_eq(layer_seen[RC_LW_w_gate], a->forward.mlp == RC_MLP_GATED && !all_moe);
        if (a->experts && a->experts->fused_transposed_interleaved) /* gpt-oss: fused tensors only, with biases */
            ck_assert(a->experts->router_fused && a->experts->fused_gate_up && a->experts->fused_down &&
                      a->experts->router_bias && a->experts->fused_gate_up_bias && a->experts->fused_down_bias);
        else if (a->experts)
            ck_assert(a->experts->router && a->experts->per_expert && a->experts->gate && a->experts->up &&
                      a->experts->down && a->experts->fused_gate_up && a->experts->fused_down);
        ck_assert_int_eq(model_seen[RC_MW_lnf_b], a->forward.norm_bias);
    }
}
END_TEST

START_TEST(test_layout_helpers)
{
    /* 2 heads of head_dim 2: stored rows per head q0 q1 k0 k1 v0 v1 */
    rc_config c;
    memset(&c, 0, sizeof c);
    c.n_heads = 2;
    c.head_dim = 2;
    float w[12 * 2], b[12];
    uint16_t w16[12 * 2]; /* the same layout in 2-byte elements (a bf16 / fp16 checkpoint's copy) */
    for (int r = 0; r < 12; r++) {
        w[2 * r] = (float)r;
        w[2 * r + 1] = (float)(100 + r);
        w16[2 * r] = (uint16_t)r;
        w16[2 * r + 1] = (uint16_t)(100 + r);
        b[r] = (float)r;
    }
    ck_assert_int_eq(rc_qkv_deinterleave_per_head(&c, w, 4, 12, 2), RC_OK);
    ck_assert_int_eq(rc_qkv_deinterleave_per_head(&c, w16, 2, 12, 2), RC_OK);
    ck_assert_int_eq(rc_qkv_deinterleave_per_head(&c, b, 4, 12, 1), RC_OK);
    /* all Q (head 0 then head 1), then K, then V */
    const int want[12] = {0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11};
    for (int r = 0; r < 12; r++) {
        ck_assert(w[2 * r] == (float)want[r] && w[2 * r + 1] == (float)(100 + want[r]));
        ck_assert(w16[2 * r] == want[r] && w16[2 * r + 1] == 100 + want[r]);
        ck_assert(b[r] == (float)want[r]);
    }
    /* Conv1D [in 2, out 3] -> [out 3, in 2] */
    float m[6] = {1, 2, 3, 4, 5, 6};
    uint16_t m16[6] = {1, 2, 3, 4, 5, 6};
    ck_assert_int_eq(rc_conv1d_transpose(&c, m, 4, 2, 3), RC_OK);
    ck_assert_int_eq(rc_conv1d_transpose(&c, m16, 2, 2, 3), RC_OK);
    const float t[6] = {1, 4, 2, 5, 3, 6};
    for (int i = 0; i < 6; i++)
        ck_assert(m[i] == t[i] && m16[i] == (uint16_t)t[i]);
}
END_TEST

START_TEST(test_family_forward_defaults)
{
    rc_config c;
    parse_ok("{'model_type':'gpt_neox','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':1,"
             "'intermediate_size':128,'vocab_size':300}",
             &c);
    ck_assert(c.norm == RC_NORM_LAYER && c.norm_bias && c.parallel_residual && !c.gated_mlp &&
              !c.tie_embeddings && c.pos == RC_POS_ROTARY && c.act == RC_ACT_GELU_ERF);
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':1,"
             "'intermediate_size':128,'vocab_size':300}",
             &c);
    ck_assert(c.norm == RC_NORM_RMS && !c.norm_bias && !c.parallel_residual && c.gated_mlp &&
              !c.tie_embeddings && c.pos == RC_POS_ROTARY && c.act == RC_ACT_SILU);
}
END_TEST

/* DeepSeek-V3: latent attention's keys and what follows from them; the MoE
 * keys (the grouped sigmoid router) range-checked; MoE layers from
 * first_k_dense_replace on. */
#define DSV3_BASE                                                                                                   \
    "{'model_type':'deepseek_v3','vocab_size':128,'hidden_size':80,'num_hidden_layers':2,"                         \
    "'num_attention_heads':5,'intermediate_size':56,'kv_lora_rank':40,'qk_nope_head_dim':16,"                     \
    "'qk_rope_head_dim':8,'v_head_dim':12,'first_k_dense_replace':2,'n_routed_experts':8,'n_group':2,"            \
    "'topk_group':1,'num_experts_per_tok':2"
START_TEST(test_deepseek_v3_config)
{
    rc_config c;
    parse_ok(DSV3_BASE ",'q_lora_rank':48}", &c);
    ck_assert(c.mla && c.q_lora_rank == 48 && c.kv_lora_rank == 40 && c.qk_nope_dim == 16 && c.qk_rope_dim == 8 &&
              c.v_head_dim == 12);
    ck_assert_int_eq(c.head_dim, 24); /* the expanded attention's q / k width */
    ck_assert_int_eq(c.n_kv_heads, 5);
    ck_assert_int_eq(c.rotary_dim, 8);
    ck_assert(c.rope_interleave && !c.qkv_bias && !c.o_bias && c.gated_mlp && c.act == RC_ACT_SILU);
    ck_assert(c.mla_norm_eps == 1e-6 && c.norm_eps == 1e-6 && c.bos_id == 0 && c.max_pos == 4096);
    ck_assert(c.softmax_scale == pow(24.0, -0.5)); /* no rope scaling: qk_head_dim ** -0.5 */
    ck_assert_int_eq(c.n_experts, 0);              /* every layer dense */
    /* weights: embed + head, final norm; per layer 2 norms, q_a (+ norm), q_b, kv_a (+ norm), kv_b, o, MLP */
    int64_t n;
    ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
    const int64_t layer = 2 * 80 + 48 * 80 + 48 + 5 * 24 * 48 + 48 * 80 + 40 + 5 * 28 * 40 + 80 * 60 + 3 * 56 * 80;
    ck_assert_int_eq(n, 2 * 128 * 80 + 80 + 2 * layer);
    /* q_lora_rank null: a plain q_proj; attention_bias; yarn's mscale_all_dim on the softmax scale */
    parse_ok(DSV3_BASE ",'q_lora_rank':null,'attention_bias':true,'rope_interleave':false,"
             "'rope_scaling':{'type':'yarn','factor':40,'mscale':1.0,'mscale_all_dim':0.707,"
             "'original_max_position_embeddings':4096}}",
             &c);
    ck_assert(c.q_lora_rank == 0 && c.qkv_bias && c.o_bias && !c.rope_interleave && c.rope_type == RC_ROPE_YARN);
    const double m = 0.1 * 0.707 * log(40.0) + 1.0;
    ck_assert(c.softmax_scale == pow(24.0, -0.5) * m * m);
    /* cos / sin: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) */
    ck_assert_double_eq_tol(c.rope_attn_factor, (0.1 * log(40.0) + 1.0) / m, 1e-15);
    ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
    const int64_t layer2 = 2 * 80 + 5 * 24 * 80 + 48 * 80 + 48 + 40 + 5 * 28 * 40 + 80 * 60 + 80 + 3 * 56 * 80;
    ck_assert_int_eq(n, 2 * 128 * 80 + 80 + 2 * layer2);
    /* MoE layers (first_k_dense_replace 1 of 2): the grouped sigmoid router with DeepseekV3Config's defaults */
    parse_ok("{'model_type':'deepseek_v3','vocab_size':128,'hidden_size':80,'num_hidden_layers':2,"
             "'num_attention_heads':5,'intermediate_size':56,'first_k_dense_replace':1}",
             &c);
    ck_assert_int_eq(c.n_experts, 256);
    ck_assert_int_eq(c.top_k, 8);
    ck_assert_int_eq(c.moe_intermediate, 2048);
    ck_assert_int_eq(c.n_group, 8);
    ck_assert_int_eq(c.topk_group, 4);
    ck_assert_int_eq(c.shared_intermediate, 2048);
    ck_assert(c.router == RC_ROUTER_SIGMOID_GROUPED && c.router_gate_f32 && c.router_bias && c.moe_weights_f32 &&
              c.shared_ungated && c.norm_topk_prob && c.routed_scale == 2.5);
    ck_assert(!rc_layer_is_moe(&c, 0) && rc_layer_is_moe(&c, 1));
    parse_ok(DSV3_BASE ",'first_k_dense_replace':0,'n_shared_experts':2,'moe_intermediate_size':12,"
             "'routed_scaling_factor':1.5,'norm_topk_prob':false,'moe_layer_freq':1}",
             &c);
    ck_assert(c.n_experts == 8 && c.top_k == 2 && c.n_group == 2 && c.topk_group == 1);
    ck_assert(c.shared_intermediate == 24 && c.routed_scale == 1.5 && !c.norm_topk_prob);
    ck_assert(rc_layer_is_moe(&c, 0) && rc_layer_is_moe(&c, 1));
    EXPECT_REJECT(DSV3_BASE ",'n_group':3}", RC_ERR_FORMAT, "do not make n_group 3 groups");
    EXPECT_REJECT(DSV3_BASE ",'topk_group':3}", RC_ERR_FORMAT, "topk_group 3 exceeds n_group 2");
    EXPECT_REJECT(DSV3_BASE ",'num_experts_per_tok':5}", RC_ERR_FORMAT, "num_experts_per_tok 5 exceeds");
    EXPECT_REJECT(DSV3_BASE ",'routed_scaling_factor':0}", RC_ERR_FORMAT, "routed_scaling_factor");
    EXPECT_REJECT(DSV3_BASE ",'scoring_func':'softmax'}", RC_ERR_UNSUPPORTED, "scoring_func \"softmax\"");
    EXPECT_REJECT(DSV3_BASE ",'topk_method':'greedy'}", RC_ERR_UNSUPPORTED, "topk_method \"greedy\"");
    /* the same refusals on a config with MoE layers (DeepSeek-V2's softmax / greedy router is another model) */
    EXPECT_REJECT(DSV3_BASE ",'first_k_dense_replace':1,'scoring_func':'softmax'}", RC_ERR_UNSUPPORTED,
                  "scoring_func \"softmax\"", "supported: sigmoid");
    EXPECT_REJECT(DSV3_BASE ",'first_k_dense_replace':1,'topk_method':'group_limited_greedy'}", RC_ERR_UNSUPPORTED,
                  "topk_method \"group_limited_greedy\"", "supported: noaux_tc");
    EXPECT_REJECT(DSV3_BASE ",'first_k_dense_replace':1,'moe_layer_freq':2}", RC_ERR_UNSUPPORTED,
                  "moe_layer_freq 2");
    EXPECT_REJECT(DSV3_BASE ",'v_head_dim':32}", RC_ERR_UNSUPPORTED, "v_head_dim 32 is wider");
    EXPECT_REJECT(DSV3_BASE ",'num_key_value_heads':1}", RC_ERR_FORMAT, "num_key_value_heads 1 differs");
    EXPECT_REJECT(DSV3_BASE ",'qk_rope_head_dim':7}", RC_ERR_FORMAT, "qk_rope_head_dim 7 is odd");
}
END_TEST

/* DeepSeek-V3's published config.json (deepseek-ai/DeepSeek-V3, as on its model card): it parses with its MoE
 * layers; its 61 layers of fp32 weights (2.7 TB) pass the loader's 1 TiB limit, its first 4 do not (the
 * counts by the formula of the weight lists; transformers' DeepseekV3ForCausalLM built on the meta device from
 * this config counts the same 671,026,419,200, and 15,111,101,696 for 4 layers) */
START_TEST(test_deepseek_v3_published_layers)
{
    static const char cfg[] =
        "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
        "\"bos_token_id\":0,\"eos_token_id\":1,\"ep_size\":1,\"first_k_dense_replace\":3,"
        "\"hidden_act\":\"silu\",\"hidden_size\":7168,\"initializer_range\":0.02,\"intermediate_size\":18432,"
        "\"kv_lora_rank\":512,\"max_position_embeddings\":163840,\"model_type\":\"deepseek_v3\","
        "\"moe_intermediate_size\":2048,\"moe_layer_freq\":1,\"n_group\":8,\"n_routed_experts\":256,"
        "\"n_shared_experts\":1,\"norm_topk_prob\":true,\"num_attention_heads\":128,"
        "\"num_experts_per_tok\":8,\"num_hidden_layers\":61,\"num_key_value_heads\":128,"
        "\"num_nextn_predict_layers\":1,\"q_lora_rank\":1536,\"qk_nope_head_dim\":128,"
        "\"qk_rope_head_dim\":64,\"rms_norm_eps\":1e-06,\"rope_scaling\":{\"beta_fast\":32,\"beta_slow\":1,"
        "\"factor\":40,\"mscale\":1.0,\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":4096,"
        "\"type\":\"yarn\"},\"rope_theta\":10000,\"routed_scaling_factor\":2.5,\"scoring_func\":\"sigmoid\","
        "\"tie_word_embeddings\":false,\"topk_group\":4,\"topk_method\":\"noaux_tc\","
        "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"v_head_dim\":128,\"vocab_size\":129280}";
    json_error_t je;
    json_t *root = json_loads(cfg, 0, &je);
    ck_assert_ptr_nonnull(root);
    rc_config c;
    rc_status s = rc_config_parse(root, "config.json", &c);
    json_decref(root);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    ck_assert(c.n_layers == 61 && c.n_experts == 256 && c.top_k == 8 && c.n_group == 8 && c.topk_group == 4);
    ck_assert(!rc_layer_is_moe(&c, 2) && rc_layer_is_moe(&c, 3) && rc_layer_is_moe(&c, 60));
    const int64_t H = 7168, nh = 128, QL = 1536, KVL = 512, dn = 128, dr = 64, dv = 128, V = 129280, I = 18432,
                  E = 256, Im = 2048;
    const int64_t attn = 2 * H + QL * H + QL + nh * (dn + dr) * QL + (KVL + dr) * H + KVL + nh * (dn + dv) * KVL +
                         H * nh * dv;
    const int64_t dense = attn + 3 * I * H, moe = attn + E * H + E + E * 3 * Im * H + 3 * Im * H;
    int64_t n;
    ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
    ck_assert_int_eq(n, 2 * V * H + H + 3 * dense + 58 * moe);
    ck_assert_int_gt(n, RC_MAX_ALLOC / 4);
    c.n_layers = 4; /* --layers 4 */
    ck_assert_int_eq(rc_weights_numel(&c, &n), RC_OK);
    ck_assert_int_eq(n, 2 * V * H + H + 3 * dense + moe);
    ck_assert_int_le(n, RC_MAX_ALLOC / 4);
    /* the loader: refused for the size without --layers, past it with --layers 4 (no weight files here) */
    char dir[4096], path[4200];
    rc_test_fresh_dir(dir, sizeof dir, "/tmp");
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(cfg, f);
    fclose(f);
    rc_model *m = NULL;
    ck_assert_int_eq(rc_model_load_headers(dir, &m), RC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "model sizes are too large"));
    ck_assert_int_eq(rc_model_load_layers(dir, 4, true, &m), RC_ERR_IO);
    ck_assert_ptr_null(m);
    remove(path);
    rmdir(dir);
}
END_TEST

void family_tests_in_family_structure(TCase *tc)
{
    tcase_add_test(tc, test_int_alias_reader);
    tcase_add_test(tc, test_registry_list);
    tcase_add_test(tc, test_weights_numel_matches_families);
    tcase_add_test(tc, test_new_family_configs);
    tcase_add_test(tc, test_new_family_bad_configs);
    tcase_add_test(tc, test_weights_too_large_by_biases);
    tcase_add_test(tc, test_family_tables_cover_fields);
    tcase_add_test(tc, test_deepseek_v3_config);
    tcase_add_test(tc, test_deepseek_v3_published_layers);
}

void family_tests_in_family_structure_2(TCase *tc)
{
    tcase_add_test(tc, test_layout_helpers);
    tcase_add_test(tc, test_family_forward_defaults);
}
