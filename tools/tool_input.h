/* tool_input.h - shared by the data converters (idx2npy, csv2npy): reads a
 * whole input file into memory, decompressing it first when it is gzip data
 * (recognised by its magic bytes 1f 8b, whatever its name). Decompression
 * runs `gzip -dc` in a child process (fork + exec, no shell, so any file
 * name is safe), which spares the build a zlib dependency; a corrupt or
 * truncated .gz makes gzip fail and is refused, never half-read. */
#ifndef TOOL_INPUT_H
#define TOOL_INPUT_H

#include "mp_util.h"

#include <sys/wait.h>

/* Reads all of fd into a malloc'ed buffer (one spare NUL byte at the end). */
static int tool_slurp(int fd, unsigned char **out, size_t *len)
{
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = (unsigned char *)malloc(cap + 1);
    for (;;) {
        if (!buf)
            return -1;
        if (n == cap) {
            unsigned char *b = (unsigned char *)realloc(buf, 2 * cap + 1);
            if (!b)
                break;
            buf = b;
            cap *= 2;
        }
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            break;
        if (k == 0) {
            buf[n] = 0;
            *out = buf;
            *len = n;
            return 0;
        }
        n += (size_t)k;
    }
    free(buf);
    return -1;
}

/* gzip -dc path, its output read through a pipe. */
static int tool_gunzip(const char *path, unsigned char **out, size_t *len, MpErr *e)
{
    int p[2];
    if (pipe(p) != 0)
        return mp_errf(e, "%s: cannot start gzip: %s", path, strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return mp_errf(e, "%s: cannot start gzip: %s", path, strerror(errno));
    }
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(p[1], 1);
        if (null >= 0)
            dup2(null, 2);   /* our own message says what went wrong */
        close(p[0]);
        close(p[1]);
        execlp("gzip", "gzip", "-dc", "--", path, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    int rc = tool_slurp(p[0], out, len);
    close(p[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (rc != 0)
        return mp_errf(e, "%s: out of memory decompressing it", path);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    free(*out);
    *out = NULL;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return mp_errf(e, "%s: is gzip-compressed, but the gzip program was not found", path);
    return mp_errf(e, "%s: corrupt or truncated gzip data (gzip -dc failed)", path);
}

/* The file's bytes, decompressed when it is gzip data. */
static int tool_read_input(const char *path, unsigned char **out, size_t *len, MpErr *e)
{
    int64_t n;
    if (mp_read_file(path, out, &n, e))
        return -1;
    *len = (size_t)n;
    if (n >= 2 && (*out)[0] == 0x1f && (*out)[1] == 0x8b) {
        free(*out);
        *out = NULL;
        return tool_gunzip(path, out, len, e);
    }
    return 0;
}

/* A whole decimal number in [lo, hi] into *v: 0, or -1 if s is not one. */
static MP_UNUSED int tool_int(const char *s, long long lo, long long hi, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return !*s || *end || errno || *v < lo || *v > hi ? -1 : 0;
}

#endif
