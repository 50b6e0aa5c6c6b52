/* Floating-point storage types and exact conversions between them.
 *
 * All conversions to a narrower type round to nearest, ties to even (RNE),
 * exactly as PyTorch's .to(dtype) does; NaN stays NaN, overflow gives inf.
 */
#ifndef RC_DTYPE_H
#define RC_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "status.h"

/* The conversions below are compiled for the GPU too (kernels/): one source
 * of rounding for the CPU reference and the CUDA kernels. */
#ifdef __CUDACC__
#define RC_HD __host__ __device__
#else
#define RC_HD
#endif

typedef enum {
    RC_F32 = 0,
    RC_F16,
    RC_BF16,
    RC_F64,
    RC_I32,
    RC_I64,
    RC_DTYPE_COUNT
} rc_dtype;

#ifdef __cplusplus
extern "C" {
#endif
const char *rc_dtype_name(rc_dtype dt);   /* safetensors spelling: "F32", "BF16", ... */
int rc_dtype_size(rc_dtype dt);           /* bytes per element */
int rc_dtype_from_name(const char *name); /* -1 when unknown */
/* the command line's names: "fp32", "fp16", "bf16" ("?" for the others) */
const char *rc_dtype_str(rc_dtype dt);
/* fp32 / float32 / float / f32, fp16 / float16 / half / f16, bf16 /
 * bfloat16, in any case (BF16, bf16, bfloat16 alike); -1 otherwise */
int rc_dtype_from_str(const char *s);
/* the same as --dtype's: RC_ERR_USAGE naming the choices */
rc_status rc_dtype_parse_cli(const char *v, rc_dtype *dt);
#ifdef __cplusplus
}
#endif

RC_HD static inline uint32_t rc_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
RC_HD static inline float rc_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

RC_HD static inline float rc_bf16_to_f32(uint16_t h) { return rc_bits_f32((uint32_t)h << 16); }

RC_HD static inline uint16_t rc_f32_to_bf16(float f)
{
    uint32_t u = rc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

RC_HD static inline float rc_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return rc_bits_f32(u);
}

RC_HD static inline uint16_t rc_f32_to_f16(float f)
{
    uint32_t u = rc_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (abs >= 0x477ff000u) /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below the smallest normal half (2^-14): subnormal or zero */
        if (abs < 0x33000000u) /* < 2^-25: rounds to zero (2^-25 itself ties to even 0) */
            return sign;
        uint32_t e = abs >> 23;
        uint32_t m = (abs & 0x7fffffu) | 0x800000u;
        int shift = (int)(126 - e); /* 14..24: bits dropped = shift - 13 + 13 */
        /* value = m * 2^(e-150); half subnormal unit = 2^-24 -> q = m >> (126 - e) */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias and round the 13 dropped mantissa bits (carry may reach inf) */
    uint32_t r = abs - ((uint32_t)(127 - 15) << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

/* Round a float to the nearest value representable in bf16 / fp16 (RNE). */
RC_HD static inline float rc_round_bf16(float f) { return rc_bf16_to_f32(rc_f32_to_bf16(f)); }
RC_HD static inline float rc_round_f16(float f) { return rc_f16_to_f32(rc_f32_to_f16(f)); }

/* Round x to dt (identity for RC_F32). */
RC_HD static inline float rc_round_to(float x, rc_dtype dt)
{
    return dt == RC_BF16 ? rc_round_bf16(x) : dt == RC_F16 ? rc_round_f16(x) : x;
}

#endif
