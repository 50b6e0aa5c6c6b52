/* The routing record of a mixture-of-experts run (docs/routing.md): for
 * every generated token and MoE layer, the experts (and their weights) the
 * sampler's cached generation chose and the ones the trainer's forward
 * chose, and the statistics of their differences. Generated token t of a
 * sequence with a prompt of P tokens is routed at the row that predicts it,
 * position P + t - 1 (the row whose log-probs give its ratio). A flip: the
 * two sides' sets of top-k experts differ in that layer (an order that
 * differs over the same set is not one). */
#ifndef RC_ROUTING_H
#define RC_ROUTING_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

/* miles' R3 check (radixark/miles, miles/utils/replay_base.py,
 * check_replay_result): per layer, a token whose trainer top-k shares no
 * expert with the replayed (sampler's) top-k is a mismatch; the check fails
 * when more than 1% of the tokens of a layer's router call are */
#define RC_ROUTING_MILES_MAX 0.01

typedef struct {
    int64_t tokens;         /* valid tokens with a routing record on both sides */
    int64_t tokens_flip;    /* tokens with a flip in any layer */
    double share_flip;      /* tokens_flip / tokens */
    double decision_share;  /* flipped (token, layer) pairs / all pairs */
    double mean_overlap;    /* mean over (token, layer) pairs of |sampler's set & trainer's set| / k */
    double miles_mismatch;  /* max over layers of the share of tokens with no expert in common */
    int64_t miles_layer;    /* the decoder layer of that maximum (-1: no MoE layer) */
    int64_t first_layer;    /* the lowest decoder layer where any token flips (-1: none) */
    int64_t len;            /* the length log r is from (the longest) */
    double abs_lr_flip;     /* mean |log r| of the tokens with a flip (NaN: none) */
    double abs_lr_same;     /* of those without (NaN: none) */
    double share_abs_lr_flip; /* their sum of |log r| over every token's (NaN when that is 0) */
} rc_routing_stats;

typedef struct rc_routing {
    int64_t n_seq, gen_len;  /* as the results' */
    int64_t n_layers;        /* MoE layers */
    int64_t top_k, n_experts;
    int32_t *layer;          /* [n_layers] the decoder layer of each */
    /* [n_seq, gen_len, n_layers, top_k] in the order the router gave them (side 0: sampler, 1: trainer);
     * -1 / NaN where the token is not valid or the side recorded none */
    int16_t *experts[2];
    float *weights[2];
    /* per layer */
    int64_t *layer_flips;    /* [n_layers] tokens whose sets differ there */
    int64_t *layer_miles;    /* [n_layers] tokens with no expert in common */
    int64_t *layer_first;    /* [n_layers] tokens whose first flip is there */
    int32_t *token_flips;    /* [n_seq, gen_len] layers with a flip (-1 where not recorded) */
    rc_routing_stats st;
} rc_routing;

rc_status rc_routing_create(int64_t n_seq, int64_t gen_len, int64_t n_layers, int64_t top_k, int64_t n_experts,
                            rc_routing **out);
void rc_routing_free(rc_routing *r);
/* The statistics from the two sides' experts and log r = fwd - gen at the
 * longest length len (fwd, gen: [n_seq, len] and [n_seq, gen_len] rows,
 * NaN where not valid). */
void rc_routing_compute(rc_routing *r, const float *gen, const float *fwd, int64_t len);
/* The same statistics over the tokens t < len only, with log r = fwd - gen at
 * that length (fwd: [n_seq, len]): a length's routing statistics (the
 * results' rc_len_stats.rt); at the longest length they equal r->st. */
rc_status rc_routing_len_stats(const rc_routing *r, const float *gen, const float *fwd, int64_t len,
                               rc_routing_stats *st);
/* Two runs' routing records over the same tokens (`ratiocheck diff`): of the tokens where both runs recorded
 * side `side` (0: the sampler, 1: the trainer), *tokens, and *differ of them whose experts differ between the
 * runs in some MoE layer (sets, as a flip: an order that differs over the same set is not one). RC_ERR_USAGE
 * when the records are not of the same layers, top-k and experts. */
rc_status rc_routing_compare(const rc_routing *a, const rc_routing *b, int side, int64_t *tokens, int64_t *differ);
/* "OK" / "WARN": miles' check at RC_ROUTING_MILES_MAX */
const char *rc_routing_verdict(const rc_routing *r);
/* the run's table lines and --json's "routing" object (", \"routing\": {...}") */
void rc_routing_print(const rc_routing *r);
void rc_routing_print_json(const rc_routing *r);

#endif
