/* Helpers shared by the Check suites in tests/: temporary folders, paths
 * under the source tree, and the runner boilerplate of main().
 *
 * Header-only: every function is `static inline`, so a suite that uses only
 * some of them compiles without "defined but not used" warnings. */
#ifndef RC_TESTUTIL_H
#define RC_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"

/* Remove `path` and, for a folder, everything below it (no links followed);
 * errors are ignored and a missing path is no error. An entry whose path
 * would not fit in PATH_MAX is left alone. */
static inline void rc_test_rm_rf(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                    continue;
                char sub[PATH_MAX];
                int len = snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                if (len > 0 && (size_t)len < sizeof sub) /* never a truncated path */
                    rc_test_rm_rf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Make a fresh folder whose path is `base` followed by six random
 * characters ("/tmp/rc_test_h5_" gives "/tmp/rc_test_h5_a1B2c3") and write
 * that path to buf[n]. Returns buf, or NULL with errno set (ENAMETOOLONG
 * when the path does not fit). */
static inline char *rc_test_mkdtemp(char *buf, size_t n, const char *base)
{
    int len = snprintf(buf, n, "%sXXXXXX", base);
    if (len < 0 || (size_t)len >= n) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    return mkdtemp(buf);
}

/* Per-test fixture: a fresh folder "<parent>/tXXXXXX" in buf[n]; fails the
 * running test when it cannot be made. */
static inline void rc_test_fresh_dir(char *buf, size_t n, const char *parent)
{
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s/t", parent);
    ck_assert_msg(rc_test_mkdtemp(buf, n, base) != NULL, "mkdtemp: %s", strerror(errno));
}

/* buf[n] = "$RC_SOURCE_DIR/<rel>" ("." when RC_SOURCE_DIR is unset): a path
 * under the source tree. `rel` is a printf format for the part below the
 * root, e.g. rc_test_source_path(p, sizeof p, "data/fixtures/%s", name).
 * Returns buf. */
static inline char *rc_test_source_path(char *buf, size_t n, const char *rel, ...)
    __attribute__((format(printf, 3, 4)));
static inline char *rc_test_source_path(char *buf, size_t n, const char *rel, ...)
{
    const char *root = getenv("RC_SOURCE_DIR");
    int len = snprintf(buf, n, "%s/", root ? root : ".");
    if (len >= 0 && (size_t)len < n) {
        va_list ap;
        va_start(ap, rel);
        vsnprintf(buf + len, n - (size_t)len, rel, ap);
        va_end(ap);
    }
    return buf;
}

/* meson's exit status for a skipped test */
#define RC_TEST_SKIP 77

/* In a build without OpenBLAS (meson -Dblas=disabled): print one line saying
 * that `what` is skipped and return true. */
static inline bool rc_test_no_blas(const char *what)
{
    if (rc_have_blas())
        return false;
    printf("SKIP %s: this build has no OpenBLAS (-Dblas=disabled)\n", what);
    return true;
}

/* Run every test of suite `s` (CK_NORMAL output), free the runner and the
 * suite, and return the process exit status: EXIT_SUCCESS when no test
 * failed, EXIT_FAILURE otherwise. */
static inline int rc_test_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#ifdef RC_SAFETENSORS_H /* suites that read fixture files (safetensors.h included first) */
#include "util.h"
/* Tensor `name` of st, any float dtype, as a malloc'd fp32 array (exact);
 * *n its elements. A missing tensor or a failed read fails the test. */
static inline float *rc_test_st_f32(rc_safetensors *st, const char *name, int64_t *n)
{
    const rc_st_tensor *t = rc_st_find(st, name);
    ck_assert_msg(t != NULL, "%s missing", name);
    ck_assert(rc_numel(t->shape, t->ndim, n));
    float *v = malloc(sizeof(float) * (size_t)(*n + 1));
    ck_assert(v != NULL);
    ck_assert_msg(rc_st_read_f32(st, name, t->ndim, t->shape, v) == RC_OK, "%s", rc_last_error());
    return v;
}

/* Per-position log-probs stored packed, [sum(lengths), V] (sequence b's lengths[b] rows after
 * those of 0..b-1, no padding), expanded into dst [B, T, V] with NaN past lengths[b], the padded
 * layout the suites index. f64 picks the dtype of dst (double, else float). The packed shape is
 * computed from lengths, never typed; a length outside 0..T fails the test. */
static inline void rc_test_read_rows(rc_safetensors *st, const char *name, const int32_t *lengths, int64_t B,
                                     int64_t T, int64_t V, bool f64, void *dst)
{
    int64_t total = 0, cells;
    for (int64_t b = 0; b < B; b++) {
        ck_assert_msg(lengths[b] >= 0 && lengths[b] <= T, "%s: lengths[%lld] = %d outside 0..%lld", name,
                      (long long)b, lengths[b], (long long)T);
        total += lengths[b];
    }
    ck_assert(rc_numel((int64_t[]){B, T, V}, 3, &cells));
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    char *packed = malloc(es * (size_t)(total * V + 1)), *out = dst;
    ck_assert(packed != NULL);
    const int64_t shape[2] = {total, V};
    rc_status rc = f64 ? rc_st_read_f64(st, name, 2, shape, (double *)(void *)packed)
                       : rc_st_read_f32(st, name, 2, shape, (float *)(void *)packed);
    ck_assert_msg(rc == RC_OK, "%s", rc_last_error());
    for (int64_t i = 0; i < cells; i++) {
        if (f64)
            ((double *)dst)[i] = NAN;
        else
            ((float *)dst)[i] = NAN;
    }
    for (int64_t b = 0, o = 0; b < B; o += lengths[b], b++)
        memcpy(out + es * (size_t)(b * T * V), packed + es * (size_t)(o * V), es * (size_t)(lengths[b] * V));
    free(packed);
}
#endif

/* The whole of a file (at most n - 1 bytes) into buf, NUL-terminated; an
 * unreadable file reads as "". */
static inline void rc_test_slurp(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = '\0';
    if (f)
        fclose(f);
}

#ifdef RC_TEST_BUILD_DIR
/* `ratiocheck ARGS` run by the shell in the source tree's folder `rel` ("" for
 * the root), stdin empty; its stdout and stderr into out / err (truncated to
 * their sizes); the exit code (a run killed by a signal fails the test). */
static inline int rc_test_run_cli(const char *rel, const char *args, char *out, size_t nout, char *err,
                                  size_t nerr)
{
    char tmpl_o[] = "/tmp/rc_cli_outXXXXXX", tmpl_e[] = "/tmp/rc_cli_errXXXXXX";
    int fo = mkstemp(tmpl_o), fe = mkstemp(tmpl_e);
    ck_assert(fo >= 0 && fe >= 0);
    close(fo);
    close(fe);
    const size_t n = strlen(args) + 2 * PATH_MAX + 256;
    char *cmd = malloc(n);
    ck_assert(cmd != NULL);
    snprintf(cmd, n, "cd '%s/%s' && '%s/src/ratiocheck' %s >'%s' 2>'%s' </dev/null", getenv("RC_SOURCE_DIR"), rel,
             RC_TEST_BUILD_DIR, args, tmpl_o, tmpl_e);
    int st = system(cmd);
    free(cmd);
    rc_test_slurp(tmpl_o, out, nout);
    rc_test_slurp(tmpl_e, err, nerr);
    unlink(tmpl_o);
    unlink(tmpl_e);
    ck_assert_msg(WIFEXITED(st), "ratiocheck %s did not exit normally", args);
    return WEXITSTATUS(st);
}
#endif

#endif /* RC_TESTUTIL_H */
