/* ratiocheck trace: where the sampler's and the trainer's forward passes
 * part. A replay of a run (rc_run_check with the run's tokens) carries the
 * capture hook of forward.h; for the traced sequences it keeps every op's
 * output per layer and position on each side (side 0: the sampler's cached
 * decoding, 1: the trainer's full forward), then compares side against side
 * per (layer, op): bitwise-equal fraction, max |difference|, relative L2,
 * max ulp distance, and the first (layer, op, position, element) in forward
 * order where they differ. README "Trace". */
#ifndef RC_TRACE_H
#define RC_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "forward.h"
#include "model.h"

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

typedef struct rc_trace rc_trace;

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
} rc_trace_out;

/* A trace of sequences seq[n_seq] (distinct, 0 <= seq < run_seqs) of a run of
 * run_seqs sequences whose longest sequence holds max_pos tokens. */
rc_status rc_trace_create(const rc_config *c, int64_t run_seqs, const int64_t *seq, int64_t n_seq, int64_t max_pos,
                          rc_trace **out);
void rc_trace_free(rc_trace *t);
/* the hook (rc_capture_fn) with ctx = the trace */
rc_status rc_trace_capture(void *ctx, rc_backend *be, const rc_capture *c);
/* after the replay: derive the scores and probabilities and compare the sides */
rc_status rc_trace_compare(rc_trace *t, const rc_trace_table **out);

/* What one side captured for traced sequence k (index into seq), layer
 * (-1 .. n_layers), op at token position pos: the row (width floats) and the
 * rows of its call, or NULL when that side did not compute it. */
const float *rc_trace_row(const rc_trace *t, int side, int64_t k, int64_t layer, rc_trace_op op, int64_t pos,
                          int64_t *width, int64_t *call_rows);

/* ulp distance of a and b in dt (rc_trace_cell.max_ulp) */
double rc_trace_ulp_distance(float a, float b, rc_dtype dt);

#endif
