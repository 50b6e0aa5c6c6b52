/* Rollout files for `ratiocheck score`: token ids and the log-probs a sampler
 * logged for them, read as hostile input (every size checked, one-line errors
 * naming FILE:LINE). Formats (README "Check your own engine" has the exact
 * fields):
 *   jsonl   {"prompt_ids": [..], "response_ids": [..], "logprobs": [..]} per
 *           line, optional "temperature", "top_p", "top_k", "logprobs_kind",
 *           and "trainer_logprobs" [..] (the user's trainer's log-probs of the
 *           same tokens: every record or none)
 *   vllm    OpenAI completions / chat responses (choices[].logprobs with
 *           token ids) and offline LLM.generate outputs dumped to JSON, one
 *           per line or a JSON array of them
 *   sglang  /generate responses with meta_info.output_token_logprobs
 *   h5      ratiocheck's own results file (what --rollouts-from reads)
 * Line formats are streamed: one line at a time (at most RC_ROLLOUT_MAX_LINE
 * bytes), each parsed, checked and appended to compact arrays (no padding);
 * a file whose content is one JSON array or one pretty-printed object is read
 * whole (at most RC_ROLLOUT_MAX_WHOLE bytes). */
#ifndef RC_ROLLOUTS_IN_H
#define RC_ROLLOUTS_IN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define RC_ROLLOUT_MAX_LINE ((int64_t)64 << 20)
#define RC_ROLLOUT_MAX_WHOLE ((int64_t)1 << 30)
#define RC_ROLLOUT_MAX_TOKENS ((int64_t)1 << 20)   /* per prompt / response */
#define RC_ROLLOUT_MAX_COUNT ((int64_t)1 << 24)    /* rollouts per file */
#define RC_ROLLOUT_MAX_TOTAL ((int64_t)1 << 31)    /* tokens per file, all rollouts */
/* a logged log-prob above this is not a log-probability (a log-softmax
 * rounds to at most 0; the slack covers a bf16 log-softmax of p ~ 1) */
#define RC_LOGPROB_POS_TOL 1e-3
#define RC_ROLLOUT_TEXT_KEPT 64

typedef enum { RC_RFMT_AUTO, RC_RFMT_JSONL, RC_RFMT_VLLM, RC_RFMT_SGLANG, RC_RFMT_H5 } rc_rollout_format;
/* what the logged log-probs are: of the full distribution at temperature 1
 * (vLLM raw_logprobs, HF output_logits) or after the sampler's processing
 * (temperature, then top-k / top-p renormalisation: vLLM processed_logprobs,
 * HF output_scores, ratiocheck's own files: temperature only) */
typedef enum { RC_LP_RAW, RC_LP_PROCESSED } rc_logprob_kind;

typedef struct {
    int64_t n;                  /* rollouts */
    int64_t first;              /* the file's index of rollout 0 (a chunk of rc_rollouts_next; 0 otherwise) */
    int64_t prompt_max, resp_max;
    int32_t *tok;               /* prompt then response ids of each rollout */
    float *lp;                  /* the logged log-prob of each response token */
    /* the trainer's log-prob of each response token as the user's trainer
     * logged it (jsonl "trainer_logprobs", a results file's
     * /rollouts/logprob_trainer), laid out as lp; NULL when the file has none
     * (every record carries them or none does) */
    float *tlp;
    bool has_trainer;
    int64_t *tok_off, *lp_off;  /* [n + 1] */
    int32_t *plen, *rlen;       /* [n] */
    int64_t *line;              /* [n] the line (or record, for whole-file JSON) it came from */
    /* the response text the record carries (vLLM choices[].text / message.content /
     * outputs[].text, SGLang "text", jsonl "response_text"), kept for the first
     * RC_ROLLOUT_TEXT_KEPT rollouts only (NULL when absent) */
    char *text[64];
    /* the sampling settings, one per file (a record that states another is an error) */
    double temperature, top_p;
    int64_t top_k;
    bool temperature_given, top_p_given, top_k_given; /* stated by the file */
    rc_logprob_kind kind;
    bool kind_given;            /* the file says which (else raw is assumed) */
    bool whole_file;            /* line[] counts records, not lines */
    rc_rollout_format format;
    int64_t lines_read;
    int64_t n_tokens, n_response_tokens; /* in all rollouts (filled by the caller once the arrays are gone) */
    int64_t cap, tok_cap, lp_cap; /* allocated */
} rc_rollout_set;

/* Read path in format fmt (AUTO: sniffed from the HDF5 signature or the
 * first record) into out (one chunk of rc_rollouts_next holding every
 * rollout). Every id is checked against [0, vocab), every
 * prompt to be non-empty and prompt + response to fit max_pos positions
 * (<= 0: unchecked), every log-prob to be a finite number <= tolerance, and
 * the counts of ids and log-probs to agree; the first problem is
 * RC_ERR_FORMAT "FILE:LINE: ...". Formats that do not carry ids (TRL's and
 * verl's text dumps) are RC_ERR_UNSUPPORTED naming what is missing. */
/* progress while a line format is read: bytes of the file read so far, its
 * size, the rollouts so far (called at most every 4 MiB) */
typedef void (*rc_rollouts_progress_fn)(void *ctx, int64_t done, int64_t total, int64_t rollouts);
rc_status rc_rollouts_load(const char *path, rc_rollout_format fmt, int64_t vocab, int64_t max_pos,
                           rc_rollouts_progress_fn progress, void *progress_ctx, rc_rollout_set *out);
void rc_rollouts_free(rc_rollout_set *s);

/* The same file read in chunks, in bounded memory: rc_rollouts_open checks
 * the path (a results file is read whole here; a line file is opened), then
 * each rc_rollouts_next reads the next records, with the same checks and
 * errors as rc_rollouts_load, until the chunk holds max_rollouts rollouts or
 * (max_tokens > 0) at least max_tokens prompt + response tokens, or the file
 * ends. *chunk (owned by the reader, valid until the next call or the close)
 * holds rollouts first .. first + n - 1 of the file; n == 0: the end. A record
 * with several rollouts (vLLM choices) is not split, so a chunk can hold a
 * few more than max_rollouts. The settings fields (temperature, top_p, top_k,
 * kind and their *_given) are those of every record read so far: a record
 * that states another setting is an error when it is reached. text[i] is
 * rollout first + i's response text while first + i < RC_ROLLOUT_TEXT_KEPT.
 * A whole-file JSON (an array, or one pretty-printed object) is parsed at its
 * first record and handed out from the parsed value. A file with no rollouts
 * is RC_ERR_FORMAT at its end. After an error the reader only closes. */
typedef struct rc_rollout_reader rc_rollout_reader;
rc_status rc_rollouts_open(const char *path, rc_rollout_format fmt, int64_t vocab, int64_t max_pos,
                           rc_rollouts_progress_fn progress, void *progress_ctx, rc_rollout_reader **out);
rc_status rc_rollouts_next(rc_rollout_reader *r, int64_t max_rollouts, int64_t max_tokens,
                           const rc_rollout_set **chunk);
void rc_rollouts_close(rc_rollout_reader *r);

rc_status rc_rollout_format_parse(const char *name, rc_rollout_format *out);
const char *rc_rollout_format_name(rc_rollout_format f);

/* "FILE:LINE" or "FILE: record N" for rollout i, into buf */
const char *rc_rollout_where(const rc_rollout_set *s, const char *path, int64_t i, char *buf, size_t n);

#endif
