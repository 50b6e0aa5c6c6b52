/* gemm_bench: ratiocheck's CPU GEMM (each kernel strategy) against OpenBLAS
 * sgemm at the same shapes, in one process, interleaved (A, B, A, B).
 *
 *   gemm_bench [--threads N] [--min-time S] [--bf16] [--cpu-time] [--w-offset B] M:K:N ...
 *
 * --bf16: a bf16 run's GEMM: operands rounded to bf16 (for both sides; sgemm
 * reads fp32), ratiocheck's weights stored as bf16 (2 bytes, as a bf16 engine
 * holds them). The engine strategy is then timed twice in each round: with
 * bf16 operands declared (`engine`, the pair order: vdpbf16ps or its
 * emulation, docs/numerics.md) and as fp32 operands (`engine-fma`, the
 * 16-lane fp32 FMA order on the same values), so the two orders' ratio comes
 * from one run on the same machine state. It first prints the start-up timing
 * that picks the pair order's kernel (rc_cpu_dpbf16_rate).
 * --w-offset B: the fp32 weights B bytes (a multiple of 4) past a 64-byte
 * boundary, as an fp32 checkpoint read in place (safetensors aligns its data
 * to 8 bytes; the other buffers are 64-byte aligned, as ratiocheck's).
 * --cpu-time: time with the process's CPU clock instead of the wall clock
 * (with --threads 1, the time the thread ran: other jobs on a loaded machine
 * take cores, not this clock).
 *
 * Prints one line per shape and strategy: median GFLOP/s of ratiocheck's
 * matmul (Y[M,N] = X[M,K] W[N,K]^T, fp32 output) and of cblas_sgemm, and
 * their ratio. A tuning tool for the micro-kernels; the job-level numbers
 * are run_bench.py's. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "cpu_ops.h"

static int g_cpu_time;

static double now(void)
{
    struct timespec t;
    clock_gettime(g_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int threads = 0, bf16 = 0, w_off = 0;
    double min_time = 0.5;
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (strcmp(argv[i], "--bf16") == 0)
            bf16 = 1;
        else if (strcmp(argv[i], "--cpu-time") == 0)
            g_cpu_time = 1;
        else if (strcmp(argv[i], "--w-offset") == 0 && i + 1 < argc)
            w_off = atoi(argv[++i]) / 4 % 16;
        else {
            fprintf(stderr, "usage: gemm_bench [--threads N] [--min-time S] [--bf16] [--cpu-time] [--w-offset B] M:K:N ...\n");
            return 2;
        }
    }
    if (i == argc) {
        fprintf(stderr, "usage: gemm_bench [--threads N] [--min-time S] [--bf16] [--cpu-time] [--w-offset B] M:K:N ...\n");
        return 2;
    }
    if (threads > 0)
        omp_set_num_threads(threads);
    rc_backend *be[2];
    if (rc_backend_cpu_create(threads, RC_KERNELS_INVARIANT, &be[0]) != RC_OK ||
        rc_backend_cpu_create(threads, RC_KERNELS_ENGINE, &be[1]) != RC_OK) {
        fprintf(stderr, "gemm_bench: %s\n", rc_last_error());
        return 1;
    }
    /* the CPU backend runs OpenBLAS single-threaded (its blas strategy); the
     * sgemm baseline here gets every thread ratiocheck's kernels get */
    openblas_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
    /* the strategies timed: backend, declared operand dtype, name */
    const struct {
        int be;
        rc_dtype in_dt;
        const char *name;
    } st[3] = {{0, RC_F32, "invariant"},
               {1, bf16 ? RC_BF16 : RC_F32, "engine"},
               {1, RC_F32, "engine-fma"}};
    const int nst = bf16 ? 3 : 2;
    double dp_ns, fma_ns;
    if (bf16 && rc_cpu_dpbf16_rate(&dp_ns, &fma_ns) &&
        printf("32 multiply-adds (16 lanes x 2): one vdpbf16ps %.3f ns (12 independent chains), two vfmadd231ps "
               "%.3f ns (24)\n",
               dp_ns, fma_ns) < 0)
        return 1;
    printf("%-18s %-10s %10s %10s %7s\n", "M:K:N", "kernels", "rc GF/s", "blas GF/s", "rc/blas");
    for (; i < argc; i++) {
        long long M, K, N;
        if (sscanf(argv[i], "%lld:%lld:%lld", &M, &K, &N) != 3 || M < 1 || K < 1 || N < 1 || M * K > (1LL << 31) ||
            K * N > (1LL << 31) || M * N > (1LL << 31)) {
            fprintf(stderr, "gemm_bench: bad shape '%s' (M:K:N, each >= 1)\n", argv[i]);
            return 2;
        }
        /* 64-byte aligned, as ratiocheck's activation buffers (rc_alloc_aligned) and weight copies */
        float *x = aligned_alloc(64, (sizeof(float) * M * K + 63) / 64 * 64),
              *Wbase = aligned_alloc(64, (sizeof(float) * (K * N + 16) + 63) / 64 * 64), *W = Wbase ? Wbase + w_off : NULL,
              *y = aligned_alloc(64, (sizeof(float) * M * N + 63) / 64 * 64);
        if (!x || !W || !y) {
            fprintf(stderr, "gemm_bench: out of memory for %s\n", argv[i]);
            return 1;
        }
        for (long long j = 0; j < M * K; j++)
            x[j] = (float)((j * 7919) % 1000) / 1000.0f - 0.5f;
        for (long long j = 0; j < K * N; j++)
            W[j] = (float)((j * 104729) % 1000) / 1000.0f - 0.5f;
        rc_wt w = rc_wt_f32(W);
        uint16_t *W16 = NULL;
        if (bf16) {
            W16 = aligned_alloc(64, (sizeof(uint16_t) * K * N + 63) / 64 * 64);
            if (!W16) {
                fprintf(stderr, "gemm_bench: out of memory for %s\n", argv[i]);
                return 1;
            }
            for (long long j = 0; j < K * N; j++) {
                W16[j] = rc_f32_to_bf16(W[j]);
                W[j] = rc_bf16_to_f32(W16[j]);
            }
            w = (rc_wt){W16, RC_BF16, false};
        }
        if (bf16)
            for (long long j = 0; j < M * K; j++)
                x[j] = rc_round_bf16(x[j]);
        const double flop = 2.0 * (double)M * (double)K * (double)N;
        for (int k = 0; k < 2; k++) { /* invariant; then engine (and engine-fma), rounds interleaved */
            const int k0 = k == 0 ? 0 : 1, k1 = k == 0 ? 1 : nst;
            double t_rc[3][64], t_bl[64];
            int n = 0;
            double spent = 0;
            while (n < 64 && (spent < 2 * min_time || n < 3)) {
                double t0 = now();
                for (int vi = k0; vi < k1; vi++) { /* alternating which goes first (A B, B A) */
                    const int v = n % 2 ? k1 - 1 - (vi - k0) : vi;
                    const double ta = now();
                    if (be[st[v].be]->ops->matmul(be[st[v].be], x, M, K, w, N, NULL, st[v].in_dt, RC_F32, y) !=
                        RC_OK) {
                        fprintf(stderr, "gemm_bench: %s\n", rc_last_error());
                        return 1;
                    }
                    t_rc[v][n] = now() - ta;
                }
                double t1 = now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, W,
                            (int)K, 0.0f, y, (int)N);
                double t2 = now();
                t_bl[n] = t2 - t1;
                spent += t2 - t0;
                n++;
            }
            qsort(t_bl, (size_t)n, sizeof *t_bl, cmp);
            const double g_bl = flop / t_bl[n / 2] / 1e9;
            double g[3] = {0};
            for (int v = k0; v < k1; v++) {
                qsort(t_rc[v], (size_t)n, sizeof *t_rc[v], cmp);
                g[v] = flop / t_rc[v][n / 2] / 1e9;
                if (printf("%-18s %-10s %10.1f %10.1f %7.2f\n", argv[i], st[v].name, g[v], g_bl, g[v] / g_bl) < 0)
                    return 1;
            }
            if (k == 1 && nst == 3 &&
                printf("%-18s engine / engine-fma: %.2f (pair order: %s)\n", argv[i], g[1] / g[2],
                       rc_cpu_gemm_pairs_kernel_mk((int64_t)M, (int64_t)K)) < 0)
                return 1;
        }
        free(x);
        free(Wbase);
        free(W16);
        free(y);
    }
    rc_backend_destroy(be[0]);
    rc_backend_destroy(be[1]);
    return fflush(stdout) == 0 ? 0 : 1;
}
