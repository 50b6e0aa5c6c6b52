/* How many GPUs a run's layers are split over: the estimate of `inspect --gpus N` against each GPU's free
 * memory (place.h; docs/gpu.md "Choosing the number of GPUs"). */
#include "place.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

void rc_bytes_str(int64_t bytes, char *buf, size_t n)
{
    const double b = (double)bytes, k = 1024.0;
    if (b >= k * k * k)
        snprintf(buf, n, "%.*f GiB", b >= 10 * k * k * k ? 1 : 2, b / (k * k * k));
    else if (b >= k * k)
        snprintf(buf, n, "%.*f MiB", b >= 10 * k * k ? 1 : 2, b / (k * k));
    else
        snprintf(buf, n, "%.1f KiB", b / k);
}

void rc_bytes_pair_str(int64_t a, int64_t b, char *sa, char *sb, size_t n)
{
    rc_bytes_str(a, sa, n);
    rc_bytes_str(b, sb, n);
    if (a != b && !strcmp(sa, sb)) { /* "26.2 MiB needed, 26.2 MiB free": the bytes instead */
        snprintf(sa, n, "%lld bytes", (long long)a);
        snprintf(sb, n, "%lld bytes", (long long)b);
    }
}

void rc_gpu_split_str(const rc_gpu_plan *p, char *buf, size_t n)
{
    size_t u = 0;
    buf[0] = '\0';
    for (int d = 0; d < p->n_dev && u < n; d++) {
        const int w = snprintf(buf + u, n - u, "%s%lld-%lld", d ? ", " : "", (long long)p->l0[d],
                               (long long)p->l0[d + 1] - 1);
        u += w > 0 ? (size_t)w : 0;
    }
}

void rc_gpu_plan_str(const rc_gpu_plan *p, char *buf, size_t n)
{
    char split[160], need[32], fr[32];
    rc_gpu_split_str(p, split, sizeof split);
    rc_bytes_pair_str(p->need_one, p->free_b[0], need, fr, sizeof need);
    if (p->n_dev == 1 && p->automatic)
        snprintf(buf, n, "1 GPU (automatic: %s needed, GPU 0 has %s free)", need, fr);
    else if (p->automatic)
        snprintf(buf, n, "%d GPUs, layers %s (automatic: %s needed on one GPU, GPU 0 has %s free)", p->n_dev, split,
                 need, fr);
    else if (p->n_dev == 1)
        snprintf(buf, n, "1 GPU (--gpus 1)");
    else
        snprintf(buf, n, "%d GPUs, layers %s (given)", p->n_dev, split);
}

rc_status rc_gpu_need(const rc_model *m, const rc_engine_shape *eng, int n_eng, int n_dev, const int64_t *split,
                      int64_t *l0, int64_t *need)
{
    static const unsigned phases[] = {RC_PHASE_GENERATE, RC_PHASE_FORWARD, RC_PHASE_REFERENCE};
    int64_t sum[3][RC_MAX_DEVICES] = {{0}};
    /* the backends' workspaces, held for the whole run: one set per GPU and backend (run: the sampler's kernels,
     * the trainer's when they differ, the fp32 reference's own), which its engines' calls share, each as large as
     * the largest of them asks (an engine's weight copies, RC_CUWS_SHADOW, are its own: with its bytes) */
    int64_t ws[3][RC_MAX_DEVICES][RC_CUWS_N] = {{{0}}};
    for (int e = 0; e < n_eng; e++) {
        int64_t el0[RC_MAX_DEVICES + 1], bytes[RC_MAX_DEVICES];
        const rc_engine_shape *s = &eng[e];
        RC_TRY(rc_layer_split(m, &s->num, s->kernels, n_dev, split, s->n_slots, s->max_len, s->max_rows, el0, bytes,
                              NULL, NULL));
        if (e == 0)
            memcpy(l0, el0, sizeof(int64_t) * (size_t)(n_dev + 1));
        for (int d = 0; d < n_dev; d++) {
            int64_t w[RC_CUWS_N];
            RC_TRY(rc_cuda_ws_bytes(m, &s->num, s->kernels, s->n_slots, s->max_len, s->max_rows, el0[d], el0[d + 1],
                                    d == 0, w));
            bytes[d] -= rc_cuda_ws_total(w) - w[RC_CUWS_SHADOW]; /* (counted once below) */
            const int b = (s->phases & RC_PHASE_REFERENCE) ? 2 : s->kernels == eng[0].kernels ? 0 : 1;
            for (int i = 0; i < RC_CUWS_N; i++)
                if (i != RC_CUWS_SHADOW && w[i] > ws[b][d][i])
                    ws[b][d][i] = w[i];
        }
        for (int p = 0; p < 3; p++)
            for (int d = 0; d < n_dev && (s->phases & phases[p]); d++)
                if (!rc_add_i64(sum[p][d], bytes[d], &sum[p][d]))
                    return rc_errorf(RC_ERR_NOMEM, "engine size overflows");
    }
    for (int d = 0; d < n_dev; d++) {
        need[d] = 0;
        for (int p = 0; p < 3; p++)
            need[d] = sum[p][d] > need[d] ? sum[p][d] : need[d];
        for (int b = 0; b < 3; b++)
            if (!rc_add_i64(need[d], rc_cuda_ws_total(ws[b][d]), &need[d]))
                return rc_errorf(RC_ERR_NOMEM, "engine size overflows");
    }
    return RC_OK;
}

/* GPUs 0 .. n - 1's free memory into plan->free_b (those not asked yet) */
static rc_status ask_free(rc_mem_info_fn mem, int n, int *asked, rc_gpu_plan *plan)
{
    for (; *asked < n; (*asked)++) {
        size_t fr = 0, total = 0;
        RC_TRY(mem(*asked, &fr, &total));
        plan->free_b[*asked] = fr > (size_t)INT64_MAX ? INT64_MAX : (int64_t)fr;
    }
    return RC_OK;
}

/* the first GPU whose estimate exceeds its free memory, or -1 */
static int first_short(const rc_gpu_plan *p, int n)
{
    for (int d = 0; d < n; d++)
        if (p->need[d] > p->free_b[d])
            return d;
    return -1;
}

rc_status rc_gpu_plan_make(const rc_model *m, const rc_engine_shape *eng, int n_eng, int visible, int forced,
                           const int64_t *split, rc_mem_info_fn mem, rc_gpu_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    int asked = 0;
    char a[32], b[32], sp[160];
    const int64_t L = m->cfg.n_layers;
    if (forced > 0) { /* --gpus N / --layer-split: checked, not chosen */
        plan->n_dev = forced;
        if (forced > visible || forced > RC_MAX_DEVICES ||
            rc_gpu_need(m, eng, n_eng, forced, split, plan->l0, plan->need) != RC_OK) {
            rc_clear_error(); /* the engine refuses it, by its own message */
            return RC_OK;
        }
        RC_TRY(ask_free(mem, forced, &asked, plan));
        plan->checked = true;
        if (forced == 1)
            plan->need_one = plan->need[0];
        const int d = first_short(plan, forced);
        if (d < 0)
            return RC_OK;
        rc_bytes_pair_str(plan->need[d], plan->free_b[d], a, b, sizeof a);
        if (forced == 1)
            return rc_errorf(RC_ERR_NOMEM, "CUDA backend: too little GPU memory for --gpus 1: the run needs %s on GPU 0, "
                             "which has %s free (the estimate of inspect; without --gpus the layers are split over "
                             "as many GPUs as they need)", a, b);
        return rc_errorf(RC_ERR_NOMEM, "CUDA backend: too little GPU memory for --gpus %d: GPU %d (layers %lld-%lld) "
                         "needs %s and has %s free (the estimate of inspect --gpus %d)", forced, d,
                         (long long)plan->l0[d], (long long)plan->l0[d + 1] - 1, a, b, forced);
    }
    /* the fewest GPUs whose split fits */
    int most = visible < RC_MAX_DEVICES ? visible : RC_MAX_DEVICES;
    if (most > L)
        most = L > 0 ? (int)L : 1;
    char why[256] = "";
    int tried = 0, short_d = 0;
    rc_gpu_plan last = {0};
    for (int n = 1; n <= most; n++) {
        rc_gpu_plan t = {0};
        rc_status s = rc_gpu_need(m, eng, n_eng, n, NULL, t.l0, t.need);
        if (s != RC_OK && n == 1)
            return s;
        if (s != RC_OK) { /* this run cannot be split (rc_layer_split refused it): one GPU only */
            snprintf(why, sizeof why, "; it cannot be split over GPUs: %s", rc_last_error());
            rc_clear_error();
            break;
        }
        RC_TRY(ask_free(mem, n, &asked, plan));
        memcpy(t.free_b, plan->free_b, sizeof t.free_b);
        t.n_dev = n;
        t.automatic = t.checked = true;
        if (n == 1)
            plan->need_one = t.need[0];
        t.need_one = plan->need_one;
        tried = n;
        const int d = first_short(&t, n);
        if (d < 0) {
            *plan = t;
            return RC_OK;
        }
        last = t;
        short_d = d;
    }
    rc_bytes_pair_str(plan->need_one, plan->free_b[0], a, b, sizeof a);
    if (tried <= 1)
        return rc_errorf(RC_ERR_NOMEM, "CUDA backend: too little GPU memory: the run needs %s on one GPU, GPU 0 has "
                         "%s free, and %d %s visible%s (the estimate of inspect)", a, b, visible,
                         visible == 1 ? "GPU is" : "GPUs are", why);
    char c[32], d[32];
    rc_gpu_split_str(&last, sp, sizeof sp);
    rc_bytes_pair_str(last.need[short_d], last.free_b[short_d], c, d, sizeof c);
    return rc_errorf(RC_ERR_NOMEM, "CUDA backend: too little GPU memory: the run needs %s on one GPU (GPU 0 has %s "
                     "free), and split over %d GPUs (layers %s) GPU %d still needs %s with %s free%s (the estimate "
                     "of inspect --gpus %d)", a, b, tried, sp, short_d, c, d, why, tried);
}
