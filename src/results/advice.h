/* What the verdict puts beside its numbers (docs/verdict.md): the bands
 * published RL stacks report for the same metrics, the published
 * sequence-level corrections judged on both of their bounds, and the next
 * step for a WARN / FAIL line from one table of causes measured with
 * `ratiocheck sweep`. */
#ifndef RC_ADVICE_H
#define RC_ADVICE_H

#include <stddef.h>

#include "results.h"

/* One published magnitude: the metric (rc_len_stats.k3 or
 * corr.mean_abs_log_ratio), the setting it was measured in, the range
 * reported and where (docs/verdict.md cites each). */
typedef enum { RC_REF_K3, RC_REF_MEAN_ABS } rc_ref_metric;
typedef struct {
    rc_ref_metric metric;
    const char *setting; /* "bf16", "fp8 rollout", "bf16 TP 16 across nodes", ... */
    double lo, hi;
    const char *sources; /* short: "prime-rl #3543, verl #7519" */
} rc_ref_band;
extern const rc_ref_band rc_ref_bands[];
extern const size_t rc_n_ref_bands;
extern const char *const rc_ref_metric_names[2]; /* "k3", "mean_abs_log_ratio" */
/* -1 below the band, 0 within, 1 above (NaN: 2) */
int rc_ref_band_position(const rc_ref_band *b, double v);
/* "below every published bf16 stack (2.5e-04 to 8.9e-03: prime-rl #3543, verl #7519)" */
void rc_ref_band_text(const rc_ref_band *b, double v, char *buf, size_t n);

/* GSPO's own normal training clip fraction (its paper, arXiv 2507.18071,
 * §5.2 and Figure 2, "Average fractions of clipped tokens over the RL
 * training of GSPO and GRPO": about 0.15 for GSPO against about 0.0013 for
 * GRPO) and the verdict's bands on the fraction of sequences
 * outside its band at step 0: up to the paper's fraction OK, up to half WARN
 * (clipping stops a sequence's gradient only on the side its advantage
 * pushes, so at most half the gradient is lost), beyond FAIL. */
#define RC_GSPO_PAPER_CLIPFRAC 0.15
#define RC_GSPO_FAIL_FRAC 0.50

/* The published sequence-level corrections, each judged on both bounds of
 * e^S (or e^M): the fraction of sequences below lo and above hi at step 0. */
typedef struct {
    const char *name;  /* "verl Seq-MIS" */
    const char *of;    /* the quantity bounded: "e^S", "e^-S", "e^-M" (verl bounds exp of its k1 = -log r) */
    bool geometric;    /* on M (else S) */
    bool negated;      /* on -S / -M */
    double lo, hi;     /* lo 0: no lower bound; hi 0: the run's seq_cap */
} rc_seq_corr;
extern const rc_seq_corr rc_seq_corrs[RC_N_SEQ_CORR];

/* The causes: one table, one row per cause, each with the sweep setting that
 * tests it and what that setting did on the bundled model (docs/verdict.md,
 * "Causes", gives the command that measured them). A row applies to a run
 * whose dtype is `dtype` (NULL: any but fp32) and whose sides do not already
 * have `applied` (a substring of the sides' settings). */
typedef struct {
    const char *vary;     /* the `--vary` spec that tests it */
    const char *applied;  /* present in the run's sides: already tried */
    const char *dtype;    /* the run's dtype it applies to, NULL: any but fp32 */
    const char *cause;    /* what it names: "a bf16 LM head on both sides" */
    const char *remedy;   /* what the setting does: "an fp32 LM head on both sides" */
    double std_factor;    /* ratio std vs the base */
    double k3_factor;     /* k3 vs the base */
    double gspo_base, gspo; /* fraction of sequences outside GSPO's band: base, with the setting */
    bool exact;           /* removes the mismatch (at a speed cost): named after the cheaper levers */
} rc_cause;
extern const rc_cause rc_causes[];
extern const size_t rc_n_causes;
/* The most likely cause of objective o's WARN / FAIL in r (its sides and
 * dtype, so called once the run's settings are in r: the printers call it),
 * written into buf ("" when the line is OK or no cause applies): "<cause>? <remedy> cut
 * <metric> to <x> on the bundled model: `ratiocheck sweep --vary <spec>`" */
void rc_verdict_next_step(const rc_results *r, int o, char *buf, size_t n);

/* `ratiocheck sweep`: per objective, the rows that lower its failure metric by
 * more than its noise floor, best first (up to RC_SWEEP_RECS). */
#define RC_SWEEP_RECS 3
typedef struct {
    const char *metric;  /* "k3", "seq_mis_maskfrac", "seq_frac_outside_band" */
    double base;         /* the base run's value */
    double noise;        /* its noise floor: 2 standard errors over the sequences */
    int n;
    int row[RC_SWEEP_RECS];
    double value[RC_SWEEP_RECS];
} rc_sweep_rec;
/* the value objective o is judged on (the sweep's ranking metric) */
double rc_objective_metric(const rc_len_stats *st, int o);
void rc_sweep_recommend(const rc_results *r, rc_sweep_rec rec[RC_N_OBJECTIVES]);

#endif
