/* testutil_llama.h: a Llama checkpoint written by a test (config.json and model.safetensors, random fp32
 * weights drawn from frand), for shapes no fixture has: test_cuda_model.c's block-weight model and
 * test_cuda_multi.c's model whose weights outweigh a small batch's activations. */
#ifndef RC_TESTUTIL_LLAMA_H
#define RC_TESTUTIL_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int hidden, intermediate, heads, kv_heads, head_dim, layers, vocab;
    bool tied;   /* tie_word_embeddings (else an lm_head.weight after the final norm) */
    float scale; /* the layers' projections and the head: frand(scale); the embedding frand(1), norms 1 + frand(0.1) */
} rc_test_llama;

/* The element count of one layer's tensors (its two norms and seven projections). */
int64_t rc_test_llama_layer_n(const rc_test_llama *s);

/* Writes the model into dir: the tensors in header order -- embedding, each layer's input_layernorm,
 * post_attention_layernorm, q/k/v/o_proj, gate/up/down_proj, the final norm, the head unless tied -- and
 * their values in that order, one frand call per element. */
void rc_test_write_llama(const char *dir, const rc_test_llama *s);

#endif
