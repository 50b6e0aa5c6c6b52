/* ratiocheck command line: signals, the command table, standard output
 * checked at the end. The only place that calls exit() (by returning from
 * main); each command is one cmd_*.c (cli.h). */
#include <fcntl.h>

#include "cli.h"

/* One command: its name, its entry point (argv[0] is the command's name) and
 * the line `ratiocheck help` prints for it. */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv, const char *cmdline);
    const char *args;    /* its synopsis after the name */
    const char *summary; /* one line; '\n' continues it under the column */
} command;

static const command k_commands[] = {
    {"run", cmd_run, "(default)", "sample, re-score, report the PPO ratio"},
    {"sweep", cmd_sweep, "[RUN OPTIONS] [--vary SIDE:SPEC]...",
     "one setting at a time over the same rollouts,\nwith a noise floor"},
    {"score", cmd_score, "--rollouts FILE [RUN OPTIONS]",
     "re-score rollouts your own engine logged\n(vLLM, SGLang, JSONL, HDF5) as the trainer"},
    {"trace", cmd_trace, "RUN.h5 [--worst K | --seq LIST]",
     "where the sampler's and the trainer's forward\npasses part, op by op and layer by layer"},
    {"report", cmd_report, "FILE.h5 [--json]", "the run's summary again, from its result file"},
    {"diff", cmd_diff, "A.h5 B.h5 [--json]", "two runs over the same tokens, side by side"},
    {"inspect", cmd_inspect, "--model DIR [--json]", "describe a Hugging Face model folder"},
    {"tokenize", cmd_tokenize, "--model DIR TEXT...", "token ids and pieces of TEXT (tokenizer.json)"},
};

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(k_commands[i].name, name))
            return &k_commands[i];
    return NULL;
}

/* `ratiocheck help`: the commands from the table, each with its summary */
static void print_usage(FILE *f)
{
    fputs("Usage: ratiocheck [run] [OPTIONS]      the ratio check (see ratiocheck run --help)\n"
          "       ratiocheck COMMAND [OPTIONS]    (see ratiocheck COMMAND --help)\n"
          "\n"
          "Checks whether the log-probs a sampler records during KV-cached generation\n"
          "agree with the log-probs a trainer recomputes in one batched forward pass.\n"
          "\n"
          "Example: ratiocheck --model path/to/hf-model --dtype bf16 --len 20,40,50\n"
          "\n"
          "Commands:\n", f);
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) {
        const command *c = &k_commands[i];
        char head[96];
        int w = snprintf(head, sizeof head, "  %s %s", c->name, c->args);
        fprintf(f, "%s", head);
        if (w >= 39) /* no room for a space: the summary on the next line */
            fprintf(f, "\n%40s", "");
        else
            fprintf(f, "%*s", 40 - w, "");
        for (const char *s = c->summary; *s; s++) {
            fputc(*s, f);
            if (*s == '\n')
                fprintf(f, "%40s", "");
        }
        fputc('\n', f);
    }
    fputs("\n"
          "Options:\n"
          "  -h, --help      show this help (also: ratiocheck help)\n"
          "  -V, --version   show the version\n"
          "\n"
          "Exit codes: 0 ok, 1 internal error, 2 usage error, 3 threshold exceeded,\n"
          "4 malformed input file, 5 unsupported model or feature, 6 I/O error,\n"
          "7 out of memory, 8 device error, 130 interrupted (SIGINT), 143 terminated (SIGTERM).\n", f);
}

volatile sig_atomic_t g_signal;   /* the SIGINT / SIGTERM that arrived, or 0 */
volatile int g_interrupted_flag;   /* polled by the run */
volatile sig_atomic_t g_polling;   /* 1 while the run polls the flag */

/* SIGINT / SIGTERM. Installed first thing in main(). While the run polls the
 * flag it stops cleanly at the next check; otherwise (loading, writing,
 * printing) the process leaves at once: the temporary output file, if one is
 * being written, is removed first. Exit 128 + the signal: 130 for SIGINT, 143
 * for SIGTERM. */
static void on_signal(int sig)
{
    g_signal = sig;
    g_interrupted_flag = 1;
    const char *tmp = rc_h5_temp_path();
    if (tmp) /* interrupted while writing: leave nothing behind */
        unlink(tmp);
    if (tmp || !g_polling) {
        static const char msg[] = "ratiocheck: interrupted\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
}

static char *join_args(int argc, char **argv)
{
    size_t n = 1;
    for (int i = 0; i < argc; i++)
        n += 4 * strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool plain = *a != '\0';
        for (const char *c = a; *c; c++)
            if (!(isalnum((unsigned char)*c) || strchr("-_./=,:+%@", *c)))
                plain = false;
        if (i)
            *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        }
        *p++ = '\'';
    }
    *p = '\0';
    return s;
}

/* stdin, stdout, stderr closed by the caller: hold them open on /dev/null,
 * read-only, so that no file this process opens becomes "stdout" and every
 * write to them fails (and is reported) instead. */
static void hold_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            int r = open("/dev/null", O_RDONLY);
            if (r >= 0 && r != fd) /* lower ones are open, so r == fd */
                close(r);
        }
}

/* Results printed to stdout must arrive: a full disk, a closed stdout or a
 * write error is exit 6 with one line (the result file, if any, stays). */
static int finish_stdout(int code)
{
    errno = 0;
    bool bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) {
        bad = true;
        e = errno;
    }
    if (!bad)
        return code;
    if (e == EBADF)
        fputs("ratiocheck: cannot write to standard output: it is closed\n", stderr);
    else
        fprintf(stderr, "ratiocheck: cannot write to standard output: %s\n", e ? strerror(e) : "write error");
    return code == 0 || code == rc_exit_code(RC_ERR_GATE) ? rc_exit_code(RC_ERR_IO) : code;
}

/* OpenMP's waiting. libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once,
 * as it loads (before main); its default spins 300,000 times (~3 ms) before
 * a thread sleeps: the fastest on a quiet machine, but on one where other
 * processes want the cores the spinning threads take them from the thread
 * that has work (several times slower). When neither variable is set and
 * the machine is busy (load average or runnable processes >= half the CPUs),
 * ratiocheck sets GOMP_SPINCOUNT to a short count and runs itself again once
 * (/proc/self/exe, same argv, the signal mask and pending signals kept
 * across exec); the second start finds the marker, removes both variables
 * (children see the caller's environment) and goes on. A quiet machine keeps
 * libgomp's default; a variable the user set always wins. docs/cli.md
 * "OpenMP waiting" gives the measurements. */
#define RC_GOMP_SPIN_LOADED "1000"
#define RC_GOMP_MARKER "RATIOCHECK_GOMP_DEFAULT"
static char g_omp_wait[160] = "libgomp's default";

/* the machine's load per online CPU: the larger of the 1-minute load
 * average and the processes runnable now besides this one; < 0 unknown */
static double load_per_cpu(void)
{
    double l = -1;
    const char *t = getenv("RATIOCHECK_LOAD"); /* tests: the load to assume */
    if (t) {
        l = strtod(t, NULL);
    } else {
        FILE *f = fopen("/proc/loadavg", "r");
        long running = 0;
        if (f && fscanf(f, "%lf %*f %*f %ld", &l, &running) == 2 && running - 1 > l)
            l = (double)(running - 1);
        if (f)
            fclose(f);
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return l >= 0 && n > 0 ? l / (double)n : -1;
}

static void omp_waiting(char **argv)
{
#if defined(__linux__) && defined(__GNUC__) && !defined(__clang__) /* gcc's OpenMP: libgomp */
    const char *mark = getenv(RC_GOMP_MARKER), *spin = getenv("GOMP_SPINCOUNT"), *pol = getenv("OMP_WAIT_POLICY");
    if (mark && spin && !strcmp(mark, spin)) { /* the second start: libgomp has read it */
        snprintf(g_omp_wait, sizeof g_omp_wait, "GOMP_SPINCOUNT=%s (ratiocheck's default on a busy machine)", spin);
        unsetenv(RC_GOMP_MARKER);
        unsetenv("GOMP_SPINCOUNT");
        return;
    }
    if (mark)
        unsetenv(RC_GOMP_MARKER);
    if (pol || spin) {
        snprintf(g_omp_wait, sizeof g_omp_wait, "from the environment");
        return;
    }
    const double lpc = load_per_cpu();
    if (lpc < 0.5) {
        if (lpc < 0)
            snprintf(g_omp_wait, sizeof g_omp_wait, "libgomp's default (the machine's load is unknown)");
        else
            snprintf(g_omp_wait, sizeof g_omp_wait, "libgomp's default (a quiet machine: load %.2f per CPU)", lpc);
        return;
    }
    if (setenv("GOMP_SPINCOUNT", RC_GOMP_SPIN_LOADED, 1) == 0 &&
        setenv(RC_GOMP_MARKER, RC_GOMP_SPIN_LOADED, 1) == 0)
        execv("/proc/self/exe", argv);
    /* no exec (no /proc, the file replaced): libgomp's default, as loaded */
    unsetenv("GOMP_SPINCOUNT");
    unsetenv(RC_GOMP_MARKER);
#else
    (void)argv;
#endif
}

/* --version: the version, and how OpenMP threads wait in this process */
static int print_version(void)
{
    printf("ratiocheck %s\n", RC_VERSION);
    const char *pol = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    printf("OpenMP waiting: %s", g_omp_wait);
    if (pol)
        printf(", OMP_WAIT_POLICY=%s", pol);
    if (spin)
        printf(", GOMP_SPINCOUNT=%s", spin);
    putchar('\n');
    return 0;
}

int main(int argc, char **argv)
{
    omp_waiting(argv); /* first: before any file descriptor or signal changes */
    hold_std_fds();
    /* signals first: nothing may arrive to a default action, even while the
     * model loads; a caller's blocked mask must not hide them */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN); /* a file size limit: write() fails with EFBIG, reported as such */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    char *cmdline = join_args(argc, argv);
    if (!cmdline)
        return fail(rc_errorf(RC_ERR_NOMEM, "out of memory"));
    const command *c = argc >= 2 ? find_command(argv[1]) : NULL;
    int code;
    if (c) /* the command's own argv: its name is argv[0] */
        code = c->run(argc - 1, argv + 1, cmdline);
    else if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")))
        code = (print_usage(stdout), 0);
    else if (argc >= 2 && (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")))
        code = print_version();
    else if (argc < 2 || argv[1][0] == '-') /* options alone: run */
        code = cmd_run(argc, argv, cmdline);
    else
        code = usage_error("unknown command '%s'", argv[1]);
    free(cmdline);
    return finish_stdout(code);
}
