/* The routing recorder of a run (rollout.c): the engines' routing hook
 * (moe.h) stores the experts and weights of every MoE layer at every
 * position of every sequence, side by side (0: the sampler's cached
 * generation, 1: the trainer's forward); the trainer's replay (routing=replay)
 * reads the sampler's back; at the end the rows that predict the generated
 * tokens go into the results' record (routing.h). */
#ifndef RC_ROUTING_REC_H
#define RC_ROUTING_REC_H

#include "forward.h"
#include "moe.h"
#include "results.h"

typedef struct rc_routing_rec rc_routing_rec;

/* for n_seq sequences of up to n_pos positions of model c (NULL *out when c has no MoE layer) */
rc_status rc_routing_rec_create(const rc_config *c, int64_t n_seq, int64_t n_pos, rc_routing_rec **out);
void rc_routing_rec_free(rc_routing_rec *r);
/* e records side `side` from now on, sequence seq0 in its cache slot 0 (call again when seq0 changes) */
void rc_routing_rec_attach(rc_routing_rec *r, rc_engine *e, int side, int64_t seq0);
/* the generated tokens' rows into out->routing (prompt_len / gen_valid / seq_prompt from out) */
rc_status rc_routing_rec_finish(const rc_routing_rec *r, const int32_t *prompt_len, rc_results *out);

#endif
