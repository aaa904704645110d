/* test_data.c - the trainer's data layer (runtime/mp_data.h) on hand-made
 * models and files: the window sampler (offsets drawn in range, shared by
 * every window input, restored exactly), the evaluation windows and the
 * --no-shuffle order with its wrap, .npy and raw .bin streams, and every
 * refusal: short, empty or wrongly typed streams, non-finite floats, labels
 * out of range for each integer type, dtype and NCHW hints. */
#include "mp_model.h"
#include "mp_util.h"
#include "mp_npy.h"
#include "mp_data.h"

#include "tmpfiles.h"

#include <math.h>

enum { N = 1000, W = 9, B = 5 };

static MpInput win_inputs[2] = {
    {"seq", MP_U16, 2, {B, W}, 0, NULL, NULL, 1},
    {"aux", MP_I32, 2, {B, W}, 0, NULL, NULL, 1},
};
static uint16_t seq_batch[B * W];
static int32_t aux_batch[B * W];

static MpModel model_of(MpInput *in, int n)
{
    MpModel m;
    memset(&m, 0, sizeof m);
    m.name = "t";
    m.batch = B;
    m.ninputs = n;
    m.inputs = in;
    return m;
}

static void save(const char *name, int dtype, int rank, const int64_t *shape, const void *data)
{
    MpArray a;
    MpErr e;
    memset(&a, 0, sizeof a);
    a.dtype = dtype;
    a.rank = rank;
    memcpy(a.shape, shape, (size_t)rank * sizeof *shape);
    a.data = (void *)data;
    a.nbytes = mp_numel(rank, shape) * mp_dtype_size(dtype);
    assert_int_equal(mp_npy_save(at(name), &a, &e), 0);
}

/* A .npy whose header names descr (any dtype, written by hand), n bytes of zeros. */
static void save_descr(const char *name, const char *descr, const char *shape, size_t n)
{
    char h[256];
    unsigned char buf[4096] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    int len = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    while ((10 + len + 1) % 64)
        h[len++] = ' ';
    h[len++] = '\n';
    buf[8] = (unsigned char)len;
    buf[9] = 0;
    memcpy(buf + 10, h, (size_t)len);
    assert_true(10 + (size_t)len + n <= sizeof buf);
    write_bytes(at(name), buf, 10 + (size_t)len + n);
}

/* Loads "--data" from NAME=FILE pairs (FILE in the test folder); rc. */
static int load(MpDataSet *d, const MpModel *m, MpErr *e, const char *n1, const char *f1,
                const char *n2, const char *f2)
{
    static char s1[600], s2[600];
    char *specs[2] = {s1, s2};
    snprintf(s1, sizeof s1, "%s=%s", n1, at(f1));
    if (n2)
        snprintf(s2, sizeof s2, "%s=%s", n2, at(f2));
    return mp_data_load(d, m, "--data", specs, n2 ? 2 : 1, e) || mp_data_scan(d, m, e);
}

static int group_setup(void **st)
{
    static uint16_t s[N];
    static int32_t a[N];
    int64_t n = N;
    if (make_dir(st))
        return -1;
    for (int i = 0; i < N; i++) {
        s[i] = (uint16_t)i;
        a[i] = 2 * i;
    }
    save("seq.npy", MP_U16, 1, &n, s);
    write_bytes(at("aux.bin"), a, sizeof a);    /* little-endian i32, as on x86 and arm */
    win_inputs[0].batch = seq_batch;
    win_inputs[1].batch = aux_batch;
    return 0;
}

/* Each row of the batch is the window at its key, in both inputs. */
static void check_rows(const int64_t *keys)
{
    for (int b = 0; b < B; b++)
        for (int j = 0; j < W; j++) {
            assert_int_equal(seq_batch[b * W + j], keys[b] + j);
            assert_int_equal(aux_batch[b * W + j], 2 * (keys[b] + j));
        }
}

static void test_window_sampler(void **st)
{
    (void)st;
    MpModel m = model_of(win_inputs, 2);
    MpDataSet d;
    MpOrder o;
    MpErr e;
    assert_int_equal(load(&d, &m, &e, "seq", "seq.npy", "aux", "aux.bin"), 0);
    assert_int_equal(d.window, W);
    assert_int_equal(d.stream, N);
    assert_int_equal(mp_order_init(&o, &d, B, 1, 3, &e), 0);
    int64_t lo = N, hi = -1;
    double sum = 0;
    for (int k = 0; k < 2000; k++) {
        const int64_t *keys = mp_order_next(&o);
        mp_fill_batch(&m, &d, keys);
        check_rows(keys);
        for (int b = 0; b < B; b++) {
            assert_true(keys[b] >= 0 && keys[b] <= N - W);
            lo = keys[b] < lo ? keys[b] : lo;
            hi = keys[b] > hi ? keys[b] : hi;
            sum += (double)keys[b];
        }
    }
    /* 10000 draws over 992 offsets: both ends reached, uniform on average */
    assert_int_equal(lo, 0);
    assert_int_equal(hi, N - W);
    assert_true(fabs(sum / 10000 - (N - W) / 2.0) < 0.03 * (N - W));
    /* the same seed draws the same offsets; another seed others */
    MpOrder o2, o3;
    assert_int_equal(mp_order_init(&o2, &d, B, 1, 3, &e), 0);
    assert_int_equal(mp_order_init(&o3, &d, B, 1, 4, &e), 0);
    assert_int_equal(mp_order_init(&o, &d, B, 1, 3, &e), 0);
    assert_memory_equal(mp_order_next(&o), mp_order_next(&o2), B * sizeof(int64_t));
    assert_memory_not_equal(mp_order_next(&o), mp_order_next(&o3), B * sizeof(int64_t));
    free(o.perm);
    free(o2.perm);
    free(o3.perm);
    mp_data_free(&d);
}

static void test_window_eval_and_no_shuffle(void **st)
{
    (void)st;
    MpModel m = model_of(win_inputs, 2);
    MpDataSet d;
    MpOrder o;
    MpErr e;
    assert_int_equal(load(&d, &m, &e, "aux", "aux.bin", "seq", "seq.npy"), 0);
    /* offsets 0, 8, ..., 984: floor((1000 - 9) / 8) + 1 = 124 windows */
    assert_int_equal(d.samples, (N - W) / (W - 1) + 1);
    assert_int_equal(d.samples, 124);
    assert_int_equal(d.batches, 24);
    for (int64_t i = 0; i < d.samples; i++)
        assert_int_equal(mp_data_key(&d, i), i * (W - 1));
    assert_true(mp_data_key(&d, d.samples - 1) + W <= N && mp_data_key(&d, d.samples) + W > N);
    assert_int_equal(mp_order_init(&o, &d, B, 0, 3, &e), 0);
    for (int64_t k = 0; k < 60; k++) {            /* batch 24 spans the wrap: 960 .. 984, 0 */
        const int64_t *keys = mp_order_next(&o);
        mp_fill_batch(&m, &d, keys);
        check_rows(keys);
        for (int b = 0; b < B; b++)
            assert_int_equal(keys[b], ((k * B + b) % 124) * (W - 1));
    }
    free(o.perm);
    mp_data_free(&d);
}

/* A checkpoint's (start, epoch, pos) continues the order exactly. */
static void test_window_restore(void **st)
{
    (void)st;
    MpModel m = model_of(win_inputs, 1);
    MpDataSet d;
    MpErr e;
    assert_int_equal(load(&d, &m, &e, "seq", "seq.npy", NULL, NULL), 0);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        MpOrder o, o2;
        assert_int_equal(mp_order_init(&o, &d, B, shuffle, 11, &e), 0);
        for (int k = 0; k < 27; k++)                 /* past one wrap */
            mp_order_next(&o);
        assert_int_equal(mp_order_init(&o2, &d, B, shuffle, 99, &e), 0);
        mp_order_restore(&o2, &o.start, o.epoch, o.pos);
        for (int k = 0; k < 40; k++) {
            int64_t a[B];
            memcpy(a, mp_order_next(&o), sizeof a);
            assert_memory_equal(a, mp_order_next(&o2), sizeof a);
        }
        free(o.perm);
        free(o2.perm);
    }
    mp_data_free(&d);
}

/* load() refuses; the message is one line naming the file and holds w1, w2. */
static void refused(const MpModel *m, const char *n1, const char *f1, const char *n2, const char *f2,
                    const char *file, const char *w1, const char *w2)
{
    MpDataSet d;
    MpErr e;
    assert_int_not_equal(load(&d, m, &e, n1, f1, n2, f2), 0);
    expect_msg(&e, at(file), w1, w2);
    mp_data_free(&d);
}

static void test_window_refusals(void **st)
{
    (void)st;
    MpModel m = model_of(win_inputs, 2), one = model_of(win_inputs, 1);
    static uint16_t s[N];
    static int32_t two[N];
    int64_t five = 5, zero = 0, n = N, half = N / 2, rows[2] = {4, W};
    save("short.npy", MP_U16, 1, &five, s);
    save("empty.npy", MP_U16, 1, &zero, s);
    save("seq_i32.npy", MP_I32, 1, &n, two);
    save("rows.npy", MP_U16, 2, rows, s);
    save("aux_short.npy", MP_I32, 1, &half, two);
    save_descr("seq_i8.npy", "<i8", "(4,)", 32);
    write_bytes(at("odd.bin"), s, 7);
    write_bytes(at("empty.bin"), s, 0);
    refused(&one, "seq", "short.npy", NULL, NULL, "short.npy", "at least one window of 9", "holds 5");
    refused(&one, "seq", "empty.npy", NULL, NULL, "empty.npy", "at least one window of 9", "is empty");
    refused(&one, "seq", "empty.bin", NULL, NULL, "empty.bin", "at least one window of 9", "is empty");
    refused(&one, "seq", "seq_i32.npy", NULL, NULL, "seq_i32.npy", "needs u16 (<u2) values, the file holds i32",
            "a.astype(np.uint16)");
    refused(&one, "seq", "seq_i8.npy", NULL, NULL, "seq_i8.npy", "holds <i8 (int64, NumPy's default integer)",
            "np.save(f, a.astype(np.uint16))");
    refused(&one, "seq", "rows.npy", NULL, NULL, "rows.npy", "1-D", "4x9");
    refused(&one, "seq", "odd.bin", NULL, NULL, "odd.bin", "u16", "7 bytes");
    refused(&m, "seq", "seq.npy", "aux", "aux_short.npy", "aux_short.npy", "500 values", "has 1000");
    /* a raw stream only for window inputs; windows and samples not mixed */
    MpInput plain[2] = {{"x", MP_I32, 2, {B, W}, 0, NULL, NULL, 0}, win_inputs[0]};
    MpModel pm = model_of(plain, 1), mixed = model_of(plain, 2);
    refused(&pm, "x", "aux.bin", NULL, NULL, "aux.bin", "raw .bin", "input 'x' needs a .npy");
    MpDataSet d;
    MpErr e;
    assert_int_not_equal(load(&d, &mixed, &e, "x", "seq_i32.npy", "seq", "seq.npy"), 0);
    assert_non_null(strstr(e.msg, "'x' and 'seq' are not both windows"));
    mp_data_free(&d);
}

/* NaN / Inf in float data, labels of every integer type, hints. */
static void test_value_checks(void **st)
{
    (void)st;
    enum { S = 12 };
    static float xf[S * 3];
    static uint16_t xh[S * 3], yu16[S];
    static uint8_t yu8[S];
    static int32_t yi[S];
    int64_t sh[2] = {S, 3}, n = S;
    xf[7 * 3 + 1] = NAN;
    xh[2 * 3] = 0x7c00;                               /* f16 +inf */
    yu8[4] = 10;
    yu16[3] = 60000;
    yi[9] = -1;
    save("xf.npy", MP_F32, 2, sh, xf);
    save("xh.npy", MP_F16, 2, sh, xh);
    save("yu8.npy", MP_U8, 1, &n, yu8);
    save("yu16.npy", MP_U16, 1, &n, yu16);
    save("yi.npy", MP_I32, 1, &n, yi);
    MpInput in[] = {
        {"x", MP_F32, 2, {B, 3}, 0, NULL, NULL, 0}, {"h", MP_F16, 2, {B, 3}, 0, NULL, NULL, 0},
        {"y8", MP_U8, 1, {B}, 10, NULL, NULL, 0}, {"y16", MP_U16, 1, {B}, 50000, NULL, NULL, 0},
        {"y32", MP_I32, 1, {B}, 10, NULL, NULL, 0},
    };
    const char *files[] = {"xf.npy", "xh.npy", "yu8.npy", "yu16.npy", "yi.npy"};
    const char *want[][2] = {{"sample 7: nan is not a finite number", "input 'x'"},
                             {"sample 2: inf is not a finite number", "input 'h'"},
                             {"sample 4: label 10 is outside [0, 10)", "input 'y8'"},
                             {"sample 3: label 60000 is outside [0, 50000)", "input 'y16'"},
                             {"sample 9: label -1 is outside [0, 10)", "input 'y32'"}};
    for (int i = 0; i < 5; i++) {
        MpModel m = model_of(&in[i], 1);
        refused(&m, in[i].name, files[i], NULL, NULL, files[i], want[i][0], want[i][1]);
    }
    /* in a stream the place is the value's index */
    static float sf[100];
    int64_t hundred = 100;
    sf[17] = -INFINITY;
    save("sf.npy", MP_F32, 1, &hundred, sf);
    MpInput wf = {"s", MP_F32, 2, {B, W}, 0, NULL, NULL, 1};
    MpModel m = model_of(&wf, 1);
    refused(&m, "s", "sf.npy", NULL, NULL, "sf.npy", "value 17 of the stream: -inf", "finite");
}

static void test_nchw_hint(void **st)
{
    (void)st;
    static uint8_t img[6 * 784];
    int64_t hw[3] = {6, 28, 28}, flat[2] = {6, 784}, other[2] = {6, 10};
    save("img3.npy", MP_U8, 3, hw, img);
    save("img2.npy", MP_U8, 2, flat, img);
    save("img10.npy", MP_U8, 2, other, img);
    MpInput x = {"image", MP_U8, 4, {B, 1, 28, 28}, 0, NULL, NULL, 0};
    MpModel m = model_of(&x, 1);
    refused(&m, "image", "img3.npy", NULL, NULL, "img3.npy", "Nx1x28x28", "idx2npy --shape nchw");
    refused(&m, "image", "img2.npy", NULL, NULL, "img2.npy", "6x784", "idx2npy --shape nchw");
    MpDataSet d;
    MpErr e;
    assert_int_not_equal(load(&d, &m, &e, "image", "img10.npy", NULL, NULL), 0);
    assert_null(strstr(e.msg, "nchw"));
    mp_data_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_sampler),
        cmocka_unit_test(test_window_eval_and_no_shuffle),
        cmocka_unit_test(test_window_restore),
        cmocka_unit_test(test_window_refusals),
        cmocka_unit_test(test_value_checks),
        cmocka_unit_test(test_nchw_hint),
    };
    return cmocka_run_group_tests(tests, group_setup, remove_dir);
}
