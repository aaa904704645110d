#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_fuse.sh - the fusion pass (compiler/fuse.c) changes nothing but speed:
#   1. every example and every tests/models model, compiled with --fuse and
#      with --no-fuse to C, trained 3 steps on synthetic data
#      (tests/py/synth_data.py) with evaluations: the same log lines (all
#      but samples_per_s) and byte-identical checkpoints; the fused
#      program must really have fused something
#      (a group in its plan, a fused loop in its code, a smaller arena)
#      for the models that have chains;
#   2. the CUDA program on the CPU stand-in (tests/cuda/mp_cuda_emu.h), fused
#      and unfused, for a mixed_float16 MLP and the float32 zoo: identical
#      checkpoints;
#      epilogues: a product with the elementwise ops that consume it is one
#      group, run in the GEMM's store (MpGemm.epi) in the C program: the
#      MLP's C has no relu or relu_grad kernel left, and a mutant whose
#      epilogues skip rounding the product to its f16 storage (tests/fuse/
#      chains.mp, tanh after an f16 linear) must give another checkpoint;
#      the MLP's weight gradients add themselves into the f32 gradients in
#      their products' store (mp_k_matmul_tn_acc), and a mutant that skips
#      the f16 rounding there must give another checkpoint;
#   3. fusion is the default; MPCC_NO_FUSE=1 makes it off, --fuse wins;
#      the plan's groups (text column, json key, dot clusters) appear only
#      with fusion.
# The plan of the groups is a golden file: tests/fuse/chains.{txt,json}
# (tests/golden.sh).
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

# Both programs of each model, two builds at a time: cc -O2 -march=native
# (FMA contraction on, the hard case for bit-identity) for the models named
# in HARD, small_opt's for the rest (lib.sh: -O0, -Og for the models over
# 1 GFLOP a step; the build time of the whole zoo counts, and the same IEEE
# arithmetic as -O1 without -march: no contraction either way). Such a
# fused program is t_memplan.sh's unbudgeted one (build_trainer MODEL
# --fuse -- "$(small_opt MODEL)"): the compile cache builds it once.
HARD=" mnist_mlp char_transformer zoo llama chains "
build_pair() {   # build_pair MODEL.mp NAME FUSE|NO-FUSE
    local opt
    opt=$(small_opt "$1")
    [[ $HARD == *" $2 "* ]] && opt="-O2 -march=native"
    # shellcheck disable=SC2086
    build_trainer "$1" "$tmp/$2.$3" "--$3" -- $opt || echo "FAIL: $2 --$3 does not build"
}
export -f build_pair build_trainer small_opt
export tmp MPCC HARD PY
# every model as it is, but the examples of seconds a step at a smaller
# batch (ResNet-18 narrowed too): the same graph (small_models, lib.sh)
small_models examples/*.mp tests/models/*.mp tests/fuse/*.mp >"$tmp/models"
while read -r mp; do
    n=$(basename "$mp" .mp)
    echo "build_pair $mp $n fuse"
    echo "build_pair $mp $n no-fuse"
done <"$tmp/models" | xargs -P 2 -L 1 bash -c '"$@"' _ >"$tmp/builds" 2>&1
cat "$tmp/builds"
grep -q "^FAIL" "$tmp/builds" && fail=1

run_pair() {   # run_pair MODEL.mp NAME STEPS: fused vs unfused C programs
    local mp=$1 n=$2 steps=$3 v data rc
    [ -x "$tmp/$n.fuse" ] && [ -x "$tmp/$n.no-fuse" ] || return
    "$MPCC" "$mp" --fuse --dump-plan=json >"$tmp/$n.plan.json" 2>/dev/null || { bad "$n: no plan"; return; }
    mkdir -p "$tmp/$n" && "$PY" tests/py/synth_data.py "$tmp/$n.plan.json" "$mp" "$tmp/$n" 2 >"$tmp/$n.args"
    data=$(cat "$tmp/$n.args")
    for v in fuse no-fuse; do
        # shellcheck disable=SC2086
        "$tmp/$n.$v" $data ${data//--data/--eval} --no-shuffle --steps "$steps" --log-every 1 \
            --eval-every 2 --log "$tmp/$n.$v.jsonl" --save "$tmp/$n.$v.st" >"$tmp/$n.$v.out" 2>&1
        echo $? >"$tmp/$n.$v.rc"
        sed -i 's/"samples_per_s":[0-9.e+-]*//' "$tmp/$n.$v.jsonl"
    done
    rc=$(cat "$tmp/$n.fuse.rc")
    if [ "$rc" != 0 ] || [ "$(cat "$tmp/$n.no-fuse.rc")" != 0 ]; then
        bad "$n: exit $rc fused, $(cat "$tmp/$n.no-fuse.rc") unfused"; tail -n 3 "$tmp/$n.fuse.out"; return
    fi
    if [ ! -s "$tmp/$n.fuse.jsonl" ] || ! cmp -s "$tmp/$n.fuse.jsonl" "$tmp/$n.no-fuse.jsonl"; then
        bad "$n: the logs differ"; diff "$tmp/$n.fuse.jsonl" "$tmp/$n.no-fuse.jsonl" | head -n 6; return
    fi
    cmp "$tmp/$n.fuse.st" "$tmp/$n.no-fuse.st" || { bad "$n: the checkpoints differ"; return; }
    echo "ok   $n: fused and unfused identical over $steps steps ($(grep -c '"fused"' "$tmp/$n.plan.json") fused nodes)"
}

while read -r mp; do
    run_pair "$mp" "$(basename "$mp" .mp)" 3
done <"$tmp/models"

# Fusion happened where there are chains: groups, a fused loop, a smaller arena.
for n in mnist_mlp char_transformer zoo; do
    grep -q '"fused"' "$tmp/$n.plan.json" || bad "$n: no fusion group in the plan"
    grep -q '/\* fused: ' "$tmp/$n.fuse.c" || bad "$n: no fused loop in the C program"
    grep -q '/\* fused: ' "$tmp/$n.no-fuse.c" && bad "$n: a fused loop under --no-fuse"
    a=$(sed -n 's/.*gradients in one arena (\([0-9]*\) without reuse.*/\1/p' "$tmp/$n.fuse.c")
    b=$(sed -n 's/.*gradients in one arena (\([0-9]*\) without reuse.*/\1/p' "$tmp/$n.no-fuse.c")
    [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] || bad "$n: fusion stored as much ($a vs $b bytes)"
done

# Epilogues: the MLP's hidden linear and its backward matmul head groups;
# its C program calls no relu / relu_grad kernel (they run in the products'
# stores), the unfused one does.
n=mnist_mlp
p=$(grep -c '"op": "\(linear\|matmul\)".*"fused"' "$tmp/$n.plan.json")
[ "$p" -ge 2 ] || bad "$n: $p products in fusion groups (want >= 2)"
e=$(grep -c 'g_.epi = mp_epi' "$tmp/$n.fuse.c")
r=$(grep -c 'mp_k_relu\(_grad\)*(' "$tmp/$n.fuse.c")
u=$(grep -c 'mp_k_relu\(_grad\)*(' "$tmp/$n.no-fuse.c")
if [ "$e" -ge 2 ] && [ "$r" = 0 ] && [ "$u" -ge 2 ]; then
    echo "ok   $n: $e products with epilogues, no relu pass left ($u unfused)"
else
    bad "$n: $e epilogues, $r relu passes fused, $u unfused (want >= 2, 0, >= 2)"
fi
# mutant NAME TAG SED WHAT: a negative control. NAME's fused C program
# edited by SED (which must change it) builds, runs as run_pair ran it, and
# gives another checkpoint than the unfused program.
mutant() {
    local n=$1 m="$tmp/$1.$2" data
    sed "$3" "$tmp/$n.fuse.c" >"$m.c"
    if cmp -s "$tmp/$n.fuse.c" "$m.c"; then
        bad "$n: $4: nothing to mutate (the mutant is the program)"
        return
    fi
    cc -O2 -march=native -o "$m" "$m.c" -lm || { bad "$n: the $2 mutant does not build"; return; }
    data=$(cat "$tmp/$n.args")
    # shellcheck disable=SC2086
    "$m" $data ${data//--data/--eval} --no-shuffle --steps 3 --log-every 1 \
        --eval-every 2 --save "$m.st" >/dev/null 2>&1 || bad "$n: the $2 mutant failed"
    if cmp -s "$m.st" "$tmp/$n.no-fuse.st"; then
        bad "$n: $4 goes unnoticed"
    else
        echo "ok   $n: $4: another checkpoint (negative control)"
    fi
}
# A weight's gradient product adds itself into the f32 gradient in its
# store (mp_k_matmul_tn_acc: the f16 h.weight one rounded to f16 first, the
# f32 logits.weight one as it is), with fusion only.
a=$(grep -c '^    mp_k_matmul_tn_acc(' "$tmp/$n.fuse.c")
u=$(grep -c '^    mp_k_matmul_tn_acc(' "$tmp/$n.no-fuse.c")
if [ "$a" = 2 ] && [ "$u" = 0 ]; then
    echo "ok   $n: $a gradient products accumulate in their store ($u unfused)"
else
    bad "$n: $a gradient products accumulate in their store, $u unfused (want 2, 0)"
fi
mutant $n acc_mutant '/^static inline void mp_epi_acc(/,/^}/{/mp_round_n(v, c->rnd, n);/d}' \
    "a gradient product added unrounded"
# Epilogues that store the f32 product unrounded.
mutant chains mutant '/memcpy(t[0-9]*, v + c_, /{n;/mp_round_n(t[0-9]*, MP_F16, m_);/d}' \
    "an epilogue without the product's rounding"

# ---- 2. the CUDA program on the CPU stand-in ---------------------------------
CXX=${CXX:-$(command -v g++ || true)}
if [ -z "$CXX" ]; then
    echo "SKIP: no C++ compiler: the CUDA stand-in part"
else
    # -O0: the C++ compile is most of this part's CPU (-O1 takes twice as
    # long), the three steps run in about a second either way
    for n in mnist_mlp zoo chains; do
        mp=examples/$n.mp
        [ -f "$mp" ] || mp=tests/models/$n.mp
        [ -f "$mp" ] || mp=tests/fuse/$n.mp
        for v in fuse no-fuse; do
            "$MPCC" "$mp" "--$v" -o "$tmp/$n.$v.cu" &&
                "$CXX" -std=c++17 -O0 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h \
                    "$tmp/$n.$v.cu" -o "$tmp/$n.$v.emu" -lm 2>"$tmp/$n.$v.emu.err" ||
                { bad "$n --$v: the CUDA program does not build for the CPU"; head -n 10 "$tmp/$n.$v.emu.err"; continue; }
            # shellcheck disable=SC2046
            "$tmp/$n.$v.emu" $(cat "$tmp/$n.args") --no-shuffle --steps 3 --log-every 1 \
                --save "$tmp/$n.$v.emu.st" >/dev/null 2>"$tmp/$n.$v.emu.log" ||
                { bad "$n --$v: the CUDA program failed"; tail -n 3 "$tmp/$n.$v.emu.log"; }
        done
        grep -q 'mp_cu_each("fused_' "$tmp/$n.fuse.cu" || bad "$n: no fused kernel in the CUDA program"
        # a product's group: cuBLAS, then the group's kernel right after it
        [ $n = zoo ] || grep -A2 '^    mp_cu_linear<' "$tmp/$n.fuse.cu" | grep -q 'mp_cu_at("fused ' ||
            bad "$n: no fused kernel right after a product in the CUDA program"
        if cmp "$tmp/$n.fuse.emu.st" "$tmp/$n.no-fuse.emu.st"; then
            echo "ok   $n: CUDA program fused and unfused identical (stand-in)"
        else
            bad "$n: CUDA program: fused and unfused checkpoints differ"
        fi
    done
fi

# ---- 3. the switch and the plan ---------------------------------------------
mp=tests/fuse/chains.mp
MPCC_NO_FUSE=1 "$MPCC" "$mp" --dump-plan=json | grep -q '"fused"' && bad "MPCC_NO_FUSE=1 still fuses"
MPCC_NO_FUSE=1 "$MPCC" "$mp" --fuse --dump-plan=json | grep -q '"fused"' || bad "--fuse does not win over MPCC_NO_FUSE=1"
MPCC_NO_FUSE=0 "$MPCC" "$mp" --dump-plan=json | grep -q '"fused"' || bad "MPCC_NO_FUSE=0 turns fusion off"
"$MPCC" "$mp" --no-fuse --dump-plan | grep -q ' fused ' && bad "--no-fuse: the text plan has a fused column"
"$MPCC" "$mp" --fuse --dump-plan | grep -q '^  id .* fused  inputs' || bad "the text plan has no fused column"
"$MPCC" "$mp" --fuse --dump-plan=dot | grep -q 'subgraph cluster_fused_1 ' || bad "the dot plan has no fusion cluster"
if command -v dot >/dev/null; then
    "$MPCC" "$mp" --fuse --dump-plan=dot | dot -Tsvg >/dev/null || bad "dot refuses the plan with fusion clusters"
fi
# the default (no flag, no MPCC_NO_FUSE) fuses
(unset MPCC_NO_FUSE; "$MPCC" "$mp" --dump-plan=json | grep -q '"fused"') || bad "fusion is not the default"

[ "$fail" = 0 ] && echo "t_fuse: all passed"
exit "$fail"
