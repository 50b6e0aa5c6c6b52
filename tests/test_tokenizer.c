/* The C tokenizer against HF `tokenizers` (data/fixtures/tokenizers, made by
 * tools/fixtures/make_tokenizer_fixtures.py): every corpus string of every tokenizer
 * family must encode to exactly HF's ids (with and without special tokens)
 * and decode to HF's text. Malformed tokenizer.json files give clear errors. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "prompts.h"
#include "tokenizer.h"

#include "testutil.h"

static const char *const k_names[] = {"pythia_default", "gpt2_bytelevel", "neox_nfc", "llama3_split",
                                      "qwen2_split", "llama2_sentencepiece", "mistral_metaspace", "legacy_merges"};
#define N_TOK (int)(sizeof k_names / sizeof k_names[0])

static bool ids_equal(const int32_t *a, int64_t n, const json_t *arr)
{
    if ((int64_t)json_array_size(arr) != n)
        return false;
    for (int64_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(arr, (size_t)i)) != a[i])
            return false;
    return true;
}

/* data/fixtures/tokenizers/corpus.jsonl: the strings every expected.jsonl
 * encodes, one JSON string a line, in order */
static json_t *load_corpus(void)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/tokenizers/corpus.jsonl");
    FILE *f = fopen(p, "r");
    ck_assert_msg(f != NULL, "%s", p);
    json_t *arr = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) > 0) {
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)got, JSON_DECODE_ANY, &err);
        ck_assert_msg(json_is_string(o), "%s: %s", p, o ? "not a string" : err.text);
        json_array_append_new(arr, o);
    }
    free(line);
    fclose(f);
    return arr;
}

START_TEST(test_matches_hf)
{
    char p[4096];
    json_t *corpus = load_corpus();
    ck_assert_msg(json_array_size(corpus) > 0, "the corpus is empty");
    rc_test_source_path(p, sizeof p, "data/fixtures/tokenizers/%s/tokenizer.json", k_names[_i]);
    rc_tokenizer *t;
    ck_assert_msg(rc_tokenizer_load(p, 0, &t) == RC_OK, "%s", rc_last_error());
    rc_test_source_path(p, sizeof p, "data/fixtures/tokenizers/%s/expected.jsonl", k_names[_i]);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int n = 0, enc_ok = 0, spec_ok = 0, dec_ok = 0, dec_n = 0;
    while ((got = getline(&line, &cap, f)) > 0) {
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)got, 0, &err);
        ck_assert_msg(o != NULL, "%s: %s", p, err.text);
        /* row n is the corpus's string n: no string left out, none added (a row past the corpus's
         * end fails here, a missing one in the count below, a shifted one in the ids) */
        ck_assert_msg((size_t)n < json_array_size(corpus), "%s line %d: the corpus has only %d strings", p, n + 1,
                      (int)json_array_size(corpus));
        const json_t *text = json_array_get(corpus, (size_t)n);
        /* "ids_special" only where it differs from "ids", "decoded" only where it differs from
         * the text (then the string does not round-trip in HF) */
        const json_t *hf_ids = json_object_get(o, "ids");
        ck_assert_msg(json_is_array(hf_ids), "%s line %d: no \"ids\"", p, n + 1);
        const json_t *hf_special = json_object_get(o, "ids_special");
        const json_t *hf_decoded = json_object_get(o, "decoded");
        if (!hf_special)
            hf_special = hf_ids;
        const bool roundtrip = hf_decoded == NULL;
        if (!hf_decoded)
            hf_decoded = text;
        int32_t *ids;
        int64_t nid;
        ck_assert_msg(rc_tokenizer_encode(t, json_string_value(text), json_string_length(text), false, &ids, &nid) ==
                          RC_OK,
                      "%s", rc_last_error());
        bool e1 = ids_equal(ids, nid, hf_ids);
        if (roundtrip) { /* decode(encode(s)) == s where HF round-trips */
            char *back;
            size_t bl;
            ck_assert(rc_tokenizer_decode(t, ids, nid, false, &back, &bl) == RC_OK);
            ck_assert_msg(bl == json_string_length(text) && memcmp(back, json_string_value(text), bl) == 0,
                          "%s: round trip of %s gives '%s'", k_names[_i], json_string_value(text), back);
            free(back);
        }
        if (!e1 && n - enc_ok < 3) {
            printf("%s: MISMATCH for %s\n  ours:", k_names[_i], json_dumps(text, JSON_ENCODE_ANY));
            for (int64_t i = 0; i < nid && i < 40; i++)
                printf(" %d", ids[i]);
            printf("\n  hf:   %s\n", json_dumps(hf_ids, 0));
        }
        enc_ok += e1;
        free(ids);
        ck_assert(rc_tokenizer_encode(t, json_string_value(text), json_string_length(text), true, &ids, &nid) ==
                  RC_OK);
        spec_ok += ids_equal(ids, nid, hf_special);
        free(ids);
        /* decode HF's ids */
        const json_t *hid = hf_ids;
        int64_t hn = (int64_t)json_array_size(hid);
        int32_t *hv = malloc(sizeof(int32_t) * (size_t)(hn + 1));
        for (int64_t i = 0; i < hn; i++)
            hv[i] = (int32_t)json_integer_value(json_array_get(hid, (size_t)i));
        char *dec;
        size_t dl;
        ck_assert(rc_tokenizer_decode(t, hv, hn, false, &dec, &dl) == RC_OK);
        const json_t *want = hf_decoded;
        bool d1 = dl == json_string_length(want) && memcmp(dec, json_string_value(want), dl) == 0;
        if (!d1 && dec_n - dec_ok < 2)
            printf("%s: DECODE MISMATCH ours '%s' hf '%s'\n", k_names[_i], dec, json_string_value(want));
        dec_ok += d1;
        dec_n++;
        free(dec);
        free(hv);
        json_decref(o);
        n++;
    }
    free(line);
    fclose(f);
    printf("%-22s encode %d/%d, with specials %d/%d, decode %d/%d\n", k_names[_i], enc_ok, n, spec_ok, n, dec_ok, dec_n);
    ck_assert_msg(n == (int)json_array_size(corpus), "%s: %d rows for the corpus's %d strings", p, n,
                  (int)json_array_size(corpus));
    ck_assert_int_eq(enc_ok, n);
    ck_assert_int_eq(spec_ok, n);
    ck_assert_int_eq(dec_ok, dec_n);
    json_decref(corpus);
    rc_tokenizer_free(t);
}
END_TEST

/* Ids that are not tokens (a model's padded embedding rows, like pythia's
 * 50304 rows for 50277 tokens) are skipped by decode, as HF's decode does:
 * decode([a, bad, b]) == decode([a, b]). */
START_TEST(test_decode_skips_unknown_ids)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/tokenizers/pythia_default/tokenizer.json");
    rc_tokenizer *t;
    ck_assert_msg(rc_tokenizer_load(p, 0, &t) == RC_OK, "%s", rc_last_error());
    const int32_t V = (int32_t)rc_tokenizer_vocab_size(t);
    int32_t with[] = {40, V, 41, V + 303, 2000000000}, without[] = {40, 41};
    char *a = NULL, *b = NULL;
    size_t la, lb;
    ck_assert(rc_tokenizer_decode(t, with, 5, false, &a, &la) == RC_OK);
    ck_assert(rc_tokenizer_decode(t, without, 2, false, &b, &lb) == RC_OK);
    ck_assert_uint_eq(la, lb);
    ck_assert_str_eq(a, b);
    ck_assert_uint_gt(lb, 0);
    free(a);
    free(b);
    rc_tokenizer_free(t);
}
END_TEST

/* ---- malformed tokenizer.json files ---------------------------------------- */

static char g_dir[256];

static void err_setup(void) { rc_test_mkdtemp(g_dir, sizeof g_dir, "/tmp/rc_test_tok_"); }
static void err_teardown(void) { rc_test_rm_rf(g_dir); }

/* a valid minimal byte-level tokenizer, with a hole for one field */
#define K_BASE \
    "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": %s, \"pre_tokenizer\": %s," \
    " \"post_processor\": null, \"decoder\": %s," \
    " \"model\": {\"type\": \"%s\", \"dropout\": %s, \"unk_token\": null, \"byte_fallback\": false," \
    " \"vocab\": {%s}, \"merges\": [%s]}}"

static rc_status load_variant(const char *added, const char *norm, const char *pre, const char *dec,
                              const char *type, const char *dropout, const char *vocab, const char *merges,
                              int64_t limit)
{
    char path[512], body[8192];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_dir);
    snprintf(body, sizeof body, K_BASE, added, norm, pre, dec, type, dropout, vocab, merges);
    FILE *f = fopen(path, "w");
    fputs(body, f);
    fclose(f);
    rc_tokenizer *t = NULL;
    rc_status s = rc_tokenizer_load(path, limit, &t);
    rc_tokenizer_free(t);
    return s;
}

#define V_OK "\"a\": 0, \"b\": 1, \"ab\": 2"
#define BL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"

#define EXPECT_LOAD_ERR(st, phrase, ...)                                                                  \
    do {                                                                                                   \
        ck_assert_int_eq(load_variant(__VA_ARGS__), st);                                                   \
        ck_assert_msg(strstr(rc_last_error(), phrase) && strstr(rc_last_error(), "tokenizer.json"),       \
                      "message '%s' lacks '%s'", rc_last_error(), phrase);                                 \
    } while (0)

START_TEST(test_load_errors)
{
    /* the base variant loads */
    ck_assert_int_eq(load_variant("", "null", BL, BL, "BPE", "null", V_OK, "[\"a\", \"b\"]", 0), RC_OK);
    ck_assert_int_eq(load_variant("", "null", BL, BL, "BPE", "null", V_OK, "\"a b\"", 0), RC_OK);
    /* unsupported components, by name */
    EXPECT_LOAD_ERR(RC_ERR_UNSUPPORTED, "normalizer \"Lowercase\"", "", "{\"type\": \"Lowercase\"}", BL, BL,
                    "BPE", "null", V_OK, "", 0);
    EXPECT_LOAD_ERR(RC_ERR_UNSUPPORTED, "pre-tokenizer \"Whitespace\"", "", "null",
                    "{\"type\": \"Whitespace\"}", BL, "BPE", "null", V_OK, "", 0);
    EXPECT_LOAD_ERR(RC_ERR_UNSUPPORTED, "decoder \"WordPiece\"", "", "null", BL, "{\"type\": \"WordPiece\"}",
                    "BPE", "null", V_OK, "", 0);
    EXPECT_LOAD_ERR(RC_ERR_UNSUPPORTED, "model type \"Unigram\"", "", "null", BL, BL, "Unigram", "null", V_OK,
                    "", 0);
    EXPECT_LOAD_ERR(RC_ERR_UNSUPPORTED, "dropout", "", "null", BL, BL, "BPE", "0.1", V_OK, "", 0);
    EXPECT_LOAD_ERR(RC_ERR_UNSUPPORTED, "Split behavior \"Contiguous\"", "", "null",
                    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Contiguous\"}",
                    BL, "BPE", "null", V_OK, "", 0);
    EXPECT_LOAD_ERR(RC_ERR_UNSUPPORTED, "does not compile", "", "null",
                    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}", BL,
                    "BPE", "null", V_OK, "", 0);
    /* vocabulary problems, naming the token */
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "id 0 is used by both", "", "null", BL, BL, "BPE", "null", "\"a\": 0, \"b\": 0",
                    "", 0);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "not below the model's 2 embedding rows", "", "null", BL, BL, "BPE", "null", V_OK,
                    "", 2);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "names a token not in the vocabulary: \"c\"", "", "null", BL, BL, "BPE", "null",
                    V_OK, "[\"a\", \"c\"]", 0);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "not two tokens separated by one space", "", "null", BL, BL, "BPE", "null", V_OK,
                    "\"a b c\"", 0);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "invalid UTF-8", "", "null", BL, BL, "BPE", "null", "\"\xff\": 0", "", 0);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "u0000", "", "null", BL, BL, "BPE", "null", "\"a\\u0000b\": 0", "", 0);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "id 1 is used by both", "{\"id\": 1, \"content\": \"<x>\", \"special\": true}",
                    "null", BL, BL, "BPE", "null", V_OK, "", 0);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "not below the model's 3 embedding rows",
                    "{\"id\": 7, \"content\": \"<x>\", \"special\": true}", "null", BL, BL, "BPE", "null", V_OK, "", 3);
    EXPECT_LOAD_ERR(RC_ERR_FORMAT, "needs \"id\" and \"content\"", "{\"content\": \"<x>\"}", "null", BL, BL, "BPE",
                    "null", V_OK, "", 0);
    /* not JSON at all, and a missing file */
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model\": ", f);
    fclose(f);
    rc_tokenizer *t;
    ck_assert_int_eq(rc_tokenizer_load(path, 0, &t), RC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "invalid JSON"));
    snprintf(path, sizeof path, "%s/none.json", g_dir);
    ck_assert_int_eq(rc_tokenizer_load(path, 0, &t), RC_ERR_IO);
    /* encoding invalid UTF-8 is an error with the byte offset */
    snprintf(path, sizeof path, "%s/tokenizer.json", g_dir);
    ck_assert_int_eq(load_variant("", "null", BL, BL, "BPE", "null", V_OK, "", 0), RC_OK);
    ck_assert_int_eq(rc_tokenizer_load(path, 0, &t), RC_OK);
    int32_t *ids;
    int64_t n;
    ck_assert_int_eq(rc_tokenizer_encode(t, "ab\xc3", 3, false, &ids, &n), RC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(rc_last_error(), "byte 2"));
    rc_tokenizer_free(t);
}
END_TEST

/* ---- resource bounds (robustness issue) ------------------------------------ */

/* write body as g_dir/tokenizer.json and load it */
static rc_status load_body(const char *body, rc_tokenizer **t)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(body, f);
    fclose(f);
    *t = NULL;
    return rc_tokenizer_load(path, 0, t);
}

/* a whole tokenizer.json: vocab a b ab c bc <x>, merges "b c" then "a b" */
#define K_FULL \
    "{\"added_tokens\": [{\"id\": 5, \"content\": \"<x>\", \"special\": true}], \"normalizer\": %s," \
    " \"pre_tokenizer\": %s, \"post_processor\": %s, \"decoder\": %s," \
    " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 3, \"bc\": 4, \"<x>\": 5}," \
    " \"merges\": [\"b c\", \"a b\"]}}"

static char *full_body(const char *norm, const char *pre, const char *post, const char *dec)
{
    size_t n = strlen(K_FULL) + strlen(norm) + strlen(pre) + strlen(post) + strlen(dec) + 1;
    char *b = malloc(n);
    snprintf(b, n, K_FULL, norm, pre, post, dec);
    return b;
}

/* a JSON list of `n` copies of `item` joined by commas, inside `open`...`close` */
static char *repeat_json(const char *open, const char *item, int n, const char *close)
{
    size_t cap = strlen(open) + (size_t)n * (strlen(item) + 2) + strlen(close) + 1;
    char *b = malloc(cap);
    strcpy(b, open);
    for (int i = 0; i < n; i++) {
        if (i)
            strcat(b, ", ");
        strcat(b, item);
    }
    strcat(b, close);
    return b;
}

static void expect_msg(const char *phrase)
{
    ck_assert_msg(strstr(rc_last_error(), phrase) && strstr(rc_last_error(), "tokenizer.json") &&
                      !strchr(rc_last_error(), '\n'),
                  "message '%s' lacks '%s' or the file name", rc_last_error(), phrase);
}

#define ROBERTA "{\"type\": \"RobertaProcessing\", \"cls\": [\"a\", 0], \"sep\": [\"b\", 1]}"

/* Roberta / Bert / Template post-processors nested in a Sequence add more
 * special tokens than the fixed table holds: a load error, never an overflow. */
START_TEST(test_post_specials_bounded)
{
    rc_tokenizer *t;
    char *post, *body;
    /* 9 Roberta processors: 9 prefix ids */
    post = repeat_json("{\"type\": \"Sequence\", \"processors\": [", ROBERTA, 9, "]}");
    body = full_body("null", "null", post, "null");
    ck_assert_int_eq(load_body(body, &t), RC_ERR_FORMAT);
    expect_msg("special tokens");
    free(body);
    free(post);
    /* 40 of them (used to write far past the table) */
    post = repeat_json("{\"type\": \"Sequence\", \"processors\": [", ROBERTA, 40, "]}");
    body = full_body("null", "null", post, "null");
    ck_assert_int_eq(load_body(body, &t), RC_ERR_FORMAT);
    expect_msg("special tokens");
    free(body);
    free(post);
    /* TemplateProcessing with 8 prefix specials, then one more from Bert */
    const char *tp = "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"TemplateProcessing\", \"single\": ["
                     "{\"SpecialToken\": {\"id\": \"S\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],"
                     " \"special_tokens\": {\"S\": {\"id\": \"S\", \"ids\": [0, 0, 0, 0, 0, 0, 0, 0], \"tokens\": []}}},"
                     " {\"type\": \"BertProcessing\", \"cls\": [\"a\", 0], \"sep\": [\"b\", 1]}]}";
    body = full_body("null", "null", tp, "null");
    ck_assert_int_eq(load_body(body, &t), RC_ERR_FORMAT);
    expect_msg("special tokens");
    free(body);
    /* an id that does not fit int32 is not truncated to a valid one */
    body = full_body("null", "null",
                     "{\"type\": \"RobertaProcessing\", \"cls\": [\"a\", 4294967296], \"sep\": [\"b\", 1]}", "null");
    ck_assert_int_eq(load_body(body, &t), RC_ERR_FORMAT);
    expect_msg("4294967296");
    free(body);
    /* 4 nested processors are fine: 4 ids before and after the text */
    post = repeat_json("{\"type\": \"Sequence\", \"processors\": [", ROBERTA, 4, "]}");
    body = full_body("null", "null", post, "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    int32_t *ids;
    int64_t n;
    ck_assert_int_eq(rc_tokenizer_encode(t, "c", 1, true, &ids, &n), RC_OK);
    const int32_t want[] = {0, 0, 0, 0, 3, 1, 1, 1, 1};
    ck_assert_int_eq(n, 9);
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(ids[i], want[i]);
    free(ids);
    rc_tokenizer_free(t);
    free(body);
    free(post);
}
END_TEST

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A regex that gives up (match limit, JIT stack) is an error naming the
 * tokenizer file, not "no more matches"; a catastrophic regex on a long line
 * is refused quickly; legitimate long runs still work. */
START_TEST(test_regex_limits)
{
    rc_tokenizer *t;
    int32_t *ids;
    int64_t n;
    /* exponential backtracking at one position (the alternative keeps PCRE2
     * from ruling the match out by its required 'b') */
    char *body = full_body("null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a+)+b|!\"}, \"behavior\": \"Isolated\"}",
                           "null", "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    free(body);
    const char *txt = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!";
    ck_assert_int_eq(rc_tokenizer_encode(t, txt, strlen(txt), false, &ids, &n), RC_ERR_UNSUPPORTED);
    expect_msg("regex");
    rc_tokenizer_free(t);
    /* a long line where every run of a's is expensive: refused within a
     * budget proportional to the text, not minutes */
    body = full_body("null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a+)+b|.\"}, \"behavior\": \"Isolated\"}",
                     "null", "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    free(body);
    const int runs = 4000, run = 22;
    char *big = malloc((size_t)runs * run + 1);
    for (int r = 0; r < runs; r++) {
        memset(big + r * run, 'a', run - 1);
        big[r * run + run - 1] = ' ';
    }
    big[runs * run] = '\0';
    double t0 = now_s();
    ck_assert_int_eq(rc_tokenizer_encode(t, big, (size_t)runs * run, false, &ids, &n), RC_ERR_UNSUPPORTED);
    double dt = now_s() - t0;
    expect_msg("regex");
    ck_assert_msg(dt < 10.0, "refusing took %.1f s", dt);
    free(big);
    rc_tokenizer_free(t);
    /* the JIT stack runs out on a long repeated group: the match is still
     * found (Removed drops it, leaving "c") */
    body = full_body("null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?:ab)+\"}, \"behavior\": \"Removed\"}",
                     "null", "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    free(body);
    big = malloc(200003);
    for (int i = 0; i < 100000; i++)
        memcpy(big + 2 * i, "ab", 2);
    memcpy(big + 200000, "c", 2);
    ck_assert_msg(rc_tokenizer_encode(t, big, 200001, false, &ids, &n) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 3);
    free(ids);
    free(big);
    rc_tokenizer_free(t);
    /* Llama-3's pattern needs one long backtrack per whitespace run: a
     * 300 KB run is fine and round-trips */
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/tokenizers/llama3_split/tokenizer.json");
    ck_assert_msg(rc_tokenizer_load(p, 0, &t) == RC_OK, "%s", rc_last_error());
    const size_t ns = 300000;
    big = malloc(ns + 2);
    memset(big, ' ', ns);
    memcpy(big + ns, "x", 2);
    ck_assert_msg(rc_tokenizer_encode(t, big, ns + 1, false, &ids, &n) == RC_OK, "%s", rc_last_error());
    char *back;
    size_t bl;
    ck_assert(rc_tokenizer_decode(t, ids, n, false, &back, &bl) == RC_OK);
    ck_assert_uint_eq(bl, ns + 1);
    ck_assert(memcmp(back, big, ns + 1) == 0);
    free(back);
    free(ids);
    free(big);
    rc_tokenizer_free(t);
}
END_TEST

#define REPLACE16 \
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"aaaaaaaaaaaaaaaa\"}"

/* Normalizers, pre-tokenizers and decoders that grow the text are bounded
 * relative to the input: an error naming the file, not gigabytes. */
START_TEST(test_growth_bounded)
{
    rc_tokenizer *t;
    int32_t *ids;
    int64_t n;
    /* 4 Replace steps of 16x: 4 bytes -> 256 KB */
    char *norm = repeat_json("{\"type\": \"Sequence\", \"normalizers\": [", REPLACE16, 4, "]}");
    char *body = full_body(norm, "null", "null", "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(rc_tokenizer_encode(t, "aaaa", 4, false, &ids, &n), RC_ERR_UNSUPPORTED);
    expect_msg("normaliz");
    rc_tokenizer_free(t);
    free(body);
    free(norm);
    /* a 4000-byte Prepend on each piece of text between added tokens */
    char pre[4200];
    strcpy(pre, "{\"type\": \"Prepend\", \"prepend\": \"");
    for (int i = 0; i < 4000; i++)
        strcat(pre, "c");
    strcat(pre, "\"}");
    body = full_body(pre, "null", "null", "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    char txt[1000] = "";
    for (int i = 0; i < 100; i++)
        strcat(txt, "ab<x>");
    ck_assert_int_eq(rc_tokenizer_encode(t, txt, strlen(txt), false, &ids, &n), RC_ERR_UNSUPPORTED);
    expect_msg("normaliz");
    ck_assert_int_eq(rc_tokenizer_encode(t, "ab", 2, false, &ids, &n), RC_OK); /* one prepend is fine */
    ck_assert_int_eq(n, 4001);
    free(ids);
    rc_tokenizer_free(t);
    free(body);
    /* Metaspace's replacement is one character (HF: a char) */
    body = full_body("null", "{\"type\": \"Metaspace\", \"replacement\": \"abababababababab\", \"prepend_scheme\": \"always\"}",
                     "null", "null");
    ck_assert_int_eq(load_body(body, &t), RC_ERR_FORMAT);
    expect_msg("replacement");
    free(body);
    body = full_body("null", "null", "null", "{\"type\": \"Metaspace\", \"replacement\": \"\", \"prepend_scheme\": \"always\"}");
    ck_assert_int_eq(load_body(body, &t), RC_ERR_FORMAT);
    expect_msg("replacement");
    free(body);
    /* decoders: 4 Replace steps of 16x on 8 tokens */
    char *dec = repeat_json("{\"type\": \"Sequence\", \"decoders\": [", REPLACE16, 4, "]}");
    body = full_body("null", "null", "null", dec);
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    int32_t a8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    char *out;
    size_t ol;
    ck_assert_int_eq(rc_tokenizer_decode(t, a8, 8, false, &out, &ol), RC_ERR_UNSUPPORTED);
    expect_msg("decod");
    rc_tokenizer_free(t);
    free(body);
    free(dec);
    /* an ordinary growth (" " -> 3-byte U+2581, 3x) is fine */
    body = full_body("{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}", "null",
                     "null", "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    char sp[1001];
    memset(sp, ' ', 1000);
    sp[1000] = '\0';
    ck_assert_msg(rc_tokenizer_encode(t, sp, 1000, false, &ids, &n) == RC_OK, "%s", rc_last_error());
    free(ids);
    rc_tokenizer_free(t);
    free(body);
}
END_TEST

/* Split with a String pattern (PCRE2_LITERAL, which refuses PCRE2_UCP) */
START_TEST(test_split_string_pattern)
{
    rc_tokenizer *t;
    char *body = full_body("null", "{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, \"behavior\": \"Removed\"}",
                           "null", "null");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    free(body);
    int32_t *ids;
    int64_t n;
    /* "abc" without the b: "a", "c" (the "b c" merge cannot happen) */
    ck_assert_int_eq(rc_tokenizer_encode(t, "abc", 3, false, &ids, &n), RC_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 0);
    ck_assert_int_eq(ids[1], 3);
    free(ids);
    rc_tokenizer_free(t);
}
END_TEST

/* Added tokens are looked up by the text's next byte: 20000 added tokens
 * used to cost 20000 comparisons per byte of text (1 MB: 114 s). */
START_TEST(test_many_added_tokens_fast)
{
    const int na = 20000;
    size_t cap = (size_t)na * 80 + 1024, k = 0;
    char *body = malloc(cap);
    k += (size_t)snprintf(body + k, cap - k, "{\"added_tokens\": [");
    for (int i = 0; i < na; i++)
        k += (size_t)snprintf(body + k, cap - k, "%s{\"id\": %d, \"content\": \"Z%d|\", \"special\": true}", i ? ", " : "",
                              6 + i, i);
    k += (size_t)snprintf(body + k, cap - k,
                          "], \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 3, \"bc\": 4,"
                          " \" \": 5}, \"merges\": [\"b c\", \"a b\"]}}");
    rc_tokenizer *t;
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    free(body);
    const size_t reps = 100000;
    char *txt = malloc(reps * 3 + 16);
    for (size_t i = 0; i < reps; i++)
        memcpy(txt + 3 * i, "ab ", 3);
    strcpy(txt + 3 * reps, "Z17|c");
    int32_t *ids;
    int64_t n;
    double t0 = now_s();
    ck_assert_int_eq(rc_tokenizer_encode(t, txt, 3 * reps + 5, false, &ids, &n), RC_OK);
    double dt = now_s() - t0;
    ck_assert_int_eq(n, 2 * (int64_t)reps + 2); /* "ab", " " per repeat, then Z17| and c */
    ck_assert_int_eq(ids[n - 2], 6 + 17);
    ck_assert_int_eq(ids[n - 1], 3);
    ck_assert_msg(dt < 3.0, "encoding 300 KB took %.1f s", dt);
    free(ids);
    free(txt);
    rc_tokenizer_free(t);
}
END_TEST

/* Split MergedWithPrevious as HF's split does it: a delimiter joins the piece
 * before it unless that piece is itself a delimiter (HF's previous_match), and
 * never joins a piece of an earlier pre-tokenized piece. */
START_TEST(test_merged_with_previous)
{
#define MWP_FMT "{\"pre_tokenizer\": %s, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"bb\": 2,"\
                      " \" \": 3}, \"merges\": [\"b b\"]}}"
    char body[2048];
    rc_tokenizer *t;
    int32_t *ids;
    int64_t n;
    /* Both expectations checked with HF tokenizers 0.23.3 (pip install
     * tokenizers==0.23.3): Tokenizer(BPE(vocab, merges)) with
     * pre_tokenizers.Split("b", "merged_with_previous"): encode("abb").ids ==
     * [0, 1, 1], pre_tokenize_str == [("ab", (0, 2)), ("b", (2, 3))]; with
     * Sequence([Split(" ", "removed"), Split("b", "merged_with_previous")]):
     * encode("b b").ids == [1, 1].
     * "abb": HF ["ab", "b"] -> 0 1 1 (not ["abb"] -> 0 2) */
    snprintf(body, sizeof body, MWP_FMT, "{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, \"behavior\": \"MergedWithPrevious\"}");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(rc_tokenizer_encode(t, "abb", 3, false, &ids, &n), RC_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 0);
    ck_assert_int_eq(ids[1], 1);
    ck_assert_int_eq(ids[2], 1);
    free(ids);
    rc_tokenizer_free(t);
    /* after a split on " " (Removed): "b b" -> ["b"], ["b"]; the second b is
     * a delimiter at the start of its own piece and stays there -> 1 1 */
    snprintf(body, sizeof body, MWP_FMT,
             "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": \" \"},"
             " \"behavior\": \"Removed\"}, {\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, \"behavior\":"
             " \"MergedWithPrevious\"}]}");
    ck_assert_msg(load_body(body, &t) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(rc_tokenizer_encode(t, "b b", 3, false, &ids, &n), RC_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], 1);
    free(ids);
    rc_tokenizer_free(t);
}
END_TEST

/* ---- prompt files -------------------------------------------------------------- */

static const char *put_file(const char *name, const char *body, size_t n)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(body, 1, n, f), n);
    fclose(f);
    return path;
}

static long max_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

/* A prompt that does not fit the context is rejected on its own line, before
 * the prompts are padded to the longest (a 210 KB .ids file used to pad 5000
 * prompts to 100000 tokens: 2 GB). */
START_TEST(test_prompts_context_before_padding)
{
    const rc_prompt_limits lim = {0, 256, 50, NULL};
    rc_prompts pr;
    /* .ids: 5000 one-token prompts, then one of 100000 tokens */
    size_t cap = 5000 * 2 + 100000 * 2 + 1, n = 0;
    char *b = malloc(cap);
    for (int i = 0; i < 5000; i++)
        n += (size_t)sprintf(b + n, "1\n");
    for (int i = 0; i < 100000; i++)
        n += (size_t)sprintf(b + n, i ? " 1" : "1");
    b[n++] = '\n';
    const char *p = put_file("pad.ids", b, n);
    ck_assert_int_eq(rc_prompts_load(p, NULL, &lim, &pr), RC_ERR_USAGE);
    ck_assert_msg(strstr(rc_last_error(),
                         "pad.ids:5001: prompt of 100000 tokens plus 50 generated tokens exceeds the model's 256 positions"),
                  "%s", rc_last_error());
    ck_assert_msg(max_rss_mb() < 300, "peak RSS %ld MB", max_rss_mb());
    /* without a context limit the padded table is bounded too: 301 prompts x
     * 1048576 tokens is more than 2^28 ids */
    n = 0;
    b = realloc(b, 300 * 2 + 1048576 * 2 + 1);
    for (int i = 0; i < 300; i++)
        n += (size_t)sprintf(b + n, "1\n");
    for (int i = 0; i < 1048576; i++) {
        b[n++] = '1';
        b[n++] = ' ';
    }
    b[n++] = '\n';
    p = put_file("wide.ids", b, n);
    ck_assert_int_eq(rc_prompts_load(p, NULL, NULL, &pr), RC_ERR_NOMEM);
    ck_assert_msg(strstr(rc_last_error(), "wide.ids: 301 prompts padded"), "%s", rc_last_error());
    ck_assert_msg(max_rss_mb() < 300, "peak RSS %ld MB", max_rss_mb());
    free(b);
    /* .jsonl token ids and .txt text, checked the same way */
    char *j = malloc(8000);
    strcpy(j, "{\"tokens\": [1, 2]}\n{\"tokens\": [");
    for (int i = 0; i < 300; i++)
        strcat(j, i ? ", 7" : "7");
    strcat(j, "]}\n");
    p = put_file("p.jsonl", j, strlen(j));
    ck_assert_int_eq(rc_prompts_load(p, NULL, &lim, &pr), RC_ERR_USAGE);
    ck_assert_msg(strstr(rc_last_error(), "p.jsonl:2: prompt of 300 tokens plus 50 generated tokens"), "%s",
                  rc_last_error());
    free(j);
    char tp[4096];
    rc_test_source_path(tp, sizeof tp, "data/models/pythia-rc-tiny/tokenizer.json");
    rc_tokenizer *t;
    ck_assert_msg(rc_tokenizer_load(tp, 0, &t) == RC_OK, "%s", rc_last_error());
    char txt[4000] = "In the beginning\n";
    for (int i = 0; i < 300; i++)
        strcat(txt, "and God said ");
    strcat(txt, "\n");
    p = put_file("p.txt", txt, strlen(txt));
    ck_assert_int_eq(rc_prompts_load(p, t, &lim, &pr), RC_ERR_USAGE);
    ck_assert_msg(strstr(rc_last_error(), "p.txt:2: prompt of ") && strstr(rc_last_error(), "plus 50 generated"), "%s",
                  rc_last_error());
    /* --num-prompts 1: only the first prompt is read */
    const rc_prompt_limits first = {1, 256, 50, NULL};
    ck_assert_msg(rc_prompts_load(p, t, &first, &pr) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(pr.n, 1);
    ck_assert_int_eq(pr.len[0], pr.max_len);
    ck_assert_str_eq(pr.text[0], "In the beginning");
    rc_prompts_free(&pr);
    rc_tokenizer_free(t);
}
END_TEST

/* .ids: only decimal ids 0..INT32_MAX; blank and '#' lines skipped */
START_TEST(test_prompts_ids_numbers)
{
    rc_prompts pr;
    const char *ok = "1 2 3\n\n# a comment\n4\t5\r\n2147483647\n";
    const char *p = put_file("ok.ids", ok, strlen(ok));
    ck_assert_msg(rc_prompts_load(p, NULL, NULL, &pr) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(pr.n, 3);
    ck_assert_int_eq(pr.max_len, 3);
    const int32_t want[] = {1, 2, 3, 4, 5, -1, INT32_MAX, -1, -1};
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(pr.tokens[i], want[i]);
    ck_assert_int_eq(pr.line[1], 4);
    ck_assert_int_eq(pr.line[2], 5);
    rc_prompts_free(&pr);
    static const struct {
        const char *body, *phrase;
    } bad[] = {
        {"1 +5\n", "bad.ids:1:3: expected a token id, found '+5'"},
        {"1 2147483648\n", "bad.ids:1:3: token id 2147483648 is out of range"},
        {"1 99999999999999999999999999\n", "bad.ids:1:3: token id"},
        {"5\n1 -1\n", "bad.ids:2:3: expected a token id, found '-1'"},
        {"1 2x\n", "found '2x'"},
        {"1 0x10\n", "found '0x10'"},
        {"1\f2\n", "bad.ids:1:1: expected a token id"},
        {"# nothing\n\n", "no prompts"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = put_file("bad.ids", bad[i].body, strlen(bad[i].body));
        ck_assert_int_eq(rc_prompts_load(p, NULL, NULL, &pr), RC_ERR_FORMAT);
        ck_assert_msg(strstr(rc_last_error(), bad[i].phrase), "'%s' lacks '%s'", rc_last_error(), bad[i].phrase);
        for (const char *c = rc_last_error(); *c; c++)
            ck_assert_int_ge((unsigned char)*c, 0x20);
    }
}
END_TEST

/* An enormous .txt / .jsonl line is refused before it is parsed or tokenized */
START_TEST(test_prompts_huge_line)
{
    rc_prompts pr;
    size_t n = ((size_t)9 << 20) + 32;
    char *b = malloc(n + 1);
    strcpy(b, "{\"tokens\": [1");
    size_t k = strlen(b);
    while (k + 4 < n) {
        memcpy(b + k, ",1", 2);
        k += 2;
    }
    memcpy(b + k, "]}\n", 3);
    k += 3;
    const char *p = put_file("huge.jsonl", b, k);
    ck_assert_int_eq(rc_prompts_load(p, NULL, NULL, &pr), RC_ERR_FORMAT);
    ck_assert_msg(strstr(rc_last_error(), "huge.jsonl:1: line of") && strstr(rc_last_error(), "8 MiB"), "%s",
                  rc_last_error());
    ck_assert_msg(max_rss_mb() < 200, "peak RSS %ld MB", max_rss_mb());
    free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("vs_hf");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_matches_hf, 0, N_TOK);
    tcase_add_test(tc, test_decode_skips_unknown_ids);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("load_errors");
    tcase_add_checked_fixture(te, err_setup, err_teardown);
    tcase_add_test(te, test_load_errors);
    tcase_add_test(te, test_post_specials_bounded);
    tcase_add_test(te, test_regex_limits);
    tcase_add_test(te, test_growth_bounded);
    tcase_add_test(te, test_split_string_pattern);
    tcase_add_test(te, test_many_added_tokens_fast);
    tcase_add_test(te, test_merged_with_previous);
    suite_add_tcase(s, te);
    TCase *tp = tcase_create("prompts");
    tcase_add_checked_fixture(tp, err_setup, err_teardown);
    tcase_add_test(tp, test_prompts_context_before_padding);
    tcase_add_test(tp, test_prompts_ids_numbers);
    tcase_add_test(tp, test_prompts_huge_line);
    suite_add_tcase(s, tp);
    return rc_test_run(s);
}
