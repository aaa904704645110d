/* test_safetensors.c - runtime/mp_safetensors.h: round trips of every dtype
 * with metadata, the exact bytes written, headers as other writers make
 * them, and every refusal (one line naming the file and the tensor).
 * With MP_ST_OUT=FILE set it also writes a known checkpoint there, which
 * tests/t_tools.sh reads back with an independent Python reader; with
 * MP_ST_IN=FILE it describes FILE (see describe()). */
#include "mp_safetensors.h"

#include "tmpfiles.h"

/* A file of: the 8-byte length of header, header, then ndata bytes. */
static void write_st(const char *path, const char *header, const void *data, size_t ndata)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(n >> (8 * i));
    assert_int_equal(fwrite(len8, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, n, f), n);
    if (ndata)
        assert_int_equal(fwrite(data, 1, ndata, f), ndata);
    assert_int_equal(fclose(f), 0);
}

static void expect_refused(const char *path, const char *w1, const char *w2)
{
    MpStFile f;
    MpErr e = {{0}};
    assert_int_equal(mp_st_load(path, &f, &e), -1);
    assert_null(f.buf);
    assert_null(f.tensors);
    expect_msg(&e, path, w1, w2);
}

/* ---- the known checkpoint (also read by tests/t_tools.sh) ---------------
 * w: F32 [2, 3] = 0.5 i - 1;  step: I32 [] = 1234;  h: F16 [4] = bits
 * 0x3c00 + i;  b: BF16 [2] = bits 0x3f80 + i;  u: U8 [5] = 250 + i;
 * empty: F32 [0, 3].  Metadata: model = "mnist", note = "a \"q\"\n\u00e9". */
static float w[6];
static int32_t step = 1234;
static uint16_t h16[4], b16[2];
static uint8_t u8[5];

static int known(MpTensor *t)
{
    for (int i = 0; i < 6; i++)
        w[i] = 0.5f * (float)i - 1;
    for (int i = 0; i < 4; i++)
        h16[i] = (uint16_t)(0x3c00 + i);
    for (int i = 0; i < 2; i++)
        b16[i] = (uint16_t)(0x3f80 + i);
    for (int i = 0; i < 5; i++)
        u8[i] = (uint8_t)(250 + i);
    MpTensor k[6] = {
        {"w", MP_F32, 2, {2, 3}, w}, {"step", MP_I32, 0, {0}, &step},
        {"h", MP_F16, 1, {4}, h16},  {"b", MP_BF16, 1, {2}, b16},
        {"u", MP_U8, 1, {5}, u8},    {"empty", MP_F32, 2, {0, 3}, NULL},
    };
    memcpy(t, k, sizeof k);
    return 6;
}

static const char *const meta_k[] = {"model", "note"};
static const char *const meta_v[] = {"mnist", "a \"q\"\n\xc3\xa9"};

static void test_round_trip(void **state)
{
    (void)state;
    MpTensor t[6];
    int n = known(t);
    MpErr e = {{0}};
    assert_int_equal(mp_st_save(at("k.safetensors"), t, n, meta_k, meta_v, 2, &e), 0);
    MpStFile f;
    assert_int_equal(mp_st_load(at("k.safetensors"), &f, &e), 0);
    assert_int_equal(f.n, n);
    for (int i = 0; i < n; i++) {
        const MpTensor *g = mp_st_find(&f, t[i].name);
        assert_non_null(g);
        assert_int_equal(g->dtype, t[i].dtype);
        assert_int_equal(g->rank, t[i].rank);
        for (int d = 0; d < t[i].rank; d++)
            assert_int_equal(g->shape[d], t[i].shape[d]);
        if (mp_st_nbytes(&t[i]))
            assert_memory_equal(g->data, t[i].data, (size_t)mp_st_nbytes(&t[i]));
    }
    assert_null(mp_st_find(&f, "nope"));
    assert_string_equal(mp_st_meta(&f, "model"), "mnist");
    assert_string_equal(mp_st_meta(&f, "note"), meta_v[1]);
    assert_null(mp_st_meta(&f, "step"));
    /* the data starts at a multiple of 8 and is laid out in order */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | f.buf[i];
    assert_int_equal((8 + hlen) % 8, 0);
    assert_ptr_equal(f.tensors[0].data, f.buf + 8 + hlen);
    assert_int_equal(f.size, 8 + (int64_t)hlen + 24 + 4 + 8 + 4 + 5);
    mp_st_close(&f);
    assert_null(f.buf);
    mp_st_close(&f);   /* twice is harmless */
}

static void test_exact_bytes(void **state)
{
    (void)state;
    float v[2] = {1.0f, -2.0f};
    MpTensor t = {"a.b", MP_F32, 1, {2}, v};
    const char *k = "step", *val = "7";
    MpErr e = {{0}};
    assert_int_equal(mp_st_save(at("x.safetensors"), &t, 1, &k, &val, 1, &e), 0);
    const char *want = "{\"__metadata__\":{\"step\":\"7\"},\"a.b\":{\"dtype\":\"F32\",\"shape\":[2],"
                       "\"data_offsets\":[0,8]}}";
    unsigned char *buf;
    int64_t n;
    assert_int_equal(mp_read_file(at("x.safetensors"), &buf, &n, &e), 0);
    size_t wl = strlen(want), hl = (wl + 7) / 8 * 8;
    assert_int_equal(n, 8 + (int64_t)hl + 8);
    assert_int_equal(buf[0], hl);
    assert_memory_equal(buf + 8, want, wl);
    for (size_t i = wl; i < hl; i++)
        assert_int_equal(buf[8 + i], ' ');
    assert_memory_equal(buf + 8 + hl, v, 8);
    free(buf);
    /* no tensors, no metadata: "{}" padded */
    assert_int_equal(mp_st_save(at("e.safetensors"), NULL, 0, NULL, NULL, 0, &e), 0);
    MpStFile f;
    assert_int_equal(mp_st_load(at("e.safetensors"), &f, &e), 0);
    assert_int_equal(f.n, 0);
    assert_int_equal(f.size, 16);
    mp_st_close(&f);
}

/* Headers as other writers make them: white space, keys in another order,
 * data in another order than the header, escapes, an empty __metadata__. */
static void test_foreign_headers(void **state)
{
    (void)state;
    unsigned char data[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    write_st(at("f.safetensors"),
             "{ \"z\" : { \"data_offsets\" : [ 0 , 8 ], \"shape\" : [ 2 ], \"dtype\" : \"I32\" } ,\n"
             "  \"__metadata__\": {},\n"
             "  \"a\\u00e9\\ud83d\\ude00\\/\\t\": {\"dtype\": \"U8\", \"shape\": [2, 2], \"data_offsets\": [8, 12]} }   ",
             data, 12);
    MpStFile f;
    MpErr e = {{0}};
    int rc = mp_st_load(at("f.safetensors"), &f, &e);
    if (rc)
        print_message("%s\n", e.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(f.n, 2);
    assert_int_equal(f.nmeta, 0);
    const MpTensor *t = mp_st_find(&f, "a\xc3\xa9\xf0\x9f\x98\x80/\t");
    assert_non_null(t);
    assert_int_equal(t->dtype, MP_U8);
    assert_memory_equal(t->data, data + 8, 4);
    assert_int_equal(mp_st_find(&f, "z")->shape[0], 2);
    mp_st_close(&f);
}

/* ---- refusals ---------------------------------------------------------- */

static void test_file_level(void **state)
{
    (void)state;
    expect_refused(at("absent.safetensors"), "cannot open", NULL);
    write_st(at("tiny"), "", NULL, 0);
    FILE *fp = fopen(at("tiny"), "wb");
    fwrite("abc", 1, 3, fp);
    fclose(fp);
    expect_refused(at("tiny"), "truncated", "3 bytes");
    write_st(at("huge"), "{}", NULL, 0);
    fp = fopen(at("huge"), "r+b");
    fwrite("\xff\xff\xff\xff\xff\xff\xff\x7f", 1, 8, fp);
    fclose(fp);
    expect_refused(at("huge"), "not a safetensors file", "header length");
    write_st(at("short"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL, 0);
    fp = fopen(at("short"), "r+b");
    fwrite("\x90", 1, 1, fp);   /* say 144 bytes of header, hold fewer */
    fclose(fp);
    expect_refused(at("short"), "truncated", "header length says 144");
    /* the data cut short */
    write_st(at("cut"), "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", "12345678", 8);
    expect_refused(at("cut"), "truncated", "'a'");
}

static void test_bad_json(void **state)
{
    (void)state;
    static const struct { const char *h, *w; } cases[] = {
        {"", "starting with '{'"},
        {"   {}", "starting with '{'"},
        {"[]", "starting with '{'"},
        {"{", "a string"},
        {"{,}", "a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},}", "a string"},
        {"{\"a\" {}}", "':'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}", "',' or '}'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}} x", "only white space"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}{}", "only white space"},
        {"{\"a", "closing"},
        {"{\"a\\x\":1}", "valid escape"},
        {"{\"a\\u12\":1}", "hex digits"},
        {"{\"a\\udc00\":1}", "lone low surrogate"},
        {"{\"a\\ud800x\":1}", "low surrogate"},
        {"{\"a\\u0000\":1}", "\\u0000"},
        {"{\"a\tb\":1}", "control characters"},
        {"{\"a\xff\":1}", "valid UTF-8"},
        {"{\"a\xc0\x80\":1}", "valid UTF-8"},
        {"{\"a\xed\xa0\x80\":1}", "valid UTF-8"},
        {"{\"a\xe2\x82\":1}", "valid UTF-8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "(tensor 'a'): expected a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "(tensor 'a')"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", "not a fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", "not a fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", "64 bits"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", "non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":true,\"data_offsets\":[0,4]}}", "shape"},
        {"{\"a\":[]}", "an object for the tensor"},
        {"{\"a\":{}}", "a string"},
        {"{\"__metadata__\":{\"k\":1}}", "a string"},
        {"{\"__metadata__\":[]}", "an object for __metadata__"},
        {"{\"__metadata__\":{\"k\":\"v\",}}", "a string"},
        {"{\"__metadata__\":{\"k\" \"v\"}}", "':'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(at("j.safetensors"), cases[i].h, "\0\0\0\0", 4);
        expect_refused(at("j.safetensors"), at("j.safetensors"), cases[i].w);
    }
}

static void test_bad_tensors(void **state)
{
    (void)state;
    static const struct { const char *h, *w1, *w2; size_t ndata; } cases[] = {
        {"{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", "'a'", "found F8_E4M3", 1},
        {"{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "'a'", "found f32", 4},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "'a'", "missing 'dtype'", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "'a'", "missing 'shape'", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "'a'", "missing 'data_offsets'", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", "'a'", "unknown key 'x'", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "'a'", "repeated", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", "'a'", "expected 2 data_offsets", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "data_offsets", NULL, 8},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", "at most 8", "'a'", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]}}", "'a'", "shape 2x3: needs 24 bytes", 12},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", "'a'", "[4, 0] end before they begin", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", "'a'", "overflows", 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", "'b'", "overlap", 8},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", "'b'", "gap", 12},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "'a'", "gap", 8},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "4 bytes of data after the last tensor", NULL, 8},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "'a'", "appears twice", 8},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", "'k'", "appears twice", 0},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", "__metadata__ appears twice", NULL, 0},
    };
    static const char zeros[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(at("t.safetensors"), cases[i].h, zeros, cases[i].ndata);
        expect_refused(at("t.safetensors"), cases[i].w1, cases[i].w2);
    }
}

static void test_save_refuses(void **state)
{
    (void)state;
    float v[2] = {0};
    MpErr e = {{0}};
    MpTensor dup[2] = {{"a", MP_F32, 1, {2}, v}, {"a", MP_F32, 1, {2}, v}};
    assert_int_equal(mp_st_save(at("s.safetensors"), dup, 2, NULL, NULL, 0, &e), -1);
    expect_msg(&e, "s.safetensors", "'a' appears twice", NULL);
    MpTensor bad[3] = {{"", MP_F32, 1, {2}, v}, {"__metadata__", MP_F32, 1, {2}, v}, {"x", 9, 1, {2}, v}};
    assert_int_equal(mp_st_save(at("s.safetensors"), bad, 1, NULL, NULL, 0, &e), -1);
    expect_msg(&e, "s.safetensors", "reserved name", NULL);
    assert_int_equal(mp_st_save(at("s.safetensors"), bad + 1, 1, NULL, NULL, 0, &e), -1);
    expect_msg(&e, "s.safetensors", "reserved name", NULL);
    assert_int_equal(mp_st_save(at("s.safetensors"), bad + 2, 1, NULL, NULL, 0, &e), -1);
    expect_msg(&e, "s.safetensors", "'x'", "bad dtype");
    const char *k[2] = {"m", "m"}, *vals[2] = {"1", "2"};
    assert_int_equal(mp_st_save(at("s.safetensors"), dup, 1, k, vals, 2, &e), -1);
    expect_msg(&e, "s.safetensors", "metadata key 'm' appears twice", NULL);
    assert_int_equal(mp_st_save("/nonexistent-dir/c.safetensors", dup, 1, NULL, NULL, 0, &e), -1);
    expect_msg(&e, "/nonexistent-dir/c.safetensors", "cannot create", NULL);
    assert_int_equal(access(at("s.safetensors"), F_OK), -1);   /* nothing was written */
}

/* MP_ST_OUT=FILE: write the known checkpoint for tests/t_tools.sh. */
static int write_known_for_python(const char *path)
{
    MpTensor t[6];
    int n = known(t);
    MpErr e;
    if (mp_st_save(path, t, n, meta_k, meta_v, 2, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    return 0;
}

/* MP_ST_IN=FILE: load FILE and print its metadata (as JSON strings) and
 * tensors (name, dtype, shape, data in hex) one per line, or the error, for tests/t_tools.sh. */
static int describe(const char *path)
{
    MpStFile f;
    MpErr e;
    if (mp_st_load(path, &f, &e)) {
        printf("error: %s\n", e.msg);
        return 1;
    }
    for (int i = 0; i < f.nmeta; i++) {
        MpBuf b = {NULL, 0, 0, 0};
        mp_buf_json_str(&b, f.meta_keys[i]);
        mp_buf_puts(&b, " ");
        mp_buf_json_str(&b, f.meta_vals[i]);
        printf("meta %s\n", b.p);
        mp_buf_free(&b);
    }
    for (int i = 0; i < f.n; i++) {
        const MpTensor *t = &f.tensors[i];
        char shp[160];
        printf("tensor %s %s %s ", t->name, mp_st_dtype_names_[t->dtype],
               mp_shape_str(shp, sizeof shp, t->rank, t->shape));
        for (int64_t k = 0; k < mp_st_nbytes(t); k++)
            printf("%02x", ((const unsigned char *)t->data)[k]);
        printf("\n");
    }
    mp_st_close(&f);
    return 0;
}

int main(void)
{
    if (getenv("MP_ST_OUT"))
        return write_known_for_python(getenv("MP_ST_OUT"));
    if (getenv("MP_ST_IN"))
        return describe(getenv("MP_ST_IN"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_exact_bytes),
        cmocka_unit_test(test_foreign_headers),
        cmocka_unit_test(test_file_level),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_save_refuses),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
