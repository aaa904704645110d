/* mp_guard.h - what keeps an unattended run safe (TRAINER.md "Additions for
 * production runs"), apart from output paths (mp_out.h):
 *   - signals: SIGINT / SIGTERM only set mp_stop_signal; the training loop
 *     (mp_train.h) looks at it between steps, saves and exits 128 + signal.
 *     A second signal ends the program at once (_exit, the one thing a
 *     handler may safely do); a save it cuts short leaves only a temporary
 *     file that the next save removes.
 *   - non-finite values: without loss scaling a non-finite loss stops the
 *     run at its step; a checkpoint is never written from non-finite
 *     parameters or optimizer state (mp_params_finite).
 *   - the schedule: --steps past the train block's steps is warned about.
 *   - --dry-run's memory report.
 * Messages go to stderr (warnings, reports) or into MpErr (errors). */
#ifndef MP_GUARD_H
#define MP_GUARD_H

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mp_model.h"
#include "mp_util.h"
#include "mp_dist.h"
#include "mp_optim.h"
#include "mp_ckpt.h"

/* ---- signals ------------------------------------------------------------ */

static volatile sig_atomic_t mp_stop_signal;   /* 0, SIGINT or SIGTERM */

static void mp_on_signal(int sig)
{
    if (mp_stop_signal)
        _exit(128 + sig);
    mp_stop_signal = sig;
}

static MP_UNUSED void mp_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mp_on_signal;
    sa.sa_flags = SA_RESTART;                  /* reads and writes go on */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static MP_UNUSED const char *mp_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* ---- TEST-ONLY: pausing after a step ------------------------------------
 * Not part of the program's interface (TRAINER.md); tests use it to act on
 * a run at a known step instead of racing its speed (tests/py/lib.sh,
 * pause_*; DESIGN.md, Conventions). MPCC_TEST_PAUSE=N:PREFIX makes rank 0,
 * after step N (its log line written; its evaluation and --save-every save
 * not yet), write "paused after step N pid P signal S" (S: the stop signal
 * caught so far, 0 if none) to the FIFO PREFIX.at, then block reading one
 * line from the FIFO PREFIX.go:
 *   tell   say it again, S as it is now, and read again
 *   step   go on; pause again after the next step
 *   run    (or end of file) go on, no more pauses.
 * The stop signal is looked at before the next step, as without the hook.
 * Unset (every real run), it is one getenv per run. */
typedef struct MpPause {
    int64_t at;                 /* the step to pause after, or -1 */
    char at_path[512], go_path[512];
} MpPause;

static MP_UNUSED int mp_pause_init(MpPause *p, MpErr *e)
{
    const char *v = getenv("MPCC_TEST_PAUSE");
    char *end;
    p->at = -1;
    if (!v || mp_dist.rank != 0)
        return 0;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end != ':' || n < 1 || !end[1])
        return mp_errf(e, "MPCC_TEST_PAUSE=%s: want STEP:PREFIX (a test-only hook)", v);
    if (snprintf(p->at_path, sizeof p->at_path, "%s.at", end + 1) >= (int)sizeof p->at_path
        || snprintf(p->go_path, sizeof p->go_path, "%s.go", end + 1) >= (int)sizeof p->go_path)
        return mp_errf(e, "MPCC_TEST_PAUSE: the path is too long");
    p->at = n;
    return 0;
}

/* At step k == p->at: tell, wait for the test's word (above). */
static MP_UNUSED int mp_pause(MpPause *p, int64_t k, MpErr *e)
{
    char cmd[16];
    size_t n;
    do {
        char line[96];
        int len = snprintf(line, sizeof line, "paused after step %lld pid %ld signal %d\n",
                           (long long)k, (long)getpid(), (int)mp_stop_signal);
        int fd = open(p->at_path, O_WRONLY);
        if (fd < 0 || write(fd, line, (size_t)len) != len || close(fd))
            return mp_errf(e, "MPCC_TEST_PAUSE: %s: %s", p->at_path, strerror(errno));
        if ((fd = open(p->go_path, O_RDONLY)) < 0)
            return mp_errf(e, "MPCC_TEST_PAUSE: %s: %s", p->go_path, strerror(errno));
        ssize_t r = 1;          /* one line, a byte at a time: nothing read past it */
        for (n = 0; n < sizeof cmd - 1 && (r = read(fd, cmd + n, 1)) != 0; n += r > 0)
            if (r > 0 && cmd[n] == '\n')
                break;
            else if (r < 0 && errno != EINTR)
                break;
        close(fd);
        if (r < 0)
            return mp_errf(e, "MPCC_TEST_PAUSE: %s: %s", p->go_path, strerror(errno));
        cmd[n] = 0;
    } while (!strcmp(cmd, "tell"));
    if (strcmp(cmd, "step") && strcmp(cmd, "run") && n)
        return mp_errf(e, "MPCC_TEST_PAUSE: %s: '%s' (want tell, step or run)", p->go_path, cmd);
    p->at = strcmp(cmd, "step") ? -1 : k + 1;
    return 0;
}

/* ---- non-finite values ---------------------------------------------------- */

/* Without loss scaling nothing skips a step: a non-finite loss stops the
 * run. `since`: the first step it may have happened at (a device reads the
 * loss back only every few steps); k itself on the host. */
static MP_UNUSED int mp_loss_stop(const MpTrainer *t, int64_t since, int64_t k, float loss, MpErr *e)
{
    if (t->ls.kind != MP_LS_NONE || t->m->fp8 || isfinite(loss))
        return 0;               /* a loss scale (or mixed_float8) skips the step */
    if (since < k)
        return mp_errf(e, "step %lld: the loss is %s (first non-finite at a step in %lld..%lld; "
                       "--log-every 1 names it); without loss scaling the run stops; "
                       "--check-numerics names the operation", (long long)k, mp_nonfinite_name(loss),
                       (long long)since, (long long)k);
    return mp_errf(e, "step %lld: the loss is %s; without loss scaling the run stops; "
                   "--check-numerics names the operation", (long long)k, mp_nonfinite_name(loss));
}

/* Refuses to write `path` when a parameter or optimizer state is not finite. */
static MP_UNUSED int mp_params_finite(const MpTrainer *t, const char *path, MpErr *e)
{
    const MpModel *m = t->m;
    for (int s = -1; s < t->nslots; s++)
        for (int i = 0; i < m->nparams; i++) {
            const float *v = (s < 0 ? t->params : t->slot[s]) + t->offset[i];
            int64_t j = s >= 0 && !m->params[i].trainable ? -1 : mp_first_nonfinite(v, m->params[i].numel);
            if (j >= 0)
                return mp_errf(e, "%s: not written: %s%s%s '%s' holds %s (element %lld) after step "
                               "%lld", path, s < 0 ? "parameter" : "optimizer state ",
                               s < 0 ? "" : t->slot_name[s], s < 0 ? "" : " of", m->params[i].name,
                               mp_nonfinite_name(v[j]), (long long)j, (long long)t->step);
        }
    return 0;
}

/* With loss scaling, how many steps were skipped (stderr, when any). */
static MP_UNUSED void mp_report_skipped(const MpTrainer *t)
{
    if (t->ls.kind != MP_LS_NONE && t->ls.skipped > 0)
        fprintf(stderr, "loss scaling: %lld of %lld steps skipped (non-finite gradients)\n",
                (long long)t->ls.skipped, (long long)t->step);
}

/* ---- the schedule ---------------------------------------------------------- */

static MP_UNUSED void mp_warn_horizon(const MpTrainer *t, int64_t steps)
{
    const MpTrainCfg *c = &t->cfg;
    static const char *const names[] = {"constant", "cosine", "linear"};
    if (steps <= c->steps || c->sched < 0 || c->sched > MP_SCHED_LINEAR)
        return;
    fprintf(stderr, "warning: --steps %lld is past the train block's steps %lld: the %s schedule "
            "ends there; lr stays at %g from step %lld on\n", (long long)steps,
            (long long)c->steps, names[c->sched], mp_sched_lr(c, c->lr, c->steps + 1),
            (long long)c->steps + 1);
}

/* ---- --dry-run ------------------------------------------------------------- */

static MP_UNUSED void mp_mem_line(const char *what, int64_t bytes)
{
    printf("  %-18s %14lld bytes  %10.2f MiB\n", what, (long long)bytes, (double)bytes / (1 << 20));
}

static MP_UNUSED int64_t mp_data_bytes(const MpDataSet *d)
{
    int64_t n = 0;
    for (int i = 0; d->arr && i < d->n; i++)
        n += d->arr[i].nbytes;
    return n;
}

/* Everything was checked by then (data, checkpoints, outputs): print the
 * memory the run needs and train nothing. */
static MP_UNUSED int mp_dry_run(const MpTrainer *t, int64_t steps, MpErr *e)
{
    const MpModel *m = t->m;
    int64_t fl = t->total * (int64_t)sizeof(float), batches = 0, total;
    for (int i = 0; i < m->ninputs; i++)
        batches += m->batch * mp_sample_bytes(&m->inputs[i]);
    int64_t part[] = {fl, fl, t->nslots * fl, m->arena_bytes, mp_data_bytes(&t->data),
                      mp_data_bytes(&t->eval), batches};
    static const char *const what[] = {"parameters", "gradients", "optimizer state",
                                       "activation arena", "training data", "evaluation data",
                                       "batch buffers"};
    printf("dry run: model '%s' (%s), steps %lld..%lld, batch %lld x %lld accumulated; "
           "inputs, checkpoints and output paths checked\nhost memory:\n", m->name, m->policy,
           (long long)t->step + 1, (long long)steps, (long long)m->batch,
           (long long)t->cfg.accumulate);
    total = 0;
    for (int i = 0; i < (int)(sizeof part / sizeof part[0]); i++) {
        mp_mem_line(what[i], part[i]);
        total += part[i];
    }
    mp_mem_line("total", total);
    if (m->device && m->device->bytes) {
        printf("device memory:\n");
        mp_mem_line("total", m->device->bytes(t));
        printf("  (the training set included: it stays on the host instead with MP_CUDA_DATA=0,\n"
               "   for window streams, or when it takes more than a quarter of the free memory)\n");
    }
    return fflush(stdout) || ferror(stdout) ? mp_errf(e, "cannot write standard output") : 0;
}

#endif
