#!/usr/bin/env bash
# t_real_arch_emit.sh - what the C program's descriptors say about LANGUAGE.md's
# additions for real architectures (tests/plan/real_arch.mp): a u16 window
# input is MP_U16 with MpInput.window = 1; buffers are not trainable and in
# no decay group; the no_decay patterns set MpParam.no_decay on exactly the
# tensors they match; warmup_style "nanogpt" reaches MpTrainCfg. A driver
# includes the generated program (its main renamed) and prints these by
# field name, so the check does not depend on initialiser positions; the
# program must also build warning-free as strict C11.
set -euo pipefail
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$MPCC" tests/plan/real_arch.mp --target c -o "$tmp/train.c"
cc -std=c11 -pedantic -Wall -Wextra -Werror -fsyntax-only "$tmp/train.c"
cat >"$tmp/driver.c" <<'C'
#define main mp_program_main
#include "train.c"
#undef main
int main(void)
{
    const MpModel *m = &mp_model;
    for (int i = 0; i < m->ninputs; i++)
        printf("input %s dtype=%d window=%d\n", m->inputs[i].name, m->inputs[i].dtype, m->inputs[i].window);
    for (int i = 0; i < m->nparams; i++)
        printf("param %s trainable=%d no_decay=%d\n", m->params[i].name, m->params[i].trainable,
               m->params[i].no_decay);
    printf("cfg weight_decay=%g warmup=%g warmup_style=%d\n", m->cfg.weight_decay, m->cfg.warmup,
           m->cfg.warmup_style);
    return 0;
}
C
cc -std=c11 -I"$tmp" -o "$tmp/driver" "$tmp/driver.c" -lm
"$tmp/driver" >"$tmp/got"
cat >"$tmp/want" <<'TXT'
input seq dtype=6 window=1
input x dtype=1 window=0
input y dtype=4 window=0
param mask trainable=0 no_decay=0
param shift trainable=0 no_decay=0
param transformer.h.0.ln_1.weight trainable=1 no_decay=1
param transformer.h.0.ln_1.bias trainable=1 no_decay=1
param transformer.h.0.mlp.c_fc.weight trainable=1 no_decay=0
param transformer.h.0.mlp.c_fc.bias trainable=1 no_decay=1
param transformer.h.1.ln_1.weight trainable=1 no_decay=1
param transformer.h.1.ln_1.bias trainable=1 no_decay=1
param transformer.h.1.mlp.c_fc.weight trainable=1 no_decay=0
param transformer.h.1.mlp.c_fc.bias trainable=1 no_decay=1
param lm_head.0.weight trainable=1 no_decay=1
param lm_head.0.bias trainable=1 no_decay=1
cfg weight_decay=0.1 warmup=2 warmup_style=1
TXT
if diff -u "$tmp/want" "$tmp/got"; then
    echo "ok   real_arch.mp: window, u16, buffers, no_decay and warmup_style in the descriptors"
else
    echo "FAIL real_arch.mp: the descriptors differ from the model (above)"
    exit 1
fi
