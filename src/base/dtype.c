#include "dtype.h"

#include <stdbool.h>

/* every name of a dtype in one place: the safetensors spelling, the
 * command line's (--dtype, dtype=, the results' "dtype") */
static const struct {
    const char *name;
    int size;
    const char *short_name; /* NULL: not a compute dtype */
} k_dtypes[RC_DTYPE_COUNT] = {
    [RC_F32] = {"F32", 4, "fp32"}, [RC_F16] = {"F16", 2, "fp16"},
    [RC_BF16] = {"BF16", 2, "bf16"}, [RC_F64] = {"F64", 8, NULL},
    [RC_I32] = {"I32", 4, NULL}, [RC_I64] = {"I64", 8, NULL},
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

const char *rc_dtype_str(rc_dtype dt)
{
    return (unsigned)dt < RC_DTYPE_COUNT && k_dtypes[dt].short_name ? k_dtypes[dt].short_name : "?";
}

/* the common spellings of the compute dtypes, any case: PyTorch's and
 * NumPy's names beside the short ones */
static const struct {
    const char *name;
    rc_dtype dt;
} k_dtype_spellings[] = {
    {"fp32", RC_F32}, {"float32", RC_F32}, {"float", RC_F32}, {"f32", RC_F32},
    {"fp16", RC_F16}, {"float16", RC_F16}, {"half", RC_F16}, {"f16", RC_F16},
    {"bf16", RC_BF16}, {"bfloat16", RC_BF16},
};

static bool same_ignoring_case(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        const char x = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
        const char y = (*b >= 'A' && *b <= 'Z') ? (char)(*b - 'A' + 'a') : *b;
        if (x != y)
            return false;
    }
    return !*a && !*b;
}

int rc_dtype_from_str(const char *s)
{
    for (size_t i = 0; i < sizeof k_dtype_spellings / sizeof k_dtype_spellings[0]; i++)
        if (same_ignoring_case(s, k_dtype_spellings[i].name))
            return (int)k_dtype_spellings[i].dt;
    return -1;
}

rc_status rc_dtype_parse_cli(const char *v, rc_dtype *dt)
{
    const int d = rc_dtype_from_str(v);
    if (d < 0)
        return rc_errorf(RC_ERR_USAGE, "--dtype: '%s' is not one of fp32, fp16, bf16 (or float32, "
                         "float16, bfloat16, float, half, in any case)", v);
    *dt = (rc_dtype)d;
    return RC_OK;
}
