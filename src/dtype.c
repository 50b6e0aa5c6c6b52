#include "dtype.h"

static const struct {
    const char *name;
    int size;
} k_dtypes[RC_DTYPE_COUNT] = {
    [RC_F32] = {"F32", 4}, [RC_F16] = {"F16", 2}, [RC_BF16] = {"BF16", 2},
    [RC_F64] = {"F64", 8}, [RC_I32] = {"I32", 4}, [RC_I64] = {"I64", 8},
};

const char *rc_dtype_name(rc_dtype dt)
{
    return (unsigned)dt < RC_DTYPE_COUNT ? k_dtypes[dt].name : "?";
}

int rc_dtype_size(rc_dtype dt) { return (unsigned)dt < RC_DTYPE_COUNT ? k_dtypes[dt].size : 0; }

int rc_dtype_from_name(const char *name)
{
    for (int i = 0; i < RC_DTYPE_COUNT; i++)
        if (strcmp(name, k_dtypes[i].name) == 0)
            return i;
    return -1;
}

float rc_f16_to_f32(uint16_t h)
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

uint16_t rc_f32_to_f16(float f)
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
