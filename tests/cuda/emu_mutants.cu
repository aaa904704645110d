/* emu_mutants.cu - each checking mode of the CPU stand-in
 * (tests/cuda/mp_cuda_emu.h) catches the class of GPU bug it is for: a
 * deliberately broken functor or call next to its correct twin, run once
 * the old way (MP_EMU_SERIAL=1: items in order, one thread per row,
 * streams at once), where the mutant passes, and once as the stand-in
 * runs now, where it must fail. Built by tests/t_cuda_emu.sh:
 *     g++ -std=c++17 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h \
 *         -Iruntime tests/cuda/emu_mutants.cu
 * Exit 0 when every mode catches its mutant, 1 otherwise. */
#include "mp_kernels_gemm.h"   /* the stand-in's products */
#include "mp_cuda.h"
#include "mp_cuda_ops.h"
#include <sys/wait.h>

static int fails;

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    fails += !ok;
}

static void serial(int on)
{
    if (on)
        setenv("MP_EMU_SERIAL", "1", 1);
    else
        unsetenv("MP_EMU_SERIAL");
}

/* Device buffer of n floats, and a host copy of one back. */
static float *dev(int64_t n)
{
    float *p;
    mp_cu_ok(cudaMalloc((void **)&p, (size_t)n * sizeof *p), "cudaMalloc");
    return p;
}

static std::vector<float> back(const float *d, int64_t n)
{
    std::vector<float> h((size_t)n);
    mp_cu_ok(cudaMemcpyAsync(h.data(), d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, mp_cu.st), "copy");
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "sync");
    return h;
}

/* ---- rows: a thread's partial sum taken for the row's ------------------------ */

struct RowSum {
    const float *x;
    float *y;
    int64_t len;
    int mutant;                    /* 1: no team.sum */
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        MpAcc s = mp_acc_zero();
        for (int64_t j = t.tid; j < len; j += t.nt)
            mp_acc_add(&s, x[r * len + j]);
        if (!mutant)
            s = t.sum(s);
        if (t.tid == 0)
            y[r] = mp_acc_get(s);
    }
};

struct Fill {
    float *x;
    MP_HD void operator()(int64_t i) const { x[i] = (float)(i % 7) + 1.0f; }
};

static int rows_right(int mutant)
{
    const int64_t R = 5, L = 300;
    float *x = dev(R * L), *y = dev(R);
    mp_cu_each("fill", R * L, Fill{x});
    mp_cu_rows("rowsum", R, mp_cu_row_threads(L), RowSum{x, y, L, mutant});
    std::vector<float> h = back(y, R);
    for (int64_t r = 0; r < R; r++) {
        double want = 0;
        for (int64_t j = 0; j < L; j++)
            want += (double)((r * L + j) % 7) + 1.0;
        if (h[(size_t)r] != (float)want)
            return 0;
    }
    return 1;
}

/* ---- rows: a reduction only some threads reach (a GPU deadlocks) ------------- */

struct Divergent {
    float *y;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        if (t.tid < 32)
            y[r] = t.max(1.0f);
    }
};

/* ---- compensated f32 sums (MpAcc) on adversarial input ------------------------ */

/* 1e7 values of mixed magnitude (10^-3 .. 10^3, both signs: the sum is a
 * few hundred times smaller than the sum of magnitudes), summed by one
 * block of 1024 threads as the device sums: each thread its share with
 * mp_acc_add, the shares joined in the GPU's tree (team.sum). Tolerance:
 * 2 f32 roundings of the exact sum plus 2^-40 of the sum of magnitudes
 * (tighter than a compensated sum's worst case, one rounding plus about
 * n eps^2 = 2^-34 of the magnitudes for n ~1e4 terms per thread, which
 * random signs never reach: the result comes out correctly rounded here,
 * 0.45 of the tolerance). A plain f32 share per thread, or a tree that
 * drops the corrections, is off by 7-8x the tolerance on this input. */
#define ACC_N 10000000
static std::vector<float> acc_x;
static double acc_ref, acc_abs;

static void acc_data(void)
{
    uint64_t r = 88172645463325252ull;
    acc_x.resize(ACC_N);
    acc_ref = acc_abs = 0;
    for (int64_t i = 0; i < ACC_N; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        double u = (double)(r >> 11) / 9007199254740992.0;       /* [0, 1) */
        float v = (float)((r & 1 ? -1.0 : 1.0) * pow(10.0, 6.0 * u - 3.0));
        acc_x[(size_t)i] = v;
        acc_ref += (double)v;            /* double over 1e7 terms of <= 1e3: */
        acc_abs += fabs((double)v);      /* off by < 1e7 * 2^-53 * 1e10: 1e-2 x tol */
    }
}

static int acc_close(double got, const char *what)
{
    double tol = 2.0 * 0x1p-24 * fabs(acc_ref) + 0x1p-40 * acc_abs, err = fabs(got - acc_ref);
    printf("     %s: sum %.9g, exact %.9g, error %.3g, tolerance %.3g\n", what, got, acc_ref, err, tol);
    return err <= tol;
}

struct AccSum {
    static constexpr int most = 1024;   /* its launch bound: one block of 1024 */
    const float *x;
    float *y;
    int64_t n;
    int mutant;                    /* 1: each thread's share a plain f32 sum */
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        MpAcc s = mp_acc_zero();
        float plain = 0.0f;
        (void)r;
        for (int64_t i = t.tid; i < n; i += t.nt) {
            mp_acc_add(&s, x[i]);
            plain += x[i];
        }
        if (mutant)
            s = MpAcc{plain, 0.0f};
        s = t.sum(s);
        if (t.tid == 0)
            y[0] = mp_acc_get(s);
    }
};

static float *acc_dev(void)
{
    float *x = dev(ACC_N);
    mp_cu_ok(cudaMemcpyAsync(x, acc_x.data(), ACC_N * sizeof(float), cudaMemcpyHostToDevice, mp_cu.st), "copy");
    return x;
}

static int acc_block(int mutant)
{
    float *x = acc_dev(), *y = dev(1);
    mp_cu_rows("accsum", 1, 1024, AccSum{x, y, ACC_N, mutant});
    return acc_close(back(y, 1)[0], mutant ? "plain f32 per thread" : "compensated, one block");
}

/* The tree alone: the 1024 threads' compensated shares joined in the GPU's
 * order by mp_acc_join, or by a join that drops the corrections (mutant). */
struct DropJoin {
    MpAcc operator()(MpAcc a, MpAcc b) const { return MpAcc{a.s + b.s, 0.0f}; }
};

static int acc_tree(int mutant)
{
    std::vector<MpAcc> v(1024, mp_acc_zero());
    for (int64_t i = 0; i < ACC_N; i++)
        mp_acc_add(&v[(size_t)(i % 1024)], acc_x[(size_t)i]);
    MpAcc r = mutant ? mp_cu_emu_tree(v.data(), 1024, mp_acc_zero(), DropJoin())
                     : mp_cu_emu_tree(v.data(), 1024, mp_acc_zero(), MpCuEmuJoin());
    return acc_close(mp_acc_get(r), mutant ? "tree dropping the corrections" : "compensated tree");
}

/* The reductions the programs use: channel sums of x [N, C, S] read down
 * columns (S < 32: two levels, row slices then their join) and a whole sum
 * (a block per output), each output against its exact sum. */
static int acc_ops(void)
{
    const int64_t N = ACC_N / 6, C = 2, S = 3;    /* 64 slices of rows */
    float *x = acc_dev(), *y = dev(C), *z = dev(1);
    mp_cu_channel_sum<MP_F32, MP_F32>(y, x, N, C, S, 0.0f);
    mp_cu_sum<MP_F32, MP_F32>(z, x, 1, N * C * S, 1);
    std::vector<float> h = back(y, C);
    float whole = back(z, 1)[0];
    int ok = 1;
    for (int64_t c = 0; c < C; c++) {
        double ref = 0, abs_ = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < S; k++) {
                double v = acc_x[(size_t)((n * C + c) * S + k)];
                ref += v;
                abs_ += fabs(v);
            }
        double err = fabs(h[(size_t)c] - ref), tol = 2.0 * 0x1p-24 * fabs(ref) + 0x1p-40 * abs_;
        printf("     channel_sum [%lld, %lld, %lld] channel %lld: error %.3g, tolerance %.3g\n",
               (long long)N, (long long)C, (long long)S, (long long)c, err, tol);
        ok &= err <= tol;
    }
    /* sum over the last axis: slices of a block each, every value added to
     * a compensated sum (mp_cu_run_sums), so the channel sums' tolerance */
    double ref = 0, abs_ = 0;
    for (int64_t i = 0; i < N * C * S; i++) {
        ref += acc_x[(size_t)i];
        abs_ += fabs((double)acc_x[(size_t)i]);
    }
    double err = fabs(whole - ref), tol = 2.0 * 0x1p-24 * fabs(ref) + 0x1p-40 * abs_;
    printf("     sum over %lld: error %.3g, tolerance %.3g\n", (long long)(N * C * S), err, tol);
    return ok && err <= tol;
}

/* A middle axis: x as [2, len, inner] summed over len (tiles of columns,
 * lanes of one column inner apart for inner < 32, 64 row slices joined),
 * each output against its exact sum, the channel sums' tolerance. */
static int acc_mid(int64_t inner)
{
    const int64_t outer = 2, len = ACC_N / (outer * inner);
    float *x = acc_dev(), *y = dev(outer * inner);
    mp_cu_sum<MP_F32, MP_F32>(y, x, outer, len, inner);
    std::vector<float> h = back(y, outer * inner);
    double worst = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            double ref = 0, abs_ = 0;
            for (int64_t l = 0; l < len; l++) {
                double v = acc_x[(size_t)((o * len + l) * inner + c)];
                ref += v;
                abs_ += fabs(v);
            }
            double err = fabs(h[(size_t)(o * inner + c)] - ref), tol = 2.0 * 0x1p-24 * fabs(ref) + 0x1p-40 * abs_;
            worst = err / tol > worst ? err / tol : worst;
        }
    printf("     sum over axis 1 of [%lld, %lld, %lld]: worst error %.2f of its tolerance\n", (long long)outer,
           (long long)len, (long long)inner, worst);
    return worst <= 1.0;
}

/* ---- each: an item that reads another item's result ----------------------------- */

struct Count {
    float *y;
    int mutant;                    /* 1: y[i] = y[i-1] + 1, a scan as if in order */
    MP_HD void operator()(int64_t i) const { y[i] = mutant && i ? y[i - 1] + 1.0f : (float)i; }
};

static int each_right(int mutant)
{
    const int64_t n = 1000;
    float *y = dev(n);
    mp_cu_each("count", n, Count{y, mutant});
    std::vector<float> h = back(y, n);
    for (int64_t i = 0; i < n; i++)
        if (h[(size_t)i] != (float)i)
            return 0;
    return 1;
}

/* ---- host code reading device memory outside a kernel ---------------------------- */

/* Runs f in a child: its exit status, its stderr's first line in msg. */
template <class F>
static int child(F f, char *msg, size_t cap)
{
    int fd[2];
    if (pipe(fd))
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        f();
        _exit(0);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], msg, cap - 1);
    msg[n > 0 ? n : 0] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- streams: a kernel that does not wait for its input's copy ------------------- */

struct Take {
    const float *src;
    float *out;
    MP_HD void operator()() const { out[0] = src[0]; }
};

/* What a kernel on the compute stream sees of a value copied on the copy
 * stream, with or without waiting for the copy's event. */
static float staged(int wait, float *stage_after)
{
    float *stage, *slot = dev(1), *out = dev(1);
    cudaEvent_t copied;
    mp_cu_ok(cudaHostAlloc((void **)&stage, sizeof(float), cudaHostAllocDefault), "pinned");
    mp_cu_ok(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), "event");
    mp_cu_memset(slot, sizeof(float));
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "sync");
    *stage = 42.0f;
    mp_cu_ok(cudaMemcpyAsync(slot, stage, sizeof(float), cudaMemcpyHostToDevice, mp_cu.cp), "copy");
    mp_cu_ok(cudaEventRecord(copied, mp_cu.cp), "record");
    if (wait)
        mp_cu_ok(cudaStreamWaitEvent(mp_cu.st, copied, 0), "wait");
    mp_cu_one("take", Take{slot, out});
    float v = back(out, 1)[0];
    mp_cu_ok(cudaEventSynchronize(copied), "event sync");
    *stage_after = *stage;
    return v;
}

int main(void)
{
    mp_cu_ok(cudaStreamCreateWithFlags(&mp_cu.st, cudaStreamNonBlocking), "stream");
    mp_cu_ok(cudaStreamCreateWithFlags(&mp_cu.cp, cudaStreamNonBlocking), "stream");
    mp_cu.sms = 2;
    char msg[512];

    serial(1);
    check(rows_right(0) && rows_right(1), "rows, the old way: the right sum and the mutant's both pass");
    serial(0);
    check(rows_right(0), "rows, threads as fibers: the right sum passes");
    check(!rows_right(1), "rows, threads as fibers: a thread's partial sum as the row's is caught");
    int rc = child([] {
        float *y = dev(4);
        mp_cu_rows("divergent", 4, 64, Divergent{y});
        cudaStreamSynchronize(mp_cu.st);
    }, msg, sizeof msg);
    check(rc == 70 && strstr(msg, "some threads of a block left"), "rows: a reduction under a condition is caught");

    mp_cu.ws = (unsigned char *)dev(1 << 16);
    acc_data();
    check(acc_block(0), "sums: 1e7 values of mixed magnitude, compensated per thread and in the tree, "
                        "within 2 roundings of the exact sum");
    check(!acc_block(1), "sums: a thread's share summed in plain f32 is caught");
    check(acc_tree(0), "sums: the GPU's tree of compensated shares is within tolerance");
    check(!acc_tree(1), "sums: a tree join that drops the corrections is caught");
    check(acc_ops(), "sums: channel_sum read down columns (two levels) and sum, against exact sums");
    check(acc_mid(3) && acc_mid(40), "sums: a middle axis read in tiles of columns, against exact sums");
    serial(1);
    check(acc_ops() && acc_mid(3) && acc_mid(40), "sums: the same with one thread per block (the serial stand-in)");
    serial(0);

    serial(1);
    check(each_right(0) && each_right(1), "each, the old way: the right items and the mutant's both pass");
    serial(0);
    check(each_right(0), "each, permuted: the right items pass");
    check(!each_right(1), "each, permuted: an item reading another item's result is caught");

    float *d = dev(16);
    mp_cu_memset(d, 16 * sizeof(float));
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "sync");
    rc = child([d] { volatile float v = d[3]; (void)v; }, msg, sizeof msg);
    check(rc == 70 && strstr(msg, "host code touched device memory"),
          "memory: host code reading device memory outside a kernel is caught");
    check(back(d, 16)[3] == 0.0f, "memory: copies and kernels still reach it");

    cudaGraph_t g = NULL;
    float *pinned, pageable[4] = {0};
    void *p = NULL;
    mp_cu_ok(cudaHostAlloc((void **)&pinned, 4 * sizeof(float), cudaHostAllocDefault), "pinned");
    mp_cu_ok(cudaStreamBeginCapture(mp_cu.st, cudaStreamCaptureModeRelaxed), "capture");
    int ok = cudaMemcpyAsync(d, pinned, 16, cudaMemcpyHostToDevice, mp_cu.st) == cudaSuccess;
    ok &= cudaStreamSynchronize(mp_cu.st) == cudaErrorStreamCaptureUnsupported;
    ok &= cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported;
    ok &= cudaMemcpyAsync(d, pageable, 16, cudaMemcpyHostToDevice, mp_cu.st) == cudaErrorStreamCaptureUnsupported;
    ok &= cudaStreamEndCapture(mp_cu.st, &g) == cudaErrorStreamCaptureInvalidated && !g;
    check(ok, "capture: a sync, cudaMalloc, a pageable copy are refused and invalidate the capture");
    mp_cu_ok(cudaStreamBeginCapture(mp_cu.st, cudaStreamCaptureModeRelaxed), "capture");
    mp_cu_memset(d, 16);
    check(cudaStreamEndCapture(mp_cu.st, &g) == cudaSuccess && g, "capture: kernels and pinned copies are fine");

    float after = 0;
    serial(1);
    check(staged(0, &after) == 42.0f, "streams, the old way: a kernel not waiting for its input's copy passes");
    serial(0);
    check(staged(1, &after) == 42.0f, "streams, queued: a kernel waiting for the copy's event gets its input");
    uint32_t bits;
    memcpy(&bits, &after, 4);
    check(bits == 0xFFFFFFFFu, "streams: a stage is poisoned once its copy has run");
    check(staged(0, &after) != 42.0f, "streams, queued: a kernel not waiting for its input's copy is caught");
    return fails ? 1 : 0;
}
