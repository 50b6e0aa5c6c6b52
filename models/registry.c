/* Registry: HF model_type -> family implementation (one file per family).
 * A new family is one extern line and one entry in k_archs. */
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

static const rc_arch *const k_archs[] = {&rc_arch_gpt_neox, &rc_arch_llama, &rc_arch_gpt2, &rc_arch_bloom,
                                         &rc_arch_mpt, &rc_arch_baichuan, &rc_arch_qwen3, &rc_arch_olmo2,
                                         &rc_arch_qwen2_moe, &rc_arch_mixtral, &rc_arch_qwen3_moe, &rc_arch_gemma2,
                                         &rc_arch_gemma3_text, &rc_arch_olmo3, &rc_arch_phi3, &rc_arch_glm4,
                                         &rc_arch_gpt_oss, &rc_arch_deepseek_v3,
                                         &rc_arch_glm4_moe, &rc_arch_qwen3_next, NULL};

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
    static char buf[512];
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
    memcpy(buf, tmp, sizeof buf);
    return buf;
}
