#!/usr/bin/env bash
# memory_budget.sh - recomputation under a memory budget (PRECISION.md
# "Additions: the memory plan and recomputation"), from the smallest budget
# a model can meet to none:
#   1. GPT-2 small (examples/gpt2.mp at B 8, T 1024, V 50304, D 768, H 12,
#      L 12, mixed_float16), the CUDA program's plan: the step's bytes on
#      the device and the FLOPs recomputation adds, for budgets from the
#      smallest to none (the plan's figures: --dump-plan=json, no GPU);
#   2. the same model at B 4, T 256 (a size this machine holds), the C
#      program: the plan's bytes and FLOPs, and the peak resident memory
#      of 2 training steps measured (/usr/bin/time's maximum RSS), and the
#      losses of the 2 steps (equal at every budget: recomputation changes
#      no bit).
# Needs ./mpcc (make), cc, python3 with numpy. Writes bench/out/budget/.
# BUDGETS_GIB (section 1) and C_BUDGETS_GIB (section 2) override the lists.
set -u
cd "$(dirname "$0")/.."
out=bench/out/budget
PY=${PY:-/usr/bin/python3}
mkdir -p "$out"
make -s mpcc >/dev/null || exit 1

gpt2_at() {   # gpt2_at B T OUT.mp: GPT-2 small's sizes, batch B x T tokens, mixed_float16
    sed -e "s/^const B = .*/const B = $1/" -e "s/^const T = .*/const T = $2/" \
        -e 's/^const V = .*/const V = 50304/' -e 's/^const D = .*/const D = 768/' \
        -e 's/^const H = .*/const H = 12/' -e 's/^const L = .*/const L = 12/' \
        -e 's/^const P = .*/const P = 0.0/' -e 's/^  precision .*/  precision = mixed_float16/' \
        examples/gpt2.mp >"$3"
}
smallest() {   # smallest MODEL.mp [mpcc options]: the smallest budget mpcc names
    ./mpcc "$@" --memory-budget 1 --dump-plan 2>&1 >/dev/null |
        sed -n 's/.*the smallest budget this model can meet is \([0-9]*\) bytes.*/\1/p'
}
plan() {   # plan MODEL.mp BUDGET [mpcc options]: "step_bytes flops flops_recomputed recomputed kept"
    local m=$1 b=$2
    shift 2
    # shellcheck disable=SC2046
    ./mpcc "$m" "$@" $([ "$b" = none ] || echo --memory-budget "$b") --dump-plan=json | "$PY" -c '
import json, sys
m = json.load(sys.stdin)["memory"]
re = sum(1 for s in m["saved"] if s["recomputed"])
print(m["step_bytes"], m["flops"], m["flops_recomputed"], re, len(m["saved"]) - re)'
}
row() {   # row LABEL STEP_BYTES FLOPS FLOPS_RE RECOMPUTED KEPT [EXTRA...]
    local label=$1 sb=$2 fl=$3 fr=$4 re=$5 kept=$6
    shift 6
    printf '| %s | %s | %.2f | %.1f%% | %s / %s |%s\n' "$label" "$sb" "$(echo "$sb / 1073741824" | bc -l)" \
        "$(echo "100 * $fr / $fl" | bc -l)" "$re" "$kept" "${*:+ $*}"
}

echo "== 1. GPT-2 small, B 8 x T 1024, mixed_float16: the CUDA program's plan"
gpt2_at 8 1024 "$out/gpt2s.mp"
min=$(smallest "$out/gpt2s.mp")
echo "| budget | step bytes | GiB | FLOPs added | values recomputed / kept |"
echo "| --- | ---: | ---: | ---: | ---: |"
for g in min ${BUDGETS_GIB:-4 4.5 5 5.5 6 7} none; do
    case $g in
    min) b=$min label="smallest ($min)" ;;
    none) b=none label=none ;;
    *) b=${g}GiB label="${g} GiB" ;;
    esac
    # shellcheck disable=SC2046
    p=$(plan "$out/gpt2s.mp" "$b" 2>/dev/null) || { echo "| $label | cannot be met |"; continue; }
    # shellcheck disable=SC2086
    row "$label" $p
done

echo
echo "== 2. GPT-2 small at B 4 x T 256, the C program: the plan against the measured peak"
gpt2_at 4 256 "$out/gpt2m.mp"
cmin=$(smallest "$out/gpt2m.mp" --target c)
"$PY" -c "
import numpy as np
np.random.RandomState(3).randint(0, 50257, 1 << 18).astype('<u2').tofile('$out/tok.bin')"
echo "| budget | step bytes | GiB | FLOPs added | values recomputed / kept | peak RSS (2 steps) | losses of the 2 steps |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
for g in min ${C_BUDGETS_GIB:-2.5 2.75 3} none; do
    case $g in
    min) b=$cmin label="smallest ($cmin)" ;;
    none) b=none label=none ;;
    *) b=${g}GiB label="${g} GiB" ;;
    esac
    p=$(plan "$out/gpt2m.mp" "$b" --target c 2>/dev/null) || { echo "| $label | cannot be met |"; continue; }
    # shellcheck disable=SC2046
    ./mpcc "$out/gpt2m.mp" --target c $([ "$b" = none ] || echo --memory-budget "$b") -o "$out/gpt2m_$g.c" &&
        cc -O2 -fopenmp "$out/gpt2m_$g.c" -o "$out/gpt2m_$g" -lm || { echo "| $label | does not build |"; continue; }
    /usr/bin/time -f '%M' -o "$out/gpt2m_$g.rss" "$out/gpt2m_$g" --data seq="$out/tok.bin" --no-shuffle \
        --steps 2 --log-every 1 --log "$out/gpt2m_$g.jsonl" >/dev/null 2>&1 || { echo "| $label | run failed |"; continue; }
    rss=$(tail -n 1 "$out/gpt2m_$g.rss")
    losses=$("$PY" -c 'import json, sys; print(", ".join(str(json.loads(l)["loss"]) for l in open(sys.argv[1])))' \
        "$out/gpt2m_$g.jsonl")
    # shellcheck disable=SC2086
    row "$label" $p "$(printf '%.2f GiB' "$(echo "$rss / 1048576" | bc -l)") | $losses |"
done
