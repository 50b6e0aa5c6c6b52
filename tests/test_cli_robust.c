/* test_cli_robust.c: test_cli's hostile input and lost results, and the rough edges a new user hit
 * (test_cli.c holds the shared helpers, the run fixture and the suite). */
#include <check.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rc_build_config.h"
#include "rc_cuda.h"
#include "testutil.h"
#include "advice.h"
#include "test_cli.h"

/* ---- hostile input and lost results (the robustness issue) ---- */

/* Run a shell command line (cd'ed to the source tree, `RC` = the binary);
 * stderr is captured in g_err, stdout is whatever the command does with it.
 * Returns the exit code. */
static int run_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_sh(const char *fmt, ...)
{
    char body[6144], cmd[8192], tmpl_e[] = "/tmp/rc_cli_errXXXXXX";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    int fe = mkstemp(tmpl_e);
    ck_assert(fe >= 0);
    close(fe);
    snprintf(cmd, sizeof cmd, "cd '%s' && RC='%s/src/ratiocheck' && { %s ; } 2>'%s' </dev/null",
             getenv("RC_SOURCE_DIR"), RC_TEST_BUILD_DIR, body, tmpl_e);
    int st = system(cmd);
    rc_test_slurp(tmpl_e, g_err, sizeof g_err);
    unlink(tmpl_e);
    ck_assert_msg(WIFEXITED(st), "%s did not exit normally", body);
    return WEXITSTATUS(st);
}

/* dst = tmpl with every "@D" replaced by the run fixture's folder */
char *subst_dir(char *dst, size_t n, const char *tmpl)
{
    size_t o = 0;
    for (const char *t = tmpl; *t && o + 1 < n; t++) {
        if (t[0] == '@' && t[1] == 'D') {
            o += (size_t)snprintf(dst + o, n - o, "%s", g_dir);
            t++;
        } else {
            dst[o++] = *t;
        }
    }
    dst[o < n ? o : n - 1] = '\0';
    return dst;
}

/* stdout full or closed: every command exits 6 with one line, never 0 */
START_TEST(test_stdout_unwritable)
{
    const char *cmds[] = {
        "$RC --model data/fixtures/neox_parallel --backend cpu --prompts @D/p.ids --len 4 -q --out none",
        "$RC --model data/fixtures/neox_parallel --backend cpu --prompts @D/p.ids --len 4 -q --out none --json",
        "$RC inspect --model data/fixtures/neox_parallel",
        "$RC inspect --model data/fixtures/neox_parallel --json",
        "$RC tokenize --model data/models/pythia-rc-tiny hello",
        "$RC --help",
    };
    const char *redir[] = {">/dev/full", ">&-"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        for (int k = 0; k < 2; k++) {
            char c[2048];
            subst_dir(c, sizeof c - 32, cmds[i]);
            strcat(c, " ");
            strcat(c, redir[k]);
            ck_assert_msg(run_sh("%s", c) == 6, "%s: exit code not 6; stderr '%s'", c, g_err);
            ck_assert_msg(strstr(g_err, "standard output") != NULL, "%s: '%s'", c, g_err);
            ck_assert_int_eq(count_lines(g_err), 1);
        }
    /* the results file is still written when only stdout fails */
    ck_assert_int_eq(run_sh("$RC %s --out %s/kept.h5 >/dev/full", g_common, g_dir), 6);
    char p[256];
    snprintf(p, sizeof p, "%s/kept.h5", g_dir);
    ck_assert_int_eq(access(p, F_OK), 0);
}
END_TEST

/* the output path is checked before the model is loaded: a bad output path
 * is named even when the model folder does not exist */
START_TEST(test_output_checked_first)
{
    char args[2048];
    snprintf(args, sizeof args, "--model /nonexistent/model -q --out /nonexistent/folder/r.h5");
    ck_assert_int_eq(run(args), 6);
    ck_assert_msg(strstr(g_err, "/nonexistent/folder/r.h5") != NULL, "'%s'", g_err);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_int_eq(run("--model /nonexistent/model -q --out ''"), 2);
    ck_assert_msg(strstr(g_err, "--out") != NULL, "'%s'", g_err);
    /* a folder as the output path */
    snprintf(args, sizeof args, "--model /nonexistent/model -q --out %s --force", g_dir);
    ck_assert_int_eq(run(args), 6);
    ck_assert_msg(strstr(g_err, g_dir) != NULL && !strstr(g_err, "config.json"), "'%s'", g_err);
    /* a dangling symbolic link at the output path: refused before any work */
    char link[256];
    snprintf(link, sizeof link, "%s/dangling.h5", g_dir);
    ck_assert_int_eq(symlink("/nonexistent/target.h5", link), 0);
    snprintf(args, sizeof args, "--model /nonexistent/model -q --out %s", link);
    ck_assert_int_eq(run(args), 2);
    ck_assert_msg(strstr(g_err, "dangling.h5") != NULL, "'%s'", g_err);
    snprintf(args, sizeof args, "--model /nonexistent/model -q --out %s --force", link);
    ck_assert_int_eq(run(args), 6);
    ck_assert_msg(strstr(g_err, "dangling.h5") != NULL && strstr(g_err, "symbolic link"), "'%s'", g_err);
    /* a read-only folder (root writes anywhere: checked only when not root) */
    if (geteuid() != 0) {
        char ro[256];
        snprintf(ro, sizeof ro, "%s/ro", g_dir);
        ck_assert_int_eq(mkdir(ro, 0555), 0);
        snprintf(args, sizeof args, "--model /nonexistent/model -q --out %s/r.h5", ro);
        ck_assert_int_eq(run(args), 6);
        ck_assert_msg(strstr(g_err, "/ro/r.h5") != NULL, "'%s'", g_err);
    }
    ck_assert_int_eq(count_files(g_dir), 2); /* p.ids, dangling.h5: no probe left behind */
}
END_TEST

/* --alibi-bias: recorded, shown in the header only when not the default,
 * read back by report; a bad value is a usage error (2) */
START_TEST(test_alibi_bias_option)
{
    char args[4096];
    FILE *f = fopen("/tmp/rc_cli_alibi.ids", "w");
    ck_assert_ptr_nonnull(f);
    fputs("5 7 9 11 13 2\n12 3 4\n", f);
    fclose(f);
    snprintf(args, sizeof args,
             "--model data/fixtures/bloom_alibi --backend cpu --prompts /tmp/rc_cli_alibi.ids --len 6 -q --alibi-bias rowmax "
             "--out %s/a.h5",
             g_dir);
    ck_assert_msg(run(args) == 0, "%s", g_err);
    ck_assert_ptr_nonnull(strstr(g_out, "upcast none  alibi-bias rowmax  log-probs fp32"));
    snprintf(args, sizeof args, "report %s/a.h5 --json", g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"alibi_bias\": \"rowmax\""));
    snprintf(args, sizeof args,
             "--model data/fixtures/bloom_alibi --backend cpu --prompts /tmp/rc_cli_alibi.ids --len 6 -q --out %s/b.h5", g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strstr(g_out, "alibi-bias"));
    snprintf(args, sizeof args, "report %s/b.h5 --json", g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "\"alibi_bias\": \"model\""));
    ck_assert_int_eq(run("--model data/fixtures/bloom_alibi --backend cpu --alibi-bias max --out none"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--alibi-bias"));
    ck_assert_int_eq(count_lines(g_err), 1);
    unlink("/tmp/rc_cli_alibi.ids");
}
END_TEST

/* A GPT-2 Conv1D weight stored [out, in] instead of [in, out] (a converter
 * that transposed it already): exit 4, one line naming the file, the tensor,
 * its shape and the expected one; no output file. */
START_TEST(test_conv1d_swapped)
{
    char model[256], args[4096];
    snprintf(model, sizeof model, "%s/gpt2", g_dir);
    ck_assert_int_eq(run_sh("cp -r data/fixtures/gpt2_learned %s", model), 0);
    /* the header's shape of h.0's c_attn, [64,192] -> [192,64] (same length) */
    ck_assert_int_eq(run_sh("sed -i 's/\\(h\\.0\\.attn\\.c_attn\\.weight\":{\"dtype\":\"F32\",\"shape\":\\)"
                            "\\[64,192\\]/\\1[192,64]/' %s/model.safetensors && "
                            "grep -c 'c_attn.weight\":{\"dtype\":\"F32\",\"shape\":\\[192,64\\]' "
                            "%s/model.safetensors",
                            model, model),
                     0);
    snprintf(args, sizeof args, "--model %s --prompts %s/p.ids --len 4 -q --out %s/r.h5", model, g_dir, g_dir);
    ck_assert_int_eq(run(args), 4);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_msg(strstr(g_err, "model.safetensors") && strstr(g_err, "h.0.attn.c_attn.weight") &&
                      strstr(g_err, "[192, 64]") && strstr(g_err, "[64, 192]"),
                  "'%s'", g_err);
    struct stat st;
    char out[512];
    snprintf(out, sizeof out, "%s/r.h5", g_dir);
    ck_assert_int_ne(stat(out, &st), 0);
    snprintf(args, sizeof args, "inspect --model %s", model);
    ck_assert_int_eq(run(args), 4);
}
END_TEST

/* inspect reads headers only: a weight holding NaN stops a run (exit 4,
 * naming the tensor) but not inspect, which never reads the values */
START_TEST(test_inspect_headers_only)
{
    char model[256], args[1024];
    snprintf(model, sizeof model, "%s/nanmodel", g_dir);
    ck_assert_int_eq(run_sh("cp -r data/fixtures/neox_parallel %s && f=%s/model.safetensors && "
                            "printf '\\000\\000\\300\\177' | dd of=$f bs=1 seek=$(( $(stat -c%%s $f) - 4 )) "
                            "conv=notrunc 2>/dev/null",
                            model, model),
                     0);
    snprintf(args, sizeof args, "--model %s --prompts %s/p.ids --len 4 -q --out none", model, g_dir);
    ck_assert_int_eq(run(args), 4);
    ck_assert_ptr_nonnull(strstr(g_err, "non-finite"));
    snprintf(args, sizeof args, "inspect --model %s --no-speed", model);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_nonnull(strstr(g_out, "architecture   gpt_neox"));
}
END_TEST

/* --out naming an input is refused, even with --force (device and inode) */
START_TEST(test_out_is_input)
{
    char model[256], args[4096], prev[256];
    snprintf(model, sizeof model, "%s/model", g_dir);
    ck_assert_int_eq(run_sh("cp -r data/fixtures/neox_parallel %s", model), 0);
    snprintf(prev, sizeof prev, "%s/prev.h5", g_dir);
    snprintf(args, sizeof args, "--model %s --prompts %s/p.ids --len 4 -q --out %s", model, g_dir, prev);
    ck_assert_int_eq(run(args), 0);
    struct stat before;
    const char *targets[] = {"@D/model/config.json", "@D/model/model.safetensors", "@D/p.ids", "@D/prev.h5"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        char t[512];
        subst_dir(t, sizeof t, targets[i]);
        ck_assert_int_eq(stat(t, &before), 0);
        if (i == 3)
            snprintf(args, sizeof args, "--model %s --len 4 -q --rollouts-from %s --out %s --force", model, prev, t);
        else
            snprintf(args, sizeof args, "--model %s --prompts %s/p.ids --len 4 -q --out %s --force", model, g_dir, t);
        ck_assert_msg(run(args) == 2, "--out %s: stderr '%s'", t, g_err);
        ck_assert_msg(strstr(g_err, "is an input") != NULL, "'%s'", g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
        struct stat after;
        ck_assert_int_eq(stat(t, &after), 0);
        ck_assert(after.st_ino == before.st_ino && after.st_size == before.st_size);
    }
    /* through another name (a hard link) too */
    char hl[256], cfg[300];
    snprintf(hl, sizeof hl, "%s/alias.json", g_dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", model);
    ck_assert_int_eq(link(cfg, hl), 0);
    snprintf(args, sizeof args, "--model %s --prompts %s/p.ids --len 4 -q --out %s --force", model, g_dir, hl);
    ck_assert_int_eq(run(args), 2);
    ck_assert_msg(strstr(g_err, "is an input") != NULL, "'%s'", g_err);
}
END_TEST

/* temporary files left by a killed run are removed by the next run with the
 * same output path (only when their process is gone) */
START_TEST(test_stale_temp_files)
{
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(child, NULL, 0), child); /* a PID that is gone */
    char stale[256], live[256], args[2048], out[256];
    snprintf(out, sizeof out, "%s/o.h5", g_dir);
    snprintf(stale, sizeof stale, "%s/.o.h5.tmp.%ld", g_dir, (long)child);
    snprintf(live, sizeof live, "%s/.o.h5.tmp.%ld", g_dir, (long)getpid());
    FILE *f = fopen(stale, "w");
    fputs("partial", f);
    fclose(f);
    f = fopen(live, "w");
    fclose(f);
    snprintf(args, sizeof args, "%s --out %s", g_common, out);
    ck_assert_int_eq(run(args), 0);
    ck_assert_int_ne(access(stale, F_OK), 0);
    ck_assert_int_eq(access(live, F_OK), 0); /* its process (this test) still runs */
    ck_assert_msg(strstr(g_err, "stale") != NULL && strstr(g_err, stale) != NULL, "'%s'", g_err);
    ck_assert_int_eq(count_lines(g_err), 1);
    unlink(live);
}
END_TEST

/* a signal that arrives before anything is loaded: handled, not fatal by
 * default action. SIGTERM is made pending (blocked) before exec; ratiocheck
 * installs its handlers first, then unblocks: exit 143 (128 + SIGTERM) with
 * one line, and no output file */
static bool g_clear_omp; /* run_with_pending: without OMP_WAIT_POLICY (ratiocheck runs itself again) */
static int run_with_pending(int sig, const char *out)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (chdir(getenv("RC_SOURCE_DIR")) != 0)
            _exit(99);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        char errp[256];
        snprintf(errp, sizeof errp, "%s/stderr", g_dir);
        int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fe, 2);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_BLOCK, &set, NULL);
        kill(getpid(), sig); /* pending across exec */
        if (g_clear_omp) { /* and a busy machine: ratiocheck runs itself again */
            unsetenv("OMP_WAIT_POLICY");
            unsetenv("GOMP_SPINCOUNT");
            setenv("RATIOCHECK_LOAD", "1000", 1);
        }
        char exe[512];
        snprintf(exe, sizeof exe, "%s/src/ratiocheck", RC_TEST_BUILD_DIR);
        execl(exe, exe, "--model", "data/models/pythia-rc-tiny", "-q", "--out", out, (char *)NULL);
        _exit(98);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    char errp[256];
    snprintf(errp, sizeof errp, "%s/stderr", g_dir);
    rc_test_slurp(errp, g_err, sizeof g_err);
    unlink(errp);
    ck_assert_msg(WIFEXITED(st), "killed by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return WEXITSTATUS(st);
}

START_TEST(test_signal_before_load)
{
    char out[256];
    snprintf(out, sizeof out, "%s/sig.h5", g_dir);
    ck_assert_int_eq(run_with_pending(SIGTERM, out), 143);
    ck_assert_msg(strstr(g_err, "interrupted") != NULL, "'%s'", g_err);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_int_ne(access(out, F_OK), 0);
    ck_assert_int_eq(run_with_pending(SIGINT, out), 130);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_int_eq(count_files(g_dir), 1); /* p.ids only */
}
END_TEST

/* every string in --json output is escaped (paths, attributes read back);
 * tables print control characters escaped */
START_TEST(test_json_escaping)
{
    char model[512], args[4096], out[512];
    snprintf(model, sizeof model, "%s/we\"ird\\na\xffme", g_dir);
    ck_assert_int_eq(run_sh("cp -r data/fixtures/neox_parallel '%s'", model), 0);
    snprintf(args, sizeof args, "inspect --model '%s' --json", model);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "inspect --json: %s: %s", err.text, g_out);
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "model")), "we\"ird\\na"));
    json_decref(j);
    snprintf(out, sizeof out, "%s/o\"u\\t.h5", g_dir);
    snprintf(args, sizeof args, "--model '%s' --prompts %s/p.ids --len 4 -q --out '%s' --json", model, g_dir, out);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "run --json: %s: %s", err.text, g_out);
    json_decref(j);
    snprintf(args, sizeof args, "report '%s' --json", out);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "report --json: %s: %s", err.text, g_out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "output")), out);
    json_decref(j);
    snprintf(args, sizeof args, "diff '%s' '%s' --json", out, out);
    ck_assert_int_eq(run(args), 0);
    j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "diff --json: %s: %s", err.text, g_out);
    ck_assert_str_eq(json_string_value(json_object_get(j, "a")), out);
    json_decref(j);
    /* a crafted string attribute cannot add keys */
    ck_assert_int_eq(run_sh("/usr/bin/python3 -c 'import h5py,sys; f=h5py.File(sys.argv[1],\"r+\"); "
                            "f.attrs[\"kernels\"]=\"engine\\\", \\\"evil\\\": \\\"1\\x1b[31m\"' '%s'", out), 0);
    snprintf(args, sizeof args, "report '%s' --json", out);
    int code = run(args);
    if (code == 0) { /* the reader may also refuse an unknown kernels value */
        j = json_loads(g_out, 0, &err);
        ck_assert_msg(j != NULL, "report --json: %s: %s", err.text, g_out);
        ck_assert_ptr_null(json_object_get(j, "evil"));
        json_decref(j);
    } else {
        ck_assert_int_eq(code, 4);
    }
    /* the table: no raw control characters from a path */
    snprintf(model, sizeof model, "%s/esc\x1b[31mdir", g_dir);
    ck_assert_int_eq(run_sh("cp -r data/fixtures/neox_parallel '%s'", model), 0);
    snprintf(args, sizeof args, "inspect --model '%s'", model);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strchr(g_out, '\x1b'));
    ck_assert_ptr_nonnull(strstr(g_out, "esc\\x1b[31mdir"));
    snprintf(args, sizeof args, "--model '%s' --prompts %s/p.ids --len 4 -q --out none", model, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_ptr_null(strchr(g_out, '\x1b'));
    /* error lines: ESC, a C1 control (U+009B, 8-bit CSI) and a byte that is
     * not UTF-8 in a path all become '?' (rc_errorf, for every message) */
    ck_assert_int_eq(run("inspect --model \"$(printf '/nonexistent/a\\033b\\302\\233c\\377d')\""), 6);
    ck_assert_msg(strstr(g_err, "/nonexistent/a?b??c?d: No such") != NULL, "'%s'", g_err);
}
END_TEST

/* disk full while writing: exit 6, one clean line naming the file, nothing
 * left behind (a file size limit stands in for a full disk) */
START_TEST(test_disk_full)
{
    char sub[256];
    snprintf(sub, sizeof sub, "%s/full", g_dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    ck_assert_int_eq(run_sh("ulimit -f 4; $RC %s --out %s/r.h5", g_common, sub), 6);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_msg(strstr(g_err, "/full/r.h5: ") != NULL, "'%s'", g_err);
    ck_assert_msg(strstr(g_err, "File too large") != NULL, "'%s'", g_err);
    ck_assert_msg(strstr(g_err, "H5") == NULL && strstr(g_err, "HDF5") == NULL, "'%s'", g_err);
    ck_assert_int_eq(count_files(sub), 0);
}
END_TEST

/* option values that are usage errors (exit 2, one line naming the option) */
START_TEST(test_option_values)
{
    const struct {
        const char *opt, *msg;
    } cases[] = {
        {"--upcast ''", "--upcast"},
        {"--upcast norm,", "--upcast"},
        {"--upcast norm,norm", "twice"},
        {"--upcast all,none", "'all' and 'none' cannot be combined"},
        {"--len 2,", "--len"},
        {"--len '2, 3'", "--len"},
        {"--len ' 2'", "--len"},
        {"--threads ' 2'", "--threads"},
        {"--threads +2", "--threads"},
        {"--temperature 0x1p-1", "--temperature"},
        {"--temperature ' 1'", "--temperature"},
        {"--temperature nan", "--temperature"},
        {"--fail-above ''", "--fail-above"},
        {"--fail-above k3=1,", "--fail-above"},
        {"--fail-above k3=0x1p-3", "--fail-above"},
        {"--prompts ''", "--prompts"},
        {"--model ''", "--model"},
        {"--rollouts-from ''", "--rollouts-from"},
    };
    char args[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "--model data/fixtures/neox_parallel --backend cpu --prompts %s/p.ids -q --out none %s", g_dir,
                 cases[i].opt);
        ck_assert_msg(run(args) == 2, "%s: stderr '%s'", cases[i].opt, g_err);
        ck_assert_msg(strstr(g_err, cases[i].msg) != NULL, "%s: stderr '%s'", cases[i].opt, g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
}
END_TEST

/* inputs that are not regular files: tokenizer.json (a FIFO or a device) is
 * exit 6 naming tokenizer.json; a FIFO result file is exit 6 naming it */
START_TEST(test_tokenizer_not_regular)
{
    char model[256], tp[300], args[2048];
    snprintf(model, sizeof model, "%s/m", g_dir);
    ck_assert_int_eq(run_sh("cp -r data/models/pythia-rc-tiny %s", model), 0);
    snprintf(tp, sizeof tp, "%s/tokenizer.json", model);
    for (int k = 0; k < 2; k++) {
        unlink(tp);
        if (k == 0)
            ck_assert_int_eq(mkfifo(tp, 0644), 0);
        else
            ck_assert_int_eq(symlink("/dev/zero", tp), 0);
        snprintf(args, sizeof args, "--model %s --len 4 -q --out none", model);
        ck_assert_int_eq(run(args), 6);
        ck_assert_msg(strstr(g_err, "tokenizer.json") != NULL, "'%s'", g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
        snprintf(args, sizeof args, "tokenize --model %s hello", model);
        ck_assert_int_eq(run(args), 6);
        ck_assert_msg(strstr(g_err, "tokenizer.json") != NULL, "'%s'", g_err);
    }
    /* a result file that is a FIFO: never handed to HDF5 (report, diff, replay) */
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/r.h5", g_dir);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    const char *cmds[] = {"report @D/r.h5", "diff @D/r.h5 @D/r.h5",
                          "--model data/models/pythia-rc-tiny --backend cpu --rollouts-from @D/r.h5 --len 4 -q --out none"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        ck_assert_int_eq(run(subst_dir(args, sizeof args, cmds[i])), 6);
        ck_assert_msg(strstr(g_err, "r.h5: not a regular file") != NULL, "%s: '%s'", cmds[i], g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
}
END_TEST

/* README's exit-code table, row by row: one loop test per row */
static const struct {
    int code;
    const char *cmd; /* shell; @D = the run fixture's folder */
    const char *msg; /* in the one line on stderr ("" for exit 0) */
} k_exit_rows[] = {
    {0, "$RC --model data/fixtures/neox_parallel --backend cpu --prompts @D/p.ids --len 4 -q --out none >/dev/null", ""},
    {1, "RATIOCHECK_FAULT=internal $RC --model data/fixtures/neox_parallel --backend cpu --prompts @D/p.ids --len 4 -q --out none",
     "internal error"},
    {2, "$RC --model data/fixtures/neox_parallel --frobnicate", "--frobnicate"},
    {3, "$RC --model data/fixtures/neox_parallel --backend cpu --prompts @D/p.ids --len 4 --dtype fp16 -q --out none "
        "--fail-above std=0 >/dev/null",
     "exceeds"},
    {4, "mkdir -p @D/m4 && printf '{\"model_type\": ' >@D/m4/config.json && $RC inspect --model @D/m4",
     "config.json"},
    {5, "mkdir -p @D/m5 && printf '{\"model_type\": \"t5\"}' >@D/m5/config.json && $RC inspect --model @D/m5",
     "not supported"},
    {6, "$RC inspect --model @D/missing", "missing: No such file or directory"},
    {7, "ulimit -v 1500000 && $RC --model data/models/pythia-rc-tiny --backend cpu --samples 100000 --threads 2 -q --out none",
     "cannot allocate"},
    {8, "CUDA_VISIBLE_DEVICES= $RC --model data/fixtures/neox_parallel --prompts @D/p.ids --len 4 -q --out none "
        "--backend cuda",
     "CUDA backend"},
    {130, "$RC --model data/fixtures/neox_parallel --backend cpu --prompts @D/p.ids --len 50 --samples 5000 --batch 4 -q "
          "--out @D/i.h5 & pid=$!; sleep 1; kill -INT $pid; wait $pid",
     "interrupted"},
    {143, "$RC --model data/fixtures/neox_parallel --backend cpu --prompts @D/p.ids --len 50 --samples 5000 --batch 4 -q "
          "--out @D/i.h5 & pid=$!; sleep 1; kill -TERM $pid; wait $pid",
     "interrupted"},
};

START_TEST(test_exit_code_row)
{
    const int i = _i;
#if defined(__SANITIZE_ADDRESS__)
    if (k_exit_rows[i].code == 7) /* ASan reserves more address space than any ulimit -v allows */
        return;
#endif
    char cmd[4096];
    subst_dir(cmd, sizeof cmd, k_exit_rows[i].cmd);
    int code = run_sh("%s", cmd);
    ck_assert_msg(code == k_exit_rows[i].code, "row %d: exit %d, stderr '%s'", k_exit_rows[i].code, code, g_err);
    if (k_exit_rows[i].code == 0) {
        ck_assert_str_eq(g_err, "");
    } else {
        ck_assert_msg(strstr(g_err, k_exit_rows[i].msg) != NULL, "row %d: '%s'", k_exit_rows[i].code, g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
    }
    ck_assert_int_eq(count_files(g_dir), 1 + (k_exit_rows[i].code == 4 || k_exit_rows[i].code == 5)); /* p.ids */
}
END_TEST

/* Rough edges a new user hit: -m for run as for inspect; --dtype in its
 * common spellings and any case. */
START_TEST(test_short_model_dtype_spellings)
{
    static const struct {
        const char *given, *canonical;
    } k_sp[] = {{"BF16", "bf16"}, {"bf16", "bf16"}, {"bfloat16", "bf16"}, {"BFloat16", "bf16"},
                {"fp16", "fp16"}, {"float16", "fp16"}, {"half", "fp16"}, {"FP16", "fp16"},
                {"fp32", "fp32"}, {"float32", "fp32"}, {"float", "fp32"}, {"Float32", "fp32"}};
    char args[2048];
    snprintf(args, sizeof args, "run -m data/fixtures/neox_parallel --backend cpu --prompts %s/p.ids --len 4 "
             "--samples 1 -q --out none --json", g_dir);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *j = json_loads(g_out, 0, &err);
    ck_assert_msg(j != NULL, "JSON does not parse: %s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "data/fixtures/neox_parallel");
    json_decref(j);
    for (size_t i = 0; i < sizeof k_sp / sizeof k_sp[0]; i++) {
        snprintf(args, sizeof args, "run -m data/fixtures/neox_parallel --backend cpu --prompts %s/p.ids --len 4 "
                 "--samples 1 -q --out none --json --dtype %s --sampler dtype=%s", g_dir, k_sp[i].given,
                 k_sp[i].given);
        ck_assert_msg(run(args) == 0, "--dtype %s: %s", k_sp[i].given, g_err);
        j = json_loads(g_out, 0, &err);
        ck_assert_msg(j != NULL, "JSON does not parse: %s", err.text);
        ck_assert_str_eq(json_string_value(json_object_get(j, "dtype")), k_sp[i].canonical);
        json_decref(j);
    }
    ck_assert_int_eq(run("inspect -m data/fixtures/llama_gqa --dtype BFLOAT16"), 0);
    ck_assert_int_eq(run("inspect -m data/fixtures/llama_gqa --dtype bf8"), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "'bf8' is not one of fp32, fp16, bf16"));
    ck_assert_int_eq(count_lines(g_err), 1);
}
END_TEST

/* Re-running without --out writes NAME.1.h5, NAME.2.h5 ... and says so; an
 * explicit --out that exists still needs --force; --force alone overwrites
 * NAME.h5. */
START_TEST(test_fresh_default_out)
{
    const char *base = "neox_parallel.bf16.ratiocheck";
#define FRESH_CMD "M=\"$PWD/data/fixtures/neox_parallel\" && cd '%s' && \"$RC\" run -m \"$M\" --backend cpu " \
                  "--prompts p.ids --len 4 --samples 1 -q %s >out.txt"
    char path[256], text[4096];
    ck_assert_int_eq(run_sh(FRESH_CMD, g_dir, ""), 0);
    ck_assert_str_eq(g_err, "");
    snprintf(path, sizeof path, "%s/%s.h5", g_dir, base);
    ck_assert_int_eq(access(path, F_OK), 0);
    for (int k = 1; k <= 2; k++) {
        ck_assert_int_eq(run_sh(FRESH_CMD, g_dir, ""), 0);
        snprintf(path, sizeof path, "%s/%s.%d.h5", g_dir, base, k);
        ck_assert_msg(access(path, F_OK) == 0, "%s not written", path);
        snprintf(path, sizeof path, "writing %s.%d.h5", base, k);
        ck_assert_msg(strstr(g_err, path) != NULL, "'%s'", g_err);
        ck_assert_int_eq(count_lines(g_err), 1);
        snprintf(path, sizeof path, "%s/out.txt", g_dir);
        rc_test_slurp(path, text, sizeof text);
        snprintf(path, sizeof path, "written to %s.%d.h5", base, k);
        ck_assert_msg(strstr(text, path) != NULL, "'%s'", text);
    }
    ck_assert_int_eq(count_files(g_dir), 5); /* p.ids, out.txt, three results */
    /* an explicit --out: never renamed */
    char opt[256];
    snprintf(opt, sizeof opt, "--out %s.h5", base);
    ck_assert_int_eq(run_sh(FRESH_CMD, g_dir, opt), 2);
    ck_assert_ptr_nonnull(strstr(g_err, "--force"));
    snprintf(opt, sizeof opt, "--out %s.h5 --force", base);
    ck_assert_int_eq(run_sh(FRESH_CMD, g_dir, opt), 0);
    ck_assert_int_eq(run_sh(FRESH_CMD, g_dir, "--force"), 0);
    ck_assert_str_eq(g_err, "");
    ck_assert_int_eq(count_files(g_dir), 5);
}
#undef FRESH_CMD
END_TEST

/* OpenMP waiting: without OMP_WAIT_POLICY and GOMP_SPINCOUNT, on a busy
 * machine (RATIOCHECK_LOAD: the load to assume) ratiocheck runs with its
 * short GOMP_SPINCOUNT (set, then itself run again) and removes both
 * afterwards; a quiet machine keeps libgomp's default; a variable the user
 * set wins; a signal pending before the start is still handled after the
 * second start. */
START_TEST(test_omp_waiting)
{
    char f[256], text[4096];
    snprintf(f, sizeof f, "%s/v.txt", g_dir);
    ck_assert_int_eq(run_sh("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT RATIOCHECK_LOAD=1000 \"$RC\" --version >'%s'", f),
                     0);
    rc_test_slurp(f, text, sizeof text);
    ck_assert_msg(strstr(text, "\nOpenMP waiting: GOMP_SPINCOUNT=1000 (ratiocheck's default on a busy machine)\n") !=
                  NULL, "'%s'", text);
    ck_assert_ptr_nonnull(strstr(text, "ratiocheck 0."));
    ck_assert_int_eq(run_sh("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT RATIOCHECK_LOAD=0 \"$RC\" --version >'%s'", f), 0);
    rc_test_slurp(f, text, sizeof text);
    ck_assert_msg(strstr(text, "\nOpenMP waiting: libgomp's default (a quiet machine: load 0.00 per CPU)\n") != NULL,
                  "'%s'", text);
    ck_assert_int_eq(run_sh("env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=123 RATIOCHECK_LOAD=1000 \"$RC\" --version >'%s'",
                            f), 0);
    rc_test_slurp(f, text, sizeof text);
    ck_assert_msg(strstr(text, "OpenMP waiting: from the environment, GOMP_SPINCOUNT=123\n") != NULL, "'%s'", text);
    ck_assert_int_eq(run_sh("env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive RATIOCHECK_LOAD=1000 \"$RC\" --version "
                            ">'%s'", f), 0);
    rc_test_slurp(f, text, sizeof text);
    ck_assert_msg(strstr(text, "OpenMP waiting: from the environment, OMP_WAIT_POLICY=passive\n") != NULL, "'%s'",
                  text);
    /* the marker alone (left by another program) is not ours: removed, and the default applies */
    ck_assert_int_eq(run_sh("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT RATIOCHECK_GOMP_DEFAULT=7 RATIOCHECK_LOAD=1000 "
                            "\"$RC\" --version >'%s'", f), 0);
    rc_test_slurp(f, text, sizeof text);
    ck_assert_msg(strstr(text, "GOMP_SPINCOUNT=1000 (ratiocheck's default on a busy machine)\n") != NULL, "'%s'",
                  text);
    char out[256];
    snprintf(out, sizeof out, "%s/sig.h5", g_dir);
    g_clear_omp = true;
    const int code = run_with_pending(SIGTERM, out);
    g_clear_omp = false;
    ck_assert_int_eq(code, 143);
    ck_assert_msg(strstr(g_err, "interrupted") != NULL, "'%s'", g_err);
    ck_assert_int_eq(count_lines(g_err), 1);
    ck_assert_int_ne(access(out, F_OK), 0);
}
END_TEST

/* Not on a terminal (a log, CI, Slurm): a progress line every
 * $RATIOCHECK_PROGRESS_SECONDS (default 15 s) with the phase, the share done
 * and an ETA; a sweep names each setting with the overall ETA and ends with
 * its total time; report on a sweep file prints the same sweep table. */
START_TEST(test_progress_lines_sweep_report)
{
    char f[256], text[1 << 15];
    snprintf(f, sizeof f, "%s/err.txt", g_dir);
    ck_assert_int_eq(run_sh("RATIOCHECK_PROGRESS_SECONDS=0 \"$RC\" run -m data/fixtures/neox_parallel --backend cpu "
                            "--prompts %s/p.ids --len 4,8 --samples 2 --out none >/dev/null 2>'%s'", g_dir, f), 0);
    rc_test_slurp(f, text, sizeof text);
    ck_assert_msg(strstr(text, "ratiocheck: ") && strstr(text, "% done, ") && strstr(text, " elapsed, ETA ") &&
                  !strchr(text, '\r') && !strstr(text, "\033["), "'%s'", text);
    /* the default interval: a run this short prints none */
    ck_assert_int_eq(run_sh("env -u RATIOCHECK_PROGRESS_SECONDS \"$RC\" run -m data/fixtures/neox_parallel --backend "
                            "cpu --prompts %s/p.ids --len 4 --samples 1 --out none >/dev/null 2>'%s'", g_dir, f), 0);
    rc_test_slurp(f, text, sizeof text);
    ck_assert_msg(!strstr(text, "% done"), "'%s'", text);
    char args[2048], live[sizeof g_out];
    snprintf(args, sizeof args, "sweep -m data/fixtures/neox_parallel --backend cpu --prompts %s/p.ids --len 4,8 "
             "--samples 2 --vary trainer:lm-head=fp32 --out %s/sw.h5", g_dir, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_msg(strstr(g_err, "sweep 1/2: base again (noise floor) (0:00 elapsed, ETA --:--)\n") &&
                  strstr(g_err, "sweep 2/2: ") && strstr(g_err, " elapsed, ETA "), "'%s'", g_err);
    ck_assert_msg(strstr(g_out, "\nsweep: ") && strstr(g_out, " s in all, the base run ") &&
                  strstr(g_out, " and 2 settings "), "'%s'", g_out);
    memcpy(live, g_out, sizeof live);
    snprintf(args, sizeof args, "report %s/sw.h5", g_dir);
    ck_assert_int_eq(run(args), 0);
    const char *a = strstr(live, "\nsweep: the same"), *b = strstr(g_out, "\nsweep: the same");
    ck_assert_msg(a && b, "report:\n%s", g_out);
    const char *ae = strstr(a, "\n\n"), *be = strstr(b, "\n\n");
    ck_assert(ae && be);
    ck_assert_msg(ae - a == be - b && !memcmp(a, b, (size_t)(ae - a)), "sweep:\n%.*s\nreport:\n%.*s", (int)(ae - a),
                  a, (int)(be - b), b);
    ck_assert_ptr_nonnull(strstr(b, "trainer: lm-head=fp32"));
    ck_assert_ptr_nonnull(strstr(b, "noise floor: the base replayed"));
}
END_TEST

void robust_tests_in_run(TCase *tc)
{
    tcase_add_test(tc, test_conv1d_swapped);
    tcase_add_test(tc, test_inspect_headers_only);
    tcase_add_test(tc, test_alibi_bias_option);
}

void robust_tests_in_robust(TCase *tc)
{
    tcase_add_test(tc, test_stdout_unwritable);
    tcase_add_test(tc, test_output_checked_first);
    tcase_add_test(tc, test_out_is_input);
    tcase_add_test(tc, test_stale_temp_files);
    tcase_add_test(tc, test_signal_before_load);
    tcase_add_test(tc, test_json_escaping);
    tcase_add_test(tc, test_disk_full);
    tcase_add_test(tc, test_option_values);
    tcase_add_test(tc, test_tokenizer_not_regular);
    tcase_add_loop_test(tc, test_exit_code_row, 0, (int)(sizeof k_exit_rows / sizeof k_exit_rows[0]));
}

void robust_tests_in_rough(TCase *tc)
{
    tcase_add_test(tc, test_short_model_dtype_spellings);
    tcase_add_test(tc, test_fresh_default_out);
    tcase_add_test(tc, test_omp_waiting);
    tcase_add_test(tc, test_progress_lines_sweep_report);
}
