#include "quant.h"

#include <math.h>
#include <string.h>

float rc_e4m3fn_to_f32(uint8_t c)
{
    const int e = (c >> 3) & 15, m = c & 7;
    float v;
    if ((c & 0x7F) == 0x7F)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9); /* subnormal: m * 2^-3 * 2^-6 */
    else
        v = ldexpf((float)(8 + m), e - 10); /* (1 + m/8) * 2^(e-7) */
    return (c & 0x80) ? -v : v;
}

static void store(void *out, int64_t i, float v, rc_dtype dt)
{
    if (dt == RC_F32) {
        ((float *)out)[i] = v;
    } else {
        uint16_t h = dt == RC_BF16 ? rc_f32_to_bf16(v) : rc_f32_to_f16(v);
        memcpy((unsigned char *)out + 2 * i, &h, 2);
    }
}

void rc_fp8_block_dequant(const uint8_t *q, const float *s, int64_t n_outer, int64_t rows, int64_t cols,
                          int64_t b0, int64_t b1, rc_dtype dt, void *out)
{
    float lut[256];
    for (int c = 0; c < 256; c++)
        lut[c] = rc_e4m3fn_to_f32((uint8_t)c);
    const int64_t sr = (rows + b0 - 1) / b0, sc = (cols + b1 - 1) / b1;
    for (int64_t o = 0; o < n_outer; o++)
        for (int64_t i = 0; i < rows; i++) {
            const float *srow = s + (o * sr + i / b0) * sc;
            const int64_t base = (o * rows + i) * cols;
            for (int64_t j = 0; j < cols; j++)
                store(out, base + j, lut[q[base + j]] * srow[j / b1], dt);
        }
}

void rc_mxfp4_dequant(const uint8_t *blocks, const uint8_t *scales, int64_t E, int64_t R, int64_t G,
                      rc_dtype dt, void *out)
{
    static const float lut[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const int64_t C = 32 * G; /* columns before the transpose */
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t g = 0; g < G; g++) {
                const int64_t bi = (e * R + r) * G + g;
                /* torch.ldexp: x * pow(2.0, exp) in fp32; 2^(s-127) is exact in fp32
                 * (a subnormal at s = 0), 2^128 (s = 255) is Inf */
                const float f = scales[bi] == 255 ? INFINITY : ldexpf(1.0f, (int)scales[bi] - 127);
                for (int k = 0; k < 16; k++) {
                    const uint8_t b = blocks[bi * 16 + k];
                    const int64_t c0 = 32 * g + 2 * k;
                    /* out [E, C, R]: element (e, c, r) */
                    store(out, (e * C + c0) * R + r, lut[b & 15] * f, dt);
                    store(out, (e * C + c0 + 1) * R + r, lut[b >> 4] * f, dt);
                }
            }
}
