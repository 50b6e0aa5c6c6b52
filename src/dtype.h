/* Floating-point storage types and exact conversions between them.
 *
 * All conversions to a narrower type round to nearest, ties to even (RNE),
 * exactly as PyTorch's .to(dtype) does; NaN stays NaN, overflow gives inf.
 */
#ifndef RC_DTYPE_H
#define RC_DTYPE_H

#include <stdint.h>
#include <string.h>

typedef enum {
    RC_F32 = 0,
    RC_F16,
    RC_BF16,
    RC_F64,
    RC_I32,
    RC_I64,
    RC_DTYPE_COUNT
} rc_dtype;

const char *rc_dtype_name(rc_dtype dt);   /* safetensors spelling: "F32", "BF16", ... */
int rc_dtype_size(rc_dtype dt);           /* bytes per element */
int rc_dtype_from_name(const char *name); /* -1 when unknown */

static inline uint32_t rc_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float rc_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float rc_bf16_to_f32(uint16_t h) { return rc_bits_f32((uint32_t)h << 16); }

static inline uint16_t rc_f32_to_bf16(float f)
{
    uint32_t u = rc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float rc_f16_to_f32(uint16_t h);
uint16_t rc_f32_to_f16(float f);

/* Round a float to the nearest value representable in bf16 / fp16 (RNE). */
static inline float rc_round_bf16(float f) { return rc_bf16_to_f32(rc_f32_to_bf16(f)); }
static inline float rc_round_f16(float f) { return rc_f16_to_f32(rc_f32_to_f16(f)); }

#endif
