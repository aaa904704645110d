/* emit.h - code generators. Each writes one self-contained program for the
 * planned graph to `out`; returns false (with a message) on I/O error. */
#ifndef MPCC_EMIT_H
#define MPCC_EMIT_H

#include "ir.h"
#include <stdbool.h>
#include <stdio.h>

#define MPCC_VERSION "0.1.0"

/* loops: isomorphic `repeat` copies run as a loop over one body function
 * (emit_loop.c); false (--no-loop) writes every copy out, as mpcc did before. */
bool emit_c(FILE *out, const IrGraph *g, bool loops);
bool emit_cuda(FILE *out, const IrGraph *g, bool loops);

/* The model name made safe as a C identifier: names that are C or CUDA
 * keywords or library names (int, half, main, printf) are mangled here, in
 * one place, so any valid model name gives valid generated code. */
const char *emit_c_name(Arena *a, const char *model_name);

/* The embedded runtime (build/runtime_blob.c): runtime/AMALGAMATION, and
 * the CUDA program's own files, runtime/AMALGAMATION_CUDA; the programs'
 * skeletons, templates/. */
extern const int mp_runtime_count;
extern const char *const mp_runtime_names[];
extern const char *const mp_runtime_texts[];
extern const int mp_template_count;          /* templates/ */
extern const char *const mp_template_names[];
extern const char *const mp_template_texts[];
extern const int mp_cuda_runtime_count;
extern const char *const mp_cuda_runtime_names[];
extern const char *const mp_cuda_runtime_texts[];

#endif
