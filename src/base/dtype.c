#include "dtype.h"

/* every name of a dtype in one place: the safetensors spelling, the
 * command line's (--dtype, dtype=, the results' "dtype") and its alias */
static const struct {
    const char *name;
    int size;
    const char *short_name, *alias; /* NULL: not a compute dtype */
} k_dtypes[RC_DTYPE_COUNT] = {
    [RC_F32] = {"F32", 4, "fp32", "float32"}, [RC_F16] = {"F16", 2, "fp16", "float16"},
    [RC_BF16] = {"BF16", 2, "bf16", "bfloat16"}, [RC_F64] = {"F64", 8, NULL, NULL},
    [RC_I32] = {"I32", 4, NULL, NULL}, [RC_I64] = {"I64", 8, NULL, NULL},
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

int rc_dtype_from_str(const char *s)
{
    for (int i = 0; i < RC_DTYPE_COUNT; i++)
        if (k_dtypes[i].short_name && (!strcmp(s, k_dtypes[i].short_name) || !strcmp(s, k_dtypes[i].alias)))
            return i;
    return -1;
}

rc_status rc_dtype_parse_cli(const char *v, rc_dtype *dt)
{
    const int d = rc_dtype_from_str(v);
    if (d < 0)
        return rc_errorf(RC_ERR_USAGE, "--dtype: '%s' is not one of fp32, fp16, bf16", v);
    *dt = (rc_dtype)d;
    return RC_OK;
}
