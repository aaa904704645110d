/* test_optim.c - the trainer's optimizers, learning-rate schedules, loss
 * scale state machine, unscale/finite check and clipping (mp_optim.h),
 * against values worked out by hand from torch.optim's formulas.
 * (tests/t_train_torch.sh compares the same functions with torch itself.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "mp_optim.h"

#define NEAR(a, b) assert_true(fabs((double)(a) - (double)(b)) <= 1e-6 * (1 + fabs((double)(b))))

static MpTrainCfg cfg_of(int opt, double lr)
{
    MpTrainCfg c;
    memset(&c, 0, sizeof c);
    c.opt = opt;
    c.lr = lr;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    c.steps = 10;
    return c;
}

static void test_sgd_plain(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 0.1);
    float p[2] = {1, -2}, g[2] = {0.5f, 0.25f};
    mp_sgd_update(p, g, NULL, 2, 0.1, &c);
    NEAR(p[0], 0.95);
    NEAR(p[1], -2.025);
}

static void test_sgd_momentum_wd(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 0.1);
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    float p = 1, g = 0.5f, buf = 0;
    /* step 1: d = 0.5 + 0.01*1 = 0.51, buf = 0.51, p = 1 - 0.051 */
    mp_sgd_update(&p, &g, &buf, 1, 0.1, &c);
    NEAR(buf, 0.51);
    NEAR(p, 0.949);
    /* step 2: d = 0.5 + 0.00949, buf = 0.9*0.51 + d = 0.96849 */
    mp_sgd_update(&p, &g, &buf, 1, 0.1, &c);
    NEAR(buf, 0.96849);
    NEAR(p, 0.949 - 0.096849);
}

static void test_sgd_nesterov(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 0.1);
    c.momentum = 0.9;
    c.nesterov = 1;
    float p = 1, g = 0.5f, buf = 0;
    /* buf = 0.5, d = 0.5 + 0.9*0.5 = 0.95 */
    mp_sgd_update(&p, &g, &buf, 1, 0.1, &c);
    NEAR(p, 1 - 0.095);
    /* buf = 0.45 + 0.5 = 0.95, d = 0.5 + 0.855 = 1.355 */
    mp_sgd_update(&p, &g, &buf, 1, 0.1, &c);
    NEAR(buf, 0.95);
    NEAR(p, 0.905 - 0.1355);
}

static void test_adam_first_steps(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_ADAM, 0.1);
    float p = 1, g = 0.5f, m = 0, v = 0;
    /* t=1: m = 0.05, v = 0.00025, m^ = 0.5, sqrt(v^) = 0.5 */
    mp_adam_update(&p, &g, &m, &v, 1, 0.1, &c, 1, 0);
    NEAR(m, 0.05);
    NEAR(v, 0.00025);
    NEAR(p, 1 - 0.1 * 0.5 / (0.5 + 1e-8));
    /* t=2: m = 0.095, v = 0.00049975; m^ = 0.095/0.19 = 0.5,
     * v^ = 0.00049975/0.001999 = 0.25 */
    mp_adam_update(&p, &g, &m, &v, 1, 0.1, &c, 2, 0);
    NEAR(m, 0.095);
    NEAR(v, 0.00049975);
    NEAR(p, 0.9 - 0.1);
}

static void test_adam_l2_vs_adamw(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_ADAM, 0.1);
    c.weight_decay = 0.1;
    float p = 1, g = 0.5f, m = 0, v = 0;
    /* Adam: d = 0.5 + 0.1*1 = 0.6, m^ = 0.6, sqrt(v^) = 0.6: a step of lr */
    mp_adam_update(&p, &g, &m, &v, 1, 0.1, &c, 1, 0);
    NEAR(m, 0.06);
    NEAR(p, 0.9);
    /* AdamW: p = 1*(1 - 0.1*0.1) = 0.99, then a plain Adam step of lr */
    c.opt = MP_OPT_ADAMW;
    p = 1, m = 0, v = 0;
    mp_adam_update(&p, &g, &m, &v, 1, 0.1, &c, 1, 1);
    NEAR(m, 0.05);
    NEAR(p, 0.89);
}

/* no_decay: the same update with weight decay 0, for every optimizer, and
 * bit for bit the update of a configuration with weight_decay = 0. */
static void test_no_decay(void **st)
{
    (void)st;
    static const int opts[] = {MP_OPT_SGD, MP_OPT_ADAM, MP_OPT_ADAMW, MP_OPT_RMSPROP};
    for (int o = 0; o < 4; o++) {
        MpTrainCfg c = cfg_of(opts[o], 0.1), c0;
        c.weight_decay = 0.5;
        c.momentum = 0.9;
        c.alpha = 0.99;
        c.centered = 1;
        c0 = c;
        c0.weight_decay = 0;
        float p[2] = {1, -2}, q[2] = {1, -2}, r[2] = {1, -2};
        float m[3][2] = {{0}}, v[3][2] = {{0}}, w[3][2] = {{0}};
        float *slot[3][MP_OPT_SLOTS] = {{m[0], v[0], w[0]}, {m[1], v[1], w[1]}, {m[2], v[2], w[2]}};
        for (int t = 1; t <= 3; t++) {
            float g[2] = {0.5f / (float)t, -0.25f * (float)t};
            mp_optim_update(&c, 1, p, g, slot[0], 2, 0.1, t);    /* no_decay */
            mp_optim_update(&c0, 0, q, g, slot[1], 2, 0.1, t);   /* weight_decay 0 */
            mp_optim_update(&c, 0, r, g, slot[2], 2, 0.1, t);    /* decayed */
        }
        assert_memory_equal(p, q, sizeof p);
        assert_memory_equal(m[0], m[1], sizeof m[0]);
        assert_true(fabs(p[0] - r[0]) > 1e-3);                  /* the decay is not a no-op */
    }
    MpOptK k = mp_optk_no_decay(mp_adam_k(&(MpTrainCfg){.beta1 = 0.9, .beta2 = 0.99, .weight_decay = 1}, 1, 1, 1));
    assert_int_equal(k.decoupled, 0);
    assert_int_equal(k.l2, 0);
}

static void test_optim_slots(void **st)
{
    (void)st;
    const char *names[MP_OPT_SLOTS];
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 0.1);
    assert_int_equal(mp_optim_slots(&c, names), 0);
    c.momentum = 0.5;
    assert_int_equal(mp_optim_slots(&c, names), 1);
    assert_string_equal(names[0], "momentum_buffer");
    c.opt = MP_OPT_ADAMW;
    assert_int_equal(mp_optim_slots(&c, names), 2);
    assert_string_equal(names[0], "exp_avg");
    assert_string_equal(names[1], "exp_avg_sq");
    c.opt = MP_OPT_RMSPROP;                 /* torch.optim.RMSprop's state names */
    c.momentum = 0;
    assert_int_equal(mp_optim_slots(&c, names), 1);
    assert_string_equal(names[0], "square_avg");
    c.centered = 1;
    assert_int_equal(mp_optim_slots(&c, names), 2);
    assert_string_equal(names[1], "grad_avg");
    c.momentum = 0.9;
    assert_int_equal(mp_optim_slots(&c, names), 3);
    assert_string_equal(names[0], "square_avg");
    assert_string_equal(names[1], "momentum_buffer");
    assert_string_equal(names[2], "grad_avg");
}

/* RMSprop's first two updates of one value, worked out by hand:
 * g = 2, p = 1, alpha 0.9, lr 0.01, eps 1e-8. */
static void test_rmsprop_first_steps(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_RMSPROP, 0.01);
    c.alpha = 0.9;
    float p = 1, g = 2, sq = 0, buf = 0, avg = 0;
    float *plain[MP_OPT_SLOTS] = {&sq, NULL, NULL};
    mp_optim_update(&c, 0, &p, &g, plain, 1, c.lr, 1);
    NEAR(sq, 0.4);                              /* 0.1 * 4 */
    NEAR(p, 1 - 0.01 * 2 / sqrt(0.4));
    mp_optim_update(&c, 0, &p, &g, plain, 1, c.lr, 2);
    NEAR(sq, 0.76);                             /* 0.9 * 0.4 + 0.4 */
    NEAR(p, 1 - 0.01 * 2 / sqrt(0.4) - 0.01 * 2 / sqrt(0.76));
    /* centered with momentum 0.5 and weight decay 0.1 */
    c.centered = 1;
    c.momentum = 0.5;
    c.weight_decay = 0.1;
    p = 1, sq = 0;
    float *all[MP_OPT_SLOTS] = {&sq, &buf, &avg};
    mp_optim_update(&c, 0, &p, &g, all, 1, c.lr, 1);
    double d = 2 + 0.1 * 1;                     /* L2: 2.1 */
    double s1 = 0.1 * d * d, a1 = 0.1 * d, b1 = d / sqrt(s1 - a1 * a1);
    NEAR(sq, s1);
    NEAR(avg, a1);
    NEAR(buf, b1);
    NEAR(p, 1 - 0.01 * b1);
    double p1 = 1 - 0.01 * b1, d2 = 2 + 0.1 * p1;
    mp_optim_update(&c, 0, &p, &g, all, 1, c.lr, 2);
    double s2 = 0.9 * s1 + 0.1 * d2 * d2, a2 = 0.9 * a1 + 0.1 * d2;
    double b2 = 0.5 * b1 + d2 / sqrt(s2 - a2 * a2);
    NEAR(sq, s2);
    NEAR(avg, a2);
    NEAR(buf, b2);
    assert_true(fabs(p - (p1 - 0.01 * b2)) <= 1e-5);
}

static void test_sched_constant(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 1);
    c.sched = MP_SCHED_CONSTANT;
    c.warmup = 4;
    for (int k = 1; k < 30; k++)
        NEAR(mp_sched_lr(&c, 0.5, k), 0.5);
}

static void test_sched_linear(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 1);
    c.sched = MP_SCHED_LINEAR;
    c.warmup = 4;               /* T = 10 */
    NEAR(mp_sched_lr(&c, 1, 1), 0.25);
    NEAR(mp_sched_lr(&c, 1, 2), 0.5);
    NEAR(mp_sched_lr(&c, 1, 4), 1);
    NEAR(mp_sched_lr(&c, 1, 5), 1);            /* p = 0 */
    NEAR(mp_sched_lr(&c, 1, 6), 5.0 / 6);
    NEAR(mp_sched_lr(&c, 1, 10), 1.0 / 6);
    NEAR(mp_sched_lr(&c, 1, 11), 0);
    NEAR(mp_sched_lr(&c, 1, 50), 0);
    c.warmup = 0;               /* torch's LinearLR(1, 0, total_iters=10) */
    NEAR(mp_sched_lr(&c, 2, 1), 2);
    NEAR(mp_sched_lr(&c, 2, 10), 0.2);
}

static void test_sched_cosine(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 1);
    c.sched = MP_SCHED_COSINE;
    c.warmup = 4;
    c.sched_min = 0.1;
    NEAR(mp_sched_lr(&c, 1, 2), 0.5);
    NEAR(mp_sched_lr(&c, 1, 5), 1);
    NEAR(mp_sched_lr(&c, 1, 7), 0.775);        /* p = 1/3: cos = 0.5 */
    NEAR(mp_sched_lr(&c, 1, 10), 0.1 + 0.9 * (1 - sqrt(3) / 2) / 2);
    NEAR(mp_sched_lr(&c, 1, 11), 0.1);
    NEAR(mp_sched_lr(&c, 1, 1000), 0.1);
    c.warmup = 0;               /* CosineAnnealingLR(T_max=10, eta_min=0.1) */
    c.sched_min = 0;
    NEAR(mp_sched_lr(&c, 1, 1), 1);
    NEAR(mp_sched_lr(&c, 1, 6), 0.5);
}

/* warmup_style "nanogpt": nanoGPT's get_lr(it), it = k - 1:
 *   it < W: lr * (it + 1) / (W + 1); then the same decay as "torch". */
static void test_sched_nanogpt_warmup(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 1);
    c.sched = MP_SCHED_COSINE;
    c.warmup = 4;
    c.sched_min = 0.1;
    c.warmup_style = MP_WARMUP_NANOGPT;
    NEAR(mp_sched_lr(&c, 1, 1), 0.2);
    NEAR(mp_sched_lr(&c, 1, 4), 0.8);
    NEAR(mp_sched_lr(&c, 1, 5), 1);            /* it = 4 = W: decay_ratio 0 */
    NEAR(mp_sched_lr(&c, 1, 7), 0.775);
    NEAR(mp_sched_lr(&c, 1, 11), 0.1);         /* it = 10 = lr_decay_iters */
    NEAR(mp_sched_lr(&c, 1, 12), 0.1);         /* it > lr_decay_iters: min_lr */
    c.sched = MP_SCHED_LINEAR;
    NEAR(mp_sched_lr(&c, 2, 2), 0.8);
    NEAR(mp_sched_lr(&c, 2, 6), 2 * 5.0 / 6);
    c.sched = MP_SCHED_CONSTANT;               /* no warm-up to style */
    NEAR(mp_sched_lr(&c, 2, 1), 2);
}

static void test_scaler_dynamic(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 1);
    MpScaler s;
    c.ls = MP_LS_DYNAMIC;
    c.ls_init = 8;
    c.ls_growth = 2;
    c.ls_backoff = 0.5;
    c.ls_interval = 3;
    mp_scaler_init(&s, &c);
    assert_int_equal(mp_scaler_update(&s, 0), 0);
    NEAR(s.scale, 4);
    assert_int_equal(s.skipped, 1);
    assert_int_equal(mp_scaler_update(&s, 1), 1);
    assert_int_equal(mp_scaler_update(&s, 1), 1);
    NEAR(s.scale, 4);
    assert_int_equal(s.good, 2);
    assert_int_equal(mp_scaler_update(&s, 1), 1);      /* third good: grow */
    NEAR(s.scale, 8);
    assert_int_equal(s.good, 0);
    mp_scaler_update(&s, 1);
    mp_scaler_update(&s, 0);                          /* overflow resets good */
    assert_int_equal(s.good, 0);
    NEAR(s.scale, 4);
    assert_false(mp_scaler_at_floor(&s));
    for (int i = 0; i < 5; i++)
        assert_int_equal(mp_scaler_update(&s, 0), 0);
    NEAR(s.scale, 1);                                 /* never below 1 */
    assert_true(mp_scaler_at_floor(&s));
    assert_int_equal(s.skipped, 7);
    s.scale = ldexp(1, 127);                          /* 2^128 is no f32 */
    for (int i = 0; i < 3; i++)
        mp_scaler_update(&s, 1);
    NEAR(s.scale, ldexp(1, 127));
}

static void test_scaler_static_none(void **st)
{
    (void)st;
    MpTrainCfg c = cfg_of(MP_OPT_SGD, 1);
    MpScaler s;
    c.ls = MP_LS_STATIC;
    c.ls_init = 128;
    c.ls_interval = 1;
    c.ls_growth = 2;
    mp_scaler_init(&s, &c);
    assert_int_equal(mp_scaler_update(&s, 0), 0);     /* still skipped */
    for (int i = 0; i < 5; i++)
        assert_int_equal(mp_scaler_update(&s, 1), 1);
    NEAR(s.scale, 128);
    assert_int_equal(s.skipped, 1);
    assert_true(mp_scaler_at_floor(&s));
    c.ls = MP_LS_NONE;
    mp_scaler_init(&s, &c);
    NEAR(s.scale, 1);
    assert_int_equal(mp_scaler_update(&s, 0), 1);     /* no check */
    assert_int_equal(s.skipped, 0);
    assert_false(mp_scaler_at_floor(&s));
}

static void test_unscale_and_clip(void **st)
{
    (void)st;
    float g[3] = {6, 8, 0};
    double ss = mp_unscale_sumsq(g, 3, 0.5f);
    NEAR(g[0], 3);
    NEAR(g[1], 4);
    NEAR(ss, 25);
    assert_int_equal(mp_clip(g, 3, 5, 10), 0);        /* under the limit */
    NEAR(g[0], 3);
    assert_int_equal(mp_clip(g, 3, 5, 1), 1);
    NEAR(g[0], 3 / (5 + 1e-6));
    NEAR(g[1], 4 / (5 + 1e-6));
    float h[2] = {1, INFINITY};
    assert_false(isfinite(mp_unscale_sumsq(h, 2, 1.0f)));
    h[1] = NAN;
    assert_false(isfinite(mp_unscale_sumsq(h, 2, 0.25f)));
    float big[2] = {3e38f, 3e38f};                    /* no false alarm */
    assert_true(isfinite(mp_unscale_sumsq(big, 2, 1.0f)));
}

/* mp_optim_span (the step's one pass: unscale, clip and update as it
 * reads) against the passes it replaces, bit for bit: mp_unscale_sumsq
 * writing g * 1/S back, mp_clip, then mp_optim_update; for every optimizer,
 * with and without decay, over more than one tile (MP_OPT_TILE) and a
 * ragged end. */
static void test_span_matches_passes(void **st)
{
    (void)st;
    enum { N = 2 * MP_OPT_TILE + 37, NOPT = 8 };
    static const int opts[NOPT] = {MP_OPT_SGD, MP_OPT_SGD, MP_OPT_SGD, MP_OPT_ADAM, MP_OPT_ADAMW,
                                   MP_OPT_RMSPROP, MP_OPT_RMSPROP, MP_OPT_RMSPROP};
    static const double moms[NOPT] = {0, 0.9, 0.9, 0, 0, 0, 0.9, 0.5};
    for (int o = 0; o < NOPT; o++)
        for (int nd = 0; nd < 2; nd++) {
            MpTrainCfg c = cfg_of(opts[o], 0.01);
            c.momentum = moms[o];
            c.nesterov = o == 2;
            c.weight_decay = 0.1;
            c.alpha = 0.9;
            c.centered = o >= 6;      /* rmsprop centered, with and without momentum... */
            if (o == 7)
                c.momentum = 0;       /* ...centered alone: grad_avg is the second slot */
            const char *names[MP_OPT_SLOTS];
            int nslots = mp_optim_slots(&c, names);
            float p0[N], g0[N], p1[N], g1[N], s0[MP_OPT_SLOTS][N], s1[MP_OPT_SLOTS][N];
            for (int i = 0; i < N; i++) {
                p0[i] = p1[i] = sinf((float)i) * 0.5f;
                g0[i] = g1[i] = cosf((float)i * 0.7f) * 1024.0f;
                for (int j = 0; j < MP_OPT_SLOTS; j++)
                    s0[j][i] = s1[j][i] = j == 0 ? 0.01f * (float)(i % 7 + 1) : 0.001f * (float)(i % 5);
            }
            float inv = 1.0f / 1024.0f;
            double norm = sqrt(mp_unscale_sumsq(g0, N, inv));
            float coef = mp_clip_coef(norm, 0.5);
            assert_true(coef < 1.0f);
            mp_clip(g0, N, norm, 0.5);
            float *slot0[MP_OPT_SLOTS], *slot1[MP_OPT_SLOTS];
            for (int j = 0; j < MP_OPT_SLOTS; j++) {
                slot0[j] = j < nslots ? s0[j] : NULL;
                slot1[j] = j < nslots ? s1[j] : NULL;
            }
            for (int t = 1; t <= 3; t++)
                mp_optim_update(&c, nd, p0, g0, slot0, N, 0.01, t);
            for (int t = 1; t <= 3; t++) {
                MpOptK k = mp_optim_k(&c, 0.01, t);
                if (nd)
                    k = mp_optk_no_decay(k);
                mp_optim_span(&k, p1, g1, slot1, N, inv, coef);
            }
            assert_memory_equal(p0, p1, sizeof p0);
            assert_memory_equal(s0, s1, sizeof s0);
            for (int i = 0; i < N; i++)
                assert_true(isfinite(p0[i]));
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum_wd),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_adam_first_steps),
        cmocka_unit_test(test_rmsprop_first_steps),
        cmocka_unit_test(test_adam_l2_vs_adamw),
        cmocka_unit_test(test_no_decay),
        cmocka_unit_test(test_optim_slots),
        cmocka_unit_test(test_sched_constant),
        cmocka_unit_test(test_sched_linear),
        cmocka_unit_test(test_sched_cosine),
        cmocka_unit_test(test_sched_nanogpt_warmup),
        cmocka_unit_test(test_scaler_dynamic),
        cmocka_unit_test(test_scaler_static_none),
        cmocka_unit_test(test_unscale_and_clip),
        cmocka_unit_test(test_span_matches_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
