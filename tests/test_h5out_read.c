/* test_h5out_read.c: test_h5out's reader tests: src/results/h5in.c and --rollouts-from on
 * hostile files, and the CLI's replay (test_h5out.c holds the fixtures and the suite). */
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
/* tests: the reader (src/results/h5in.c) and --rollouts-from on hostile files       */
/*                                                                          */
/* Each test starts from a valid results file (written by rc_h5_write or by */
/* the CLI), then rewrites one dataset or attribute with the HDF5 C API and */
/* runs rc_h5_read and/or the CLI (`report`, `run --rollouts-from`) on it.   */

static char g_err[8192];

/* Run `ratiocheck ARGS` from the source root; stderr goes to g_err. */
static int run_cli(const char *args)
{
    char errp[PATH_MAX + 32];
    snprintf(errp, sizeof errp, "%s/stderr.txt", g_dir);
    const char *root = getenv("RC_SOURCE_DIR");
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >/dev/null 2>'%s' </dev/null", root ? root : ".", RC_CLI, args,
             errp);
    int st = system(cmd);
    FILE *f = fopen(errp, "rb");
    size_t n = f ? fread(g_err, 1, sizeof g_err - 1, f) : 0;
    g_err[n] = '\0';
    if (f)
        fclose(f);
    unlink(errp);
    ck_assert_msg(st != -1 && WIFEXITED(st), "ratiocheck %s did not exit normally", args);
    return WEXITSTATUS(st);
}

/* stderr is exactly one line "ratiocheck: ..." that names `path` and carries
 * nothing from HDF5's own error printer */
void assert_one_line(const char *path)
{
    size_t n = strlen(g_err);
    ck_assert_msg(n > 0 && g_err[n - 1] == '\n' && strchr(g_err, '\n') == g_err + n - 1,
                  "stderr is not one line: [%s]", g_err);
    ck_assert_msg(strncmp(g_err, "ratiocheck: ", 12) == 0, "stderr: [%s]", g_err);
    ck_assert_msg(strstr(g_err, path) != NULL, "stderr does not name %s: [%s]", path, g_err);
    ck_assert_msg(strstr(g_err, "HDF5-DIAG") == NULL, "stderr: [%s]", g_err);
}

/* the last library error is one line naming `path` */
static void assert_msg_names(const char *path)
{
    const char *m = rc_last_error();
    ck_assert_msg(strstr(m, path) != NULL, "message does not name %s: %s", path, m);
    ck_assert_msg(strchr(m, '\n') == NULL, "message is not one line: %s", m);
}

void copy_file(const char *from, const char *to)
{
    size_t n;
    unsigned char *b = slurp(from, &n);
    FILE *f = fopen(to, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", to);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(b);
}

/* A results file written by the CLI on the neox_parallel fixture (vocab 320,
 * 64 positions): 4 prompts (5, 3, 3, 4 tokens) x 2 samples, --len 2,4. Made
 * once per suite run (in g_base), copied to `dst` for each test. */
static void cli_results(const char *dst)
{
    char src[PATH_MAX], ids[PATH_MAX];
    snprintf(src, sizeof src, "%s/cli.h5", g_base);
    if (access(src, F_OK) != 0) {
        snprintf(ids, sizeof ids, "%s/p.ids", g_base);
        write_text(ids, "1 2 3 4 5\n10 20 30\n7 8 9\n40 41 42 43\n");
        char args[3 * PATH_MAX];
        snprintf(args, sizeof args,
                 "--model data/fixtures/neox_parallel --backend cpu --prompts '%s' --len 2,4 --samples 2 -q --out '%s'", ids, src);
        ck_assert_msg(run_cli(args) == 0, "making the CLI results file: %s", g_err);
    }
    copy_file(src, dst);
}

hid_t h5_open_rw(const char *path)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "H5Fopen %s", path);
    return f;
}

/* Replace dataset `name` (absolute) with a new one of file type ftype and the
 * given shape; `data` (in mtype) is written unless NULL. chunked: chunks of at
 * most 1024 x 64 elements, shuffle + deflate (like the writer). */
void put_ds(hid_t f, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims, const void *data,
                   bool chunked)
{
    if (H5Lexists(f, name, H5P_DEFAULT) > 0)
        ck_assert_int_ge(H5Ldelete(f, name, H5P_DEFAULT), 0);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) {
        hsize_t ch[2] = {dims[0] < 1024 ? dims[0] : 1024, rank == 2 ? (dims[1] < 64 ? dims[1] : 64) : 1};
        ch[0] = ch[0] ? ch[0] : 1;
        ch[1] = ch[1] ? ch[1] : 1;
        ck_assert_int_ge(H5Pset_chunk(dcpl, rank, ch), 0);
        ck_assert_int_ge(H5Pset_shuffle(dcpl), 0);
        ck_assert_int_ge(H5Pset_deflate(dcpl, 4), 0);
    }
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t ds = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "H5Dcreate2 %s", name);
    if (data)
        ck_assert_int_ge(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Pclose(dcpl);
}

/* Replace attribute `name` of the root group: n elements (n == 0: scalar). */
static void put_attr(hid_t f, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *data)
{
    if (H5Aexists(f, name) > 0)
        ck_assert_int_ge(H5Adelete(f, name), 0);
    hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_msg(a >= 0, "H5Acreate2 %s", name);
    ck_assert_int_ge(H5Awrite(a, mtype, data), 0);
    H5Aclose(a);
    H5Sclose(sp);
}

void put_attr_i64(hid_t f, const char *name, int64_t v)
{
    put_attr(f, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &v);
}

static hid_t vlen_str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

/* Read int32 dataset `name`, set element `index` to v, write it back. */
void patch_i32(const char *path, const char *name, int64_t index, int32_t v)
{
    hid_t f = h5_open_rw(path);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "H5Dopen2 %s", name);
    hid_t sp = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    ck_assert_int_gt(n, index);
    int32_t *b = xcalloc((size_t)n, sizeof *b);
    ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b), 0);
    b[index] = v;
    ck_assert_int_ge(H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b), 0);
    free(b);
    H5Sclose(sp);
    H5Dclose(ds);
    H5Fclose(f);
}

static int32_t get_i32(const char *path, const char *name, int64_t index)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "H5Dopen2 %s", name);
    hid_t sp = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    ck_assert_int_gt(n, index);
    int32_t *b = xcalloc((size_t)n, sizeof *b);
    ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b), 0);
    int32_t v = b[index];
    free(b);
    H5Sclose(sp);
    H5Dclose(ds);
    H5Fclose(f);
    return v;
}

/* `run --rollouts-from FILE` on neox_parallel (or `model`); returns the exit code */
static int replay(const char *file, const char *model)
{
    char args[3 * PATH_MAX];
    snprintf(args, sizeof args, "--model data/fixtures/%s --backend cpu --rollouts-from '%s' --len 2,4 -q --out '%s' --force",
             model ? model : "neox_parallel", file, tpath("replayed.h5"));
    return run_cli(args);
}

int report(const char *file)
{
    char args[PATH_MAX + 32];
    snprintf(args, sizeof args, "report '%s'", file);
    return run_cli(args);
}

/* --- the control: the CLI's own file reads, reports and replays --- */
START_TEST(test_replay_ok)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    rc_results r;
    ck_assert_msg(rc_h5_read(a, &r) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(r.n_seq, 8);
    ck_assert_int_eq(r.prompt_max, 5);
    ck_assert_int_eq(rc_results_check_replay(&r, a, 320, 64), RC_OK);
    rc_results_free(&r);
    ck_assert_int_eq(report(a), 0);
    ck_assert_int_eq(replay(a, NULL), 0);
    char args[3 * PATH_MAX];
    snprintf(args, sizeof args, "diff '%s' '%s'", a, tpath("replayed.h5"));
    ck_assert_msg(run_cli(args) == 0, "%s", g_err);
}
END_TEST

/* defect 1: replayed generated token ids index log-prob rows unchecked */
START_TEST(test_replay_token_negative)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/tokens", 1, -5); /* sequence 0, position 1: valid */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "-5") != NULL, "%s", g_err);
}
END_TEST

START_TEST(test_replay_token_vocab)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/tokens", 4 * 3 + 2, 320); /* sequence 3, position 2; vocab is 320 */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "vocabulary") != NULL, "%s", g_err);
    patch_i32(a, "/rollouts/tokens", 4 * 3 + 2, 1 << 30);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_larger_vocab)
{
    /* a rollout of a 320-token model replayed in neox_sequential (288 tokens);
     * the sampled ids already go past 287, and one surely does */
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/tokens", 4 * 5 + 1, 300);
    ck_assert_int_eq(replay(a, "neox_sequential"), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "vocabulary [0, 288)") != NULL, "%s", g_err);
}
END_TEST

START_TEST(test_replay_float_tokens)
{
    /* /rollouts/tokens stored as floats, one of them NaN */
    const char *a = tpath("a.h5");
    cli_results(a);
    float tok[8 * 4];
    for (int i = 0; i < 8 * 4; i++)
        tok[i] = (float)get_i32(a, "/rollouts/tokens", i);
    tok[5] = NAN;
    hid_t f = h5_open_rw(a);
    hsize_t dims[2] = {8, 4};
    put_ds(f, "/rollouts/tokens", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims, tok, true);
    H5Fclose(f);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "/rollouts/tokens") != NULL, "%s", g_err);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_prompt_len)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    /* prompt 1 claims 8 tokens in rows of 5: the prompt copy would run into
     * the next prompt (or past the end for the last one) */
    patch_i32(a, "/prompts/lengths", 3, 8);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
    rc_results r;
    ck_assert_int_eq(rc_h5_read(a, &r), RC_ERR_FORMAT);
    assert_msg_names(a);
    /* an empty prompt, and a negative length */
    patch_i32(a, "/prompts/lengths", 3, 0);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    patch_i32(a, "/prompts/lengths", 3, -2);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_prompt_context)
{
    /* prompts of 70 tokens: longer than the model's 64 positions */
    const char *a = tpath("a.h5");
    cli_results(a);
    int32_t tok[4 * 70], len[4] = {70, 70, 70, 70};
    for (int i = 0; i < 4 * 70; i++)
        tok[i] = i % 300;
    hid_t f = h5_open_rw(a);
    hsize_t d2[2] = {4, 70}, d1[1] = {4};
    put_ds(f, "/prompts/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d2, tok, true);
    put_ds(f, "/prompts/lengths", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, len, false);
    H5Fclose(f);
    ck_assert_int_eq(report(a), 0); /* a valid file... */
    ck_assert_int_eq(replay(a, NULL), 4); /* ...that this model cannot replay */
    assert_one_line(a);
    ck_assert_msg(strstr(g_err, "64") != NULL, "%s", g_err);
}
END_TEST

START_TEST(test_replay_prompt_token)
{
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/prompts/tokens", 5 + 1, -7); /* prompt 1, position 1 */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    patch_i32(a, "/prompts/tokens", 5 + 1, 320);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_samples_overflow)
{
    /* 4 prompts x (2^62 + 2) samples wraps to 8 = num_sequences in int64 */
    const char *a = tpath("a.h5");
    cli_results(a);
    hid_t f = h5_open_rw(a);
    put_attr_i64(f, "samples", ((int64_t)1 << 62) + 2);
    H5Fclose(f);
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
    f = h5_open_rw(a);
    put_attr_i64(f, "samples", -3);
    H5Fclose(f);
    ck_assert_int_eq(report(a), 4);
    assert_one_line(a);
}
END_TEST

START_TEST(test_replay_seq_mapping)
{
    /* sequence 0 claims prompt 1: the replay pairs tokens with prompts by
     * position (s / samples), so the file must agree */
    const char *a = tpath("a.h5");
    cli_results(a);
    patch_i32(a, "/rollouts/prompt_index", 0, 1);
    ck_assert_int_eq(report(a), 0); /* a valid file for report */
    ck_assert_int_eq(replay(a, NULL), 4);
    assert_one_line(a);
}
END_TEST

/* rc_run_check itself checks replayed ids before generate() indexes log-prob
 * rows with them (whoever calls it) */
START_TEST(test_run_check_forced)
{
    char p[PATH_MAX];
    rc_model *m = NULL;
    rc_test_source_path(p, sizeof p, "data/fixtures/neox_parallel");
    ck_assert_msg(rc_model_load(p, &m) == RC_OK, "%s", rc_last_error());
    static const int32_t toks[2 * 3] = {1, 5, 9, 33, 2, -1};
    static const int32_t lens[2] = {3, 2};
    int32_t forced[4 * 5], valid[4] = {5, 5, 3, 5};
    for (int i = 0; i < 4 * 5; i++)
        forced[i] = (i % 5) < valid[i / 5] ? 10 + i : -1;
    rc_rollout_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_prompts = 2;
    cfg.prompt_max = 3;
    cfg.prompt_tokens = toks;
    cfg.prompt_len = lens;
    cfg.samples = 2;
    cfg.batch = 4;
    cfg.n_lens = 1;
    cfg.lens[0] = 4;
    cfg.sampling.top_k = 0;
    cfg.sampling.top_p = 1.0;
    cfg.num = rc_numerics_fp32();
    cfg.forced_tokens = forced;
    cfg.forced_valid = valid;
    cfg.forced_len = 5;
    rc_backend *be = NULL;
    ck_assert(rc_backend_cpu_create(1, RC_KERNELS_ENGINE, &be) == RC_OK);
    rc_results r;
    memset(&r, 0, sizeof r);
    ck_assert_msg(rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, &r) == RC_OK, "%s", rc_last_error());
    ck_assert_int_eq(r.gen_tokens[1 * 4 + 2], forced[1 * 5 + 2]); /* replayed */
    ck_assert_int_eq(r.gen_valid[2], 3);
    rc_results_free(&r);
    static const struct {
        int at;
        int32_t id, valid2;
    } bad[] = {{1 * 5 + 2, -5, 3}, {3 * 5 + 0, 320, 3}, {2 * 5 + 1, 1 << 30, 3}, {0, 10, 6}, {0, 10, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t f2[4 * 5], v2[4];
        memcpy(f2, forced, sizeof f2);
        memcpy(v2, valid, sizeof v2);
        f2[bad[i].at] = bad[i].id;
        v2[2] = bad[i].valid2;
        cfg.forced_tokens = f2;
        cfg.forced_valid = v2;
        memset(&r, 0, sizeof r);
        rc_clear_error();
        rc_status s = rc_run_check(m, be, NULL, &cfg, NULL, NULL, NULL, &r);
        ck_assert_msg(s == RC_ERR_FORMAT, "case %zu: %s (%s)", i, rc_status_name(s), rc_last_error());
        ck_assert_msg(strstr(rc_last_error(), "replayed rollout") != NULL, "case %zu: %s", i, rc_last_error());
        rc_results_free(&r);
    }
    rc_backend_destroy(be);
    rc_model_free(m);
}
END_TEST

/* defect 2: datasets are read into buffers sized by attributes */
static const char *write_default_with_text(void)
{
    rc_results *r = build_default(false);
    r->prompt_text = xcalloc(3, sizeof(char *));
    r->completion = xcalloc(5, sizeof(char *));
    for (int i = 0; i < 3; i++)
        r->prompt_text[i] = xstrdup("a prompt");
    for (int i = 0; i < 5; i++)
        r->completion[i] = xstrdup("a completion");
    const char *out = tpath("t.h5");
    ck_assert_msg(rc_h5_write(r, out, true) == RC_OK, "%s", rc_last_error());
    for (int i = 0; i < 3; i++)
        free(r->prompt_text[i]);
    for (int i = 0; i < 5; i++)
        free(r->completion[i]);
    free(r->prompt_text);
    free(r->completion);
    destroy(r);
    return out;
}

void expect_read_error(const char *path, rc_status want, const char *mention)
{
    rc_results r;
    rc_clear_error();
    rc_status st = rc_h5_read(path, &r);
    ck_assert_msg(st == want, "rc_h5_read: got %s, want %s (%s)", rc_status_name(st), rc_status_name(want),
                  rc_last_error());
    assert_msg_names(path);
    if (mention)
        ck_assert_msg(strstr(rc_last_error(), mention) != NULL, "message does not mention %s: %s", mention,
                      rc_last_error());
}

/* files of earlier versions still read: no `device` attribute (before the
 * CUDA backend), /reference/logprob in float32 (before --reference fp64), no
 * text datasets (before text prompts) */
START_TEST(test_read_older_layouts)
{
    rc_results *r = build_default(true);
    const char *t = tpath("old.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    hid_t f = h5_open_rw(t);
    ck_assert_int_ge(H5Adelete(f, "device"), 0);
    float ref32[5 * 7];
    for (int i = 0; i < 5 * 7; i++)
        ref32[i] = (float)r->logprob_ref[i];
    hsize_t d[2] = {5, 7};
    put_ds(f, "/reference/logprob", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d, ref32, true);
    ck_assert_int_ge(H5Ldelete(f, "/rollouts/entropy", H5P_DEFAULT), 0); /* before the strata */
    ck_assert_int_ge(H5Ldelete(f, "/growth", H5P_DEFAULT), 0);
    H5Fclose(f);
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert_ptr_null(back.entropy_gen);
    ck_assert(back.lens[0].st.strata[RC_STRATA_PROB].present);
    ck_assert(!back.lens[0].st.strata[RC_STRATA_ENTROPY].present);
    ck_assert_str_eq(back.device, "");
    ck_assert_ptr_null(back.prompt_text);
    ck_assert_ptr_null(back.completion);
    ck_assert(back.logprob_ref[3] == (double)ref32[3]);
    rc_results_free(&back);
    destroy(r);
}
END_TEST

START_TEST(test_read_text_extent)
{
    const char *t = write_default_with_text();
    rc_results r;
    ck_assert_msg(rc_h5_read(t, &r) == RC_OK, "%s", rc_last_error());
    ck_assert_str_eq(r.prompt_text[2], "a prompt");
    ck_assert_str_eq(r.completion[4], "a completion");
    rc_results_free(&r);
    /* 64 prompt texts for 3 prompts */
    const char *many[64];
    for (int i = 0; i < 64; i++)
        many[i] = "overflow";
    hid_t f = h5_open_rw(t), st = vlen_str_type();
    hsize_t d[1] = {64};
    put_ds(f, "/prompts/text", st, st, 1, d, many, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/prompts/text");
    ck_assert_int_eq(report(t), 4);
    assert_one_line(t);
    /* and too few */
    f = h5_open_rw(t);
    d[0] = 2;
    put_ds(f, "/prompts/text", st, st, 1, d, many, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/prompts/text");
    H5Tclose(st);
}
END_TEST

START_TEST(test_read_completion_shape)
{
    const char *t = write_default_with_text();
    const char *many[5 * 8];
    for (int i = 0; i < 5 * 8; i++)
        many[i] = "x";
    hid_t f = h5_open_rw(t), st = vlen_str_type();
    hsize_t d[2] = {5, 8}; /* rank 2 */
    put_ds(f, "/rollouts/completion", st, st, 2, d, many, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/completion");
    /* integers where strings belong */
    int32_t ints[5] = {1, 2, 3, 4, 5};
    f = h5_open_rw(t);
    d[0] = 5;
    put_ds(f, "/rollouts/completion", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d, ints, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/completion");
    H5Tclose(st);
}
END_TEST

/* /rollouts/entropy must be [S, T] floats like the log-probs */
START_TEST(test_read_entropy_shape)
{
    rc_results *r = build_default(true);
    const char *t = tpath("ent.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error());
    ck_assert_mem_eq(back.entropy_gen, r->entropy_gen, 5 * 7 * sizeof(float));
    ck_assert(back.lens[0].st.strata[RC_STRATA_ENTROPY].present);
    rc_results_free(&back);
    float v[5 * 8] = {0};
    hsize_t d[2] = {5, 8}; /* one column too many */
    hid_t f = h5_open_rw(t);
    put_ds(f, "/rollouts/entropy", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d, v, true);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/entropy");
    int32_t ints[5 * 7] = {0};
    d[1] = 7; /* integers where floats belong */
    f = h5_open_rw(t);
    put_ds(f, "/rollouts/entropy", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d, ints, true);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/entropy");
    destroy(r);
}
END_TEST

START_TEST(test_read_attr_not_scalar)
{
    /* an array attribute where a scalar is read: the whole array used to be
     * read into one int64_t (or one char *) on the stack */
    const char *t = write_default_with_text();
    int64_t big[256];
    for (int i = 0; i < 256; i++)
        big[i] = 0x4141414141414141LL;
    hid_t f = h5_open_rw(t);
    put_attr(f, "seed", H5T_STD_I64LE, H5T_NATIVE_INT64, 256, big);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "seed");

    t = write_default_with_text();
    const char *strs[64];
    for (int i = 0; i < 64; i++)
        strs[i] = "bf16";
    hid_t st = vlen_str_type();
    f = h5_open_rw(t);
    put_attr(f, "dtype", st, st, 64, strs);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "dtype");
    ck_assert_int_eq(report(t), 4);
    assert_one_line(t);
    H5Tclose(st);
}
END_TEST

START_TEST(test_read_type_class)
{
    /* floats where integers belong: dataset and attribute */
    const char *t = write_default_with_text();
    double lens[5] = {7, 7, 5, 7, 7};
    hid_t f = h5_open_rw(t);
    hsize_t d[1] = {5};
    put_ds(f, "/rollouts/lengths", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, d, lens, false);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/lengths");

    t = write_default_with_text();
    double ns = 5.5;
    f = h5_open_rw(t);
    put_attr(f, "num_sequences", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &ns);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "num_sequences");

    t = write_default_with_text();
    double L[2] = {3.0, NAN};
    f = h5_open_rw(t);
    put_attr(f, "lengths", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, L);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "lengths");
}
END_TEST

START_TEST(test_read_ranges)
{
    /* values the writer never produces, used as sizes or indices */
    const char *t = write_default_with_text();
    patch_i32(t, "/prompts/lengths", 1, 5); /* prompt_max is 4 */
    expect_read_error(t, RC_ERR_FORMAT, "/prompts/lengths");

    t = write_default_with_text();
    patch_i32(t, "/rollouts/sample_index", 1, -1);
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/sample_index");

    t = write_default_with_text();
    int64_t dup[2] = {7, 7};
    hid_t f = h5_open_rw(t);
    put_attr(f, "lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, 2, dup);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "lengths");

    t = write_default_with_text();
    f = h5_open_rw(t);
    put_attr_i64(f, "samples", (int64_t)1 << 40);
    H5Fclose(f);
    expect_read_error(t, RC_ERR_FORMAT, "samples");
}
END_TEST

/* defect 3: sizes declared by a tiny file */

/* Make the results file at `path` declare S sequences of G tokens (one length,
 * G): every dataset the reader reads is replaced by a chunked, deflated one of
 * the declared shape with no chunk written, so the file stays small. */
static void declare_huge(const char *path, int64_t S, int64_t G)
{
    hid_t f = h5_open_rw(path);
    put_attr_i64(f, "num_sequences", S);
    put_attr_i64(f, "gen_len", G);
    int64_t L = G;
    put_attr(f, "lengths", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &L);
    hsize_t d1[1] = {(hsize_t)S}, d2[2] = {(hsize_t)S, (hsize_t)G};
    put_ds(f, "/rollouts/prompt_index", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, NULL, true);
    put_ds(f, "/rollouts/sample_index", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, NULL, true);
    put_ds(f, "/rollouts/lengths", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, NULL, true);
    put_ds(f, "/rollouts/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, d2, NULL, true);
    put_ds(f, "/rollouts/logprob_gen", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, NULL, true);
    put_ds(f, "/rollouts/logprob_gen_processed", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, NULL, true);
    if (H5Lexists(f, "/reference", H5P_DEFAULT) > 0)
        H5Ldelete(f, "/reference", H5P_DEFAULT);
    char g[64], n[96];
    snprintf(g, sizeof g, "/len_%04lld", (long long)G);
    snprintf(n, sizeof n, "%s/logprob_forward", g);
    if (H5Lexists(f, g, H5P_DEFAULT) <= 0) {
        hid_t gr = H5Gcreate2(f, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        ck_assert_int_ge(gr, 0);
        H5Gclose(gr);
    }
    put_ds(f, n, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, NULL, true);
    H5Fclose(f);
}

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

START_TEST(test_read_declared_huge)
{
    /* 2^18 x 64 sequences declared (~ 64 MiB per array, 6 arrays) by a file
     * of a few tens of KiB */
    rc_results *r = build_default(false);
    const char *t = tpath("huge.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    destroy(r);
    declare_huge(t, (int64_t)1 << 18, 64);
    size_t n;
    free(slurp(t, &n));
    ck_assert_uint_lt(n, 128 * 1024); /* the premise: a small file (65 KiB with the verdict group) */
    long before = maxrss_kib();
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/");
    long grown = maxrss_kib() - before;
    ck_assert_msg(grown < 32 * 1024, "reading grew the resident set by %ld KiB", grown);
    ck_assert_int_eq(report(t), 4);
    assert_one_line(t);
}
END_TEST

START_TEST(test_read_too_large)
{
    /* 2^24 x 2^24 tokens: past any allocation; refused by size, naming the file */
    rc_results *r = build_default(false);
    const char *t = tpath("huge.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    destroy(r);
    declare_huge(t, (int64_t)1 << 24, (int64_t)1 << 24);
    long before = maxrss_kib();
    expect_read_error(t, RC_ERR_NOMEM, NULL);
    ck_assert_msg(maxrss_kib() - before < 32 * 1024, "reading grew the resident set by %ld KiB", maxrss_kib() - before);
    ck_assert_int_eq(report(t), 7);
    assert_one_line(t);
}
END_TEST

/* Variable-length strings live in the file's global heap, addressed by an ID
 * per element; nothing stops every element from naming the same heap object.
 * 4096 completions that all name one 64 KiB string: a file of ~340 KiB that
 * reads as 256 MiB (and then as much again in copies). */
START_TEST(test_read_shared_strings)
{
    static const int64_t lens[1] = {1};
    const int64_t S = 4096;
    rc_results *r = build(2, 4, S, 1, lens, 1, false);
    r->completion = xcalloc((size_t)S, sizeof(char *));
    r->completion[0] = xcalloc(65537, 1);
    memset(r->completion[0], 'a', 65536);
    for (int64_t s = 1; s < S; s++)
        r->completion[s] = xstrdup("b");
    const char *t = tpath("shared.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    for (int64_t s = 0; s < S; s++)
        free(r->completion[s]);
    free(r->completion);
    r->completion = NULL;
    destroy(r);
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "%s", rc_last_error()); /* as written: fine */
    rc_results_free(&back);

    /* every element's heap ID (16 bytes in the file) := element 0's */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(t, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/rollouts/completion", H5P_DEFAULT);
    haddr_t off = H5Dget_offset(ds);
    hsize_t stored = H5Dget_storage_size(ds);
    H5Dclose(ds);
    H5Fclose(f);
    ck_assert_msg(off != HADDR_UNDEF && stored == (hsize_t)S * 16, "contiguous, 16 bytes per element (%llu)",
                  (unsigned long long)stored);
    FILE *fp = fopen(t, "r+b");
    ck_assert_ptr_nonnull(fp);
    unsigned char id0[16];
    ck_assert_int_eq(fseek(fp, (long)off, SEEK_SET), 0);
    ck_assert_uint_eq(fread(id0, 1, 16, fp), 16);
    ck_assert_int_eq(fseek(fp, (long)off, SEEK_SET), 0);
    for (int64_t s = 0; s < S; s++)
        ck_assert_uint_eq(fwrite(id0, 1, 16, fp), 16);
    ck_assert_int_eq(fclose(fp), 0);
    size_t n;
    free(slurp(t, &n));
    ck_assert_uint_lt(n, 512 * 1024);

    long before = maxrss_kib();
    expect_read_error(t, RC_ERR_FORMAT, "/rollouts/completion");
    long grown = maxrss_kib() - before;
    ck_assert_msg(grown < 32 * 1024, "reading grew the resident set by %ld KiB", grown);
}
END_TEST

START_TEST(test_read_padding_ok)
{
    /* a legitimate file that compresses as well as files get: 2000 sequences
     * of up to 1024 tokens, all but one token NaN / -1 padding */
    static const int64_t lens[1] = {1024};
    rc_results *r = build(2, 4, 2000, 1024, lens, 1, true);
    for (int64_t s = 0; s < r->n_seq; s++) {
        r->seq_prompt[s] = (int32_t)(s % 2);
        r->gen_valid[s] = 1;
        for (int64_t t = 1; t < r->gen_len; t++) {
            r->gen_tokens[s * 1024 + t] = -1;
            r->logprob_gen[s * 1024 + t] = r->logprob_gen_processed[s * 1024 + t] = NAN;
            r->logprob_ref[s * 1024 + t] = NAN;
            r->lens[0].logprob_fwd[s * 1024 + t] = NAN;
        }
    }
    const char *t = tpath("pad.h5");
    ck_assert_msg(rc_h5_write(r, t, true) == RC_OK, "%s", rc_last_error());
    destroy(r);
    size_t n;
    free(slurp(t, &n));
    rc_results back;
    ck_assert_msg(rc_h5_read(t, &back) == RC_OK, "a %zu-byte file of 2000 x 1024: %s", n, rc_last_error());
    ck_assert_int_eq(back.n_seq, 2000);
    ck_assert_int_eq(back.lens[0].st.count, 2000);
    rc_results_free(&back);
}
END_TEST

void read_tests_in_reader(TCase *tc)
{
    tcase_add_test(tc, test_read_older_layouts);
    tcase_add_test(tc, test_read_text_extent);
    tcase_add_test(tc, test_read_completion_shape);
    tcase_add_test(tc, test_read_entropy_shape);
    tcase_add_test(tc, test_read_attr_not_scalar);
    tcase_add_test(tc, test_read_type_class);
    tcase_add_test(tc, test_read_ranges);
    tcase_add_test(tc, test_read_declared_huge);
    tcase_add_test(tc, test_read_too_large);
    tcase_add_test(tc, test_read_padding_ok);
    tcase_add_test(tc, test_read_shared_strings);
}

void read_tests_in_replay(TCase *tc)
{
    tcase_add_test(tc, test_replay_ok);
    tcase_add_test(tc, test_replay_token_negative);
    tcase_add_test(tc, test_replay_token_vocab);
    tcase_add_test(tc, test_replay_larger_vocab);
    tcase_add_test(tc, test_replay_float_tokens);
    tcase_add_test(tc, test_replay_prompt_len);
    tcase_add_test(tc, test_replay_prompt_context);
    tcase_add_test(tc, test_replay_prompt_token);
    tcase_add_test(tc, test_replay_samples_overflow);
    tcase_add_test(tc, test_replay_seq_mapping);
    tcase_add_test(tc, test_run_check_forced);
}
