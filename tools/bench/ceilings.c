/* ceilings: what this machine can do at most, measured through the same
 * OpenBLAS ratiocheck links (Debian's libopenblas) and with OpenMP threads.
 *
 *   ceilings [--threads N] [--triad-mib MIB] [--min-time S] [--sbgemm] [TAG:M:K:N ...]
 *
 * For every TAG:M:K:N it times cblas_sgemm in the layout of a linear layer,
 * Y[M,N] = X[M,K] W[N,K]^T (row-major, W as Hugging Face stores it), and with
 * --sbgemm also cblas_sbgemm (bf16 operands, fp32 accumulation and output)
 * when the OpenBLAS it runs with has it (looked up at run time: Debian 12's
 * 0.3.21 is built without the bf16 routines; "sbgemm": false then).
 * One untimed warm-up call (at min(M, 256) rows), then calls until --min-time
 * seconds have passed (at least one); GFLOP/s = 2 M N K / seconds of a call:
 * "gflops" is the median call, "gflops_best" the fastest, "gflops_mean" all
 * calls' flops over all calls' time (on a shared machine the best call is
 * often a lucky moment; the median is what run_bench.py uses).
 *
 * Memory bandwidth: a STREAM triad a[i] = b[i] + s * c[i] over three double
 * arrays of --triad-mib MiB each (default 1024: far beyond the caches; STREAM's
 * counting, 24 bytes per element, no write-allocate traffic), and a read-only
 * pass (sum of one array, 8 bytes per element), each parallel over OpenMP
 * threads with first-touch initialisation; 5 passes: "gbps" the median pass,
 * "gbps_best" the fastest, "gbps_mean" all bytes over all time.
 *
 * Output: one JSON object on stdout (tools/bench/run_bench.py reads it). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        fprintf(stderr, "ceilings: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* deterministic small values in [-0.5, 0.5) */
static void fill_f32(float *x, size_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1u;
#pragma omp parallel for schedule(static) firstprivate(s)
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2246822519u ^ s;
        h ^= h >> 15;
        h *= 3266489917u;
        h ^= h >> 13;
        x[i] = (float)(h & 0xffff) / 65536.0f - 0.5f;
    }
}

static void to_bf16(const float *x, bfloat16 *y, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even (no NaNs here) */
        y[i] = (bfloat16)(u >> 16);
    }
}

typedef struct {
    double best, median, mean, seconds;
    long calls;
} timing;

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    int M, K, N, bf16;
    const float *x, *w;
    const bfloat16 *xb, *wb;
    float *y;
} gemm_args;

typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint,
                          blasint, float, const bfloat16 *, blasint, const bfloat16 *, blasint, float, float *,
                          blasint);
static sbgemm_fn p_sbgemm;

static void gemm_call(const gemm_args *a, int M)
{
    if (a->bf16)
        p_sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, a->N, a->K, 1.0f, a->xb, a->K, a->wb, a->K, 0.0f,
                     a->y, a->N);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, a->N, a->K, 1.0f, a->x, a->K, a->w, a->K, 0.0f, a->y,
                    a->N);
}

static timing time_gemm(const gemm_args *a, double min_time)
{
    gemm_call(a, a->M < 256 ? a->M : 256); /* warm-up: threads, buffers, pages */
    const double flops = 2.0 * a->M * (double)a->N * a->K;
    timing t = {0};
    size_t cap = 1024;
    double *rate = xmalloc(cap * sizeof *rate);
    const double t_start = now_s();
    double total = 0;
    do {
        double t0 = now_s();
        gemm_call(a, a->M);
        double dt = now_s() - t0;
        total += dt;
        if ((size_t)t.calls == cap) {
            double *r2 = xmalloc(2 * cap * sizeof *r2);
            memcpy(r2, rate, cap * sizeof *rate);
            free(rate);
            rate = r2;
            cap *= 2;
        }
        rate[t.calls++] = flops / (dt > 1e-9 ? dt : 1e-9) / 1e9;
    } while (now_s() - t_start < min_time);
    qsort(rate, (size_t)t.calls, sizeof *rate, cmp_double);
    t.best = rate[t.calls - 1];
    t.median = t.calls % 2 ? rate[t.calls / 2] : 0.5 * (rate[t.calls / 2 - 1] + rate[t.calls / 2]);
    t.seconds = total;
    t.mean = flops * (double)t.calls / total / 1e9;
    free(rate);
    return t;
}

static void print_gemm(const char *tag, int M, int K, int N, const char *kind, timing t, int *first)
{
    printf("%s\n  {\"tag\": \"%s\", \"kind\": \"%s\", \"M\": %d, \"K\": %d, \"N\": %d, \"calls\": %ld, "
           "\"seconds\": %.6f, \"gflops\": %.3f, \"gflops_best\": %.3f, \"gflops_mean\": %.3f}",
           *first ? "" : ",", tag, kind, M, K, N, t.calls, t.seconds, t.median, t.best, t.mean);
    *first = 0;
    fflush(stdout);
}

static int parse_shape(const char *s, char *tag, size_t tagsz, int *M, int *K, int *N)
{
    const char *c = strchr(s, ':');
    if (!c || (size_t)(c - s) >= tagsz || c == s)
        return -1;
    memcpy(tag, s, (size_t)(c - s));
    tag[c - s] = 0;
    for (const char *p = tag; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 32)
            return -1;
    char *end;
    long v[3];
    const char *p = c + 1;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        v[i] = strtol(p, &end, 10);
        if (errno || end == p || v[i] < 1 || v[i] > (1L << 20) || (i < 2 ? *end != ':' : *end != 0))
            return -1;
        p = end + 1;
    }
    *M = (int)v[0];
    *K = (int)v[1];
    *N = (int)v[2];
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: ceilings [--threads N] [--triad-mib MIB] [--min-time S] [--sbgemm] [TAG:M:K:N ...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int threads = 0, sbgemm = 0;
    long triad_mib = 1024;
    double min_time = 1.0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--triad-mib") && i + 1 < argc)
            triad_mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--sbgemm"))
            sbgemm = 1;
        else
            usage();
    }
    if (threads < 0 || triad_mib < 0 || min_time < 0)
        usage();
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
    if (sbgemm) {
        void *sym = dlsym(RTLD_DEFAULT, "cblas_sbgemm");
        memcpy(&p_sbgemm, &sym, sizeof sym);
        sbgemm = p_sbgemm != NULL;
    }
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    printf("{\"threads\": %d, \"openblas_threads\": %d, \"openblas_config\": \"%s\", \"openblas_core\": \"%s\", "
           "\"min_time\": %.3f, \"sbgemm\": %s",
           omp_get_max_threads(), openblas_get_num_threads(), cfg ? cfg : "", core ? core : "", min_time,
           sbgemm ? "true" : "false");
    fflush(stdout);

    /* memory bandwidth */
    if (triad_mib > 0) {
        const size_t n = (size_t)triad_mib * 1024 * 1024 / sizeof(double);
        double *a = xmalloc(n * sizeof *a), *b = xmalloc(n * sizeof *b), *c = xmalloc(n * sizeof *c);
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < n; k++) {
            a[k] = 0.0;
            b[k] = 1.0;
            c[k] = 2.0;
        }
        const double s = 3.0;
        enum { passes = 5 };
        double tri[passes], rd[passes], tri_t = 0, rd_t = 0, check = 0;
        for (int p = 0; p < passes; p++) {
            double t0 = now_s();
#pragma omp parallel for schedule(static)
            for (size_t k = 0; k < n; k++)
                a[k] = b[k] + s * c[k];
            double dt = now_s() - t0;
            tri_t += dt;
            tri[p] = 3.0 * (double)n * sizeof(double) / dt / 1e9;
            double sum = 0;
            t0 = now_s();
#pragma omp parallel for schedule(static) reduction(+ : sum)
            for (size_t k = 0; k < n; k++)
                sum += a[k];
            dt = now_s() - t0;
            rd_t += dt;
            check += sum;
            rd[p] = (double)n * sizeof(double) / dt / 1e9;
        }
        qsort(tri, passes, sizeof tri[0], cmp_double);
        qsort(rd, passes, sizeof rd[0], cmp_double);
        const double expect = (double)passes * (double)n * 7.0; /* a = 1 + 3 * 2 */
        printf(",\n \"triad\": {\"mib_per_array\": %ld, \"passes\": %d, \"gbps\": %.3f, \"gbps_best\": %.3f, "
               "\"gbps_mean\": %.3f},\n"
               " \"read\": {\"mib\": %ld, \"passes\": %d, \"gbps\": %.3f, \"gbps_best\": %.3f, \"gbps_mean\": %.3f, "
               "\"ok\": %s}",
               triad_mib, (int)passes, tri[passes / 2], tri[passes - 1],
               3.0 * (double)n * sizeof(double) * passes / tri_t / 1e9, triad_mib, (int)passes, rd[passes / 2],
               rd[passes - 1], (double)n * sizeof(double) * passes / rd_t / 1e9, check == expect ? "true" : "false");
        fflush(stdout);
        free(a);
        free(b);
        free(c);
    }

    /* GEMMs at the given shapes */
    printf(",\n \"gemm\": [");
    int first = 1;
    for (; i < argc; i++) {
        char tag[128];
        int M, K, N;
        if (parse_shape(argv[i], tag, sizeof tag, &M, &K, &N) != 0) {
            fprintf(stderr, "ceilings: bad shape %s (TAG:M:K:N)\n", argv[i]);
            return 2;
        }
        const size_t nx = (size_t)M * K, nw = (size_t)N * K, ny = (size_t)M * N;
        float *x = xmalloc(nx * sizeof *x), *w = xmalloc(nw * sizeof *w), *y = xmalloc(ny * sizeof *y);
        fill_f32(x, nx, 1);
        fill_f32(w, nw, 2);
        memset(y, 0, ny * sizeof *y);
        gemm_args ga = {.M = M, .K = K, .N = N, .x = x, .w = w, .y = y};
        print_gemm(tag, M, K, N, "sgemm", time_gemm(&ga, min_time), &first);
        if (sbgemm) {
            bfloat16 *xb = xmalloc(nx * sizeof *xb), *wb = xmalloc(nw * sizeof *wb);
            to_bf16(x, xb, nx);
            to_bf16(w, wb, nw);
            ga.bf16 = 1;
            ga.xb = xb;
            ga.wb = wb;
            print_gemm(tag, M, K, N, "sbgemm", time_gemm(&ga, min_time), &first);
            free(xb);
            free(wb);
        }
        free(x);
        free(w);
        free(y);
    }
    printf("\n ]}\n");
    return 0;
}
