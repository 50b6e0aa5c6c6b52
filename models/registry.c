/* Registry: HF model_type -> family implementation (one file per family).
 * A new family is one extern line and one entry in k_archs; a multimodal
 * wrapper whose text model is a family here, one row of k_wrappers. */
#include <stdio.h>
#include <string.h>

#include "model.h"

extern const rc_arch rc_arch_gpt_neox;
extern const rc_arch rc_arch_llama;
extern const rc_arch rc_arch_gpt2;
extern const rc_arch rc_arch_bloom;
extern const rc_arch rc_arch_mpt;
extern const rc_arch rc_arch_baichuan;
extern const rc_arch rc_arch_qwen3;
extern const rc_arch rc_arch_olmo2;
extern const rc_arch rc_arch_qwen2_moe;
extern const rc_arch rc_arch_mixtral;
extern const rc_arch rc_arch_qwen3_moe;
extern const rc_arch rc_arch_gemma2;
extern const rc_arch rc_arch_gemma3_text;
extern const rc_arch rc_arch_olmo3;
extern const rc_arch rc_arch_phi3;
extern const rc_arch rc_arch_glm4;
extern const rc_arch rc_arch_gpt_oss;
extern const rc_arch rc_arch_deepseek_v3;
extern const rc_arch rc_arch_glm4_moe;
extern const rc_arch rc_arch_qwen3_next;
extern const rc_arch rc_arch_qwen3_5_moe_text;
extern const rc_arch rc_arch_qwen3_5_text;

static const rc_arch *const k_archs[] = {&rc_arch_gpt_neox, &rc_arch_llama, &rc_arch_gpt2, &rc_arch_bloom,
                                         &rc_arch_mpt, &rc_arch_baichuan, &rc_arch_qwen3, &rc_arch_olmo2,
                                         &rc_arch_qwen2_moe, &rc_arch_mixtral, &rc_arch_qwen3_moe, &rc_arch_gemma2,
                                         &rc_arch_gemma3_text, &rc_arch_olmo3, &rc_arch_phi3, &rc_arch_glm4,
                                         &rc_arch_gpt_oss, &rc_arch_deepseek_v3,
                                         &rc_arch_glm4_moe, &rc_arch_qwen3_next, &rc_arch_qwen3_5_moe_text,
                                         &rc_arch_qwen3_5_text, NULL};

/* Multimodal wrappers read as their text model (rc_wrapper in model.h; docs/models.md "Multimodal wrapper
 * folders"). The prefixes: transformers v5's save_pretrained layout (model.language_model.*, the head
 * lm_head.weight at the top level); Gemma 3's published files use transformers 4's (language_model.model.*,
 * language_model.lm_head.weight), which v5 renames on load. */
static const char *const k_v5_prefixes[] = {"model.language_model.", "", NULL};
static const char *const k_gemma3_prefixes[] = {"model.language_model.", "language_model.model.", "language_model.",
                                                "", NULL};
static const rc_wrapper k_wrapper_rows[] = {
    {"qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe_text", "text_config", k_v5_prefixes, false,
     false},
    {"qwen3_5", "Qwen3_5ForConditionalGeneration", "qwen3_5_text", "text_config", k_v5_prefixes, false, false},
    /* Gemma3ForConditionalGeneration.forward returns lm_head's logits without final_logit_softcapping */
    {"gemma3", "Gemma3ForConditionalGeneration", "gemma3_text", "text_config", k_gemma3_prefixes, true, true},
};
static const rc_wrapper *const k_wrappers[] = {&k_wrapper_rows[0], &k_wrapper_rows[1], &k_wrapper_rows[2], NULL};

const rc_wrapper *rc_wrapper_for_model_type(const char *model_type)
{
    for (int w = 0; k_wrappers[w]; w++)
        if (strcmp(k_wrappers[w]->model_type, model_type) == 0)
            return k_wrappers[w];
    return NULL;
}

const rc_wrapper *const *rc_wrapper_all(void) { return k_wrappers; }

const char *const *rc_config_prefixes(const rc_config *cfg)
{
    return cfg->wrapper ? cfg->wrapper->prefixes : cfg->arch->prefixes;
}

const rc_arch *rc_arch_for_model_type(const char *model_type)
{
    for (int a = 0; k_archs[a]; a++)
        for (int t = 0; k_archs[a]->model_types[t]; t++)
            if (strcmp(k_archs[a]->model_types[t], model_type) == 0)
                return k_archs[a];
    return NULL;
}

const rc_arch *const *rc_arch_all(void) { return k_archs; }

const char *rc_arch_supported_list(void)
{
    /* written whole on every call (always the same text), from the registry */
    static char buf[768];
    char tmp[sizeof buf];
    size_t o = 0;
    tmp[0] = '\0';
    for (int a = 0; k_archs[a]; a++)
        for (int t = 0; k_archs[a]->model_types[t]; t++) {
            int n = snprintf(tmp + o, sizeof tmp - o, "%s%s", o ? ", " : "", k_archs[a]->model_types[t]);
            if (n < 0 || (size_t)n >= sizeof tmp - o)
                break;
            o += (size_t)n;
        }
    for (int w = 0; k_wrappers[w]; w++) {
        int n = snprintf(tmp + o, sizeof tmp - o, ", %s", k_wrappers[w]->model_type);
        if (n < 0 || (size_t)n >= sizeof tmp - o)
            break;
        o += (size_t)n;
    }
    memcpy(buf, tmp, sizeof buf);
    return buf;
}
