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
 * Prints one line per parameter; returns 0 when every element agrees. */
#ifndef MP_GRADCHECK_H
#define MP_GRADCHECK_H

#include "mp_model.h"
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

/* Returns 0 when every checked derivative agrees within tolerance. */
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
    int bad = 0;
    uint64_t pick = seed ^ 0xC0FFEEull;
    for (int p = 0; p < m->nparams; p++) {
        MpParam *pp = &m->params[p];
        if (!pp->grad)
            continue;
        double worst = 0;
        int nsamp = pp->numel < MP_GC_SAMPLES ? (int)pp->numel : MP_GC_SAMPLES;
        for (int s = 0; s < nsamp; s++) {
            int64_t k = nsamp == pp->numel ? s : (int64_t)(mp_gc_uniform(&pick) * (double)pp->numel);
            float v = pp->value[k];
            double g = pp->grad[k], err = 0, tol = 0;
            /* Two step sizes: a perturbation that crosses a kink (relu,
             * max_pool) spoils the larger one but rarely both. */
            for (int t = 0; t < 2; t++) {
                double h = (t ? 2.5e-3 : 1e-2) * (fabs(v) > 1 ? fabs(v) : 1);
                pp->value[k] = (float)(v + h);
                double lp = mp_gc_loss(m, &run);
                pp->value[k] = (float)(v - h);
                double lm = mp_gc_loss(m, &run);
                pp->value[k] = v;
                double hp = (double)(float)(v + h) - v, hm = v - (double)(float)(v - h);
                double fd = (lp - lm) / (hp + hm);
                /* f32 loss: the difference quotient carries ~1e-7 |loss| / h of noise */
                double tt = 2e-2 * fmax(fabs(fd), fabs(g)) + 2e-3 + 1e-5 * fabs(loss) / h;
                if (t == 0 || fabs(fd - g) / tt < err / tol) {
                    err = fabs(fd - g);
                    tol = tt;
                }
                if (err <= tol)
                    break;
                if (t == 1 && bad < 20) {
                    fprintf(stderr, "gradcheck: %s[%lld]: backward %.7g, finite difference %.7g\n",
                            pp->name, (long long)k, g, fd);
                    bad++;
                }
            }
            if (err / tol > worst)
                worst = err / tol;
        }
        printf("gradcheck: %-24s %4d elements checked, worst error %.3f of tolerance%s\n", pp->name,
               nsamp, worst, worst > 1 ? "  FAIL" : "");
    }
    return bad ? 1 : 0;
}

#endif
