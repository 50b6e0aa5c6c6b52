/* Registry: HF model_type -> family implementation (one file per family). */
#include <string.h>

#include "model.h"

extern const rc_arch rc_arch_gpt_neox;
extern const rc_arch rc_arch_llama;

static const rc_arch *const k_archs[] = {&rc_arch_gpt_neox, &rc_arch_llama, NULL};

const rc_arch *rc_arch_for_model_type(const char *model_type)
{
    for (int a = 0; k_archs[a]; a++)
        for (int t = 0; k_archs[a]->model_types[t]; t++)
            if (strcmp(k_archs[a]->model_types[t], model_type) == 0)
                return k_archs[a];
    return NULL;
}

const char *rc_arch_supported_list(void) { return "gpt_neox, llama, mistral, qwen2"; }
