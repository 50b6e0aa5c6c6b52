/* ratiocheck score's three columns (results.h rc_threeway): the sampler's
 * and the user's trainer's logged log-probs and ratiocheck's own trainer,
 * compared two by two, and which side is off. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "results.h"

const char *const rc_threeway_names[RC_TW_N] = {"sampler_vs_your_trainer", "sampler_vs_ratiocheck",
                                                "your_trainer_vs_ratiocheck"};
const char *const rc_threeway_labels[RC_TW_N] = {"sampler vs your trainer", "sampler vs ratiocheck",
                                                 "your trainer vs ratiocheck"};
const char *const rc_tw_off_names[4] = {"sampler", "your_trainer", "both", "none"};
const char *const rc_threeway_cols[RC_TW_COLS] = {"sampler", "your_trainer", "ratiocheck"};

/* d = b - a, one token; the mean and the sum of squared deviations
 * (Welford) in s1 / s2 */
static void pair_add(rc_threeway_acc *a, int k, float av, float bv)
{
    if (isnan(av) || isnan(bv))
        return;
    const double d = (double)bv - (double)av, ad = fabs(d);
    a->n[k]++;
    const double delta = d - a->s1[k];
    a->s1[k] += delta / (double)a->n[k];
    a->s2[k] += delta * (d - a->s1[k]);
    a->sabs[k] += ad;
    a->maxabs[k] = ad > a->maxabs[k] ? ad : a->maxabs[k];
    a->k3[k] += expm1(d) - d;
    a->mpe[k] += exp(ad);
    uint32_t x, y;
    memcpy(&x, &av, sizeof x);
    memcpy(&y, &bv, sizeof y);
    a->same[k] += x == y;
}

void rc_threeway_add(rc_threeway_acc *a, float sampler, float yours, float ratiocheck, double ref)
{
    pair_add(a, RC_TW_SAMPLER_YOURS, sampler, yours);
    pair_add(a, RC_TW_SAMPLER_RC, sampler, ratiocheck);
    pair_add(a, RC_TW_YOURS_RC, yours, ratiocheck);
    const float col[RC_TW_COLS] = {sampler, yours, ratiocheck};
    if (isnan(ref) || isnan(sampler) || isnan(yours) || isnan(ratiocheck))
        return;
    a->nref++;
    for (int k = 0; k < RC_TW_COLS; k++) {
        const double d = fabs((double)col[k] - ref);
        a->rsum[k] += d;
        a->rmax[k] = d > a->rmax[k] ? d : a->rmax[k];
    }
}

void rc_threeway_finish(const rc_threeway_acc *a, rc_threeway *tw)
{
    for (int k = 0; k < RC_TW_N; k++) {
        rc_pair_stats *p = &tw->pair[k];
        const double n = (double)a->n[k];
        p->count = a->n[k];
        p->mean = n > 0 ? a->s1[k] : NAN;
        p->std = n > 0 ? sqrt(a->s2[k] / n) : NAN;
        p->mean_abs = n > 0 ? a->sabs[k] / n : NAN;
        p->max_abs = n > 0 ? a->maxabs[k] : NAN;
        p->k3 = n > 0 ? a->k3[k] / n : NAN;
        p->mult_prob_err = n > 0 ? a->mpe[k] / n : NAN;
        p->identical_frac = n > 0 ? (double)a->same[k] / n : NAN;
    }
    tw->ref_count = a->nref;
    for (int k = 0; k < RC_TW_COLS; k++) {
        tw->ref_mean_abs[k] = a->nref > 0 ? a->rsum[k] / (double)a->nref : NAN;
        tw->ref_max_abs[k] = a->nref > 0 ? a->rmax[k] : NAN;
    }
    if (a->nref == 0)
        tw->ref[0] = '\0';
    /* docs/score.md "Three columns". Which side is off: with a reference,
     * the one farther from it (the exact value) when the other is at least
     * 1 / RC_TW_CLOSER times closer; without one, the one farther from
     * ratiocheck's trainer, under the same rule */
    const char *rc = tw->ratiocheck[0] ? tw->ratiocheck : "trainer";
    const bool by_ref = tw->ref[0] != '\0';
    const double s = by_ref ? tw->ref_mean_abs[RC_TW_COL_SAMPLER] : tw->pair[RC_TW_SAMPLER_RC].mean_abs;
    const double y = by_ref ? tw->ref_mean_abs[RC_TW_COL_YOURS] : tw->pair[RC_TW_YOURS_RC].mean_abs;
    const char *from = by_ref ? tw->ref : rc;
    char against[200];
    snprintf(against, sizeof against, by_ref ? "the %s reference" : "ratiocheck's %s", from);
    /* the closer side and ratiocheck's trainer: within the dtype's noise when
     * their mean |d| is at most RC_TW_NOISE x ratiocheck's own from the reference */
    const double noise = by_ref ? tw->ref_mean_abs[RC_TW_COL_RC] : NAN;
    const double ys = tw->pair[RC_TW_YOURS_RC].mean_abs, ss = tw->pair[RC_TW_SAMPLER_RC].mean_abs;
    char tail[400] = "";
    if (!(s >= 0) || !(y >= 0)) {
        tw->off = RC_TW_OFF_NONE;
        snprintf(tw->summary, sizeof tw->summary, "no token has all three log-probs");
        return;
    }
    if (s == 0 && y == 0) {
        tw->off = RC_TW_OFF_NONE;
        snprintf(tw->summary, sizeof tw->summary, "the sampler and your trainer both equal %s bit for bit", against);
        return;
    }
    if (y <= RC_TW_CLOSER * s || s <= RC_TW_CLOSER * y) {
        const bool sampler_off = y <= RC_TW_CLOSER * s;
        const char *good = sampler_off ? "your trainer" : "the sampler";
        const char *bad = sampler_off ? "the sampler's" : "your trainer's";
        const double dg = sampler_off ? y : s, db = sampler_off ? s : y, drc = sampler_off ? ys : ss;
        tw->off = sampler_off ? RC_TW_OFF_SAMPLER : RC_TW_OFF_YOURS;
        if (by_ref && drc <= RC_TW_NOISE * noise)
            snprintf(tail, sizeof tail, "; %s agrees with ratiocheck's %s within the dtype's noise (mean |d| %.3g, "
                     "%g x its own %.3g from the reference)", good, rc, drc, RC_TW_NOISE, noise);
        else if (by_ref)
            snprintf(tail, sizeof tail, "; ratiocheck's %s is %.3g from %s", rc, drc, good);
        snprintf(tw->summary, sizeof tw->summary, "%s agrees with %s (mean |d| %.3g, %.3gx closer than %s %.3g); "
                 "the mismatch is %s%s", good, against, dg, dg > 0 ? db / dg : INFINITY, bad, db, bad, tail);
        return;
    }
    tw->off = RC_TW_OFF_BOTH;
    snprintf(tw->summary, sizeof tw->summary,
             "neither side is 2x closer to %s (mean |d| sampler %.3g, your trainer %.3g): both differ from it%s",
             against, s, y, by_ref ? "" : ", or it computes unlike both (try another --trainer spec, or --reference)");
}
