#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

bool rc_numel(const int64_t *dims, int ndim, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (!rc_mul_i64(n, dims[i], &n))
            return false;
    *out = n;
    return true;
}

rc_status rc_calloc(void **out, int64_t n, size_t sz, const char *what)
{
    int64_t bytes;
    *out = NULL;
    if (!rc_mul_i64(n, (int64_t)sz, &bytes) || bytes > RC_MAX_ALLOC)
        return rc_errorf(RC_ERR_NOMEM, "%s: size %lld x %zu is too large", what, (long long)n, sz);
    void *p = calloc(bytes ? (size_t)bytes : 1, 1);
    if (!p)
        return rc_errorf(RC_ERR_NOMEM, "%s: cannot allocate %lld bytes", what, (long long)bytes);
    *out = p;
    return RC_OK;
}

rc_status rc_alloc_aligned(void **out, int64_t n, size_t sz, const char *what)
{
    int64_t bytes;
    *out = NULL;
    if (!rc_mul_i64(n, (int64_t)sz, &bytes) || bytes > RC_MAX_ALLOC)
        return rc_errorf(RC_ERR_NOMEM, "%s: size %lld x %zu is too large", what, (long long)n, sz);
    size_t rounded = ((size_t)bytes + 63) & ~(size_t)63;
    if (rounded == 0)
        rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p)
        return rc_errorf(RC_ERR_NOMEM, "%s: cannot allocate %lld bytes", what, (long long)bytes);
    memset(p, 0, rounded);
    *out = p;
    return RC_OK;
}

char *rc_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t o = a;
    if (a > 0 && dir[a - 1] != '/')
        p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

rc_status rc_open_regular(const char *path, int *fd_out, int64_t *size)
{
    *fd_out = -1;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rc_errorf(RC_ERR_IO, "%s: not a regular file", path);
    }
    *fd_out = fd;
    *size = (int64_t)sb.st_size;
    return RC_OK;
}

rc_status rc_read_file(const char *path, char **out, size_t *len, size_t max_len)
{
    *out = NULL;
    int fd;
    int64_t fsize;
    RC_TRY(rc_open_regular(path, &fd, &fsize));
    if ((uint64_t)fsize > max_len) {
        close(fd);
        return rc_errorf(RC_ERR_FORMAT, "%s: file is %lld bytes, more than the %zu allowed", path,
                         (long long)fsize, max_len);
    }
    size_t sz = (size_t)fsize;
    char *buf = malloc(sz + 1);
    if (!buf) {
        close(fd);
        return rc_errorf(RC_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, sz);
    }
    size_t got = 0;
    while (got < sz) {
        ssize_t r = read(fd, buf + got, sz - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != sz) {
        free(buf);
        return rc_errorf(RC_ERR_IO, "%s: short read", path);
    }
    buf[sz] = '\0';
    *out = buf;
    if (len)
        *len = sz;
    return RC_OK;
}

bool rc_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

const char *rc_fmt_count(char *buf, size_t n, int64_t v)
{
    if (v >= 1000000000)
        snprintf(buf, n, "%.2fB", (double)v / 1e9);
    else if (v >= 1000000)
        snprintf(buf, n, "%.2fM", (double)v / 1e6);
    else if (v >= 1000)
        snprintf(buf, n, "%.2fK", (double)v / 1e3);
    else
        snprintf(buf, n, "%lld", (long long)v);
    return buf;
}

/* Strict numbers: digits (and a leading '-'), nothing else: no spaces, no
 * '+', no hex, no inf/nan, which strtoll/strtod would quietly accept. */
static bool plain_integer(const char *v)
{
    const char *p = v + (*v == '-');
    if (!*p)
        return false;
    for (; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return true;
}

static bool plain_decimal(const char *v)
{
    if (!(isdigit((unsigned char)*v) || *v == '-' || *v == '.'))
        return false;
    for (const char *p = v; *p; p++)
        if (!(isdigit((unsigned char)*p) || strchr(".eE+-", *p)))
            return false;
    return true;
}

rc_status rc_parse_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = plain_integer(v) ? strtoll(v, &end, 10) : 0;
    if (!plain_integer(v) || *end || errno || x < lo || x > hi)
        return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not an integer in [%lld, %lld]", opt, v, (long long)lo,
                         (long long)hi);
    *out = x;
    return RC_OK;
}

rc_status rc_parse_f64(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = plain_decimal(v) ? strtod(v, &end) : 0;
    if (!plain_decimal(v) || *end || errno || !(x >= lo && x <= hi))
        return rc_errorf(RC_ERR_USAGE, "%s: '%s' is not a number in [%g, %g]", opt, v, lo, hi);
    *out = x;
    return RC_OK;
}
