#!/usr/bin/env bash
# run_all: once (the trainer's process behaviour, which fusion does not change: make test-nofuse skips it)
# t_watch.sh - watching a run (TRAINER.md "Watching a run"):
#   - --tensorboard DIR (a folder that does not exist yet, two levels deep)
#     gets one event file that TensorBoard's own reader loads, holding every
#     scalar of the run at its step, equal to the JSONL log's (tests/py/
#     watch.py; TensorBoard is pip-installed into a venv in the temp folder,
#     and that part is skipped with a message when it cannot be installed;
#     the TFRecord framing and CRCs are checked either way);
#   - the same for the CUDA program through the CPU stand-in (host code);
#   - on a terminal (a pseudo-terminal), log lines stay on lines of their
#     own above the progress line and the run ends with the summary line;
#   - an event folder that cannot be created is an error naming it.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
CXX=${CXX:-$(command -v g++ || command -v c++ || true)}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
events() {   # events DIR LOG: watch.py's check, its output without TensorBoard's warnings
    $py tests/py/watch.py events "$1" "$2" >"$W/events.out" 2>&1
    local rc=$?
    grep -v -i warn "$W/events.out"
    return $rc
}

mnist_first train 192 "$W/t_x.npy" "$W/t_y.npy" &&
    mnist_first t10k 50 "$W/e_x.npy" "$W/e_y.npy" || { echo "FAIL: no MNIST data"; exit 1; }
DATA=(--data image="$W/t_x.npy" --data label="$W/t_y.npy" --eval image="$W/e_x.npy" --eval label="$W/e_y.npy")

py=$PY
if $PY -m venv --system-site-packages "$W/venv" >/dev/null 2>&1 &&
    timeout 300 "$W/venv/bin/pip" install -q tensorboard >"$W/pip.log" 2>&1; then
    py=$W/venv/bin/python
else
    echo "SKIP (part): TensorBoard could not be installed ($(tail -n 1 "$W/pip.log" 2>/dev/null)); checking the files' framing only"
fi

build_trainer tests/models/mlp_small.mp "$W/mlp" || exit 1
"$W/mlp" "${DATA[@]}" --steps 12 --log-every 3 --eval-every 6 --log "$W/c.jsonl" \
    --tensorboard "$W/tb/c/run" 2>"$W/c.err" || bad "training with --tensorboard: $(tail -n 2 "$W/c.err")"
events "$W/tb/c/run" "$W/c.jsonl" || bad "the C program's event file"

if [ -n "$CXX" ]; then
    if "$MPCC" tests/models/mlp_small.mp -o "$W/mlp.cu" 2>"$W/cu.err" &&
        "$CXX" -std=c++17 -O1 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h "$W/mlp.cu" \
            -o "$W/mlp.emu" -lm 2>>"$W/cu.err"; then
        "$W/mlp.emu" "${DATA[@]}" --steps 8 --log-every 4 --eval-every 4 --log "$W/g.jsonl" \
            --tensorboard "$W/tb/g" 2>"$W/g.err" || bad "CUDA program with --tensorboard: $(tail -n 2 "$W/g.err")"
        events "$W/tb/g" "$W/g.jsonl" || bad "the CUDA program's event file"
    else
        bad "the CUDA program does not build for the CPU: $(head -n 5 "$W/cu.err")"
    fi
fi

$PY tests/py/watch.py tty "$W/mlp" "${DATA[@]}" --steps 40 --log-every 10 || bad "log lines on a terminal"

touch "$W/file"
"$W/mlp" "${DATA[@]}" --steps 2 --tensorboard "$W/file/tb" 2>"$W/err"
rc=$?
# a refused output path is a usage error (TRAINER.md, Outputs): exit 2
[ $rc = 2 ] && grep -q "file/tb\|$W/file" "$W/err" || bad "--tensorboard under a file: exit $rc, $(cat "$W/err")"

[ $fail = 0 ] && echo "PASS: t_watch" || echo "FAIL: t_watch"
exit $fail
