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
