/* test_npy.c - runtime/mp_npy.h and runtime/mp_util.h: .npy round trips for
 * every dtype and rank, hand-made v1/v2/v3 files as NumPy writes them, every
 * refusal (the message must name the file and say what was wrong), the
 * atomic writer (no torn file even when killed mid-write, no temp file left,
 * clean failure where it cannot write), and the small helpers.
 * With MP_NPY_IN=FILE set it only describes that file (see describe()). */
#include "mp_npy.h"

#include "tmpfiles.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

/* A .npy file: version major, the header dict text as given (padded to 64
 * with spaces and a newline, as NumPy does), then ndata bytes of data. */
static void write_npy(const char *path, int major, const char *dict, const void *data, size_t ndata)
{
    unsigned char buf[4096];
    size_t pre = major == 1 ? 10 : 12, n = strlen(dict);
    size_t hlen = n + 1;
    while ((pre + hlen) % 64)
        hlen++;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, dict, n);
    memset(buf + pre + n, ' ', hlen - n - 1);
    buf[pre + hlen - 1] = '\n';
    assert_true(pre + hlen + ndata <= sizeof buf);
    if (ndata)
        memcpy(buf + pre + hlen, data, ndata);
    write_bytes(path, buf, pre + hlen + ndata);
}

static void expect_refused(const char *path, const char *w1, const char *w2)
{
    MpArray a;
    MpErr e = {{0}};
    assert_int_equal(mp_npy_load(path, &a, &e), -1);
    assert_null(a.data);
    expect_msg(&e, path, w1, w2);
}

/* ---- round trips ------------------------------------------------------- */

static void round_trip(int dtype, int rank, const int64_t *shape)
{
    MpArray a = {0}, b;
    MpErr e = {{0}};
    a.dtype = dtype;
    a.rank = rank;
    memcpy(a.shape, shape, (size_t)rank * sizeof *shape);
    a.nbytes = mp_numel(rank, shape) * mp_dtype_size(dtype);
    a.data = malloc((size_t)a.nbytes + 1);
    for (int64_t i = 0; i < a.nbytes; i++)
        ((unsigned char *)a.data)[i] = (unsigned char)(i * 37 + dtype);
    const char *p = at("rt.npy");
    assert_int_equal(mp_npy_save(p, &a, &e), 0);
    assert_int_equal(mp_npy_load(p, &b, &e), 0);
    assert_int_equal(b.dtype, dtype);
    assert_int_equal(b.rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(b.shape[i], shape[i]);
    assert_int_equal(b.nbytes, a.nbytes);
    assert_non_null(b.data);
    assert_memory_equal(a.data, b.data, (size_t)a.nbytes);
    /* NumPy's layout: version 1.0, data at a multiple of 64. */
    unsigned char head[10];
    FILE *f = fopen(p, "rb");
    assert_int_equal(fread(head, 1, 10, f), 10);
    fclose(f);
    assert_int_equal(head[6], 1);
    assert_int_equal((10 + head[8] + 256 * head[9]) % 64, 0);
    mp_array_free(&b);
    free(a.data);
}

static void test_round_trips(void **state)
{
    (void)state;
    static const int types[] = {MP_F32, MP_F16, MP_I32, MP_U8};
    static const int64_t shapes[][4] = {{0}, {5}, {3, 4}, {2, 1, 3, 2}, {0, 7}};
    static const int ranks[] = {0, 1, 2, 4, 2};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 5; s++)
            round_trip(types[t], ranks[s], shapes[s]);
}

static void test_saved_header_text(void **state)
{
    (void)state;
    float v[6] = {1, 2, 3, 4, 5, 6};
    MpArray a = {MP_F32, 2, {2, 3}, v, 24};
    MpErr e = {{0}};
    assert_int_equal(mp_npy_save(at("h.npy"), &a, &e), 0);
    unsigned char buf[200];
    FILE *f = fopen(at("h.npy"), "rb");
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(n, 128 + 24);   /* what np.save writes, byte for byte */
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_memory_equal(buf + 10, want, strlen(want));
    for (size_t i = 10 + strlen(want); i < 127; i++)
        assert_int_equal(buf[i], ' ');
    assert_int_equal(buf[127], '\n');
    assert_memory_equal(buf + 128, v, 24);
}

static void test_save_refuses(void **state)
{
    (void)state;
    uint16_t v[2] = {0};
    MpArray a = {MP_BF16, 1, {2}, v, 4};
    MpErr e = {{0}};
    assert_int_equal(mp_npy_save(at("bf.npy"), &a, &e), -1);
    expect_msg(&e, "bf.npy", "bf16", NULL);
    MpArray b = {MP_F32, 1, {2}, v, 4};   /* 2 f32 are 8 bytes, not 4 */
    assert_int_equal(mp_npy_save(at("bad.npy"), &b, &e), -1);
    expect_msg(&e, "bad.npy", "does not match", NULL);
    MpArray c = {MP_U8, 1, {2}, v, 2};
    assert_int_equal(mp_npy_save("/nonexistent-dir/x.npy", &c, &e), -1);
    expect_msg(&e, "/nonexistent-dir/x.npy", "temporary", NULL);
}

/* What NumPy writes, by hand: versions 1, 2 and 3, u1 in any byte order,
 * Python 2's long integers, keys in any order, 1-d and scalar shapes. */
static void test_numpy_headers(void **state)
{
    (void)state;
    int32_t v[6] = {-1, 2, -3, 4, -5, 6};
    static const struct { int major; const char *dict; int dtype, rank; int64_t d0, nbytes; } cases[] = {
        {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", MP_I32, 2, 2, 24},
        {2, "{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", MP_I32, 1, 6, 24},
        {3, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", MP_F32, 2, 3, 24},
        {1, "{\"shape\": (6L,), \"descr\": \"<f2\", \"fortran_order\": False}", MP_F16, 1, 6, 12},
        {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (24,), }", MP_U8, 1, 24, 24},
        {1, "{'descr': '<u1', 'fortran_order': False, 'shape': (4, 6), }", MP_U8, 2, 4, 24},
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", MP_F32, 0, 0, 4},
        {1, "{'descr':'<i4','fortran_order':False,'shape':(1,1,1,1,1,1,1,6)}", MP_I32, 8, 1, 24},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t n = cases[i].nbytes;
        write_npy(at("v.npy"), cases[i].major, cases[i].dict, v, (size_t)n);
        MpArray a;
        MpErr e = {{0}};
        int rc = mp_npy_load(at("v.npy"), &a, &e);
        if (rc)
            print_message("case %zu: %s\n", i, e.msg);
        assert_int_equal(rc, 0);
        assert_int_equal(a.dtype, cases[i].dtype);
        assert_int_equal(a.rank, cases[i].rank);
        if (a.rank)
            assert_int_equal(a.shape[0], cases[i].d0);
        assert_int_equal(a.nbytes, n);
        assert_memory_equal(a.data, v, (size_t)n);
        mp_array_free(&a);
        assert_null(a.data);
    }
}

/* ---- refusals ---------------------------------------------------------- */

static void test_missing_and_not_npy(void **state)
{
    (void)state;
    expect_refused(at("absent.npy"), "cannot open", NULL);
    WRITE_LIT(at("text.npy"), "hello world, not numpy");
    expect_refused(at("text.npy"), "not a .npy file", "\\x93NUMPY");
    WRITE_LIT(at("zip.npy"), "PK\x03\x04 rest of a zip");
    expect_refused(at("zip.npy"), "not a .npy file", ".npz");
    WRITE_LIT(at("empty.npy"), "");
    expect_refused(at("empty.npy"), "not a .npy file", NULL);
    WRITE_LIT(at("short.npy"), "\x93NUMPY\x01");
    expect_refused(at("short.npy"), "truncated", NULL);
    WRITE_LIT(at("v9.npy"), "\x93NUMPY\x09\x00\x10\x00{}");
    expect_refused(at("v9.npy"), "version 1.0, 2.0 or 3.0", "found 9.0");
    expect_refused(dir, "not a regular file", NULL);
}

static void test_truncated(void **state)
{
    (void)state;
    unsigned char d[1024] = {0};
    write_npy(at("train_x.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (60000, 784), }", d, 1024);
    MpArray a;
    MpErr e = {{0}};
    assert_int_equal(mp_npy_load(at("train_x.npy"), &a, &e), -1);
    char want[512];
    snprintf(want, sizeof want, "%s: truncated: header says 60000x784 u8 (47040000 bytes) but the file holds 1024 bytes of data",
             at("train_x.npy"));
    assert_string_equal(e.msg, want);
    /* too much data is refused too: the header and the data disagree */
    write_npy(at("long.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", d, 12);
    expect_refused(at("long.npy"), "2 f32 (8 bytes)", "holds 12 bytes");
    /* the header itself cut short */
    WRITE_LIT(at("cut.npy"), "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', ");
    expect_refused(at("cut.npy"), "truncated", "header");
    WRITE_LIT(at("cut2.npy"), "\x93NUMPY\x02\x00\x76\x00");
    expect_refused(at("cut2.npy"), "truncated", NULL);
}

static void test_refused_arrays(void **state)
{
    (void)state;
    float d[8] = {0};
    static const struct { const char *dict, *w1, *w2; } cases[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", "expected a C-order array, found fortran_order True", NULL},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", "little-endian", "'>f4'"},
        {"{'descr': '>i4', 'fortran_order': False, 'shape': (4,), }", "big-endian", NULL},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", "expected dtype '<f4', '<f2', '<i4', '<u2' or '|u1'", "found '<f8'"},
        {"{'descr': '|i1', 'fortran_order': False, 'shape': (16,), }", "found '|i1'", NULL},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", "object array", NULL},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", "structured", NULL},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "overflows", NULL},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "overflows", NULL},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,4), }", "at most 8 dimensions", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_npy(at("bad.npy"), 1, cases[i].dict, d, 16);
        expect_refused(at("bad.npy"), cases[i].w1, cases[i].w2);
    }
}

static void test_bad_header_dicts(void **state)
{
    (void)state;
    float d[4] = {0};
    static const struct { const char *dict, *w1; } cases[] = {
        {"", "'{'"},
        {"not a dict", "'{'"},
        {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
        {"{'fortran_order': False, 'shape': (4,)}", "missing key 'descr'"},
        {"{'descr': '<f4', 'shape': (4,)}", "missing key 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'extra': 1}", "found 'extra'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", "appears twice"},
        {"{'descr': '<f4', 'fortran_order': false, 'shape': (4,)}", "True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [4]}", "'(' to start the shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4 5)}", "',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}", "non-negative integer"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4.0,)}", "',' or ')'"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (4,)}", "',' or '}'"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (4,)}", "':'"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (4,)}", "bad header"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x", "only white space"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,)", "',' or '}'"},
        {"{'des\\x63r': '<f4', 'fortran_order': False, 'shape': (4,)}", "plain string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_npy(at("hdr.npy"), 1, cases[i].dict, d, 16);
        expect_refused(at("hdr.npy"), "bad header", cases[i].w1);
    }
}

/* ---- the atomic writer ------------------------------------------------- */

static int count_temps(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void remove_temps(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp."))
            unlink(at(de->d_name));
    closedir(d);
}

/* The file is wholly `a` repeated na times or wholly `b` repeated nb times. */
static int whole(const char *path, char a, size_t na, char b, size_t nb)
{
    unsigned char *buf;
    int64_t n;
    MpErr e;
    if (mp_read_file(path, &buf, &n, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 0;
    }
    char c = n == (int64_t)na ? a : n == (int64_t)nb ? b : 0;
    int ok = c != 0;
    int64_t i = 0;
    for (; ok && i < n; i++)
        ok = buf[i] == (unsigned char)c;
    if (!ok)
        fprintf(stderr, "%s: %lld bytes, first '%c', bad at %lld\n", path, (long long)n,
                n ? buf[0] : '-', (long long)i - 1);
    free(buf);
    return ok;
}

static int write_fill(const char *path, char c, size_t n, MpErr *e)
{
    char *p = (char *)malloc(n);
    memset(p, c, n);
    size_t half = n / 2, rest = n - half;
    const void *parts[2] = {p, p + half};
    size_t sizes[2] = {half, rest};
    int rc = mp_write_file_atomic(path, parts, sizes, 2, e);
    free(p);
    return rc;
}

static void test_atomic_replace(void **state)
{
    (void)state;
    MpErr e = {{0}};
    const char *p = at("ckpt.bin");
    assert_int_equal(write_fill(p, 'a', 1000, &e), 0);
    assert_true(whole(p, 'a', 1000, 0, 0));
    assert_int_equal(write_fill(p, 'b', 3000, &e), 0);
    assert_true(whole(p, 'b', 3000, 0, 0));
    assert_int_equal(count_temps(), 0);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_true(st.st_mode & S_IRUSR);
    assert_true(st.st_mode & S_IWUSR);
    /* a file name without a folder is written in the current folder */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    assert_int_equal(write_fill("plain.bin", 'c', 10, &e), 0);
    assert_int_equal(chdir(cwd), 0);
    assert_true(whole(at("plain.bin"), 'c', 10, 0, 0));
}

static void test_atomic_failures(void **state)
{
    (void)state;
    MpErr e = {{0}};
    assert_int_equal(write_fill("/nonexistent-dir/x.bin", 'a', 10, &e), -1);
    expect_msg(&e, "/nonexistent-dir/x.bin", "cannot create", NULL);
    WRITE_LIT(at("afile"), "x");
    assert_int_equal(write_fill(at("afile/x.bin"), 'a', 10, &e), -1);
    expect_msg(&e, at("afile/x.bin"), "cannot create", NULL);
    /* the target is a folder: the rename fails, the temp file goes */
    assert_int_equal(mkdir(at("adir"), 0755), 0);
    assert_int_equal(write_fill(at("adir"), 'a', 10, &e), -1);
    expect_msg(&e, at("adir"), "rename", NULL);
    assert_int_equal(count_temps(), 0);
    /* a read-only folder (root may write anyway, so only checked for others) */
    assert_int_equal(mkdir(at("ro"), 0555), 0);
    if (geteuid() != 0) {
        assert_int_equal(write_fill(at("ro/x.bin"), 'a', 10, &e), -1);
        expect_msg(&e, at("ro/x.bin"), "cannot create", NULL);
    }
}

/* A write that fails half way (the file-size limit, which binds root too)
 * leaves the old file as it was and no temporary file. */
static void test_atomic_write_error_keeps_old(void **state)
{
    (void)state;
    MpErr e = {{0}};
    const char *p = at("keep.bin");
    assert_int_equal(write_fill(p, 'o', 100, &e), 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        int rc = write_fill(p, 'n', 100000, &e);
        _exit(rc == -1 && strstr(e.msg, "write failed") ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(whole(p, 'o', 100, 0, 0));
    assert_int_equal(count_temps(), 0);
}

/* Kill a writer that rewrites the file over and over at random moments: the
 * file is always wholly the old or wholly the new content. */
static void test_atomic_kill(void **state)
{
    (void)state;
    MpErr e = {{0}};
    char p[4096];   /* at() returns a buffer that remove_temps() reuses */
    snprintf(p, sizeof p, "%s", at("killed.bin"));
    size_t na = 1 << 20, nb = 3 << 19;
    assert_int_equal(write_fill(p, 'a', na, &e), 0);
    for (int round = 0; round < 8; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0;; i++)
                write_fill(p, i % 2 ? 'a' : 'b', i % 2 ? na : nb, &e);
        }
        struct timespec ts = {0, (long)(round + 1) * 3000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(whole(p, 'a', na, 'b', nb));
        remove_temps();
    }
}

/* ---- helpers ------------------------------------------------------------ */

static void test_checked_arithmetic(void **state)
{
    (void)state;
    int64_t r;
    assert_int_equal(mp_mul_i64(INT64_MAX / 2, 2, &r), 0);
    assert_int_equal(mp_mul_i64(INT64_MAX / 2 + 1, 2, &r), -1);
    assert_int_equal(mp_mul_i64(-1, INT64_MIN, &r), -1);
    assert_int_equal(mp_mul_i64(INT64_MIN, 1, &r), 0);
    assert_int_equal(mp_mul_i64(-3, -4, &r), 0);
    assert_int_equal(r, 12);
    assert_int_equal(mp_mul_i64(0, INT64_MIN, &r), 0);
    assert_int_equal(mp_add_i64(INT64_MAX, 1, &r), -1);
    assert_int_equal(mp_add_i64(INT64_MIN, -1, &r), -1);
    assert_int_equal(mp_add_i64(INT64_MAX, -1, &r), 0);
    int64_t big[3] = {1 << 30, 1 << 30, 1 << 30}, neg[2] = {3, -1};
    assert_int_equal(mp_numel(3, big), -1);
    assert_int_equal(mp_numel(2, big), (int64_t)1 << 60);
    assert_int_equal(mp_numel(2, neg), -1);
    assert_int_equal(mp_numel(0, big), 1);
    char s[64];
    assert_string_equal(mp_shape_str(s, sizeof s, 2, big), "1073741824x1073741824");
    assert_string_equal(mp_shape_str(s, sizeof s, 0, big), "scalar");
}

static void test_json_and_errf(void **state)
{
    (void)state;
    MpBuf b = {NULL, 0, 0, 0};
    mp_buf_json_str(&b, "a\"b\\c\nd\te\x01 \xc3\xa9");
    assert_string_equal(b.p, "\"a\\\"b\\\\c\\nd\\te\\u0001 \xc3\xa9\"");
    mp_buf_free(&b);
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    mp_buf_printf(&b, "%s|%d", big, 7);
    assert_int_equal(b.len, 1001);
    assert_string_equal(b.p + 999, "|7");
    mp_buf_free(&b);
    MpErr e;
    assert_int_equal(mp_errf(&e, "two\nlines %d", 2), -1);
    assert_string_equal(e.msg, "two lines 2");
    assert_int_equal(mp_errf(&e, "%s", big), -1);
    assert_int_equal(strlen(e.msg), sizeof e.msg - 1);
    assert_int_equal(mp_dtype_size(MP_BF16), 2);
    assert_string_equal(mp_dtype_name(MP_U8), "u8");
}

/* MP_NPY_IN=FILE: load FILE (and map it: the same bytes) and print "dtype shape nbytes fnv1a64" or the
 * error, for tests/t_tools.sh to compare with what NumPy wrote. */
static int describe(const char *path)
{
    MpArray a;
    MpErr e;
    MpArray m;
    int lrc = mp_npy_load(path, &a, &e), mrc = mp_npy_map(path, &m, &e);
    if (lrc != mrc || (!lrc && (m.nbytes != a.nbytes || memcmp(m.data, a.data, (size_t)a.nbytes)))) {
        printf("mp_npy_load and mp_npy_map disagree\n");
        return 1;
    }
    mp_array_free(&m);
    if (lrc) {
        printf("error: %s\n", e.msg);
        return 1;
    }
    char shp[160];
    uint64_t h = 1469598103934665603ULL;
    for (int64_t i = 0; i < a.nbytes; i++)
        h = (h ^ ((unsigned char *)a.data)[i]) * 1099511628211ULL;
    printf("%s %s %lld %016llx\n", mp_dtype_name(a.dtype), mp_shape_str(shp, sizeof shp, a.rank, a.shape),
           (long long)a.nbytes, (unsigned long long)h);
    mp_array_free(&a);
    return 0;
}

int main(void)
{
    if (getenv("MP_NPY_IN"))
        return describe(getenv("MP_NPY_IN"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_saved_header_text),
        cmocka_unit_test(test_save_refuses),
        cmocka_unit_test(test_numpy_headers),
        cmocka_unit_test(test_missing_and_not_npy),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_refused_arrays),
        cmocka_unit_test(test_bad_header_dicts),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_atomic_failures),
        cmocka_unit_test(test_atomic_write_error_keeps_old),
        cmocka_unit_test(test_atomic_kill),
        cmocka_unit_test(test_checked_arithmetic),
        cmocka_unit_test(test_json_and_errf),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
