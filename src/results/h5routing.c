/* /routing: a MoE run's routing record (routing.h) in the results file.
 *   sampler_experts, trainer_experts  int16 [n_seq, gen_len, moe_layers, top_k]: the experts of generated
 *                                     token t (routed at the row that predicts it), in the router's order;
 *                                     -1 where the token is not valid
 *   sampler_weights, trainer_weights  float32, the same shape: their routing weights; NaN where not valid
 *   layer                             int32 [moe_layers]: the decoder layer of each
 *   layer_flips, layer_first, layer_no_common  int64 [moe_layers]: tokens whose expert sets differ there, whose
 *                                     first flip is there, whose sets have no expert in common (miles' mismatch)
 *   token_flips                       int32 [n_seq, gen_len]: layers with a flip (-1: not valid)
 * and the statistics as attributes (tools/checks/check_results.py recomputes every one). */
#include <math.h>
#include <string.h>

#include "h5w.h"
#include "routing.h"

rc_status write_routing(const h5w *w, const rc_results *r)
{
    const rc_routing *rt = r->routing;
    if (!rt)
        return RC_OK;
    const rc_routing_stats *st = &rt->st;
    const char *o = "/routing";
    hid_t g;
    RC_TRY(group_create(w, o, &g));
    rc_status s = attr_i64(w, g, o, "moe_layers", rt->n_layers);
    if (s == RC_OK) s = attr_i64(w, g, o, "top_k", rt->top_k);
    if (s == RC_OK) s = attr_i64(w, g, o, "experts", rt->n_experts);
    if (s == RC_OK) s = attr_i64(w, g, o, "tokens", st->tokens);
    if (s == RC_OK) s = attr_i64(w, g, o, "tokens_flip", st->tokens_flip);
    if (s == RC_OK) s = attr_f64(w, g, o, "share_flip", st->share_flip);
    if (s == RC_OK) s = attr_f64(w, g, o, "decision_share", st->decision_share);
    if (s == RC_OK) s = attr_f64(w, g, o, "mean_overlap", st->mean_overlap);
    if (s == RC_OK) s = attr_f64(w, g, o, "miles_mismatch", st->miles_mismatch);
    if (s == RC_OK) s = attr_i64(w, g, o, "miles_layer", st->miles_layer);
    if (s == RC_OK) s = attr_f64(w, g, o, "miles_max", RC_ROUTING_MILES_MAX);
    if (s == RC_OK) s = attr_str(w, g, o, "verdict", rc_routing_verdict(rt));
    if (s == RC_OK) s = attr_i64(w, g, o, "first_layer", st->first_layer);
    if (s == RC_OK) s = attr_i64(w, g, o, "len", st->len);
    if (s == RC_OK) s = attr_f64(w, g, o, "abs_log_ratio_flip", st->abs_lr_flip);
    if (s == RC_OK) s = attr_f64(w, g, o, "abs_log_ratio_same", st->abs_lr_same);
    if (s == RC_OK) s = attr_f64(w, g, o, "share_abs_log_ratio_flip", st->share_abs_lr_flip);
    const hsize_t d4[4] = {(hsize_t)rt->n_seq, (hsize_t)rt->gen_len, (hsize_t)rt->n_layers, (hsize_t)rt->top_k};
    const hsize_t d2[2] = {(hsize_t)rt->n_seq, (hsize_t)rt->gen_len}, d1[1] = {(hsize_t)rt->n_layers};
    static const char *const ne[2] = {"sampler_experts", "trainer_experts"};
    static const char *const nw[2] = {"sampler_weights", "trainer_weights"};
    for (int side = 0; side < 2 && s == RC_OK; side++) {
        s = ds_write(w, g, o, ne[side], H5T_STD_I16LE, H5T_NATIVE_INT16, 4, d4, rt->experts[side], NULL);
        if (s == RC_OK)
            s = ds_write(w, g, o, nw[side], H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, d4, rt->weights[side], NULL);
    }
    if (s == RC_OK) s = ds_write(w, g, o, "layer", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, rt->layer, NULL);
    if (s == RC_OK) s = ds_write(w, g, o, "layer_flips", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d1, rt->layer_flips, NULL);
    if (s == RC_OK) s = ds_write(w, g, o, "layer_first", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d1, rt->layer_first, NULL);
    if (s == RC_OK)
        s = ds_write(w, g, o, "layer_no_common", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d1, rt->layer_miles, NULL);
    if (s == RC_OK) s = ds_write(w, g, o, "token_flips", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d2, rt->token_flips, NULL);
    return group_close(w, g, o, s);
}
