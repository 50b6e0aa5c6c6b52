/* The results file's path, checked before any work (results.h
 * rc_h5_check_output), and the temporary files killed writers left
 * (rc_h5_remove_stale_temps). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5w.h"
#include "util.h"

/* ------------------------------------------------------------------------ */
/* the output path                                                          */

/* The folder of `path` into dir[n] ("." or "/" when it has none). */
rc_status split_dir(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (base[0] == '\0')
        return rc_errorf(RC_ERR_IO, "%s: not a file name (ends with '/')", path);
    size_t dir_len = slash ? (size_t)(slash - path) : 0;
    if (dir_len + 1 >= n)
        return rc_errorf(RC_ERR_IO, "%s: path too long", path);
    if (!slash)
        snprintf(dir, n, ".");
    else if (dir_len == 0)
        snprintf(dir, n, "/");
    else {
        memcpy(dir, path, dir_len);
        dir[dir_len] = '\0';
    }
    return RC_OK;
}

/* "<dir>/.<name>.tmp.<pid>" */
rc_status temp_name(const char *path, long pid, char *buf, size_t n)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int len = snprintf(buf, n, "%.*s.%s.tmp.%ld", (int)(slash ? slash - path + 1 : 0), path, base, pid);
    if (len < 0 || (size_t)len >= n)
        return rc_errorf(RC_ERR_IO, "%s: path too long", path);
    return RC_OK;
}

/* The output path itself: a file name; a folder or a dangling symbolic link
 * is an error; an existing file needs `force`. */
rc_status check_target(const char *path, bool force, char *dir, size_t n)
{
    if (!path[0])
        return rc_errorf(RC_ERR_USAGE, "the output path is empty");
    RC_TRY(split_dir(path, dir, n));
    struct stat sb, tb;
    if (lstat(path, &sb) == 0) {
        if (S_ISLNK(sb.st_mode) && stat(path, &tb) != 0) {
            if (!force)
                return rc_errorf(RC_ERR_USAGE, "%s exists (a dangling symbolic link; use --force to replace it, "
                                 "or --out FILE)", path);
            return rc_errorf(RC_ERR_IO, "%s is a symbolic link to a missing file: give the target's path "
                             "or remove the link", path);
        }
        if (S_ISDIR(sb.st_mode) || (S_ISLNK(sb.st_mode) && S_ISDIR(tb.st_mode)))
            return rc_errorf(RC_ERR_IO, "%s is a folder, not a file name", path);
        if (!force)
            return rc_errorf(RC_ERR_USAGE, "%s exists (use --force to overwrite, or --out FILE)", path);
    } else if (errno != ENOENT) {
        return rc_errorf(RC_ERR_IO, "%s: cannot check the output path: %s", path, strerror(errno));
    }
    return RC_OK;
}

rc_status rc_h5_check_output(const char *path, bool force)
{
    if (!path)
        return rc_errorf(RC_ERR_INTERNAL, "rc_h5_check_output: path is NULL");
    char dir[TMP_PATH_MAX], probe[TMP_PATH_MAX];
    RC_TRY(check_target(path, force, dir, sizeof dir));
    /* the folder: can a file be made there? (the same name the write uses) */
    RC_TRY(temp_name(path, (long)getpid(), probe, sizeof probe));
    struct stat db;
    if (stat(dir, &db) != 0)
        return rc_errorf(RC_ERR_IO, "%s: the output folder %s cannot be used: %s", path, dir, strerror(errno));
    if (!S_ISDIR(db.st_mode))
        return rc_errorf(RC_ERR_IO, "%s: %s is not a folder", path, dir);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot create a file in %s: %s", path, dir, strerror(errno));
    close(fd);
    if (unlink(probe) != 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot remove the test file %s: %s", path, probe, strerror(errno));
    return RC_OK;
}

int rc_h5_remove_stale_temps(const char *path, void (*removed)(const char *tmp_path, long pid))
{
    char dir[TMP_PATH_MAX], prefix[TMP_PATH_MAX], full[TMP_PATH_MAX + NAME_MAX + 2];
    if (!path || split_dir(path, dir, sizeof dir) != RC_OK) {
        rc_clear_error();
        return 0;
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int pl = snprintf(prefix, sizeof prefix, ".%s.tmp.", base);
    if (pl < 0 || (size_t)pl >= sizeof prefix)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    const long self = (long)getpid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)pl) != 0)
            continue;
        const char *digits = e->d_name + pl;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (!isdigit((unsigned char)digits[0]) || *end || errno || pid <= 0 || pid == self)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) /* alive, or not ours to judge */
            continue;
        if (temp_name(path, pid, full, sizeof full) != RC_OK) {
            rc_clear_error();
            continue;
        }
        struct stat sb;
        if (lstat(full, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (unlink(full) == 0) {
            n++;
            if (removed)
                removed(full, pid);
        }
    }
    closedir(d);
    return n;
}
