#!/usr/bin/env bash
# t_repeat_scale.sh - `repeat` compiles to a loop, and mpcc scales linearly
# (issue 12). A residual MLP with N layers (a block with a named value, a
# constant, parameters; one `repeat N as layers`):
#   1. N = 100: the model's part of the generated C (after the pasted
#      runtime) is under 110 KB (100 KB before each parameter's table row
#      named the operation that reads it, for --gradcheck's reports: some
#      20 bytes a parameter) and runs its copies as loops; the whole file
#      compiles (`cc -O2 -c`);
#   2. N = 1000 and N = 10000: mpcc's output grows linearly (the model's part
#      for 10000 copies is at most 11 times the one for 1000), with the same
#      loops (no copy written out). Counts, not seconds: no check depends on
#      how fast the machine is;
#   3. N = 12, trained 4 steps on MNIST images: the program with loops
#      equals the one with every copy written out (mpcc --no-loop) bit for
#      bit: checkpoint and log, under float32, mixed_float16 and
#      mixed_bfloat16; --predict --output of a value inside the repeat
#      gives the same file; the CUDA program on the CPU stand-in too.
# The measured figures are printed (MPCC_SCALE_N=1000 adds that size).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/py/lib.sh
. tests/py/lib.sh
test_tmp
B=${B:-build}

model() {   # model N FILE
    cat >"$2" <<EOF
model deep$1

const B = 8
const H = 16

input image: u8[B, 784]
input label: i32[B]

block res(x) {
  h = relu(linear(x, H, name = "fc"))
  return x + h * 0.05
}

x = f32(image) / 255
x = relu(linear(x, H, name = "inp"))
repeat $1 as layers {
  x = res(x, name = "res")
}
logits: f32 = linear(x, 10, name = "head")
loss = cross_entropy(logits, label)
metric accuracy = accuracy(logits, label)

train {
  optimizer = sgd(lr = 0.01)
  steps     = 4
  minimize loss
}
EOF
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }

# ---- 1. 100 layers: size of the model's code, and it compiles -------------
for n in 100 ${MPCC_SCALE_N:-}; do
    model "$n" "$tmp/d$n.mp"
    t0=$(date +%s%N)
    "$MPCC" "$tmp/d$n.mp" --target c -o "$tmp/d$n.c" 2>"$tmp/d$n.err" || { bad "mpcc on $n layers: $(head -n 1 "$tmp/d$n.err")"; continue; }
    t1=$(date +%s%N)
    part=$(awk '/^\/\* ==== model /{f=1} f' "$tmp/d$n.c" | wc -c)
    loops=$(grep -c "for (int l = 0; l < $n; l++)" "$tmp/d$n.c")
    cc -O2 -c "$tmp/d$n.c" -o "$tmp/d$n.o" 2>"$tmp/d$n.cc.err" ||
        bad "cc -O2 of $n layers failed: $(head -n 1 "$tmp/d$n.cc.err")"
    echo "$n layers: mpcc $(secs "$t0" "$t1") s, model part $part bytes, $loops loops over all $n copies"
    if [ "$n" = 100 ]; then
        [ "$part" -lt 110000 ] || bad "100 layers: the model's part of the C is $part bytes, expected < 110000"
        [ "$loops" -ge 2 ] || bad "100 layers: expected the casts and the forward pass as loops over all copies, found $loops loops"
    fi
done

# ---- 2. 1000 and 10000 layers: mpcc's output grows linearly ---------------
# (the check is on counts: the model's part in bytes and its loops; mpcc's
# time is printed, never checked)
declare -A psize nloops
for n in 1000 10000; do
    model $n "$tmp/d$n.mp"
    t0=$(date +%s%N)
    "$MPCC" "$tmp/d$n.mp" --target c -o "$tmp/d$n.c" 2>"$tmp/d$n.err" ||
        bad "mpcc on $n layers: $(head -n 1 "$tmp/d$n.err")"
    t1=$(date +%s%N)
    psize[$n]=$(awk '/^\/\* ==== model /{f=1} f' "$tmp/d$n.c" | wc -c)
    nloops[$n]=$(grep -c "for (int l = 0; l < $n; l++)" "$tmp/d$n.c")
    echo "$n layers: mpcc $(secs "$t0" "$t1") s, model part ${psize[$n]} bytes, ${nloops[$n]} loops"
done
[ "${psize[10000]}" -le $((11 * psize[1000])) ] ||
    bad "10000 layers: the model's part is ${psize[10000]} bytes, more than 11 times 1000 layers' ${psize[1000]}: not linear"
[ "${nloops[10000]}" -ge 2 ] && [ "${nloops[10000]}" = "${nloops[1000]}" ] ||
    bad "10000 layers: ${nloops[10000]} loops over all copies, 1000 layers ${nloops[1000]}: expected the same (at least 2)"

# ---- 3. loops change nothing: bit for bit against --no-loop ---------------
model 12 "$tmp/d12.mp"
"$B/idx2npy" --limit 64 ../shared/data/mnist/train-images-idx3-ubyte.gz "$tmp/x.npy" >/dev/null &&
    "$B/idx2npy" --limit 64 ../shared/data/mnist/train-labels-idx1-ubyte.gz "$tmp/y.npy" >/dev/null ||
    { echo "FAIL: idx2npy"; exit 1; }
DATA=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --no-shuffle --steps 4)
run() {   # run BIN NAME: train, save, predict a value inside the repeat
    "$1" "${DATA[@]}" --save "$tmp/$2.st" --log "$tmp/$2.jsonl" >/dev/null 2>"$tmp/$2.err" &&
        "$1" --init "$tmp/$2.st" --predict image="$tmp/x.npy" --output layers.7.res.h \
            --out "$tmp/$2.pred.npy" >/dev/null 2>>"$tmp/$2.err" ||
        bad "$2: $(tail -n 1 "$tmp/$2.err")"
}
same() {   # same A B: the runs A and B are bit-identical
    for f in st pred.npy; do
        cmp -s "$tmp/$1.$f" "$tmp/$2.$f" || bad "$1 and $2 differ ($f)"
    done
    cmp -s <(sed 's/"samples_per_s":[0-9.e+]*//' "$tmp/$1.jsonl") \
        <(sed 's/"samples_per_s":[0-9.e+]*//' "$tmp/$2.jsonl") || bad "$1 and $2 log different losses"
}
for p in float32 mixed_float16 mixed_bfloat16; do
    build_trainer "$tmp/d12.mp" "$tmp/loop.$p" --precision "$p" -- -O1 || { bad "build $p"; continue; }
    build_trainer "$tmp/d12.mp" "$tmp/flat.$p" --precision "$p" --no-loop -- -O1 || { bad "build $p --no-loop"; continue; }
    grep -q "for (int l = 0; l < 12; l++)" "$tmp/loop.$p.c" || bad "$p: no loop over the 12 copies"
    ! grep -q "mp_loop0" "$tmp/flat.$p.c" || bad "$p: --no-loop still wrote a loop"
    run "$tmp/loop.$p" "loop.$p"
    run "$tmp/flat.$p" "flat.$p"
    same "loop.$p" "flat.$p"
done
emu_trainer "$tmp/d12.mp" "$tmp/emu.loop"; rc=$?
if [ $rc = 0 ] && emu_trainer "$tmp/d12.mp" "$tmp/emu.flat" --no-loop; then
    grep -q "mp_loop0" "$tmp/emu.loop.cu" || bad "CUDA: no loop over the copies"
    run "$tmp/emu.loop" emu.loop
    run "$tmp/emu.flat" emu.flat
    same emu.loop emu.flat
elif [ $rc = 1 ]; then
    bad "the CUDA program does not build for the CPU stand-in"
fi

[ $fail = 0 ] && echo "PASS: t_repeat_scale"
exit $fail
