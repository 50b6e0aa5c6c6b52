/* The command line's shared helpers: errors and exit codes, files that may be
 * absent, the output path checks, the progress bar. */
#include "cli.h"

int fail(rc_status st)
{
    fputs("ratiocheck: ", stderr);
    if (st == RC_ERR_INTERNAL)
        fputs("internal error (a bug: please report it): ", stderr);
    fprintf(stderr, "%s\n", rc_last_error()); /* one line, terminal-safe (status.c) */
    if (st == RC_ERR_INTERRUPTED && g_signal)
        return 128 + g_signal;
    return rc_exit_code(st);
}

int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ratiocheck: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see ratiocheck --help)\n");
    va_end(ap);
    return rc_exit_code(RC_ERR_USAGE);
}

/* A file that may be absent: *present says whether it is there; anything
 * there that is not a regular file (a FIFO, a device, a folder) is an error
 * naming it. */
void warn_eos(const char *model_dir, const rc_config *mc)
{
    char w[512];
    if (rc_config_eos_warning(mc, w, sizeof w))
        fprintf(stderr, "ratiocheck: warning: %s: %s\n", model_dir, w);
}

rc_status optional_file(const char *path, bool *present)
{
    struct stat sb;
    *present = false;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return RC_OK;
        return rc_errorf(RC_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode))
        return rc_errorf(RC_ERR_IO, "%s: not a regular file", path);
    *present = true;
    return RC_OK;
}

const char *data_dir(void)
{
    const char *env = getenv("RATIOCHECK_DATA");
    return env && *env ? env : RC_SOURCE_DIR "/data";
}

double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "1:05" / "1:02:05" */
void clock_str(double s, char *buf, size_t n)
{
    const long v = s > 0 && s < 1e7 ? (long)(s + 0.5) : 0;
    if (v >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", v / 3600, v / 60 % 60, v % 60);
    else
        snprintf(buf, n, "%ld:%02ld", v / 60, v % 60);
}

progress_state progress_start(bool quiet)
{
    progress_state ps = {.enabled = !quiet, .every = 15.0};
    ps.lines = !isatty(STDERR_FILENO) || (getenv("TERM") && !strcmp(getenv("TERM"), "dumb"));
    const char *e = getenv("RATIOCHECK_PROGRESS_SECONDS");
    char *end = NULL;
    const double v = e ? strtod(e, &end) : 0;
    if (e && end != e && !*end && v >= 0 && v <= 86400) /* 0: at every progress step */
        ps.every = v;
    return ps;
}

/* [#####-----]  45%  forward L=40   0:12 elapsed, ETA 0:15, 812 tok/s
 * or, not on a terminal, every ps->every seconds:
 * ratiocheck: forward L=40: 45% done, 0:12 elapsed, ETA 0:15, 812 tok/s */
void progress_cb(void *ctx, const char *phase, double frac, int64_t tokens)
{
    progress_state *ps = ctx;
    if (!ps->enabled)
        return;
    double t = mono_now();
    if (ps->start == 0)
        ps->start = ps->last = t;
    if (ps->lines) {
        if (t - ps->last < ps->every || frac >= 1.0)
            return;
        ps->last = t;
        char el[32], eta[32];
        frac = frac < 0 ? 0 : frac;
        const double elapsed = t - ps->start;
        clock_str(elapsed, el, sizeof el);
        if (frac > 0.01)
            clock_str(elapsed * (1.0 - frac) / frac, eta, sizeof eta);
        else
            snprintf(eta, sizeof eta, "--:--");
        fprintf(stderr, "ratiocheck: %s: %.0f%% done, %s elapsed, ETA %s, %.0f tok/s\n", phase, 100.0 * frac, el, eta,
                elapsed > 0 ? (double)tokens / elapsed : 0.0);
        fflush(stderr);
        return;
    }
    if (t - ps->last < 0.1 && frac < 1.0 && ps->last != ps->start)
        return;
    ps->last = t;
    frac = frac < 0 ? 0 : frac > 1 ? 1 : frac;
    int width = 30, fill = (int)((double)width * frac);
    char bar[64], el[32], eta[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '-';
    bar[width] = '\0';
    const double elapsed = t - ps->start;
    clock_str(elapsed, el, sizeof el);
    if (frac > 0.01 && elapsed > 1.0)
        clock_str(elapsed * (1.0 - frac) / frac, eta, sizeof eta);
    else
        snprintf(eta, sizeof eta, "--:--");
    fprintf(stderr, "\r[%s] %3.0f%%  %-16s %s elapsed, ETA %s, %.0f tok/s\033[K", bar, 100.0 * frac, phase, el, eta,
            elapsed > 0 ? (double)tokens / elapsed : 0.0);
    fflush(stderr);
}


void note_stale(const char *tmp_path, long pid)
{
    fputs("ratiocheck: removed the stale temporary file ", stderr);
    rc_term_str(stderr, tmp_path);
    fprintf(stderr, " (its process %ld is gone)\n", pid);
}

/* --out must not name an input, by any name (device and inode): a file of
 * the model folder (config.json, shards, tokenizer.json, ...), the prompts
 * or the replayed result file. */
rc_status check_out_not_input(const char *out, const char *model_dir, const char *other)
{
    struct stat ob, ib;
    if (stat(out, &ob) != 0)
        return RC_OK; /* nothing there yet: it cannot be an input */
    if (other && stat(other, &ib) == 0 && ib.st_dev == ob.st_dev && ib.st_ino == ob.st_ino)
        return rc_errorf(RC_ERR_USAGE, "--out %s is an input of this run (%s); choose another output path", out,
                         other);
    DIR *d = opendir(model_dir);
    if (!d)
        return RC_OK; /* the model load names the problem */
    rc_status st = RC_OK;
    struct dirent *e;
    while (st == RC_OK && (e = readdir(d)) != NULL) {
        char *p = rc_path_join(model_dir, e->d_name);
        if (!p) {
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
            break;
        }
        if (stat(p, &ib) == 0 && S_ISREG(ib.st_mode) && ib.st_dev == ob.st_dev && ib.st_ino == ob.st_ino)
            st = rc_errorf(RC_ERR_USAGE, "--out %s is an input of this run (%s); choose another output path", out, p);
        free(p);
    }
    closedir(d);
    return st;
}
