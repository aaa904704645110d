/* optim_drive.c - runs the runtime's optimizer, schedule and clipping
 * (runtime/mp_optim.h) on given numbers, for tests/t_train_torch.sh.
 *   optim_drive OPT LR MOMENTUM NESTEROV WD BETA1 BETA2 EPS SCHED WARMUP MIN STEPS CLIP N
 *               DAMPENING ALPHA CENTERED
 * OPT: sgd|adam|adamw|rmsprop; SCHED: constant|linear|cosine; CLIP 0 = off.
 * stdin: N f32 initial parameters, then STEPS x N f32 gradients.
 * stdout: per step k = 1..STEPS: the f64 lr used, then the N f32 parameters
 * after the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_optim.h"

static int pick(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    fprintf(stderr, "optim_drive: unknown name '%s'\n", s);
    exit(2);
}

int main(int argc, char **argv)
{
    static const char *const opts[] = {"sgd", "adam", "adamw", "rmsprop"};
    static const char *const scheds[] = {"constant", "cosine", "linear"};
    if (argc != 18) {
        fprintf(stderr, "usage: optim_drive OPT LR MOMENTUM NESTEROV WD BETA1 BETA2 EPS SCHED "
                "WARMUP MIN STEPS CLIP N DAMPENING ALPHA CENTERED\n");
        return 2;
    }
    MpTrainCfg c;
    memset(&c, 0, sizeof c);
    c.opt = pick(argv[1], opts, 4);         /* MP_OPT_SGD, _ADAM, _ADAMW, _RMSPROP */
    c.lr = atof(argv[2]);
    c.momentum = atof(argv[3]);
    c.nesterov = atoi(argv[4]);
    c.weight_decay = atof(argv[5]);
    c.beta1 = atof(argv[6]);
    c.beta2 = atof(argv[7]);
    c.eps = atof(argv[8]);
    c.sched = pick(argv[9], scheds, 3);     /* MP_SCHED_CONSTANT, _COSINE, _LINEAR */
    c.warmup = atof(argv[10]);
    c.sched_min = atof(argv[11]);
    c.steps = atoll(argv[12]);
    c.clip = atof(argv[13]);
    long n = atol(argv[14]);
    c.dampening = atof(argv[15]);
    c.alpha = atof(argv[16]);
    c.centered = atoi(argv[17]);
    float *p = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    float *s0 = calloc((size_t)n, sizeof(float)), *s1 = calloc((size_t)n, sizeof(float));
    float *s2 = calloc((size_t)n, sizeof(float));
    float *slot[MP_OPT_SLOTS] = {s0, s1, s2};
    if (!p || !g || !s0 || !s1 || !s2 || fread(p, sizeof(float), (size_t)n, stdin) != (size_t)n)
        return 1;
    for (int64_t k = 1; k <= c.steps; k++) {
        if (fread(g, sizeof(float), (size_t)n, stdin) != (size_t)n)
            return 1;
        double lr = mp_sched_lr(&c, c.lr, k);
        double norm = sqrt(mp_unscale_sumsq(g, n, 1.0f));
        if (c.clip > 0)
            mp_clip(g, n, norm, c.clip);
        mp_optim_update(&c, 0, p, g, slot, n, lr, k);
        fwrite(&lr, sizeof lr, 1, stdout);
        fwrite(p, sizeof(float), (size_t)n, stdout);
    }
    return 0;
}
