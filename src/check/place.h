/* How many GPUs a run's layers are split over (docs/gpu.md "Choosing the number of GPUs"): the per-GPU
 * device-memory estimate of the run's engines (forward.c rc_layer_split, the figures of `inspect --gpus N`)
 * against each GPU's free memory. */
#ifndef RC_PLACE_H
#define RC_PLACE_H

#include <stddef.h>

#include "rollout.h"

/* a device's free and total memory in bytes (rc_cuda_mem_info) */
typedef rc_status (*rc_mem_info_fn)(int dev, size_t *free_b, size_t *total_b);

typedef struct {
    int n_dev;                      /* the GPUs the layers are split over */
    bool automatic;                 /* chosen here: neither --gpus nor --layer-split was given */
    bool checked;                   /* need and free_b hold the figures of n_dev GPUs */
    int64_t l0[RC_MAX_DEVICES + 1]; /* the split (the first engine's): GPU d holds layers l0[d] .. l0[d + 1] - 1 */
    int64_t need[RC_MAX_DEVICES];   /* each GPU's estimate: the most that one phase's engines hold there */
    int64_t free_b[RC_MAX_DEVICES]; /* each GPU's free memory before the run */
    int64_t need_one;               /* the estimate on one GPU (0: not computed) */
} rc_gpu_plan;

/* Each GPU's device memory for the engines eng[n_eng] over n_dev GPUs (split: the layers per GPU, NULL: each
 * engine's default split): on GPU d the most that the engines of one phase hold together (rc_engine_shape.phases),
 * each engine's share from rc_layer_split. l0: the first engine's split. */
rc_status rc_gpu_need(const rc_model *m, const rc_engine_shape *eng, int n_eng, int n_dev, const int64_t *split,
                      int64_t *l0, int64_t *need);

/* The plan of a run over `visible` GPUs. forced > 0 (--gpus N, or --layer-split's count; split: its counts or
 * NULL): N GPUs, and RC_ERR_NOMEM naming the GPU when its estimate exceeds its free memory (a split that
 * rc_layer_split refuses, or more GPUs than are visible, is left to the engine to refuse). forced 0: the
 * fewest GPUs, 1 up to the visible ones (and the model's layers), whose default split fits every GPU's free
 * memory; RC_ERR_NOMEM with one line when none does. mem answers each GPU's free memory, asked only for
 * the GPUs a split tried uses. */
rc_status rc_gpu_plan_make(const rc_model *m, const rc_engine_shape *eng, int n_eng, int visible, int forced,
                           const int64_t *split, rc_mem_info_fn mem, rc_gpu_plan *plan);

/* "1.25 GiB", "38.0 MiB", "12.0 KiB" */
void rc_bytes_str(int64_t bytes, char *buf, size_t n);
/* a and b (each n bytes of text) as rc_bytes_str gives them, or as "N bytes" where that prints them alike */
void rc_bytes_pair_str(int64_t a, int64_t b, char *sa, char *sb, size_t n);
/* the layers per GPU: "0-15, 16-31" */
void rc_gpu_split_str(const rc_gpu_plan *p, char *buf, size_t n);
/* the plan as the results record it (setting gpu_split): "2 GPUs, layers 0-15, 16-31 (automatic: ...)" */
void rc_gpu_plan_str(const rc_gpu_plan *p, char *buf, size_t n);

#endif
