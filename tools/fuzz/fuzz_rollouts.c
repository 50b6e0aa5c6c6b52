/* libFuzzer harness: a rollout file for `ratiocheck score`, read by
 * rc_rollouts_load in every text format (auto, jsonl, vllm, sglang) with the
 * bundled model's vocabulary (4096) and context (256), and, when it loads,
 * padded by rc_score_inputs_build.
 *
 * Checked on success: at least one rollout; offsets ascending and matching
 * the lengths; every prompt 1..prompt_max tokens, prompt + response <= 256;
 * every id in [0, 4096); every log-prob finite and <= RC_LOGPROB_POS_TOL;
 * prompt_max / resp_max the largest lengths; the padded tables hold exactly
 * the rollouts (-1 / NaN after them); with trainer_logprobs (every record
 * or none) the same checks on them, and the two columns compared without a
 * model (rc_score_logged_results, then every statistic). On failure: the set is empty. With
 * FUZZ_CHECK_MSG=1 every error is one line naming the file. Run with
 * -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10.
 * Seeds: tools/fuzz/corpus/rollouts/ (the shapes of data/fixtures/score/).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "rollouts_in.h"
#include "score.h"

static char g_path[600];

static const char *const k_keys[] = {
    "prompt_ids", "response_ids", "logprobs", "temperature", "top_p", "top_k", "logprobs_kind", "choices",
    "outputs", "prompt_token_ids", "token_ids", "token_logprobs", "tokens", "content", "token", "logprob",
    "meta_info", "output_token_logprobs", "input_token_logprobs", "input_ids", "output_ids", "prompt_tokens",
    "index", "text", "trainer_logprobs", NULL};
static const char *const k_strings[] = {"raw", "processed", "token_id:3", "token_id:4096", "token_id:", "token_id:-1",
                                        "3", "NaN", "", NULL};
static const fz_json_dict k_dict = {k_keys, k_strings};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(g_path, sizeof g_path, "%s/r.jsonl", fz_scratch_dir("rollouts"));
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    return fz_json_mutate(data, size, max_size, seed, &k_dict);
}

static void check(rc_rollout_format f)
{
    rc_rollout_set s;
    rc_status st = rc_rollouts_load(g_path, f, 4096, 256, NULL, NULL, &s);
    fz_check_msg(st, g_path);
    if (st != RC_OK) {
        if (s.n || s.tok || s.lp || s.tok_off)
            abort();
        return;
    }
    if (s.n < 1 || s.tok_off[0] != 0 || s.lp_off[0] != 0)
        abort();
    int64_t pm = 0, rm = 0;
    for (int64_t i = 0; i < s.n; i++) {
        const int64_t p = s.plen[i], r = s.rlen[i];
        if (p < 1 || r < 0 || p + r > 256 || s.tok_off[i + 1] != s.tok_off[i] + p + r ||
            s.lp_off[i + 1] != s.lp_off[i] + r)
            abort();
        pm = p > pm ? p : pm;
        rm = r > rm ? r : rm;
        for (int64_t k = s.tok_off[i]; k < s.tok_off[i + 1]; k++)
            if (s.tok[k] < 0 || s.tok[k] >= 4096)
                abort();
        for (int64_t k = s.lp_off[i]; k < s.lp_off[i + 1]; k++)
            if (!isfinite(s.lp[k]) || s.lp[k] > RC_LOGPROB_POS_TOL ||
                (s.has_trainer && (!isfinite(s.tlp[k]) || s.tlp[k] > RC_LOGPROB_POS_TOL)))
                abort();
    }
    if (pm != s.prompt_max || rm != s.resp_max || s.has_trainer != (s.tlp != NULL))
        abort();
    /* the same file in chunks of 3 rollouts: the same rollouts, in order */
    rc_rollout_reader *R = NULL;
    if (rc_rollouts_open(g_path, f, 4096, 256, NULL, NULL, &R) != RC_OK)
        abort();
    int64_t done = 0;
    for (;;) {
        const rc_rollout_set *c;
        if (rc_rollouts_next(R, 3, 0, &c) != RC_OK || c->first != done)
            abort();
        if (c->n == 0)
            break;
        for (int64_t i = 0; i < c->n; i++) {
            const int64_t g = done + i;
            if (g >= s.n || c->plen[i] != s.plen[g] || c->rlen[i] != s.rlen[g] || c->line[i] != s.line[g] ||
                memcmp(c->tok + c->tok_off[i], s.tok + s.tok_off[g], (size_t)(c->plen[i] + c->rlen[i]) * 4) ||
                memcmp(c->lp + c->lp_off[i], s.lp + s.lp_off[g], (size_t)c->rlen[i] * 4) ||
                c->has_trainer != s.has_trainer ||
                (s.has_trainer && memcmp(c->tlp + c->lp_off[i], s.tlp + s.lp_off[g], (size_t)c->rlen[i] * 4)))
                abort();
        }
        done += c->n;
    }
    if (done != s.n)
        abort();
    rc_rollouts_close(R);
    rc_score_inputs in;
    st = rc_score_inputs_build(&s, g_path, &in);
    fz_check_msg(st, g_path);
    if (st == RC_OK) {
        for (int64_t i = 0; i < in.n; i++) {
            for (int64_t t = 0; t < in.prompt_max; t++)
                if ((t < in.prompt_len[i]) != (in.prompt_tokens[i * in.prompt_max + t] >= 0))
                    abort();
            for (int64_t t = 0; t < in.resp_max; t++)
                if ((t < in.valid[i]) != (in.tokens[i * in.resp_max + t] >= 0) ||
                    (t < in.valid[i]) != !isnan(in.logprobs[i * in.resp_max + t]) ||
                    (in.trainer_logprobs && (t < in.valid[i]) != !isnan(in.trainer_logprobs[i * in.resp_max + t])))
                    abort();
        }
        if ((in.trainer_logprobs != NULL) != s.has_trainer)
            abort();
        if (in.trainer_logprobs) { /* both sides logged: every statistic, no model */
            const int64_t lens[2] = {in.resp_max > 1 ? in.resp_max / 2 : 1, in.resp_max};
            const int nl = lens[0] < lens[1] ? 2 : 1;
            const rc_stat_params sp = {0};
            rc_results r;
            rc_status s2 = rc_score_logged_results(&in, nl, nl == 2 ? lens : lens + 1, &sp, &r);
            if (s2 == RC_OK)
                s2 = rc_compute_stats(&r);
            if (s2 != RC_OK && s2 != RC_ERR_NOMEM)
                abort();
            if (s2 == RC_OK && r.lens[r.n_lens - 1].st.count != s.lp_off[s.n])
                abort();
            rc_results_free(&r);
        }
        rc_score_inputs_free(&in);
    }
    rc_rollouts_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(g_path, data, size);
    check(RC_RFMT_AUTO);
    check(RC_RFMT_JSONL);
    check(RC_RFMT_VLLM);
    check(RC_RFMT_SGLANG);
    return 0;
}
