/* Chat-formatted prompts ({"messages": [...]} lines, src/formats/chat.c and
 * the Jinja subset interpreter src/formats/jinja_*.c) against transformers'
 * apply_chat_template (data/fixtures/chat, made by
 * tools/fixtures/make_chat_fixtures.py):
 *   vs_hf      every template the fixtures mark "render" (the published ones
 *              of Qwen2, Qwen2.5, Qwen3, QwQ, Llama-3, 3.1, 3.2, 3.3, Gemma 2,
 *              Phi-3.5, Mistral, Mistral-Nemo, Mistral-Small-3.2, SmolLM3,
 *              Granite 3.3, DeepSeek-R1-Distill-Qwen, and variants written
 *              differently) renders every conversation with transformers'
 *              text and ids, or refuses it as transformers does when the
 *              template raises; the reasoning conversations and the
 *              enable_thinking runs too; the same through rc_prompts_load on
 *              a .jsonl file;
 *   constructs each small template of jinja_refs.json renders as jinja2 does
 *              (or fails where it fails, or is refused where ratiocheck
 *              refuses it by design);
 *   refused    every template marked "refuse" (macros, filters outside the
 *              subset) is refused with the one-line message naming the
 *              construct and the file, also through rc_prompts_load;
 *   malformed  each malformed messages line gives its FILE:LINE error and
 *              status; no template, no tokenizer, the context limit;
 *   files      how the folder's files are read: the template in a list,
 *              chat_template.jinja over tokenizer_config.json, bos_token as an
 *              object, missing / conflicting / non-special bos_token,
 *              malformed files (plain prompts still load);
 *   hostile    hostile templates are refused or fail in rendering with one
 *              line, without a crash, in bounded time and memory; mutations of
 *              the fixture templates never crash.
 * The real SmolLM2 folder is compared by the real-model suite (chat_refs.h). */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "chat.h"
#include "jinja.h"
#include "prompts.h"
#include "tokenizer.h"

#include "chat_refs.h"
#include "testutil.h"

static char g_dir[256];

static void setup(void) { rc_test_fresh_dir(g_dir, sizeof g_dir, "/tmp"); }
static void teardown(void) { rc_test_rm_rf(g_dir); }

static json_t *g_refs;

static const json_t *refs(void)
{
    if (!g_refs) {
        char why[4200];
        g_refs = rc_test_chat_refs_load(why, sizeof why);
        ck_assert_msg(g_refs != NULL, "%s", why);
    }
    return g_refs;
}

static void write_file(const char *path, const char *body, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "%s", path);
    ck_assert_uint_eq(fwrite(body, 1, n, f), n);
    fclose(f);
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    b[sz] = '\0';
    *n = (size_t)sz;
    return b;
}

/* a folder sub of g_dir with the tokenizer.json of data/fixtures/chat/<from>
 * and, when tmpl is not NULL, the template in tokenizer_config.json (or in
 * chat_template.jinja when jinja), bos_token bos (NULL: none); returns the
 * tokenizer.json path in buf */
static char *make_folder2(char *buf, size_t n, const char *sub, const char *from, const char *tmpl, bool jinja,
                          const char *bos, const char *eos)
{
    char p[4096], d[1024];
    rc_test_chat_fmt(d, sizeof d, "%s/%s", g_dir, sub);
    mkdir(d, 0700);
    rc_test_source_path(p, sizeof p, "data/fixtures/chat/%s/tokenizer.json", from);
    size_t len;
    char *tj = read_all(p, &len);
    rc_test_chat_fmt(buf, n, "%s/tokenizer.json", d);
    write_file(buf, tj, len);
    free(tj);
    json_t *cfg = json_object();
    if (bos)
        json_object_set_new(cfg, "bos_token", json_string(bos));
    if (eos)
        json_object_set_new(cfg, "eos_token", json_string(eos));
    if (tmpl && !jinja)
        json_object_set_new(cfg, "chat_template", json_string(tmpl));
    rc_test_chat_fmt(p, sizeof p, "%s/tokenizer_config.json", d);
    ck_assert_int_eq(json_dump_file(cfg, p, JSON_INDENT(1)), 0);
    json_decref(cfg);
    if (tmpl && jinja) {
        rc_test_chat_fmt(p, sizeof p, "%s/chat_template.jinja", d);
        write_file(p, tmpl, strlen(tmpl));
    }
    return buf;
}

static char *make_folder(char *buf, size_t n, const char *sub, const char *from, const char *tmpl, bool jinja,
                         const char *bos)
{
    return make_folder2(buf, n, sub, from, tmpl, jinja, bos, NULL);
}

/* the tokenizer a fixture template entry is rendered with: its folder, or a
 * temporary folder with its template (variants) */
static rc_tokenizer *entry_tokenizer(const json_t *t)
{
    char p[4096];
    const char *folder = json_string_value(json_object_get(t, "folder"));
    const char *from = json_string_value(json_object_get(t, "tokenizer_from"));
    if (from) {
        const json_t *bos = json_object_get(t, "bos_token"), *eos = json_object_get(t, "eos_token");
        make_folder2(p, sizeof p, json_string_value(json_object_get(t, "name")), from,
                     json_string_value(json_object_get(t, "template")),
                     strcmp(json_string_value(json_object_get(t, "template_file")), "chat_template.jinja") == 0,
                     json_is_string(bos) ? json_string_value(bos) : NULL, json_is_string(eos) ? json_string_value(eos) : NULL);
    } else {
        ck_assert_msg(folder && !strncmp(folder, "data/fixtures/chat/", 19), "%s", folder ? folder : "?");
        rc_test_source_path(p, sizeof p, "%s/tokenizer.json", folder);
    }
    rc_tokenizer *tok;
    ck_assert_msg(rc_tokenizer_load(p, 0, &tok) == RC_OK, "%s", rc_last_error());
    return tok;
}

static bool is_real(const json_t *t) { return json_object_get(t, "real_model") != NULL; }

/* ---- vs_hf ------------------------------------------------------------------ */

/* the results of a list against conversations (the same order); the count equal */
static int compare_list(const rc_chat *c, const rc_tokenizer *tok, const char *name, const json_t *convs,
                        const json_t *results, const json_t *kwargs, int *total)
{
    int same = 0;
    size_t k;
    const json_t *res;
    json_array_foreach(results, k, res)
    {
        const char *cname = json_string_value(json_object_get(res, "conversation"));
        const json_t *msgs = NULL, *cv;
        size_t j;
        json_array_foreach(convs, j, cv)
        {
            if (!strcmp(json_string_value(json_object_get(cv, "name")), cname))
                msgs = json_object_get(cv, "messages");
        }
        ck_assert_msg(msgs != NULL, "%s: no conversation %s", name, cname);
        char what[1200];
        (*total)++;
        if (rc_test_chat_one(c, tok, msgs, kwargs, res, what, sizeof what))
            same++;
        else
            printf("chat %s: %s%s differs from transformers: %s\n", name, cname, kwargs ? " (kwargs)" : "", what);
    }
    return same;
}

START_TEST(test_render_vs_hf)
{
    size_t i;
    const json_t *t;
    int templates = 0, raised = 0, thinking = 0;
    struct tm tm;
    rc_test_chat_time(refs(), &tm);
    json_array_foreach(json_object_get(refs(), "templates"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (strcmp(json_string_value(json_object_get(t, "expect")), "render") != 0 || is_real(t))
            continue;
        rc_tokenizer *tok = entry_tokenizer(t);
        /* every conversation, text and ids (or the same refusal) */
        int same, total;
        char why[4200];
        ck_assert_msg(rc_test_chat_refs(tok, name, &same, &total, why, sizeof why) == 0, "%s: %s", name, why);
        ck_assert_int_eq(total, (int)json_array_size(json_object_get(refs(), "conversations")));
        ck_assert_int_eq(same, total);
        size_t k;
        const json_t *res;
        json_array_foreach(json_object_get(t, "results"), k, res) raised += json_object_get(res, "raised") != NULL;
        /* the reasoning conversations, and the keyword-argument runs (enable_thinking; gpt-oss: builtin_tools ...) */
        rc_chat *c;
        ck_assert_msg(rc_chat_load(tok, &c) == RC_OK, "%s: %s", name, rc_last_error());
        rc_chat_set_time(c, &tm);
        int rt = 0, rs = compare_list(c, tok, name, json_object_get(refs(), "reasoning_conversations"),
                                      json_object_get(t, "reasoning_results"), NULL, &rt);
        ck_assert_int_eq(rt, (int)json_array_size(json_object_get(refs(), "reasoning_conversations")));
        ck_assert_int_eq(rs, rt);
        const json_t *kv;
        int kt = 0, ks = 0;
        json_array_foreach(json_object_get(t, "kwargs_results"), k, kv)
        {
            json_t *all = json_array();
            json_array_extend(all, json_object_get(refs(), "conversations"));
            json_array_extend(all, json_object_get(refs(), "reasoning_conversations"));
            ks += compare_list(c, tok, name, all, json_object_get(kv, "results"), json_object_get(kv, "kwargs"), &kt);
            json_decref(all);
            thinking++;
        }
        ck_assert_int_eq(ks, kt);
        rc_chat_free(c);
        printf("chat %s (%s): %d/%d conversations, %d/%d reasoning ones, %d/%d keyword-argument runs give "
               "transformers' text and ids (or its refusal)\n",
               name, json_string_value(json_object_get(t, "template_file")), same, total, rs, rt, ks, kt);
        rc_tokenizer_free(tok);
        templates++;
    }
    printf("chat: %d templates, %d refusals by raise_exception, %d keyword-argument runs compared\n", templates, raised,
           thinking);
    ck_assert_int_ge(templates, 25);
    ck_assert_int_gt(raised, 0);
    ck_assert_int_ge(thinking, 4);
}
END_TEST

/* ---- constructs ------------------------------------------------------------------ */

START_TEST(test_constructs)
{
    char p[4096], why[4200];
    rc_test_source_path(p, sizeof p, "data/fixtures/chat/jinja_refs.json");
    json_error_t err;
    json_t *jr = json_load_file(p, JSON_REJECT_DUPLICATES, &err);
    ck_assert_msg(jr != NULL, "%s: %s", p, err.text);
    struct tm tm;
    rc_test_chat_time(jr, &tm);
    const json_t *vars = json_object_get(jr, "vars"), *cs;
    size_t i;
    int same = 0, refused = 0, failed = 0;
    json_array_foreach(json_object_get(jr, "cases"), i, cs)
    {
        const char *tmpl = json_string_value(json_object_get(cs, "template"));
        const json_t *want = json_object_get(cs, "text");
        bool c_refuses = json_is_true(json_object_get(cs, "c_refuses"));
        rc_jinja *t = NULL;
        char *text = NULL;
        size_t len = 0;
        rc_status st = rc_jinja_parse(tmpl, strlen(tmpl), "case.jinja", &t);
        if (st == RC_OK) {
            rc_jinja_set_time(t, &tm);
            st = rc_jinja_render(t, vars, &text, &len);
        }
        if (st != RC_OK) {
            snprintf(why, sizeof why, "%s", rc_last_error());
            ck_assert_msg(!strchr(why, '\n') && strstr(why, "case.jinja"), "%s", why);
        }
        if (c_refuses || !want) {
            ck_assert_msg(st != RC_OK, "case %zu (%s) renders '%s'; expected a failure", i, tmpl, text ? text : "");
            ck_assert_int_ne(st, RC_ERR_INTERNAL);
            if (c_refuses && want)
                refused++;
            else
                failed++;
        } else {
            ck_assert_msg(st == RC_OK, "case %zu (%s): %s", i, tmpl, why);
            ck_assert_msg(len == json_string_length(want) && !memcmp(text, json_string_value(want), len),
                          "case %zu (%s):\n  ratiocheck  '%s'\n  transformers '%s'", i, tmpl, text,
                          json_string_value(want));
            same++;
        }
        free(text);
        rc_jinja_free(t);
    }
    printf("jinja: %d constructs render as jinja2 does, %d fail as they do in jinja2, %d refused by design\n", same,
           failed, refused);
    ck_assert_int_ge(same, 70);
    json_decref(jr);
}
END_TEST

/* the messages of the named conversation (conversations, then reasoning_conversations) */
static const json_t *conversation_named(const char *name)
{
    const char *const lists[] = {"conversations", "reasoning_conversations"};
    for (int l = 0; l < 2; l++) {
        const json_t *list = json_object_get(refs(), lists[l]);
        for (size_t i = 0; i < json_array_size(list); i++) {
            const json_t *c = json_array_get(list, i);
            if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
                return json_object_get(c, "messages");
        }
    }
    return NULL;
}

/* chat-template arguments through rc_prompts_load: Qwen3's enable_thinking runs (transformers'
 * apply_chat_template(..., enable_thinking=...) ids) from each line's "chat_template_kwargs",
 * from --chat-template-kwargs (lim.chat_kwargs), and a line's own value winning over it; refusals */
START_TEST(test_prompts_load_kwargs)
{
    const json_t *t = rc_test_chat_template(refs(), "qwen3");
    ck_assert_ptr_nonnull(t);
    rc_tokenizer *tok = entry_tokenizer(t);
    char path[4200];
    snprintf(path, sizeof path, "%s/kw.jsonl", g_dir);
    size_t k;
    const json_t *kv;
    int runs = 0;
    json_array_foreach(json_object_get(t, "kwargs_results"), k, kv)
    {
        const json_t *kwargs = json_object_get(kv, "kwargs"), *res = json_object_get(kv, "results");
        const bool think = json_is_true(json_object_get(kwargs, "enable_thinking"));
        /* mode 0: each line's kwargs; 1: the option's; 2: the option says the opposite, each line wins */
        for (int mode = 0; mode < 3; mode++) {
            FILE *f = fopen(path, "w");
            size_t i;
            const json_t *r;
            json_array_foreach(res, i, r)
            {
                json_t *o = json_pack("{s:O}", "messages",
                                      (json_t *)conversation_named(json_string_value(json_object_get(r, "conversation"))));
                if (mode != 1)
                    json_object_set(o, "chat_template_kwargs", (json_t *)kwargs);
                char *line = json_dumps(o, JSON_COMPACT);
                fprintf(f, "%s\n", line);
                free(line);
                json_decref(o);
            }
            fclose(f);
            rc_prompts pr;
            const rc_prompt_limits lim = {0, 4096, 8,
                                          mode == 0   ? NULL
                                          : mode == 1 ? (think ? "{\"enable_thinking\": true}"
                                                               : "{\"enable_thinking\": false}")
                                                      : (think ? "{\"enable_thinking\": false, \"x\": 1}"
                                                               : "{\"enable_thinking\": true, \"x\": 1}")};
            ck_assert_msg(rc_prompts_load(path, tok, &lim, &pr) == RC_OK, "%s", rc_last_error());
            ck_assert_int_eq(pr.n, (int64_t)json_array_size(res));
            json_array_foreach(res, i, r)
            {
                const json_t *want = json_object_get(r, "ids");
                ck_assert_int_eq(pr.len[i], (int64_t)json_array_size(want));
                for (int64_t j = 0; j < pr.len[i]; j++)
                    ck_assert_int_eq(pr.tokens[(int64_t)i * pr.max_len + j],
                                     json_integer_value(json_array_get(want, (size_t)j)));
                ck_assert_str_eq(pr.text[i], json_string_value(json_object_get(r, "text")));
            }
            rc_prompts_free(&pr);
            runs++;
        }
    }
    ck_assert_int_eq(runs, 6);
    /* refusals: exit 4 naming the line for a file's record, usage for the option */
    static const struct {
        const char *line, *opt, *msg;
        rc_status st;
    } bad[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": [1]}", NULL,
         "kw.jsonl:1: \"chat_template_kwargs\" must be an object", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": {\"tools\": []}}",
         NULL, "\"tools\" is set by ratiocheck", RC_ERR_FORMAT},
        {"{\"prompt\": \"hi\", \"chat_template_kwargs\": {\"enable_thinking\": false}}", NULL,
         "kw.jsonl:1: \"chat_template_kwargs\" applies to a {\"messages\": [...]} record only", RC_ERR_FORMAT},
        {"{\"prompt\": \"hi\"}", "[true]", "--chat-template-kwargs: expected a JSON object", RC_ERR_USAGE},
        {"{\"prompt\": \"hi\"}", "{\"enable_thinking\": fals}", "--chat-template-kwargs: expected a JSON object",
         RC_ERR_USAGE},
        {"{\"prompt\": \"hi\"}", "{\"add_generation_prompt\": false}", "\"add_generation_prompt\" is set by ratiocheck",
         RC_ERR_USAGE},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        FILE *f = fopen(path, "w");
        fprintf(f, "%s\n", bad[b].line);
        fclose(f);
        rc_prompts pr;
        const rc_prompt_limits lim = {0, 4096, 8, bad[b].opt};
        ck_assert_int_eq(rc_prompts_load(path, tok, &lim, &pr), bad[b].st);
        ck_assert_msg(strstr(rc_last_error(), bad[b].msg), "%zu: %s", b, rc_last_error());
    }
    printf("chat qwen3: %d enable_thinking runs through rc_prompts_load (line, option, line over option) give "
           "transformers' ids\n", runs);
    rc_tokenizer_free(tok);
}
END_TEST

/* one line per conversation of the file (messages), plus a prompt and a
 * tokens line, through rc_prompts_load: ids, texts and lines */
START_TEST(test_prompts_load_messages)
{
    static const char *const names[] = {"qwen2_5", "llama3"};
    for (size_t w = 0; w < 2; w++) {
        const json_t *t = rc_test_chat_template(refs(), names[w]);
        ck_assert_ptr_nonnull(t);
        rc_tokenizer *tok = entry_tokenizer(t);
        const json_t *convs = json_object_get(refs(), "conversations"), *res = json_object_get(t, "results");
        size_t nc = json_array_size(convs);
        /* line 1: a prompt; 2: blank; then the conversations; last: token ids */
        char path[4200];
        snprintf(path, sizeof path, "%s/chat.jsonl", g_dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"prompt\": \"plain text\"}\n\n");
        for (size_t k = 0; k < nc; k++) {
            json_t *o = json_pack("{s:O}", "messages", json_object_get(json_array_get(convs, k), "messages"));
            char *line = json_dumps(o, JSON_COMPACT | (k % 2 ? JSON_ENSURE_ASCII : 0));
            fprintf(f, "%s\n", line);
            free(line);
            json_decref(o);
        }
        fprintf(f, "{\"tokens\": [5, 6, 7]}\n");
        fclose(f);
        rc_prompts pr;
        const rc_prompt_limits lim = {0, 4096, 8, NULL};
        ck_assert_msg(rc_prompts_load(path, tok, &lim, &pr) == RC_OK, "%s", rc_last_error());
        ck_assert_int_eq(pr.n, (int64_t)nc + 2);
        int32_t *ids;
        int64_t n;
        ck_assert(rc_tokenizer_encode(tok, "plain text", 10, true, &ids, &n) == RC_OK);
        ck_assert_int_eq(pr.len[0], n);
        free(ids);
        for (size_t k = 0; k < nc; k++) {
            const json_t *r = json_array_get(res, k), *want = json_object_get(r, "ids");
            int64_t row = (int64_t)k + 1;
            ck_assert_int_eq(pr.line[row], (int64_t)k + 3);
            ck_assert_int_eq(pr.len[row], (int64_t)json_array_size(want));
            for (int64_t j = 0; j < pr.len[row]; j++)
                ck_assert_int_eq(pr.tokens[row * pr.max_len + j], json_integer_value(json_array_get(want, (size_t)j)));
            ck_assert_str_eq(pr.text[row], json_string_value(json_object_get(r, "text")));
        }
        ck_assert_ptr_null(pr.text[nc + 1]);
        ck_assert_int_eq(pr.len[nc + 1], 3);
        printf("chat %s: %zu conversations through rc_prompts_load give transformers' ids\n", names[w], nc);
        rc_prompts_free(&pr);
        rc_tokenizer_free(tok);
    }
}
END_TEST

/* ---- refused ------------------------------------------------------------------ */

START_TEST(test_refused)
{
    size_t i;
    const json_t *t;
    int refused = 0;
    json_array_foreach(json_object_get(refs(), "templates"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (strcmp(json_string_value(json_object_get(t, "expect")), "refuse") != 0)
            continue;
        const char *construct = json_string_value(json_object_get(t, "construct"));
        const char *tfile = json_string_value(json_object_get(t, "template_file"));
        ck_assert_ptr_nonnull(construct);
        /* transformers runs it */
        ck_assert_int_gt(json_integer_value(json_object_get(t, "rendered_by_transformers")), 0);
        rc_tokenizer *tok = entry_tokenizer(t);
        rc_chat *c = NULL;
        ck_assert_int_eq(rc_chat_load(tok, &c), RC_ERR_UNSUPPORTED);
        ck_assert_ptr_null(c);
        const char *e = rc_last_error();
        ck_assert_msg(!strncmp(e, "chat template: ", 15) && strstr(e, construct) && strstr(e, tfile) &&
                          strstr(e, " (line ") && !strchr(e, '\n') &&
                          strstr(e, "; give {\"tokens\": [...]} or {\"prompt\": \"...\"} instead"),
                      "%s: %s", name, e);
        printf("chat %s: %s\n", name, e);
        /* through the prompt loader: FILE:LINE first, at the first messages line */
        char path[4200];
        snprintf(path, sizeof path, "%s/r.jsonl", g_dir);
        const char *body = "{\"prompt\": \"a\"}\n{\"tokens\": [1]}\n"
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
        write_file(path, body, strlen(body));
        rc_prompts pr;
        ck_assert_int_eq(rc_prompts_load(path, tok, NULL, &pr), RC_ERR_UNSUPPORTED);
        char head[4300];
        snprintf(head, sizeof head, "%s:3: chat template: %s", path, construct);
        ck_assert_msg(strncmp(rc_last_error(), head, strlen(head)) == 0 && !strchr(rc_last_error(), '\n'), "%s",
                      rc_last_error());
        rc_tokenizer_free(tok);
        refused++;
    }
    ck_assert_int_ge(refused, 4); /* gemma4, deepseek_v3_2, seed_oss, ministral3 */
}
END_TEST

/* ---- malformed ------------------------------------------------------------------ */

START_TEST(test_malformed_messages)
{
    char tp[4096];
    rc_test_source_path(tp, sizeof tp, "data/fixtures/chat/qwen2/tokenizer.json");
    rc_tokenizer *tok;
    ck_assert_msg(rc_tokenizer_load(tp, 0, &tok) == RC_OK, "%s", rc_last_error());
    static const struct {
        const char *line, *phrase;
        rc_status st;
    } bad[] = {
        {"{\"messages\": {\"role\": \"user\"}}", "p.jsonl:2: \"messages\" is not an array", RC_ERR_FORMAT},
        {"{\"messages\": \"hi\"}", "p.jsonl:2: \"messages\" is not an array", RC_ERR_FORMAT},
        {"{\"messages\": []}", "p.jsonl:2: \"messages\" is empty", RC_ERR_FORMAT},
        {"{\"messages\": [1]}", "p.jsonl:2: messages[0] is not an object", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"content\": \"x\"}]}",
         "p.jsonl:2: messages[1] has no \"role\"", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": 3, \"content\": \"x\"}]}", "p.jsonl:2: messages[0].role is not a string",
         RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}",
         "p.jsonl:2: messages[0].role \"tool\" is not system, user or assistant", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"User\", \"content\": \"x\"}]}", "messages[0].role \"User\" is not",
         RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\\u0000\", \"content\": \"x\"}]}", "p.jsonl: line 2: invalid JSON",
         RC_ERR_FORMAT}, /* jansson refuses \u0000 (rc_chat_check_messages checks too: below) */
        {"{\"messages\": [{\"role\": \"user\"}]}", "p.jsonl:2: messages[0] has no \"content\"", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": null}]}", "p.jsonl:2: messages[0].content is not a string",
         RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"}]}]}",
         "p.jsonl:2: messages[0].content is not a string", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}", "p.jsonl: line 2: invalid JSON",
         RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": []}]}",
         "p.jsonl:2: messages[0] has \"tool_calls\": a message has only \"role\" and \"content\"", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"prompt\": \"y\"}",
         "p.jsonl:2: give one of \"messages\", \"prompt\" or \"tokens\"", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tokens\": [1]}",
         "p.jsonl:2: give one of \"messages\", \"prompt\" or \"tokens\"", RC_ERR_FORMAT},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"role\": \"user\"}]}", "p.jsonl", RC_ERR_FORMAT},
        {"{\"message\": [{\"role\": \"user\", \"content\": \"x\"}]}",
         "p.jsonl:2: expected {\"prompt\": \"...\"}, {\"tokens\": [...]} or {\"messages\": [...]}", RC_ERR_FORMAT},
    };
    char path[4200];
    snprintf(path, sizeof path, "%s/p.jsonl", g_dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[600];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"fine\"}]}\n%s\n", bad[i].line);
        write_file(path, body, strlen(body));
        rc_prompts pr;
        ck_assert_int_eq(rc_prompts_load(path, tok, NULL, &pr), bad[i].st);
        ck_assert_msg(strstr(rc_last_error(), bad[i].phrase), "'%s' lacks '%s'", rc_last_error(), bad[i].phrase);
        for (const char *c = rc_last_error(); *c; c++)
            ck_assert_int_ge((unsigned char)*c, 0x20);
        ck_assert_ptr_null(pr.tokens);
    }
    /* NUL in a role or content built by a caller (the loader's JSON cannot carry one) */
    json_t *m = json_pack("[{s:s,s:s#}]", "role", "user", "content", "a\0b", (size_t)3);
    ck_assert_int_eq(rc_chat_check_messages(m), RC_ERR_FORMAT);
    ck_assert_str_eq(rc_last_error(), "messages[0].content contains a NUL character");
    json_decref(m);
    m = json_pack("[{s:s#,s:s}]", "role", "user\0", (size_t)5, "content", "x");
    ck_assert_int_eq(rc_chat_check_messages(m), RC_ERR_FORMAT);
    ck_assert_str_eq(rc_last_error(), "messages[0].role \"user...\" is not system, user or assistant");
    json_decref(m);
    /* the context limit and --num-prompts apply as to any prompt */
    const char *two = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n"
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"a long question about many things, and then "
                      "some more things, and yet more things\"}]}\n";
    write_file(path, two, strlen(two));
    rc_prompts pr;
    const rc_prompt_limits small = {0, 50, 8, NULL}; /* line 1: 33 tokens */
    ck_assert_int_eq(rc_prompts_load(path, tok, &small, &pr), RC_ERR_USAGE);
    ck_assert_msg(strstr(rc_last_error(), "p.jsonl:2: prompt of ") &&
                      strstr(rc_last_error(), "plus 8 generated tokens exceeds the model's 50 positions"),
                  "%s", rc_last_error());
    const rc_prompt_limits first = {1, 50, 8, NULL};
    ck_assert_msg(rc_prompts_load(path, tok, &first, &pr) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(pr.n, 1);
    rc_prompts_free(&pr);
    /* no tokenizer: a usage error, as for text prompts */
    ck_assert_int_eq(rc_prompts_load(path, NULL, NULL, &pr), RC_ERR_USAGE);
    ck_assert_msg(strstr(rc_last_error(), "p.jsonl:1: chat prompts need the model's tokenizer.json"), "%s",
                  rc_last_error());
    rc_tokenizer_free(tok);
    /* a folder without a chat template: the bundled model */
    rc_test_source_path(tp, sizeof tp, "data/models/pythia-rc-tiny/tokenizer.json");
    ck_assert_msg(rc_tokenizer_load(tp, 0, &tok) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(rc_prompts_load(path, tok, NULL, &pr), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "p.jsonl:1: {\"messages\": [...]} needs the model's chat template, and ") &&
                      strstr(rc_last_error(), "data/models/pythia-rc-tiny has none"),
                  "%s", rc_last_error());
    rc_tokenizer_free(tok);
}
END_TEST

/* ---- files -------------------------------------------------------------------- */

static const char *const k_chatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* load the folder's tokenizer and its chat template; the status */
static rc_status chat_of(const char *tj, rc_chat **c)
{
    rc_tokenizer *tok;
    ck_assert_msg(rc_tokenizer_load(tj, 0, &tok) == RC_OK, "%s", rc_last_error()); /* never fails for chat files */
    rc_status s = rc_chat_load(tok, c);
    rc_tokenizer_free(tok);
    return s;
}

static void put(const char *tj, const char *name, const char *body)
{
    char p[4200];
    snprintf(p, sizeof p, "%.*s/%s", (int)(strrchr(tj, '/') - tj), tj, name);
    write_file(p, body, strlen(body));
}

START_TEST(test_template_files)
{
    char tj[4200], body[8192];
    rc_chat *c;
    const json_t *l3 = rc_test_chat_template(refs(), "llama3");
    const char *l3t = json_string_value(json_object_get(l3, "template"));
    /* a list of named templates: "default" is used */
    make_folder(tj, sizeof tj, "list", "qwen2", NULL, false, NULL);
    json_t *cfg = json_pack("{s:[{s:s,s:s},{s:s,s:s}]}", "chat_template", "name", "tool_use", "template", "x", "name",
                            "default", "template", k_chatml);
    char *txt = json_dumps(cfg, 0);
    put(tj, "tokenizer_config.json", txt);
    free(txt);
    json_decref(cfg);
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
    put(tj, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "tokenizer_config.json: \"chat_template\" is a list without a template named "
                                          "\"default\""),
                  "%s", rc_last_error());
    put(tj, "tokenizer_config.json", "{\"chat_template\": 7}");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_FORMAT);
    ck_assert_msg(strstr(rc_last_error(), "tokenizer_config.json: \"chat_template\" is not a string"), "%s",
                  rc_last_error());
    /* transformers' tokenizer_config.json of a model without a set length: model_max_length = int(1e30), an
     * integer past 64 bits (Python's json writes it; gemma-3-270m's folder has it) */
    snprintf(body, sizeof body, "{\"model_max_length\": 1000000000000000019884624838656, \"chat_template\": \"%s\"}",
             "{% for m in messages %}{{ m['content'] }}{% endfor %}");
    put(tj, "tokenizer_config.json", body);
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
    /* a malformed tokenizer_config.json: the tokenizer loads, plain prompts work, chat prompts name the file */
    put(tj, "tokenizer_config.json", "{\"chat_template\": ");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_FORMAT);
    ck_assert_msg(strstr(rc_last_error(), "tokenizer_config.json"), "%s", rc_last_error());
    /* no tokenizer_config.json at all, no template */
    snprintf(body, sizeof body, "%.*s/tokenizer_config.json", (int)(strrchr(tj, '/') - tj), tj);
    unlink(body);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "needs the model's chat template, and ") && strstr(rc_last_error(), "/list has none"),
                  "%s", rc_last_error());
    /* chat_template.jinja replaces the config's template */
    static const char k_refused[] = "{% filter upper %}x{% endfilter %}";
    make_folder(tj, sizeof tj, "jinja", "qwen2", k_refused, false, NULL);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "chat template: unsupported Jinja construct 'filter' in ") &&
                      strstr(rc_last_error(), "jinja/tokenizer_config.json (line 1)"),
                  "%s", rc_last_error());
    put(tj, "chat_template.jinja", k_chatml);
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
    put(tj, "chat_template.jinja", "\n{% for m in messages %}\n{% include 'x' %}{% endfor %}\n");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "unsupported Jinja construct 'include' in ") &&
                      strstr(rc_last_error(), "jinja/chat_template.jinja (line 3)"),
                  "%s", rc_last_error());
    put(tj, "chat_template.jinja", "{{ '\xff' }}");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_FORMAT);
    ck_assert_msg(strstr(rc_last_error(), "chat_template.jinja is not UTF-8"), "%s", rc_last_error());
    snprintf(body, sizeof body, "%s\r\n", k_chatml); /* a carriage return: refused, not normalised */
    put(tj, "chat_template.jinja", body);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "has a control character"), "%s", rc_last_error());
    /* named templates without chat_template.jinja: transformers would not use the config's */
    make_folder(tj, sizeof tj, "named", "qwen2", k_chatml, false, NULL);
    snprintf(body, sizeof body, "%.*s/additional_chat_templates", (int)(strrchr(tj, '/') - tj), tj);
    mkdir(body, 0700);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "additional_chat_templates: named chat templates"), "%s", rc_last_error());
    /* Llama-3: bos_token as a string, as {"content": ...}; missing; not special; special_tokens_map.json */
    make_folder(tj, sizeof tj, "l3", "llama3", l3t, false, "<|begin_of_text|>");
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
    cfg = json_pack("{s:s,s:{s:s,s:b}}", "chat_template", l3t, "bos_token", "content", "<|begin_of_text|>", "special", 1);
    txt = json_dumps(cfg, 0);
    put(tj, "tokenizer_config.json", txt);
    free(txt);
    json_decref(cfg);
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
    put(tj, "special_tokens_map.json", "{\"bos_token\": \"<|begin_of_text|>\"}");
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
    put(tj, "special_tokens_map.json", "{\"bos_token\": \"<s>\"}");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "special_tokens_map.json names another"), "%s", rc_last_error());
    make_folder(tj, sizeof tj, "l3nobos", "llama3", l3t, false, NULL);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "writes bos_token, which tokenizer_config.json does not set"), "%s",
                  rc_last_error());
    make_folder(tj, sizeof tj, "l3text", "llama3", l3t, false, "<s>");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "writes bos_token \"<s>\", which is not a special token of tokenizer.json"),
                  "%s", rc_last_error());
    cfg = json_pack("{s:s,s:i}", "chat_template", l3t, "bos_token", 1);
    txt = json_dumps(cfg, 0);
    put(tj, "tokenizer_config.json", txt);
    free(txt);
    json_decref(cfg);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_FORMAT);
    ck_assert_msg(strstr(rc_last_error(), "\"bos_token\" / \"eos_token\" is not a string"), "%s", rc_last_error());
    /* eos_token the same way (Mistral's template writes it) */
    const char *mt = json_string_value(json_object_get(rc_test_chat_template(refs(), "mistral"), "template"));
    make_folder2(tj, sizeof tj, "mnoeos", "mistral", mt, false, "<s>", NULL);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "writes eos_token, which tokenizer_config.json does not set"), "%s",
                  rc_last_error());
    make_folder2(tj, sizeof tj, "mtexteos", "mistral", mt, false, "<s>", "<end>");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "writes eos_token \"<end>\", which is not a special token of tokenizer.json"),
                  "%s", rc_last_error());
    /* a special-token variable ratiocheck does not pass */
    make_folder(tj, sizeof tj, "pad", "qwen2", "{{ pad_token }}{% for m in messages %}{{ m.content }}{% endfor %}", false,
                NULL);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "reads pad_token, which ratiocheck does not pass"), "%s", rc_last_error());
    /* a ChatML template does not need bos_token */
    make_folder(tj, sizeof tj, "chatml_text_bos", "qwen2", k_chatml, false, "<not a token>");
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
}
END_TEST

/* ---- hostile -------------------------------------------------------------------- */

static rc_status parse_str(const char *s, size_t n)
{
    rc_chat *c = NULL;
    rc_status st = rc_chat_parse(s, n, "t.jinja", "<s>", "</s>", &c);
    rc_chat_free(c);
    return st;
}

/* parse and render with a small conversation; the status (errors: one line naming t.jinja) */
static rc_status run_str(const char *s, double *secs)
{
    clock_t t0 = clock();
    rc_chat *c = NULL;
    rc_status st = rc_chat_parse(s, strlen(s), "t.jinja", "<s>", "</s>", &c);
    if (st == RC_OK) {
        json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "user", "content", " a ", "role", "assistant",
                                 "content", "b");
        char *text = NULL;
        size_t len;
        st = rc_chat_render(c, msgs, &text, &len);
        free(text);
        json_decref(msgs);
    }
    rc_chat_free(c);
    if (st != RC_OK)
        ck_assert_msg(!strchr(rc_last_error(), '\n') && strstr(rc_last_error(), "t.jinja"), "%s", rc_last_error());
    *secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    return st;
}

START_TEST(test_hostile_templates)
{
    /* one-line refusals at parse time: syntax errors and constructs outside the subset */
    static const char *const bad[] = {
        "{{",
        "{%",
        "{#",
        "{{ 'unterminated }}",
        "{% if x %}",
        "{% endif %}",
        "{% for m in messages %}{% endif %}",
        "{% raw %}{{ x }}{% endraw %}",
        "{% macro m() %}{{ caller() }}{% endmacro %}",
        "{% call m() %}{% endcall %}",
        "{% filter upper %}x{% endfilter %}",
        "{% include 'a' %}",
        "{% import 'a' as b %}",
        "{% extends 'a' %}",
        "{% block b %}{% endblock %}",
        "{% with a = 1 %}{% endwith %}",
        "{% autoescape true %}{% endautoescape %}",
        "{% do x %}",
        "{% for x in y recursive %}{% endfor %}",
        "{{ x|dictsort }}",
        "{{ x is callable_thing }}",
        "{{ lipsum() }}",
        "{{ x.format(1) }}",
        "{{ f(*a) }}",
        "{{ '\\N{EM DASH}' }}",
        "{{ 0x10 }}",
        "{{ 99999999999999999999 }}",
        "{{ caf\xc3\xa9 }}",
        "{{ x ! y }}",
        "{% set (a, b) = 1, 2 %}",
        "{% set true = 1 %}",
        "{{ ((((x)))) ]]",
        "{{ x[1:2:3:4] }}",
        "{% frobnicate %}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc_status st = parse_str(bad[i], strlen(bad[i]));
        ck_assert_msg(st == RC_ERR_UNSUPPORTED, "'%s': %d", bad[i], st);
        ck_assert_msg(!strchr(rc_last_error(), '\n') && strstr(rc_last_error(), "chat template: ") &&
                          strstr(rc_last_error(), " t.jinja (line "),
                      "%s", rc_last_error());
    }
    ck_assert_int_eq(parse_str(bad[8], strlen(bad[8])), RC_ERR_UNSUPPORTED);
    ck_assert_str_eq(rc_last_error(), "chat template: unsupported Jinja construct 'caller' in t.jinja (line 1); give "
                                      "{\"tokens\": [...]} or {\"prompt\": \"...\"} instead");
    ck_assert_int_eq(parse_str(bad[9], strlen(bad[9])), RC_ERR_UNSUPPORTED);
    ck_assert_str_eq(rc_last_error(), "chat template: unsupported Jinja construct 'call' in t.jinja (line 1); give "
                                      "{\"tokens\": [...]} or {\"prompt\": \"...\"} instead");
    /* a macro defined inside a loop or a macro: jinja2's body sees the variables there (jinja2 3.1.6 renders the
     * first '<a><b>', the second '2'), this interpreter's the template's only: refused by name */
    static const char *const closures[][2] = {
        {"{% for m in ['a', 'b'] %}{% macro show() %}<{{ m }}>{% endmacro %}{{ show() }}{% endfor %}",
         "'macro inside a for loop'"},
        {"{% set x = 1 %}{% macro outer(x) %}{% macro inner() %}{{ x }}{% endmacro %}{{ inner() }}{% endmacro %}"
         "{{ outer(2) }}",
         "'macro inside a macro'"},
    };
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(parse_str(closures[i][0], strlen(closures[i][0])), RC_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(rc_last_error(), closures[i][1]), "%s", rc_last_error());
    }
    /* templates that parse and fail in rendering, within the limits: steps, memory, output, range, nesting */
    static const char *const heavy[] = {
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        "{{ 'x' * 9000000000000000000 }}",
        "{{ range(1000000)|list }}",
        "{{ [1, 2.5, 'ab', [[]]] * 2000000 }}", /* 8M values, about 46 MB of text past the output's 16 MiB */
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"
        "{{ ns.l|tojson }}{{ ns.l == ns.l }}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
        "{{ raise_exception('stop\nhere') }}",
        "{{ messages.x.y }}",
        "{{ 'a' < 1 }}",
        "{{ strftime_now('%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c%c') }}",
        "{% for i in none %}{% endfor %}",
        /* macros: endless recursion (nesting), a call tree of 2^40 calls (steps) */
        "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
        "{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(40) }}",
    };
    /* the macro templates (the last two) stop at the limit each is there for */
    static const char *const macro_limit[] = {"macro calls nested more than 64 deep", "takes more than 20000000 steps"};
    const size_t nh = sizeof heavy / sizeof heavy[0];
    for (size_t i = 0; i < nh; i++) {
        double secs;
        rc_status st = run_str(heavy[i], &secs);
        ck_assert_msg(st == RC_ERR_UNSUPPORTED || st == RC_ERR_FORMAT, "'%s': %d", heavy[i], st);
        if (i >= nh - 2)
            ck_assert_msg(st == RC_ERR_UNSUPPORTED && strstr(rc_last_error(), macro_limit[i - (nh - 2)]), "'%s': %s",
                          heavy[i], rc_last_error());
        ck_assert_msg(secs < 20.0, "'%s' took %.1f s", heavy[i], secs);
        printf("chat: hostile template %zu: %s (%.2f s)\n", i, rc_last_error(), secs);
    }
    /* deep nesting, many blocks, long strings, a template over the limit: bounded */
    size_t n = (size_t)1 << 20;
    char *b = malloc(n + 2);
    const char *pieces[] = {"(", "{% if x %}", "not ", "[", "{{ ", "'", "- ", "{% for x in y %}", "{", "x."};
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
        size_t pl = strlen(pieces[k]), w = 0;
        if (k == 0 || k == 2 || k == 3 || k == 6 || k == 8 || k == 9)
            w += (size_t)sprintf(b, "{{ ");
        while (w + pl < n) {
            memcpy(b + w, pieces[k], pl);
            w += pl;
        }
        clock_t t0 = clock();
        rc_status st = parse_str(b, w);
        if (k == 5) /* a megabyte of quotes is text */
            ck_assert_int_eq(st, RC_OK);
        else {
            ck_assert_msg(st == RC_ERR_UNSUPPORTED, "piece %zu: %d", k, st);
            ck_assert_msg(!strchr(rc_last_error(), '\n'), "%s", rc_last_error());
        }
        ck_assert_msg((double)(clock() - t0) / CLOCKS_PER_SEC < 5.0, "piece %zu took too long", k);
    }
    memset(b, 'a', n + 1);
    ck_assert_int_eq(parse_str(b, n + 1), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "is 1048577 bytes, more than the 1048576 ratiocheck reads"), "%s",
                  rc_last_error());
    /* many distinct names; a dict literal with many keys: bounded time */
    size_t w = 0;
    for (size_t k = 0; w + 40 < n; k++)
        w += (size_t)snprintf(b + w, n - w, "{{ name%zu }}", k);
    double secs;
    ck_assert_msg(run_str(b, &secs) == RC_OK, "%s", rc_last_error());
    ck_assert_msg(secs < 10.0, "a megabyte of names took %.1f s", secs);
    w = (size_t)sprintf(b, "{{ {");
    for (size_t k = 0; w + 40 < n; k++)
        w += (size_t)snprintf(b + w, n - w, "'k%zu': %zu, ", k, k);
    memcpy(b + w, "} }}", 5);
    rc_status dst = run_str(b, &secs);
    ck_assert_msg(dst == RC_OK || dst == RC_ERR_UNSUPPORTED, "%d", dst);
    ck_assert_msg(secs < 20.0, "a dict of many keys took %.1f s", secs);
    printf("chat: a dict literal of %zu bytes: %s (%.2f s)\n", w, dst == RC_OK ? "rendered" : rc_last_error(), secs);
    /* a megabyte of text and of tags renders (within the limits) */
    for (size_t k = 0; k + 12 < n; k += 12)
        memcpy(b + k, "{{ 'abc' }}x", 12);
    b[n - n % 12] = '\0';
    ck_assert_msg(run_str(b, &secs) == RC_OK, "%s", rc_last_error());
    free(b);
    /* mutations of every fixture template: never a crash; errors are one line */
    size_t i;
    const json_t *t;
    unsigned seed = 12345;
    int parsed = 0, rendered = 0, tried = 0;
    json_array_foreach(json_object_get(refs(), "templates"), i, t)
    {
        const char *tmpl = json_string_value(json_object_get(t, "template"));
        size_t tl = strlen(tmpl);
        char *m = malloc(tl + 8);
        for (int r = 0; r < 150; r++) {
            memcpy(m, tmpl, tl);
            size_t ml = tl;
            int edits = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 3;
            for (int e = 0; e < edits && ml > 0; e++) {
                seed = seed * 1103515245u + 12345u;
                size_t at = (seed >> 8) % ml;
                unsigned what = (seed >> 24) % 3;
                static const char alpha[] = "{}%#-+ \n'\"()[]|.~a0";
                seed = seed * 1103515245u + 12345u;
                char ch = alpha[(seed >> 16) % (sizeof alpha - 1)];
                if (what == 0) { /* delete */
                    memmove(m + at, m + at + 1, ml - at - 1);
                    ml--;
                } else if (what == 1) { /* replace */
                    m[at] = ch;
                } else { /* insert */
                    memmove(m + at + 1, m + at, ml - at);
                    m[at] = ch;
                    ml++;
                }
            }
            m[ml] = '\0';
            rc_chat *c = NULL;
            rc_status st = rc_chat_parse(m, ml, "t.jinja", "<s>", "</s>", &c);
            if (st == RC_OK) {
                parsed++;
                json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "user", "content", " a ", "role",
                                         "assistant", "content", "b");
                char *text = NULL;
                size_t len;
                st = rc_chat_render(c, msgs, &text, &len);
                rendered += st == RC_OK;
                free(text);
                json_decref(msgs);
            }
            if (st != RC_OK)
                ck_assert_msg(!strchr(rc_last_error(), '\n'), "%s", rc_last_error());
            rc_chat_free(c);
            tried++;
        }
        free(m);
    }
    printf("chat: %d mutated templates, %d still parse, %d render\n", tried, parsed, rendered);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat");
    TCase *tv = tcase_create("vs_hf");
    tcase_add_checked_fixture(tv, setup, teardown);
    tcase_add_test(tv, test_render_vs_hf);
    tcase_add_test(tv, test_prompts_load_messages);
    tcase_add_test(tv, test_prompts_load_kwargs);
    tcase_add_test(tv, test_constructs);
    suite_add_tcase(s, tv);
    TCase *tr = tcase_create("refused");
    tcase_add_checked_fixture(tr, setup, teardown);
    tcase_add_test(tr, test_refused);
    suite_add_tcase(s, tr);
    TCase *tm = tcase_create("malformed");
    tcase_add_checked_fixture(tm, setup, teardown);
    tcase_add_test(tm, test_malformed_messages);
    suite_add_tcase(s, tm);
    TCase *tf = tcase_create("files");
    tcase_add_checked_fixture(tf, setup, teardown);
    tcase_add_test(tf, test_template_files);
    suite_add_tcase(s, tf);
    TCase *th = tcase_create("hostile");
    tcase_set_timeout(th, 120);
    tcase_add_test(th, test_hostile_templates);
    suite_add_tcase(s, th);
    int rc = rc_test_run(s);
    json_decref(g_refs);
    return rc;
}
