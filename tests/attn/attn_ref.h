/* attn_ref.h - the old CPU attention kernels (attn_ref.c), for attn_bits.c
 * and attn_bench.c: the arguments of mp_k_attention / mp_k_attention_grad. */
#ifndef ATTN_REF_H
#define ATTN_REF_H
#include <stdint.h>

void ref_attention(void *y, int ydt, const void *q, int qdt, const void *k, int kdt,
                   const void *v, int vdt, int64_t BH, int64_t T, int64_t Tk, int64_t D,
                   int causal, int cdt);
void ref_attention_grad(void *g, int gdt, const void *dy, int dydt, const void *q, int qdt,
                        const void *k, int kdt, const void *v, int vdt, int64_t BH, int64_t T,
                        int64_t Tk, int64_t D, int causal, int cdt);
#endif
