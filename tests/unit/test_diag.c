/* test_diag.c - message format (compiler/diag.c): the source line and the
 * caret under it, tabs, unprintable bytes, clipping of long lines, the
 * error limit, suggestions, usage and internal errors. Each expected text
 * is the exact output, byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "diag.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *buf;
static size_t buflen;
static FILE *mem;

static void start(void)
{
    mem = open_memstream(&buf, &buflen);
    diag_init(mem);
}

/* Stop capturing; the caller frees the returned text. */
static char *finish(void)
{
    fclose(mem);
    diag_init(stderr);
    return buf;
}

static SrcFile file_of(const char *text)
{
    return (SrcFile){"m.mp", text, (long)strlen(text)};
}

static void check(const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        fprintf(stderr, "got:\n%s\nwant:\n%s\n", got, want);
    assert_string_equal(got, want);
}

static void test_caret(void **state)
{
    (void)state;
    SrcFile f = file_of("model m\nlogits = h @ w2 + b2\nx = 1");
    start();
    diag_error((SrcLoc){&f, 2, 14, 2}, "'@' needs matching inner dimensions, got [%d, %d] @ [%d, %d]",
               128, 784, 512, 10);
    diag_warning((SrcLoc){&f, 2, 1, 6}, "a warning");
    diag_note((SrcLoc){&f, 3, 5, 0}, "a note");
    diag_note((SrcLoc){0}, "a note without a place");
    assert_int_equal(diag_error_count(), 1);
    assert_int_equal(diag_warning_count(), 1);
    char *out = finish();
    check(out, "m.mp:2:14: error: '@' needs matching inner dimensions, got [128, 784] @ [512, 10]\n"
               "    logits = h @ w2 + b2\n"
               "                 ^~\n"
               "m.mp:2:1: warning: a warning\n"
               "    logits = h @ w2 + b2\n"
               "    ^~~~~~\n"
               "m.mp:3:5: note: a note\n"
               "    x = 1\n"
               "        ^\n"
               "note: a note without a place\n");
    free(out);
}

/* Tabs expand to 8-column stops; bytes that are not printable ASCII show
 * as '?' (one column each); CR of CRLF is not shown; the underline stops
 * at the end of the line; a column past the end points just after it. */
static void test_line_rendering(void **state)
{
    (void)state;
    SrcFile f = file_of("\tx =\t1 +\r\nw = \xc3\xa9\x01 + 1\nabc\n");
    start();
    diag_error((SrcLoc){&f, 1, 6, 1}, "tab");
    diag_error((SrcLoc){&f, 2, 8, 3}, "bytes");
    diag_error((SrcLoc){&f, 3, 2, 1 << 20}, "long span");
    diag_error((SrcLoc){&f, 3, 4, 1}, "end of line");
    diag_error((SrcLoc){&f, 3, 99, 5}, "past the end");
    char *out = finish();
    check(out, "m.mp:1:6: error: tab\n"
               "            x =     1 +\n"
               "                    ^\n"
               "m.mp:2:8: error: bytes\n"
               "    w = ??? + 1\n"
               "           ^~~\n"
               "m.mp:3:2: error: long span\n"
               "    abc\n"
               "     ^~\n"
               "m.mp:3:4: error: end of line\n"
               "    abc\n"
               "       ^\n"
               "m.mp:3:99: error: past the end\n"
               "    abc\n"
               "       ^\n");
    free(out);
}

static void test_clipping(void **state)
{
    (void)state;
    char line[1001];
    for (int i = 0; i < 1000; i++)
        line[i] = (char)('a' + i % 26);
    line[1000] = 0;
    SrcFile f = file_of(line);
    start();
    diag_error((SrcLoc){&f, 1, 3, 2}, "near the start");
    diag_error((SrcLoc){&f, 1, 501, 300}, "in the middle");
    diag_error((SrcLoc){&f, 1, 998, 3}, "near the end");
    char *out = finish();
    /* 100 columns are shown: from 40 left of the caret, "..." where cut */
    char want[2048], *w = want;
    w += sprintf(w, "m.mp:1:3: error: near the start\n    %.100s...\n      ^~\n", line);
    w += sprintf(w, "m.mp:1:501: error: in the middle\n    ...%.100s...\n", line + 460);
    w += sprintf(w, "       %40s^", "");
    for (int i = 501; i < 560; i++)          /* the underline stops at the cut */
        *w++ = '~';
    *w++ = '\n';
    w += sprintf(w, "m.mp:1:998: error: near the end\n    ...%s\n       %40s^~~\n", line + 957, "");
    check(out, want);
    free(out);
}

static void test_too_many(void **state)
{
    (void)state;
    SrcFile f = file_of("x\n");
    start();
    for (int i = 0; i < DIAG_MAX_ERRORS - 1; i++)
        diag_error((SrcLoc){0}, "e%d", i);
    assert_false(diag_too_many());
    diag_error((SrcLoc){&f, 1, 1, 1}, "the last one");
    assert_true(diag_too_many());
    diag_error((SrcLoc){&f, 1, 1, 1}, "dropped");
    diag_warning((SrcLoc){&f, 1, 1, 1}, "dropped");
    diag_note((SrcLoc){0}, "dropped");
    char *out = finish();
    assert_non_null(strstr(out, "error: e18\nm.mp:1:1: error: the last one\n    x\n    ^\n"
                                "error: too many errors, stopping\n"));
    assert_null(strstr(out, "dropped"));
    assert_string_equal(strstr(out, "stopping\n"), "stopping\n");   /* the end */
    free(out);
    diag_reset();
    assert_false(diag_too_many());
    assert_int_equal(diag_error_count(), 0);
}

static void test_suggest(void **state)
{
    (void)state;
    const char *ops[] = {"relu", "gelu", "tanh", "linear", "layer_norm", "softmax", "log_softmax"};
    int n = sizeof ops / sizeof ops[0];
    assert_string_equal(diag_suggest("rleu", ops, n), "relu");
    assert_string_equal(diag_suggest("Relu", ops, n), "relu");
    assert_string_equal(diag_suggest("lienar", ops, n), "linear");
    assert_string_equal(diag_suggest("layernorm", ops, n), "layer_norm");
    assert_string_equal(diag_suggest("softmx", ops, n), "softmax");
    assert_string_equal(diag_suggest("elu", ops, n), "relu");       /* ties: the first */
    assert_null(diag_suggest("conv2d", ops, n));
    assert_null(diag_suggest("x", ops, n));
    assert_null(diag_suggest("relu", ops, n));                       /* not a typo */
    assert_null(diag_suggest("relu", ops, 0));
    char longname[400];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    const char *cands[] = {longname, "a"};
    assert_null(diag_suggest(longname + 1, cands, 2));
}

static void test_usage_and_internal(void **state)
{
    (void)state;
    start();
    diag_usage("cannot read '%s': %s", "x.mp", "No such file or directory");
    char *out = finish();
    check(out, "mpcc: cannot read 'x.mp': No such file or directory\n");
    free(out);

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        diag_init(stderr);
        diag_internal("sema.c", 42, "no shape");
    }
    close(fds[1]);
    char got[256] = {0};
    ssize_t k = read(fds[0], got, sizeof got - 1);
    assert_true(k > 0);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), EXIT_INTERNAL);
    check(got, "mpcc: internal error (a bug in mpcc) at sema.c:42: no shape\n");
    close(fds[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caret),
        cmocka_unit_test(test_line_rendering),
        cmocka_unit_test(test_clipping),
        cmocka_unit_test(test_too_many),
        cmocka_unit_test(test_suggest),
        cmocka_unit_test(test_usage_and_internal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
