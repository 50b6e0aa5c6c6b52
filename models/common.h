/* Helpers shared by the family files: layouts in which checkpoints store a
 * weight differently from the forward pass's [out, in] rows, undone in place
 * right after a tensor is read (rc_tensor_spec.fix), and config rules several
 * families share. */
#ifndef RC_MODELS_COMMON_H
#define RC_MODELS_COMMON_H

#include <stdint.h>

#include "model.h"

/* Fused QKV stored per head, as GPT-NeoX and BLOOM do: row h*3d + p*d + i
 * (p = 0 q, 1 k, 2 v; d = head_dim) -> row p*H + h*d + i, i.e. all Q rows,
 * then K, then V. rows = 3 * n_heads * head_dim; cols = the row length (1 for
 * the bias); elements of elem_size bytes. */
rc_status rc_qkv_deinterleave_per_head(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols);

/* Conv1D as GPT-2 stores it: [in, out] -> [out, in] (a transpose; the
 * tensor's table entry gives the file shape [in, out]). */
rc_status rc_conv1d_transpose(const rc_config *cfg, void *data, int elem_size, int64_t rows, int64_t cols);

/* Families without GQA or an explicit head_dim: head_dim = hidden / n_heads
 * and n_kv_heads = n_heads; a remainder is RC_ERR_FORMAT naming the file and
 * the two keys as the family's key table names them ("n_embd 64 is not a
 * multiple of n_head 5"). */
rc_status rc_heads_from_hidden(const char *path, rc_config *cfg);

#endif
