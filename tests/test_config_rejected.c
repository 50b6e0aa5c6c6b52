/* test_config_rejected.c: test_config's rejected configs (and the few accepted values tested
 * beside them) (test_config.c holds the fixtures and the suite). */
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
/* rejections                                                               */

START_TEST(test_missing_model_type)
{
    EXPECT_REJECT("{'hidden_size':64,'num_attention_heads':4,'num_hidden_layers':1,"
                  "'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "model_type", "missing");
    EXPECT_REJECT("{'model_type':7,'hidden_size':64}", RC_ERR_FORMAT, "model_type", "string");
}
END_TEST

START_TEST(test_unsupported_model_type)
{
    EXPECT_REJECT("{'model_type':'gptj','n_embd':768,'n_layer':12,'n_head':12,'vocab_size':50257}",
                  RC_ERR_UNSUPPORTED, "\"gptj\"", "not supported", "gpt_neox", "llama", "mistral",
                  "qwen2", "gpt2", "bloom", "mpt", "baichuan");
}
END_TEST

START_TEST(test_missing_hidden_size)
{
    EXPECT_REJECT("{'model_type':'llama','num_attention_heads':4,'num_hidden_layers':1,"
                  "'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "\"hidden_size\"", "missing");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':null,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "\"hidden_size\"", "missing");
}
END_TEST

static const struct {
    const char *value;
    const char *phrase;
} k_bad_hidden[] = {
    {"0", "out of range"},   {"-64", "out of range"}, {"4.5", "integer"},
    {"'64'", "integer"},     {"1e30", "integer"},     {"true", "integer"},
    {"[64]", "integer"},     {"2097152", "out of range"},
};

START_TEST(test_bad_hidden_size)
{
    char json[512];
    snprintf(json, sizeof json,
             "{'model_type':'llama','hidden_size':%s,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300}",
             k_bad_hidden[_i].value);
    EXPECT_REJECT(json, RC_ERR_FORMAT, "\"hidden_size\"", k_bad_hidden[_i].phrase);
}
END_TEST

START_TEST(test_heads_not_dividing_hidden)
{
    EXPECT_REJECT("{'model_type':'llama','hidden_size':100,'num_attention_heads':8,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "hidden_size 100", "num_attention_heads 8", "multiple");
    EXPECT_REJECT("{'model_type':'gpt_neox','hidden_size':100,'num_attention_heads':8,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "hidden_size 100", "num_attention_heads 8", "multiple");
}
END_TEST

START_TEST(test_kv_heads_not_dividing)
{
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':8,"
                  "'num_key_value_heads':3,'num_hidden_layers':1,'intermediate_size':128,"
                  "'vocab_size':300}",
                  RC_ERR_FORMAT, "num_key_value_heads", "3", "multiple");
}
END_TEST

START_TEST(test_kv_heads_above_heads)
{
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_key_value_heads':8,'num_hidden_layers':1,'intermediate_size':128,"
                  "'vocab_size':300}",
                  RC_ERR_FORMAT, "num_key_value_heads", "8");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_key_value_heads':0,'num_hidden_layers':1,'intermediate_size':128,"
                  "'vocab_size':300}",
                  RC_ERR_FORMAT, "num_key_value_heads");
}
END_TEST

/* YaRN (transformers' _compute_yarn_parameters): the scaling keys, their
 * defaults and the attention factor; the inv_freq values are tested against
 * transformers in test_ops (data/fixtures/ops/yarn.safetensors). */
START_TEST(test_rope_yarn)
{
    rc_config c;
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'rope_scaling':{'rope_type':'yarn','factor':4.0,"
             "'original_max_position_embeddings':4096}}", &c);
    ck_assert_int_eq(c.rope_type, RC_ROPE_YARN);
    ck_assert(c.rope_factor == 4.0 && c.rope_orig_max_pos == 4096);
    ck_assert(c.rope_beta_fast == 32.0 && c.rope_beta_slow == 1.0 && c.rope_truncate);
    ck_assert(c.rope_attn_factor == 0.1 * log(4.0) + 1.0); /* get_mscale(factor) */
    /* no original_max_position_embeddings: max_position_embeddings (standardize_rope_params) */
    parse_ok("{'model_type':'qwen2','hidden_size':64,'num_attention_heads':4,'max_position_embeddings':1000,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'rope_parameters':{'rope_type':'yarn','rope_theta':10000,'factor':4.0,'beta_fast':null,"
             "'beta_slow':0,'truncate':false,'mscale':2.0,'mscale_all_dim':1.0}}", &c);
    ck_assert(c.rope_orig_max_pos == 1000 && c.rope_beta_fast == 32.0 && c.rope_beta_slow == 1.0);
    ck_assert(!c.rope_truncate);
    ck_assert(c.rope_attn_factor == (0.1 * 2.0 * log(4.0) + 1.0) / (0.1 * log(4.0) + 1.0));
    /* a top-level original_max_position_embeddings wins; attention_factor given; factor <= 1: mscale 1 */
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,'original_max_position_embeddings':77,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'rope_parameters':{'rope_type':'yarn','rope_theta':10000,'factor':4.0,'attention_factor':0.5,"
             "'original_max_position_embeddings':4096}}", &c);
    ck_assert(c.rope_orig_max_pos == 77 && c.rope_attn_factor == 0.5);
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'rope_parameters':{'rope_type':'yarn','rope_theta':10000,'factor':1.0}}", &c);
    ck_assert(c.rope_attn_factor == 1.0);
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'rope_parameters':{'rope_type':'yarn','rope_theta':10000}}",
                  RC_ERR_FORMAT, "yarn", "factor");
}
END_TEST

START_TEST(test_rope_dynamic_rejected)
{
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'rope_scaling':{'type':'dynamic','factor':2.0}}",
                  RC_ERR_UNSUPPORTED, "\"dynamic\"", "not supported");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'rope_scaling':'linear'}",
                  RC_ERR_FORMAT, "rope_scaling");
}
END_TEST

START_TEST(test_llama3_missing_orig_max)
{
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'rope_scaling':{'rope_type':'llama3','factor':8.0,'low_freq_factor':1.0,"
                  "'high_freq_factor':4.0}}",
                  RC_ERR_FORMAT, "llama3", "original_max_position_embeddings");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'rope_scaling':{'rope_type':'llama3','factor':8.0,'high_freq_factor':4.0,"
                  "'original_max_position_embeddings':8192}}",
                  RC_ERR_FORMAT, "llama3", "low_freq_factor");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'rope_scaling':{'rope_type':'linear'}}",
                  RC_ERR_FORMAT, "linear", "factor");
}
END_TEST

START_TEST(test_odd_rotary_dim)
{
    EXPECT_REJECT("{'model_type':'gpt_neox','hidden_size':48,'num_attention_heads':2,"
                  "'num_hidden_layers':1,'intermediate_size':192,'vocab_size':300,"
                  "'rotary_pct':0.125}",
                  RC_ERR_UNSUPPORTED, "rotary dimension 3", "odd");
}
END_TEST

START_TEST(test_hidden_act_rejected)
{
    EXPECT_REJECT("{'model_type':'gpt_neox','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'hidden_act':'relu'}",
                  RC_ERR_UNSUPPORTED, "hidden_act", "\"relu\"", "not supported");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'hidden_act':'relu'}",
                  RC_ERR_UNSUPPORTED, "hidden_act", "\"relu\"", "not supported");
}
END_TEST

START_TEST(test_qwen2_sliding_window_rejected)
{
    EXPECT_REJECT("{'model_type':'qwen2','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'use_sliding_window':true,'sliding_window':4096}",
                  RC_ERR_UNSUPPORTED, "use_sliding_window");
}
END_TEST

START_TEST(test_duplicate_keys_rejected)
{
    const char *text = "{\"model_type\":\"llama\",\"model_type\":\"llama\",\"hidden_size\":64,"
                       "\"num_attention_heads\":4,\"num_hidden_layers\":1,"
                       "\"intermediate_size\":128,\"vocab_size\":300}";
    const char *path = write_config(text, strlen(text));
    rc_config c;
    rc_clear_error();
    rc_status s = rc_config_load(g_dir, &c);
    expect_msg_(__FILE__, __LINE__, s, RC_ERR_FORMAT, path, "duplicate", (char *)NULL);
}
END_TEST

START_TEST(test_invalid_utf8_rejected)
{
    const char *text = "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
                       "\"num_hidden_layers\":1,\"intermediate_size\":128,\"vocab_size\":300,"
                       "\"_name_or_path\":\"caf\xe9\"}";
    const char *path = write_config(text, strlen(text));
    rc_config c;
    rc_clear_error();
    rc_status s = rc_config_load(g_dir, &c);
    expect_msg_(__FILE__, __LINE__, s, RC_ERR_FORMAT, path, "UTF-8", (char *)NULL);
}
END_TEST

START_TEST(test_not_an_object_rejected)
{
    const char *text = "[{\"model_type\":\"llama\"}]";
    const char *path = write_config(text, strlen(text));
    rc_config c;
    rc_clear_error();
    rc_status s = rc_config_load(g_dir, &c);
    expect_msg_(__FILE__, __LINE__, s, RC_ERR_FORMAT, path, "object", (char *)NULL);
}
END_TEST

START_TEST(test_sizes_too_large)
{
    /* each size is within its own limit; the product is not */
    EXPECT_REJECT("{'model_type':'llama','hidden_size':1000000,'num_attention_heads':250,"
                  "'num_hidden_layers':4096,'intermediate_size':4000000,"
                  "'vocab_size':16000000}",
                  RC_ERR_FORMAT, "too large");
    EXPECT_REJECT("{'model_type':'gpt_neox','hidden_size':1000000,'num_attention_heads':250,"
                  "'num_hidden_layers':4096,'intermediate_size':4000000,"
                  "'vocab_size':16000000,'rotary_pct':0.5}",
                  RC_ERR_FORMAT, "too large");
    /* a single over-limit size is named */
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':100000000}",
                  RC_ERR_FORMAT, "\"vocab_size\"", "out of range");
}
END_TEST

/* (eos ids not below vocab_size are a warning, as in transformers: test_hf_ignored_keys) */
START_TEST(test_eos_out_of_vocab)
{
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'eos_token_id':[2,-1]}",
                  RC_ERR_FORMAT, "eos_token_id");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'eos_token_id':'2'}",
                  RC_ERR_FORMAT, "eos_token_id");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'bos_token_id':300}",
                  RC_ERR_FORMAT, "bos_token_id", "300");
}
END_TEST

START_TEST(test_layer_norm_eps_not_number)
{
    EXPECT_REJECT("{'model_type':'gpt_neox','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'layer_norm_eps':'1e-5'}",
                  RC_ERR_FORMAT, "\"layer_norm_eps\"", "number");
    EXPECT_REJECT("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'rms_norm_eps':true}",
                  RC_ERR_FORMAT, "\"rms_norm_eps\"", "number");
    EXPECT_REJECT("{'model_type':'gpt_neox','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'layer_norm_eps':-1e-5}",
                  RC_ERR_FORMAT, "\"layer_norm_eps\"", "out of range");
}
END_TEST

/* Norm epsilons must be positive (and stay positive as fp32, where the
 * forward adds them), at most 1: 0 gives 0/0 = NaN on an all-zero row. */
#define EPS_CFG(family, key, val)                                                   \
    "{'model_type':'" family "','hidden_size':64,'num_attention_heads':4,"          \
    "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,'" key "':" val "}"

START_TEST(test_norm_eps_rejected)
{
    static const char *const k_bad[] = {"0", "0.0", "-0.0", "-1e-6", "1e-50", "1e-46", "1.5", "1e30"};
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        char j[512];
        rc_config c;
        snprintf(j, sizeof j, EPS_CFG("llama", "rms_norm_eps", "%s"), k_bad[i]);
        rc_status s = parse(j, &c);
        expect_msg_(__FILE__, __LINE__, s, RC_ERR_FORMAT, CFG, "\"rms_norm_eps\"", "out of range",
                    (char *)NULL);
        snprintf(j, sizeof j, EPS_CFG("gpt_neox", "layer_norm_eps", "%s"), k_bad[i]);
        s = parse(j, &c);
        expect_msg_(__FILE__, __LINE__, s, RC_ERR_FORMAT, CFG, "\"layer_norm_eps\"", "out of range",
                    (char *)NULL);
    }
    /* through the folder: one line naming config.json and the key */
    char *text = dq(EPS_CFG("qwen2", "rms_norm_eps", "0"));
    const char *path = write_config(text, strlen(text));
    free(text);
    rc_config c;
    rc_clear_error();
    rc_status s = rc_config_load(g_dir, &c);
    expect_msg_(__FILE__, __LINE__, s, RC_ERR_FORMAT, path, "\"rms_norm_eps\"", (char *)NULL);
    ck_assert(strchr(rc_last_error(), '\n') == NULL);
}
END_TEST

START_TEST(test_norm_eps_accepted)
{
    static const char *const k_ok[] = {"1e-12", "1e-30", "1e-5", "1e-06", "0.5", "1"};
    static const double k_val[] = {1e-12, 1e-30, 1e-5, 1e-6, 0.5, 1.0};
    for (size_t i = 0; i < sizeof k_ok / sizeof k_ok[0]; i++) {
        char j[512];
        rc_config c;
        snprintf(j, sizeof j, EPS_CFG("mistral", "rms_norm_eps", "%s"), k_ok[i]);
        parse_ok(j, &c);
        ck_assert(c.norm_eps == k_val[i]);
        snprintf(j, sizeof j, EPS_CFG("gpt_neox", "layer_norm_eps", "%s"), k_ok[i]);
        parse_ok(j, &c);
        ck_assert(c.norm_eps == k_val[i]);
    }
}
END_TEST

START_TEST(test_bad_bool_field)
{
    EXPECT_REJECT("{'model_type':'gpt_neox','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
                  "'use_parallel_residual':'true'}",
                  RC_ERR_FORMAT, "\"use_parallel_residual\"", "true or false");
}
END_TEST

void rejected_tests_in_valid(TCase *tc)
{
    tcase_add_test(tc, test_rope_yarn);
}

void rejected_tests_in_valid_2(TCase *tc)
{
    tcase_add_test(tc, test_norm_eps_accepted);
}

void rejected_tests_in_rejected(TCase *tc)
{
    tcase_add_test(tc, test_missing_model_type);
    tcase_add_test(tc, test_unsupported_model_type);
    tcase_add_test(tc, test_missing_hidden_size);
    tcase_add_loop_test(tc, test_bad_hidden_size, 0,
                        (int)(sizeof k_bad_hidden / sizeof k_bad_hidden[0]));
    tcase_add_test(tc, test_heads_not_dividing_hidden);
    tcase_add_test(tc, test_kv_heads_not_dividing);
    tcase_add_test(tc, test_kv_heads_above_heads);
    tcase_add_test(tc, test_rope_dynamic_rejected);
}

void rejected_tests_in_rejected_2(TCase *tc)
{
    tcase_add_test(tc, test_llama3_missing_orig_max);
    tcase_add_test(tc, test_odd_rotary_dim);
    tcase_add_test(tc, test_hidden_act_rejected);
    tcase_add_test(tc, test_qwen2_sliding_window_rejected);
    tcase_add_test(tc, test_duplicate_keys_rejected);
    tcase_add_test(tc, test_invalid_utf8_rejected);
    tcase_add_test(tc, test_not_an_object_rejected);
    tcase_add_test(tc, test_sizes_too_large);
    tcase_add_test(tc, test_eos_out_of_vocab);
    tcase_add_test(tc, test_layer_norm_eps_not_number);
    tcase_add_test(tc, test_bad_bool_field);
    tcase_add_test(tc, test_norm_eps_rejected);
}
