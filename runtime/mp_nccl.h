/* mp_nccl.h - NCCL reached without link flags, as cuBLAS (mp_cublas.h):
 * the data-parallel CUDA program (built with -DMP_USE_MPI, started by
 * mpirun with more than one rank) loads libnccl with dlopen when it starts
 * and resolves the five functions it calls with dlsym; plain `nvcc train.cu`
 * and a one-rank run never touch it.
 *
 * Use (mp_cuda_step.h): rank 0 makes the NCCL id, MPI broadcasts it
 * (mp_dist.h), every rank joins the communicator on the GPU of its local
 * index; each training step sums the flat gradient buffer and the step's
 * loss over the ranks with ncclAllReduce on the compute stream, inside the
 * captured step.
 *
 * The types and enum values are NCCL's documented ABI (nccl.h of NCCL 2):
 * ncclUniqueId is 128 bytes, ncclFloat32 = 7, ncclFloat64 = 8, ncclSum = 0.
 * A missing library or symbol is one clear line and exit status 1.
 * Under the CPU stand-in (MP_CU_EMU, tests/cuda/mp_cuda_emu.h) the
 * functions are the stand-in's, which reduce through MPI when its stream
 * runs the work. */
#ifndef MP_NCCL_H
#define MP_NCCL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MP_NCCL_SUCCESS = 0, MP_NCCL_FLOAT32 = 7, MP_NCCL_FLOAT64 = 8, MP_NCCL_SUM = 0, MP_NCCL_MAX = 2 };

typedef struct MpNcclId { char internal[128]; } MpNcclId;   /* ncclUniqueId */
typedef void *MpNcclComm;                                    /* ncclComm_t */

typedef int (*MpNcclGetUniqueIdFn)(MpNcclId *);
typedef int (*MpNcclCommInitRankFn)(MpNcclComm *, int, MpNcclId, int);
typedef int (*MpNcclAllReduceFn)(const void *, void *, size_t, int, int, MpNcclComm, void *);
typedef int (*MpNcclCommDestroyFn)(MpNcclComm);
typedef const char *(*MpNcclErrorStringFn)(int);

typedef struct MpNccl {
    void *lib;
    MpNcclGetUniqueIdFn get_unique_id;
    MpNcclCommInitRankFn comm_init_rank;
    MpNcclAllReduceFn all_reduce;
    MpNcclCommDestroyFn comm_destroy;
    MpNcclErrorStringFn error_string;
} MpNccl;

/* Loads NCCL into *n: $MP_NCCL (a file), else libnccl.so.2 / libnccl.so on
 * the loader's path. 0, or -1 with one line in msg (no newline). */
static inline int mp_nccl_load(MpNccl *n, char *msg, size_t cap)
{
    memset(n, 0, sizeof *n);
#if defined(MP_CU_EMU) && defined(MP_USE_MPI)
    (void)msg;
    (void)cap;
    n->get_unique_id = mp_emu_nccl_get_unique_id;
    n->comm_init_rank = mp_emu_nccl_comm_init_rank;
    n->all_reduce = mp_emu_nccl_all_reduce;
    n->comm_destroy = mp_emu_nccl_comm_destroy;
    n->error_string = mp_emu_nccl_error_string;
    return 0;
#else
    const char *env = getenv("MP_NCCL");
    const char *names[] = {env && *env ? env : "libnccl.so.2", "libnccl.so"};
    for (int i = 0; !n->lib && i < (env && *env ? 1 : 2); i++)
        n->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *why = dlerror();
        snprintf(msg, cap, "cannot load NCCL (%s: %s), which a run on several GPUs needs: install "
                 "NCCL 2 (libnccl2), add its folder to LD_LIBRARY_PATH, or set "
                 "MP_NCCL=/path/to/libnccl.so.2", names[0], why ? why : "not found");
        return -1;
    }
    const MpDlSym syms[] = {
        {(void **)&n->get_unique_id, "ncclGetUniqueId"},
        {(void **)&n->comm_init_rank, "ncclCommInitRank"},
        {(void **)&n->all_reduce, "ncclAllReduce"},
        {(void **)&n->comm_destroy, "ncclCommDestroy"},
        {(void **)&n->error_string, "ncclGetErrorString"},
    };
    return mp_dl_syms(n->lib, syms, sizeof syms / sizeof syms[0], "NCCL", "NCCL 2 is needed",
                      msg, cap);
#endif
}

#endif
