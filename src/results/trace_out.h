/* What `ratiocheck trace` computed, as the results hold and write it
 * (/trace of the HDF5 file, h5out.c): the layer x op tables of the two
 * sides' comparison and the first divergence. src/check/trace.c fills them. */
#ifndef RC_TRACE_OUT_H
#define RC_TRACE_OUT_H

#include <stdbool.h>
#include <stdint.h>

#include "forward.h" /* rc_trace_op */

/* Layer slots of the tables: 0 the embedding (layer -1), 1 + l layer l,
 * n_layers + 1 the final norm and logits. */
#define RC_TRACE_SLOT(layer) ((layer) + 1)

/* One (layer slot, op) cell, over every traced sequence and every position
 * both sides computed. count 0: the op does not exist there (NaN fields). */
typedef struct {
    int64_t count, equal;  /* elements compared, bitwise equal */
    double max_abs;        /* max |sampler - trainer| */
    double rel_l2;         /* ||sampler - trainer||_2 / ||trainer||_2 (0 when both are 0) */
    double max_ulp;        /* max |s - t| / ulp(max(|s|, |t|)) in the coarser side's dtype of the op */
} rc_trace_cell;

/* Where the two sides first part (forward order: layer slot, op, position,
 * element; over the traced sequences the smallest position, then element). */
typedef struct {
    bool found;
    int64_t layer;     /* -1 .. n_layers */
    rc_trace_op op;
    int64_t sequence;  /* the run's 0-based sequence index */
    int64_t position;  /* absolute token position in the sequence (prompt included) */
    int64_t element;   /* index within the op's row */
    float sampler, trainer;
    double ulp;
    int64_t sampler_rows, trainer_rows; /* the M of each side's call (the rows computed together) */
} rc_trace_first;

/* What the trace computed: the tables of every cell, the first divergence
 * overall and per traced sequence. Owned by the trace. */
typedef struct {
    int64_t n_slots;            /* n_layers + 2 */
    const rc_trace_cell *cells; /* [n_slots][RC_TOP_COUNT] */
    rc_trace_first first;
    int64_t n_seq;
    const int64_t *seq;             /* [n_seq] the traced sequences (run indices) */
    const rc_trace_first *seq_first; /* [n_seq] */
} rc_trace_table;

/* What `ratiocheck trace` writes under /trace (h5out.c): the tables, the
 * sides as replayed, and the traced sequences' replayed log-probs. */
typedef struct rc_trace_out {
    const rc_trace_table *table;
    const char *sampler, *trainer; /* each side's settings */
    int64_t len;                   /* the traced length L (the run's longest) */
    int64_t n_layers;
    const float *logprob_gen, *logprob_fwd; /* [n_seq, len] replayed, NaN after a sequence's end */
    int64_t replay_tokens, replay_equal_gen, replay_equal_fwd; /* of the traced tokens: bitwise the file's */
    int64_t n_experts;             /* a MoE model's experts (the route op's rows: 2 x n_experts), else 0 */
    /* MoE: the first routing flip in forward order (layer, then the smallest position over the traced
     * sequences, then expert): the sides' expert sets differ there; expert: the lowest one only one side
     * chose (by_sampler: the sampler's). found false: none, or not a MoE model. */
    struct {
        bool found, by_sampler;
        int64_t layer, sequence, position, expert;
    } flip;
} rc_trace_out;

#endif
