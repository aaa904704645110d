#!/usr/bin/env bash
# gpu_run.sh - a lent GPU's whole session in one command of under 10
# minutes (the device tool's limit). Prepare on any machine first:
#     make && PREBUILD=1 bench/gpu_check.sh     # builds for sm_90, runs the C side
# then, on the GPU's machine, carrying mpcc and bench/out/carry:
#     bench/gpu_run.sh
# It prints the machine (GPU, driver, nvcc, PyTorch), finds cuBLAS, runs
# gpu_check.sh (GPT-2 small first), Nsight Compute's time of each kernel of
# one GPT-2 small step (ncu.txt) and gpu_bench.sh (PyTorch eager AMP and
# torch.compile), each under a time limit, and leaves everything in
# $OUT (or bench/out/run): run.log, and logs.tar.xz with every program's log.
# Exit status: 0 when both passed, else 1.
set -u
cd "$(dirname "$0")/.."
o=${OUT:-bench/out/run}
mkdir -p "$o"
exec > >(tee "$o/run.log") 2>&1
t0=$(date +%s)
echo "== the machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
nvcc --version | tail -n 2
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
if [ -z "${MP_CUBLAS:-}" ] && ! ldconfig -p | grep -q 'libcublas.so.1[23]' && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
    MP_CUBLAS=$(find / -xdev -name 'libcublas.so.1[23]' 2>/dev/null | head -n 1)
    export MP_CUBLAS
fi
echo "cuBLAS: ${MP_CUBLAS:-found by the loader}"
rc=0
echo "== gpu_check.sh"
PREBUILT_ONLY=1 GPT2_FIRST=1 GPT2_STEPS=${GPT2_STEPS:-30} timeout "${CHECK_S:-260}" bench/gpu_check.sh || rc=1
echo "== gpu_check.sh ended after $(($(date +%s) - t0)) s"
pkill -f compute-sanitizer; pkill -f 'bench/out/check/.*\.(gpu|cpu)'; sleep 1   # what a timeout left running
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
NCU_BIN=${NCU_BIN:-bench/out/check/gpt2s.gpu}
if [ -x "$NCU" ] && [ -x "$NCU_BIN" ]; then   # where GPT-2 small's step goes
    echo "== ncu: one GPT-2 small step ($NCU_BIN), each kernel's time"
    MP_CUDA_GRAPH=0 timeout "${NCU_S:-75}" "$NCU" --clock-control none --metrics gpu__time_duration.sum \
        --print-summary per-kernel "$NCU_BIN" --data seq=bench/out/check/gpt2_tok.bin \
        --steps 1 >"$o/ncu.txt" 2>&1
    echo "ncu: exit $?, $(grep -c gpu__time_duration "$o/ncu.txt") kernels in $o/ncu.txt"
fi
echo "== gpu_bench.sh"
TORCH_MODES=${TORCH_MODES:-"eager compile"} timeout "${BENCH_S:-200}" bench/gpu_bench.sh || rc=1
echo "== gpu_bench.sh ended after $(($(date +%s) - t0)) s"
tar -cJf "$o/logs.tar.xz" --exclude='*.gpu' --exclude='*.cpu' --exclude='*.npy' --exclude='*.bin' \
    --exclude='*.safetensors' --exclude='*.cu' --exclude='*.c' --exclude='bench/out/mnist_mlp' \
    --exclude='bench/out/mlp4096' --exclude='bench/out/gpt2' --exclude='bench/out/run' bench/out 2>/dev/null
[ -f bench/out/results.json ] && cp bench/out/results.json "$o/"
exit $rc
