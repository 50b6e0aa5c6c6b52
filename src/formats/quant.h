/* Dequantization of published quantized checkpoints, as transformers'
 * loaders do it (the rules in docs/numerics.md, "Quantized checkpoints"):
 *
 * FP8 blocks (quant_method fp8): an F8_E4M3 (float8_e4m3fn) weight
 * [..., rows, cols] with weight_scale_inv [..., ceil(rows/b0), ceil(cols/b1)]
 * (F32 or BF16): out[i][j] = dt(fp32(q[i][j]) * fp32(s[i/b0][j/b1])), the
 * product in fp32 and one rounding to the output dtype (Fp8Dequantize).
 *
 * MXFP4 (quant_method mxfp4): blocks U8 [E, R, G, 16] (two e2m1 values a
 * byte, the low nibble first) and scales U8 [E, R, G] (e8m0, bias 127):
 * v[e][r][32g + 2k] = lut[b & 15], v[..][32g + 2k + 1] = lut[b >> 4], times
 * 2^(scale - 127), rounded to dt, then transposed to [E, 32G, R]
 * (convert_moe_packed_tensors). */
#ifndef RC_QUANT_H
#define RC_QUANT_H

#include <stdint.h>

#include "dtype.h"

/* float8_e4m3fn: bias 7, no infinities, 0x7F / 0xFF NaN */
float rc_e4m3fn_to_f32(uint8_t c);

/* n_outer matrices of rows x cols fp8 codes q, scales s (n_outer x sr x sc,
 * as fp32), blocks b0 x b1 with sr = ceil(rows / b0), sc = ceil(cols / b1),
 * into out (dt: RC_BF16 / RC_F16 as bits, RC_F32). */
void rc_fp8_block_dequant(const uint8_t *q, const float *s, int64_t n_outer, int64_t rows, int64_t cols,
                          int64_t b0, int64_t b1, rc_dtype dt, void *out);

/* blocks [E, R, G, 16], scales [E, R, G] into out [E, 32G, R] of dt. */
void rc_mxfp4_dequant(const uint8_t *blocks, const uint8_t *scales, int64_t E, int64_t R, int64_t G,
                      rc_dtype dt, void *out);

#endif
