/* Model description (from config.json), weights (from safetensors) and the
 * architecture registry. Weights are held in fp32 on the host; the forward
 * pass (forward.c) is generic over the flags in rc_config, and each family
 * file in models/ maps its HF config fields and tensor names onto them. */
#ifndef RC_MODEL_H
#define RC_MODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "safetensors.h"
#include "status.h"

typedef enum { RC_NORM_LAYER, RC_NORM_RMS } rc_norm_kind;
typedef enum { RC_ACT_GELU_ERF, RC_ACT_GELU_TANH, RC_ACT_SILU } rc_act;
typedef enum { RC_ROPE_DEFAULT, RC_ROPE_LINEAR, RC_ROPE_LLAMA3 } rc_rope_type;

#define RC_MAX_EOS 8

typedef struct rc_arch rc_arch;

typedef struct {
    char model_type[32];     /* HF model_type, e.g. "gpt_neox", "qwen2" */
    const rc_arch *arch;     /* family implementation (models/) */
    int64_t n_layers;
    int64_t hidden;          /* hidden_size */
    int64_t n_heads;         /* num_attention_heads */
    int64_t n_kv_heads;      /* num_key_value_heads (== n_heads without GQA) */
    int64_t head_dim;
    int64_t intermediate;    /* MLP inner size */
    int64_t vocab;           /* rows of the embedding / LM head */
    int64_t max_pos;         /* max_position_embeddings */
    double norm_eps;
    rc_norm_kind norm;
    rc_act act;
    bool gated_mlp;          /* SwiGLU: down(act(gate(x)) * up(x)) */
    bool parallel_residual;  /* x + attn(ln1(x)) + mlp(ln2(x)) */
    bool tie_embeddings;     /* LM head reuses the input embedding */
    bool qkv_bias, o_bias, mlp_bias;
    bool norm_bias;          /* LayerNorm has a bias */
    int64_t rotary_dim;      /* leading dims of each head that are rotated (even) */
    double rope_theta;
    rc_rope_type rope_type;
    double rope_factor, rope_low_freq, rope_high_freq;
    int64_t rope_orig_max_pos;
    int64_t sliding_window;  /* 0: none */
    int64_t bos_id;          /* -1: none */
    int64_t eos_ids[RC_MAX_EOS];
    int n_eos;
} rc_config;

/* One transformer block. Q, K and V are stored fused for every family. */
typedef struct {
    float *ln1_w;  /* [hidden] */
    float *ln1_b;  /* [hidden], NULL for RMSNorm */
    float *ln2_w;  /* [hidden] */
    float *ln2_b;  /* [hidden], NULL for RMSNorm */
    float *w_qkv;  /* [(n_heads + 2*n_kv_heads) * head_dim, hidden]: all Q rows, then K, then V */
    float *b_qkv;  /* [(n_heads + 2*n_kv_heads) * head_dim] or NULL */
    float *w_o;    /* [hidden, n_heads * head_dim] */
    float *b_o;    /* [hidden] or NULL */
    float *w_up;   /* [intermediate, hidden] (neox dense_h_to_4h, llama up_proj) */
    float *b_up;   /* [intermediate] or NULL */
    float *w_gate; /* [intermediate, hidden] (llama gate_proj), NULL when not gated */
    float *b_gate; /* [intermediate] or NULL */
    float *w_down; /* [hidden, intermediate] */
    float *b_down; /* [hidden] or NULL */
} rc_layer_weights;

typedef struct {
    float *embed;             /* [vocab, hidden] */
    float *lnf_w;             /* [hidden] */
    float *lnf_b;             /* [hidden] or NULL */
    float *lm_head;           /* [vocab, hidden]; aliases embed when tied */
    rc_layer_weights *layers; /* [n_layers] */
    float *inv_freq;          /* [rotary_dim / 2], fp32 as HF computes it */
} rc_weights;

typedef struct {
    char *dir;
    rc_config cfg;
    rc_weights w;
    float *arena;          /* all weight storage */
    int64_t arena_len;     /* floats */
    int64_t n_params;      /* elements of floating tensors in the checkpoint */
    char stored_dtype[16]; /* dtype of the embedding tensor in the files */
} rc_model;

/* Weight-loading context handed to the family loaders. */
typedef struct {
    const rc_safetensors *st;
    const rc_config *cfg;
    float *arena;
    int64_t used, cap;
} rc_loader;

/* Take n floats from the arena. */
float *rc_loader_take(rc_loader *ld, int64_t n);
/* Load tensor `name` with the given shape into fresh arena storage. */
rc_status rc_loader_get(rc_loader *ld, const char *name, int ndim, const int64_t *shape, float **out);
/* Like rc_loader_get, but a missing tensor gives *out = NULL and RC_OK. */
rc_status rc_loader_get_opt(rc_loader *ld, const char *name, int ndim, const int64_t *shape,
                            float **out);
/* Find `name` with or without a prefix ("" / "model." / "gpt_neox." ...). */
const char *rc_loader_resolve(const rc_loader *ld, const char *const *prefixes, const char *name,
                              char *buf, size_t n);

struct rc_arch {
    const char *family;             /* "gpt_neox", "llama" */
    const char *const *model_types; /* NULL-terminated list of HF model_type values */
    /* Fill the family fields of cfg from config.json (common fields already read). */
    rc_status (*parse_config)(const json_t *root, const char *path, rc_config *cfg);
    /* Number of floats the family's weights need (for the arena). */
    rc_status (*weights_size)(const rc_config *cfg, int64_t *n);
    /* Load the weights. */
    rc_status (*load)(rc_loader *ld, rc_weights *w);
};

/* models/registry.c */
const rc_arch *rc_arch_for_model_type(const char *model_type);
/* Comma-separated list of supported model types, for messages. */
const char *rc_arch_supported_list(void);

/* hf_config.c: parse config.json (or a JSON object already loaded). */
rc_status rc_config_load(const char *dir, rc_config *cfg);
rc_status rc_config_parse(const json_t *root, const char *path, rc_config *cfg);

/* Shared config helpers for the family files. */
rc_status rc_config_parse_rope(const json_t *root, const char *path, rc_config *cfg,
                               double default_theta, double default_partial,
                               const char *legacy_theta_key, const char *legacy_partial_key);
rc_status rc_config_finish(const char *path, rc_config *cfg);
/* A norm epsilon (rms_norm_eps, layer_norm_eps): a number > 0 that stays > 0
 * as fp32 (the forward adds (float)eps), at most 1; else RC_ERR_FORMAT
 * naming the file and the key. */
rc_status rc_config_get_norm_eps(const json_t *root, const char *path, const char *key, double def,
                                 double *out);

/* model.c */
rc_status rc_model_load(const char *dir, rc_model **out);
void rc_model_free(rc_model *m);
/* Compute HF's fp32 inv_freq for cfg (rope type and scaling included). */
void rc_rope_inv_freq(const rc_config *cfg, float *inv_freq);

#endif
