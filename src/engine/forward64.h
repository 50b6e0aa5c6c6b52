/* float64 reference forward pass (forward64.c). */
#ifndef RC_FORWARD64_H
#define RC_FORWARD64_H

#include <stdint.h>

#include "model.h"
#include "status.h"

/* One sequence of n tokens (positions 0..n-1): for each i < n_out, the
 * log-prob of targets[i] in the next-token distribution at row rows[i], with
 * the logits divided by temperature; everything in float64. */
rc_status rc_forward64(const rc_model *m, const int32_t *tokens, int64_t n, double temperature, const int64_t *rows,
                       const int32_t *targets, int64_t n_out, double *out);

#endif
