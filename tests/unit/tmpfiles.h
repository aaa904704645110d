/* tmpfiles.h - shared by the file-format unit tests: a fresh temporary
 * folder per test program (cmocka group setup / teardown), paths in it, raw
 * file writing, and the check that an error is one line naming the file. */
#ifndef TMPFILES_H
#define TMPFILES_H

#include "mp_util.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static char dir[64];

static MP_UNUSED int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mp_test_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

/* Removes the folder, its files and its (empty) sub-folders. */
static MP_UNUSED int remove_dir(void **state)
{
    (void)state;
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[512];
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (unlink(p) != 0)
                rmdir(p);
        }
    if (d)
        closedir(d);
    return rmdir(dir);
}

/* dir/name; the last four results stay valid. */
static MP_UNUSED const char *at(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static MP_UNUSED void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

#define WRITE_LIT(path, s) write_bytes(path, s, sizeof s - 1)

/* The message is one line that names the file and holds w1 (and w2). */
static MP_UNUSED void expect_msg(const MpErr *e, const char *path, const char *w1, const char *w2)
{
    print_message("    message: %s\n", e->msg);
    assert_non_null(strstr(e->msg, path));
    assert_null(strchr(e->msg, '\n'));
    assert_non_null(strstr(e->msg, w1));
    if (w2)
        assert_non_null(strstr(e->msg, w2));
}

#endif
