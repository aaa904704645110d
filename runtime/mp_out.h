/* mp_out.h - the one way the program and mpcc write files (TRAINER.md
 * "Additions for production runs", Outputs).
 *
 * Rules, for every output path:
 *   - a symbolic link is followed (a chain, up to 40 links) and the file it
 *     points to is written; the link stays;
 *   - only a regular file is ever replaced: an existing directory, FIFO,
 *     socket or device is refused;
 *   - a path that is the same file (st_dev + st_ino) as one of the run's
 *     inputs is refused, except the one input the output may replace
 *     (`--save` may name the `--resume` file);
 *   - before the first step, the folder that will hold it exists and is
 *     writable (mp_out_check; a folder output, --tensorboard, may be made
 *     with its missing parents), so a bad path fails in the first second.
 * A file is written whole to a temporary file beside its target, named
 * `.NAME.mpcc-tmp` (one name per target, so a killed write leaves at most
 * one), fsync'ed and renamed into place; the next write to the same target
 * removes a leftover temporary file first. A log is appended in place
 * (mp_out_append) under the same rules.
 * Everything returns 0 or -1 with MpErr set to one line naming the path;
 * callers report a refused path as a usage error (exit 2). */
#ifndef MP_OUT_H
#define MP_OUT_H

#include "mp_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One input of a run: the option that named it and its path. */
typedef struct MpOutIn { const char *opt, *path; } MpOutIn;

/* A file being written: its target (links resolved) and temporary file. */
typedef struct MpOut { char *target, *tmp; FILE *f; } MpOut;

static MP_UNUSED char *mp_out_strdup_(const char *s, size_t n)
{
    char *p = (char *)malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* fsync the folder holding path, so that the rename itself is durable.
 * Some file systems refuse fsync on a folder (EINVAL): that is not an error. */
static MP_UNUSED int mp_fsync_dir_(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int bad = rc != 0 && errno != EINVAL && errno != EROFS;
    close(fd);
    return bad ? -1 : 0;
}

/* Length of path's folder part, its last '/' included (0: none). */
static MP_UNUSED size_t mp_out_dirlen_(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

/* The file a write to path lands in, links followed (a dangling link names
 * the file to create): malloc'ed, or NULL with e set. */
static MP_UNUSED char *mp_out_target(const char *path, MpErr *e)
{
    char *p = mp_out_strdup_(path, strlen(path)), link[4096];
    for (int hops = 0; p; hops++) {
        struct stat st;
        if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode))
            return p;
        ssize_t n = hops < 40 ? readlink(p, link, sizeof link - 1) : -1;
        if (n < 0) {
            free(p);
            mp_errf(e, "%s: cannot follow its symbolic link%s", path, hops < 40 ? "" : "s (a loop?)");
            return NULL;
        }
        size_t dl = link[0] == '/' ? 0 : mp_out_dirlen_(p);
        char *q = (char *)malloc(dl + (size_t)n + 1);
        if (q) {
            memcpy(q, p, dl);
            memcpy(q + dl, link, (size_t)n);
            q[dl + (size_t)n] = 0;
        }
        free(p);
        p = q;
    }
    mp_errf(e, "%s: out of memory", path);
    return NULL;
}

/* What an existing non-regular file is, for messages. */
static MP_UNUSED const char *mp_out_kind_(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* The folder that holds target exists and is writable. */
static MP_UNUSED int mp_out_folder_ok_(const char *opt, const char *path, const char *target,
                                       MpErr *e)
{
    size_t dl = mp_out_dirlen_(target);
    char *dir = dl ? mp_out_strdup_(target, dl) : mp_out_strdup_(".", 1);
    struct stat st;
    int rc = 0;
    if (!dir)
        return mp_errf(e, "%s '%s': out of memory", opt, path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        rc = mp_errf(e, "%s '%s': its folder '%s' does not exist", opt, path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        rc = mp_errf(e, "%s '%s': its folder '%s' is not writable", opt, path, dir);
    free(dir);
    return rc;
}

/* A folder output that does not exist yet is made with its missing parents
 * (mkdir -p): its nearest existing ancestor must be a writable folder. */
static MP_UNUSED int mp_out_ancestor_ok_(const char *opt, const char *path, const char *target,
                                         MpErr *e)
{
    char *dir = mp_out_strdup_(target, strlen(target));
    struct stat st;
    int rc = 0;
    if (!dir)
        return mp_errf(e, "%s '%s': out of memory", opt, path);
    for (;;) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
            dir[--n] = 0;
        char *slash = strrchr(dir, '/');
        if (!slash) {
            dir[0] = '.', dir[1] = 0;
            break;
        }
        slash[slash == dir] = 0;                /* "/x" -> "/" */
        if (stat(dir, &st) == 0 || errno != ENOENT || slash == dir)
            break;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        rc = mp_errf(e, "%s '%s': '%s' is not a folder", opt, path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        rc = mp_errf(e, "%s '%s': its folder '%s' is not writable", opt, path, dir);
    free(dir);
    return rc;
}

/* Checks output path of option opt before a run: 0, or -1 with e saying
 * why it is refused. in[0..nin): the run's inputs; the one whose option is
 * `except` may be the same file. dir: the output is a folder (created when
 * missing) rather than a file. */
static MP_UNUSED int mp_out_check(const char *opt, const char *path, const MpOutIn *in, int nin,
                                  const char *except, int dir, MpErr *e)
{
    char *target = mp_out_target(path, e);
    struct stat st, si;
    int rc = 0;
    if (!target)
        return -1;
    if (stat(target, &st) != 0) {
        rc = errno != ENOENT ? mp_errf(e, "%s '%s': %s", opt, path, strerror(errno))
           : dir ? mp_out_ancestor_ok_(opt, path, target, e) : mp_out_folder_ok_(opt, path, target, e);
    } else if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
        rc = mp_errf(e, "%s '%s': is %s, not a %s", opt, path,
                     S_ISREG(st.st_mode) ? "a file" : mp_out_kind_(st.st_mode),
                     dir ? "folder" : "regular file that may be replaced");
    } else if (dir ? access(target, W_OK | X_OK) != 0 : 0) {
        rc = mp_errf(e, "%s '%s': the folder is not writable", opt, path);
    } else {
        for (int i = 0; i < nin && !rc; i++)
            if (in[i].path && !(except && !strcmp(in[i].opt, except))
                && stat(in[i].path, &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
                rc = mp_errf(e, "%s '%s': is the same file as %s '%s', an input of this run", opt,
                             path, in[i].opt, in[i].path);
        if (!rc && !dir)
            rc = mp_out_folder_ok_(opt, path, target, e);
    }
    free(target);
    return rc;
}

/* Removes a temporary file a killed write left: only a regular file (or a
 * link) by our own name is ever removed. */
static MP_UNUSED int mp_out_clear_tmp_(const char *path, const char *tmp, MpErr *e)
{
    struct stat st;
    if (lstat(tmp, &st) != 0)
        return 0;
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return mp_errf(e, "%s: its temporary name '%s' is taken by %s", path, tmp,
                       mp_out_kind_(st.st_mode));
    return unlink(tmp) == 0 ? 0 : mp_errf(e, "%s: cannot remove the leftover temporary file '%s': %s",
                                          path, tmp, strerror(errno));
}

/* The target must be missing or a regular file (checked again at write time:
 * the run may have been long). *mode: the permissions to keep. */
static MP_UNUSED int mp_out_replaceable_(const char *path, const char *target, mode_t *mode,
                                         MpErr *e)
{
    struct stat st;
    mode_t um = umask(022);
    umask(um);
    *mode = (mode_t)(0666 & ~um);
    if (stat(target, &st) != 0)   /* missing: creating the temporary file tells why */
        return 0;
    if (!S_ISREG(st.st_mode))
        return mp_errf(e, "%s: is %s, not a regular file that may be replaced", path,
                       mp_out_kind_(st.st_mode));
    *mode = st.st_mode & 07777;
    return 0;
}

static MP_UNUSED void mp_out_free_(MpOut *o)
{
    free(o->target);
    free(o->tmp);
    o->target = o->tmp = NULL;
    o->f = NULL;
}

/* Starts writing path: o->f is the temporary file's stream. */
static MP_UNUSED int mp_out_begin(MpOut *o, const char *path, MpErr *e)
{
    mode_t mode;
    memset(o, 0, sizeof *o);
    if (!(o->target = mp_out_target(path, e)))
        return -1;
    size_t dl = mp_out_dirlen_(o->target), len = strlen(o->target);
    if (!(o->tmp = (char *)malloc(len + 16))) {
        mp_out_free_(o);
        return mp_errf(e, "%s: out of memory", path);
    }
    snprintf(o->tmp, len + 16, "%.*s.%s.mpcc-tmp", (int)dl, o->target, o->target + dl);
    if (mp_out_replaceable_(path, o->target, &mode, e) || mp_out_clear_tmp_(path, o->tmp, e)) {
        mp_out_free_(o);
        return -1;
    }
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0 || !(o->f = fdopen(fd, "wb"))) {
        int err = errno;
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        mp_out_free_(o);
        return mp_errf(e, "%s: cannot create a temporary file beside it: %s", path, strerror(err));
    }
    fchmod(fd, mode);   /* open's mode went through the umask; keep the old file's */
    return 0;
}

/* Gives up a write: the temporary file is removed, the target untouched. */
static MP_UNUSED void mp_out_abort(MpOut *o)
{
    if (o->f) {
        fclose(o->f);
        unlink(o->tmp);
    }
    mp_out_free_(o);
}

/* Finishes a write: flush, fsync, rename into place, fsync the folder. */
static MP_UNUSED int mp_out_commit(MpOut *o, const char *path, MpErr *e)
{
    const char *what = NULL;
    if (fflush(o->f) != 0 || ferror(o->f))
        what = "write failed";
    else if (fsync(fileno(o->f)) != 0)
        what = "fsync failed";
    int err = errno;
    if (fclose(o->f) != 0 && !what) {
        what = "close failed";
        err = errno;
    }
    o->f = NULL;
    if (!what && rename(o->tmp, o->target) != 0) {
        what = "cannot rename the temporary file into place";
        err = errno;
    }
    if (what)
        unlink(o->tmp);
    int dir_bad = !what && mp_fsync_dir_(o->target) != 0;
    mp_out_free_(o);
    if (what)
        return mp_errf(e, "%s: %s: %s", path, what, strerror(err));
    if (dir_bad)
        return mp_errf(e, "%s: written, but fsync of its folder failed: %s", path, strerror(errno));
    return 0;
}

/* Writes the concatenation of parts[0..nparts) to path (see above): a crash
 * at any point leaves the old file or the new one, never a torn one. */
static MP_UNUSED int mp_write_file_atomic(const char *path, const void *const *parts,
                                          const size_t *sizes, int nparts, MpErr *e)
{
    MpOut o;
    if (mp_out_begin(&o, path, e))
        return -1;
    for (int i = 0; i < nparts; i++)
        if (sizes[i] && fwrite(parts[i], 1, sizes[i], o.f) != sizes[i]) {
            int err = errno;
            mp_out_abort(&o);
            return mp_errf(e, "%s: write failed: %s", path, strerror(err));
        }
    return mp_out_commit(&o, path, e);
}

/* Opens path to append to it in place (truncated first when fresh): a log
 * that grows during the run. NULL with e set. */
static MP_UNUSED FILE *mp_out_append(const char *path, int fresh, MpErr *e)
{
    mode_t mode;
    char *target = mp_out_target(path, e);
    if (!target)
        return NULL;
    if (mp_out_replaceable_(path, target, &mode, e)) {
        free(target);
        return NULL;
    }
    /* O_NONBLOCK: a FIFO put there since the check must not hang the open */
    int fd = open(target, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | (fresh ? O_TRUNC : 0), mode);
    int err = errno;
    free(target);
    struct stat st;
    FILE *f = NULL;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)
        && fcntl(fd, F_SETFL, O_APPEND) == 0 && (f = fdopen(fd, "a")))
        return f;
    if (fd >= 0) {
        close(fd);
        mp_errf(e, "%s: is not a regular file", path);
    } else {
        mp_errf(e, "%s: cannot open for writing: %s", path, strerror(err));
    }
    return NULL;
}

#endif
