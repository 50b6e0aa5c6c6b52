/* The command line's shared declarations: the option tables, the helpers
 * every command uses, and the run's steps that run, sweep, score and trace
 * share. Each command is one cmd_*.c; main.c dispatches from its table. */
#ifndef RC_CLI_H
#define RC_CLI_H

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "forward.h"
#include "fp8w.h"
#include "gate.h"
#include "model.h"
#include "place.h"
#include "print.h"
#include "prompts.h"
#include "rc_build_config.h"
#include "rc_cuda.h"
#include "results.h"
#include "rollout.h"
#include "rollouts_in.h"
#include "score.h"
#include "side.h"
#include "status.h"
#include "tokenizer.h"
#include "trace.h"
#include "util.h"

/* ---- main.c: signals -------------------------------------------------------- */
extern volatile sig_atomic_t g_signal;   /* the SIGINT / SIGTERM that arrived, or 0 */
extern volatile int g_interrupted_flag;  /* polled by the run */
extern volatile sig_atomic_t g_polling;  /* 1 while the run polls the flag */

/* ---- common.c: errors, files, progress ------------------------------------------ */
/* the one-line error of st on stderr; the exit code */
int fail(rc_status st);
__attribute__((format(printf, 1, 2))) int usage_error(const char *fmt, ...);
/* A file that may be absent: *present says whether it is there; anything
 * there that is not a regular file is an error naming it. */
rc_status optional_file(const char *path, bool *present);
/* config.json's EOS ids outside the vocabulary: a warning on stderr (HF warns and generates without EOS) */
void warn_eos(const char *model_dir, const rc_config *mc);
const char *data_dir(void); /* $RATIOCHECK_DATA or the source tree's data/ */
double mono_now(void);
void clock_str(double s, char *buf, size_t n); /* "1:05" / "1:02:05" */
typedef struct {
    bool enabled;
    bool lines;         /* stderr is not a terminal: a line every `every` seconds */
    double every;
    double start, last; /* start: the first call */
} progress_state;
/* the progress bar on a terminal, else (a log file, CI, Slurm) one line
 * every 15 s ($RATIOCHECK_PROGRESS_SECONDS); nothing with --quiet */
progress_state progress_start(bool quiet);
/* the progress bar (rc_progress_fn with ctx = a progress_state) */
void progress_cb(void *ctx, const char *phase, double frac, int64_t tokens);
void note_stale(const char *tmp_path, long pid);
/* --out must not name an input, by any name (device and inode) */
rc_status check_out_not_input(const char *out, const char *model_dir, const char *other);

/* ---- opts.c: option tables ------------------------------------------------------ */
typedef struct opt_spec opt_spec;
/* Parse `v` (NULL for a flag) into the option's destination in `dst` (the
 * command's options struct). */
typedef rc_status (*opt_parse_fn)(const opt_spec *o, const char *v, void *dst);

/* One option: its long name (and short letter), the metavar shown in --help
 * (NULL for a flag), the help text ('\n' starts a continuation line), the
 * section it opens in --help (or NULL), the parser and its destination
 * (an offset into the command's options struct; lo/hi bound integers and
 * numbers). getopt's list and --help are both made from a command's table
 * (parse_opts, print_opts_usage): every command has one. */
struct opt_spec {
    const char *name;
    int short_name;
    const char *metavar;
    const char *help;
    const char *section;
    opt_parse_fn parse;
    size_t off;
    double lo, hi;
    /* a table shared by several commands (run's: run, sweep, score): the
     * commands it applies to (CMD_*; 0: every one), the commands that refuse
     * it by name (opt_cmd.refused_why), the offset of a bool set when it is
     * given (0: none) */
    unsigned cmds, refused;
    size_t given;
};
enum { CMD_RUN = 1, CMD_SWEEP = 2, CMD_SCORE = 4 };
/* a command parsing a shared table: its bit, its usage text (before the
 * options), its default output's middle name ("%s" in a help text), and
 * what follows "--OPT does not apply" for the options it refuses */
typedef struct {
    const char *name;
    unsigned bit;
    const char *usage;
    const char *out_kind;
    const char *refused_why;
} opt_cmd;
#define OPT_AT(o, dst, T) ((T *)(void *)((char *)(dst) + (o)->off))
#define OPT_HELP(T) {"help", 'h', NULL, "show this help", NULL, op_flag, offsetof(T, help), 0, 0, 0, 0, 0}

rc_status op_path(const opt_spec *o, const char *v, void *dst);
rc_status op_flag(const opt_spec *o, const char *v, void *dst);
rc_status op_i64(const opt_spec *o, const char *v, void *dst);
/* --layer-split a,b,...: 1 to RC_MAX_DEVICES positive layer counts into out[], their number in *n */
rc_status parse_layer_split(const char *v, int64_t *out, int *n);
/* --gpus and --layer-split together (gpus 0: not given): RC_OK with the device count in *gpus (the split's
 * length when only it is given), else RC_ERR_USAGE naming both */
rc_status check_gpus(int64_t *gpus, int n_split);
rc_status op_by(const opt_spec *o, const char *v, void *dst);
rc_status op_f64(const opt_spec *o, const char *v, void *dst);
/* A command's --help: its usage text, then the table's options that apply to it. */
void print_opts_usage(FILE *f, const opt_cmd *cmd, const opt_spec *t, size_t n);
/* Parse argv's options with table t into dst (defaults already there).
 * help_off: the offset of the command's `bool help`: --help prints the
 * usage. Returns an exit code when the command is done (--help, a usage
 * error), else -1; optind is then the first operand. */
int parse_opts(int argc, char **argv, const opt_spec *t, size_t n, void *dst, size_t help_off, const char *usage);
/* the same for a command of a shared table: the rows that apply to cmd */
int parse_opts_cmd(int argc, char **argv, const opt_spec *t, size_t n, void *dst, size_t help_off,
                   const opt_cmd *cmd);
/* --len: N,N,... or ranges A:B:xK / A:B:+K */
rc_status parse_lens(const char *v, rc_rollout_cfg *cfg);

#define MAX_GATES RC_MAX_GATES
#define MAX_SWEEP 64
typedef rc_gate gate; /* --fail-above's rows (gate.h) */

/* Everything the run's options set. */
typedef struct run_opts {
    char model_default[4096], prompts_default[4096];
    const char *model_dir, *prompts_path, *out_path, *replay, *backend;
    const char *chat_kwargs; /* --chat-template-kwargs JSON, or NULL */
    rc_rollout_cfg cfg;
    rc_kernels kernels;
    bool lp_same, force, json, quiet, help;
    bool len_given; /* --len was given (else --rollouts-from takes the file's lengths) */
    int64_t threads, num_prompts, seed, show, show_worst;
    unsigned by; /* --by: the strata tables to print (bit RC_STRATA_*) */
    double temperature;
    double clip_eps; /* --clip-eps: both sides, unless --clip-eps-low / -high (0: not given) */
    const char *sampler_spec, *trainer_spec; /* --sampler / --trainer, applied after the other options */
    rc_side sampler, trainer;                /* each side resolved from the options and its spec */
    gate gates[MAX_GATES];
    int n_gates;
    int64_t layers; /* --layers N (0: all) */
    /* --gpus N (0: one) and --layer-split a,b,... (n_split counts; 0: the even split by weight bytes) */
    int64_t gpus;
    int64_t layer_split[RC_MAX_DEVICES];
    int n_split;
    int fail_on; /* --fail-on: 0 none, else the lowest rc_verdict_level that fails (WARN or FAIL) */
    /* score's own */
    const char *rollouts, *format, *logprobs_kind;
    int64_t chunk_rollouts; /* 0: RC_SCORE_CHUNK_ROLLOUTS */
    bool check_only, sweep;
    /* sweep's and score's --vary, in order */
    const char *vary[MAX_SWEEP];
    int n_vary;
    /* given on the command line (score: else the file's) */
    bool temperature_given, top_k_given, top_p_given, forward_batch_given;
} run_opts;
/* Evaluate the run's gates (--fail-above, --fail-on) on res: true when one
 * fails; rules: the rules as given ("" without a gate), failed: what failed
 * ("; "-separated, cut at fn); err: one line per failure there (NULL: none). */
bool eval_gates(const run_opts *ro, const rc_results *res, char *rules, size_t rn, char *failed, size_t fn,
                FILE *err);
/* run, sweep and score: one table (opts.c), each its rows */
extern const opt_cmd k_cmd_run, k_cmd_sweep, k_cmd_score;
/* Parse a run-like command's options into ro (defaults first). Returns an
 * exit code when the command is done (--help, a usage error), else -1. */
int parse_run_args(int argc, char **argv, run_opts *ro, const opt_cmd *cmd);

/* ---- cmd_run.c: the run's steps ------------------------------------------------- */
/* One run: what each step makes, freed in one place (run_free). */
typedef struct {
    run_opts ro;
    rc_rollout_cfg cfg;        /* what rc_run_check runs */
    const char *prompts_path;  /* or the --rollouts-from file */
    const char *out_path;      /* NULL: --out none */
    char out_default[4096];
    bool use_cuda;
    char device[128];          /* as rc_results.device */
    int n_visible;             /* the CUDA GPUs visible (use_cuda) */
    bool placed;               /* run_place_gpus has run */
    bool gpus_auto;            /* it chose the number of GPUs */
    char gpu_split[192];       /* as rc_results.gpu_split */
    int n_threads;
    rc_model *m;
    rc_tokenizer *tok;
    rc_prompts prompts;
    rc_results prev;           /* --rollouts-from */
    rc_backend *be, *ref_be, *trainer_be; /* trainer_be: only when the trainer's kernels differ */
    rc_results res;
    const char *out_kind;      /* the default output's middle name: "ratiocheck" or "sweep" */
    char out_stem[1024];       /* score with both sides logged: the default output's NAME (else the model's) */
} run_ctx;

rc_status run_prepare(run_ctx *x);
rc_status run_load(run_ctx *x);
rc_status backend_for(const run_ctx *x, rc_kernels k, rc_backend **out);
rc_status side_backends(const run_ctx *x, const rc_side *sm, const rc_side *tr, rc_backend **be,
                        rc_backend **tbe);
rc_status run_check_polled(const run_ctx *x, rc_backend *be, rc_backend *ref_be, const rc_rollout_cfg *cfg,
                           rc_results *out);
rc_status run_place_gpus(run_ctx *x);
rc_status run_compute(run_ctx *x);
rc_status decode_completions(const rc_tokenizer *tok, rc_results *res);
rc_status run_settings(run_ctx *x, const char *cmdline);
rc_status run_record(run_ctx *x, const char *cmdline);
int run_report(const run_ctx *x);
void run_free(run_ctx *x);
rc_status run_narrow_model(run_ctx *x);

/* ---- cmd_sweep.c: what score's --sweep shares ----------------------------------- */
/* One setting of a sweep: the base's two sides with one setting applied to
 * the sampler, the trainer or both (sides bit 1 / 2). */
typedef struct {
    char name[96];  /* "both: dtype=fp16" */
    char spec[160]; /* "dtype=fp16": how it reads (never parsed again) */
    unsigned sides;
    rc_side sampler, trainer;
} sweep_setting;
/* "sampler:SPEC", "trainer:SPEC" or "both:SPEC" (--vary) applied to ro's sides */
rc_status parse_vary(const char *v, const run_opts *ro, sweep_setting *out);
int default_settings(const run_ctx *x, sweep_setting *t);
rc_status sweep_run(run_ctx *x, const sweep_setting *set, int n_set);

/* ---- the commands ------------------------------------------------------------------ */
int cmd_run(int argc, char **argv, const char *cmdline);
int cmd_score(int argc, char **argv, const char *cmdline);
int cmd_sweep(int argc, char **argv, const char *cmdline);
int cmd_trace(int argc, char **argv, const char *cmdline);
int cmd_inspect(int argc, char **argv, const char *cmdline);
int cmd_tokenize(int argc, char **argv, const char *cmdline);
int cmd_report(int argc, char **argv, const char *cmdline);
int cmd_diff(int argc, char **argv, const char *cmdline);

#endif
