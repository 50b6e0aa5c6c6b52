/* The ratiocheck executable: help, version, inspect, usage errors and exit
 * codes (README's table), one-line error messages. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_out[1 << 16], g_err[1 << 16];

static void slurp(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = '\0';
    if (f)
        fclose(f);
}

/* Run `ratiocheck ARGS` (a shell-quoted string); return the exit code. */
static int run(const char *args)
{
    char tmpl_o[] = "/tmp/rc_cli_outXXXXXX", tmpl_e[] = "/tmp/rc_cli_errXXXXXX";
    int fo = mkstemp(tmpl_o), fe = mkstemp(tmpl_e);
    ck_assert(fo >= 0 && fe >= 0);
    close(fo);
    close(fe);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/src/ratiocheck' %s >'%s' 2>'%s' </dev/null",
             getenv("RC_SOURCE_DIR"), RC_TEST_BUILD_DIR, args, tmpl_o, tmpl_e);
    int st = system(cmd);
    slurp(tmpl_o, g_out, sizeof g_out);
    slurp(tmpl_e, g_err, sizeof g_err);
    unlink(tmpl_o);
    unlink(tmpl_e);
    ck_assert_msg(WIFEXITED(st), "ratiocheck %s did not exit normally", args);
    return WEXITSTATUS(st);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

START_TEST(test_help_version)
{
    ck_assert_int_eq(run("--help"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "Usage: ratiocheck"));
    ck_assert_ptr_nonnull(strstr(g_out, "Exit codes"));
    ck_assert_int_eq(run("--version"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "ratiocheck 0."));
}
END_TEST

START_TEST(test_usage_errors)
{
    ck_assert_int_eq(run("--frobnicate"), 2);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_ptr_nonnull(strstr(g_err, "--frobnicate"));
    ck_assert_int_eq(run("frobnicate"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "unknown command 'frobnicate'"));
    ck_assert_int_eq(run("inspect"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--model"));
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_int_eq(run("inspect --model"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "needs a value"));
    ck_assert_int_eq(run("inspect --model data/fixtures/neox_parallel extra"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "unexpected argument 'extra'"));
}
END_TEST

START_TEST(test_inspect)
{
    ck_assert_int_eq(run("inspect --model data/fixtures/llama_gqa"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "architecture   llama"));
    ck_assert_ptr_nonnull(strstr(g_out, "kv heads       2"));
    ck_assert_ptr_nonnull(strstr(g_out, "heads          4"));
    ck_assert_ptr_nonnull(strstr(g_out, "stored dtype   F32"));
    ck_assert_ptr_nonnull(strstr(g_out, "llama3"));
    ck_assert_int_eq(run("inspect --model data/fixtures/neox_bf16 --json"), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"stored_dtype\": \"BF16\""));
    ck_assert_ptr_nonnull(strstr(g_out, "\"model_type\": \"gpt_neox\""));
    ck_assert_int_eq(run("inspect --model data/fixtures/qwen2_bias"), 0); /* sharded */
    ck_assert_ptr_nonnull(strstr(g_out, "architecture   qwen2"));
}
END_TEST

START_TEST(test_inspect_errors)
{
    /* missing folder: I/O error (6), one line naming the path */
    ck_assert_int_eq(run("inspect --model /nonexistent/model"), 6);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_ptr_nonnull(strstr(g_err, "/nonexistent/model/config.json"));
    /* malformed config: 4; unsupported model type: 5 */
    char dir[] = "/tmp/rc_cli_modelXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512], args[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\": \"llama\", \"hidden_size\": ", f);
    fclose(f);
    snprintf(args, sizeof args, "inspect --model %s", dir);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "config.json"));
    ck_assert_int_eq(count_lines(g_err), 1);
    f = fopen(path, "w");
    fputs("{\"model_type\": \"gpt2\"}", f);
    fclose(f);
    ck_assert_int_eq(run(args), 5);
    ck_assert_ptr_nonnull(strstr(g_err, "\"gpt2\" is not supported"));
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_help_version);
    tcase_add_test(tc, test_usage_errors);
    tcase_add_test(tc, test_inspect);
    tcase_add_test(tc, test_inspect_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
