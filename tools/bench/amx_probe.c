/* amx_probe: what AMX's TDPBF16PS computes, bit for bit, and how fast an
 * AMX bf16 GEMM runs (docs/bench.md, "AMX").
 *
 *   amx_probe [--tiles N] [--seed S] [--dump C FILE]        the twins
 *   amx_probe --bench [--threads T] [--reps R] M:K:N ...    the rate
 *   amx_probe --raw < cases                                 one instruction per line
 *
 * Build (by hand; not part of meson: it needs a CPU with AMX to say anything):
 *   cc -std=c11 -O2 -Wall -Wextra -pedantic -fopenmp tools/bench/amx_probe.c -lm -o build/amx_probe
 * The AMX and AVX512-BF16 code carries its own target attributes, so the
 * binary starts on any x86-64 CPU and exits 77 (one line) where the CPU has
 * no AMX-BF16 or the kernel refuses the tile data permission
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)).
 *
 * Twins. Every tile product C[16][16] += A[16][2P] . B[P][16 pairs] (palette
 * 1; A's row m holds P pairs, B's row k holds pair k of each of the 16
 * columns, the VNNI layout) is compared, output by output and bitwise (two
 * NaNs match whatever their payloads; the NaNs' signs are counted apart),
 * with candidate scalar computations of dst[m][n] from acc = C[m][n] and the
 * pairs (ae, be), (ao, bo) = (A[m][2k], B[k][2n]), (A[m][2k+1], B[k][2n+1]),
 * k = 0 .. P-1:
 *   eo    per pair fma(even) then fma(odd) into acc (the SDM's pseudocode);
 *   oe    per pair fma(odd) then fma(even) (the engine's bf16 pair order);
 *   pair  per pair acc + ae*be + ao*bo summed exactly, rounded once;
 *   row   acc + the instruction's 2P products summed exactly, rounded once;
 *   pr2   per pair ae*be + ao*bo rounded once, then added to acc;
 * each with every combination of DAZ (bf16 inputs and acc flushed to zeros
 * of their sign), FTZ (every rounded result below FLT_MIN, after rounding)
 * and PFZ (every product below FLT_MIN); and
 *   split the even products summed in k order into one fp32 sum E (E = +0,
 *         then E = round(E + next product), the products exact with an
 *         unbounded exponent), the odd ones into O alike, then
 *         round(E + O), then round(acc + that): every rounding to nearest
 *         even with FTZ, DAZ on the inputs, zeros' signs as IEEE's; also
 *         run as it would be with products below FLT_MIN flushed, with
 *         products beyond FLT_MAX overflowing to infinities, and with E
 *         starting from the first product (a zero factor's product +0),
 *         to show the cases tell these apart;
 *   splitf split's two sums as fmaf chains from +0 (sum = fmaf(a, b, sum):
 *         the exact product plus the sum, rounded once), DAZ and FTZ as
 *         MXCSR's: the form a kernel on FMAs would take;
 * and vdpbf16ps (AVX512-BF16) chained over the pairs as oe (acc row m, A's
 * pair k broadcast, B's row k), where the CPU has it. Cases: P = 1 (K = 2
 * per instruction), P = 5 with K = 9 (the odd tail padded with zeros), P = 16
 * (whole 32-element rows; K = 31 padded in half of them) and three P = 16
 * instructions into one accumulator tile without storing it; operand classes
 * wide (exponents over the whole range, zeros, denormals, infinities, NaNs),
 * narrow (rounding-heavy), cancel (odd products near minus the even ones,
 * acc near minus the sum), low (denormal inputs, denormal products and
 * accumulators), high (overflowing products and sums), special (zeros,
 * denormals, infinities, NaNs), mixed, zero (signed zeros, denormals and
 * products below FLT_MIN: the signs of zero results), and order (1s with +B
 * and -B at two random places among the products and acc: which terms are
 * absorbed shows the order of the sums). Prints per candidate the matches and mismatches,
 * and each candidate's first mismatch in hex; exits 1 if no candidate
 * matched every output. --dump C FILE writes every mismatch of candidate C
 * (its row in the table, from 0; -1: every output) one per line.
 *
 * Rate. --bench times a plain AMX GEMM Y[M,N] = X[M,K] W[N,K]^T (fp32 out),
 * X bf16 row-major as given, W packed once (untimed, as a loaded model's
 * weights would be) into 16 x 32 VNNI tiles; 32 x 32 outputs per step (2 A,
 * 2 B, 4 C tiles), column blocks of 256, rows split between the threads.
 * Prints the median GFLOP/s of R calls (wall clock; --cpu-time: the
 * process's CPU clock) and which candidates (the DAZ+FTZ ones, split,
 * splitf), chained over K 32 at a time from acc = 0, give 1024 sampled
 * outputs bitwise. --engine (meson's build only: it links ratiocheck)
 * alternates each AMX call with ratiocheck's engine bf16 GEMM on the same
 * operands (bf16 weights as stored, the pair order; the call gemm_bench
 * --bf16 times), A B in even rounds and B A in odd ones, and prints its rate
 * and the median (range) of the rounds' engine / AMX time ratios. */
#define _GNU_SOURCE
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef AMX_PROBE_ENGINE /* meson's build: ratiocheck's engine GEMM timed beside the AMX GEMM */
#include "backend.h"
#include "cpu_ops.h"
#endif

#define AMX_FN __attribute__((target("amx-tile,amx-bf16")))
#define DP_FN __attribute__((target("avx512f,avx512bf16")))

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* ---- bits ---------------------------------------------------------------- */
static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bf(uint16_t h) { return f_of((uint32_t)h << 16); }
static float flush(float x) { return fabsf(x) < 1.17549435e-38f ? copysignf(0.0f, x) : x; }

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- exact sums (a fixed-point accumulator over fp32's and bf16 products'
 * whole range: bit KOFF is 2^0, two's complement over KW words) ----------- */
#define KW 10
#define KOFF 300
typedef struct {
    uint64_t w[KW];
    int nan, pinf, ninf;
    int nonzero;  /* a nonzero term was added */
    int allneg0;  /* every term so far was -0 */
    int nterms;
} kacc;

static void k_init(kacc *k)
{
    memset(k, 0, sizeof *k);
    k->allneg0 = 1;
}

static void k_addword(uint64_t *w, int i, uint64_t x, int neg)
{
    for (; i < KW && x; i++) {
        const uint64_t old = w[i];
        if (neg) {
            w[i] = old - x;
            x = old < x;
        } else {
            w[i] = old + x;
            x = w[i] < x;
        }
    }
}

/* add (-1)^neg * mag * 2^e2 (mag < 2^48) */
static void k_add(kacc *k, int neg, uint64_t mag, int e2)
{
    k->nterms++;
    if (mag == 0) {
        if (!neg)
            k->allneg0 = 0;
        return;
    }
    k->nonzero = 1;
    k->allneg0 = 0;
    const int p = e2 + KOFF, i = p >> 6, sh = p & 63;
    k_addword(k->w, i, mag << sh, neg);
    if (sh)
        k_addword(k->w, i + 1, mag >> (64 - sh), neg);
}

/* a bf16 value as (sign, significand, exponent); 0 finite, 1 inf, 2 NaN */
static int bf_dec(uint16_t h, int daz, int *s, uint64_t *m, int *e)
{
    const int ex = (h >> 7) & 0xff, mt = h & 0x7f;
    *s = h >> 15;
    if (ex == 255)
        return mt ? 2 : 1;
    if (ex == 0) {
        *m = daz ? 0 : (uint64_t)mt;
        *e = -133;
    } else {
        *m = (uint64_t)(mt | 0x80);
        *e = ex - 134;
    }
    return 0;
}

static void k_add_f32(kacc *k, float x, int daz)
{
    const uint32_t u = u_of(x);
    const int ex = (u >> 23) & 0xff, s = u >> 31;
    const uint32_t mt = u & 0x7fffff;
    if (ex == 255) {
        if (mt)
            k->nan = 1;
        else if (s)
            k->ninf = 1;
        else
            k->pinf = 1;
        return;
    }
    if (ex == 0)
        k_add(k, s, daz ? 0 : mt, -149);
    else
        k_add(k, s, mt | 0x800000u, ex - 150);
}

/* mode: bit 0 a product below FLT_MIN becomes a zero of its sign, bit 1 a zero factor gives +0, bit 2 a
 * product beyond FLT_MAX becomes an infinity */
static void k_add_prod(kacc *k, uint16_t a, uint16_t b, int daz, int mode)
{
    int sa, sb, ea = 0, eb = 0;
    uint64_t ma = 0, mb = 0;
    const int ca = bf_dec(a, daz, &sa, &ma, &ea), cb = bf_dec(b, daz, &sb, &mb, &eb);
    if (ca == 2 || cb == 2) {
        k->nan = 1;
        return;
    }
    if (ca == 1 || cb == 1) {
        if ((ca == 0 && ma == 0) || (cb == 0 && mb == 0))
            k->nan = 1; /* inf * 0 */
        else if (sa ^ sb)
            k->ninf = 1;
        else
            k->pinf = 1;
        return;
    }
    uint64_t mag = ma * mb;
    const int zero_factor = mag == 0, top = mag ? ea + eb + 63 - __builtin_clzll(mag) : 0;
    if ((mode & 1) && mag && top < -126)
        mag = 0; /* a product below FLT_MIN: a zero of its sign */
    if ((mode & 4) && mag && top >= 128) {
        *((sa ^ sb) ? &k->ninf : &k->pinf) = 1;
        return;
    }
    k_add(k, zero_factor && (mode & 2) ? 0 : sa ^ sb, mag, ea + eb);
}

static int k_bit(const uint64_t *w, int p) { return p >= 0 && p < 64 * KW ? (int)((w[p >> 6] >> (p & 63)) & 1) : 0; }

static int k_any_below(const uint64_t *w, int p) /* any of bits [0, p) */
{
    for (int i = 0; i < KW && 64 * i < p; i++) {
        const int n = p - 64 * i;
        const uint64_t mask = n >= 64 ? ~0ull : ((1ull << n) - 1);
        if (w[i] & mask)
            return 1;
    }
    return 0;
}

/* the exact sum rounded to nearest even fp32; ftz: a result below FLT_MIN
 * (after rounding) becomes a zero of its sign */
static float k_round(const kacc *k, int ftz)
{
    if (k->nan || (k->pinf && k->ninf))
        return f_of(0x7fc00000u);
    if (k->pinf)
        return INFINITY;
    if (k->ninf)
        return -INFINITY;
    uint64_t w[KW];
    memcpy(w, k->w, sizeof w);
    const int neg = (int)(w[KW - 1] >> 63);
    if (neg) { /* magnitude */
        uint64_t c = 1;
        for (int i = 0; i < KW; i++) {
            w[i] = ~w[i] + c;
            c = c && w[i] == 0;
        }
    }
    int p = -1;
    for (int i = KW - 1; i >= 0 && p < 0; i--)
        if (w[i])
            p = 64 * i + 63 - __builtin_clzll(w[i]);
    if (p < 0)
        return k->nonzero || !k->allneg0 || k->nterms == 0 ? 0.0f : -0.0f;
    int lsb = p - 23;
    if (lsb < KOFF - 149)
        lsb = KOFF - 149;
    uint32_t mant = 0;
    for (int q = p; q >= lsb; q--)
        mant = mant << 1 | (uint32_t)k_bit(w, q);
    const int rb = k_bit(w, lsb - 1), st = k_any_below(w, lsb - 1);
    if (rb && (st || (mant & 1)))
        mant++;
    if (mant == (1u << 24)) {
        mant >>= 1;
        lsb++;
    }
    uint32_t bits;
    if (mant < (1u << 23)) /* denormal (lsb is 2^-149) */
        bits = mant;
    else {
        const int biased = lsb - KOFF + 23 + 127;
        if (biased >= 255)
            return neg ? -INFINITY : INFINITY;
        bits = (uint32_t)biased << 23 | (mant & 0x7fffffu);
    }
    float r = f_of(bits | (uint32_t)neg << 31);
    return ftz ? flush(r) : r;
}

/* ---- the candidates ------------------------------------------------------- */
enum { C_EO, C_OE, C_PAIR, C_ROW, C_PR2, C_SPLIT, C_SPLITF, NKIND };
static const char *const kind_name[NKIND] = {
    "eo: per pair fma(even) then fma(odd)",
    "oe: per pair fma(odd) then fma(even)",
    "pair: acc + even + odd products exact, one rounding",
    "row: acc + the instruction's 2P products exact, one rounding",
    "pr2: even + odd rounded once, then added to acc",
    "split: even sum, odd sum (k order), their sum, then + acc",
    "splitf: split with fmaf chains from +0 (flushing as MXCSR's)"};
static const char *const kind_short[NKIND] = {"eo", "oe", "pair", "row", "pr2", "split", "splitf"};
#define NFL 8 /* flushing: bit 0 DAZ, bit 1 FTZ, bit 2 PFZ (products below FLT_MIN to zero) */
static const char *const flush_name[NFL] = {"none", "DAZ",     "FTZ",     "DAZ+FTZ",
                                            "PFZ",  "DAZ+PFZ", "FTZ+PFZ", "DAZ+FTZ+PFZ"};
/* candidates: every kind before split with every flushing; then split with its own (DAZ+FTZ, products exact,
 * the sums from +0), and as it would be with products below FLT_MIN flushed (fl bit 2), with products beyond
 * FLT_MAX overflowing (fl bit 3), with the sums starting from the first product, a zero factor giving +0 (fl
 * bit 4); and splitf (DAZ+FTZ) */
#define NSPLIT 4
#define NCAND (C_SPLIT * NFL + NSPLIT + 1)
static int cand_kind(int c) { return c < C_SPLIT * NFL ? c / NFL : c < C_SPLIT * NFL + NSPLIT ? C_SPLIT : C_SPLITF; }
static int cand_fl(int c)
{
    static const int split_fl[NSPLIT + 1] = {3, 3 | 4, 3 | 8, 3 | 16, 3};
    return c < C_SPLIT * NFL ? c % NFL : split_fl[c - C_SPLIT * NFL];
}
static const char *cand_fl_name(int c)
{
    static const char *const split_name[NSPLIT + 1] = {"DAZ+FTZ", "and PFZ", "and overflow", "from e0, 0x=+0",
                                                       "DAZ+FTZ"};
    return c < C_SPLIT * NFL ? flush_name[c % NFL] : split_name[c - C_SPLIT * NFL];
}

/* a case: S instructions of P pairs into one 16 x 16 accumulator tile */
#define SMAX 3
typedef struct {
    int P, S, K;                 /* K: the elements before the zero padding (<= 2P) */
    uint16_t a[SMAX][16 * 32];  /* row m of step s: a[s][m * 2P ...] */
    uint16_t b[SMAX][16 * 32];  /* row k of step s: b[s][k * 32 ...] */
    float c[256], amx[256], dp[256];
} tcase;

static float step_fma(float acc, uint16_t x, uint16_t y, int daz, int ftz, int pfz)
{
    float fx = bf(x), fy = bf(y);
    if (daz) {
        fx = flush(fx);
        fy = flush(fy);
    }
    const double prod = (double)fx * fy; /* exact */
    const float r = pfz && fabs(prod) < 1.17549435e-38 ? acc + copysignf(0.0f, (float)prod) : fmaf(fx, fy, acc);
    return ftz ? flush(r) : r;
}

/* one instruction's P pairs into acc: a[2p], a[2p+1] with b[p * bs], b[p * bs + 1] */
static float instr(int kind, int fl, float acc, const uint16_t *a, const uint16_t *b, int bs, int P)
{
    const int daz = fl & 1, ftz = (fl >> 1) & 1, pfz = (fl >> 2) & 1;
    if (daz)
        acc = flush(acc); /* the accumulator tile as the instruction reads it */
    if (kind == C_SPLIT) { /* products exact (unbounded exponent), every sum rounded once with FTZ, from +0 */
        float sum[2] = {0.0f, 0.0f};
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < P; p++) {
                kacc k;
                k_init(&k);
                if (p > 0 || !(fl & 16)) /* the sum starts from +0 (fl bit 4: from the first product) */
                    k_add_f32(&k, sum[h], 0);
                k_add_prod(&k, a[2 * p + h], b[p * bs + h], 1,
                           (fl & 4 ? 1 : 0) | (fl & 16 ? 2 : 0) | (fl & 8 ? 4 : 0));
                sum[h] = k_round(&k, 1);
            }
        kacc k;
        k_init(&k);
        k_add_f32(&k, sum[0], 0);
        k_add_f32(&k, sum[1], 0);
        const float tot = k_round(&k, 1);
        k_init(&k);
        k_add_f32(&k, acc, 0);
        k_add_f32(&k, tot, 0);
        return k_round(&k, 1);
    }
    if (kind == C_SPLITF) { /* split as FMAs: fmaf(a, b, sum) is the exact product plus sum, rounded once */
        float sum[2] = {0.0f, 0.0f};
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < P; p++)
                sum[h] = step_fma(sum[h], a[2 * p + h], b[p * bs + h], 1, 1, 0);
        return flush(flush(acc) + flush(sum[0] + sum[1]));
    }
    if (kind == C_ROW) {
        kacc k;
        k_init(&k);
        k_add_f32(&k, acc, daz);
        for (int p = 0; p < P; p++) {
            k_add_prod(&k, a[2 * p], b[p * bs], daz, pfz);
            k_add_prod(&k, a[2 * p + 1], b[p * bs + 1], daz, pfz);
        }
        return k_round(&k, ftz);
    }
    for (int p = 0; p < P; p++) {
        const uint16_t ae = a[2 * p], ao = a[2 * p + 1], be = b[p * bs], bo = b[p * bs + 1];
        if (kind == C_EO)
            acc = step_fma(step_fma(acc, ae, be, daz, ftz, pfz), ao, bo, daz, ftz, pfz);
        else if (kind == C_OE)
            acc = step_fma(step_fma(acc, ao, bo, daz, ftz, pfz), ae, be, daz, ftz, pfz);
        else {
            kacc k;
            k_init(&k);
            if (kind == C_PAIR)
                k_add_f32(&k, acc, daz);
            k_add_prod(&k, ae, be, daz, pfz);
            k_add_prod(&k, ao, bo, daz, pfz);
            const float r = k_round(&k, ftz);
            if (kind == C_PAIR)
                acc = r;
            else {
                acc = acc + r;
                if (ftz)
                    acc = flush(acc);
            }
        }
    }
    return acc;
}

static float candidate(const tcase *t, int m, int n, int kind, int fl)
{
    float acc = t->c[m * 16 + n];
    for (int s = 0; s < t->S; s++)
        acc = instr(kind, fl, acc, t->a[s] + m * 2 * t->P, t->b[s] + 2 * n, 32, t->P);
    return acc;
}

/* ---- cases ---------------------------------------------------------------- */
enum { CL_WIDE, CL_NARROW, CL_CANCEL, CL_LOW, CL_HIGH, CL_SPECIAL, CL_MIXED, CL_ORDER, CL_ZERO, NCLASS };
static const char *const class_name[NCLASS] = {"wide",  "narrow", "cancel", "low", "high",
                                               "special", "mixed", "order",  "zero"};

static uint16_t gen_bf16(int cl)
{
    const uint64_t r = rnd();
    const int sign = (int)(r >> 63), mt = (int)((r >> 8) & 0x7f);
    const unsigned c = (unsigned)(r % 1000);
    int e;
    if (cl == CL_MIXED) {
        static const int pick[4] = {CL_WIDE, CL_NARROW, CL_LOW, CL_HIGH};
        cl = pick[(r >> 40) & 3];
    }
    switch (cl) {
    case CL_WIDE:
        e = c < 30 ? 0 : c < 40 ? 255 : (int)((r >> 16) % 256);
        break;
    case CL_SPECIAL:
        e = c < 150 ? 0 : c < 300 ? 255 : (int)((r >> 16) % 256);
        if (c < 50)
            return (uint16_t)(sign << 15); /* zeros */
        break;
    case CL_LOW: /* denormal inputs; products around and below FLT_MIN */
        e = c < 200 ? 0 : 40 + (int)((r >> 16) % 50);
        break;
    case CL_HIGH: /* products around and above FLT_MAX */
        e = 180 + (int)((r >> 16) % 75);
        break;
    case CL_ZERO: /* signed zeros, denormals, products below FLT_MIN, a few near 1 */
        if (c < 350)
            return (uint16_t)(sign << 15);
        e = c < 600 ? 0 : c < 900 ? 1 + (int)((r >> 16) % 63) : 120 + (int)((r >> 16) % 8);
        break;
    default: /* narrow, cancel */
        e = 122 + (int)((r >> 16) % 11);
        break;
    }
    return (uint16_t)(sign << 15 | e << 7 | mt);
}

static float gen_acc(int cl)
{
    const uint64_t r = rnd();
    const uint32_t sign = (uint32_t)(r >> 63) << 31, mt = (uint32_t)(r >> 20) & 0x7fffff;
    const unsigned c = (unsigned)(r % 1000);
    uint32_t e;
    if (c < 20)
        return f_of(sign); /* zeros */
    switch (cl) {
    case CL_WIDE:
    case CL_MIXED:
        e = c < 80 ? 0u : c < 90 ? 255u : (uint32_t)((r >> 8) % 256);
        break;
    case CL_SPECIAL:
        e = c < 200 ? 0u : c < 400 ? 255u : (uint32_t)((r >> 8) % 256);
        break;
    case CL_LOW:
        e = c < 500 ? 0u : (uint32_t)((r >> 8) % 8);
        break;
    case CL_ZERO:
        if (c < 500)
            return f_of(sign);
        e = c < 800 ? 0u : 1u + (uint32_t)((r >> 8) % 20);
        break;
    case CL_HIGH:
        e = 240u + (uint32_t)((r >> 8) % 15);
        break;
    default:
        e = 118u + (uint32_t)((r >> 8) % 16);
        break;
    }
    return f_of(sign | e << 23 | mt);
}

static void gen_case(tcase *t, int P, int S, int K, int cl)
{
    t->P = P;
    t->S = S;
    t->K = K;
    memset(t->a, 0, sizeof t->a);
    memset(t->b, 0, sizeof t->b);
    for (int s = 0; s < S; s++) {
        for (int m = 0; m < 16; m++)
            for (int e = 0; e < K; e++)
                t->a[s][m * 2 * P + e] = gen_bf16(cl);
        for (int p = 0; p < P; p++)
            for (int e = 0; e < 32; e++)
                if (2 * p + (e & 1) < K)
                    t->b[s][p * 32 + e] = gen_bf16(cl);
        if (cl == CL_CANCEL) /* odd element about minus the even one: each pair's products nearly cancel */
            for (int m = 0; m < 16; m++)
                for (int p = 0; 2 * p + 1 < K; p++) {
                    uint16_t *x = &t->a[s][m * 2 * P + 2 * p];
                    x[1] = (uint16_t)((x[0] ^ 0x8000u) ^ (rnd() % 4 ? 0u : (uint16_t)(rnd() & 3)));
                }
        if (cl == CL_CANCEL)
            for (int p = 0; 2 * p + 1 < K; p++)
                for (int n = 0; n < 16; n++) {
                    uint16_t *y = &t->b[s][p * 32 + 2 * n];
                    y[1] = (uint16_t)(y[0] ^ (rnd() % 4 ? 0u : (uint16_t)(rnd() & 3)));
                }
    }
    int big[16][2]; /* order: two of row m's 2P + 1 terms (2P products, acc: 2P) are +B and -B, the rest 1 */
    if (cl == CL_ORDER) {
        for (int s = 0; s < S; s++)
            for (int e = 0; e < 16 * 32; e++) {
                t->a[s][e] = e % (2 * P) < K && e < 16 * 2 * P ? 0x3f80 : 0; /* 1.0 */
                t->b[s][e] = 2 * (e / 32) + (e & 1) < K && e / 32 < P ? 0x3f80 : 0;
            }
        for (int m = 0; m < 16; m++) {
            const int terms = K + 1;
            big[m][0] = (int)(rnd() % (uint64_t)terms);
            big[m][1] = (big[m][0] + 1 + (int)(rnd() % (uint64_t)(terms - 1))) % terms;
            for (int h = 0; h < 2; h++) {
                const uint16_t v = (uint16_t)((h ? 0x8000u : 0u) | (uint32_t)(150 + rnd() % 60) << 7);
                if (big[m][h] < K)
                    t->a[0][m * 2 * P + big[m][h]] = v;
                else
                    big[m][h] = -1 - (int)v; /* the accumulator */
            }
        }
    }
    for (int i = 0; i < 256; i++) {
        t->c[i] = gen_acc(cl);
        if (cl == CL_ORDER) {
            const int m = i / 16;
            t->c[i] = 1.0f;
            for (int h = 0; h < 2; h++)
                if (big[m][h] < 0)
                    t->c[i] = bf((uint16_t)(-1 - big[m][h]));
        }
        if (cl == CL_CANCEL && rnd() % 2) { /* acc about minus the first instruction's sum */
            const int m = i / 16, n = i % 16;
            double sum = 0;
            for (int p = 0; p < P; p++)
                sum += (double)bf(t->a[0][m * 2 * P + 2 * p]) * bf(t->b[0][p * 32 + 2 * n]) +
                       (double)bf(t->a[0][m * 2 * P + 2 * p + 1]) * bf(t->b[0][p * 32 + 2 * n + 1]);
            float f = (float)-sum;
            t->c[i] = f_of(u_of(f) ^ (uint32_t)(rnd() % 8));
        }
    }
}

/* ---- the instructions ----------------------------------------------------- */
typedef struct {
    uint8_t palette_id, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

static void cfg_for(tilecfg *cfg, int P)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->palette_id = 1;
    cfg->rows[0] = 16; /* C: 16 x 16 fp32 */
    cfg->colsb[0] = 64;
    cfg->rows[1] = 16; /* A: 16 rows of P pairs */
    cfg->colsb[1] = (uint16_t)(4 * P);
    cfg->rows[2] = (uint8_t)P; /* B: P rows of 16 pairs */
    cfg->colsb[2] = 64;
}

AMX_FN static void amx_case(tcase *t)
{
    tilecfg cfg;
    cfg_for(&cfg, t->P);
    _tile_loadconfig(&cfg);
    memcpy(t->amx, t->c, sizeof t->amx);
    _tile_loadd(0, t->amx, 64);
    for (int s = 0; s < t->S; s++) {
        _tile_loadd(1, t->a[s], 4 * t->P);
        _tile_loadd(2, t->b[s], 64);
        _tile_dpbf16ps(0, 1, 2);
    }
    _tile_stored(0, t->amx, 64);
    _tile_release();
}

DP_FN static void dp_case(tcase *t)
{
    for (int m = 0; m < 16; m++) {
        __m512 acc = _mm512_loadu_ps(t->c + m * 16);
        for (int s = 0; s < t->S; s++)
            for (int p = 0; p < t->P; p++) {
                uint32_t pair;
                memcpy(&pair, t->a[s] + m * 2 * t->P + 2 * p, 4);
                const __m512i a = _mm512_set1_epi32((int)pair);
                const __m512i b = _mm512_loadu_si512((const void *)(t->b[s] + p * 32));
                acc = _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
            }
        _mm512_storeu_ps(t->dp + m * 16, acc);
    }
}

static int have_amx(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (d >> 22 & 1) && (d >> 24 & 1); /* AMX-BF16, AMX-TILE */
}

static int have_dpbf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d))
        return 0;
    return (a >> 5 & 1) && __builtin_cpu_supports("avx512f");
}

/* ---- the twins ------------------------------------------------------------ */
typedef struct {
    long long match, miss;
    int shown;
} tally;

static int same(float x, float y) { return (x != x && y != y) || u_of(x) == u_of(y); }

static void show_case(const char *what, const tcase *t, int cl, int m, int n, float hw, float tw)
{
    printf("  first mismatch (%s): P=%d S=%d K=%d class %s m=%d n=%d: amx %08x, twin %08x, acc %08x\n", what, t->P,
           t->S, t->K, class_name[cl], m, n, u_of(hw), u_of(tw), u_of(t->c[m * 16 + n]));
    for (int s = 0; s < t->S; s++) {
        printf("    step %d pairs (a_even b_even a_odd b_odd):", s);
        for (int p = 0; p < t->P; p++)
            printf(" %04x %04x %04x %04x%s", t->a[s][m * 2 * t->P + 2 * p], t->b[s][p * 32 + 2 * n],
                   t->a[s][m * 2 * t->P + 2 * p + 1], t->b[s][p * 32 + 2 * n + 1], p + 1 < t->P ? " |" : "");
        printf("\n");
    }
}

static FILE *g_dump; /* --dump C FILE: every mismatch of candidate C, one line each */
static int g_dump_c = -1;

static int twins(long long tiles)
{
    const int dp = have_dpbf16();
    static const struct {
        int P, S, K, share; /* share of the tiles, in 16ths */
    } shapes[] = {{1, 1, 2, 5}, {5, 1, 9, 2}, {16, 1, 32, 3}, {16, 1, 31, 3}, {16, 3, 32, 3}};
    tally tc[NCAND], tdp = {0, 0, 0}, tdp_oe = {0, 0, 0};
    memset(tc, 0, sizeof tc);
    long long outputs = 0, nan_out = 0, nan_default = 0, nan_neg = 0, by_class[NCLASS] = {0};
    tcase *t = malloc(sizeof *t);
    if (!t) {
        fprintf(stderr, "amx_probe: out of memory\n");
        return 1;
    }
    for (int sh = 0; sh < (int)(sizeof shapes / sizeof shapes[0]); sh++) {
        const long long nt = tiles * shapes[sh].share / 16;
        for (long long it = 0; it < nt; it++) {
            const int cl = (int)(it % NCLASS);
            gen_case(t, shapes[sh].P, shapes[sh].S, shapes[sh].K, cl);
            amx_case(t);
            if (dp)
                dp_case(t);
            for (int m = 0; m < 16; m++)
                for (int n = 0; n < 16; n++) {
                    const float hw = t->amx[m * 16 + n];
                    outputs++;
                    by_class[cl]++;
                    if (hw != hw) {
                        nan_out++;
                        nan_default += u_of(hw) == 0x7fc00000u || u_of(hw) == 0xffc00000u;
                        nan_neg += u_of(hw) >> 31;
                    }
                    float oe_dazftz = 0;
                    for (int c = 0; c < NCAND; c++) {
                        const float tw = candidate(t, m, n, cand_kind(c), cand_fl(c));
                        if (c == C_OE * NFL + 3)
                            oe_dazftz = tw;
                        if (g_dump && ((c == g_dump_c && !same(hw, tw)) || (g_dump_c < 0 && c == 0))) {
                            fprintf(g_dump, "%d %d %d %s %08x %08x %08x", t->P, t->S, t->K, class_name[cl], u_of(hw),
                                    u_of(tw), u_of(t->c[m * 16 + n]));
                            for (int s = 0; s < t->S; s++)
                                for (int p = 0; p < t->P; p++)
                                    fprintf(g_dump, " %04x %04x %04x %04x", t->a[s][m * 2 * t->P + 2 * p],
                                            t->b[s][p * 32 + 2 * n], t->a[s][m * 2 * t->P + 2 * p + 1],
                                            t->b[s][p * 32 + 2 * n + 1]);
                            fprintf(g_dump, "\n");
                        }
                        if (same(hw, tw))
                            tc[c].match++;
                        else if (tc[c].miss++ == 0) {
                            printf("%s, %s:\n", kind_name[cand_kind(c)], cand_fl_name(c));
                            show_case("amx vs twin", t, cl, m, n, hw, tw);
                        }
                    }
                    if (dp) {
                        const float d = t->dp[m * 16 + n];
                        if (same(hw, d))
                            tdp.match++;
                        else if (tdp.miss++ == 0) {
                            printf("vdpbf16ps chained:\n");
                            show_case("amx vs vdpbf16ps", t, cl, m, n, hw, d);
                        }
                        if (same(d, oe_dazftz))
                            tdp_oe.match++;
                        else if (tdp_oe.miss++ == 0) {
                            printf("vdpbf16ps chained against oe, DAZ+FTZ:\n");
                            show_case("vdpbf16ps vs twin (amx column: vdpbf16ps)", t, cl, m, n, d, oe_dazftz);
                        }
                    }
                }
        }
    }
    free(t);
    printf("\nTDPBF16PS: %lld outputs (", outputs);
    for (int c = 0; c < NCLASS; c++)
        printf("%s %lld%s", class_name[c], by_class[c], c + 1 < NCLASS ? ", " : ")\n");
    printf("NaN outputs %lld (default NaN 0x7fc00000/0xffc00000: %lld, sign set: %lld)\n", nan_out, nan_default,
           nan_neg);
    printf("%-62s %-12s %12s %12s\n", "candidate", "flushing", "match", "mismatch");
    for (int c = 0; c < NCAND; c++)
        printf("%-62s %-12s %12lld %12lld\n", kind_name[cand_kind(c)], cand_fl_name(c), tc[c].match, tc[c].miss);
    if (dp) {
        printf("%-62s %-12s %12lld %12lld\n", "vdpbf16ps chained over the pairs (against TDPBF16PS)", "-", tdp.match,
               tdp.miss);
        printf("%-62s %-12s %12lld %12lld\n", "vdpbf16ps chained, against oe (DAZ+FTZ)", "-", tdp_oe.match,
               tdp_oe.miss);
    } else
        printf("vdpbf16ps: this CPU has no AVX512-BF16\n");
    int exact = 0;
    for (int c = 0; c < NCAND; c++)
        if (tc[c].miss == 0) {
            printf("exact twin: %s, %s\n", kind_name[cand_kind(c)], cand_fl_name(c));
            exact++;
        }
    if (!exact)
        printf("exact twin: none of the candidates\n");
    return exact ? 0 : 1;
}

/* --raw: cases from stdin, one a line: "P ACC A0 .. A(2P-1) B0 .. B(2P-1)" in hex
 * (fp32 bits, bf16 bits); prints TDPBF16PS's result (output 0, 0) in hex */
static int raw(void)
{
    tcase *t = calloc(1, sizeof *t);
    if (!t)
        return 1;
    int P;
    while (scanf("%d", &P) == 1) {
        unsigned acc, v;
        if (P < 1 || P > 16 || scanf("%x", &acc) != 1) {
            fprintf(stderr, "amx_probe: bad --raw line\n");
            free(t);
            return 2;
        }
        memset(t, 0, sizeof *t);
        t->P = P;
        t->S = 1;
        t->K = 2 * P;
        t->c[0] = f_of(acc);
        for (int e = 0; e < 4 * P; e++) {
            if (scanf("%x", &v) != 1) {
                fprintf(stderr, "amx_probe: bad --raw line\n");
                free(t);
                return 2;
            }
            if (e < 2 * P)
                t->a[0][e] = (uint16_t)v;
            else
                t->b[0][(e - 2 * P) / 2 * 32 + (e & 1)] = (uint16_t)v;
        }
        amx_case(t);
        printf("%08x\n", u_of(t->amx[0]));
    }
    free(t);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- the rate --------------------------------------------------------------- */
#define NC 256 /* columns per block shared by the threads */

/* Y[m0:m1, :] = X W^T; Wp: W packed as 16 x 32 VNNI tiles, [N/16][K/32][16 pairs][16 columns x 2] */
AMX_FN static void amx_gemm_rows(const uint16_t *X, const uint16_t *Wp, float *Y, int64_t K, int64_t N, int64_t m0,
                                 int64_t m1)
{
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int i = 0; i < 8; i++) {
        cfg.rows[i] = 16;
        cfg.colsb[i] = 64;
    }
    _tile_loadconfig(&cfg);
    const int64_t KB = K / 32;
    for (int64_t nc = 0; nc < N; nc += NC) {
        const int64_t ne = nc + NC < N ? nc + NC : N;
        for (int64_t m = m0; m < m1; m += 32)
            for (int64_t n = nc; n < ne; n += 32) {
                const uint16_t *x0 = X + m * K, *x1 = X + (m + 16) * K;
                const uint16_t *w0 = Wp + (n / 16) * KB * 512, *w1 = w0 + KB * 512;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t kb = 0; kb < KB; kb++) {
                    _tile_loadd(4, x0 + kb * 32, K * 2);
                    _tile_loadd(5, x1 + kb * 32, K * 2);
                    _tile_loadd(6, w0 + kb * 512, 64);
                    _tile_loadd(7, w1 + kb * 512, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, Y + m * N + n, N * 4);
                _tile_stored(1, Y + m * N + n + 16, N * 4);
                _tile_stored(2, Y + (m + 16) * N + n, N * 4);
                _tile_stored(3, Y + (m + 16) * N + n + 16, N * 4);
            }
    }
    _tile_release();
}

static void amx_gemm(const uint16_t *X, const uint16_t *Wp, float *Y, int64_t M, int64_t K, int64_t N)
{
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num(), blocks = M / 32;
        const int64_t b0 = blocks * id / nt, b1 = blocks * (id + 1) / nt;
        if (b1 > b0)
            amx_gemm_rows(X, Wp, Y, K, N, b0 * 32, b1 * 32);
    }
}

static int g_cpu_time; /* --cpu-time: the process's CPU clock */

static double now(void)
{
    struct timespec t;
    clock_gettime(g_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmpd(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench(const char *shape, int reps, int with_engine)
{
    long long M, K, N;
    if (sscanf(shape, "%lld:%lld:%lld", &M, &K, &N) != 3 || M < 32 || K < 32 || N < 32 || M % 32 || K % 32 ||
        N % 32 || M > (1LL << 20) || K > (1LL << 20) || N > (1LL << 20) || M * N > (1LL << 31)) {
        fprintf(stderr, "amx_probe: bad shape '%s' (M:K:N, each a multiple of 32)\n", shape);
        return 2;
    }
    uint16_t *X = malloc(sizeof *X * (size_t)(M * K)), *W = malloc(sizeof *W * (size_t)(N * K)),
             *Wp = malloc(sizeof *Wp * (size_t)(N * K));
    float *Y = malloc(sizeof *Y * (size_t)(M * N));
    if (!X || !W || !Wp || !Y) {
        fprintf(stderr, "amx_probe: out of memory for %s\n", shape);
        return 1;
    }
    /* values as gemm_bench's (rounded to bf16) */
    for (long long j = 0; j < K * N; j++) {
        const uint32_t u = u_of((float)((j * 104729) % 1000) / 1000.0f - 0.5f);
        W[j] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    for (long long j = 0; j < M * K; j++) {
        const uint32_t u = u_of((float)((j * 7919) % 1000) / 1000.0f - 0.5f);
        X[j] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    const long long KB = K / 32;
    for (long long nb = 0; nb < N / 16; nb++) /* VNNI tiles, once (untimed) */
        for (long long kb = 0; kb < KB; kb++)
            for (int p = 0; p < 16; p++)
                for (int n = 0; n < 16; n++)
                    for (int e = 0; e < 2; e++)
                        Wp[((nb * KB + kb) * 16 + p) * 32 + 2 * n + e] = W[(nb * 16 + n) * K + kb * 32 + 2 * p + e];
    double t[64], te[64], ratio[64];
    if (reps > 64)
        reps = 64;
    amx_gemm(X, Wp, Y, M, K, N); /* warm-up; its outputs are the ones checked below */
    const double flop = 2.0 * (double)M * (double)K * (double)N;
    /* NS sampled outputs against each kind's DAZ+FTZ candidate and split, chained over K (32 per instruction) */
    enum { NS = 1024 };
    int ok[NCAND] = {0};
    const uint64_t saved = g_rng;
    g_rng = 12345;
    for (int i = 0; i < NS; i++) {
        const long long m = (long long)(rnd() % (uint64_t)M), n = (long long)(rnd() % (uint64_t)N);
        for (int c = 0; c < NCAND; c++) {
            if (cand_fl(c) != 3)
                continue;
            float acc = 0.0f;
            for (long long kb = 0; kb < KB; kb++)
                acc = instr(cand_kind(c), 3, acc, X + m * K + kb * 32, W + n * K + kb * 32, 2, 16);
            ok[c] += same(acc, Y[m * N + n]);
        }
    }
    g_rng = saved;
#ifdef AMX_PROBE_ENGINE
    float *xf = with_engine ? malloc(sizeof *xf * (size_t)(M * K)) : NULL;
    rc_backend *be = NULL;
    if (with_engine) {
        if (!xf) {
            fprintf(stderr, "amx_probe: out of memory for %s\n", shape);
            return 1;
        }
        for (long long j = 0; j < M * K; j++)
            xf[j] = bf(X[j]);
        if (rc_backend_cpu_create(omp_get_max_threads(), RC_KERNELS_ENGINE, &be) != RC_OK ||
            be->ops->matmul(be, xf, 32, K, (rc_wt){W, RC_BF16, false}, N, NULL, RC_BF16, RC_F32, Y) != RC_OK) {
            fprintf(stderr, "amx_probe: %s\n", rc_last_error()); /* (a warm-up: the pair order's start-up check) */
            return 1;
        }
    }
    const rc_wt w16 = {W, RC_BF16, false};
#endif
    for (int r = 0; r < reps; r++) { /* AMX, engine in even rounds; engine, AMX in odd ones */
        te[r] = 0;
        for (int v = 0; v < 2; v++) {
            const int amx = (v == 0) == (r % 2 == 0);
            if (!amx && !with_engine)
                continue;
            const double t0 = now();
            if (amx)
                amx_gemm(X, Wp, Y, M, K, N);
#ifdef AMX_PROBE_ENGINE
            else if (be->ops->matmul(be, xf, M, K, w16, N, NULL, RC_BF16, RC_F32, Y) != RC_OK) {
                fprintf(stderr, "amx_probe: %s\n", rc_last_error());
                return 1;
            }
#endif
            *(amx ? &t[r] : &te[r]) = now() - t0;
        }
        ratio[r] = with_engine ? te[r] / t[r] : 0;
    }
#ifdef AMX_PROBE_ENGINE
    free(xf);
    if (be)
        rc_backend_destroy(be);
#endif
    qsort(t, (size_t)reps, sizeof *t, cmpd);
    qsort(te, (size_t)reps, sizeof *te, cmpd);
    qsort(ratio, (size_t)reps, sizeof *ratio, cmpd);
    printf("amx %-18s %8.1f GFLOP/s (median of %d; best %.1f) threads %d%s", shape, flop / t[reps / 2] / 1e9, reps,
           flop / t[0] / 1e9, omp_get_max_threads(), g_cpu_time ? " cpu-time" : "");
    if (with_engine)
        printf("; engine %.1f GFLOP/s (best %.1f), amx/engine %.2f (%.2f-%.2f)", flop / te[reps / 2] / 1e9,
               flop / te[0] / 1e9, ratio[reps / 2], ratio[0], ratio[reps - 1]);
    printf("; sampled outputs equal to:");
    int any = 0;
    for (int c = 0; c < NCAND; c++)
        if (ok[c] == NS) {
            printf("%s %s (%s)", any ? ";" : "", kind_short[cand_kind(c)], cand_fl_name(c));
            any = 1;
        }
    if (any)
        printf(" (%d of %d)\n", NS, NS);
    else
        printf(" no candidate on all %d\n", NS);
    free(X);
    free(W);
    free(Wp);
    free(Y);
    return 0;
}

int main(int argc, char **argv)
{
    long long tiles = 16384;
    int do_bench = 0, reps = 5, threads = 0, with_engine = 0, i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--tiles") == 0 && i + 1 < argc)
            tiles = atoll(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            g_rng ^= strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--dump") == 0 && i + 2 < argc) {
            g_dump_c = atoi(argv[++i]);
            if (!(g_dump = fopen(argv[++i], "w"))) {
                fprintf(stderr, "amx_probe: cannot write %s\n", argv[i]);
                return 1;
            }
        } else if (strcmp(argv[i], "--raw") == 0)
            do_bench = 2;
        else if (strcmp(argv[i], "--bench") == 0)
            do_bench = 1;
        else if (strcmp(argv[i], "--cpu-time") == 0)
            g_cpu_time = 1;
        else if (strcmp(argv[i], "--engine") == 0) {
#ifdef AMX_PROBE_ENGINE
            with_engine = 1;
#else
            fprintf(stderr, "amx_probe: --engine needs meson's build (build/amx_probe links ratiocheck)\n");
            return 2;
#endif
        }
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else
            break;
    }
    if ((do_bench == 1 && i == argc) || (do_bench != 1 && i != argc) || tiles < 16 || reps < 1) {
        fprintf(stderr, "usage: amx_probe [--tiles N] [--seed S] [--dump C FILE]\n"
                        "       amx_probe --bench [--engine] [--threads T] [--reps R] [--cpu-time] M:K:N ...\n"
                        "       amx_probe --raw < cases\n");
        return 2;
    }
    if (!have_amx()) {
        printf("amx_probe: this CPU has no AMX-BF16 / AMX-TILE\n");
        return 77;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        printf("amx_probe: the kernel refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM)\n");
        return 77;
    }
    if (threads > 0)
        omp_set_num_threads(threads);
    if (!do_bench)
        return twins(tiles);
    if (do_bench == 2)
        return raw();
    for (; i < argc; i++) {
        const int rc = bench(argv[i], reps, with_engine);
        if (rc)
            return rc;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
