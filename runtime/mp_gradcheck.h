/* mp_gradcheck.h - `train --gradcheck`: checks the generated backward pass
 * against central finite differences of the generated forward pass.
 *
 * For tests of mpcc itself (tests/t_gradcheck.sh), on models compiled with
 * --precision float32. The inputs are filled with reproducible synthetic
 * data (floats ~ N(0, 1); labels and ids uniform in [0, classes)), the
 * analytic gradient of the loss is taken once, then for up to
 * MP_GC_SAMPLES elements of every trainable parameter the loss is evaluated
 * at v +- h. Forward passes are deterministic (dropout masks depend on the
 * step, not on a call count), so the differences see the same function.
 * Only a wrong gradient is reported (TRAINER.md): an element whose
 * differences cross a kink of the loss (relu, clamp, max, abs at 0,
 * max_pool, ...) is skipped and counted (mp_gc_element), and the
 * tolerance includes the loss's own f32 rounding, measured on the model
 * (mp_gc_noise). A failure names the parameter and the op that reads it,
 * with its source line (MpParam.reader). Prints one line per parameter;
 * returns 0 when every compared element agrees. */
#ifndef MP_GRADCHECK_H
#define MP_GRADCHECK_H

#include "mp_model.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define MP_GC_SAMPLES 24

static inline double mp_gc_uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static inline void mp_gc_fill_inputs(MpModel *m, uint64_t seed)
{
    for (int i = 0; i < m->ninputs; i++) {
        MpInput *in = &m->inputs[i];
        int64_t n = 1;
        for (int d = 0; d < in->rank; d++)
            n *= in->shape[d];
        for (int64_t k = 0; k < n; k++) {
            double u = mp_gc_uniform(&seed), v = mp_gc_uniform(&seed);
            double classes = (double)(in->classes > 0 ? in->classes : 4);
            if (in->dtype == MP_I32)
                ((int32_t *)in->batch)[k] = (int32_t)(u * classes);
            else if (in->dtype == MP_U16)
                ((uint16_t *)in->batch)[k] = (uint16_t)(u * classes);
            else if (in->dtype == MP_U8 && in->classes > 0)
                ((uint8_t *)in->batch)[k] = (uint8_t)(u * classes);
            else if (in->dtype == MP_U8)
                ((uint8_t *)in->batch)[k] = (uint8_t)(u * 256);
            else if (in->dtype == MP_F32)
                ((float *)in->batch)[k] = (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
            else {
                fprintf(stderr, "gradcheck: input '%s': only f32, i32, u16 and u8 inputs are supported\n",
                        in->name);
                exit(2);
            }
        }
    }
}

static inline double mp_gc_loss(MpModel *m, MpRun *run)
{
    m->cast_params();
    run->check = 0;
    if (m->forward(run))
        return NAN;
    return run->loss;
}

/* The loss with one parameter element set to w, then restored. */
static inline double mp_gc_at(MpModel *m, MpRun *run, float *x, float w)
{
    float keep = *x;
    *x = w;
    double l = mp_gc_loss(m, run);
    *x = keep;
    return l;
}

/* The loss's own rounding error: f32 through every op of this model, so it
 * grows with the model's depth. Measured, not assumed: the loss moved by a
 * few ulps of some elements of p, less the move the gradient accounts for,
 * is rounding (at least two ulps of the loss itself). */
static inline double mp_gc_noise(MpModel *m, MpRun *run, MpParam *p, const float *grad, double f0,
                                 uint64_t pick)
{
    static const double ulps[] = {1, -2, 3};
    double eps = 2 * fabs(f0) * FLT_EPSILON;
    for (int s = 0; s < 3; s++) {
        int64_t k = (int64_t)(mp_gc_uniform(&pick) * (double)p->numel);
        float v = p->value[k];
        for (int u = 0; u < 3; u++) {
            float w = (float)(v + ulps[u] * FLT_EPSILON * fmax(fabs(v), 1));
            double d = mp_gc_at(m, run, &p->value[k], w) - f0 - grad[k] * ((double)w - v);
            eps = fmax(eps, fabs(d));
        }
    }
    return eps;
}

enum { MP_GC_PASS, MP_GC_FAIL, MP_GC_KINK };

/* The backward pass's gradient of element k of p with that element set to
 * w: one more forward and backward pass, which overwrite every gradient
 * buffer (mp_gradcheck works from its own copy). */
static inline double mp_gc_grad_at(MpModel *m, MpRun *run, MpParam *p, int64_t k, float w)
{
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].grad)
            memset(m->params[i].grad, 0, sizeof(float) * (size_t)m->params[i].numel);
    float keep = p->value[k];
    p->value[k] = w;
    double l = mp_gc_loss(m, run);
    int bad = m->backward(run);
    p->value[k] = keep;
    return bad || !isfinite(l) ? NAN : p->grad[k];
}

/* One element x with gradient g: central differences at steps h0, h0/4,
 * h0/16, h0/64, the smaller ones only while the loss's rounding (eps / h)
 * stays within the tolerance. PASS when one agrees with g. Otherwise the
 * smallest step decides. A kink in [v-h, v+h] (relu, clamp, max, abs at 0,
 * max_pool's choice, ...) leaves no derivative to compare with: KINK when
 * the one-sided differences (f(v+h) - f(v)) / h and (f(v) - f(v-h)) / h
 * disagree (a kink on one side moves the central difference by half their
 * gap, so a mismatch it causes is always seen), or when the central
 * differences of the steps tried disagree with each other: on a smooth
 * loss they are all its derivative to O(h^2), but kinks on both sides can
 * cancel in the one-sided test, and where a step crosses many (a deep
 * relu network, every pixel behind a stem filter) the slope changes at
 * every scale. Last, a kink nearer to v than the smallest step can be
 * resolved (the loss is f32) shows in the backward pass itself: its
 * gradient at v - h or v + h differs from g. Otherwise the loss is smooth
 * there, the differences are its derivative, and g is wrong: FAIL.
 * *ratio and *fd: the last comparison, *ratio as a fraction of its
 * tolerance. */
static inline int mp_gc_element(MpModel *m, MpRun *run, MpParam *p, int64_t k, double g, double f0,
                                double eps, double *ratio, double *fd_out)
{
    const double rel = 2e-2, floor_ = 2e-3;
    float *x = &p->value[k], v = *x, near[2] = {v, v};
    double h0 = 1e-2 * fmax(fabs(v), 1), lo = INFINITY, hi = -INFINITY, tol = 0;
    int verdict = MP_GC_KINK;
    for (int j = 0; j < 4; j++) {
        double h = ldexp(h0, -2 * j);
        if (j > 0 && 2 * eps / h > rel * fabs(g) + floor_)
            break;
        float vp = (float)(v + h), vm = (float)(v - h);
        double fp = mp_gc_at(m, run, x, vp), fm = mp_gc_at(m, run, x, vm);
        double hp = (double)vp - v, hm = v - (double)vm;
        double fd = (fp - fm) / (hp + hm), dp = (fp - f0) / hp, dm = (f0 - fm) / hm;
        /* the f32 loss carries eps of rounding: fd up to eps / h of it,
         * each one-sided difference 2 eps / h (twice that allowed) */
        tol = rel * fmax(fabs(fd), fabs(g)) + floor_ + 2 * eps / h;
        double smooth = rel * fmax(fabs(dp), fabs(dm)) + floor_ + 8 * eps / h;
        *ratio = fabs(fd - g) / tol;
        *fd_out = fd;
        if (fabs(fd - g) <= tol)
            return MP_GC_PASS;
        lo = fmin(lo, fd);
        hi = fmax(hi, fd);
        verdict = fabs(dp - dm) <= smooth && hi - lo <= tol ? MP_GC_FAIL : MP_GC_KINK;
        near[0] = vm;
        near[1] = vp;
    }
    for (int i = 0; i < 2 && verdict == MP_GC_FAIL; i++)
        if (!(fabs(mp_gc_grad_at(m, run, p, k, near[i]) - g) <= tol))
            verdict = MP_GC_KINK;
    return verdict;
}

/* Returns 0 when every checked derivative agrees within tolerance. Each
 * parameter gets MP_GC_SAMPLES elements compared (all of a smaller one);
 * an element whose differences cross a kink is skipped, counted, and
 * another drawn in its place (up to 4 MP_GC_SAMPLES draws). */
static inline int mp_gradcheck(MpModel *m, uint64_t seed)
{
    MpRun run;
    memset(&run, 0, sizeof run);
    run.training = 1;
    run.seed_grad = 1;
    run.seed = seed;
    run.step = 1;
    mp_gc_fill_inputs(m, seed ^ 0x5EEDull);
    for (int p = 0; p < m->nparams; p++)
        if (m->params[p].grad)
            memset(m->params[p].grad, 0, sizeof(float) * (size_t)m->params[p].numel);
    double loss = mp_gc_loss(m, &run);
    if (m->backward(&run) || !isfinite(loss)) {
        fprintf(stderr, "gradcheck: the loss or its gradient is not finite\n");
        return 1;
    }
    printf("gradcheck: loss %.6g\n", loss);
    float **grad = (float **)calloc((size_t)m->nparams + 1, sizeof *grad);
    for (int p = 0; grad && p < m->nparams; p++)
        if (m->params[p].grad && (grad[p] = (float *)malloc(sizeof(float) * (size_t)m->params[p].numel)))
            memcpy(grad[p], m->params[p].grad, sizeof(float) * (size_t)m->params[p].numel);
    int bad = 0, failed_params = 0;
    int64_t kinks = 0;
    uint64_t pick = seed ^ 0xC0FFEEull;
    for (int p = 0; p < m->nparams; p++) {
        MpParam *pp = &m->params[p];
        if (!pp->grad)
            continue;
        if (!grad || !grad[p]) {
            fprintf(stderr, "gradcheck: out of memory\n");
            exit(2);
        }
        double eps = mp_gc_noise(m, &run, pp, grad[p], loss, pick ^ (uint64_t)p);
        double worst = 0;
        int all = pp->numel <= MP_GC_SAMPLES, want = all ? (int)pp->numel : MP_GC_SAMPLES;
        int checked = 0, skipped = 0, failed = 0;
        for (int s = 0; checked < want && s < (all ? want : 4 * want); s++) {
            int64_t k = all ? s : (int64_t)(mp_gc_uniform(&pick) * (double)pp->numel);
            double g = grad[p][k], ratio = 0, fd = 0;
            int v = mp_gc_element(m, &run, pp, k, g, loss, eps, &ratio, &fd);
            if (v == MP_GC_KINK) {
                skipped++;
                continue;
            }
            checked++;
            worst = fmax(worst, ratio);
            if (v == MP_GC_FAIL && failed++ < 3 && bad++ < 20)
                fprintf(stderr, "gradcheck: %s[%lld] (read by %s): backward %.7g, finite difference "
                        "%.7g\n", pp->name, (long long)k, pp->reader ? pp->reader : "?", g, fd);
        }
        kinks += skipped;
        failed_params += failed > 0;
        printf("gradcheck: %-24s %4d elements checked, %d skipped (kinks), worst error %.3f of "
               "tolerance%s\n", pp->name, checked, skipped, worst, failed ? "  FAIL" : "");
        if (failed)
            printf("gradcheck: %s: %d wrong, read by %s\n", pp->name, failed,
                   pp->reader ? pp->reader : "?");
    }
    printf("gradcheck: %lld elements skipped: their finite differences cross a kink\n", (long long)kinks);
    for (int p = 0; grad && p < m->nparams; p++)
        free(grad[p]);
    free(grad);
    return failed_params ? 1 : 0;
}

#endif
