/* test_train.c - mp_main end to end on a hand-written model.
 *
 * The model is softmax regression (x f32 [B, 16] -> 4 classes, labels y
 * i32 [B]) with hand-written forward and backward in f32, plus a
 * non-trainable running mean of x (a stand-in for batch-norm statistics).
 * Knobs make it misbehave: NaN everywhere (collapse, --check-numerics) or
 * f16-like overflow of the scaled gradient (loss scaling). mp_main runs in a
 * forked child per case; the parent checks exit status, stderr, the JSONL
 * log and the checkpoints. Data: synthetic clusters written as .npy into a
 * temporary folder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mp_model.h"
#include "mp_util.h"
#include "mp_npy.h"
#include "mp_safetensors.h"
#include "mp_optim.h"
#include "mp_data.h"
#include "mp_ckpt.h"
#include "mp_train.h"

/* ---- the model ------------------------------------------------------------ */

enum { NF = 16, NC = 4, B = 20, NTRAIN = 210, NEVAL = 100 };

static MpInput inputs[2] = {
    {"x", MP_F32, 2, {B, NF}, 0, NULL, NULL},
    {"y", MP_I32, 1, {B}, NC, NULL, NULL},
};
static MpParam params[3] = {
    {"fc.weight", 2, {NF, NC}, NF * NC, MP_INIT_GLOROT_UNIFORM, 0, 0, NF, NC, 1, NULL, NULL},
    {"fc.bias", 1, {NC}, NC, MP_INIT_ZEROS, 0, 0, 0, 0, 1, NULL, NULL},
    {"norm.running_mean", 1, {NF}, NF, MP_INIT_ZEROS, 0, 0, 0, 0, 0, NULL, NULL},
};
static const char *const metric_names[] = {"accuracy"};

static int fault_nan;            /* every value NaN; check finds 'log' */
static float overflow_limit;     /* scaled dlogits above this become inf */
static int expect_check = -1;    /* forward aborts if run->check differs */
static float grad_bug = 1;       /* backward's gradients are off by this factor */
static const char *cast_log;     /* cast_params appends a hash of W, b here */
static float probs[B][NC];

static int fwd(MpRun *r)
{
    const float *x = (const float *)inputs[0].batch, *w = params[0].value, *bias = params[1].value;
    const int32_t *y = (const int32_t *)inputs[1].batch;
    if (expect_check >= 0 && r->check != expect_check)
        abort();
    double loss = 0;
    int right = 0;
    for (int b = 0; b < B; b++) {
        float z[NC], mx = -INFINITY, s = 0;
        for (int c = 0; c < NC; c++) {
            z[c] = bias[c];
            for (int f = 0; f < NF; f++)
                z[c] += x[b * NF + f] * w[f * NC + c];
            mx = z[c] > mx ? z[c] : mx;
        }
        for (int c = 0; c < NC; c++)
            s += (probs[b][c] = expf(z[c] - mx));
        int best = 0;
        for (int c = 0; c < NC; c++) {
            probs[b][c] = fault_nan ? NAN : probs[b][c] / s;
            best = probs[b][c] > probs[b][best] ? c : best;
        }
        right += best == y[b];
        loss -= log(probs[b][y[b]]);
    }
    if (r->check && fault_nan) {
        r->bad_op = "log";
        r->bad_where = "fake.mp:7: lp";
        return 1;
    }
    for (int f = 0; r->training && f < NF; f++) {
        float mean = 0;
        for (int b = 0; b < B; b++)
            mean += x[b * NF + f] / B;
        params[2].value[f] = 0.9f * params[2].value[f] + 0.1f * mean;
    }
    r->loss = (float)(loss / B);
    if (r->metrics)
        r->metrics[0] = (float)right / B;
    return 0;
}

static int bwd(MpRun *r)
{
    const float *x = (const float *)inputs[0].batch;
    const int32_t *y = (const int32_t *)inputs[1].batch;
    float *gw = params[0].grad, *gb = params[1].grad;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < NC; c++) {
            float d = (probs[b][c] - (c == y[b])) / B * r->seed_grad * grad_bug;
            if (overflow_limit > 0 && fabsf(d) > overflow_limit)
                d = INFINITY;
            gb[c] += d;
            for (int f = 0; f < NF; f++)
                gw[f * NC + c] += x[b * NF + f] * d;
        }
    return 0;
}

static int setup(void) { return 0; }

static void cast(void)
{
    if (!cast_log)
        return;
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)params[0].value;
    for (size_t i = 0; i < sizeof(float) * NF * NC; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    p = (const unsigned char *)params[1].value;
    for (size_t i = 0; i < sizeof(float) * NC; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    FILE *f = fopen(cast_log, "a");
    fprintf(f, "%016llx\n", (unsigned long long)h);
    fclose(f);
}

static MpModel model;

static void model_reset(void)
{
    memset(&model, 0, sizeof model);
    model.name = "fake";
    model.policy = "mixed_float16";
    model.source = "fake.mp";
    model.mpcc_version = "test";
    model.batch = B;
    model.ninputs = 2;
    model.inputs = inputs;
    model.nparams = 3;
    model.params = params;
    model.nmetrics = 1;
    model.metric_names = metric_names;
    model.setup = setup;
    model.cast_params = cast;
    model.forward = fwd;
    model.backward = bwd;
    MpTrainCfg *c = &model.cfg;
    c->opt = MP_OPT_ADAM;
    c->lr = 0.05;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->ls = MP_LS_DYNAMIC;
    c->ls_init = 32768;
    c->ls_growth = 2;
    c->ls_backoff = 0.5;
    c->ls_interval = 2000;
    c->sched = MP_SCHED_CONSTANT;
    c->accumulate = 1;
    c->steps = 40;
    c->seed = 1;
    fault_nan = 0;
    overflow_limit = 0;
    expect_check = -1;
    grad_bug = 1;
    cast_log = NULL;
}

/* ---- files ---------------------------------------------------------------- */

static char tmpdir[64];

static const char *P(const char *name)
{
    static char bufs[16][256];
    static int next;
    char *b = bufs[next++ % 16];
    snprintf(b, 256, "%s/%s", tmpdir, name);
    return b;
}

static const char *D(const char *input, const char *file)
{
    static char bufs[16][300];
    static int next;
    char *b = bufs[next++ % 16];
    snprintf(b, 300, "%s=%s", input, P(file));
    return b;
}

static void save_npy(const char *name, int dtype, int rank, int64_t d0, int64_t d1, const void *data)
{
    MpArray a;
    MpErr e;
    memset(&a, 0, sizeof a);
    a.dtype = dtype;
    a.rank = rank;
    a.shape[0] = d0;
    a.shape[1] = d1;
    a.data = (void *)data;
    a.nbytes = d0 * (rank > 1 ? d1 : 1) * mp_dtype_size(dtype);
    assert_int_equal(mp_npy_save(P(name), &a, &e), 0);
}

/* Clusters around 4 centres; class i % 4. */
static void make_data(const char *xname, const char *yname, int n, uint64_t seed)
{
    static float x[1000 * NF];
    static int32_t y[1000];
    MpRng r;
    mp_rng_seed(&r, 99, 0);
    float centre[NC][NF];
    for (int c = 0; c < NC; c++)
        for (int f = 0; f < NF; f++)
            centre[c][f] = mp_rng_uniform(&r) < 0.5 ? -1.0f : 1.0f;
    mp_rng_seed(&r, seed, 0);
    for (int i = 0; i < n; i++) {
        y[i] = i % NC;
        for (int f = 0; f < NF; f++)
            x[i * NF + f] = centre[y[i]][f] + (float)(0.8 * mp_rng_normal(&r));
    }
    save_npy(xname, MP_F32, 2, n, NF, x);
    save_npy(yname, MP_I32, 1, n, 0, y);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc((size_t)n + 1, 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n)
        s[0] = 0;
    fclose(f);
    return s;
}

/* ---- running mp_main in a child ---------------------------------------------- */

typedef struct Out { int rc; char *err, *out; } Out;

static Out run(const char *first, ...)
{
    const char *argv[64] = {"train"};
    int argc = 1;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(P("stderr.txt"), "w", stderr) || !freopen(P("stdout.txt"), "w", stdout))
            _exit(99);
        int rc = mp_main(argc, (char **)argv, &model);
        fflush(NULL);
        _exit(rc);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    Out o = {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
             slurp(P("stderr.txt")), slurp(P("stdout.txt"))};
    return o;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Exit status rc and, as the last line of stderr (progress lines may come
 * before it), one error line containing every given fragment. */
static void expect_error(Out o, int rc, const char *what, ...)
{
    va_list ap;
    size_t len = strlen(o.err);
    const char *last = o.err;
    for (const char *p = o.err; len && p < o.err + len - 1; p++)
        if (*p == '\n')
            last = p + 1;
    if (o.rc != rc || !len || o.err[len - 1] != '\n' || strstr(o.err, "error: ") != last + 7
        || strncmp(last, "train: error: ", 14))
        fail_msg("%s: expected exit %d and one error line last, got %d and:\n%s", what, rc, o.rc, o.err);
    va_start(ap, what);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        if (!strstr(last, s))
            fail_msg("%s: '%s' not in: %s", what, s, last);
    va_end(ap);
    free(o.err);
    free(o.out);
}

static void expect_ok(Out o)
{
    if (o.rc != 0)
        fail_msg("exit %d: %s", o.rc, o.err);
    free(o.err);
    free(o.out);
}

/* ---- JSONL ---------------------------------------------------------------- */

typedef struct Line { char text[512]; } Line;

static int read_log(const char *path, Line *lines, int cap)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    assert_non_null(f);
    while (n < cap && fgets(lines[n].text, sizeof lines[n].text, f))
        n++;
    fclose(f);
    return n;
}

static double num(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        fail_msg("no key %s in %s", key, line);
    p += strlen(pat);
    return strncmp(p, "null", 4) ? strtod(p, NULL) : NAN;
}

/* The keys of a flat JSON object, in order, joined by spaces. */
static void keys_of(const char *line, char *out, size_t cap)
{
    out[0] = 0;
    for (const char *p = line; (p = strchr(p, '"')); ) {
        const char *q = strchr(p + 1, '"');
        if (q[1] == ':')
            snprintf(out + strlen(out), cap - strlen(out), "%s%.*s", out[0] ? " " : "",
                     (int)(q - p - 1), p + 1);
        p = q + 1;
    }
}

/* ---- checkpoints ---------------------------------------------------------- */

static void same_tensors(const char *a, const char *b, int with_optimizer)
{
    MpStFile fa, fb;
    MpErr e;
    assert_int_equal(mp_st_load(a, &fa, &e), 0);
    assert_int_equal(mp_st_load(b, &fb, &e), 0);
    int compared = 0;
    for (int i = 0; i < fa.n; i++) {
        const MpTensor *x = &fa.tensors[i], *y = mp_st_find(&fb, x->name);
        if (!with_optimizer && !strncmp(x->name, "optimizer.", 10))
            continue;
        if (!y)
            fail_msg("%s: no %s", b, x->name);
        if (memcmp(x->data, y->data, (size_t)mp_st_nbytes(x)))
            fail_msg("tensor %s differs between %s and %s", x->name, a, b);
        compared++;
    }
    assert_true(compared >= 3);
    mp_st_close(&fa);
    mp_st_close(&fb);
}

static const char *meta_of(const char *file, const char *key, char *buf, size_t cap)
{
    MpStFile f;
    MpErr e;
    assert_int_equal(mp_st_load(file, &f, &e), 0);
    const char *v = mp_st_meta(&f, key);
    snprintf(buf, cap, "%s", v ? v : "(none)");
    mp_st_close(&f);
    return buf;
}

/* Rewrites checkpoint src into dst, dropping tensor `drop`, renaming it to
 * `rename_to`, or with metadata key `mkey` set to `mval`. */
static void rewrite(const char *src, const char *dst, const char *drop, const char *rename_to,
                    const char *mkey, const char *mval, int as_f16)
{
    MpStFile f;
    MpErr e;
    MpTensor t[32];
    int n = 0;
    assert_int_equal(mp_st_load(src, &f, &e), 0);
    for (int i = 0; i < f.n; i++) {
        if (drop && !strcmp(f.tensors[i].name, drop) && !rename_to)
            continue;
        t[n] = f.tensors[i];
        if (drop && !strcmp(t[n].name, drop)) {
            t[n].name = rename_to;
            if (as_f16) {
                t[n].dtype = MP_F16;
                t[n].shape[t[n].rank - 1] *= 2;
            }
        }
        n++;
    }
    const char *vals[32];
    for (int i = 0; i < f.nmeta; i++)
        vals[i] = mkey && !strcmp(f.meta_keys[i], mkey) ? mval : f.meta_vals[i];
    assert_int_equal(mp_st_save(dst, t, n, f.meta_keys, vals, f.nmeta, &e), 0);
    mp_st_close(&f);
}

/* ---- tests ------------------------------------------------------------------ */

static int group_setup(void **st)
{
    (void)st;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mpcc_train_XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    make_data("x.npy", "y.npy", NTRAIN, 1);
    make_data("ex.npy", "ey.npy", NEVAL, 2);
    return 0;
}

static int group_teardown(void **st)
{
    (void)st;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return getenv("KEEP") ? 0 : system(cmd);
}

static int each(void **st)
{
    (void)st;
    model_reset();
    return 0;
}

#define TRAIN_DATA "--data", D("x", "x.npy"), "--data", D("y", "y.npy")

static void test_trains_and_logs(void **st)
{
    (void)st;
    Line l[16];
    char keys[256];
    expect_ok(run(TRAIN_DATA, "--eval", D("x", "ex.npy"), "--eval", D("y", "ey.npy"),
                  "--steps", "60", "--log-every", "10", "--eval-every", "30",
                  "--log", P("t.jsonl"), NULL));
    int n = read_log(P("t.jsonl"), l, 16);
    assert_int_equal(n, 8);                     /* 6 steps, 2 evals */
    for (int i = 0; i < n; i++) {
        keys_of(l[i].text, keys, sizeof keys);
        int is_eval = i == 3 || i == 7;
        assert_string_equal(keys, is_eval ? "step eval loss accuracy"
                            : "step loss loss_scale skipped lr grad_norm samples_per_s");
    }
    assert_int_equal((int)num(l[0].text, "step"), 10);
    assert_int_equal((int)num(l[3].text, "step"), 30);
    assert_true(num(l[0].text, "loss") > 2 * num(l[6].text, "loss"));
    assert_true(num(l[7].text, "accuracy") >= 0.9);
    assert_true(num(l[7].text, "loss") < 0.5);
    assert_true(num(l[2].text, "loss_scale") == 32768);
    assert_true(num(l[2].text, "lr") == 0.05);
    assert_true(num(l[2].text, "grad_norm") > 0);
}

static void test_plain_progress_lines(void **st)
{
    (void)st;
    Out o = run(TRAIN_DATA, "--steps", "4", "--log-every", "2", NULL);
    assert_int_equal(o.rc, 0);
    assert_non_null(strstr(o.err, "step 2/4 loss "));
    assert_non_null(strstr(o.err, "step 4/4 loss "));
    assert_int_equal(count_lines(o.err), 2);
    expect_ok(o);
}

static void test_usage(void **st)
{
    (void)st;
    expect_error(run(TRAIN_DATA, "--bogus", NULL), 2, "unknown", "--bogus", NULL);
    expect_error(run(TRAIN_DATA, "--steps", "x", NULL), 2, "steps", "--steps", "'x'", NULL);
    expect_error(run(TRAIN_DATA, "--steps", NULL), 2, "no value", "--steps", NULL);
    expect_error(run(TRAIN_DATA, "--lr", "-1", NULL), 2, "lr", "--lr", NULL);
    expect_error(run(TRAIN_DATA, "--log-every", "0", NULL), 2, "log-every", "--log-every", NULL);
    expect_error(run(TRAIN_DATA, "--no-shuffle=1", NULL), 2, "flag value", "--no-shuffle", NULL);
    expect_error(run("--steps", "3", NULL), 2, "no data", "--data", NULL);
    expect_error(run(TRAIN_DATA, "--save-every", "3", NULL), 2, "save-every", "--save", NULL);
    expect_error(run(TRAIN_DATA, "--eval-every", "3", NULL), 2, "eval-every", "--eval", NULL);
    expect_error(run(TRAIN_DATA, "--init", "a", "--resume", "b", NULL), 2, "both", "--resume", NULL);
    expect_error(run(TRAIN_DATA, "--resume", "b", "--seed", "3", NULL), 2, "seed", "--seed", NULL);
    Out o = run("--help", NULL);
    assert_int_equal(o.rc, 0);
    assert_non_null(strstr(o.out, "usage: train --data NAME=FILE.npy"));
    assert_non_null(strstr(o.out, "--check-numerics"));
    expect_ok(o);
}

static void test_data_faults(void **st)
{
    (void)st;
    static float xf[NTRAIN * NF];
    static int32_t yi[NTRAIN], xi[NTRAIN * NF];
    for (int i = 0; i < NTRAIN; i++)
        yi[i] = i % NC;
    save_npy("x_i32.npy", MP_I32, 2, NTRAIN, NF, xi);
    save_npy("x_15.npy", MP_F32, 2, NTRAIN, 15, xf);
    save_npy("x_flat.npy", MP_F32, 1, NTRAIN, 0, xf);
    save_npy("y_199.npy", MP_I32, 1, 199, 0, yi);
    save_npy("x_10.npy", MP_F32, 2, 10, NF, xf);
    save_npy("y_10.npy", MP_I32, 1, 10, 0, yi);
    yi[37] = NC;
    save_npy("y_big.npy", MP_I32, 1, NTRAIN, 0, yi);
    yi[37] = -2;
    save_npy("y_neg.npy", MP_I32, 1, NTRAIN, 0, yi);
    FILE *f = fopen(P("text.npy"), "w");
    fputs("not an array\n", f);
    fclose(f);

    expect_error(run("--data", D("x", "x_i32.npy"), "--data", D("y", "y.npy"), NULL), 1,
                 "dtype", "x_i32.npy", "f32 (<f4)", "i32 (<i4)", NULL);
    expect_error(run("--data", D("x", "x_15.npy"), "--data", D("y", "y.npy"), NULL), 1,
                 "shape", "x_15.npy", "Nx16", "210x15", NULL);
    expect_error(run("--data", D("x", "x_flat.npy"), "--data", D("y", "y.npy"), NULL), 1,
                 "rank", "x_flat.npy", "Nx16", NULL);
    expect_error(run("--data", D("x", "x.npy"), "--data", D("y", "y_199.npy"), NULL), 1,
                 "count", "y_199.npy", "199", "210", NULL);
    expect_error(run("--data", D("x", "x_10.npy"), "--data", D("y", "y_10.npy"), NULL), 1,
                 "batch", "x_10.npy", "fewer than one batch of 20", NULL);
    expect_error(run("--data", D("x", "x.npy"), "--data", D("y", "y_big.npy"), NULL), 1,
                 "label", "y_big.npy", "sample 37", "label 4", "[0, 4)", NULL);
    expect_error(run("--data", D("x", "x.npy"), "--data", D("y", "y_neg.npy"), NULL), 1,
                 "negative label", "y_neg.npy", "sample 37", "label -2", NULL);
    expect_error(run("--data", D("x", "x.npy"), "--data", D("z", "y.npy"), NULL), 1,
                 "unknown input", "y.npy", "'z'" , NULL);
    expect_error(run("--data", D("x", "x.npy"), NULL), 1, "missing input", "--data y=", NULL);
    expect_error(run("--data", D("x", "x.npy"), "--data", D("x", "x.npy"), "--data",
                     D("y", "y.npy"), NULL), 1, "twice", "x.npy", "twice", NULL);
    expect_error(run("--data", D("x", "nope.npy"), "--data", D("y", "y.npy"), NULL), 1,
                 "missing file", "nope.npy", NULL);
    expect_error(run("--data", D("x", "text.npy"), "--data", D("y", "y.npy"), NULL), 1,
                 "not npy", "text.npy", NULL);
    expect_error(run(TRAIN_DATA, "--eval", D("x", "x.npy"), "--eval", D("y", "y_big.npy"), NULL),
                 1, "eval label", "y_big.npy", "sample 37", NULL);
    expect_error(run(TRAIN_DATA, "--eval", D("x", "ex.npy"), NULL), 1, "eval missing",
                 "--eval y=", NULL);
}

/* N steps straight == N/2, save, resume: losses and every tensor. */
static void check_resume(const char *tag)
{
    char a[64], b[64], c[64], la[64], lc[64], m1[128], m2[128];
    Line l1[64], l2[64];
    snprintf(a, sizeof a, "%s_a.st", tag);
    snprintf(b, sizeof b, "%s_b.st", tag);
    snprintf(c, sizeof c, "%s_c.st", tag);
    snprintf(la, sizeof la, "%s_a.jsonl", tag);
    snprintf(lc, sizeof lc, "%s_c.jsonl", tag);
    expect_ok(run(TRAIN_DATA, "--steps", "30", "--log-every", "1", "--save", P(a), "--log", P(la), NULL));
    expect_ok(run(TRAIN_DATA, "--steps", "13", "--log-every", "1", "--save", P(b), "--log", P(lc), NULL));
    expect_ok(run(TRAIN_DATA, "--steps", "30", "--log-every", "1", "--resume", P(b), "--save", P(c),
                  "--log", P(lc), NULL));
    same_tensors(P(a), P(c), 1);
    static const char *keys[] = {"step", "optimizer_updates", "loss_scale", "good_steps",
                                 "skipped_steps", "data_rng", "data_epoch", "data_position"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        assert_string_equal(meta_of(P(a), keys[i], m1, sizeof m1), meta_of(P(c), keys[i], m2, sizeof m2));
    assert_int_equal(read_log(P(la), l1, 64), 30);
    assert_int_equal(read_log(P(lc), l2, 64), 30);     /* appended by --resume */
    for (int i = 0; i < 30; i++) {
        *strstr(l1[i].text, ",\"samples_per_s\"") = 0;
        *strstr(l2[i].text, ",\"samples_per_s\"") = 0;
        assert_string_equal(l1[i].text, l2[i].text);
    }
}

static void test_resume_adam_exact(void **st)
{
    (void)st;
    model.cfg.accumulate = 2;                   /* 10 batches/epoch: resume mid-epoch */
    model.cfg.sched = MP_SCHED_COSINE;
    model.cfg.warmup = 3;
    model.cfg.sched_min = 0.001;
    model.cfg.ls_init = 1 << 22;                /* skips, then growth every 3 */
    model.cfg.ls_interval = 3;
    model.cfg.clip = 0.5;
    overflow_limit = 65504;
    check_resume("adam");
}

static void test_resume_sgd_exact(void **st)
{
    (void)st;
    model.cfg.opt = MP_OPT_SGD;
    model.cfg.lr = 0.1;
    model.cfg.momentum = 0.9;
    model.cfg.nesterov = 1;
    model.cfg.weight_decay = 1e-3;
    model.cfg.sched = MP_SCHED_LINEAR;
    model.cfg.warmup = 2;
    check_resume("sgd");
    char m[64];
    assert_string_equal(meta_of(P("sgd_c.st"), "optimizer", m, sizeof m), "sgd");
    MpStFile f;
    MpErr e;
    assert_int_equal(mp_st_load(P("sgd_c.st"), &f, &e), 0);
    assert_non_null(mp_st_find(&f, "optimizer.momentum_buffer.fc.weight"));
    assert_null(mp_st_find(&f, "optimizer.momentum_buffer.norm.running_mean"));
    assert_null(mp_st_find(&f, "optimizer.exp_avg.fc.weight"));
    mp_st_close(&f);
}

/* Skipped steps: logged, scale backs off, weights bitwise unchanged. */
static void test_loss_scaling(void **st)
{
    (void)st;
    Line l[64];
    char hashes[64][24];
    model.cfg.ls_init = 1 << 24;
    model.cfg.ls_interval = 4;
    overflow_limit = 65504;
    cast_log = P("casts.txt");
    remove(cast_log);
    expect_ok(run(TRAIN_DATA, "--steps", "40", "--log-every", "1", "--log", P("ls.jsonl"), NULL));
    assert_int_equal(read_log(P("ls.jsonl"), l, 64), 40);
    FILE *f = fopen(cast_log, "r");
    int nh = 0;
    while (nh < 64 && fgets(hashes[nh], sizeof hashes[nh], f))
        nh++;
    fclose(f);
    assert_int_equal(nh, 40);
    double s = 1 << 24;
    int good = 0, skips = 0, growths = 0;
    for (int i = 0; i < 40; i++) {
        double prev_skipped = i ? num(l[i - 1].text, "skipped") : 0;
        int skipped = num(l[i].text, "skipped") > prev_skipped;
        assert_true(num(l[i].text, "loss_scale") == s);
        assert_int_equal(skipped, !isfinite(num(l[i].text, "grad_norm")));
        if (i + 1 < 40 && skipped)
            assert_string_equal(hashes[i], hashes[i + 1]);
        else if (i + 1 < 40)
            assert_string_not_equal(hashes[i], hashes[i + 1]);
        skips += skipped;
        if (skipped)
            s = s * 0.5 < 1 ? 1 : s * 0.5, good = 0;
        else if (++good == 4)
            s *= 2, good = 0, growths++;
    }
    assert_true(skips >= 4);
    assert_true(growths >= 1);
    assert_true(num(l[0].text, "loss") == num(l[0].text, "loss"));   /* logged, not null */
}

static void test_collapse_stop(void **st)
{
    (void)st;
    Line l[200];
    fault_nan = 1;
    model.cfg.ls_init = 4;
    Out o = run(TRAIN_DATA, "--steps", "500", "--log-every", "1", "--log", P("nan.jsonl"), NULL);
    assert_int_equal(read_log(P("nan.jsonl"), l, 200), 101);   /* step 102 stopped */
    assert_true(num(l[100].text, "loss_scale") == 1);
    assert_int_equal((int)num(l[100].text, "skipped"), 101);
    expect_error(o, 1, "collapse", "step 102", "100 steps in a row", "fc.weight, fc.bias",
                 "'log' at fake.mp:7: lp", NULL);
}

static void test_static_scale_collapse(void **st)
{
    (void)st;
    fault_nan = 1;
    model.cfg.ls = MP_LS_STATIC;
    model.cfg.ls_init = 8;
    expect_error(run(TRAIN_DATA, "--steps", "500", NULL), 1, "static collapse", "step 100",
                 "loss scale 8", "'log'", NULL);
}

static void test_check_numerics(void **st)
{
    (void)st;
    fault_nan = 1;
    expect_error(run(TRAIN_DATA, "--check-numerics", NULL), 1, "check-numerics", "step 1:",
                 "--check-numerics", "'log' at fake.mp:7: lp", NULL);
    fault_nan = 0;
    expect_check = 1;                           /* every training forward checks */
    expect_ok(run(TRAIN_DATA, "--steps", "3", "--check-numerics", NULL));
    expect_check = 0;
    expect_ok(run(TRAIN_DATA, "--steps", "3", NULL));
}

static int has_tmp_files(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    int found = 0;
    while ((de = readdir(d)))
        found |= strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return found;
}

static void test_checkpoint_files(void **st)
{
    (void)st;
    char m[64];
    expect_ok(run(TRAIN_DATA, "--steps", "10", "--save-every", "4", "--save", P("every.st"), NULL));
    assert_string_equal(meta_of(P("every.st"), "step", m, sizeof m), "10");
    assert_string_equal(meta_of(P("every.st"), "model", m, sizeof m), "fake");
    assert_string_equal(meta_of(P("every.st"), "policy", m, sizeof m), "mixed_float16");
    assert_false(has_tmp_files());
    expect_error(run(TRAIN_DATA, "--steps", "2", "--save", P("no/such/dir/c.st"), NULL), 1,
                 "bad save dir", "no/such/dir/c.st", NULL);
    assert_false(has_tmp_files());
    expect_error(run(TRAIN_DATA, "--steps", "2", "--log", P("no/such/log.jsonl"), NULL), 1,
                 "bad log", "no/such/log.jsonl", NULL);
}

static void test_checkpoint_faults(void **st)
{
    (void)st;
    char good[256];
    snprintf(good, sizeof good, "%s", P("good.st"));
    expect_ok(run(TRAIN_DATA, "--steps", "3", "--save", good, NULL));
    rewrite(good, P("drop.st"), "fc.bias", NULL, NULL, NULL, 0);
    rewrite(good, P("dropopt.st"), "optimizer.exp_avg_sq.fc.weight", NULL, NULL, NULL, 0);
    rewrite(good, P("extra.st"), "fc.bias", "fc.bias2", NULL, NULL, 0);
    rewrite(good, P("f16.st"), "fc.weight", "fc.weight", NULL, NULL, 1);
    rewrite(good, P("other.st"), NULL, NULL, "model", "resnet", 0);
    rewrite(good, P("sgd.st"), NULL, NULL, "optimizer", "sgd", 0);
    rewrite(good, P("badnum.st"), NULL, NULL, "step", "12x", 0);
    rewrite(good, P("badrng.st"), NULL, NULL, "data_rng", "zz", 0);
    char *bytes = slurp(good);
    FILE *f = fopen(P("trunc.st"), "wb");
    fwrite(bytes, 1, 100, f);
    fclose(f);
    free(bytes);

    expect_error(run(TRAIN_DATA, "--resume", P("nope.st"), NULL), 1, "missing", "nope.st", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("trunc.st"), NULL), 1, "truncated", "trunc.st", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("drop.st"), NULL), 1, "missing tensor",
                 "drop.st", "'fc.bias'", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("dropopt.st"), NULL), 1, "missing slot",
                 "dropopt.st", "'optimizer.exp_avg_sq.fc.weight'", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("extra.st"), NULL), 1, "unexpected",
                 "extra.st", "'fc.bias2'", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("f16.st"), NULL), 1, "dtype", "f16.st",
                 "'fc.weight'", "F16", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("other.st"), NULL), 1, "model", "other.st",
                 "'resnet'", "'fake'", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("sgd.st"), NULL), 1, "optimizer", "sgd.st", "sgd",
                 "adam", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("badnum.st"), NULL), 1, "number", "badnum.st",
                 "'step'", NULL);
    expect_error(run(TRAIN_DATA, "--resume", P("badrng.st"), NULL), 1, "rng", "badrng.st",
                 "data_rng", NULL);
    expect_error(run(TRAIN_DATA, "--resume", good, "--steps", "2", NULL), 1, "past",
                 "good.st", "step 3", NULL);
    expect_error(run(TRAIN_DATA, "--init", P("drop.st"), NULL), 1, "init missing",
                 "drop.st", "'fc.bias'", NULL);
    expect_error(run(TRAIN_DATA, "--init", P("extra.st"), NULL), 1, "init unexpected",
                 "extra.st", "'fc.bias2'", NULL);
    model.params[0].shape[1] = NC + 1;          /* the model changed shape */
    model.params[0].numel = NF * (NC + 1);
    Out o = run(TRAIN_DATA, "--init", good, NULL);
    model.params[0].shape[1] = NC;
    model.params[0].numel = NF * NC;
    expect_error(o, 1, "shape", "good.st", "'fc.weight'", "16x4", "16x5", NULL);
}

/* --init takes the parameters only; same seed, same init; eval is stable. */
static void test_init_and_seed(void **st)
{
    (void)st;
    Line l1[8], l2[8];
    expect_ok(run(TRAIN_DATA, "--steps", "5", "--save", P("i_a.st"), "--eval", D("x", "ex.npy"),
                  "--eval", D("y", "ey.npy"), "--log", P("i_a.jsonl"), NULL));
    expect_ok(run(TRAIN_DATA, "--steps", "0", "--init", P("i_a.st"), "--save", P("i_b.st"),
                  "--eval", D("x", "ex.npy"), "--eval", D("y", "ey.npy"), "--log", P("i_b.jsonl"), NULL));
    same_tensors(P("i_a.st"), P("i_b.st"), 0);
    int n1 = read_log(P("i_a.jsonl"), l1, 8), n2 = read_log(P("i_b.jsonl"), l2, 8);
    assert_int_equal(n2, 1);
    assert_string_equal(strstr(l1[n1 - 1].text, "\"eval\""), strstr(l2[0].text, "\"eval\""));
    expect_ok(run(TRAIN_DATA, "--steps", "0", "--seed", "7", "--save", P("s7a.st"), NULL));
    expect_ok(run(TRAIN_DATA, "--steps", "0", "--seed", "7", "--save", P("s7b.st"), NULL));
    same_tensors(P("s7a.st"), P("s7b.st"), 1);
    expect_ok(run(TRAIN_DATA, "--steps", "0", "--seed", "8", "--save", P("s8.st"), NULL));
    MpStFile f7, f8;
    MpErr e;
    assert_int_equal(mp_st_load(P("s7a.st"), &f7, &e), 0);
    assert_int_equal(mp_st_load(P("s8.st"), &f8, &e), 0);
    const float *w7 = (const float *)mp_st_find(&f7, "fc.weight")->data;
    const float *w8 = (const float *)mp_st_find(&f8, "fc.weight")->data;
    assert_true(memcmp(w7, w8, sizeof(float) * NF * NC) != 0);
    double lim = sqrt(6.0 / (NF + NC));
    for (int i = 0; i < NF * NC; i++)
        assert_true(fabs(w7[i]) <= lim);
    assert_true(((const float *)mp_st_find(&f7, "fc.bias")->data)[0] == 0);
    mp_st_close(&f7);
    mp_st_close(&f8);
}

/* --gradcheck needs no data; it finds a wrong backward pass. */
static void test_gradcheck(void **st)
{
    (void)st;
    Out o = run("--gradcheck", NULL);
    assert_non_null(strstr(o.out, "gradcheck: fc.weight"));
    assert_non_null(strstr(o.out, "gradcheck: fc.bias"));
    assert_null(strstr(o.out, "running_mean"));
    expect_ok(o);
    grad_bug = 1.5f;
    expect_error(run("--gradcheck", NULL), 1, "gradcheck", "gradcheck failed", NULL);
}

/* ---- pieces: RNG, init statistics, batch order ------------------------------ */

static void test_rng(void **st)
{
    (void)st;
    /* xoshiro256** from state {1, 2, 3, 4}: the reference implementation's
     * first outputs. */
    MpRng r = {{1, 2, 3, 4}};
    assert_true(mp_rng_next(&r) == 11520);
    assert_true(mp_rng_next(&r) == 0);
    assert_true(mp_rng_next(&r) == 1509978240);
    assert_true(mp_rng_next(&r) == 1215971899390074240ull);
    /* splitmix64 from 0: the reference's first output */
    uint64_t x = 0;
    assert_true(mp_splitmix64(&x) == 0xE220A8397B1DCDAFull);
    mp_rng_seed(&r, 5, 0);
    for (int i = 0; i < 1000; i++) {
        double u = mp_rng_uniform(&r);
        assert_true(u >= 0 && u < 1);
        assert_true(mp_rng_below(&r, 7) < 7);
    }
}

static void test_init_statistics(void **st)
{
    (void)st;
    static float v[40000];
    MpParam p = {"w", 2, {200, 200}, 40000, MP_INIT_HE_NORMAL, 0, 0, 200, 100, 1, v, NULL};
    MpErr e;
    double s1 = 0, s2 = 0;
    assert_int_equal(mp_init_param(&p, 0, 3, &e), 0);
    for (int i = 0; i < 40000; i++)
        s1 += v[i], s2 += (double)v[i] * v[i];
    assert_true(fabs(s1 / 40000) < 0.003);
    assert_true(fabs(sqrt(s2 / 40000) / sqrt(2.0 / 200) - 1) < 0.02);
    p.init = MP_INIT_UNIFORM;
    p.a = -2;
    p.b = 6;
    assert_int_equal(mp_init_param(&p, 0, 3, &e), 0);
    s1 = 0;
    for (int i = 0; i < 40000; i++) {
        assert_true(v[i] >= -2 && v[i] <= 6);
        s1 += v[i];
    }
    assert_true(fabs(s1 / 40000 - 2) < 0.05);
    p.init = MP_INIT_CONSTANT;
    p.a = 0.25;
    assert_int_equal(mp_init_param(&p, 0, 3, &e), 0);
    assert_true(v[0] == 0.25f && v[39999] == 0.25f);
    p.init = MP_INIT_HE_NORMAL;
    p.fan_in = 0;
    assert_int_not_equal(mp_init_param(&p, 0, 3, &e), 0);
    assert_non_null(strstr(e.msg, "'w'"));
}

static void test_order(void **st)
{
    (void)st;
    MpDataSet d;
    MpOrder o, o2;
    MpErr e;
    memset(&d, 0, sizeof d);
    d.samples = 10;
    d.batches = 3;                               /* B = 3: sample 9 left out */
    assert_int_equal(mp_order_init(&o, &d, 3, 0, 1, &e), 0);
    for (int k = 0; k < 7; k++) {
        const int64_t *idx = mp_order_next(&o);
        for (int i = 0; i < 3; i++)
            assert_int_equal(idx[i], (k % 3) * 3 + i);
    }
    free(o.perm);
    assert_int_equal(mp_order_init(&o, &d, 3, 1, 42, &e), 0);
    int64_t first[9];
    for (int epoch = 0; epoch < 4; epoch++) {
        int seen[10] = {0}, same = 1;
        for (int k = 0; k < 3; k++) {
            const int64_t *idx = mp_order_next(&o);
            for (int i = 0; i < 3; i++) {
                seen[idx[i]]++;
                if (epoch == 0)
                    first[k * 3 + i] = idx[i];
                same &= first[k * 3 + i] == idx[i];
            }
        }
        int total = 0;
        for (int i = 0; i < 10; i++) {
            assert_true(seen[i] <= 1);
            total += seen[i];
        }
        assert_int_equal(total, 9);
        if (epoch > 0)
            assert_false(same);
    }
    /* Restore mid-epoch and continue identically. */
    mp_order_next(&o);
    assert_int_equal(mp_order_init(&o2, &d, 3, 1, 0, &e), 0);
    mp_order_restore(&o2, &o.start, o.epoch, o.pos);
    for (int k = 0; k < 8; k++) {
        const int64_t *a = mp_order_next(&o), *b = mp_order_next(&o2);
        assert_memory_equal(a, b, 3 * sizeof *a);
    }
    free(o.perm);
    free(o2.perm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng),
        cmocka_unit_test(test_init_statistics),
        cmocka_unit_test(test_order),
        cmocka_unit_test_setup(test_trains_and_logs, each),
        cmocka_unit_test_setup(test_plain_progress_lines, each),
        cmocka_unit_test_setup(test_usage, each),
        cmocka_unit_test_setup(test_data_faults, each),
        cmocka_unit_test_setup(test_resume_adam_exact, each),
        cmocka_unit_test_setup(test_resume_sgd_exact, each),
        cmocka_unit_test_setup(test_loss_scaling, each),
        cmocka_unit_test_setup(test_collapse_stop, each),
        cmocka_unit_test_setup(test_static_scale_collapse, each),
        cmocka_unit_test_setup(test_check_numerics, each),
        cmocka_unit_test_setup(test_checkpoint_files, each),
        cmocka_unit_test_setup(test_checkpoint_faults, each),
        cmocka_unit_test_setup(test_init_and_seed, each),
        cmocka_unit_test_setup(test_gradcheck, each),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
