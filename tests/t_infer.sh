#!/usr/bin/env bash
# t_infer.sh - the trained model used (TRAINER.md "Evaluation and
# prediction", "Weights for PyTorch"), for tests/models/mlp_small.mp and
# the batch-norm CNN tests/models/cnn_bn.mp (built --precision float32, so
# that the PyTorch twins of tests/py/models.py agree to rounding), from
# weights given by --init (the twin's torch-default initialisation):
#   - --steps 0 --eval, no training data: loss and accuracy over every
#     sample of 75 (not a multiple of the batch: a padded last batch) and of
#     20 (fewer than one batch) equal the twin's (1e-5 relative);
#   - --predict image=... --out: the logits of every sample in file order
#     (and, for the MLP, --output h) equal the twin's (1e-4);
#   - --init with the same weights as F16, BF16 and F64 tensors evaluates
#     as the twin with those weights rounded to f32;
#   - 5 training steps with --export: the file loads into the twin with
#     load_state_dict(strict=True) (num_batches_tracked an int64 5) and
#     gives the trainer's eval loss;
#   - --resume from that run's checkpoint, --steps 0 --export: the same
#     file (the batch count is kept in checkpoints);
#   - the export given back to --init (num_batches_tracked included) and
#     exported again is the same file's tensors;
#   - --init-partial: the matching layers from the file, the `logits` layer
#     at its initialiser, listed on stderr; a file matching nothing, and
#     the partial file without --init-partial, are refused (exit 1);
#   - usage errors (exit 2): --predict without --out or weights, --output
#     without --predict, an unknown --output name (exit 1, listing values);
#   - the CUDA program (run on the CPU through tests/cuda/mp_cuda_emu.h, when
#     a C++ compiler is there) gives the same eval, predictions and export.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
CXX=${CXX:-$(command -v g++ || command -v c++ || true)}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

mnist_first train 160 "$W/t_x.npy" "$W/t_y.npy" &&
    mnist_first t10k 75 "$W/e75_x.npy" "$W/e75_y.npy" &&
    mnist_first t10k 20 "$W/e20_x.npy" "$W/e20_y.npy" || { echo "FAIL: no MNIST data"; exit 1; }

# expect RC WHAT CMD...: exit status RC and WHAT on stderr
expect() {
    local rc=$1 what=$2
    shift 2
    "$@" >"$W/out" 2>"$W/err"
    local got=$?
    [ "$got" = "$rc" ] && grep -qF -- "$what" "$W/err" ||
        bad "$* -> exit $got (expected $rc), stderr: $(head -c 300 "$W/err") (expected '$what')"
}

# runs NAME BIN: every trainer output infer.py check reads, from program BIN
runs() {
    local n=$1 bin=$2 s init=$W/${1%.emu}.init.st
    for s in e75 e20; do
        "$bin" --init "$init" --steps 0 --eval image="$W/${s}_x.npy" --eval label="$W/${s}_y.npy" \
            --log "$W/$n.$s.jsonl" 2>>"$W/$n.err" || bad "$bin: --steps 0 --eval $s failed: $(tail -n 1 "$W/$n.err")"
        "$bin" --init "$init" --predict image="$W/${s}_x.npy" --out "$W/$n.$s.pred.npy" 2>>"$W/$n.err" ||
            bad "$bin: --predict $s failed: $(tail -n 1 "$W/$n.err")"
    done
    "$bin" --init "$init" --data image="$W/t_x.npy" --data label="$W/t_y.npy" --no-shuffle \
        --steps 5 --eval image="$W/e75_x.npy" --eval label="$W/e75_y.npy" --log "$W/$n.train.jsonl" \
        --export "$W/$n.export.st" --save "$W/$n.ck.st" 2>>"$W/$n.err" ||
        bad "$bin: training with --export failed: $(tail -n 1 "$W/$n.err")"
    "$bin" --resume "$W/$n.ck.st" --steps 0 --export "$W/$n.resumed.st" 2>>"$W/$n.err" ||
        bad "$bin: --resume --steps 0 --export failed: $(tail -n 1 "$W/$n.err")"
}

for m in mlp:mlp_small cnn:cnn_bn; do
    n=${m%%:*} mp=tests/models/${m#*:}.mp
    build_trainer "$mp" "$W/$n" --precision float32 || { fail=1; continue; }
    $PY tests/py/infer.py prep "$W" "$mp" "$n" || { bad "infer.py prep $n"; continue; }
    runs "$n" "$W/$n"
    for t in init16 initbf init64; do
        "$W/$n" --init "$W/$n.$t.st" --steps 0 --eval image="$W/e75_x.npy" --eval label="$W/e75_y.npy" \
            --log "$W/$n.$t.jsonl" 2>>"$W/$n.err" || bad "$n: --init $t failed: $(tail -n 1 "$W/$n.err")"
    done
    [ $n = mlp ] && for s in e75 e20; do
        "$W/$n" --init "$W/$n.init.st" --predict image="$W/${s}_x.npy" --out "$W/$n.$s.h.npy" --output h \
            2>>"$W/$n.err" || bad "$n: --predict --output h failed"
    done
    "$W/$n" --steps 0 --export "$W/$n.dflt.st" 2>>"$W/$n.err" || bad "$n: --steps 0 --export failed"
    "$W/$n" --init "$W/$n.export.st" --steps 0 --export "$W/$n.reexport.st" 2>>"$W/$n.err" ||
        bad "$n: --init from an export failed: $(tail -n 1 "$W/$n.err")"
    expect 0 "--init-partial: left at their initialisers: logits.weight, logits.bias" \
        "$W/$n" --init "$W/$n.part.st" --init-partial --steps 0 --export "$W/$n.partout.st"
    expect 1 "not part of model" "$W/$n" --init "$W/$n.part.st" --steps 0 --export "$W/$n.x.st"
    expect 1 "no tensor matches a parameter" "$W/$n" --init "$W/$n.none.st" --init-partial --steps 0 --export "$W/x.st"
    emu=
    if [ -n "$CXX" ]; then
        if "$MPCC" "$mp" --precision float32 -o "$W/$n.cu" 2>"$W/$n.cu.err" &&
            "$CXX" -std=c++17 -O1 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h "$W/$n.cu" \
                -o "$W/$n.emu" -lm 2>>"$W/$n.cu.err"; then
            runs "$n.emu" "$W/$n.emu"
            emu=--emu
        else
            bad "$n: the CUDA program does not build for the CPU: $(head -n 5 "$W/$n.cu.err")"
        fi
    else
        echo "note: no C++ compiler: the CUDA program's inference is not checked"
    fi
    $PY tests/py/infer.py check "$W" "$mp" "$n" $emu || fail=1
done

# --help: the inputs with their shapes and types, the defaults
b=$W/mlp
"$b" --help >"$W/help" 2>&1 || bad "--help failed"
for want in "image          u8[64, 784]" "label          i32[64]  class labels in [0, 10)" \
    "--eval-every     N              evaluate every N steps (default: only at the end)" \
    "--steps          N              train until optimizer step N (default: the train block's, 40)" \
    "--output         VALUE          the value --predict writes (default: logits)"; do
    grep -qF -- "$want" "$W/help" || bad "--help lacks '$want'"
done

# usage errors
expect 2 "--predict needs --out" "$b" --init "$W/mlp.init.st" --predict image="$W/e20_x.npy"
expect 2 "--predict needs --out" "$b" --predict image="$W/e20_x.npy" --out "$W/p.npy"
expect 2 "--output needs --predict" "$b" --init "$W/mlp.init.st" --steps 0 --output h
expect 2 "--predict does not train" "$b" --init "$W/mlp.init.st" --predict image="$W/e20_x.npy" \
    --out "$W/p.npy" --data image="$W/t_x.npy" --data label="$W/t_y.npy"
expect 2 "--init-partial needs --init" "$b" --init-partial --steps 0
expect 2 "--save needs --data" "$b" --init "$W/mlp.init.st" --steps 0 --save "$W/s.st"
expect 1 "has no value of that name (values: x, h, logits, loss, accuracy)" \
    "$b" --init "$W/mlp.init.st" --predict image="$W/e20_x.npy" --out "$W/p.npy" --output nope
expect 1 "depends on input 'image'" "$b" --init "$W/mlp.init.st" --predict label="$W/e20_y.npy" --out "$W/p.npy"
expect 1 "not one row per sample" "$b" --init "$W/mlp.init.st" --predict image="$W/e20_x.npy" --out "$W/p.npy" --output loss
[ -e "$W/p.npy" ] && bad "a refused --predict wrote its --out file"

[ $fail = 0 ] && echo "PASS: t_infer" || echo "FAIL: t_infer"
exit $fail
