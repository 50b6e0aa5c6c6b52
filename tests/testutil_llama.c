/* testutil_llama.c: the Llama checkpoint writer of testutil_llama.h. */
#include "testutil_llama.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_cuda.h"

static const char *const k_kinds[9] = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                                       "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                       "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

/* tensor k of a layer: rows, columns (0: a vector) */
static void layer_shape(const rc_test_llama *s, int k, int64_t *r, int64_t *c)
{
    const int64_t H = s->hidden, I = s->intermediate, q = (int64_t)s->heads * s->head_dim,
                  kv = (int64_t)s->kv_heads * s->head_dim;
    const int64_t shapes[9][2] = {{H, 0}, {H, 0}, {q, H}, {kv, H}, {kv, H}, {H, q}, {I, H}, {I, H}, {H, I}};
    *r = shapes[k][0];
    *c = shapes[k][1];
}

int64_t rc_test_llama_layer_n(const rc_test_llama *s)
{
    int64_t n = 0;
    for (int k = 0; k < 9; k++) {
        int64_t r, c;
        layer_shape(s, k, &r, &c);
        n += r * (c ? c : 1);
    }
    return n;
}

void rc_test_write_llama(const char *dir, const rc_test_llama *s)
{
    const int L = s->layers, n_all = 9 * L + (s->tied ? 2 : 3);
    const size_t cap = (size_t)n_all * 160 + 64;
    char path[4200], name[96], *hdr = malloc(cap);
    int64_t *sizes = malloc(sizeof(int64_t) * (size_t)n_all);
    ck_assert(hdr != NULL && sizes != NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
            "\"intermediate_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
            "\"num_hidden_layers\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, "
            "\"rope_theta\": 10000.0, \"hidden_act\": \"silu\", \"tie_word_embeddings\": %s, "
            "\"attention_bias\": false, \"mlp_bias\": false, \"bos_token_id\": 1, \"eos_token_id\": 2}\n",
            s->hidden, s->intermediate, s->heads, s->kv_heads, s->head_dim, L, s->vocab, s->tied ? "true" : "false");
    ck_assert(fclose(f) == 0);
    /* the header: embedding (t = -1), the layers' (0 .. 9L - 1), the final norm (9L), the head (9L + 1) */
    int64_t n_t = 0, off = 0;
    size_t h = (size_t)snprintf(hdr, cap, "{");
    for (int t = -1; t <= 9 * L + (s->tied ? 0 : 1); t++) {
        int64_t r, c;
        if (t < 0)
            snprintf(name, sizeof name, "model.embed_tokens.weight"), r = s->vocab, c = s->hidden;
        else if (t == 9 * L)
            snprintf(name, sizeof name, "model.norm.weight"), r = s->hidden, c = 0;
        else if (t == 9 * L + 1)
            snprintf(name, sizeof name, "lm_head.weight"), r = s->vocab, c = s->hidden;
        else
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", t / 9, k_kinds[t % 9]),
                layer_shape(s, t % 9, &r, &c);
        sizes[n_t++] = r * (c ? c : 1);
        if (c)
            h += (size_t)snprintf(hdr + h, cap - h, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%lld, %lld], "
                                  "\"data_offsets\": [%lld, %lld]}", t < 0 ? "" : ", ", name, (long long)r,
                                  (long long)c, (long long)off, (long long)(off + 4 * r * c));
        else
            h += (size_t)snprintf(hdr + h, cap - h, ", \"%s\": {\"dtype\": \"F32\", \"shape\": [%lld], "
                                  "\"data_offsets\": [%lld, %lld]}", name, (long long)r, (long long)off,
                                  (long long)(off + 4 * r));
        ck_assert(h < cap);
        off += 4 * sizes[n_t - 1];
    }
    h += (size_t)snprintf(hdr + h, cap - h, "}");
    while (h % 8)
        hdr[h++] = ' ';
    ck_assert(h < cap);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    ck_assert(f != NULL);
    const uint64_t hl = h;
    ck_assert(fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, h, f) == h);
    int64_t most = 0; /* the largest tensor's floats */
    for (int64_t t = 0; t < n_t; t++)
        most = sizes[t] > most ? sizes[t] : most;
    float *buf = malloc(sizeof(float) * (size_t)most);
    ck_assert(buf != NULL);
    for (int64_t t = 0; t < n_t; t++) { /* t: 0 the embedding, 1 .. 9L the layers', 9L + 1 the final norm */
        const bool norm = t == 9 * L + 1 || (t > 0 && t <= 9 * L && (t - 1) % 9 < 2);
        for (int64_t i = 0; i < sizes[t]; i++)
            buf[i] = norm ? 1.0f + frand(0.1f) : frand(t == 0 ? 1.0f : s->scale);
        ck_assert(fwrite(buf, sizeof(float), (size_t)sizes[t], f) == (size_t)sizes[t]);
    }
    ck_assert(fclose(f) == 0);
    free(buf);
    free(sizes);
    free(hdr);
}
