/* Llama family: transformers' LlamaForCausalLM, MistralForCausalLM and
 * Qwen2ForCausalLM (same forward pass, different bias and window rules).
 *
 * config.json: rms_norm_eps, hidden_act ("silu"), num_key_value_heads (GQA),
 *   head_dim (explicit, else hidden_size / num_attention_heads), rope_theta,
 *   rope_scaling (none / linear / llama3; also under rope_parameters),
 *   tie_word_embeddings, attention_bias and mlp_bias (llama), sliding_window
 *   (mistral; qwen2 only when use_sliding_window, which we reject).
 * Tensors (optional "model." prefix on everything but lm_head):
 *   embed_tokens.weight                       [V, H]
 *   layers.{i}.input_layernorm.weight         [H]
 *   layers.{i}.self_attn.q_proj.weight        [nh*d, H]   (+ .bias [nh*d])
 *   layers.{i}.self_attn.k_proj.weight        [nkv*d, H]  (+ .bias [nkv*d])
 *   layers.{i}.self_attn.v_proj.weight        [nkv*d, H]  (+ .bias [nkv*d])
 *   layers.{i}.self_attn.o_proj.weight        [H, nh*d]   (+ .bias [H] with attention_bias)
 *   layers.{i}.post_attention_layernorm.weight [H]
 *   layers.{i}.mlp.gate_proj.weight           [I, H]      (+ .bias with mlp_bias)
 *   layers.{i}.mlp.up_proj.weight             [I, H]
 *   layers.{i}.mlp.down_proj.weight           [H, I]
 *   norm.weight                               [H]
 *   lm_head.weight                            [V, H]      (absent when tied)
 * Forward details: RMSNorm (fp32 normalise, cast, multiply weight), rotate-half
 * RoPE over the whole head (partial_rotary_factor if given), SwiGLU, GQA
 * (q head h reads kv head h / (nh / nkv)), sequential residual. */
#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "model.h"
#include "util.h"

static const char *const k_types[] = {"llama", "mistral", "qwen2", NULL};
static const char *const k_prefixes[] = {"model.", "", NULL};

static rc_status llama_parse(const json_t *root, const char *path, rc_config *cfg)
{
    bool present;
    RC_TRY(rc_json_get_int(root, "num_key_value_heads", path, 1, cfg->n_heads, cfg->n_heads,
                           &cfg->n_kv_heads, NULL));
    RC_TRY(rc_json_get_int(root, "head_dim", path, 1, 4096, 0, &cfg->head_dim, &present));
    if (!present) {
        if (cfg->hidden % cfg->n_heads != 0)
            return rc_errorf(RC_ERR_FORMAT,
                             "%s: hidden_size %lld is not a multiple of num_attention_heads %lld "
                             "(and head_dim is not given)",
                             path, (long long)cfg->hidden, (long long)cfg->n_heads);
        cfg->head_dim = cfg->hidden / cfg->n_heads;
    }
    cfg->norm = RC_NORM_RMS;
    cfg->norm_bias = false;
    cfg->gated_mlp = true;
    cfg->parallel_residual = false;
    const char *act;
    RC_TRY(rc_json_get_str(root, "hidden_act", path, "silu", &act, NULL));
    if (strcmp(act, "silu") != 0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported for %s (supported: silu)",
                         path, act, cfg->model_type);
    cfg->act = RC_ACT_SILU;
    RC_TRY(rc_config_get_norm_eps(root, path, "rms_norm_eps", 1e-6, &cfg->norm_eps));
    RC_TRY(rc_json_get_bool(root, "tie_word_embeddings", path, false, &cfg->tie_embeddings, NULL));
    int64_t tp;
    RC_TRY(rc_json_get_int(root, "pretraining_tp", path, 1, 1024, 1, &tp, NULL));
    if (tp != 1)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: pretraining_tp = %lld is not supported (only 1)", path,
                         (long long)tp);
    if (strcmp(cfg->model_type, "qwen2") == 0) {
        cfg->qkv_bias = true; /* Qwen2Attention: q/k/v bias=True, o_proj bias=False */
        cfg->o_bias = false;
        cfg->mlp_bias = false;
        bool sw;
        RC_TRY(rc_json_get_bool(root, "use_sliding_window", path, false, &sw, NULL));
        if (sw)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: qwen2 use_sliding_window = true is not supported", path);
    } else {
        bool ab = false, mb = false;
        RC_TRY(rc_json_get_bool(root, "attention_bias", path, false, &ab, NULL));
        RC_TRY(rc_json_get_bool(root, "mlp_bias", path, false, &mb, NULL));
        cfg->qkv_bias = cfg->o_bias = ab;
        cfg->mlp_bias = mb;
        if (strcmp(cfg->model_type, "mistral") == 0) {
            RC_TRY(rc_json_get_int(root, "sliding_window", path, 1, INT64_MAX, 0, &cfg->sliding_window, NULL));
            /* MistralConfig's default is 4096 * 32 */
            RC_TRY(rc_json_get_int(root, "max_position_embeddings", path, 1, 1 << 24, 4096 * 32,
                                   &cfg->max_pos, NULL));
        }
    }
    return rc_config_parse_rope(root, path, cfg, 10000.0, 1.0, NULL, NULL);
}

static rc_status llama_size(const rc_config *c, int64_t *n)
{
    int64_t H = c->hidden, I = c->intermediate, q = c->n_heads * c->head_dim,
            kv = c->n_kv_heads * c->head_dim;
    int64_t layer = 2 * H + (q + 2 * kv) * H + H * q + 3 * I * H;
    if (c->qkv_bias)
        layer += q + 2 * kv;
    if (c->o_bias)
        layer += H;
    if (c->mlp_bias)
        layer += 2 * I + H;
    *n = c->vocab * H * (c->tie_embeddings ? 1 : 2) + H + c->n_layers * layer;
    return RC_OK;
}

static rc_status llama_load(rc_loader *ld, rc_weights *w)
{
    const rc_config *c = ld->cfg;
    const int64_t H = c->hidden, I = c->intermediate, V = c->vocab;
    const int64_t q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    char nb[256], rb[256];
#define NAME(...) (snprintf(nb, sizeof nb, __VA_ARGS__), rc_loader_resolve(ld, k_prefixes, nb, rb, sizeof rb))
    RC_TRY(rc_loader_get(ld, NAME("embed_tokens.weight"), 2, (int64_t[]){V, H}, &w->embed));
    RC_TRY(rc_loader_get(ld, NAME("norm.weight"), 1, (int64_t[]){H}, &w->lnf_w));
    w->lnf_b = NULL;
    if (c->tie_embeddings)
        w->lm_head = w->embed;
    else
        RC_TRY(rc_loader_get(ld, NAME("lm_head.weight"), 2, (int64_t[]){V, H}, &w->lm_head));
    for (int64_t l = 0; l < c->n_layers; l++) {
        rc_layer_weights *L = &w->layers[l];
        char pre[64];
        snprintf(pre, sizeof pre, "layers.%lld.", (long long)l);
        RC_TRY(rc_loader_get(ld, NAME("%sinput_layernorm.weight", pre), 1, (int64_t[]){H}, &L->ln1_w));
        RC_TRY(rc_loader_get(ld, NAME("%spost_attention_layernorm.weight", pre), 1, (int64_t[]){H}, &L->ln2_w));
        /* q, k, v are consecutive in the arena: that is the fused [Q; K; V] matrix */
        float *wq, *wk, *wv;
        RC_TRY(rc_loader_get(ld, NAME("%sself_attn.q_proj.weight", pre), 2, (int64_t[]){q, H}, &wq));
        RC_TRY(rc_loader_get(ld, NAME("%sself_attn.k_proj.weight", pre), 2, (int64_t[]){kv, H}, &wk));
        RC_TRY(rc_loader_get(ld, NAME("%sself_attn.v_proj.weight", pre), 2, (int64_t[]){kv, H}, &wv));
        if (wk != wq + q * H || wv != wk + kv * H)
            return rc_errorf(RC_ERR_INTERNAL, "q/k/v weights are not contiguous");
        L->w_qkv = wq;
        if (c->qkv_bias) {
            float *bq, *bk, *bv;
            RC_TRY(rc_loader_get(ld, NAME("%sself_attn.q_proj.bias", pre), 1, (int64_t[]){q}, &bq));
            RC_TRY(rc_loader_get(ld, NAME("%sself_attn.k_proj.bias", pre), 1, (int64_t[]){kv}, &bk));
            RC_TRY(rc_loader_get(ld, NAME("%sself_attn.v_proj.bias", pre), 1, (int64_t[]){kv}, &bv));
            if (bk != bq + q || bv != bk + kv)
                return rc_errorf(RC_ERR_INTERNAL, "q/k/v biases are not contiguous");
            L->b_qkv = bq;
        }
        RC_TRY(rc_loader_get(ld, NAME("%sself_attn.o_proj.weight", pre), 2, (int64_t[]){H, q}, &L->w_o));
        if (c->o_bias)
            RC_TRY(rc_loader_get(ld, NAME("%sself_attn.o_proj.bias", pre), 1, (int64_t[]){H}, &L->b_o));
        RC_TRY(rc_loader_get(ld, NAME("%smlp.gate_proj.weight", pre), 2, (int64_t[]){I, H}, &L->w_gate));
        RC_TRY(rc_loader_get(ld, NAME("%smlp.up_proj.weight", pre), 2, (int64_t[]){I, H}, &L->w_up));
        RC_TRY(rc_loader_get(ld, NAME("%smlp.down_proj.weight", pre), 2, (int64_t[]){H, I}, &L->w_down));
        if (c->mlp_bias) {
            RC_TRY(rc_loader_get(ld, NAME("%smlp.gate_proj.bias", pre), 1, (int64_t[]){I}, &L->b_gate));
            RC_TRY(rc_loader_get(ld, NAME("%smlp.up_proj.bias", pre), 1, (int64_t[]){I}, &L->b_up));
            RC_TRY(rc_loader_get(ld, NAME("%smlp.down_proj.bias", pre), 1, (int64_t[]){H}, &L->b_down));
        }
    }
#undef NAME
    return RC_OK;
}

const rc_arch rc_arch_llama = {
    .family = "llama",
    .model_types = k_types,
    .parse_config = llama_parse,
    .weights_size = llama_size,
    .load = llama_load,
};
