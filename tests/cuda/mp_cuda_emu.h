/* mp_cuda_emu.h - a stand-in for the CUDA runtime, so that a generated
 * train.cu runs on the CPU for mpcc's tests (no GPU in CI):
 *     g++ -std=c++17 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h train.cu
 * The program's functors run on the host (runtime/mp_cuda.h) and its
 * products through the C runtime's mp_gemm, reached through the same
 * column-major arguments cuBLAS would get (mp_cu_emu_gemm).
 *
 * It is built so that the bugs a GPU would show cannot hide in it:
 *   rows    a `mp_cu_rows` block runs its real thread count as fibers
 *           (ucontext), in a shuffled order between barriers; every team
 *           reduction is a barrier all threads must reach, combined in the
 *           GPU's shuffle-tree order (mp_cu_block_reduce), so the sums are
 *           the GPU's and a thread that takes its own share for the whole
 *           row is wrong here as there;
 *   each    `mp_cu_each` items run in a permuted order (a stride coprime
 *           to n), so an item that reads another item's result is wrong;
 *   memory  device memory is PROT_NONE outside kernels and copies: host
 *           code that touches it dies with one line naming the address;
 *   streams every stream is a queue run at the latest point its events
 *           and synchronizations allow (copies on the copy stream included);
 *           a pinned stage is poisoned (0xFF) once its copy has run; a
 *           pageable copy is synchronous, as CUDA makes it;
 *   capture what CUDA refuses while a stream is captured (synchronizing,
 *           cudaMalloc, pageable copies) fails and invalidates the capture;
 *           a captured graph is the list of the work launched, replayed by
 *           cudaGraphLaunch, so values the capture baked in stay baked in.
 * Device memory starts as 0xFF (NaN as f32, f16 and bf16): a read before
 * a write shows. MP_EMU_SERIAL=1 runs the old way (items in order, one
 * thread per row): the mutation tests use it to show what it hides.
 *
 * A program built in two parts (runtime/mp_model.h: -DMP_PART_RUNTIME and
 * -DMP_PART_MODEL, linked) shares one stand-in: its state and functions
 * are inline (one definition in the program), its context switch weak.
 *
 * Faults to inject (tests of the program's fallbacks):
 *   MP_EMU_NO_DEVICE=1      no device (cudaErrorNoDevice)
 *   MP_EMU_FAIL=driver      the driver is older than the runtime
 *   MP_EMU_FAIL=nodriver    no driver at all (as CUDA: "insufficient driver")
 *   MP_EMU_FAIL=capture     the first launch while capturing fails
 *   MP_EMU_FAIL=blas        cuBLAS answers NOT_SUPPORTED to every product
 *   MP_EMU_FAIL=kernel:NAME kernel NAME faults (illegal address, sticky),
 *                           or product NAME (cublasGemmEx, ...); its fault
 *                           shows at the next call that queues work (as on
 *                           a GPU, where it comes while later calls run),
 *                           or at a wait for its stream, if one comes first
 *   MP_EMU_FAIL=kernel:NAME:launch  the same, an unspecified launch failure
 *   MP_EMU_FAIL_AT=N        ... at NAME's N-th run instead of its first (a
 *                           step replayed from a graph, say)
 *   MP_EMU_NO_GRAPH=1       stream capture is refused at its start
 *   MP_EMU_MEM_LIMIT=bytes  a larger cudaMalloc fails */
#ifndef MP_CUDA_EMU_H
#define MP_CUDA_EMU_H

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <vector>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define __device__
#define __host__
#define CUDART_VERSION 13000

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
};
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeRelaxed = 2 };
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
#define cudaHostAllocDefault 0

/* ---- the stand-in's state ------------------------------------------------------ */

typedef std::function<void()> MpEmuFn;
struct MpEmuEvent;
struct MpEmuItem {
    MpEmuFn f;                     /* work, or */
    struct MpEmuStream *on;        /* a wait: until stream `on` has run `seq` items */
    int64_t seq;
    std::string name;              /* the kernel's name (fault injection) */
    cudaError_t fault;             /* queued: the fault it will end with */
};
typedef struct MpEmuStream {
    std::deque<MpEmuItem> q;
    int64_t pushed, done;
} *cudaStream_t;
typedef struct MpEmuEvent {
    MpEmuStream *s;
    int64_t seq;
} *cudaEvent_t;
typedef std::vector<MpEmuItem> MpEmuWork;
typedef MpEmuWork *cudaGraph_t;
typedef MpEmuWork *cudaGraphExec_t;
struct cudaDeviceProp { int multiProcessorCount, major, minor; char name[256]; };

struct MpEmuRange { char *p; size_t n; };
inline struct MpEmuState {
    std::vector<MpEmuRange> dev, pinned;
    MpEmuStream *capturing;        /* the stream being captured, or NULL */
    MpEmuWork *rec;                /* its graph */
    cudaError_t capture_err;       /* set by a refused call: capture invalidated */
    cudaError_t sticky;            /* a kernel fault: every later call fails */
    cudaError_t last;              /* for cudaGetLastError */
    MpEmuStream *fault_on;         /* a queued kernel that will fault: stream, */
    int64_t fault_seq;             /* its place there */
    int open;                      /* device memory readable (in a kernel or copy) */
    uint64_t launches;
} mp_emu;

inline const char *mp_emu_env(const char *k)
{
    const char *v = getenv(k);
    return v && *v ? v : NULL;
}

inline int mp_emu_fail(const char *what)
{
    const char *f = mp_emu_env("MP_EMU_FAIL");
    return f && !strcmp(f, what);
}

/* The fault MP_EMU_FAIL=kernel:NAME[:launch] injects into this run of
 * kernel `name` (its first, or its MP_EMU_FAIL_AT-th). */
inline cudaError_t mp_emu_fault(const std::string &name)
{
    static int64_t runs;
    const char *k = mp_emu_env("MP_EMU_FAIL"), *at = mp_emu_env("MP_EMU_FAIL_AT");
    if (!k || strncmp(k, "kernel:", 7))
        return cudaSuccess;
    std::string want = k + 7;
    cudaError_t e = want == name ? cudaErrorIllegalAddress
                  : want == name + ":launch" ? cudaErrorLaunchFailure : cudaSuccess;
    if (e && ++runs != (at ? strtoll(at, NULL, 10) : 1))
        return cudaSuccess;
    return e;
}

inline int mp_emu_serial(void)
{
    const char *s = mp_emu_env("MP_EMU_SERIAL");
    return s && *s == '1';
}

inline const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return "emulated error";
    }
}

/* ---- device memory: readable only inside kernels and copies --------------------- */

inline int mp_emu_in(const std::vector<MpEmuRange> &v, const void *p, size_t n)
{
    for (const MpEmuRange &r : v)
        if ((const char *)p >= r.p && (const char *)p + n <= r.p + r.n)
            return 1;
    return 0;
}

inline void mp_emu_protect(int open)
{
    if (mp_emu.open == open)
        return;
    mp_emu.open = open;
    for (const MpEmuRange &r : mp_emu.dev)
        mprotect(r.p, r.n, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

inline void mp_emu_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    char msg[200];
    if (mp_emu_in(mp_emu.dev, si->si_addr, 1)) {
        int n = snprintf(msg, sizeof msg, "mp_cuda_emu: host code touched device memory at %p "
                         "outside a kernel or copy\n", si->si_addr);
        if (write(2, msg, (size_t)n) < 0)
            _exit(70);
        _exit(70);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- streams: queues run as late as their events allow ----------------------------- */

inline void mp_emu_flush(MpEmuStream *s, int64_t upto);

inline void mp_emu_exec(MpEmuItem &it)
{
    if (it.on) {
        mp_emu_flush(it.on, it.seq);
        return;
    }
    if (mp_emu.sticky)
        return;                    /* after a fault the GPU does nothing */
    if (it.fault) {
        mp_emu.sticky = it.fault;
        mp_emu.fault_on = NULL;
        return;
    }
    mp_emu_protect(1);
    it.f();
}

/* Runs stream s's work up to its item `upto`; device memory is readable
 * meanwhile, and closed again when the outermost flush ends. */
inline void mp_emu_flush(MpEmuStream *s, int64_t upto)
{
    int was = mp_emu.open;
    while (s->done < upto && !s->q.empty()) {
        MpEmuItem it = s->q.front();
        s->q.pop_front();
        s->done++;
        mp_emu_exec(it);
    }
    mp_emu_protect(was);
}

/* Work queued after a kernel that faults: the fault has come meanwhile
 * (its stream run up to it), so this call returns it, as a GPU's would. */
inline void mp_emu_push(MpEmuStream *s, MpEmuItem it)
{
    if (mp_emu.fault_on) {
        MpEmuStream *f = mp_emu.fault_on;
        mp_emu.fault_on = NULL;
        mp_emu_flush(f, mp_emu.fault_seq);
    }
    it.fault = it.on ? cudaSuccess : mp_emu_fault(it.name);
    s->q.push_back(it);
    s->pushed++;
    if (it.fault) {
        mp_emu.fault_on = s;
        mp_emu.fault_seq = s->pushed;
    }
    if (mp_emu_serial())           /* the old way: streams run at once */
        mp_emu_flush(s, s->pushed);
}

/* Work for stream s: recorded into the graph while s is captured. */
inline void mp_cu_emu_run(cudaStream_t s, const char *name, MpEmuFn f)
{
    MpEmuItem it = {f, NULL, 0, name ? name : "", cudaSuccess};
    mp_emu.launches++;
    if (s == mp_emu.capturing) {
        if (mp_emu_fail("capture") && !mp_emu.capture_err) {
            mp_emu.capture_err = mp_emu.last = cudaErrorStreamCaptureUnsupported;
            return;
        }
        mp_emu.rec->push_back(it);
    } else {
        mp_emu_push(s, it);
    }
}

/* A call CUDA refuses while capturing: the capture is invalidated. */
inline cudaError_t mp_emu_refuse(void)
{
    if (!mp_emu.capturing)
        return cudaSuccess;
    mp_emu.capture_err = cudaErrorStreamCaptureUnsupported;
    return cudaErrorStreamCaptureUnsupported;
}

/* ---- the device ---------------------------------------------------------------------- */

inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 0;
    if (mp_emu_fail("driver") || mp_emu_fail("nodriver"))
        return cudaErrorInsufficientDriver;
    if (mp_emu_env("MP_EMU_NO_DEVICE") && *mp_emu_env("MP_EMU_NO_DEVICE") == '1')
        return cudaErrorNoDevice;
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int *v)
{
    *v = mp_emu_fail("driver") ? 12020 : mp_emu_fail("nodriver") ? 0 : 13000;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
    memset(p, 0, sizeof *p);
    p->multiProcessorCount = 3;
    /* an H100's, 9.0 (mixed_float8 takes cuBLASLt's FP8 products), or
     * MP_EMU_CC's (80: an A100's, which has no FP8 Tensor Cores) */
    const char *cc = mp_emu_env("MP_EMU_CC");
    int c = cc && *cc ? atoi(cc) : 90;
    p->major = c / 10;
    p->minor = c % 10;
    snprintf(p->name, sizeof p->name, "emulated");
    return cudaSuccess;
}
inline cudaError_t cudaGetLastError(void)
{
    cudaError_t e = mp_emu.sticky ? mp_emu.sticky : mp_emu.last;
    mp_emu.last = cudaSuccess;
    return e;
}
inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = (size_t)1 << 34;
    return cudaSuccess;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    *s = new MpEmuStream();
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (mp_emu_refuse())
        return cudaErrorStreamCaptureUnsupported;
    mp_emu_flush(s, s->pushed);
    return mp_emu.sticky;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned)
{
    *e = new MpEmuEvent();
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (s == mp_emu.capturing)     /* the program records no event while capturing */
        return mp_emu.capture_err = cudaErrorStreamCaptureUnsupported;
    e->s = s;
    e->seq = s->pushed;
    return mp_emu.sticky;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (mp_emu_refuse())
        return cudaErrorStreamCaptureUnsupported;
    if (e->s)
        mp_emu_flush(e->s, e->seq);
    return mp_emu.sticky;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned)
{
    if (s == mp_emu.capturing)
        return mp_emu.capture_err = cudaErrorStreamCaptureUnsupported;
    if (e->s)
        mp_emu_push(s, MpEmuItem{MpEmuFn(), e->s, e->seq, "", cudaSuccess});
    return mp_emu.sticky;
}

inline cudaError_t cudaMalloc(void **p, size_t n)
{
    if (mp_emu_refuse())
        return cudaErrorStreamCaptureUnsupported;
    const char *lim = mp_emu_env("MP_EMU_MEM_LIMIT");
    if (lim && n > (size_t)strtoull(lim, NULL, 10))
        return cudaErrorMemoryAllocation;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (n + page - 1) / page * page;
    void *m = mmap(NULL, len ? len : page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return cudaErrorMemoryAllocation;
    /* huge pages where the kernel gives them: each kernel's launch opens
     * and closes every allocation (mp_emu_protect), and mprotect's cost is
     * per page table entry (cuBLAS's 32 MiB workspace: 8192 small pages);
     * the protection itself is the same */
    madvise(m, len ? len : page, MADV_HUGEPAGE);
    memset(m, 0xFF, n);
    if (mp_emu.dev.empty()) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = mp_emu_segv;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, NULL);
    }
    mp_emu.dev.push_back(MpEmuRange{(char *)m, len ? len : page});
    if (!mp_emu.open)
        mprotect(m, len ? len : page, PROT_NONE);
    *p = m;
    return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned)
{
    if (mp_emu_refuse())
        return cudaErrorStreamCaptureUnsupported;
    *p = malloc(n ? n : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    mp_emu.pinned.push_back(MpEmuRange{(char *)*p, n});
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    mp_cu_emu_run(s, "memset", [=]() { memset(p, v, n); });
    return mp_emu.sticky;
}

/* Pinned memory: a queued copy, the host side poisoned once an upload has
 * run (the host must not count on a stage keeping what it wrote). Pageable:
 * the source taken now (upload) or the copy waited for (download), as CUDA
 * does; refused while capturing. */
inline cudaError_t cudaMemcpyAsync(void *d, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s)
{
    const void *host = k == cudaMemcpyHostToDevice ? src : d;
    const void *dev = k == cudaMemcpyHostToDevice ? d : src;
    if (!mp_emu_in(mp_emu.dev, dev, n) || mp_emu_in(mp_emu.dev, host, 1)) {
        fprintf(stderr, "mp_cuda_emu: cudaMemcpyAsync of %zu bytes: the device side %p is not "
                "device memory, or the host side %p is\n", n, dev, host);
        _exit(70);
    }
    if (mp_emu_in(mp_emu.pinned, host, n)) {
        if (k == cudaMemcpyHostToDevice)
            mp_cu_emu_run(s, "copy", [=]() { memcpy(d, src, n); memset((void *)src, 0xFF, n); });
        else
            mp_cu_emu_run(s, "copy", [=]() { memcpy(d, src, n); });
        return mp_emu.sticky;
    }
    if (mp_emu_refuse())
        return cudaErrorStreamCaptureUnsupported;
    if (k == cudaMemcpyHostToDevice) {
        std::vector<char> copy((const char *)src, (const char *)src + n);
        mp_cu_emu_run(s, "copy", [=]() { memcpy(d, copy.data(), n); });
    } else {
        mp_cu_emu_run(s, "copy", [=]() { memcpy(d, src, n); });
        mp_emu_flush(s, s->pushed);
    }
    return mp_emu.sticky;
}

template <class T>
inline cudaError_t cudaGetSymbolAddress(void **p, T &sym)
{
    *p = (void *)&sym;
    return cudaSuccess;
}

/* ---- graphs -------------------------------------------------------------------------- */

inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode)
{
    const char *g = mp_emu_env("MP_EMU_NO_GRAPH");
    if (g && *g == '1')
        return cudaErrorStreamCaptureUnsupported;
    mp_emu.capturing = s;
    mp_emu.rec = new MpEmuWork();
    mp_emu.capture_err = cudaSuccess;
    return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g)
{
    *g = mp_emu.rec;
    mp_emu.rec = NULL;
    mp_emu.capturing = NULL;
    if (mp_emu.capture_err) {
        delete *g;
        *g = NULL;
        return cudaErrorStreamCaptureInvalidated;
    }
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long)
{
    *e = new MpEmuWork(*g);
    return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
    for (const MpEmuItem &it : *e)
        mp_emu_push(s, it);
    return mp_emu.sticky;
}

/* ---- a block's threads as fibers ------------------------------------------------------ */

/* One block: its threads, the values they bring to the reduction they all
 * wait at, and the combination (the GPU's tree) the last one triggers. */
struct MpEmuBlock {
    int nt, kind;
    std::vector<float> f;
    std::vector<int64_t> a;
    std::vector<float> as, ac;     /* a compensated sum (MpAcc's s, c) per thread */
    int width;                     /* team.sum_cols: lanes per group; sum_lanes,
                                      max_lanes: the period */
    void (*combine)(MpEmuBlock *);
    float rf, rs[32], rc[32];      /* MpAcc results: [0] a sum's, [lane] sum_cols' */
    float rm[32];                  /* max_lanes' result per lane */
    int64_t ra;
    std::vector<float> shm;        /* the block's shared memory (MP_CU_SHARED_F32) */
    std::vector<uint32_t> mab;     /* mma: each thread's A (4) and B (2) registers, */
    std::vector<float> mcd;        /* its C (4) in, D (4) out; quad: value, result */
    int mbf;                       /* mma: bf16 operands (else f16) */
};

/* warp-wide mma.sync's run so far (the FLOP test of emu_attention.cu) */
inline int64_t mp_emu_mmas;

/* ---- mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 --------------------
 * The PTX ISA's fragments (Matrix Fragments for mma.m16n8k16 with floating
 * point type), written here from its tables and from nowhere else, so that
 * a kernel that puts an element in another lane's register is wrong here
 * as on a GPU. groupID = lane >> 2, threadID_in_group (tg) = lane % 4:
 *   A 16x16 row-major, a0..a7 (.f16x2 registers a0a1, a2a3, a4a5, a6a7;
 *     the lower index in the lower half): row groupID for a0, a1, a4, a5,
 *     groupID + 8 otherwise; col tg * 2 + (i & 1), + 8 for i >= 4;
 *   B 16x8 ("col"), b0..b3 (registers b0b1, b2b3): row (k) tg * 2 + (i & 1),
 *     + 8 for i >= 2; col groupID;
 *   C, D 16x8 f32, c0..c3: row groupID for c0, c1, groupID + 8 for c2, c3;
 *     col tg * 2 + (i & 1).
 * D = A B + C with f32 products and sums (an f16 or bf16 product is exact in
 * f32), the 16 products of an element added in k order. */
inline float mp_emu_half(uint32_t h, int bf)
{
    h &= 0xFFFFu;
    if (bf) {
        uint32_t u = h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (int)(h >> 10 & 31), m = (int)(h & 1023);
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                     : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000u ? -v : v;
}

inline void mp_emu_mma_combine(MpEmuBlock *b)
{
    for (int w = 0; w < b->nt / 32; w++) {
        float A[16][16], B[16][8];
        const uint32_t *r = b->mab.data() + (size_t)w * 32 * 6;
        for (int lane = 0; lane < 32; lane++) {
            int g = lane >> 2, tg = lane & 3;
            for (int i = 0; i < 8; i++) {
                float x = mp_emu_half(r[lane * 6 + i / 2] >> (i & 1) * 16, b->mbf);
                A[g + ((i < 2 || (i >= 4 && i < 6)) ? 0 : 8)][tg * 2 + (i & 1) + (i >= 4 ? 8 : 0)] = x;
            }
            for (int i = 0; i < 4; i++)
                B[tg * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g] =
                    mp_emu_half(r[lane * 6 + 4 + i / 2] >> (i & 1) * 16, b->mbf);
        }
        for (int lane = 0; lane < 32; lane++) {
            int g = lane >> 2, tg = lane & 3;
            float *cd = b->mcd.data() + (size_t)(w * 32 + lane) * 4;
            for (int i = 0; i < 4; i++) {
                int row = g + (i >= 2 ? 8 : 0), col = tg * 2 + (i & 1);
                float s = cd[i];
                for (int k = 0; k < 16; k++)
                    s += A[row][k] * B[k][col];
                cd[i] = s;
            }
        }
    }
    mp_emu_mmas += b->nt / 32;
}

/* __shfl_xor_sync over a quad (lanes 4q..4q+3): lane l's result is
 * op(op(v[l], v[l ^ 1]), op(v[l ^ 2], v[l ^ 3])), the butterfly's order
 * (width: 0 max, 1 sum). */
inline void mp_emu_quad_combine(MpEmuBlock *b)
{
    std::vector<float> v(b->nt);
    for (int i = 0; i < b->nt; i++)
        v[(size_t)i] = b->mcd[(size_t)i * 4];
    for (int i = 0; i < b->nt; i++) {
        float x = v[(size_t)i], y = v[(size_t)(i ^ 1)], z = v[(size_t)(i ^ 2)], u = v[(size_t)(i ^ 3)];
        float p = b->width ? x + y : (y > x ? y : x), q = b->width ? z + u : (u > z ? u : z);
        b->mcd[(size_t)i * 4] = b->width ? p + q : (q > p ? q : p);
    }
}

/* ldmatrix.sync.aligned.m8n8.x4.shared.b16 (width 1: .trans), from the
 * PTX ISA's description and from nowhere else: lanes 8 q..8 q + 7 of a warp
 * pass the addresses (a) of matrix q's rows 0..7, each 8 halves; lane l
 * gets in register q (mab's first 4) row l / 4, columns 2 (l % 4) and + 1
 * of matrix q, the lower column in the lower half (.trans: rows 2 (l % 4)
 * and + 1 of column l / 4). */
inline void mp_emu_ldsm_combine(MpEmuBlock *b)
{
    for (int w = 0; w < b->nt / 32; w++)
        for (int lane = 0; lane < 32; lane++) {
            int g = lane >> 2, tg = lane & 3;
            for (int q = 0; q < 4; q++) {
                const uint16_t *rows[8];
                for (int r = 0; r < 8; r++) {
                    rows[r] = (const uint16_t *)(intptr_t)b->a[(size_t)(w * 32 + 8 * q + r)];
                    if ((intptr_t)rows[r] & 15) {   /* the GPU's fault: a misaligned address */
                        fprintf(stderr, "mp_cuda_emu: ldmatrix: lane %d's row address is not 16-byte aligned\n",
                                8 * q + r);
                        _exit(70);
                    }
                }
                uint32_t lo = b->width ? rows[2 * tg][g] : rows[g][2 * tg];
                uint32_t hi = b->width ? rows[2 * tg + 1][g] : rows[g][2 * tg + 1];
                b->mab[(size_t)(w * 32 + lane) * 6 + q] = lo | hi << 16;
            }
        }
}

/* Fibers: on x86-64 a switch of six registers and the FP control words
 * (no system call: blocks of 256 threads switch often); elsewhere ucontext. */
struct MpEmuFiber {
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t ctx;
#endif
    int tid, state;                /* 0 runnable, 1 at a barrier, 2 done */
    int kind;
};

inline struct MpEmuFibers {
#if defined(__x86_64__)
    void *sched;
#else
    ucontext_t sched;
#endif
    std::vector<MpEmuFiber> fib;
    std::vector<char *> stacks;
    MpEmuFiber *cur;
    const std::function<void(int, MpEmuBlock *)> *body;
    MpEmuBlock *blk;
} mp_emu_f;

#define MP_EMU_STACK (64 << 10)

#if defined(__x86_64__)
/* mp_emu_switch(&save, to): saves this context's stack pointer in save
 * and continues the one whose stack pointer is `to`. */
extern "C" void mp_emu_switch(void **save, void *to);
__asm__(".text\n"
        ".weak mp_emu_switch\n"
        ".type mp_emu_switch,@function\n"
        "mp_emu_switch:\n"
        "    pushq %rbp\n    pushq %rbx\n    pushq %r12\n    pushq %r13\n    pushq %r14\n    pushq %r15\n"
        "    subq $8, %rsp\n    stmxcsr (%rsp)\n    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n    fldcw 4(%rsp)\n    addq $8, %rsp\n"
        "    popq %r15\n    popq %r14\n    popq %r13\n    popq %r12\n    popq %rbx\n    popq %rbp\n"
        "    ret\n"
        ".size mp_emu_switch, .-mp_emu_switch\n");
#endif

inline void mp_emu_fiber_main(void)
{
    MpEmuFiber *me = mp_emu_f.cur;
    (*mp_emu_f.body)(me->tid, mp_emu_f.blk);
    me->state = 2;
#if defined(__x86_64__)
    mp_emu_switch(&me->sp, mp_emu_f.sched);   /* never comes back */
    abort();
#endif                             /* ucontext: uc_link, back to the scheduler */
}

inline void mp_emu_fiber_init(MpEmuFiber *fb, char *stack)
{
#if defined(__x86_64__)
    uint64_t *top = (uint64_t *)((uintptr_t)(stack + MP_EMU_STACK) & ~(uintptr_t)15);
    uint64_t *sp = top - 2;        /* [top-2]: where mp_emu_switch returns to */
    sp[1] = 0;
    sp[0] = (uint64_t)(uintptr_t)mp_emu_fiber_main;
    sp -= 6;                       /* rbp rbx r12..r15 */
    memset(sp, 0, 6 * sizeof *sp);
    sp -= 1;                       /* mxcsr, x87 control word: the caller's */
    uint32_t csr;
    uint16_t cw;
    __asm__ volatile("stmxcsr %0" : "=m"(csr));
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    memcpy((char *)sp, &csr, 4);
    memcpy((char *)sp + 4, &cw, 2);
    fb->sp = sp;
#else
    getcontext(&fb->ctx);
    fb->ctx.uc_stack.ss_sp = stack;
    fb->ctx.uc_stack.ss_size = MP_EMU_STACK;
    fb->ctx.uc_link = &mp_emu_f.sched;
    makecontext(&fb->ctx, mp_emu_fiber_main, 0);
#endif
}

inline void mp_emu_to_fiber(MpEmuFiber *fb)
{
    mp_emu_f.cur = fb;
#if defined(__x86_64__)
    mp_emu_switch(&mp_emu_f.sched, fb->sp);
#else
    swapcontext(&mp_emu_f.sched, &fb->ctx);
#endif
}

/* Called by a thread at a team reduction: wait for the whole block. */
inline void mp_emu_barrier(MpEmuBlock *b, int kind, void (*combine)(MpEmuBlock *))
{
    MpEmuFiber *me = mp_emu_f.cur;
    me->state = 1;
    me->kind = kind;
    b->combine = combine;
#if defined(__x86_64__)
    mp_emu_switch(&me->sp, mp_emu_f.sched);
#else
    swapcontext(&me->ctx, &mp_emu_f.sched);
#endif
}

inline void mp_emu_die(const char *name, const char *why)
{
    fprintf(stderr, "mp_cuda_emu: kernel '%s': %s\n", name, why);
    _exit(70);
}

/* n floats of the block's shared memory, the same for its every thread,
 * NaN until written (a read before the barrier that follows the writes
 * shows); MP_EMU_SERIAL=1 (b NULL, one thread): one buffer. */
inline float *mp_emu_shared(MpEmuBlock *b, size_t n)
{
    static std::vector<float> one;
    std::vector<float> &v = b ? b->shm : one;
    if (v.size() < n)
        v.assign(n, std::numeric_limits<float>::quiet_NaN());
    return v.data();
}

/* Runs body(tid, block) for every thread of one block of nt threads. */
inline void mp_emu_block(const char *name, int nt, const std::function<void(int, MpEmuBlock *)> &body)
{
    static uint64_t turn;
    MpEmuBlock b;
    b.nt = nt;
    b.f.assign((size_t)nt, 0.0f);
    b.a.assign((size_t)nt, 0);
    b.as.assign((size_t)nt, 0.0f);
    b.ac.assign((size_t)nt, 0.0f);
    b.width = 1;
    b.mab.assign((size_t)nt * 6, 0);
    b.mcd.assign((size_t)nt * 4, 0.0f);
    b.mbf = 0;
    while (mp_emu_f.stacks.size() < (size_t)nt)
        mp_emu_f.stacks.push_back((char *)malloc(MP_EMU_STACK));
    mp_emu_f.fib.resize((size_t)nt);
    mp_emu_f.body = &body;
    mp_emu_f.blk = &b;
    for (int i = 0; i < nt; i++) {
        MpEmuFiber &fb = mp_emu_f.fib[(size_t)i];
        fb.tid = i;
        fb.state = 0;
        mp_emu_fiber_init(&fb, mp_emu_f.stacks[(size_t)i]);
    }
    for (;;) {
        /* one round: every runnable thread up to its next barrier, in an
         * order that changes from round to round */
        int stride = nt > 2 ? 7 : 1, start = (int)(turn++ % (uint64_t)nt);
        while (nt > 2 && nt % stride == 0)
            stride += 2;
        for (int k = 0, i = start; k < nt; k++, i = (i + stride) % nt) {
            MpEmuFiber &fb = mp_emu_f.fib[(size_t)i];
            if (fb.state != 0)
                continue;
            mp_emu_to_fiber(&fb);
        }
        int waiting = 0, done = 0, kind = -1;
        for (const MpEmuFiber &fb : mp_emu_f.fib) {
            waiting += fb.state == 1;
            done += fb.state == 2;
            if (fb.state == 1 && kind >= 0 && fb.kind != kind)
                mp_emu_die(name, "the threads of a block wait at different reductions");
            if (fb.state == 1)
                kind = fb.kind;
        }
        if (done == nt)
            return;
        if (done)
            mp_emu_die(name, "some threads of a block left while others wait at a reduction "
                       "(a reduction under a condition: a deadlock on a GPU)");
        b.combine(&b);
        for (MpEmuFiber &fb : mp_emu_f.fib)
            fb.state = 0;
    }
}

/* Blocks of a `rows` kernel (nb of them, nt threads each), in a permuted
 * order; MP_EMU_SERIAL=1: one thread per block, reductions the identity. */
inline void mp_emu_rows(const char *name, int nb, int nt,
                               const std::function<void(int, int, int, MpEmuBlock *)> &body)
{
    if (mp_emu_serial()) {
        for (int b = 0; b < nb; b++)
            body(b, 0, 1, NULL);
        return;
    }
    if (nt < 32 || nt > 1024 || nt % 32)
        mp_emu_die(name, "a block's threads must be a multiple of 32, up to 1024");
    int step = nb > 2 ? 5 : 1;
    while (nb > 2 && nb % step == 0)
        step += 2;
    for (int k = 0, b = nb - 1; k < nb; k++, b = (b + step) % nb)
        mp_emu_block(name, nt, [&](int tid, MpEmuBlock *blk) { body(b, tid, nt, blk); });
}

/* The order of n items of an `each` kernel: i = (start + k * stride) mod n,
 * stride coprime to n and changing from launch to launch. */
inline void mp_emu_order(int64_t n, int64_t *start, int64_t *stride)
{
    static const int64_t primes[] = {7919, 104729, 1299709, 15485863, 179424673};
    static uint64_t turn;
    *start = 0;
    *stride = 1;
    if (mp_emu_serial() || n < 2)
        return;
    *start = (int64_t)(turn * 2654435761u % (uint64_t)n);
    *stride = n - 1;               /* coprime to n: backwards */
    for (int k = 0; k < 5; k++) {
        int64_t p = primes[(turn + (uint64_t)k) % 5] % n, a = p, b = n;
        while (b) {
            int64_t t = a % b;
            a = b;
            b = t;
        }
        if (p > 1 && a == 1) {
            *stride = p;
            break;
        }
    }
    turn++;
}

/* ---- a stand-in NCCL (runtime/mp_nccl.h), for the data-parallel program ------------- */
#ifdef MP_USE_MPI
#include <mpi.h>

/* Its communicator is MPI's, duplicated (as NCCL's is its own): the
 * host's MPI calls and the streams' reductions never match each other.
 * ncclAllReduce is work on the stream (recorded while it is captured), so
 * the sum happens when the stand-in runs the stream, as on a GPU. */
struct MpEmuNcclComm { MPI_Comm c; };

template <class Id> inline int mp_emu_nccl_get_unique_id(Id *id)
{
    memset(id, 0, sizeof *id);
    snprintf((char *)id, sizeof *id, "mp_cuda_emu nccl");
    return 0;
}

template <class Id> inline int mp_emu_nccl_comm_init_rank(void **comm, int n, Id id, int rank)
{
    int size = 0, me = -1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (strcmp((const char *)&id, "mp_cuda_emu nccl") || n != size || rank != me)
        return 4;                  /* ncclInvalidArgument */
    MpEmuNcclComm *c = new MpEmuNcclComm;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->c);
    *comm = c;
    return 0;
}

inline int mp_emu_nccl_all_reduce(const void *send, void *recv, size_t n, int type, int op,
                                         void *comm, void *stream)
{
    if ((type != 7 && type != 8) || (op != 0 && op != 2) || !comm || n > (size_t)INT32_MAX)
        return 4;                  /* ncclFloat32, ncclFloat64; ncclSum, ncclMax */
    MPI_Comm c = ((MpEmuNcclComm *)comm)->c;
    mp_cu_emu_run((cudaStream_t)stream, "ncclAllReduce", [=]() {
        MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)n,
                      type == 7 ? MPI_FLOAT : MPI_DOUBLE, op ? MPI_MAX : MPI_SUM, c);
    });
    return 0;
}

inline int mp_emu_nccl_comm_destroy(void *comm)
{
    MPI_Comm_free(&((MpEmuNcclComm *)comm)->c);
    delete (MpEmuNcclComm *)comm;
    return 0;
}

inline const char *mp_emu_nccl_error_string(int rc)
{
    return rc == 0 ? "no error" : rc == 4 ? "invalid argument" : "unhandled error";
}
#endif

#endif
