/* test_out.c - runtime/mp_out.h, the one writer of mpcc and the programs:
 * what mp_out_check refuses and why, links followed (chains, loops,
 * dangling), folder outputs (--tensorboard's kind), the temporary name a
 * killed write leaves and the next write removes (but never a folder by
 * that name), kept permissions, and the in-place log. The end-to-end
 * behaviour is tests/t_out_paths.sh's. */
#include "mp_out.h"
#include "tmpfiles.h"

#include <sys/socket.h>
#include <sys/un.h>

static int check(const char *path, const MpOutIn *in, int nin, const char *except, int is_dir,
                 MpErr *e)
{
    return mp_out_check("--out", path, in, nin, except, is_dir, e);
}

static int write_text(const char *path, const char *s, MpErr *e)
{
    const void *parts[1] = {s};
    size_t sizes[1] = {strlen(s)};
    return mp_write_file_atomic(path, parts, sizes, 1, e);
}

static void expect_text(const char *path, const char *s)
{
    unsigned char *buf;
    int64_t n;
    MpErr e;
    assert_int_equal(mp_read_file(path, &buf, &n, &e), 0);
    assert_int_equal(n, (int64_t)strlen(s));
    assert_memory_equal(buf, s, (size_t)n);
    free(buf);
}

static void test_refused_kinds(void **state)
{
    (void)state;
    MpErr e;
    char p[512];
    assert_int_equal(mkdir(at("d"), 0755), 0);
    assert_int_equal(mkfifo(at("fifo"), 0644), 0);
    assert_int_equal(check(at("d"), NULL, 0, NULL, 0, &e), -1);
    expect_msg(&e, at("d"), "is a directory", NULL);
    assert_int_equal(check(at("fifo"), NULL, 0, NULL, 0, &e), -1);
    expect_msg(&e, at("fifo"), "is a FIFO", NULL);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", at("sock"));
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(check(at("sock"), NULL, 0, NULL, 0, &e), -1);
    expect_msg(&e, at("sock"), "is a socket", NULL);
    close(s);
    assert_int_equal(check(at("none/x"), NULL, 0, NULL, 0, &e), -1);
    expect_msg(&e, at("none/x"), "does not exist", NULL);
    /* the writer itself refuses them too (the path may change during a run) */
    assert_int_equal(write_text(at("fifo"), "x", &e), -1);
    expect_msg(&e, at("fifo"), "is a FIFO", NULL);
    snprintf(p, sizeof p, "%s", at("fifo"));
    assert_null(mp_out_append(p, 1, &e));
    expect_msg(&e, p, "FIFO", NULL);
}

static void test_inputs_and_links(void **state)
{
    (void)state;
    MpErr e;
    WRITE_LIT(at("in.npy"), "data");
    assert_int_equal(symlink("in.npy", at("l1")), 0);
    assert_int_equal(symlink("l1", at("l2")), 0);            /* a chain */
    MpOutIn in[2] = {{"--data", at("in.npy")}, {"--resume", at("ck")}};
    WRITE_LIT(at("ck"), "ck");
    assert_int_equal(check(at("l2"), in, 2, NULL, 0, &e), -1);
    expect_msg(&e, at("l2"), "is the same file as --data", NULL);
    in[0].path = at("in.npy");
    in[1].path = at("ck");
    assert_int_equal(check(at("ck"), in, 2, "--resume", 0, &e), 0);   /* --save over --resume */
    assert_int_equal(check(at("ck"), in, 2, NULL, 0, &e), -1);
    expect_msg(&e, at("ck"), "--resume", NULL);
    assert_int_equal(symlink("loop_b", at("loop_a")), 0);
    assert_int_equal(symlink("loop_a", at("loop_b")), 0);
    assert_int_equal(check(at("loop_a"), NULL, 0, NULL, 0, &e), -1);
    expect_msg(&e, at("loop_a"), "symbolic link", NULL);
    /* written through: the link stays a link, its target changes */
    assert_int_equal(symlink("target", at("dangling")), 0);
    assert_int_equal(check(at("dangling"), NULL, 0, NULL, 0, &e), 0);
    assert_int_equal(write_text(at("dangling"), "new", &e), 0);
    expect_text(at("target"), "new");
    struct stat st;
    assert_int_equal(lstat(at("dangling"), &st), 0);
    assert_true(S_ISLNK(st.st_mode));
}

static void test_folder_outputs(void **state)
{
    (void)state;
    MpErr e;
    assert_int_equal(check(at("tb"), NULL, 0, NULL, 1, &e), 0);       /* created later */
    assert_int_equal(mkdir(at("tb"), 0755), 0);
    assert_int_equal(check(at("tb"), NULL, 0, NULL, 1, &e), 0);
    WRITE_LIT(at("file"), "x");
    assert_int_equal(check(at("file"), NULL, 0, NULL, 1, &e), -1);
    expect_msg(&e, at("file"), "is a file, not a folder", NULL);
}

static void test_leftover_temporary(void **state)
{
    (void)state;
    MpErr e;
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/.t.bin.mpcc-tmp", dir);
    WRITE_LIT(tmp, "half a write");                 /* what a kill -9 leaves */
    assert_int_equal(write_text(at("t.bin"), "whole", &e), 0);
    expect_text(at("t.bin"), "whole");
    assert_int_equal(access(tmp, F_OK), -1);        /* removed */
    assert_int_equal(mkdir(tmp, 0755), 0);          /* not ours to remove */
    assert_int_equal(write_text(at("t.bin"), "again", &e), -1);
    expect_msg(&e, at("t.bin"), "temporary name", "a directory");
    expect_text(at("t.bin"), "whole");
    assert_int_equal(rmdir(tmp), 0);
}

static void test_mode_kept_and_log(void **state)
{
    (void)state;
    MpErr e;
    struct stat st;
    WRITE_LIT(at("m.bin"), "x");
    assert_int_equal(chmod(at("m.bin"), 0640), 0);
    assert_int_equal(write_text(at("m.bin"), "y", &e), 0);
    assert_int_equal(stat(at("m.bin"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    char p[512];
    snprintf(p, sizeof p, "%s", at("log.jsonl"));
    FILE *f = mp_out_append(p, 1, &e);
    assert_non_null(f);
    fputs("a\n", f);
    fclose(f);
    assert_non_null(f = mp_out_append(p, 0, &e));  /* --resume appends */
    fputs("b\n", f);
    fclose(f);
    expect_text(p, "a\nb\n");
    assert_non_null(f = mp_out_append(p, 1, &e));  /* a fresh run starts over */
    fclose(f);
    expect_text(p, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_kinds),
        cmocka_unit_test(test_inputs_and_links),
        cmocka_unit_test(test_folder_outputs),
        cmocka_unit_test(test_leftover_temporary),
        cmocka_unit_test(test_mode_kept_and_log),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
