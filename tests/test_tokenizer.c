/* The C tokenizer against HF `tokenizers` (data/fixtures/tokenizers, made by
 * tools/make_tokenizer_fixtures.py): every corpus string of every tokenizer
 * family must encode to exactly HF's ids (with and without special tokens)
 * and decode to HF's text. Malformed tokenizer.json files give clear errors. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

START_TEST(test_matches_hf)
{
    char p[4096];
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
        const json_t *text = json_object_get(o, "text");
        int32_t *ids;
        int64_t nid;
        ck_assert_msg(rc_tokenizer_encode(t, json_string_value(text), json_string_length(text), false, &ids, &nid) ==
                          RC_OK,
                      "%s", rc_last_error());
        bool e1 = ids_equal(ids, nid, json_object_get(o, "ids"));
        if (!e1 && n - enc_ok < 3) {
            printf("%s: MISMATCH for %s\n  ours:", k_names[_i], json_dumps(text, JSON_ENCODE_ANY));
            for (int64_t i = 0; i < nid && i < 40; i++)
                printf(" %d", ids[i]);
            printf("\n  hf:   %s\n", json_dumps(json_object_get(o, "ids"), 0));
        }
        enc_ok += e1;
        free(ids);
        ck_assert(rc_tokenizer_encode(t, json_string_value(text), json_string_length(text), true, &ids, &nid) ==
                  RC_OK);
        spec_ok += ids_equal(ids, nid, json_object_get(o, "ids_special"));
        free(ids);
        /* decode HF's ids */
        const json_t *hid = json_object_get(o, "ids");
        int64_t hn = (int64_t)json_array_size(hid);
        int32_t *hv = malloc(sizeof(int32_t) * (size_t)(hn + 1));
        for (int64_t i = 0; i < hn; i++)
            hv[i] = (int32_t)json_integer_value(json_array_get(hid, (size_t)i));
        char *dec;
        size_t dl;
        ck_assert(rc_tokenizer_decode(t, hv, hn, false, &dec, &dl) == RC_OK);
        const json_t *want = json_object_get(o, "decoded");
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
    ck_assert_int_eq(enc_ok, n);
    ck_assert_int_eq(spec_ok, n);
    ck_assert_int_eq(dec_ok, dec_n);
    rc_tokenizer_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("vs_hf");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_matches_hf, 0, N_TOK);
    suite_add_tcase(s, tc);
    return rc_test_run(s);
}
