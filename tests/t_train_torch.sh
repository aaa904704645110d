#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_train_torch.sh - the trainer's optimizers (SGD, momentum, nesterov, weight
# decay, Adam, AdamW, RMSprop), LR schedules and gradient clipping against torch 1.13:
# tests/train_torch/optim_drive.c runs runtime/mp_optim.h on the numbers
# that tests/train_torch/check_optim.py also feeds to torch.optim.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
PY=/usr/bin/python3
mkdir -p "$B/tests"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 ${SAN:-} -Iruntime \
    -o "$B/tests/optim_drive" tests/train_torch/optim_drive.c -lm
"$PY" tests/train_torch/check_optim.py "$B/tests/optim_drive"
