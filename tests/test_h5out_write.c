/* test_h5out_write.c: test_h5out's writing tests: round trips, refusals, invalid results
 * (test_h5out.c holds the fixtures, the checks and the suite). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "results.h"
#include "rollout.h"
#include "routing.h"
#include "status.h"

#include "testutil.h"
#include "test_h5out.h"

/* ------------------------------------------------------------------------ */
/* tests: writing                                                           */

/* /len_NNNN's attribute order: every RC_LF_H5 row of rc_len_fields has its own
 * place, 1, 2, ... with no gap (write_len_attrs stops at the first missing
 * place and takes the first row of a place: a shared or skipped place would
 * drop attributes silently) */
START_TEST(test_len_attr_places)
{
    int max = 0, n = 0;
    for (size_t i = 0; i < rc_n_len_fields; i++)
        if (rc_len_fields[i].where & RC_LF_H5) {
            n++;
            max = rc_len_fields[i].h5_pos > max ? rc_len_fields[i].h5_pos : max;
            for (size_t j = 0; j < i; j++)
                if (rc_len_fields[j].where & RC_LF_H5)
                    ck_assert_msg(rc_len_fields[j].h5_pos != rc_len_fields[i].h5_pos, "%s and %s share place %d",
                                  rc_len_fields[j].name, rc_len_fields[i].name, rc_len_fields[i].h5_pos);
        }
    ck_assert_int_eq(max, n);
}
END_TEST

START_TEST(test_roundtrip_full)
{
    rc_results *r = build_default(true);
    /* sanity of the fixture: padding, a NaN in the forward pass, an identical pair */
    ck_assert_int_eq(r->gen_valid[2], 5);
    ck_assert_int_eq(r->gen_tokens[2 * 7 + 5], -1);
    ck_assert(isnan(r->logprob_gen[2 * 7 + 6]));
    ck_assert(isnan(r->lens[1].logprob_fwd[1 * 7 + 4]));
    ck_assert(!isnan(r->logprob_gen[1 * 7 + 4]));
    ck_assert(r->lens[0].logprob_fwd[0] == r->logprob_gen[0]);
    ck_assert_ptr_null(rc_h5_temp_path());

    const char *out = tpath("out.h5");
    rc_status st = rc_h5_write(r, out, false);
    ck_assert_msg(st == RC_OK, "rc_h5_write: %s", rc_last_error());
    ck_assert_ptr_null(rc_h5_temp_path());
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    check_file(out, r);

    /* spot checks of the derived datasets against hand-computed values */
    hid_t f = H5Fopen(out, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "len_0007", H5P_DEFAULT);
    float *ratio = read_ds(g, "ratio", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, 2, 5, 7);
    float *lr = read_ds(g, "log_ratio", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, 2, 5, 7);
    ck_assert(ratio[0] == 1.0f && lr[0] == 0.0f);   /* identical pair */
    ck_assert(isnan(ratio[1 * 7 + 4]) && isnan(lr[1 * 7 + 4])); /* NaN forward */
    ck_assert(isnan(ratio[2 * 7 + 5]) && isnan(lr[2 * 7 + 6])); /* past the end */
    ck_assert(!isnan(ratio[2 * 7 + 4]) && ratio[2 * 7 + 4] != 1.0f);
    free(ratio);
    free(lr);
    H5Gclose(g);
    H5Fclose(f);
    destroy(r);
}
END_TEST

START_TEST(test_no_reference)
{
    rc_results *r = build_default(false);
    const char *out = tpath("noref.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r); /* includes: no /reference link, reference = "none" */
    destroy(r);
}
END_TEST

START_TEST(test_empty_run)
{
    rc_results *r = build(0, 0, 0, 0, NULL, 0, false);
    const char *out = tpath("empty.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_no_sequences)
{
    /* zero rows but non-zero columns: [0, 7] and [0, 3] datasets */
    static const int64_t lens[1] = {3};
    rc_results *r = build(2, 3, 0, 7, lens, 1, true);
    const char *out = tpath("noseq.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_chunking_larger)
{
    /* 300 x 1000: chunks of [65, 1000]; three lengths, two cross pairs */
    static const int64_t lens[3] = {1000, 10, 250};
    rc_results *r = build(7, 33, 300, 1000, lens, 3, true);
    const char *out = tpath("big.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_wide_rows)
{
    /* a row longer than the chunk target: chunks of [1, 70000] */
    static const int64_t lens[1] = {70000};
    rc_results *r = build(1, 2, 3, 70000, lens, 1, false);
    const char *out = tpath("wide.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    check_file(out, r);
    destroy(r);
}
END_TEST

START_TEST(test_utf8_strings)
{
    rc_results *r = build_default(true);
    free(r->command_line);
    free(r->model_path);
    r->command_line = xstrdup("run --model /m/\xff\xfe x \xc3\xa9 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end");
    r->model_path = NULL;
    const char *out = tpath("utf8.h5");
    ck_assert_msg(rc_h5_write(r, out, false) == RC_OK, "%s", rc_last_error());
    /* each ill-formed byte becomes U+FFFD (EF BF BD); valid "é" is kept */
    const char *want = "run --model /m/\xef\xbf\xbd\xef\xbf\xbd x \xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd "
                       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                       "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd "
                       "\xef\xbf\xbd\xef\xbf\xbd end";
    check_file_ex(out, r, want, "");
    destroy(r);
}
END_TEST

START_TEST(test_relative_path)
{
    char cwd[PATH_MAX];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(g_dir), 0);
    rc_results *r = build_default(true);
    rc_status st = rc_h5_write(r, "rel.h5", false);
    const char *msg = rc_last_error();
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_msg(st == RC_OK, "%s", msg);
    ck_assert_str_eq(dir_listing(g_dir), "rel.h5");
    check_file(tpath("rel.h5"), r);
    destroy(r);
}
END_TEST

unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    unsigned char *b = xcalloc((size_t)n, 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

START_TEST(test_reproducible)
{
    /* no time stamps in the file: the same results give the same bytes, even
     * a second later */
    rc_results *r = build_default(true);
    ck_assert_msg(rc_h5_write(r, tpath("a.h5"), false) == RC_OK, "%s", rc_last_error());
    struct timespec ts = {1, 100000000};
    nanosleep(&ts, NULL);
    ck_assert_msg(rc_h5_write(r, tpath("b.h5"), false) == RC_OK, "%s", rc_last_error());
    size_t na, nb;
    unsigned char *a = slurp(tpath("a.h5"), &na), *b = slurp(tpath("b.h5"), &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(a, b, na) == 0, "the two files differ");
    free(a);
    free(b);
    destroy(r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* tests: overwrite rules and failures                                      */

START_TEST(test_refuse_overwrite)
{
    rc_results *r = build_default(true);
    const char *out = tpath("out.h5");
    write_text(out, "keep me");
    rc_clear_error();
    rc_status st = rc_h5_write(r, out, false);
    ck_assert_int_eq(st, RC_ERR_USAGE);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s exists (use --force to overwrite, or --out FILE)", out);
    ck_assert_str_eq(rc_last_error(), want);
    check_text(out, "keep me");
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    ck_assert_ptr_null(rc_h5_temp_path());

    /* also for an existing HDF5 file and for a dangling symlink */
    const char *out2 = tpath("real.h5");
    ck_assert_int_eq(rc_h5_write(r, out2, false), RC_OK);
    ck_assert_int_eq(rc_h5_write(r, out2, false), RC_ERR_USAGE);
    const char *link = tpath("dangling.h5");
    ck_assert_int_eq(symlink("nowhere", link), 0);
    ck_assert_int_eq(rc_h5_write(r, link, false), RC_ERR_USAGE);
    ck_assert_str_eq(dir_listing(g_dir), "dangling.h5,out.h5,real.h5");
    destroy(r);
}
END_TEST

START_TEST(test_force_overwrite)
{
    rc_results *r = build_default(true);
    const char *out = tpath("out.h5");
    write_text(out, "old contents");
    ck_assert_msg(rc_h5_write(r, out, true) == RC_OK, "%s", rc_last_error());
    check_file(out, r);

    /* overwrite an existing results file with different contents */
    rc_results *r2 = build_default(false);
    r2->seed = 42;
    ck_assert_msg(rc_h5_write(r2, out, true) == RC_OK, "%s", rc_last_error());
    check_file(out, r2);
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    ck_assert_ptr_null(rc_h5_temp_path());
    destroy(r);
    destroy(r2);
}
END_TEST

START_TEST(test_missing_folder)
{
    rc_results *r = build_default(true);
    const char *out = tpath("no/such/dir/out.h5");
    rc_status st = rc_h5_write(r, out, false);
    ck_assert_int_eq(st, RC_ERR_IO);
    const char *msg = rc_last_error();
    ck_assert_msg(strncmp(msg, out, strlen(out)) == 0, "message does not name the path: %s", msg);
    ck_assert_ptr_nonnull(strstr(msg, "No such file or directory"));
    ck_assert_ptr_null(strchr(msg, '\n'));
    ck_assert_str_eq(dir_listing(g_dir), "");
    ck_assert_ptr_null(rc_h5_temp_path());
    ck_assert_int_eq(rc_h5_write(r, out, true), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "");

    /* a path whose folder is a regular file */
    write_text(tpath("file"), "x");
    ck_assert_int_eq(rc_h5_write(r, tpath("file/out.h5"), true), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "file");
    /* a path ending in '/' */
    ck_assert_int_eq(rc_h5_write(r, tpath("sub/"), true), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "file");
    destroy(r);
}
END_TEST

START_TEST(test_rename_fails)
{
    /* The output path is a non-empty folder: refused before anything is
     * written (it used to fail only at rename(), EISDIR), with or without
     * force. */
    rc_results *r = build_default(true);
    const char *out = tpath("out.h5");
    ck_assert_int_eq(mkdir(out, 0755), 0);
    write_text(tpath("out.h5/inside"), "precious");
    rc_status st = rc_h5_write(r, out, true);
    ck_assert_int_eq(st, RC_ERR_IO);
    const char *msg = rc_last_error();
    ck_assert_msg(strncmp(msg, out, strlen(out)) == 0, "message does not name the path: %s", msg);
    ck_assert_ptr_nonnull(strstr(msg, "is a folder"));
    ck_assert_ptr_null(strchr(msg, '\n'));
    ck_assert_str_eq(dir_listing(g_dir), "out.h5"); /* no temporary file left */
    ck_assert_str_eq(dir_listing(out), "inside");
    check_text(tpath("out.h5/inside"), "precious");
    ck_assert_ptr_null(rc_h5_temp_path());

    /* without force too */
    ck_assert_int_eq(rc_h5_write(r, out, false), RC_ERR_IO);
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");

    /* and a later write elsewhere still works (no HDF5 state left behind) */
    ck_assert_msg(rc_h5_write(r, tpath("ok.h5"), false) == RC_OK, "%s", rc_last_error());
    check_file(tpath("ok.h5"), r);
    destroy(r);
}
END_TEST

/* Each mutation makes the results inconsistent; rc_h5_write must say
 * RC_ERR_INTERNAL and create nothing. */
typedef void (*mutate_fn)(rc_results *r);
static void m_len_too_big(rc_results *r) { r->lens[0].len = r->gen_len + 1; }
static void m_len_zero(rc_results *r) { r->lens[0].len = 0; }
static void m_len_dup(rc_results *r) { r->lens[1].len = r->lens[0].len; }
static void m_null_gen(rc_results *r) { free(r->logprob_gen); r->logprob_gen = NULL; }
static void m_null_fwd(rc_results *r) { free(r->lens[1].logprob_fwd); r->lens[1].logprob_fwd = NULL; }
static void m_null_pos(rc_results *r) { free(r->lens[0].pos_ratio_std); r->lens[0].pos_ratio_std = NULL; }
static void m_null_seq(rc_results *r) { free(r->lens[1].seq_log_ratio_mean); r->lens[1].seq_log_ratio_mean = NULL; }
static void m_valid_big(rc_results *r) { r->gen_valid[3] = (int32_t)r->gen_len + 1; }
static void m_prompt_idx(rc_results *r) { r->seq_prompt[4] = (int32_t)r->n_prompts; }
static void m_prompt_len(rc_results *r) { r->prompt_len[0] = -1; }
static void m_neg_seq(rc_results *r) { r->n_seq = -1; }
static void m_neg_lens(rc_results *r) { r->n_lens = -2; }
static void m_null_cross(rc_results *r) { r->n_cross = 1; free(r->cross); r->cross = NULL; }
static void m_unterminated(rc_results *r) { memset(r->dtype, 'x', sizeof r->dtype); }

static const struct {
    const char *name;
    mutate_fn fn;
} k_mutations[] = {
    {"len > gen_len", m_len_too_big},  {"len 0", m_len_zero},
    {"duplicate len", m_len_dup},      {"NULL logprob_gen", m_null_gen},
    {"NULL logprob_fwd", m_null_fwd},  {"NULL pos_ratio_std", m_null_pos},
    {"NULL seq_log_ratio_mean", m_null_seq},
    {"gen_valid > gen_len", m_valid_big}, {"seq_prompt out of range", m_prompt_idx},
    {"prompt_len < 0", m_prompt_len},  {"n_seq < 0", m_neg_seq},
    {"n_lens < 0", m_neg_lens},        {"NULL cross", m_null_cross},
    {"unterminated dtype", m_unterminated},
};

START_TEST(test_invalid_results)
{
    const char *out = tpath("out.h5");
    for (int i = 0; i < NELEM(k_mutations); i++) {
        rc_results *r = build_default(true);
        k_mutations[i].fn(r);
        rc_clear_error();
        rc_status st = rc_h5_write(r, out, true);
        ck_assert_msg(st == RC_ERR_INTERNAL, "%s: got %s (%s)", k_mutations[i].name,
                      rc_status_name(st), rc_last_error());
        const char *msg = rc_last_error();
        ck_assert_msg(strncmp(msg, out, strlen(out)) == 0, "%s: message does not name the path: %s",
                      k_mutations[i].name, msg);
        ck_assert_msg(strcmp(dir_listing(g_dir), "") == 0, "%s: left %s", k_mutations[i].name,
                      dir_listing(g_dir));
        ck_assert_ptr_null(rc_h5_temp_path());
        if (r->n_seq < 0)
            r->n_seq = 5;
        if (r->n_lens < 0)
            r->n_lens = 2;
        if (r->n_cross == 1 && !r->cross)
            r->n_cross = 0;
        destroy(r);
    }

    /* an invalid write over an existing file leaves that file alone */
    write_text(out, "keep me");
    rc_results *r = build_default(true);
    m_len_too_big(r);
    ck_assert_int_eq(rc_h5_write(r, out, true), RC_ERR_INTERNAL);
    check_text(out, "keep me");
    ck_assert_str_eq(dir_listing(g_dir), "out.h5");
    destroy(r);

    ck_assert_int_eq(rc_h5_write(NULL, out, true), RC_ERR_INTERNAL);
    r = build_default(true);
    ck_assert_int_eq(rc_h5_write(r, NULL, true), RC_ERR_INTERNAL);
    ck_assert_int_eq(rc_h5_write(r, "", true), RC_ERR_USAGE);
    destroy(r);
}
END_TEST

void write_tests_in_write(TCase *tc)
{
    tcase_add_test(tc, test_len_attr_places);
    tcase_add_test(tc, test_roundtrip_full);
    tcase_add_test(tc, test_no_reference);
    tcase_add_test(tc, test_empty_run);
    tcase_add_test(tc, test_no_sequences);
    tcase_add_test(tc, test_chunking_larger);
    tcase_add_test(tc, test_wide_rows);
    tcase_add_test(tc, test_utf8_strings);
    tcase_add_test(tc, test_relative_path);
    tcase_add_test(tc, test_reproducible);
}

void write_tests_in_failures(TCase *tc)
{
    tcase_add_test(tc, test_refuse_overwrite);
    tcase_add_test(tc, test_force_overwrite);
    tcase_add_test(tc, test_missing_folder);
    tcase_add_test(tc, test_rename_fails);
    tcase_add_test(tc, test_invalid_results);
}
