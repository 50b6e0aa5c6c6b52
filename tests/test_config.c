/* Check suite for config.json parsing (src/engine/hf_config.c, models/gpt_neox.c,
 * models/llama.c).
 *
 * Configs are written inline with ' for " and parsed with rc_config_parse
 * under the name "cfg.json"; the cases that depend on the file bytes
 * (duplicate keys, invalid UTF-8) go through rc_config_load on a temp folder.
 *
 * This file holds the helpers, the valid configs and the suite; the rejections
 * are in test_config_rejected.c, the family structure in test_config_family.c
 * (test_config.h).
 */
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
/* helpers                                                                  */

char *dq(const char *sq)
{
    char *s = strdup(sq);
    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return s;
}

/* Parse a config written with ' for ". */
rc_status parse(const char *json_sq, rc_config *cfg)
{
    char *text = dq(json_sq);
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    ck_assert_msg(root != NULL, "test JSON does not parse: %s: %s", err.text, text);
    free(text);
    rc_clear_error();
    memset(cfg, 0xA5, sizeof *cfg); /* make sure every field is written */
    rc_status s = rc_config_parse(root, CFG, cfg);
    json_decref(root);
    return s;
}

void parse_ok(const char *json_sq, rc_config *cfg)
{
    rc_status s = parse(json_sq, cfg);
    ck_assert_msg(s == RC_OK, "config rejected: %s: %s", rc_status_name(s), rc_last_error());
}

void expect_msg_(const char *file, int line, int got, int want, ...)
{
    const char *msg = rc_last_error();
    ck_assert_msg(got == want, "%s:%d: status \"%s\", expected \"%s\" (message: %s)", file, line,
                  rc_status_name((rc_status)got), rc_status_name((rc_status)want), msg);
    va_list ap;
    va_start(ap, want);
    const char *sub;
    while ((sub = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(strstr(msg, sub) != NULL, "%s:%d: error \"%s\" does not contain \"%s\"", file,
                      line, msg, sub);
    va_end(ap);
}

/* Parse json_sq, expect status `want` and a message containing "cfg.json" and
 * every listed phrase. */

/* A temp folder per test; a per-run base folder removed by main(). */
static char g_base[256];
char g_dir[512];

static void setup(void)
{
    rc_test_fresh_dir(g_dir, sizeof g_dir, g_base);
}

static void teardown(void) { rc_test_rm_rf(g_dir); }

const char *write_config(const void *bytes, size_t n)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/* ------------------------------------------------------------------------ */
/* valid configs                                                            */

static const char *k_pythia =
    "{'architectures':['GPTNeoXForCausalLM'],'bos_token_id':0,'eos_token_id':0,"
    "'hidden_act':'gelu','hidden_size':512,'initializer_range':0.02,"
    "'intermediate_size':2048,'layer_norm_eps':1e-05,'max_position_embeddings':2048,"
    "'model_type':'gpt_neox','num_attention_heads':8,'num_hidden_layers':6,"
    "'rotary_emb_base':10000,'rotary_pct':0.25,'tie_word_embeddings':false,"
    "'torch_dtype':'float16','transformers_version':'4.24.0','use_cache':true,"
    "'use_parallel_residual':true,'vocab_size':50304}";

static void check_pythia(const rc_config *c)
{
    ck_assert_str_eq(c->model_type, "gpt_neox");
    ck_assert_ptr_nonnull(c->arch);
    ck_assert_str_eq(c->arch->family, "gpt_neox");
    ck_assert_int_eq(c->n_layers, 6);
    ck_assert_int_eq(c->hidden, 512);
    ck_assert_int_eq(c->n_heads, 8);
    ck_assert_int_eq(c->n_kv_heads, 8);
    ck_assert_int_eq(c->head_dim, 64);
    ck_assert_int_eq(c->intermediate, 2048);
    ck_assert_int_eq(c->vocab, 50304);
    ck_assert_int_eq(c->max_pos, 2048);
    ck_assert(c->norm_eps == 1e-5);
    ck_assert_int_eq(c->norm, RC_NORM_LAYER);
    ck_assert_int_eq(c->act, RC_ACT_GELU_ERF);
    ck_assert(!c->gated_mlp);
    ck_assert(c->parallel_residual);
    ck_assert(!c->tie_embeddings);
    ck_assert(c->qkv_bias);
    ck_assert(c->o_bias);
    ck_assert(c->mlp_bias);
    ck_assert(c->norm_bias);
    ck_assert_int_eq(c->rotary_dim, 16);
    ck_assert(c->rope_theta == 10000.0);
    ck_assert_int_eq(c->rope_type, RC_ROPE_DEFAULT);
    ck_assert(c->rope_factor == 1.0);
    ck_assert_int_eq(c->sliding_window, 0);
    ck_assert_int_eq(c->bos_id, 0);
    ck_assert_int_eq(c->n_eos, 1);
    ck_assert_int_eq(c->eos_ids[0], 0);
}

START_TEST(test_pythia_old_keys)
{
    rc_config c;
    parse_ok(k_pythia, &c);
    check_pythia(&c);
}
END_TEST

START_TEST(test_pythia_load_from_folder)
{
    char *text = dq(k_pythia);
    write_config(text, strlen(text));
    free(text);
    rc_config c;
    memset(&c, 0xA5, sizeof c);
    rc_status s = rc_config_load(g_dir, &c);
    ck_assert_msg(s == RC_OK, "%s", rc_last_error());
    check_pythia(&c);
}
END_TEST

START_TEST(test_load_missing_config)
{
    rc_config c;
    rc_clear_error();
    rc_status s = rc_config_load(g_dir, &c);
    expect_msg_(__FILE__, __LINE__, s, RC_ERR_IO, g_dir, "config.json", (char *)NULL);
}
END_TEST

START_TEST(test_neox_v5_rope_parameters)
{
    rc_config c;
    parse_ok("{'model_type':'gpt_neox','hidden_size':256,'num_attention_heads':4,"
             "'num_hidden_layers':2,'intermediate_size':1024,'vocab_size':1000,"
             "'max_position_embeddings':512,'hidden_act':'gelu_new','layer_norm_eps':1e-6,"
             "'use_parallel_residual':false,'attention_bias':false,'tie_word_embeddings':true,"
             "'bos_token_id':null,'eos_token_id':null,"
             "'rope_parameters':{'rope_type':'default','rope_theta':5000,"
             "'partial_rotary_factor':0.5}}",
             &c);
    ck_assert_str_eq(c.model_type, "gpt_neox");
    ck_assert_int_eq(c.n_layers, 2);
    ck_assert_int_eq(c.hidden, 256);
    ck_assert_int_eq(c.n_heads, 4);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.intermediate, 1024);
    ck_assert_int_eq(c.vocab, 1000);
    ck_assert_int_eq(c.max_pos, 512);
    ck_assert(c.norm_eps == 1e-6);
    ck_assert_int_eq(c.norm, RC_NORM_LAYER);
    ck_assert_int_eq(c.act, RC_ACT_GELU_NEW);
    ck_assert(!c.gated_mlp);
    ck_assert(!c.parallel_residual);
    ck_assert(c.tie_embeddings);
    ck_assert(!c.qkv_bias);
    ck_assert(!c.o_bias);
    ck_assert(c.mlp_bias);
    ck_assert(c.norm_bias);
    ck_assert_int_eq(c.rotary_dim, 32);
    ck_assert(c.rope_theta == 5000.0);
    ck_assert_int_eq(c.rope_type, RC_ROPE_DEFAULT);
    ck_assert(c.rope_factor == 1.0);
    ck_assert_int_eq(c.sliding_window, 0);
    ck_assert_int_eq(c.bos_id, -1);
    ck_assert_int_eq(c.n_eos, 0);
}
END_TEST

START_TEST(test_neox_defaults)
{
    /* only the required keys: every default from configuration_gpt_neox.py */
    rc_config c;
    parse_ok("{'model_type':'gpt_neox','hidden_size':128,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':512,'vocab_size':100}",
             &c);
    ck_assert_int_eq(c.head_dim, 32);
    ck_assert_int_eq(c.rotary_dim, 8); /* 32 * 0.25 */
    ck_assert(c.rope_theta == 10000.0);
    ck_assert(c.norm_eps == 1e-5);
    ck_assert_int_eq(c.act, RC_ACT_GELU_ERF);
    ck_assert(c.parallel_residual);
    ck_assert(!c.tie_embeddings);
    ck_assert(c.qkv_bias && c.o_bias);
    ck_assert_int_eq(c.max_pos, 2048);
    ck_assert_int_eq(c.bos_id, -1);
    ck_assert_int_eq(c.n_eos, 0);
}
END_TEST

/* Qwen3 (Qwen3Config): a published-style config (Qwen3-8B's keys, transformers 4.x layout: no
 * layer_types, sliding_window null); Qwen3Config's defaults; layer_types and the
 * use_sliding_window / max_window_layers rule; what is refused */
START_TEST(test_qwen3)
{
    rc_config c;
    parse_ok("{'architectures':['Qwen3ForCausalLM'],'attention_bias':false,'attention_dropout':0.0,"
             "'bos_token_id':151643,'eos_token_id':151645,'head_dim':128,'hidden_act':'silu','hidden_size':4096,"
             "'initializer_range':0.02,'intermediate_size':12288,'max_position_embeddings':40960,"
             "'max_window_layers':36,'model_type':'qwen3','num_attention_heads':32,'num_hidden_layers':36,"
             "'num_key_value_heads':8,'rms_norm_eps':1e-06,'rope_scaling':null,'rope_theta':1000000,"
             "'sliding_window':null,'tie_word_embeddings':false,'torch_dtype':'bfloat16',"
             "'use_cache':true,'use_sliding_window':false,'vocab_size':151936}", &c);
    ck_assert_str_eq(c.arch->family, "qwen3");
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.n_kv_heads, 8);
    ck_assert_int_eq(c.rotary_dim, 128);
    ck_assert(c.rope_theta == 1e6 && c.rope_type == RC_ROPE_DEFAULT && c.rope_attn_factor == 1.0);
    ck_assert_int_eq(c.qk_norm, RC_QK_NORM_HEAD);
    ck_assert(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.tie_embeddings);
    ck_assert_int_eq(c.sliding_window, 0);
    for (int64_t l = 0; l < c.n_layers; l++)
        ck_assert_int_eq(rc_layer_window(&c, l), 0);
    ck_assert_int_eq(rc_dim_value(&c, RC_DIM_QNORM), 128);
    ck_assert_int_eq(rc_dim_value(&c, RC_DIM_KNORM), 128);
    /* Qwen3Config defaults: head_dim 128, num_key_value_heads 32, sliding_window 4096 when used,
     * layers >= max_window_layers slide; attention_bias for q/k/v and o_proj */
    parse_ok("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':32,'num_hidden_layers':4,"
             "'intermediate_size':128,'vocab_size':300,'use_sliding_window':true,'max_window_layers':2,"
             "'attention_bias':true}", &c);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.n_kv_heads, 32);
    ck_assert_int_eq(c.max_pos, 32768);
    ck_assert(c.norm_eps == 1e-6);
    ck_assert(c.qkv_bias && c.o_bias && !c.mlp_bias);
    ck_assert_int_eq(rc_layer_window(&c, 0), 0);
    ck_assert_int_eq(rc_layer_window(&c, 1), 0);
    ck_assert_int_eq(rc_layer_window(&c, 2), 4096);
    ck_assert_int_eq(rc_layer_window(&c, 3), 4096);
    /* num_key_value_heads null: num_attention_heads; layer_types wins over max_window_layers */
    parse_ok("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':null,"
             "'num_hidden_layers':3,'head_dim':18,'intermediate_size':128,'vocab_size':300,"
             "'use_sliding_window':true,'sliding_window':6,'max_window_layers':0,"
             "'layer_types':['sliding_attention','attention','full_attention']}", &c);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(rc_layer_window(&c, 0), 6);
    ck_assert_int_eq(rc_layer_window(&c, 1), 0);
    ck_assert_int_eq(rc_layer_window(&c, 2), 0);
    /* the fixture's own config.json */
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/qwen3_yarn"), &m) == RC_OK);
    ck_assert_int_eq(m->cfg.rope_type, RC_ROPE_YARN);
    ck_assert_int_eq(rc_layer_window(&m->cfg, 0), 0);
    ck_assert_int_eq(rc_layer_window(&m->cfg, 1), 6);
    ck_assert_int_eq(rc_layer_window(&m->cfg, 2), 6);
    rc_model_free(m);
}
END_TEST

/* OLMo2 (Olmo2Config): post-sublayer norms, q/k norm over the whole projection, the weight
 * multiplied in fp32; Olmo2Config's defaults */
START_TEST(test_olmo2)
{
    rc_config c;
    /* OLMo-2-1124-7B's keys */
    parse_ok("{'architectures':['Olmo2ForCausalLM'],'attention_bias':false,'attention_dropout':0.0,"
             "'eos_token_id':100257,'hidden_act':'silu','hidden_size':4096,'initializer_range':0.02,"
             "'intermediate_size':11008,'max_position_embeddings':4096,'model_type':'olmo2',"
             "'num_attention_heads':32,'num_hidden_layers':32,'num_key_value_heads':32,'pad_token_id':100277,"
             "'rms_norm_eps':1e-06,'rope_scaling':null,'rope_theta':500000,'tie_word_embeddings':false,"
             "'torch_dtype':'float32','use_cache':true,'vocab_size':100352}", &c);
    ck_assert_str_eq(c.arch->family, "olmo2");
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert_int_eq(c.qk_norm, RC_QK_NORM_ALL);
    ck_assert(c.post_norm && c.norm_w_f32 && c.rope_f32);
    ck_assert(!c.qkv_bias && !c.o_bias && !c.tie_embeddings);
    ck_assert(c.rope_theta == 500000.0 && c.rotary_dim == 128 && c.norm_eps == 1e-6);
    ck_assert_int_eq(rc_dim_value(&c, RC_DIM_QNORM), 32 * 128);
    ck_assert_int_eq(rc_dim_value(&c, RC_DIM_KNORM), 32 * 128);
    ck_assert_int_eq(c.eos_ids[0], 100257);
    /* defaults: num_key_value_heads -> num_attention_heads, eps 1e-5, 2048 positions; GQA norms */
    parse_ok("{'model_type':'olmo2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
             "'intermediate_size':128,'vocab_size':300}", &c);
    ck_assert(c.n_kv_heads == 4 && c.norm_eps == 1e-5 && c.max_pos == 2048 && c.head_dim == 16);
    parse_ok("{'model_type':'olmo2','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
             "'num_hidden_layers':2,'intermediate_size':128,'vocab_size':300,'attention_bias':true}", &c);
    ck_assert_int_eq(rc_dim_value(&c, RC_DIM_KNORM), 2 * 16);
    ck_assert(c.qkv_bias && c.o_bias && !c.mlp_bias);
    EXPECT_REJECT("{'model_type':'olmo2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'hidden_act':'gelu'}",
                  RC_ERR_UNSUPPORTED, "hidden_act");
}
END_TEST

/* Gemma 2 (Gemma2Config): (1 + w) norms, four per layer, sqrt(hidden) embedding scale,
 * query_pre_attn_scalar, both soft-caps, alternating sliding / global layers */
START_TEST(test_gemma2)
{
    rc_config c;
    /* the keys of Gemma 2 2B's config.json */
    parse_ok("{'architectures':['Gemma2ForCausalLM'],'attention_bias':false,'attention_dropout':0.0,"
             "'attn_logit_softcapping':50.0,'bos_token_id':2,'cache_implementation':'hybrid','eos_token_id':[1,107],"
             "'final_logit_softcapping':30.0,'head_dim':256,'hidden_act':'gelu_pytorch_tanh',"
             "'hidden_activation':'gelu_pytorch_tanh','hidden_size':2304,'initializer_range':0.02,"
             "'intermediate_size':9216,'max_position_embeddings':8192,'model_type':'gemma2','num_attention_heads':8,"
             "'num_hidden_layers':26,'num_key_value_heads':4,'pad_token_id':0,'query_pre_attn_scalar':256,"
             "'rms_norm_eps':1e-06,'rope_theta':10000.0,'sliding_window':4096,'torch_dtype':'float32',"
             "'use_cache':true,'vocab_size':256000}", &c);
    ck_assert_str_eq(c.arch->family, "gemma2");
    ck_assert(c.head_dim == 256 && c.n_kv_heads == 4 && c.act == RC_ACT_GELU_TANH && c.gated_mlp);
    ck_assert(c.norm_w_offset && c.norm_w_f32 && c.sandwich_norm && !c.post_norm && c.tie_embeddings);
    ck_assert(c.qk_norm == RC_QK_NORM_NONE && !c.qkv_bias && !c.o_bias && !c.mlp_bias);
    ck_assert(c.embed_scale == sqrt(2304.0) && c.softmax_scale == 0.0625);
    ck_assert(c.attn_softcap == 50.0 && c.final_softcap == 30.0);
    ck_assert(c.rope_theta == 10000.0 && c.rope_type == RC_ROPE_DEFAULT && c.rotary_dim == 256);
    ck_assert(c.rope_theta_local == 0);
    ck_assert(c.n_eos == 2 && c.eos_ids[0] == 1 && c.eos_ids[1] == 107);
    for (int64_t l = 0; l < 26; l++) /* layer_types' default: (i + 1) % 2 slides */
        ck_assert_int_eq(rc_layer_window(&c, l), l % 2 == 0 ? 4096 : 0);
    /* Gemma2Config defaults; query_pre_attn_scalar 144 -> 1/12 */
    parse_ok("{'model_type':'gemma2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
             "'intermediate_size':128,'vocab_size':300,'query_pre_attn_scalar':144}", &c);
    ck_assert(c.n_kv_heads == 4 && c.head_dim == 256 && c.max_pos == 8192 && c.norm_eps == 1e-6);
    ck_assert(c.attn_softcap == 50.0 && c.final_softcap == 30.0 && c.sliding_window == 4096);
    ck_assert(c.softmax_scale == pow(144.0, -0.5) && c.embed_scale == 8.0 && c.bos_id == 2);
    /* null: no soft-capping, no window; layer_types given */
    parse_ok("{'model_type':'gemma2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
             "'intermediate_size':128,'vocab_size':300,'attn_logit_softcapping':null,'final_logit_softcapping':null,"
             "'sliding_window':null,'attention_bias':true,"
             "'layer_types':['full_attention','full_attention','full_attention']}", &c);
    ck_assert(c.attn_softcap == 0 && c.final_softcap == 0 && c.sliding_window == 0);
    ck_assert(c.qkv_bias && c.o_bias);
    for (int64_t l = 0; l < 3; l++)
        ck_assert_int_eq(rc_layer_window(&c, l), 0);
    parse_ok("{'model_type':'gemma2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
             "'intermediate_size':128,'vocab_size':300,'sliding_window':7,"
             "'layer_types':['full_attention','sliding_attention','full_attention'],'hidden_activation':'gelu'}", &c);
    ck_assert(rc_layer_window(&c, 0) == 0 && rc_layer_window(&c, 1) == 7 && rc_layer_window(&c, 2) == 0);
    ck_assert_int_eq(c.act, RC_ACT_GELU_ERF);
    /* a sliding layer without a window (HF's mask cannot be built either) */
    EXPECT_REJECT("{'model_type':'gemma2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'sliding_window':null}",
                  RC_ERR_FORMAT, "no sliding window");
    EXPECT_REJECT("{'model_type':'gemma2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'hidden_activation':'silu'}",
                  RC_ERR_UNSUPPORTED, "hidden_activation");
    EXPECT_REJECT("{'model_type':'gemma2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'use_bidirectional_attention':true}",
                  RC_ERR_UNSUPPORTED, "use_bidirectional_attention");
    EXPECT_REJECT("{'model_type':'gemma2','hidden_size':66,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "not a multiple");
    EXPECT_REJECT("{'model_type':'gemma2','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'final_logit_softcapping':-1}",
                  RC_ERR_FORMAT, "final_logit_softcapping");
}
END_TEST

/* Gemma 3 text (Gemma3TextConfig): Gemma 2's layer with q/k norm, two RoPEs, the 5:1
 * pattern, no attention soft-capping */
START_TEST(test_gemma3_text)
{
    rc_config c;
    /* the keys of Gemma 3 1B's config.json */
    parse_ok("{'architectures':['Gemma3ForCausalLM'],'attention_bias':false,'attention_dropout':0.0,"
             "'attn_logit_softcapping':null,'bos_token_id':2,'cache_implementation':'hybrid','eos_token_id':[1,106],"
             "'final_logit_softcapping':null,'head_dim':256,'hidden_activation':'gelu_pytorch_tanh',"
             "'hidden_size':1152,'initializer_range':0.02,'intermediate_size':6912,'max_position_embeddings':32768,"
             "'model_type':'gemma3_text','num_attention_heads':4,'num_hidden_layers':26,'num_key_value_heads':1,"
             "'pad_token_id':0,'query_pre_attn_scalar':256,'rms_norm_eps':1e-06,'rope_local_base_freq':10000,"
             "'rope_scaling':null,'rope_theta':1000000,'sliding_window':512,'sliding_window_pattern':6,"
             "'torch_dtype':'bfloat16','use_cache':true,'vocab_size':262144}", &c);
    ck_assert_str_eq(c.arch->family, "gemma3_text");
    ck_assert(c.head_dim == 256 && c.n_kv_heads == 1 && c.qk_norm == RC_QK_NORM_HEAD);
    ck_assert(c.norm_w_offset && c.norm_w_f32 && c.sandwich_norm && c.tie_embeddings);
    ck_assert(c.embed_scale == sqrt(1152.0) && c.softmax_scale == 0.0625);
    ck_assert(c.attn_softcap == 0 && c.final_softcap == 0);
    ck_assert(c.rope_theta == 1e6 && c.rope_type == RC_ROPE_DEFAULT && c.rope_theta_local == 10000.0);
    ck_assert_int_eq(rc_dim_value(&c, RC_DIM_QNORM), 256);
    for (int64_t l = 0; l < 26; l++) /* every 6th layer global */
        ck_assert_int_eq(rc_layer_window(&c, l), (l + 1) % 6 == 0 ? 0 : 512);
    /* the larger models' linear scaling of the global RoPE; attn_logit_softcapping is never applied
     * by Gemma3Attention; the defaults (pattern 6, thetas 1e6 / 1e4, window 4096) */
    parse_ok("{'model_type':'gemma3_text','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':7,"
             "'intermediate_size':128,'vocab_size':300,'rope_scaling':{'factor':8.0,'rope_type':'linear'},"
             "'attn_logit_softcapping':50.0,'final_logit_softcapping':30.0}", &c);
    ck_assert(c.rope_type == RC_ROPE_LINEAR && c.rope_factor == 8.0 && c.rope_theta == 1e6);
    ck_assert(c.rope_theta_local == 10000.0 && c.attn_softcap == 0 && c.final_softcap == 30.0);
    ck_assert(c.max_pos == 131072 && c.head_dim == 256 && c.n_kv_heads == 4);
    for (int64_t l = 0; l < 7; l++)
        ck_assert_int_eq(rc_layer_window(&c, l), l == 5 ? 0 : 4096);
    /* transformers v5's form: rope_parameters per layer type */
    parse_ok("{'model_type':'gemma3_text','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
             "'intermediate_size':128,'vocab_size':300,'head_dim':18,'sliding_window':6,"
             "'layer_types':['sliding_attention','sliding_attention','full_attention'],"
             "'rope_parameters':{'full_attention':{'factor':4.0,'rope_theta':500000.0,'rope_type':'linear'},"
             "'sliding_attention':{'rope_theta':5000.0,'rope_type':'default'}}}", &c);
    ck_assert(c.rope_type == RC_ROPE_LINEAR && c.rope_factor == 4.0 && c.rope_theta == 500000.0);
    ck_assert(c.rope_theta_local == 5000.0 && c.rotary_dim == 18);
    ck_assert(rc_layer_window(&c, 0) == 6 && rc_layer_window(&c, 1) == 6 && rc_layer_window(&c, 2) == 0);
    EXPECT_REJECT("{'model_type':'gemma3_text','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
                  "'intermediate_size':128,'vocab_size':300,'rope_parameters':{'full_attention':"
                  "{'rope_type':'default','rope_theta':1e6},'sliding_attention':{'rope_type':'linear','factor':2.0,"
                  "'rope_theta':1e4}}}",
                  RC_ERR_UNSUPPORTED, "sliding_attention");
    EXPECT_REJECT("{'model_type':'gemma3_text','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
                  "'intermediate_size':128,'vocab_size':300,'sliding_window_pattern':0}",
                  RC_ERR_FORMAT, "sliding_window_pattern");
}
END_TEST

/* OLMo3 (Olmo3Config): OLMo2's norms, layer_types sliding windows ((i + 1) % 4 != 0 by
 * default), RoPE per layer type (legacy rope_scaling on the full layers only; v5's nested
 * rope_parameters); what is refused */
START_TEST(test_olmo3)
{
    rc_config c;
    /* Olmo-3-1025-7B's keys (transformers 4.x layout: rope_scaling, no layer_types) */
    parse_ok("{'architectures':['Olmo3ForCausalLM'],'attention_bias':false,'attention_dropout':0.0,"
             "'eos_token_id':100257,'hidden_act':'silu','hidden_size':4096,'initializer_range':0.02,"
             "'intermediate_size':11008,'max_position_embeddings':65536,'model_type':'olmo3',"
             "'num_attention_heads':32,'num_hidden_layers':32,'num_key_value_heads':32,'pad_token_id':100277,"
             "'rms_norm_eps':1e-06,'rope_scaling':{'attention_factor':1.2079441541679836,'beta_fast':32,"
             "'beta_slow':1,'factor':8.0,'original_max_position_embeddings':8192,'rope_type':'yarn'},"
             "'rope_theta':500000,'sliding_window':4096,'tie_word_embeddings':false,'vocab_size':100278}", &c);
    ck_assert_str_eq(c.arch->family, "olmo3");
    ck_assert(c.post_norm && c.norm_w_f32 && c.rope_f32 && c.qk_norm == RC_QK_NORM_ALL);
    ck_assert(c.rope_type == RC_ROPE_YARN && c.rope_factor == 8.0 && c.rope_orig_max_pos == 8192);
    ck_assert(c.rope_attn_factor == 1.2079441541679836 && c.rope_theta == 500000.0);
    ck_assert(c.rope_theta_local == 500000.0); /* the sliding layers: default RoPE, rope_theta */
    for (int64_t l = 0; l < c.n_layers; l++) {
        const bool sliding = (l + 1) % 4 != 0;
        ck_assert_int_eq(rc_layer_window(&c, l), sliding ? 4096 : 0);
        ck_assert(rc_layer_rope_local(&c, l) == sliding);
    }
    /* v5's nested rope_parameters; Olmo3Config defaults (theta 5e5, 2048 positions, eps 1e-5) */
    parse_ok("{'model_type':'olmo3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
             "'intermediate_size':128,'vocab_size':300,'layer_types':['full_attention','sliding_attention'],"
             "'rope_parameters':{'full_attention':{'rope_type':'linear','factor':2.0},"
             "'sliding_attention':{'rope_type':'default','rope_theta':10000.0}}}", &c);
    ck_assert(c.rope_type == RC_ROPE_LINEAR && c.rope_theta == 500000.0 && c.rope_theta_local == 10000.0);
    ck_assert(c.n_kv_heads == 4 && c.norm_eps == 1e-5 && c.max_pos == 2048 && c.sliding_window == 4096);
    ck_assert(!rc_layer_rope_local(&c, 0) && rc_layer_rope_local(&c, 1));
    EXPECT_REJECT("{'model_type':'olmo3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'rope_parameters':{'full_attention':{'rope_type':"
                  "'default'},'sliding_attention':{'rope_type':'yarn','factor':2.0}}}",
                  RC_ERR_UNSUPPORTED, "sliding_attention type \"yarn\"");
    EXPECT_REJECT("{'model_type':'olmo3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'rope_parameters':{'rope_type':'default'}}",
                  RC_ERR_FORMAT, "neither \"full_attention\" nor \"sliding_attention\"");
    EXPECT_REJECT("{'model_type':'olmo3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'sliding_window':null}",
                  RC_ERR_FORMAT, "sliding_attention layer");
    /* the fixture's own config.json */
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/olmo3_sliding"), &m) ==
              RC_OK);
    ck_assert(m->cfg.rope_type == RC_ROPE_YARN && m->cfg.rope_theta_local == 10000.0);
    ck_assert(rc_layer_window(&m->cfg, 0) == 5 && rc_layer_window(&m->cfg, 1) == 0);
    rc_model_free(m);
}
END_TEST

/* Phi-3 (Phi3Config): fused tensors, partial rotary, longrope (su / yarn as longrope, the
 * attention factor, original_max_position_embeddings' default and priority), sliding_window
 * on every layer; the positions longrope refuses; other scaling types refused */
START_TEST(test_phi3)
{
    rc_config c;
    /* Phi-3-mini-4k-instruct's keys */
    parse_ok("{'architectures':['Phi3ForCausalLM'],'attention_bias':false,'attention_dropout':0.0,"
             "'bos_token_id':1,'embd_pdrop':0.0,'eos_token_id':32000,'hidden_act':'silu','hidden_size':3072,"
             "'initializer_range':0.02,'intermediate_size':8192,'max_position_embeddings':4096,"
             "'model_type':'phi3','num_attention_heads':32,'num_hidden_layers':32,'num_key_value_heads':32,"
             "'original_max_position_embeddings':4096,'pad_token_id':32000,'resid_pdrop':0.0,"
             "'rms_norm_eps':1e-05,'rope_scaling':null,'rope_theta':10000.0,'sliding_window':2047,"
             "'tie_word_embeddings':false,'torch_dtype':'bfloat16','use_cache':true,'vocab_size':32064}", &c);
    ck_assert_str_eq(c.arch->family, "phi3");
    ck_assert(c.head_dim == 96 && c.rotary_dim == 96 && c.rope_type == RC_ROPE_DEFAULT);
    ck_assert(!c.window_per_layer && rc_layer_window(&c, 0) == 2047 && rc_layer_window(&c, 31) == 2047);
    ck_assert(!c.qkv_bias && !c.o_bias && !c.mlp_bias && c.gated_mlp);
    ck_assert(rc_config_check_positions(&c, 100000) == RC_OK);
    /* Phi-4-mini-instruct's layout: longrope under its legacy key "type", partial rotary 0.75
     * (96 of 128 dims, 48 factors), factor from 131072 / 4096 */
    char sf[48 * 8 + 1] = "", lf[48 * 8 + 1] = "", js[4096];
    for (int j = 0; j < 48; j++) {
        snprintf(sf + strlen(sf), sizeof sf - strlen(sf), "%s%g", j ? "," : "", 1.0 + 0.05 * j);
        snprintf(lf + strlen(lf), sizeof lf - strlen(lf), "%s%g", j ? "," : "", 1.0 + 0.5 * j);
    }
    snprintf(js, sizeof js,
             "{'model_type':'phi3','hidden_size':3072,'num_attention_heads':24,'num_key_value_heads':8,"
             "'num_hidden_layers':2,'intermediate_size':8192,'vocab_size':200064,'max_position_embeddings':131072,"
             "'original_max_position_embeddings':4096,'partial_rotary_factor':0.75,'rope_theta':10000.0,"
             "'rope_scaling':{'long_factor':[%s],'short_factor':[%s],'type':'longrope'},"
             "'tie_word_embeddings':true,'bos_token_id':199999,'eos_token_id':199999}", lf, sf);
    parse_ok(js, &c);
    ck_assert(c.head_dim == 128 && c.rotary_dim == 96 && c.rope_type == RC_ROPE_LONGROPE && c.tie_embeddings);
    ck_assert(c.rope_short_factor[0] == 1.0 && c.rope_short_factor[47] == 1.0 + 0.05 * 47);
    ck_assert(c.rope_orig_max_pos == 4096 && c.rope_factor == 32.0);
    ck_assert(c.rope_attn_factor == sqrt(1.0 + log(32.0) / log(4096.0)));
    ck_assert(rc_config_check_positions(&c, 4096) == RC_OK);
    ck_assert(rc_config_check_positions(&c, 4097) == RC_ERR_UNSUPPORTED);
    ck_assert(strstr(rc_last_error(), "original_max_position_embeddings 4096"));
    /* "su" and "yarn" are longrope in Phi3Config; the top-level original_max_position_embeddings
     * (default 4096) wins over the scaling object's; attention_factor given */
    parse_ok("{'model_type':'phi3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
             "'intermediate_size':128,'vocab_size':32064,'max_position_embeddings':8192,'rope_scaling':{'type':"
             "'yarn','short_factor':[1,2,3,4,5,6,7,8],'long_factor':[1,2,3,4,5,6,7,8],"
             "'original_max_position_embeddings':1024,'attention_factor':1.5}}", &c);
    ck_assert(c.rope_type == RC_ROPE_LONGROPE && c.rope_orig_max_pos == 4096 && c.rope_attn_factor == 1.5);
    ck_assert(c.eos_ids[0] == 32000 && c.n_eos == 1 && c.bos_id == 1); /* Phi3Config's defaults */
    parse_ok("{'model_type':'phi3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
             "'intermediate_size':128,'vocab_size':300,'max_position_embeddings':2048,"
             "'original_max_position_embeddings':2048,'rope_parameters':{'rope_type':'su',"
             "'short_factor':[1,2,3,4,5,6,7,8],'long_factor':[1,2,3,4,5,6,7,8]}}", &c);
    ck_assert(c.rope_type == RC_ROPE_LONGROPE && c.rope_factor == 1.0 && c.rope_attn_factor == 1.0);
    EXPECT_REJECT("{'model_type':'phi3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'rope_scaling':{'type':'linear','factor':2.0}}",
                  RC_ERR_UNSUPPORTED, "rope_scaling type \"linear\"", "phi3");
    EXPECT_REJECT("{'model_type':'phi3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'rope_scaling':{'type':'longrope',"
                  "'short_factor':[1,2,3],'long_factor':[1,2,3,4,5,6,7,8]}}",
                  RC_ERR_FORMAT, "\"short_factor\" must be a list of 8 numbers");
    EXPECT_REJECT("{'model_type':'phi3','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':128,'vocab_size':300,'rope_scaling':{'type':'longrope',"
                  "'short_factor':[1,2,3,4,5,6,7,8]}}",
                  RC_ERR_FORMAT, "needs \"long_factor\"");
    /* the fixture's own config.json */
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/phi3_longrope"), &m) ==
              RC_OK);
    ck_assert(m->cfg.rope_type == RC_ROPE_LONGROPE && m->cfg.rotary_dim == 18 && m->cfg.rope_orig_max_pos == 32);
    ck_assert(m->cfg.rope_attn_factor == sqrt(1.0 + log(4.0) / log(32.0)));
    rc_model_free(m);
}
END_TEST

/* GLM-4.5 (Glm4MoeConfig): the grouped sigmoid router and its keys, shared experts without a gate,
 * dense first layers, partial rotary 0.5 by default, optional q/k norm; rejected router sizes */
#define GLM4_MOE_MIN "'model_type':'glm4_moe','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':4," \
                     "'intermediate_size':96,'vocab_size':300"
START_TEST(test_glm4_moe)
{
    rc_config c;
    /* GLM-4.5's config keys and sizes, but 8 layers, not its 92 (355B weights: the loader refuses a model whose
     * fp32 weights would pass RC_MAX_ALLOC unless --layers N keeps fewer; test_weights_too_large_by_biases) */
    parse_ok("{'architectures':['Glm4MoeForCausalLM'],'attention_bias':true,'attention_dropout':0.0,"
             "'pad_token_id':151329,'eos_token_id':[151329,151336,151338],'head_dim':128,'hidden_act':'silu',"
             "'hidden_size':5120,'partial_rotary_factor':0.5,'initializer_range':0.02,'intermediate_size':12288,"
             "'max_position_embeddings':131072,'model_type':'glm4_moe','moe_intermediate_size':1536,"
             "'norm_topk_prob':true,'num_attention_heads':96,'n_group':1,'topk_group':1,'n_routed_experts':160,"
             "'n_shared_experts':1,'routed_scaling_factor':2.5,'num_experts_per_tok':8,'first_k_dense_replace':3,"
             "'num_hidden_layers':8,'num_key_value_heads':8,'rms_norm_eps':1e-05,'rope_theta':1000000,"
             "'num_nextn_predict_layers':1,'tie_word_embeddings':false,'torch_dtype':'bfloat16',"
             "'use_cache':true,'use_qk_norm':true,'vocab_size':151552}", &c);
    ck_assert_str_eq(c.arch->family, "glm4_moe");
    ck_assert(c.router == RC_ROUTER_SIGMOID_GROUPED && c.router_gate_f32 && c.router_bias && c.moe_weights_f32);
    ck_assert(c.n_experts == 160 && c.top_k == 8 && c.n_group == 1 && c.topk_group == 1 && c.routed_scale == 2.5);
    ck_assert(c.norm_topk_prob && c.shared_ungated && c.shared_intermediate == 1536 && c.moe_intermediate == 1536);
    ck_assert(!rc_layer_is_moe(&c, 0) && !rc_layer_is_moe(&c, 2) && rc_layer_is_moe(&c, 3) && rc_layer_is_moe(&c, 7));
    ck_assert(c.rotary_dim == 64 && c.head_dim == 128 && c.n_kv_heads == 8 && c.qk_norm == RC_QK_NORM_HEAD);
    ck_assert(c.qkv_bias && !c.o_bias && !c.sandwich_norm && !c.tie_embeddings && c.n_layers == 8);
    ck_assert(rc_weight_cond_holds_layer(&c, RC_IF_ROUTER_BIAS, 3) &&
              !rc_weight_cond_holds_layer(&c, RC_IF_ROUTER_BIAS, 2));
    ck_assert(rc_weight_cond_holds_layer(&c, RC_IF_SHARED_EXPERT, 3) && !rc_weight_cond_holds(&c, RC_IF_SHARED_GATE));
    ck_assert(rc_layer_weight_keeps_f32(&c, RC_LW_w_router) && rc_layer_weight_keeps_f32(&c, RC_LW_e_bias) &&
              !rc_layer_weight_keeps_f32(&c, RC_LW_w_qkv));
    /* Glm4MoeConfig's defaults: 128 experts top-8, one shared expert, layer 0 dense, eps 1e-5, no bias,
     * no q/k norm, rotary 0.5, head_dim hidden // heads */
    parse_ok("{" GLM4_MOE_MIN "}", &c);
    ck_assert(c.n_experts == 128 && c.top_k == 8 && c.moe_intermediate == 1408 && c.shared_intermediate == 1408);
    ck_assert(c.n_group == 1 && c.topk_group == 1 && c.routed_scale == 1.0 && c.norm_topk_prob);
    ck_assert(!rc_layer_is_moe(&c, 0) && rc_layer_is_moe(&c, 1) && c.norm_eps == 1e-5 && !c.qkv_bias);
    ck_assert(c.qk_norm == RC_QK_NORM_NONE && c.head_dim == 16 && c.rotary_dim == 8 && c.n_kv_heads == 4);
    /* DeepSeek-V3's grouping, no shared expert, every layer dense past the model, num_local_experts (v5's name) */
    parse_ok("{" GLM4_MOE_MIN ",'num_local_experts':256,'n_group':8,'topk_group':4,'num_experts_per_tok':8,"
             "'n_shared_experts':0,'first_k_dense_replace':9,'norm_topk_prob':false}", &c);
    ck_assert(c.n_experts == 256 && c.n_group == 8 && c.topk_group == 4 && c.shared_intermediate == 0);
    ck_assert(!c.norm_topk_prob && !rc_layer_is_moe(&c, 3) && !rc_weight_cond_holds(&c, RC_IF_MOE));
    /* the fixtures' own config.json */
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/glm4_moe"), &m) == RC_OK);
    ck_assert(m->cfg.rotary_dim == 12 && m->cfg.head_dim == 24 && m->cfg.n_group == 2 && m->cfg.topk_group == 1);
    ck_assert(m->cfg.shared_intermediate == 40 && !rc_layer_is_moe(&m->cfg, 0) && rc_layer_is_moe(&m->cfg, 1));
    ck_assert(rc_weight_cond_holds_layer(&m->cfg, RC_IF_ROUTER_BIAS, 1) &&
              !rc_weight_cond_holds_layer(&m->cfg, RC_IF_ROUTER_BIAS, 0) &&
              !rc_weight_cond_holds(&m->cfg, RC_IF_SHARED_GATE) && m->w.layers[1].e_bias.dt == RC_F32);
    rc_model_free(m);
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/glm4_moe_air_fused"), &m) ==
              RC_OK);
    ck_assert(m->cfg.tie_embeddings && m->cfg.qk_norm == RC_QK_NORM_NONE && !m->cfg.norm_topk_prob);
    ck_assert(m->cfg.routed_scale == 2.5 && !rc_layer_is_moe(&m->cfg, 1) && rc_layer_is_moe(&m->cfg, 2));
    rc_model_free(m);
    /* rejected: groups that do not divide the experts or hold one, topk_group, top_k past the kept groups,
     * a scale that is not a positive number, another activation */
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'n_routed_experts':8,'n_group':3}", RC_ERR_FORMAT, "8 experts",
                  "n_group 3");
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'n_routed_experts':8,'n_group':8,'num_experts_per_tok':1}", RC_ERR_FORMAT,
                  "groups of two");
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'n_routed_experts':8,'n_group':2,'topk_group':3}", RC_ERR_FORMAT,
                  "topk_group 3 exceeds n_group 2");
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'n_routed_experts':8,'n_group':4,'topk_group':1,'num_experts_per_tok':3}",
                  RC_ERR_FORMAT, "num_experts_per_tok 3 exceeds the 2 experts");
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'routed_scaling_factor':0}", RC_ERR_FORMAT, "routed_scaling_factor");
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'routed_scaling_factor':1e300}", RC_ERR_FORMAT, "routed_scaling_factor");
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'hidden_act':'gelu'}", RC_ERR_UNSUPPORTED, "hidden_act");
    EXPECT_REJECT("{" GLM4_MOE_MIN ",'num_experts_per_tok':200}", RC_ERR_FORMAT, "num_experts_per_tok 200");
}
END_TEST

/* Qwen3-Next (Qwen3NextConfig): full_attention_interval or layer_types, the linear layers' sizes, (1 + w)
 * norms, the attention output gate, partial rotary 0.25 by default, the MoE with its shared expert */
START_TEST(test_qwen3_next)
{
    rc_config c;
    /* Qwen3-Next-80B-A3B-Instruct's keys (its config.json, without the unused ones) */
    parse_ok("{'architectures':['Qwen3NextForCausalLM'],'decoder_sparse_step':1,'eos_token_id':151645,"
             "'full_attention_interval':4,'head_dim':256,'hidden_act':'silu','hidden_size':2048,"
             "'intermediate_size':5120,'linear_conv_kernel_dim':4,'linear_key_head_dim':128,"
             "'linear_num_key_heads':16,'linear_num_value_heads':32,'linear_value_head_dim':128,"
             "'max_position_embeddings':262144,'mlp_only_layers':[],'model_type':'qwen3_next',"
             "'moe_intermediate_size':512,'norm_topk_prob':true,'num_attention_heads':16,'num_experts':512,"
             "'num_experts_per_tok':10,'num_hidden_layers':48,'num_key_value_heads':2,'partial_rotary_factor':0.25,"
             "'rms_norm_eps':1e-06,'rope_theta':10000000,'shared_expert_intermediate_size':512,"
             "'tie_word_embeddings':false,'vocab_size':151936}", &c);
    ck_assert_str_eq(c.arch->family, "qwen3_next");
    ck_assert(c.n_linear == 36 && c.layer_linear[0] && c.layer_linear[2] && !c.layer_linear[3] && !c.layer_linear[47]);
    ck_assert(c.lin_hk == 16 && c.lin_hv == 32 && c.lin_dk == 128 && c.lin_dv == 128 && c.lin_conv_k == 4);
    ck_assert(c.rotary_dim == 64 && c.head_dim == 256 && c.n_kv_heads == 2 && c.attn_out_gate);
    ck_assert(c.norm_w_offset && c.norm_w_f32 && c.qk_norm == RC_QK_NORM_HEAD && c.norm_topk_prob);
    ck_assert(c.n_experts == 512 && c.top_k == 10 && c.shared_intermediate == 512 && c.moe_intermediate == 512);
    /* defaults: interval 4, partial 0.25, head_dim 256 */
    parse_ok("{'model_type':'qwen3_next','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':6,"
             "'vocab_size':300,'num_experts':4,'num_experts_per_tok':2}", &c);
    ck_assert(c.n_linear == 5 && !c.layer_linear[3] && c.rotary_dim == 64 && c.lin_hv == 32);
    /* layer_types wins */
    parse_ok("{'model_type':'qwen3_next','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
             "'vocab_size':300,'num_experts':4,'num_experts_per_tok':2,'full_attention_interval':1,"
             "'layer_types':['full_attention','linear_attention']}", &c);
    ck_assert(c.n_linear == 1 && !c.layer_linear[0] && c.layer_linear[1]);
    EXPECT_REJECT("{'model_type':'qwen3_next','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'vocab_size':300,'layer_types':['full_attention','sliding_attention']}", RC_ERR_UNSUPPORTED,
                  "sliding_attention");
    EXPECT_REJECT("{'model_type':'qwen3_next','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'vocab_size':300,'linear_num_key_heads':3,'linear_num_value_heads':4}", RC_ERR_UNSUPPORTED,
                  "not a multiple of 3 key heads");
    EXPECT_REJECT("{'model_type':'qwen3_next','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'vocab_size':300,'attention_bias':true}", RC_ERR_UNSUPPORTED, "attention_bias");
    /* the fixture's own config.json */
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/qnext_hybrid"), &m) ==
              RC_OK);
    ck_assert(m->cfg.rotary_dim == 6 && m->cfg.n_linear == 2 && m->cfg.lin_dk == 12 && m->cfg.lin_dv == 20);
    rc_model_free(m);
}
END_TEST

/* GLM-4 (Glm4Config): four norms, partial rotary 0.5 by default, q/k/v biases by default,
 * the three EOS ids when eos_token_id is absent or null */
START_TEST(test_glm4)
{
    rc_config c;
    /* GLM-4-9B-0414's keys */
    parse_ok("{'architectures':['Glm4ForCausalLM'],'attention_bias':true,'attention_dropout':0.0,"
             "'eos_token_id':[151329,151336,151338],'head_dim':128,'hidden_act':'silu','hidden_size':4096,"
             "'initializer_range':0.02,'intermediate_size':13696,'max_position_embeddings':32768,"
             "'model_type':'glm4','num_attention_heads':32,'num_hidden_layers':40,'num_key_value_heads':2,"
             "'pad_token_id':151329,'partial_rotary_factor':0.5,'rms_norm_eps':1e-05,'rope_theta':10000.0,"
             "'tie_word_embeddings':false,'torch_dtype':'bfloat16','vocab_size':151552}", &c);
    ck_assert_str_eq(c.arch->family, "glm4");
    ck_assert(c.sandwich_norm && !c.post_norm && c.rotary_dim == 64 && c.head_dim == 128 && c.n_kv_heads == 2);
    ck_assert(c.qkv_bias && !c.o_bias && !c.mlp_bias);
    ck_assert(c.n_eos == 3 && c.eos_ids[0] == 151329 && c.eos_ids[1] == 151336 && c.eos_ids[2] == 151338);
    /* defaults: 0.5 rotary, eps 1.5625e-7, 128 head_dim, 2 kv heads, the EOS list */
    parse_ok("{'model_type':'glm4','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
             "'intermediate_size':128,'vocab_size':160000}", &c);
    ck_assert(c.rotary_dim == 64 && c.head_dim == 128 && c.n_kv_heads == 2 && c.norm_eps == 0.00000015625);
    ck_assert(c.n_eos == 3 && c.eos_ids[2] == 151338 && c.qkv_bias && c.max_pos == 131072);
    parse_ok("{'model_type':'glm4','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
             "'intermediate_size':128,'vocab_size':160000,'head_dim':16,'eos_token_id':null,"
             "'rope_parameters':{'rope_type':'default','rope_theta':10000.0,'partial_rotary_factor':0.25}}", &c);
    ck_assert(c.rotary_dim == 4 && c.n_eos == 3);
    /* the fixture's own config.json */
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/glm4_partial"), &m) ==
              RC_OK);
    ck_assert(m->cfg.rotary_dim == 6 && m->cfg.head_dim == 12 && m->cfg.n_eos == 1);
    rc_model_free(m);
}
END_TEST

/* gpt-oss (GptOssConfig): sinks, biases everywhere, every layer MoE with the clamped SwiGLU, layer_types,
 * YaRN by default */
START_TEST(test_gpt_oss)
{
    rc_config c;
    /* gpt-oss-20b's keys (layer_types shortened with num_hidden_layers) */
    parse_ok("{'architectures':['GptOssForCausalLM'],'attention_bias':true,'attention_dropout':0.0,"
             "'eos_token_id':200002,'experts_per_token':4,'head_dim':64,'hidden_act':'silu','hidden_size':2880,"
             "'initial_context_length':4096,'initializer_range':0.02,'intermediate_size':2880,"
             "'layer_types':['sliding_attention','full_attention','sliding_attention','full_attention'],"
             "'max_position_embeddings':131072,'model_type':'gpt_oss','num_attention_heads':64,"
             "'num_experts_per_tok':4,'num_hidden_layers':4,'num_key_value_heads':8,'num_local_experts':32,"
             "'output_router_logits':false,'pad_token_id':199999,'rms_norm_eps':1e-05,"
             "'rope_scaling':{'beta_fast':32.0,'beta_slow':1.0,'factor':32.0,"
             "'original_max_position_embeddings':4096,'rope_type':'yarn','truncate':false},'rope_theta':150000,"
             "'router_aux_loss_coef':0.9,'sliding_window':128,'swiglu_limit':7.0,'tie_word_embeddings':false,"
             "'use_cache':true,'vocab_size':201088}", &c);
    ck_assert_str_eq(c.arch->family, "gpt_oss");
    ck_assert(c.head_dim == 64 && c.n_heads == 64 && c.n_kv_heads == 8 && c.hidden == 2880);
    ck_assert(c.n_experts == 32 && c.top_k == 4 && c.moe_intermediate == 2880 && c.shared_intermediate == 0);
    ck_assert(c.attn_sinks && c.moe_bias && c.moe_topk_softmax && c.qkv_bias && c.o_bias && !c.mlp_bias);
    ck_assert(c.norm_w_f32 && !c.norm_topk_prob && !c.moe_weights_f32 && !c.tie_embeddings);
    ck_assert(c.swiglu_limit == 7.0 && c.swiglu_alpha == 1.702);
    ck_assert(c.sliding_window == 128 && c.window_per_layer && c.layer_sliding[0] && !c.layer_sliding[1] &&
              c.layer_sliding[2] && !c.layer_sliding[3]);
    ck_assert(c.rope_type == RC_ROPE_YARN && c.rope_factor == 32.0 && !c.rope_truncate &&
              c.rope_orig_max_pos == 4096 && c.rope_theta == 150000.0 && c.rotary_dim == 64);
    ck_assert(c.rope_attn_factor == 0.1 * log(32.0) + 1.0);
    for (int64_t l = 0; l < c.n_layers; l++)
        ck_assert(rc_layer_is_moe(&c, l));
    /* GptOssConfig's defaults: head_dim 64, the YaRN rope, even layers sliding, window 128, alpha / limit */
    parse_ok("{'model_type':'gpt_oss','hidden_size':96,'num_attention_heads':4,'num_key_value_heads':2,"
             "'num_hidden_layers':3,'intermediate_size':32,'vocab_size':300,'num_local_experts':4,"
             "'num_experts_per_tok':2}", &c);
    ck_assert(c.head_dim == 64 && c.rope_type == RC_ROPE_YARN && c.rope_factor == 32.0 && !c.rope_truncate &&
              c.rope_orig_max_pos == 4096 && c.rope_theta == 150000.0);
    ck_assert(c.layer_sliding[0] && !c.layer_sliding[1] && c.layer_sliding[2] && c.sliding_window == 128);
    ck_assert(c.swiglu_alpha == 1.702 && c.swiglu_limit == 7.0 && c.qkv_bias);
    /* num_experts is the alias transformers' attribute_map gives; head_dim null: hidden / heads */
    parse_ok("{'model_type':'gpt_oss','hidden_size':96,'num_attention_heads':4,'num_hidden_layers':2,"
             "'intermediate_size':32,'vocab_size':300,'num_experts':6,'num_experts_per_tok':2,'head_dim':null,"
             "'swiglu_alpha':2.0,'swiglu_limit':0.5,'attention_bias':false,'sliding_window':null,"
             "'layer_types':['full_attention','full_attention']}", &c);
    ck_assert(c.n_experts == 6 && c.head_dim == 24 && c.swiglu_alpha == 2.0 && c.swiglu_limit == 0.5);
    ck_assert(!c.qkv_bias && !c.o_bias && c.sliding_window == 0 && c.n_kv_heads == 4);
    /* refused: another activation, more experts per token than experts, a sliding layer without a window */
    EXPECT_REJECT("{'model_type':'gpt_oss','hidden_size':96,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':32,'vocab_size':300,'num_local_experts':4,'num_experts_per_tok':2,"
                  "'hidden_act':'gelu'}", RC_ERR_UNSUPPORTED, "hidden_act", "gelu");
    EXPECT_REJECT("{'model_type':'gpt_oss','hidden_size':96,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':32,'vocab_size':300,'num_local_experts':4,'num_experts_per_tok':5}",
                  RC_ERR_FORMAT, "num_experts_per_tok 5", "4 experts");
    EXPECT_REJECT("{'model_type':'gpt_oss','hidden_size':96,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':32,'vocab_size':300,'num_local_experts':4,'num_experts_per_tok':2,"
                  "'sliding_window':null}", RC_ERR_FORMAT, "layer 0", "no sliding window");
    /* the fixture's own config.json */
    char dir[4096];
    rc_model *m;
    ck_assert(rc_model_load_headers(rc_test_source_path(dir, sizeof dir, "data/fixtures/gptoss_sinks"), &m) ==
              RC_OK);
    ck_assert(m->cfg.head_dim == 16 && m->cfg.sliding_window == 5 && m->cfg.swiglu_limit == 1.5 &&
              m->cfg.n_experts == 5 && !m->cfg.layer_sliding[1] && m->cfg.layer_sliding[2]);
    rc_model_free(m);
}
END_TEST

/* Where transformers ignores a key, so does ratiocheck: MptMLP is 4 x d_model
 * whatever expansion_ratio says (a folder saved by MptForCausalLM with
 * expansion_ratio 2 holds 4 x d_model weights and loads); an eos_token_id
 * outside the vocabulary is dropped with a warning (HF warns and generates). */
START_TEST(test_hf_ignored_keys)
{
    rc_config c;
    parse_ok("{'model_type':'mpt','d_model':96,'n_layers':3,'n_heads':6,'expansion_ratio':2,'max_seq_len':64,"
             "'vocab_size':288,'no_bias':true,'attn_config':{'alibi':true}}", &c);
    ck_assert_int_eq(c.intermediate, 4 * 96);
    /* the mpt_alibi fixture with its config saying expansion_ratio 2 */
    char src[4096], buf[1 << 16];
    rc_test_source_path(src, sizeof src, "data/fixtures/mpt_alibi/config.json");
    FILE *f = fopen(src, "rb");
    ck_assert(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    json_error_t jerr;
    json_t *root = json_loads(buf, 0, &jerr);
    ck_assert(root != NULL);
    ck_assert(json_object_set_new(root, "expansion_ratio", json_integer(2)) == 0);
    char *text = json_dumps(root, 0);
    json_decref(root);
    write_config(text, strlen(text));
    free(text);
    char dst[1024];
    snprintf(dst, sizeof dst, "%s/model.safetensors", g_dir);
    rc_test_source_path(src, sizeof src, "data/fixtures/mpt_alibi/model.safetensors");
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    ck_assert(in && out);
    for (size_t k; (k = fread(buf, 1, sizeof buf, in)) > 0;)
        ck_assert_uint_eq(fwrite(buf, 1, k, out), k);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
    rc_model *m;
    ck_assert_msg(rc_model_load_headers(g_dir, &m) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(m->cfg.intermediate, 4 * m->cfg.hidden);
    rc_model_free(m);
    /* eos ids outside the vocabulary */
    char w[512];
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':1,"
             "'intermediate_size':128,'vocab_size':300,'eos_token_id':[2,400,7]}", &c);
    ck_assert_int_eq(c.n_eos, 2);
    ck_assert(c.eos_ids[0] == 2 && c.eos_ids[1] == 7);
    ck_assert_int_eq(c.n_eos_dropped, 1);
    ck_assert(rc_config_eos_warning(&c, w, sizeof w));
    ck_assert_msg(strstr(w, "eos_token_id 400") && strstr(w, "vocab_size 300") && strstr(w, "other EOS ids"), "%s",
                  w);
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':1,"
             "'intermediate_size':128,'vocab_size':300,'eos_token_id':300}", &c);
    ck_assert_int_eq(c.n_eos, 0);
    ck_assert(rc_config_eos_warning(&c, w, sizeof w));
    ck_assert_msg(strstr(w, "eos_token_id 300") && strstr(w, "no EOS"), "%s", w);
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':1,"
             "'intermediate_size':128,'vocab_size':300,'eos_token_id':299}", &c);
    ck_assert(!rc_config_eos_warning(&c, w, sizeof w) && w[0] == '\0' && c.n_eos == 1);
}
END_TEST

/* the MoE families: keys, defaults, which layers are MoE, refused values */
START_TEST(test_moe_families)
{
    rc_config c;
    /* Qwen1.5-MoE-A2.7B's config.json (sizes as published) */
    parse_ok("{'model_type':'qwen2_moe','hidden_size':2048,'num_attention_heads':16,'num_key_value_heads':16,"
             "'num_hidden_layers':24,'intermediate_size':5632,'moe_intermediate_size':1408,"
             "'shared_expert_intermediate_size':5632,'num_experts':60,'num_experts_per_tok':4,"
             "'decoder_sparse_step':1,'norm_topk_prob':false,'mlp_only_layers':[],'vocab_size':151936,"
             "'rms_norm_eps':1e-06,'rope_theta':1000000.0,'tie_word_embeddings':false}",
             &c);
    ck_assert_int_eq(c.n_experts, 60);
    ck_assert_int_eq(c.top_k, 4);
    ck_assert_int_eq(c.moe_intermediate, 1408);
    ck_assert_int_eq(c.shared_intermediate, 5632);
    ck_assert(!c.norm_topk_prob && !c.moe_weights_f32 && c.qkv_bias && !c.o_bias);
    ck_assert(rc_layer_is_moe(&c, 0) && rc_layer_is_moe(&c, 23));
    /* mlp_only_layers and decoder_sparse_step */
    parse_ok("{'model_type':'qwen2_moe','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':6,"
             "'intermediate_size':96,'moe_intermediate_size':40,'shared_expert_intermediate_size':56,"
             "'num_experts':6,'num_experts_per_tok':3,'decoder_sparse_step':2,'mlp_only_layers':[3],"
             "'vocab_size':300}",
             &c);
    ck_assert(!rc_layer_is_moe(&c, 0) && rc_layer_is_moe(&c, 1) && !rc_layer_is_moe(&c, 2) &&
              !rc_layer_is_moe(&c, 3) && rc_layer_is_moe(&c, 5));
    ck_assert(rc_weight_cond_holds_layer(&c, RC_IF_DENSE, 0) && !rc_weight_cond_holds_layer(&c, RC_IF_MOE, 0));
    ck_assert(rc_weight_cond_holds_layer(&c, RC_IF_SHARED_EXPERT, 1));
    /* Mixtral: MixtralConfig's defaults (8 experts, top 2), every layer MoE, fp32 renormalised weights */
    parse_ok("{'model_type':'mixtral','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
             "'num_hidden_layers':2,'intermediate_size':48,'vocab_size':300}",
             &c);
    ck_assert_int_eq(c.n_experts, 8);
    ck_assert_int_eq(c.top_k, 2);
    ck_assert_int_eq(c.moe_intermediate, 48);
    ck_assert(c.norm_topk_prob && c.moe_weights_f32 && c.shared_intermediate == 0 && c.sliding_window == 0);
    ck_assert(rc_layer_is_moe(&c, 0) && rc_layer_is_moe(&c, 1));
    /* Qwen3-MoE: num_local_experts is the name transformers v5 writes; q/k norm; no shared expert */
    parse_ok("{'model_type':'qwen3_moe','hidden_size':48,'head_dim':20,'num_attention_heads':4,"
             "'num_key_value_heads':2,'num_hidden_layers':3,'intermediate_size':72,'moe_intermediate_size':24,"
             "'num_local_experts':7,'num_experts_per_tok':3,'norm_topk_prob':true,'mlp_only_layers':[0],"
             "'vocab_size':260}",
             &c);
    ck_assert_int_eq(c.n_experts, 7);
    ck_assert_int_eq(c.head_dim, 20);
    ck_assert(c.norm_topk_prob && c.qk_norm == RC_QK_NORM_HEAD && c.shared_intermediate == 0);
    ck_assert(!rc_layer_is_moe(&c, 0) && rc_layer_is_moe(&c, 1));
    EXPECT_REJECT("{'model_type':'qwen3_moe','hidden_size':48,'num_attention_heads':4,'num_hidden_layers':3,"
                  "'intermediate_size':72,'num_experts':4,'num_local_experts':4,'vocab_size':260}",
                  RC_ERR_FORMAT, "num_experts", "num_local_experts");
    EXPECT_REJECT("{'model_type':'mixtral','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':2,"
                  "'intermediate_size':48,'num_local_experts':4,'num_experts_per_tok':5,'vocab_size':300}",
                  RC_ERR_FORMAT, "num_experts_per_tok 5");
    EXPECT_REJECT("{'model_type':'qwen2_moe','hidden_size':64,'num_attention_heads':4,'num_hidden_layers':3,"
                  "'intermediate_size':96,'mlp_only_layers':[3],'vocab_size':300}",
                  RC_ERR_FORMAT, "mlp_only_layers[0]");
}
END_TEST

START_TEST(test_qwen3_rejected)
{
    /* masking_utils raises for a sliding layer without a window */
    EXPECT_REJECT("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
                  "'num_hidden_layers':2,'head_dim':16,'intermediate_size':128,'vocab_size':300,"
                  "'use_sliding_window':false,'layer_types':['full_attention','sliding_attention']}",
                  RC_ERR_FORMAT, "layer 1", "sliding_window");
    EXPECT_REJECT("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
                  "'num_hidden_layers':2,'head_dim':16,'intermediate_size':128,'vocab_size':300,"
                  "'layer_types':['full_attention']}",
                  RC_ERR_FORMAT, "layer_types", "1 entries for 2 layers");
    EXPECT_REJECT("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
                  "'num_hidden_layers':2,'head_dim':16,'intermediate_size':128,'vocab_size':300,"
                  "'layer_types':['full_attention','chunked_attention']}",
                  RC_ERR_UNSUPPORTED, "chunked_attention");
    EXPECT_REJECT("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
                  "'num_hidden_layers':2,'head_dim':16,'intermediate_size':128,'vocab_size':300,"
                  "'hidden_act':'gelu'}",
                  RC_ERR_UNSUPPORTED, "hidden_act", "gelu");
    EXPECT_REJECT("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':4,'num_key_value_heads':2,"
                  "'num_hidden_layers':2,'head_dim':16,'intermediate_size':128,'vocab_size':300,"
                  "'rope_parameters':{'rope_type':'default','rope_theta':10000,'partial_rotary_factor':0.5}}",
                  RC_ERR_UNSUPPORTED, "partial_rotary_factor");
    EXPECT_REJECT("{'model_type':'qwen3','hidden_size':64,'num_attention_heads':4,"
                  "'num_hidden_layers':2,'head_dim':16,'intermediate_size':128,'vocab_size':300}",
                  RC_ERR_FORMAT, "num_attention_heads 4", "num_key_value_heads 32");
}
END_TEST

START_TEST(test_llama_gqa_llama3)
{
    rc_config c;
    parse_ok("{'architectures':['LlamaForCausalLM'],'model_type':'llama','hidden_size':100,"
             "'num_attention_heads':8,'num_key_value_heads':2,'head_dim':16,"
             "'num_hidden_layers':3,'intermediate_size':300,'vocab_size':128256,"
             "'max_position_embeddings':131072,'rms_norm_eps':1e-05,'hidden_act':'silu',"
             "'rope_theta':500000.0,'rope_scaling':{'rope_type':'llama3','factor':8.0,"
             "'low_freq_factor':1.0,'high_freq_factor':4.0,"
             "'original_max_position_embeddings':8192},"
             "'tie_word_embeddings':true,'bos_token_id':128000,"
             "'eos_token_id':[128001,128008,128009],'pretraining_tp':1,"
             "'attention_bias':false,'mlp_bias':false}",
             &c);
    ck_assert_str_eq(c.model_type, "llama");
    ck_assert_str_eq(c.arch->family, "llama");
    ck_assert_int_eq(c.n_layers, 3);
    ck_assert_int_eq(c.hidden, 100);
    ck_assert_int_eq(c.n_heads, 8);
    ck_assert_int_eq(c.n_kv_heads, 2);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.intermediate, 300);
    ck_assert_int_eq(c.vocab, 128256);
    ck_assert_int_eq(c.max_pos, 131072);
    ck_assert(c.norm_eps == 1e-5);
    ck_assert_int_eq(c.norm, RC_NORM_RMS);
    ck_assert_int_eq(c.act, RC_ACT_SILU);
    ck_assert(c.gated_mlp);
    ck_assert(!c.parallel_residual);
    ck_assert(c.tie_embeddings);
    ck_assert(!c.qkv_bias);
    ck_assert(!c.o_bias);
    ck_assert(!c.mlp_bias);
    ck_assert(!c.norm_bias);
    ck_assert_int_eq(c.rotary_dim, 16);
    ck_assert(c.rope_theta == 500000.0);
    ck_assert_int_eq(c.rope_type, RC_ROPE_LLAMA3);
    ck_assert(c.rope_factor == 8.0);
    ck_assert(c.rope_low_freq == 1.0);
    ck_assert(c.rope_high_freq == 4.0);
    ck_assert_int_eq(c.rope_orig_max_pos, 8192);
    ck_assert_int_eq(c.sliding_window, 0);
    ck_assert_int_eq(c.bos_id, 128000);
    ck_assert_int_eq(c.n_eos, 3);
    ck_assert_int_eq(c.eos_ids[0], 128001);
    ck_assert_int_eq(c.eos_ids[1], 128008);
    ck_assert_int_eq(c.eos_ids[2], 128009);
}
END_TEST

START_TEST(test_llama_v5_rope_parameters_llama3)
{
    /* transformers v5 moves the scaling keys into rope_parameters */
    rc_config c;
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'rope_parameters':{'rope_type':'llama3','rope_theta':500000.0,'factor':32.0,"
             "'low_freq_factor':1.0,'high_freq_factor':4.0,"
             "'original_max_position_embeddings':8192}}",
             &c);
    ck_assert_int_eq(c.rope_type, RC_ROPE_LLAMA3);
    ck_assert(c.rope_theta == 500000.0);
    ck_assert(c.rope_factor == 32.0);
    ck_assert_int_eq(c.rope_orig_max_pos, 8192);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.rotary_dim, 16);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert(c.norm_eps == 1e-6); /* llama default */
    ck_assert(c.rope_theta == 500000.0);
}
END_TEST

START_TEST(test_llama_linear_old_form)
{
    rc_config c;
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
             "'num_hidden_layers':2,'intermediate_size':176,'vocab_size':32000,"
             "'max_position_embeddings':4096,'rms_norm_eps':1e-06,"
             "'rope_scaling':{'type':'linear','factor':2.0},'bos_token_id':1,'eos_token_id':2}",
             &c);
    ck_assert_int_eq(c.rope_type, RC_ROPE_LINEAR);
    ck_assert(c.rope_factor == 2.0);
    ck_assert(c.rope_theta == 10000.0);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.rotary_dim, 16);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert(!c.tie_embeddings);
    ck_assert(!c.qkv_bias && !c.o_bias && !c.mlp_bias);
    ck_assert_int_eq(c.bos_id, 1);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 2);
    ck_assert_int_eq(c.max_pos, 4096);
}
END_TEST

START_TEST(test_llama_attention_bias)
{
    rc_config c;
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'attention_bias':true,'mlp_bias':true,'rope_scaling':null}",
             &c);
    ck_assert(c.qkv_bias);
    ck_assert(c.o_bias);
    ck_assert(c.mlp_bias);
    ck_assert_int_eq(c.rope_type, RC_ROPE_DEFAULT);
    ck_assert(c.rope_factor == 1.0);
}
END_TEST

START_TEST(test_qwen2_biases)
{
    rc_config c;
    /* qwen2 ignores attention_bias: q/k/v always have a bias, o_proj never */
    parse_ok("{'model_type':'qwen2','hidden_size':896,'num_attention_heads':14,"
             "'num_key_value_heads':2,'num_hidden_layers':24,'intermediate_size':4864,"
             "'vocab_size':151936,'max_position_embeddings':32768,'rms_norm_eps':1e-06,"
             "'rope_theta':1000000.0,'sliding_window':32768,'use_sliding_window':false,"
             "'max_window_layers':21,'tie_word_embeddings':true,'bos_token_id':151643,"
             "'eos_token_id':151643,'attention_bias':false,'hidden_act':'silu'}",
             &c);
    ck_assert_str_eq(c.model_type, "qwen2");
    ck_assert_str_eq(c.arch->family, "llama");
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.n_kv_heads, 2);
    ck_assert(c.qkv_bias);
    ck_assert(!c.o_bias);
    ck_assert(!c.mlp_bias);
    ck_assert(c.tie_embeddings);
    ck_assert(c.rope_theta == 1e6);
    ck_assert_int_eq(c.rotary_dim, 64);
    ck_assert_int_eq(c.sliding_window, 0); /* disabled by use_sliding_window */
    ck_assert_int_eq(c.norm, RC_NORM_RMS);
    ck_assert(c.gated_mlp);
}
END_TEST

START_TEST(test_mistral_sliding_window)
{
    rc_config c;
    parse_ok("{'model_type':'mistral','hidden_size':128,'num_attention_heads':4,"
             "'num_key_value_heads':1,'num_hidden_layers':2,'intermediate_size':448,"
             "'vocab_size':32000,'max_position_embeddings':32768,'rms_norm_eps':1e-05,"
             "'rope_theta':10000.0,'sliding_window':4096,'tie_word_embeddings':false}",
             &c);
    ck_assert_str_eq(c.model_type, "mistral");
    ck_assert_int_eq(c.sliding_window, 4096);
    ck_assert_int_eq(c.n_kv_heads, 1);
    ck_assert_int_eq(c.head_dim, 32);
    ck_assert(!c.qkv_bias && !c.o_bias);

    parse_ok("{'model_type':'mistral','hidden_size':128,'num_attention_heads':4,"
             "'num_key_value_heads':2,'head_dim':64,'num_hidden_layers':2,"
             "'intermediate_size':448,'vocab_size':32768,'sliding_window':null,"
             "'rope_theta':1000000.0}",
             &c);
    ck_assert_int_eq(c.sliding_window, 0);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.rotary_dim, 64);
    ck_assert(c.rope_theta == 1e6);
}
END_TEST

START_TEST(test_integral_reals)
{
    rc_config c;
    parse_ok("{'model_type':'llama','hidden_size':64.0,'num_attention_heads':4.0,"
             "'num_key_value_heads':2.0,'num_hidden_layers':4.0,'intermediate_size':1.28e2,"
             "'vocab_size':300.0,'max_position_embeddings':1024.0,'head_dim':16.0,"
             "'bos_token_id':1.0}",
             &c);
    ck_assert_int_eq(c.hidden, 64);
    ck_assert_int_eq(c.n_heads, 4);
    ck_assert_int_eq(c.n_kv_heads, 2);
    ck_assert_int_eq(c.n_layers, 4);
    ck_assert_int_eq(c.intermediate, 128);
    ck_assert_int_eq(c.vocab, 300);
    ck_assert_int_eq(c.max_pos, 1024);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.bos_id, 1);
}
END_TEST

START_TEST(test_integral_real_eos)
{
    /* eos_token_id is an integer field too: 2.0 (and [2.0, 3.0]) should be
     * accepted like bos_token_id 1.0 above */
    rc_config c;
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'eos_token_id':2.0}",
             &c);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_ids[0], 2);
    parse_ok("{'model_type':'llama','hidden_size':64,'num_attention_heads':4,"
             "'num_hidden_layers':1,'intermediate_size':128,'vocab_size':300,"
             "'eos_token_id':[2.0,3.0]}",
             &c);
    ck_assert_int_eq(c.n_eos, 2);
    ck_assert_int_eq(c.eos_ids[1], 3);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *ok = tcase_create("valid");
    tcase_add_checked_fixture(ok, setup, teardown);
    tcase_add_test(ok, test_pythia_old_keys);
    tcase_add_test(ok, test_pythia_load_from_folder);
    tcase_add_test(ok, test_neox_v5_rope_parameters);
    tcase_add_test(ok, test_neox_defaults);
    tcase_add_test(ok, test_llama_gqa_llama3);
    rejected_tests_in_valid(ok);
    tcase_add_test(ok, test_qwen3);
    tcase_add_test(ok, test_hf_ignored_keys);
    tcase_add_test(ok, test_olmo2);
    tcase_add_test(ok, test_gemma2);
    tcase_add_test(ok, test_gemma3_text);
    tcase_add_test(ok, test_olmo3);
    tcase_add_test(ok, test_phi3);
    tcase_add_test(ok, test_glm4);
    tcase_add_test(ok, test_gpt_oss);
    tcase_add_test(ok, test_glm4_moe);
    tcase_add_test(ok, test_qwen3_next);
    tcase_add_test(ok, test_llama_v5_rope_parameters_llama3);
    tcase_add_test(ok, test_llama_linear_old_form);
    tcase_add_test(ok, test_llama_attention_bias);
    tcase_add_test(ok, test_qwen2_biases);
    tcase_add_test(ok, test_mistral_sliding_window);
    tcase_add_test(ok, test_integral_reals);
    tcase_add_test(ok, test_integral_real_eos);
    rejected_tests_in_valid_2(ok);
    suite_add_tcase(s, ok);

    TCase *bad = tcase_create("rejected");
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_add_test(bad, test_load_missing_config);
    rejected_tests_in_rejected(bad);
    tcase_add_test(bad, test_qwen3_rejected);
    rejected_tests_in_rejected_2(bad);
    suite_add_tcase(s, bad);

    TCase *fam = tcase_create("family structure");
    family_tests_in_family_structure(fam);
    tcase_add_test(fam, test_moe_families);
    family_tests_in_family_structure_2(fam);
    suite_add_tcase(s, fam);
    return s;
}

int main(void)
{
    if (!rc_test_mkdtemp(g_base, sizeof g_base, "/tmp/rc_test_cfg_")) {
        perror("mkdtemp");
        return 1;
    }
    int status = rc_test_run(config_suite());
    rc_test_rm_rf(g_base); /* also the folders of failed tests (no teardown in fork mode) */
    return status;
}
