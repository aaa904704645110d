#!/usr/bin/env bash
# gpu_bench.sh - the CUDA target against PyTorch on one GPU, in one run
# (issue 4's benchmark). Needs ./mpcc (make), nvcc, a GPU, and python3 with
# torch and numpy. Writes bench/out/ (programs, logs, results.json) and
# prints the table for bench/RESULTS.md:
#   1. the MNIST MLP (examples/mnist_mlp.mp, batch 128): samples/s of the
#      mpcc program against PyTorch eager AMP (autocast + GradScaler, Adam),
#      torch.compile and torch.compile(mode="reduce-overhead");
#   2. the GEMM-bound MLP (bench/mlp4096.mp: 4 x 4096, batch 8192): the
#      same, and the achieved TFLOP/s of both against the cuBLAS float16
#      peak measured in this run (torch_bench.py --peak);
#   3. GPT-2 small (examples/gpt2.mp at bench/gpu_check.sh's sizes, batch
#      8 x 1024, mixed_float16; built by gpu_check.sh, which runs first)
#      against nanoGPT's model in PyTorch (torch_bench.py --model gpt2), eager
#      AMP and torch.compile: ms/step, and TFLOP/s by nanoGPT's count;
#      gpt2_f8: the same model under mixed_float8 (when gpu_check.sh built
#      it), against the same PyTorch AMP runs;
#   4. peak device memory: the mpcc program's one allocation and the
#      process's use as nvidia-smi sees it, against PyTorch's
#      max_memory_reserved and its process's use.
# Goals (issue 4): >= 3x PyTorch eager AMP on (1), >= 70% of the cuBLAS peak
# on (2), no more peak memory than PyTorch.
# Takes about 5 minutes on an H200 (the nvcc builds are most of it; programs
# gpu_check.sh PREBUILD=1 built ahead, bench_NAME.gpu, are used instead).
# TORCH_MODES (default "eager compile compile-cudagraphs") picks the PyTorch runs.
set -u
cd "$(dirname "$0")/.."
# python3 with numpy, torch: the first of python3 (a GPU machine's has them) and
# /usr/bin/python3 (Debian's packages, where python3 is another one) that has them
PY=${PY:-$(for p in python3 /usr/bin/python3; do "$p" -c 'import numpy, torch' 2>/dev/null && { echo "$p"; break; }; done)}
[ -n "$PY" ] || { echo "gpu_bench: no python3 with numpy, torch (set PY)"; exit 2; }
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
ARCH=${ARCH:-sm_90}
out=bench/out
mkdir -p "$out"
[ -x ./mpcc ] || { echo "gpu_bench: ./mpcc is not built (make)"; exit 2; }
[ -x "$NVCC" ] || { echo "gpu_bench: no nvcc"; exit 2; }
nvidia-smi -L || { echo "gpu_bench: no GPU"; exit 2; }

# ---- programs and data --------------------------------------------------------------
./mpcc examples/mnist_mlp.mp -o "$out/mnist_mlp.cu" && ./mpcc bench/mlp4096.mp -o "$out/mlp4096.cu" || exit 1
for n in mnist_mlp mlp4096; do
    if [ -x "$out/check/bench_$n.gpu" ]; then cp "$out/check/bench_$n.gpu" "$out/$n"; continue; fi
    "$NVCC" -O3 -arch="$ARCH" "$out/$n.cu" -o "$out/$n" >"$out/$n.nvcc.log" 2>&1 &
done
"$PY" - "$out" <<'EOF'
import numpy as np, sys
d, r = sys.argv[1], np.random.RandomState(0)
np.save(d + "/img.npy", r.randint(0, 256, (60000, 784)).astype(np.uint8))
np.save(d + "/lab.npy", r.randint(0, 10, (60000,)).astype(np.int32))
np.save(d + "/x4096.npy", r.randn(2 * 8192, 4096).astype(np.float16))
np.save(d + "/y4096.npy", r.randint(0, 16, (2 * 8192,)).astype(np.int32))
EOF
wait
for n in mnist_mlp mlp4096; do
    [ -x "$out/$n" ] || { echo "gpu_bench: nvcc failed for $n:"; cat "$out/$n.nvcc.log"; exit 1; }
done

# ---- runs ------------------------------------------------------------------------------------
# watch PID OUT: the largest GPU memory nvidia-smi reports for PID (MiB)
watch() {
    local pid=$1 max=0 v
    while kill -0 "$pid" 2>/dev/null; do
        v=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
            awk -F', ' -v p="$pid" '$1 == p {print $2}')
        [ -n "$v" ] && [ "$v" -gt "$max" ] && max=$v
        sleep 0.2
    done
    echo "$max" >"$2"
}
mpcc_run() {   # mpcc_run NAME STEPS LOG_EVERY data...
    local n=$1 steps=$2 every=$3
    shift 3
    MP_CUDA_VERBOSE=1 "$out/$n" "$@" --steps "$steps" --log-every "$every" --log "$out/$n.jsonl" \
        >"$out/$n.out" 2>"$out/$n.err" &
    local pid=$!
    watch $pid "$out/$n.smi"
    wait $pid || { echo "gpu_bench: $n failed:"; cat "$out/$n.err"; exit 1; }
}
torch_run() {  # torch_run NAME MODE STEPS [WARMUP]; each run at most TORCH_S (150) seconds
    timeout "${TORCH_S:-150}" "$PY" bench/torch_bench.py --model "$1" --mode "$2" --steps "$3" --warmup "${4:-30}" >"$out/torch_$1_$2.json" \
        2>"$out/torch_$1_$2.err" &
    local pid=$!
    watch $pid "$out/torch_$1_$2.smi"
    wait $pid || { echo "gpu_bench: torch $1 $2 failed:"; tail -n 20 "$out/torch_$1_$2.err"; }
}
mpcc_run mnist_mlp 6000 1000 --data image="$out/img.npy" --data label="$out/lab.npy"
mpcc_run mlp4096 120 20 --data x="$out/x4096.npy" --data y="$out/y4096.npy"
models="mnist_mlp mlp4096"
if [ -x "$out/check/gpt2s.gpu" ] && [ -f "$out/check/gpt2_tok.bin" ]; then
    cp "$out/check/gpt2s.gpu" "$out/gpt2"
    mpcc_run gpt2 30 5 --data seq="$out/check/gpt2_tok.bin"
    models="$models gpt2"
fi
if [ -x "$out/check/gpt2s_f8.gpu" ] && [ -f "$out/check/gpt2_tok.bin" ]; then   # the FP8 row
    cp "$out/check/gpt2s_f8.gpu" "$out/gpt2_f8"
    mpcc_run gpt2_f8 30 5 --data seq="$out/check/gpt2_tok.bin"
    models="$models gpt2_f8"
fi
for m in ${TORCH_MODES:-eager compile compile-cudagraphs}; do   # GPT-2 first: it matters most
    case $models in *gpt2*) [ $m = compile-cudagraphs ] || torch_run gpt2 $m 30 8 ;; esac
    torch_run mnist_mlp $m 2000
    torch_run mlp4096 $m 60
done
"$PY" bench/torch_bench.py --peak >"$out/peak.json" || exit 1

# ---- the table -----------------------------------------------------------------------------------
"$PY" - "$out" "$models" <<'EOF'
import json, os, re, sys
d, models = sys.argv[1], sys.argv[2].split()
def mpcc(n):
    lines = [json.loads(l) for l in open(f"{d}/{n}.jsonl") if '"samples_per_s"' in l]
    sps = [l["samples_per_s"] for l in lines[1:]] or [lines[-1]["samples_per_s"]]   # after warm-up
    alloc = re.search(r"([0-9.]+) MiB of device memory", open(f"{d}/{n}.err").read())
    return {"samples_per_s": sum(sps) / len(sps), "alloc_mib": float(alloc.group(1)) if alloc else None,
            "smi_mib": int(open(f"{d}/{n}.smi").read()), "loss": lines[-1]["loss"]}
def torch(n, m):
    n = n.removesuffix("_f8")   # mpcc's mixed_float8 row: against PyTorch's AMP runs
    p = f"{d}/torch_{n}_{m}.json"
    if not os.path.exists(p):
        return "not run"
    if not open(p).read().strip():
        return None
    r = json.load(open(p))
    r["smi_mib"] = int(open(f"{d}/torch_{n}_{m}.smi").read())
    return r
peak = json.load(open(f"{d}/peak.json"))
flops = {"mnist_mlp": 128 * (2 * 2 * (784 * 512 + 512 * 10) + 2 * 512 * 10),
         "mlp4096": 8192 * (2 * 2 * (4 * 4096 * 4096 + 4096 * 16) + 2 * (3 * 4096 * 4096 + 4096 * 16)),
         # nanoGPT's estimate_mfu: 6 N (parameters less wpe) + 12 L H Q T per token
         "gpt2": 8 * 1024 * (6 * (124475904 - 1024 * 768) + 12 * 12 * 12 * 64 * 1024)}
flops["gpt2_f8"] = flops["gpt2"]
batch = {"mnist_mlp": 128, "mlp4096": 8192, "gpt2": 8, "gpt2_f8": 8}
res = {"peak": peak, "models": {}}
print("| model | program | samples/s | x eager AMP | TFLOP/s | % of cuBLAS peak | device memory (process) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for n in models:
    m = mpcc(n)
    runs = {"mpcc": m}
    for mode in ("eager", "compile", "compile-cudagraphs"):
        runs["torch " + mode] = torch(n, mode)
    eager = runs["torch eager"]["samples_per_s"] if isinstance(runs["torch eager"], dict) else None
    for name, r in runs.items():
        if r == "not run" or (n.endswith("_f8") and name != "mpcc"):   # PyTorch's rows: gpt2's
            continue
        if not r:
            print(f"| {n} | {name} | failed | | | | |")
            continue
        tf = r["samples_per_s"] / batch[n] * flops[n] / 1e12
        mem = (f"{r['alloc_mib']:.0f} MiB allocated ({r['smi_mib']} MiB)" if name == "mpcc"
               else f"{r['max_reserved'] / 2**20:.0f} MiB reserved ({r['smi_mib']} MiB)")
        ratio = f"{r['samples_per_s'] / eager:.2f}" if eager else "-"
        print(f"| {n} | {name} | {r['samples_per_s']:.0f} ({1e3 * batch[n] / r['samples_per_s']:.1f} ms/step) | "
              f"{ratio} | {tf:.1f} | "
              f"{100 * tf / peak['peak_tflops']:.0f}% | {mem} |")
    res["models"][n] = runs
print(f"\ncuBLAS float16 peak measured in this run: {peak['peak_tflops']:.0f} TFLOP/s {peak['shapes']}")
json.dump(res, open(f"{d}/results.json", "w"), indent=1)
EOF
