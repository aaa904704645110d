#!/usr/bin/env bash
# t_signals.sh - TRAINER.md "Signals", for the C program and the CUDA
# program (through the CPU stand-in, tests/cuda/mp_cuda_emu.h):
#   1. SIGTERM, and SIGINT, in the middle of a run: exit 143 / 130, one line
#      saying where it stopped, a checkpoint at that step; --resume from it
#      to the end equals the uninterrupted run bit for bit (every tensor and
#      metadata of the final checkpoints, every logged step).
#   2. A second signal ends the program at once: during a slow step, no
#      checkpoint is written and no "stopped" line printed.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

mnist_first train 512 "$tmp/x.npy" "$tmp/y.npy" || exit 1
D=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --log-every 1)

# wait_lines FILE N PID: until FILE has N lines (or PID is gone)
wait_lines() {
    while kill -0 "$3" 2>/dev/null && [ "$(cat "$1" 2>/dev/null | wc -l)" -lt "$2" ]; do sleep 0.05; done
}

# interrupted BIN NAME SIGNAL WANT STEPS: stop a run with SIGNAL, resume it,
# compare with NAME's uninterrupted run
interrupted() {
    local bin=$1 n=$2 sig=$3 want=$4 steps=$5 rc
    local ck=$tmp/$n.$sig.st log=$tmp/$n.$sig.jsonl
    "$bin" "${D[@]}" --steps "$steps" --save "$ck" --log "$log" 2>"$tmp/$n.$sig.err" &
    local pid=$!
    wait_lines "$log" 10 $pid
    kill -s "$sig" $pid
    wait $pid; rc=$?
    if [ $rc != "$want" ]; then
        bad "$n: SIG$sig: exit $rc, want $want: $(tail -n 2 "$tmp/$n.$sig.err")"; return
    fi
    local line
    line=$(grep "stopped by SIG$sig after step" "$tmp/$n.$sig.err")
    [ -n "$line" ] && [ -f "$ck" ] || { bad "$n: SIG$sig: no stop line or no checkpoint"; return; }
    echo "ok   $n: $line"
    "$bin" "${D[@]}" --steps "$steps" --resume "$ck" --save "$ck" --log "$log" \
        2>"$tmp/$n.$sig.err2" || { bad "$n: resume after SIG$sig failed: $(tail -n 1 "$tmp/$n.$sig.err2")"; return; }
    $PY tests/py/same.py ckpt "$tmp/$n.full.st" "$ck" || bad "$n: SIG$sig + resume: checkpoints differ"
    $PY tests/py/same.py log "$tmp/$n.full.jsonl" "$log" || bad "$n: SIG$sig + resume: logs differ"
}

run_pair() {   # run_pair BIN NAME STEPS
    "$1" "${D[@]}" --steps "$3" --save "$tmp/$2.full.st" --log "$tmp/$2.full.jsonl" 2>/dev/null ||
        { bad "$2: the uninterrupted run failed"; return; }
    interrupted "$1" "$2" TERM 143 "$3"
    interrupted "$1" "$2" INT 130 "$3"
}

echo "== 1. stop, save, resume: the C program"
build_trainer tests/models/resume_adam.mp "$tmp/c" || exit 1
run_pair "$tmp/c" c 200

echo "== 1. the CUDA program (CPU stand-in)"
emu_trainer tests/models/resume_adam.mp "$tmp/cu"
case $? in 0) run_pair "$tmp/cu" cuda 100 ;; 1) fail=1 ;; esac

ls -a "$tmp" | grep -q mpcc-tmp && bad "a temporary file was left behind"

echo "== 2. a second signal ends the program at once"
cat >"$tmp/slow.mp" <<'EOF'
model slow
const B = 256
input image: u8[B, 2048]
input label: i32[B]
x      = f32(image) / 255
h      = relu(linear(x, 3072))
logits = linear(h, 10)
loss   = cross_entropy(logits, label)
train {
  optimizer = sgd(lr = 0.01)
  precision = float32
  minimize loss
}
EOF
$PY -c 'import numpy as np, sys
r = np.random.default_rng(1)
np.save(sys.argv[1], r.integers(0, 256, (256, 2048), dtype=np.uint8))
np.save(sys.argv[2], r.integers(0, 10, 256).astype(np.int32))' "$tmp/sx.npy" "$tmp/sy.npy"
build_trainer "$tmp/slow.mp" "$tmp/slow" || exit 1
"$tmp/slow" --data image="$tmp/sx.npy" --data label="$tmp/sy.npy" --steps 1000 --log-every 1 \
    --log "$tmp/slow.jsonl" --save "$tmp/slow.st" 2>"$tmp/slow.err" &
pid=$!
wait_lines "$tmp/slow.jsonl" 1 $pid
t0=$($PY -c 'import time; print(time.time())')
kill -TERM $pid; sleep 0.02; kill -TERM $pid
wait $pid; rc=$?
dt=$($PY -c 'import sys, time; print(f"{time.time() - float(sys.argv[1]):.2f}")' "$t0")
if [ $rc != 143 ] || [ -e "$tmp/slow.st" ] || grep -q stopped "$tmp/slow.err"; then
    bad "second SIGTERM: exit $rc (want 143), checkpoint $([ -e "$tmp/slow.st" ] && echo written || echo none)," \
        "stderr: $(tail -n 1 "$tmp/slow.err")"
else
    echo "ok   second SIGTERM: exit 143 after ${dt}s, mid-step, nothing saved"
fi
exit $fail
