/* mp_model.h - the contract between a generated trainer and the runtime.
 *
 * A generated train.c is: the runtime (runtime/mp_*.h, amalgamated in the
 * order of runtime/AMALGAMATION), then the model's code, which defines one
 * MpModel and ends with
 *     int main(int argc, char **argv) { return mp_main(argc, argv, &model); }
 *
 * The model's code owns the arithmetic of one micro-batch: forward, backward
 * (adding scaled f32 gradients into the flat gradient buffer), the lowp
 * working copies of the parameters and the batch-norm running statistics.
 * The runtime owns everything else: the command line, data files, batching
 * and shuffling, parameter initialisation, loss scaling decisions, the
 * unscale + finite check, clipping, the optimizer, LR schedules,
 * checkpoints, evaluation, logging, the progress line and exit codes.
 *
 * Memory: the runtime allocates all parameters as one flat f32 buffer and
 * all gradients as another (same order, same offsets), and the optimizer
 * state likewise; MpParam.value / .grad point into them. */
#ifndef MP_MODEL_H
#define MP_MODEL_H

/* The runtime uses POSIX (fsync, mkstemp): ask for it before the first
 * system header, which is this one's, so `cc -std=c11 train.c` works. */
#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(__cplusplus)
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdint.h>

#define MP_MAX_RANK 8

/* `restrict` for C and C++ (nvcc) alike: lets hot loops vectorise. */
#if defined(__cplusplus)
#define MP_RESTRICT __restrict__
#else
#define MP_RESTRICT restrict
#endif

/* a static definition a program may leave unused (no -Wunused warning) */
#ifndef MP_UNUSED
#if defined(__GNUC__) || defined(__clang__)
#define MP_UNUSED __attribute__((unused))
#else
#define MP_UNUSED
#endif
#endif

/* A generated program (C or CUDA) compiles whole (the default, what its
 * header says) or as two parts linked together: -DMP_PART_RUNTIME compiles
 * the runtime's entry mp_main (mp_cu_main) and all it calls, a text that is
 * the same for every model; -DMP_PART_MODEL compiles the model's code and
 * the kernels it calls, and main. The tests' compile cache (tests/cc_cache.sh) builds
 * the runtime part once per compiler and options. MP_STATE marks the few
 * runtime variables both parts use: defined in the runtime part only. */
#if defined(MP_PART_RUNTIME) && defined(MP_PART_MODEL)
#error "define MP_PART_RUNTIME or MP_PART_MODEL, not both"
#elif defined(MP_PART_MODEL)
#define MP_STATE extern
#elif defined(MP_PART_RUNTIME)
#define MP_STATE
#else
#define MP_STATE static MP_UNUSED
#endif
/* MP_PART_FN marks a runtime function the model's code calls that is
 * compiled in the runtime part (the model part sees its declaration). */
#ifdef MP_PART_RUNTIME
#define MP_PART_FN
#else
#define MP_PART_FN static inline
#endif

/* sqrtf may set errno, which keeps GCC from vectorising a loop that calls
 * it; the trainer never reads errno after math, so hot loops opt out. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define MP_NO_ERRNO __attribute__((optimize("no-math-errno")))
#else
#define MP_NO_ERRNO
#endif

/* Element types: values equal mpcc's DType. */
enum { MP_F32 = 1, MP_F16 = 2, MP_BF16 = 3, MP_I32 = 4, MP_U8 = 5, MP_U16 = 6 };
/* Only in files (safetensors): --init's F64, --export's num_batches_tracked. */
enum { MP_F64 = 7, MP_I64 = 8 };
/* A rounding only, never a storage type: a product's f32 operands rounded
 * to TF32 (float32_matmul = "tf32"; mp_round_tf32, MpGemm.around). */
enum { MP_TF32 = 16 };

/* Parameter initialisers: values equal mpcc's InitKind. */
enum { MP_INIT_ZEROS, MP_INIT_ONES, MP_INIT_CONSTANT, MP_INIT_NORMAL,
       MP_INIT_UNIFORM, MP_INIT_GLOROT_UNIFORM, MP_INIT_HE_NORMAL,
       MP_INIT_HE_UNIFORM, MP_INIT_GLOROT_NORMAL, MP_INIT_TRUNC_NORMAL, MP_INIT_TORCH_UNIFORM };

enum { MP_OPT_SGD, MP_OPT_ADAM, MP_OPT_ADAMW, MP_OPT_RMSPROP };
enum { MP_LS_NONE, MP_LS_STATIC, MP_LS_DYNAMIC };
enum { MP_SCHED_CONSTANT, MP_SCHED_COSINE, MP_SCHED_LINEAR };
enum { MP_WARMUP_TORCH, MP_WARMUP_NANOGPT };   /* values equal mpcc's WarmupStyle */

typedef struct MpInput {
    const char *name;
    int dtype;                  /* MP_F32 ... */
    int rank;
    int64_t shape[MP_MAX_RANK]; /* shape[0] is the batch */
    int64_t classes;            /* > 0: class labels, checked in [0, classes) */
    void *batch;                /* one batch, filled by the runtime each step */
    void *eval_batch;           /* unused by the model; runtime scratch */
    int window;                 /* 1: a window input (LANGUAGE.md `window`): its
                                   data is one 1-D stream, each batch row W
                                   consecutive values of it (shape[1] = W) */
    int has_ignore;             /* 1: labels equal to `ignore` (cross_entropy's */
    int64_t ignore;             /* ignore_index) pass the classes check */
} MpInput;

typedef struct MpParam {
    const char *name;           /* checkpoint tensor name */
    int rank;
    int64_t shape[MP_MAX_RANK];
    int64_t numel;
    int init;                   /* MP_INIT_* */
    double a, b;                /* init arguments (see mpcc's InitKind) */
    int64_t fan_in, fan_out;
    int trainable;              /* 0: batch-norm running statistics, buffers */
    float *value;               /* f32 master weights (runtime allocates) */
    float *grad;                /* f32 gradient, NULL when not trainable */
    int no_decay;               /* 1: weight decay 0 for this parameter (the
                                   optimizer's no_decay; a torch parameter group) */
    /* Its lowp working copy, as the model's setup() registers it (the C
     * target): work_dt MP_F16 / MP_BF16, the copy at `work`, which the
     * trainer's optimizer pass rewrites as it updates the value; MP_F32: no
     * copy; MP_WORK_OTHER: several, only cast_params() writes them; 0 (not
     * registered, e.g. the CUDA program): unknown, cast_params() does. */
    void *work;
    int work_dt;
    const char *reader;         /* the op that reads it, and where: "conv2d,
                                   model.mp:12 (h)" (--gradcheck's messages) */
    double c;                   /* a third init argument (trunc_normal's hi) */
} MpParam;

#define MP_WORK_OTHER (-1)

typedef struct MpTrainCfg {
    int opt;                    /* MP_OPT_* */
    double lr, momentum, beta1, beta2, eps, weight_decay;
    int nesterov;
    int ls;                     /* MP_LS_* */
    double ls_init, ls_growth, ls_backoff;
    int64_t ls_interval;
    int sched;                  /* MP_SCHED_* */
    double warmup, sched_min;   /* warmup in steps */
    double clip;                /* 0 = off */
    int64_t accumulate, steps, seed;
    int warmup_style;           /* MP_WARMUP_*: k/W (torch) or k/(W+1) (nanoGPT) */
    double dampening;           /* SGD's (torch.optim.SGD dampening) */
    double alpha;               /* RMSprop's smoothing constant */
    int centered;               /* RMSprop's: divide by the gradient's estimated variance */
} MpTrainCfg;

/* What the runtime tells the model's code for one call. */
typedef struct MpRun {
    int training;               /* 1: batch-norm batch statistics, dropout on */
    float seed_grad;            /* backward: d(loss) to start from, S / accumulate */
    uint64_t seed;              /* for dropout masks: (seed, step, micro) */
    int64_t step, micro;
    int check;                  /* 1: after every op, stop at a non-finite value */
    /* out */
    float loss;                 /* forward: unscaled mean loss of the batch */
    float *metrics;             /* forward: one per metric, when not training */
    const char *bad_op;         /* check: "linear" */
    const char *bad_where;      /* check: "model.mp:9: h" */
    /* Evaluation and prediction (not training): */
    int64_t rows;               /* > 0: only the first `rows` samples of the
                                   batch are real (the last, padded batch);
                                   losses and metrics average over them */
    int keep;                   /* 1 + index in MpModel.values: copy that value
                                   into kept as the forward pass computes it */
    void *kept;                 /* host memory of the value's size */
    int kept_done;              /* out: the forward pass computed it */
} MpRun;

/* A device backend (the CUDA program's runtime/mp_cuda_step.h); NULL in the
 * C program. With one, mp_main keeps its command line, data, init,
 * checkpoints, logs and exit codes, and hands the device the parameters and
 * the training steps:
 *   start  once, after init / --init / --resume and setup(): take the
 *          parameters, optimizer state and loss scale to the device. host = 1
 *          (--gradcheck, --check-numerics): the host stays their owner;
 *          forward / backward then copy through the host on each call and
 *          the runtime's own optimizer runs.
 *   step   one optimizer step k on the device (not called when host = 1);
 *          fills *out (and the trainer's counters) only when need is set,
 *          the one moment the host waits for the device.
 *   pull   the device's parameters, optimizer state and counters back into
 *          the trainer's buffers (before a checkpoint is written).
 *   bytes  see below. */
/* A named value of the model (a statement's target), for --predict. */
typedef struct MpValue {
    const char *name;
    int dtype;
    int rank;
    int64_t shape[MP_MAX_RANK]; /* shape[0] is the batch when it is per sample */
    uint64_t inputs;            /* bit i: depends on input i (bit 63: on one >= 63) */
} MpValue;

struct MpTrainer;
struct MpStepOut;
struct MpErr;
typedef struct MpDevice {
    int (*start)(struct MpTrainer *t, int host, struct MpErr *e);
    int (*step)(struct MpTrainer *t, int64_t k, int need, struct MpStepOut *out, struct MpErr *e);
    int (*pull)(struct MpTrainer *t, struct MpErr *e);
    /* bytes  the device memory the run needs, computed without a GPU (for
     *        --dry-run); NULL: not known. */
    int64_t (*bytes)(const struct MpTrainer *t);
} MpDevice;

typedef struct MpModel {
    const char *name;           /* the `model` name */
    const char *policy;         /* "float32", "mixed_float16", "mixed_bfloat16" */
    const char *source;         /* the .mp file it was compiled from */
    const char *mpcc_version;
    int64_t batch;
    int ninputs;
    MpInput *inputs;
    int nparams;
    MpParam *params;
    int nmetrics;
    const char *const *metric_names;
    MpTrainCfg cfg;             /* the train block's values */
    /* Called once after parameters are allocated: allocate activations. */
    int (*setup)(void);
    /* Lowp working copies of the parameters: once per optimizer step. */
    void (*cast_params)(void);
    /* One micro-batch from the inputs' batch buffers. Returns 0, or 1 when
     * run->check found a non-finite value (bad_op / bad_where set). */
    int (*forward)(MpRun *run);
    /* Adds run->seed_grad-scaled gradients into MpParam.grad. Same return. */
    int (*backward)(MpRun *run);
    /* NULL, or the device that trains this model (see MpDevice). */
    const MpDevice *device;
    /* Bytes of host memory setup() allocates for activations (--dry-run). */
    int64_t arena_bytes;
    /* The named values (--predict --output NAME) and the index of the
     * default one, the value the loss is computed from (-1: none). */
    int nvalues;
    const MpValue *values;
    int output;
    /* mixed_float8's scales (mp_fp8.h), NULL under the other policies */
    struct MpFp8 *fp8;
} MpModel;

int mp_main(int argc, char **argv, MpModel *m);

#endif
