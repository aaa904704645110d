/* mp_cuda_emu.h - a stand-in for the CUDA runtime, so that a generated
 * train.cu runs on the CPU for mpcc's tests (no GPU in CI):
 *     g++ -std=c++17 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h train.cu
 * The program's functors then run as host loops (runtime/mp_cuda.h) and its
 * products through the C runtime's mp_gemm, reached through the same
 * column-major arguments cuBLAS would get (mp_cu_emu_gemm). Streams and
 * events are in order by construction; a captured graph is the list of the
 * work launched while capturing, replayed by cudaGraphLaunch, so values the
 * capture baked in stay baked in, as on a GPU. Device memory is filled with
 * 0xFF (NaN as f32, f16 and bf16) so that a read before a write shows.
 * MP_EMU_NO_DEVICE=1 makes cudaGetDeviceCount fail as without a driver. */
#ifndef MP_CUDA_EMU_H
#define MP_CUDA_EMU_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __device__
#define __host__

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeRelaxed = 2 };
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
#define cudaHostAllocDefault 0

typedef std::vector<std::function<void()>> MpEmuWork;
typedef struct MpEmuStream { int id; } *cudaStream_t;
typedef int cudaEvent_t;
typedef MpEmuWork *cudaGraph_t;
typedef MpEmuWork *cudaGraphExec_t;
struct cudaDeviceProp { int multiProcessorCount; char name[256]; };

static MpEmuWork *mp_emu_rec;              /* the graph being captured */

static inline void mp_cu_emu_run(std::function<void()> f)
{
    if (mp_emu_rec)
        mp_emu_rec->push_back(f);
    else
        f();
}

static inline const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaErrorInsufficientDriver ? "CUDA driver version is insufficient for CUDA runtime version"
         : e == cudaErrorMemoryAllocation ? "out of memory" : e ? "emulated error" : "no error";
}

static inline cudaError_t cudaGetDeviceCount(int *n)
{
    const char *no = getenv("MP_EMU_NO_DEVICE");
    *n = no && *no == '1' ? 0 : 1;
    return *n ? cudaSuccess : cudaErrorInsufficientDriver;
}

static inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : 101; }
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
    memset(p, 0, sizeof *p);
    p->multiProcessorCount = 3;
    snprintf(p->name, sizeof p->name, "emulated");
    return cudaSuccess;
}
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = (size_t)1 << 34;
    return cudaSuccess;
}

static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned)
{
    *s = new MpEmuStream{1};
    return cudaSuccess;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = 1; return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }

static inline cudaError_t cudaMalloc(void **p, size_t n)
{
    const char *lim = getenv("MP_EMU_MEM_LIMIT");
    if (lim && *lim && n > (size_t)strtoull(lim, NULL, 10))
        return cudaErrorMemoryAllocation;
    *p = malloc(n ? n : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    memset(*p, 0xFF, n);
    return cudaSuccess;
}
static inline cudaError_t cudaHostAlloc(void **p, size_t n, unsigned)
{
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t)
{
    mp_cu_emu_run([=]() { memset(p, v, n); });
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t)
{
    mp_cu_emu_run([=]() { memcpy(d, s, n); });
    return cudaSuccess;
}

template <class T>
static inline cudaError_t cudaGetSymbolAddress(void **p, T &sym)
{
    *p = (void *)&sym;
    return cudaSuccess;
}

static inline cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode)
{
    const char *g = getenv("MP_EMU_NO_GRAPH");
    if (g && *g == '1')
        return 900;
    mp_emu_rec = new MpEmuWork();
    return cudaSuccess;
}
static inline cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g)
{
    *g = mp_emu_rec;
    mp_emu_rec = NULL;
    return cudaSuccess;
}
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long)
{
    *e = new MpEmuWork(*g);
    return cudaSuccess;
}
static inline cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    delete g;
    return cudaSuccess;
}
static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t)
{
    for (auto &f : *e)
        f();
    return cudaSuccess;
}

#endif
