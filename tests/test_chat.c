/* Chat-formatted prompts ({"messages": [...]} lines, src/formats/chat.c)
 * against transformers' apply_chat_template (data/fixtures/chat, made by
 * tools/make_chat_fixtures.py):
 *   vs_hf      every template the fixtures mark "render" (Qwen2, Qwen2.5 from
 *              chat_template.jinja, Meta-Llama-3, and variants written
 *              differently) is recognised, with the expected layout and
 *              default system message, and every conversation's text and ids
 *              equal transformers'; the same through rc_prompts_load on a
 *              .jsonl file;
 *   refused    every template marked "refuse" (Mistral [INST], Gemma, a
 *              Llama-3.1-style opening, ChatML near misses) is refused with
 *              the one-line message, also through rc_prompts_load;
 *   malformed  each malformed messages line gives its FILE:LINE error and
 *              status; no template, no tokenizer, the context limit;
 *   files      how the folder's files are read: the template in a list,
 *              chat_template.jinja over tokenizer_config.json, bos_token as an
 *              object, missing / conflicting / non-special bos_token,
 *              malformed files (plain prompts still load);
 *   hostile    hostile templates are refused without a crash, in bounded
 *              time; mutations of the recognised ones never crash.
 * The real SmolLM2 folder is compared by the real-model suite (chat_refs.h). */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "chat.h"
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
static char *make_folder(char *buf, size_t n, const char *sub, const char *from, const char *tmpl, bool jinja,
                         const char *bos)
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

/* the tokenizer a fixture template entry is rendered with: its folder, or a
 * temporary folder with its template (variants) */
static rc_tokenizer *entry_tokenizer(const json_t *t)
{
    char p[4096];
    const char *folder = json_string_value(json_object_get(t, "folder"));
    const char *from = json_string_value(json_object_get(t, "tokenizer_from"));
    if (from) {
        const json_t *bos = json_object_get(t, "bos_token");
        make_folder(p, sizeof p, json_string_value(json_object_get(t, "name")), from,
                    json_string_value(json_object_get(t, "template")),
                    strcmp(json_string_value(json_object_get(t, "template_file")), "chat_template.jinja") == 0,
                    json_is_string(bos) ? json_string_value(bos) : NULL);
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

START_TEST(test_render_vs_hf)
{
    size_t i;
    const json_t *t;
    int templates = 0;
    json_array_foreach(json_object_get(refs(), "templates"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (strcmp(json_string_value(json_object_get(t, "expect")), "render") != 0 || is_real(t))
            continue;
        rc_tokenizer *tok = entry_tokenizer(t);
        /* the layout and default system message the fixture says */
        rc_chat *c;
        ck_assert_msg(rc_chat_load(tok, &c) == RC_OK, "%s: %s", name, rc_last_error());
        const char *fam = json_string_value(json_object_get(t, "family"));
        ck_assert_int_eq(rc_chat_kind_of(c), strcmp(fam, "chatml") == 0 ? RC_CHAT_CHATML : RC_CHAT_LLAMA3);
        const json_t *sys = json_object_get(t, "default_system");
        if (json_is_string(sys))
            ck_assert_msg(rc_chat_default_system(c) && !strcmp(rc_chat_default_system(c), json_string_value(sys)),
                          "%s: default system %s", name, rc_chat_default_system(c) ? rc_chat_default_system(c) : "none");
        else
            ck_assert_ptr_null(rc_chat_default_system(c));
        rc_chat_free(c);
        /* every conversation, text and ids */
        int same, total;
        char why[4200];
        ck_assert_msg(rc_test_chat_refs(tok, name, &same, &total, why, sizeof why) == 0, "%s: %s", name, why);
        printf("chat %s (%s): %d/%d conversations give transformers' text and ids\n", name,
               json_string_value(json_object_get(t, "template_file")), same, total);
        ck_assert_int_eq(total, (int)json_array_size(json_object_get(refs(), "conversations")));
        ck_assert_int_eq(same, total);
        rc_tokenizer_free(tok);
        templates++;
    }
    ck_assert_int_ge(templates, 7);
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
        const rc_prompt_limits lim = {0, 4096, 8};
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
        rc_tokenizer *tok = entry_tokenizer(t);
        rc_chat *c = NULL;
        ck_assert_int_eq(rc_chat_load(tok, &c), RC_ERR_UNSUPPORTED);
        ck_assert_ptr_null(c);
        const char *e = rc_last_error();
        const char *want = strcmp(name, "llama31_like") == 0 ? "is a Llama-3.1-style one" : "is not one ratiocheck renders";
        ck_assert_msg(strstr(e, "the model's chat template (") && strstr(e, "tokenizer_config.json)") && strstr(e, want) &&
                          strstr(e, "(supported: ChatML as SmolLM2/Qwen2/Qwen2.5, Llama-3 headers); give "
                                    "{\"tokens\": [...]} or {\"prompt\": \"...\"} instead"),
                      "%s: %s", name, e);
        /* through the prompt loader: FILE:LINE first, at the first messages line */
        char path[4200];
        snprintf(path, sizeof path, "%s/r.jsonl", g_dir);
        const char *body = "{\"prompt\": \"a\"}\n{\"tokens\": [1]}\n"
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
        write_file(path, body, strlen(body));
        rc_prompts pr;
        ck_assert_int_eq(rc_prompts_load(path, tok, NULL, &pr), RC_ERR_UNSUPPORTED);
        char head[4300];
        snprintf(head, sizeof head, "%s:3: the model's chat template (", path);
        ck_assert_msg(strncmp(rc_last_error(), head, strlen(head)) == 0 && !strchr(rc_last_error(), '\n'), "%s",
                      rc_last_error());
        rc_tokenizer_free(tok);
        refused++;
    }
    ck_assert_int_ge(refused, 6);
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
    const rc_prompt_limits small = {0, 50, 8}; /* line 1: 33 tokens */
    ck_assert_int_eq(rc_prompts_load(path, tok, &small, &pr), RC_ERR_USAGE);
    ck_assert_msg(strstr(rc_last_error(), "p.jsonl:2: prompt of ") &&
                      strstr(rc_last_error(), "plus 8 generated tokens exceeds the model's 50 positions"),
                  "%s", rc_last_error());
    const rc_prompt_limits first = {1, 50, 8};
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
    ck_assert_int_eq(rc_chat_kind_of(c), RC_CHAT_CHATML);
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
    make_folder(tj, sizeof tj, "jinja", "qwen2", "{{ 'not chatml' }}", false, NULL);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "jinja/tokenizer_config.json) is not one"), "%s", rc_last_error());
    put(tj, "chat_template.jinja", k_chatml);
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    rc_chat_free(c);
    put(tj, "chat_template.jinja", "{{ 'not chatml' }}\n");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "jinja/chat_template.jinja) is not one"), "%s", rc_last_error());
    put(tj, "chat_template.jinja", "{{ '\xff' }}");
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_FORMAT);
    ck_assert_msg(strstr(rc_last_error(), "chat_template.jinja) is not UTF-8"), "%s", rc_last_error());
    snprintf(body, sizeof body, "%s\r\n", k_chatml); /* a carriage return: refused, not normalised */
    put(tj, "chat_template.jinja", body);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    /* named templates without chat_template.jinja: transformers would not use the config's */
    make_folder(tj, sizeof tj, "named", "qwen2", k_chatml, false, NULL);
    snprintf(body, sizeof body, "%.*s/additional_chat_templates", (int)(strrchr(tj, '/') - tj), tj);
    mkdir(body, 0700);
    ck_assert_int_eq(chat_of(tj, &c), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "additional_chat_templates: named chat templates"), "%s", rc_last_error());
    /* Llama-3: bos_token as a string, as {"content": ...}; missing; not special; special_tokens_map.json */
    make_folder(tj, sizeof tj, "l3", "llama3", l3t, false, "<|begin_of_text|>");
    ck_assert_msg(chat_of(tj, &c) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(rc_chat_kind_of(c), RC_CHAT_LLAMA3);
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
    rc_status st = rc_chat_parse(s, n, "t.jinja", "<s>", &c);
    rc_chat_free(c);
    return st;
}

START_TEST(test_hostile_templates)
{
    /* one-line refusals */
    static const char *const bad[] = {
        "",
        "{{",
        "{%",
        "{#",
        "{{ 'unterminated }}",
        "{% if x %}",
        "{% endif %}",
        "{% for m in messages %}{% else %}{% endfor %}",
        "{% raw %}{{ x }}{% endraw %}",
        "{% macro m() %}{% endmacro %}",
        "{{ raise_exception('x') }}",
        "{{ x if y else z }}",
        "{{ 1.5 }}",
        "{{ 0x10 }}",
        "{{ '\\u0041' }}",
        "{{ a < b < c }}",
        "{{ [1, 2] }}",
        "{{ x[1:2] }}",
        "{{ x|default('a') }}",
        "{{ caf\xc3\xa9 }}",
        "{{ x ! y }}",
        "{% set a, b = 1, 2 %}",
        "{% generation %}{% endgeneration %}",
        "{{ ((((x)))) ]]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc_status st = parse_str(bad[i], strlen(bad[i]));
        ck_assert_msg(st == RC_ERR_UNSUPPORTED, "'%s': %d", bad[i], st);
        ck_assert_msg(!strchr(rc_last_error(), '\n') && strstr(rc_last_error(), "(t.jinja)"), "%s", rc_last_error());
    }
    /* deep nesting, many blocks, long strings, a template over the limit: bounded */
    size_t n = (size_t)1 << 20;
    char *b = malloc(n + 2);
    const char *pieces[] = {"(", "{% if x %}", "not ", "[", "{{ ", "'", "- "};
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
        size_t pl = strlen(pieces[k]), w = 0;
        if (k == 0 || k == 2 || k == 3 || k == 6)
            w += (size_t)sprintf(b, "{{ ");
        while (w + pl < n) {
            memcpy(b + w, pieces[k], pl);
            w += pl;
        }
        clock_t t0 = clock();
        ck_assert_int_ne(parse_str(b, w), RC_OK);
        ck_assert_msg((double)(clock() - t0) / CLOCKS_PER_SEC < 5.0, "piece %zu took too long", k);
    }
    memset(b, 'a', n + 1);
    ck_assert_int_eq(parse_str(b, n + 1), RC_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(rc_last_error(), "more than the 1048576 ratiocheck reads"), "%s", rc_last_error());
    free(b);
    /* mutations of every fixture template: never a crash; one that is still
     * recognised renders (tools/make_chat_fixtures.py's templates compared
     * with transformers by hand: see the report of this change) */
    size_t i;
    const json_t *t;
    unsigned seed = 12345;
    int accepted = 0, tried = 0;
    json_array_foreach(json_object_get(refs(), "templates"), i, t)
    {
        const char *tmpl = json_string_value(json_object_get(t, "template"));
        size_t tl = strlen(tmpl);
        char *m = malloc(tl + 8);
        for (int r = 0; r < 400; r++) {
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
            rc_chat *c = NULL;
            if (rc_chat_parse(m, ml, "m", "<s>", &c) == RC_OK) {
                accepted++;
                json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "user", "content", " a ", "role",
                                         "assistant", "content", "b");
                char *text;
                size_t len;
                ck_assert(rc_chat_render(c, msgs, &text, &len) == RC_OK);
                free(text);
                json_decref(msgs);
            }
            rc_chat_free(c);
            tried++;
        }
        free(m);
    }
    printf("chat: %d mutated templates, %d still recognised (whitespace or other changes Jinja ignores)\n", tried,
           accepted);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat");
    TCase *tv = tcase_create("vs_hf");
    tcase_add_checked_fixture(tv, setup, teardown);
    tcase_add_test(tv, test_render_vs_hf);
    tcase_add_test(tv, test_prompts_load_messages);
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
