/* Small helpers: overflow-checked size arithmetic, allocation, path joins. */
#ifndef RC_UTIL_H
#define RC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Overflow-checked arithmetic: return false on overflow (or negative input). */
static inline bool rc_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0)
        return false;
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rc_add_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0)
        return false;
    return !__builtin_add_overflow(a, b, out);
}
static inline bool rc_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rc_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Product of dims with overflow check; false on overflow or negative dim. */
bool rc_numel(const int64_t *dims, int ndim, int64_t *out);

/* Allocate n elements of size sz (checked), zeroed. Sets an error on failure. */
rc_status rc_calloc(void **out, int64_t n, size_t sz, const char *what);
/* Allocate n*sz bytes, 64-byte aligned, zeroed. */
rc_status rc_alloc_aligned(void **out, int64_t n, size_t sz, const char *what);

/* Largest allocation we accept for one buffer (bytes). */
#define RC_MAX_ALLOC ((int64_t)1 << 40)

/* Join dir and name with '/'. Caller frees. NULL on OOM. */
char *rc_path_join(const char *dir, const char *name);

/* Open a file for reading that must be a regular file (a FIFO or a device
 * is an I/O error naming it; opening never blocks); its size in *size. */
rc_status rc_open_regular(const char *path, int *fd, int64_t *size);

/* Read a whole (small) file into a NUL-terminated buffer. */
rc_status rc_read_file(const char *path, char **out, size_t *len, size_t max_len);

/* True when the path names an existing regular file. */
bool rc_file_exists(const char *path);

/* Format a count with an SI suffix (e.g. 1.23M) into buf. */
const char *rc_fmt_count(char *buf, size_t n, int64_t v);

/* A command-line number, strictly: digits (and a leading '-'; a decimal:
 * digits, '.', 'e', signs), nothing else, within [lo, hi]; RC_ERR_USAGE
 * naming opt otherwise. */
rc_status rc_parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out);
rc_status rc_parse_f64(const char *opt, const char *v, double lo, double hi, double *out);

#endif
