/* mp_optim.h - optimizers, learning-rate schedules, loss scaling and
 * gradient clipping for generated trainers.
 *
 * Everything works on flat f32 buffers (one range per parameter) and does
 * exactly what torch.optim / torch.cuda.amp do, in f32 with the scalar
 * factors computed in double and rounded to f32 as torch's CPU kernels do:
 *
 *   SGD   (torch.optim.SGD)
 *         d = g + wd*p;  b = momentum*b + (1-dampening)*d  (b starts at 0, and
 *         step 1 takes b = d, undampened, as torch's first buffer)
 *         d = nesterov ? d + momentum*b : b  (momentum 0: no buffer, d = g + wd*p)
 *         p = p - lr*d
 *   Adam  (torch.optim.Adam, amsgrad off), t = number of updates applied
 *         d = g + wd*p;  m = b1*m + (1-b1)*d;  v = b2*v + (1-b2)*d*d
 *         p = p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 *   AdamW (torch.optim.AdamW): p = p*(1 - lr*wd), then Adam with wd = 0.
 *   RMSprop (torch.optim.RMSprop)
 *         d = g + wd*p;  s = alpha*s + (1-alpha)*d*d
 *         centered: a = alpha*a + (1-alpha)*d;  r = sqrt(s - a*a) + eps
 *         otherwise r = sqrt(s) + eps
 *         momentum: b = momentum*b + d/r;  p = p - lr*b
 *         otherwise p = p - lr*d/r
 *         state: square_avg, then momentum_buffer (momentum > 0), then
 *         grad_avg (centered): up to MP_OPT_SLOTS buffers.
 *
 * A parameter with no_decay set (MpParam.no_decay: the train block's
 * no_decay patterns, torch's parameter group with weight_decay 0) is
 * updated with wd = 0: no L2 term, no decoupled shrink.
 *
 * Learning rate of optimizer step k (1-based), base lr L, warmup W, horizon
 * T (the train block's `steps`), minimum M:
 *   constant         L
 *   k <= W (W > 0)   L * k / W                        (linear warm-up)
 *                    L * k / (W + 1)                  (warmup_style "nanogpt":
 *                         nanoGPT's get_lr, its iteration it = k - 1)
 *   otherwise        p = clamp((k - 1 - W) / (T - W), 0, 1)
 *     linear         L * (1 - p)
 *     cosine         M + (L - M) * (1 + cos(pi * p)) / 2
 * With W = 0 these are torch's LinearLR(1, 0, total_iters=T) and
 * CosineAnnealingLR(T_max=T, eta_min=M) stepped once after every optimizer
 * step: step 1 uses L and the rate reaches 0 (M) just after step T. The
 * horizon is the train block's `steps`, not --steps, so a run stopped early
 * and resumed follows the same curve; past T the rate stays at 0 (M).
 *
 * Loss scaling (PRECISION.md "Loss scaling"), state S, good, skipped:
 *   dynamic: non-finite -> skip, S = max(S*backoff, 1), good = 0, skipped++;
 *            finite -> step, good++, and when good reaches interval:
 *            S *= growth (only if S*growth is a finite f32), good = 0.
 *   static:  S fixed; non-finite steps are still skipped and counted.
 *   none:    S = 1, every step is taken.
 *
 * Clipping is torch.nn.utils.clip_grad_norm_: n = global L2 norm of the
 * unscaled gradients; if max/(n + 1e-6) < 1, every gradient is multiplied by
 * that factor.
 *
 * MP_HD functions (the per-element update, its factors, the loss-scale state
 * machine) are compiled for the GPU too: the CUDA program's optimizer
 * kernels call them, so both programs update with the same arithmetic. */
#ifndef MP_OPTIM_H
#define MP_OPTIM_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mp_model.h"
#include "mp_half.h"
#include "mp_vmath.h"

#define MP_PI 3.14159265358979323846
#define MP_OPT_SLOTS 3     /* optimizer state buffers at most (centered RMSprop with momentum) */

/* ---- learning-rate schedules ---------------------------------------- */

static inline double mp_sched_lr(const MpTrainCfg *c, double lr, int64_t k)
{
    double w = c->warmup, t = (double)c->steps;
    if (c->sched == MP_SCHED_CONSTANT)
        return lr;
    if (w > 0 && (double)k <= w)
        return lr * (double)k / (c->warmup_style == MP_WARMUP_NANOGPT ? w + 1 : w);
    double p = t > w ? ((double)k - 1 - w) / (t - w) : 1;
    p = p < 0 ? 0 : p > 1 ? 1 : p;
    if (c->sched == MP_SCHED_LINEAR)
        return lr * (1 - p);
    return c->sched_min + (lr - c->sched_min) * (1 + cos(MP_PI * p)) / 2;
}

/* ---- optimizers: one parameter's range of n values ------------------ */

/* The factors of one update, worked out once per step in double and
 * rounded to f32. */
typedef struct MpOptK {
    int adam, rms, decoupled, l2, nesterov, centered;
    float wd, mom, a;                     /* SGD: a = -lr */
    float damp;                           /* SGD: 1 - dampening, 1 at update 1 */
    float fb1, fb2, c1, c2, step, bc2, eps, shrink;   /* Adam */
    float alpha, ca;                      /* RMSprop: alpha, 1 - alpha (and eps, mom, a) */
} MpOptK;

/* t is the 1-based count of updates applied, including this one. */
static inline MP_HD MpOptK mp_sgd_k(const MpTrainCfg *c, double lr, int64_t t)
{
    MpOptK k;
    memset(&k, 0, sizeof k);
    k.damp = t <= 1 ? 1.0f : (float)(1 - c->dampening);
    k.l2 = c->weight_decay != 0;
    k.nesterov = c->nesterov;
    k.wd = (float)c->weight_decay;
    k.mom = (float)c->momentum;
    k.a = (float)-lr;
    return k;
}

/* t is the 1-based count of updates applied, including this one. */
static inline MP_HD MpOptK mp_adam_k(const MpTrainCfg *c, double lr, int64_t t, int decoupled)
{
    double b1 = c->beta1, b2 = c->beta2;
    MpOptK k;
    memset(&k, 0, sizeof k);
    k.adam = 1;
    k.decoupled = decoupled;
    k.l2 = !decoupled && c->weight_decay != 0;
    k.fb1 = (float)b1;
    k.fb2 = (float)b2;
    k.c1 = (float)(1 - b1);
    k.c2 = (float)(1 - b2);
    k.step = (float)-(lr / (1 - pow(b1, (double)t)));
    k.bc2 = (float)sqrt(1 - pow(b2, (double)t));
    k.eps = (float)c->eps;
    k.wd = (float)c->weight_decay;
    k.shrink = (float)(1 - lr * c->weight_decay);
    return k;
}

/* SGD on one element; buf is NULL when momentum is 0 (torch keeps no
 * buffer then). */
static inline MP_HD void mp_sgd_elem(const MpOptK *k, float *p, float g, float *buf)
{
    float d = k->l2 ? g + k->wd * *p : g;
    if (buf) {
        if (k->damp == 1.0f)           /* dampening 0 (or update 1): d as it is */
            *buf = *buf * k->mom + d;
        else                           /* torch's add_(d, alpha = 1 - dampening): one fma */
            *buf = fmaf(k->damp, d, *buf * k->mom);
        d = k->nesterov ? d + k->mom * *buf : *buf;
    }
    *p += k->a * d;
}

static inline void mp_sgd_loop(float *p, const float *g, float *buf, int64_t n, const MpOptK *k)
{
    for (int64_t i = 0; i < n; i++)
        mp_sgd_elem(k, &p[i], g[i], buf ? &buf[i] : (float *)0);
}

static inline void mp_sgd_update(float *p, const float *g, float *buf, int64_t n,
                                 double lr, const MpTrainCfg *c)
{
    MpOptK k = mp_sgd_k(c, lr, 2);    /* an update after the first: dampening applies */
    mp_sgd_loop(p, g, buf, n, &k);
}

/* The factors for a parameter in no_decay: the same update with wd = 0
 * (AdamW's shrink 1 - lr*0 is exactly 1, so skipping it changes nothing). */
static inline MP_HD MpOptK mp_optk_no_decay(MpOptK k)
{
    k.l2 = 0;
    k.decoupled = 0;
    return k;
}

/* Adam's moments and step for one element; d is the gradient (with the
 * L2 decay added). A macro, so that it inlines into the loops below
 * whatever their optimisation attributes. */
#define MP_ADAM_MVP(p, d, m, v, k) MP_ADAM_MVP_S(p, d, m, v, k, sqrtf)
#define MP_ADAM_MVP_S(p, d, m, v, k, SQRT)                                     \
    do {                                                                       \
        (m) = (m) * (k).fb1 + (k).c1 * (d);                                    \
        (v) = (v) * (k).fb2 + (k).c2 * ((d) * (d));                            \
        (p) += (k).step * ((m) / (SQRT(v) / (k).bc2 + (k).eps));               \
    } while (0)

/* Adam / AdamW on one element (the CUDA program's optimizer kernel). */
static inline MP_HD void mp_adam_elem(const MpOptK *k, float *p, float g, float *m, float *v)
{
    if (k->decoupled)
        *p *= k->shrink;
    float d = k->l2 ? g + k->wd * *p : g;
    MP_ADAM_MVP(*p, d, *m, *v, *k);
}

/* The factors of an RMSprop update (they do not depend on t). */
static inline MP_HD MpOptK mp_rms_k(const MpTrainCfg *c, double lr)
{
    MpOptK k;
    memset(&k, 0, sizeof k);
    k.rms = 1;
    k.centered = c->centered;
    k.l2 = c->weight_decay != 0;
    k.wd = (float)c->weight_decay;
    k.alpha = (float)c->alpha;
    k.ca = (float)(1 - c->alpha);
    k.eps = (float)c->eps;
    k.mom = (float)c->momentum;
    k.a = (float)-lr;
    return k;
}

/* RMSprop on one element, in the order of torch's single-tensor RMSprop
 * (square_avg.mul_(alpha).addcmul_(d, d, 1 - alpha), ..., addcdiv_);
 * buf is NULL without momentum, avg NULL unless centered. */
static inline MP_HD void mp_rms_elem(const MpOptK *k, float *p, float g, float *sq, float *buf,
                                     float *avg)
{
    float d = k->l2 ? g + k->wd * *p : g;
    *sq = *sq * k->alpha + k->ca * d * d;
    float r;
    if (avg) {
        *avg = *avg * k->alpha + k->ca * d;
        r = sqrtf(*sq - *avg * *avg) + k->eps;
    } else {
        r = sqrtf(*sq) + k->eps;
    }
    if (buf) {
        *buf = *buf * k->mom + d / r;
        *p += k->a * *buf;
    } else {
        *p += k->a * d / r;
    }
}

/* The RMSprop buffers among s[] (as mp_optim_slots names them). */
#define MP_RMS_BUF(k, s) ((k)->mom != 0 ? (s)[1] : (float *)0)
#define MP_RMS_AVG(k, s) ((k)->centered ? ((k)->mom != 0 ? (s)[2] : (s)[1]) : (float *)0)   /* constant indices: no stack frame in a CUDA kernel */

/* RMSprop on n elements; s[] as mp_optim_slots names them. */
static inline void mp_rms_loop(const MpOptK *k, float *p, const float *g, float *const *s, int64_t n)
{
    float *sq = s[0], *buf = MP_RMS_BUF(k, s), *avg = MP_RMS_AVG(k, s);
    for (int64_t i = 0; i < n; i++)
        mp_rms_elem(k, &p[i], g[i], &sq[i], buf ? &buf[i] : (float *)0, avg ? &avg[i] : (float *)0);
}

/* The Adam step on n elements, as torch's single-tensor Adam. `restrict`,
 * the factors in a local copy and the branches taken outside the loop let
 * the compiler vectorise it (vsqrtps and vdivps round exactly as the scalar
 * instructions do). */
MP_NO_ERRNO static inline void mp_adam_loop(float *MP_RESTRICT p, const float *MP_RESTRICT g,
                                float *MP_RESTRICT m, float *MP_RESTRICT v, int64_t n,
                                const MpOptK k)
{
    if (k.decoupled) {               /* AdamW: decoupled decay first */
        for (int64_t i = 0; i < n; i++)
            p[i] *= k.shrink;
    }
    if (k.l2) {                      /* Adam with L2: decay added to the gradient */
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] + k.wd * p[i];
            MP_ADAM_MVP(p[i], d, m[i], v[i], k);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float d = g[i];
        MP_ADAM_MVP(p[i], d, m[i], v[i], k);
    }
}

#ifdef MP_X86
/* mp_adam_loop on 8 floats at a time, for the step's pass. GCC does not
 * vectorise sqrtf while it may set errno (-fmath-errno, the default; the
 * optimize attribute does not lift it), so the same expressions are
 * written on GCC vectors with the AVX sqrt, which rounds as sqrtf does.
 * The compiler contracts a*b + c into an FMA here exactly where it does
 * in the scalar loop, so FMA is in the target only when the whole program
 * is built with it (-march=native...): the results are the scalar loop's,
 * bit for bit, whatever the flags (test_optim, t_optim_pass). */
#ifdef __FMA__
#define MP_OPT_AVX2 __attribute__((target("avx2,fma")))
#else
#define MP_OPT_AVX2 __attribute__((target("avx2")))
#endif
typedef float MpV8 __attribute__((vector_size(32)));
#define MP_V8_SQRT(x) ((MpV8)_mm256_sqrt_ps((__m256)(x)))

MP_OPT_AVX2 static inline void mp_adam_loop_avx2(float *p, const float *g, float *m, float *v,
                                                 int64_t n, MpOptK k)
{
    int64_t i = 0;
    if (k.decoupled) {     /* a loop of its own, as in mp_adam_loop: not contracted */
        for (int64_t j = 0; j < n; j++)
            p[j] *= k.shrink;
        k.decoupled = 0;
    }
    for (; i + 8 <= n; i += 8) {
        MpV8 P, d, M, V;
        memcpy(&P, p + i, sizeof P);
        memcpy(&d, g + i, sizeof d);
        memcpy(&M, m + i, sizeof M);
        memcpy(&V, v + i, sizeof V);
        if (k.l2)
            d = d + k.wd * P;
        MP_ADAM_MVP_S(P, d, M, V, k, MP_V8_SQRT);
        memcpy(p + i, &P, sizeof P);
        memcpy(m + i, &M, sizeof M);
        memcpy(v + i, &V, sizeof V);
    }
    mp_adam_loop(p + i, g + i, m + i, v + i, n - i, k);
}
#endif

/* Adam / AdamW on n values (the step's pass): AVX2 where the CPU has it. */
static inline void mp_adam_fast(float *p, const float *g, float *m, float *v, int64_t n,
                                const MpOptK *k)
{
#ifdef MP_X86
    if (mp_cpu_level() >= MP_CPU_AVX2) {
        mp_adam_loop_avx2(p, g, m, v, n, *k);
        return;
    }
#endif
    mp_adam_loop(p, g, m, v, n, *k);
}

static inline void mp_adam_update(float *p, const float *g, float *m, float *v,
                                  int64_t n, double lr, const MpTrainCfg *c,
                                  int64_t t, int decoupled)
{
    mp_adam_loop(p, g, m, v, n, mp_adam_k(c, lr, t, decoupled));
}

/* Names of the optimizer's state buffers, as in torch's state_dict. */
static inline int mp_optim_slots(const MpTrainCfg *c, const char **names)
{
    if (c->opt == MP_OPT_SGD) {
        names[0] = "momentum_buffer";
        return c->momentum != 0;
    }
    if (c->opt == MP_OPT_RMSPROP) {
        int n = 0;
        names[n++] = "square_avg";
        if (c->momentum != 0)
            names[n++] = "momentum_buffer";
        if (c->centered)
            names[n++] = "grad_avg";
        return n;
    }
    names[0] = "exp_avg";
    names[1] = "exp_avg_sq";
    return 2;
}

/* One optimizer update of one parameter; slot[] as named by mp_optim_slots;
 * no_decay: the parameter's MpParam.no_decay. */
/* The factors of update t (1-based) at rate lr, for c's optimizer. */
static inline MP_HD MpOptK mp_optim_k(const MpTrainCfg *c, double lr, int64_t t)
{
    return c->opt == MP_OPT_SGD ? mp_sgd_k(c, lr, t)
         : c->opt == MP_OPT_RMSPROP ? mp_rms_k(c, lr)
         : mp_adam_k(c, lr, t, c->opt == MP_OPT_ADAMW);
}

static inline void mp_optim_update(const MpTrainCfg *c, int no_decay, float *p, const float *g,
                                   float *const *slot, int64_t n, double lr, int64_t t)
{
    MpOptK k = mp_optim_k(c, lr, t);
    if (no_decay)
        k = mp_optk_no_decay(k);
    if (c->opt == MP_OPT_SGD)
        mp_sgd_loop(p, g, c->momentum != 0 ? slot[0] : (float *)0, n, &k);
    else if (c->opt == MP_OPT_RMSPROP)
        mp_rms_loop(&k, p, g, slot, n);
    else
        mp_adam_loop(p, g, slot[0], slot[1], n, k);
}

/* Elements the step's optimizer pass updates at a time (mp_optim_span). */
#define MP_OPT_TILE 256

/* The update of n values of one parameter from gradients that are still
 * loss-scaled: each gradient is multiplied by inv (1/S) and then by coef
 * (clipping), each product rounded to f32 as when mp_unscale_sumsq and
 * mp_clip write them back, then k's update (no_decay already applied to k).
 * The same values as those two passes and mp_optim_update, in one pass over
 * memory; g is left as it was. s[] holds the state buffers at p's offset,
 * as mp_optim_slots names them (NULL where there are fewer). */
MP_NO_ERRNO static inline void mp_optim_span(const MpOptK *k, float *MP_RESTRICT p,
                                             const float *MP_RESTRICT g, float *const *s,
                                             int64_t n, float inv, float coef)
{
    for (int64_t c = 0; c < n; c += MP_OPT_TILE) {
        float u[MP_OPT_TILE];
        int64_t m = n - c < MP_OPT_TILE ? n - c : MP_OPT_TILE;
        for (int64_t i = 0; i < m; i++)
            u[i] = inv != 1.0f ? g[c + i] * inv : g[c + i];
        if (coef != 1.0f)
            for (int64_t i = 0; i < m; i++)
                u[i] *= coef;
        float *sc[MP_OPT_SLOTS];
        for (int j = 0; j < MP_OPT_SLOTS; j++)
            sc[j] = s[j] ? s[j] + c : (float *)0;
        if (k->adam)
            mp_adam_fast(p + c, u, sc[0], sc[1], m, k);
        else if (k->rms)
            mp_rms_loop(k, p + c, u, sc, m);
        else
            mp_sgd_loop(p + c, u, sc[0], m, k);
    }
}

/* ---- gradients: unscale + finite check + norm, clipping -------------- */

/* Multiplies g by inv (skipped when inv is 1) and returns the sum of
 * squares in double: it is finite exactly when every value is, since
 * squares of finite f32 values cannot overflow a double. One pass. */
static inline double mp_unscale_sumsq(float *g, int64_t n, float inv)
{
    double s = 0;
    if (inv != 1.0f)
        for (int64_t i = 0; i < n; i++) {
            g[i] *= inv;
            s += (double)g[i] * g[i];
        }
    else
        for (int64_t i = 0; i < n; i++)
            s += (double)g[i] * g[i];
    return s;
}

/* The factor clip_grad_norm_ multiplies the gradients by; 1: none. */
static inline MP_HD float mp_clip_coef(double norm, double max_norm)
{
    float coef = (float)(max_norm / (norm + 1e-6));
    return max_norm <= 0 || !(coef < 1.0f) ? 1.0f : coef;
}

/* torch's clip_grad_norm_ given the total norm; returns 1 if it scaled. */
static inline int mp_clip(float *g, int64_t n, double norm, double max_norm)
{
    float coef = mp_clip_coef(norm, max_norm);
    if (coef == 1.0f)
        return 0;
    for (int64_t i = 0; i < n; i++)
        g[i] *= coef;
    return 1;
}

/* ---- loss scale state machine ---------------------------------------- */

typedef struct MpScaler {
    int kind;                   /* MP_LS_* */
    double scale, growth, backoff;
    int64_t interval;
    int64_t good;               /* consecutive good steps since the last change */
    int64_t skipped;            /* skipped steps in the whole run */
} MpScaler;

static inline void mp_scaler_init(MpScaler *s, const MpTrainCfg *c)
{
    s->kind = c->ls;
    s->scale = c->ls == MP_LS_NONE ? 1.0 : c->ls_init;
    s->growth = c->ls_growth;
    s->backoff = c->ls_backoff;
    s->interval = c->ls_interval;
    s->good = s->skipped = 0;
}

/* After a step's check: finite = the unscaled gradients were all finite.
 * Returns 1 when the optimizer step is to be taken. */
static inline MP_HD int mp_scaler_update(MpScaler *s, int finite)
{
    if (s->kind == MP_LS_NONE)
        return 1;
    if (!finite) {
        s->skipped++;
        s->good = 0;
        if (s->kind == MP_LS_DYNAMIC) {
            s->scale *= s->backoff;
            if (s->scale < 1)
                s->scale = 1;
        }
        return 0;
    }
    if (s->kind == MP_LS_DYNAMIC && ++s->good >= s->interval) {
        double next = s->scale * s->growth;
        if (next <= FLT_MAX)
            s->scale = (float)next;
        s->good = 0;
    }
    return 1;
}

/* The scale cannot go lower: dynamic at 1, static always. */
static inline MP_HD int mp_scaler_at_floor(const MpScaler *s)
{
    return s->kind == MP_LS_STATIC || (s->kind == MP_LS_DYNAMIC && s->scale <= 1);
}

#endif
