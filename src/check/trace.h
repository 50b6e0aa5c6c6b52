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
#include "trace_out.h"

typedef struct rc_trace rc_trace;

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
