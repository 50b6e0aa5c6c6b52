/* Helpers shared by the family files (see common.h). */
#include "common.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

rc_status rc_qkv_deinterleave_per_head(const rc_config *c, void *data, int es, int64_t rows, int64_t cols)
{
    const int64_t nh = c->n_heads, d = c->head_dim, H = nh * d;
    if (rows != 3 * H || cols < 1)
        return rc_errorf(RC_ERR_INTERNAL, "per-head QKV de-interleave: %lld rows, expected 3 x %lld",
                         (long long)rows, (long long)H);
    const size_t row_bytes = (size_t)cols * (size_t)es;
    unsigned char *tmp = malloc((size_t)rows * row_bytes), *p = data;
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory de-interleaving query_key_value");
    for (int64_t h = 0; h < nh; h++)
        for (int64_t part = 0; part < 3; part++)
            for (int64_t i = 0; i < d; i++) {
                int64_t src = h * 3 * d + part * d + i, dst = part * H + h * d + i;
                memcpy(tmp + (size_t)dst * row_bytes, p + (size_t)src * row_bytes, row_bytes);
            }
    memcpy(p, tmp, (size_t)rows * row_bytes);
    free(tmp);
    return RC_OK;
}

rc_status rc_conv1d_transpose(const rc_config *c, void *data, int es, int64_t rows, int64_t cols)
{
    (void)c;
    unsigned char *tmp = malloc((size_t)(rows * cols) * (size_t)es), *p = data;
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory transposing a Conv1D weight");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++)
            memcpy(tmp + (size_t)(k * rows + r) * (size_t)es, p + (size_t)(r * cols + k) * (size_t)es, (size_t)es);
    memcpy(p, tmp, (size_t)(rows * cols) * (size_t)es);
    free(tmp);
    return RC_OK;
}

rc_status rc_rope_interleaved_to_half(const rc_config *c, void *data, int es, int64_t rows, int64_t cols)
{
    const int64_t d = c->head_dim, rd = c->rotary_dim, half = rd / 2;
    if (d < 1 || rows % d != 0 || rd < 0 || rd > d || rd % 2 != 0 || cols < 1)
        return rc_errorf(RC_ERR_INTERNAL, "interleaved RoPE layout: %lld rows, head_dim %lld, rotary %lld",
                         (long long)rows, (long long)d, (long long)rd);
    const size_t row_bytes = (size_t)cols * (size_t)es;
    unsigned char *tmp = malloc((size_t)(rd > 0 ? rd : 1) * row_bytes), *p = data;
    if (!tmp)
        return rc_errorf(RC_ERR_NOMEM, "out of memory reordering RoPE rows");
    for (int64_t h = 0; h < rows / d; h++) {
        unsigned char *head = p + (size_t)(h * d) * row_bytes;
        for (int64_t j = 0; j < half; j++) {
            memcpy(tmp + (size_t)j * row_bytes, head + (size_t)(2 * j) * row_bytes, row_bytes);
            memcpy(tmp + (size_t)(half + j) * row_bytes, head + (size_t)(2 * j + 1) * row_bytes, row_bytes);
        }
        memcpy(head, tmp, (size_t)rd * row_bytes);
    }
    free(tmp);
    return RC_OK;
}

/* the first name of the family's key for an rc_config field */
static const char *key_name(const rc_config *c, size_t offset, const char *fallback)
{
    for (const rc_config_key *k = c->arch->keys; k->keys[0]; k++)
        if (k->offset == offset)
            return k->keys[0];
    return fallback;
}

rc_status rc_heads_from_hidden(const char *path, rc_config *c)
{
    if (c->hidden % c->n_heads != 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s %lld is not a multiple of %s %lld", path,
                         key_name(c, offsetof(rc_config, hidden), "hidden_size"), (long long)c->hidden,
                         key_name(c, offsetof(rc_config, n_heads), "num_attention_heads"), (long long)c->n_heads);
    c->head_dim = c->hidden / c->n_heads;
    c->n_kv_heads = c->n_heads;
    return RC_OK;
}
