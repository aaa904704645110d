#!/usr/bin/env bash
# t_for_scale.sh - a `for` loop's iterations run as a loop in the generated
# program (issue 19): a GRU cell written by hand (select on the time axis,
# one set of parameters shared by every step, stack after the loop) over
# T steps of an embedding, compiled at T = 16 and at T = 128:
#   1. the plan holds every step (its operations grow linearly with T: the
#      IR stays unrolled), but the generated program does not: the C and
#      the CUDA program at T = 128 are within 1% of their size at T = 16,
#      their forward and backward steps each one loop over a body function
#      whose per-step data (memplan offsets, the index of select) are
#      rules, not text; with every step written out (mpcc --no-loop) the
#      program grows with T (the check can fail);
#   2. the loops change nothing: at T = 16 the C program trained 4 steps
#      with and without --no-loop gives the same checkpoint and log, byte
#      for byte, under float32 and mixed_float16 (per-step data as rules:
#      steps, periods, first and last steps written out), and at T = 6
#      (too few steps for a rule: tables) under float32; so does the CUDA
#      program on the CPU stand-in at T = 16, whose parameters equal the C
#      program's within 1e-5 relative under float32.
# Counts and bytes, never seconds; the figures are printed.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/py/lib.sh
. tests/py/lib.sh
test_tmp

model() {   # model T FILE
    cat >"$2" <<EOF2
model for_scale
const B = 4
const T = $1
const V = 16
const E = 8
const H = 12
input tokens: i32[B, T]
input label: i32[B]
x = embedding(tokens, V, E, name = "embed")
h = zeros([B, H])
for t in 0 .. T {
  xt = select(x, 1, t)
  z = sigmoid(linear(xt, H, name = "xz") + linear(h, H, name = "hz"))
  r = sigmoid(linear(xt, H, name = "xr") + linear(h, H, name = "hr"))
  c = tanh(linear(xt, H, name = "xc") + linear(r * h, H, name = "hc"))
  h = (1 - z) * c + z * h
}
s = stack([h, tanh(h)], axis = 1)
logits: f32 = linear(reshape(s, [B, 2 * H]), 2, name = "head")
loss = cross_entropy(logits, label)

train {
  optimizer = adam(lr = 1e-2)
  minimize loss
}
EOF2
}

# loops FILE T: the loops over at least T - 4 of the T steps
loops() { grep -Ec "for \(int l = 0; l < ($(seq -s '|' $(($2 - 4)) "$2")); l\+\+\)" "$1"; }

# ---- 1. the program is flat in T, the plan is not --------------------------
declare -A size ops
for T in 16 128; do
    model "$T" "$tmp/t$T.mp"
    ops[$T]=$("$MPCC" "$tmp/t$T.mp" --dump-plan=json |
        $PY -c 'import json, sys; print(len(json.load(sys.stdin)["nodes"]))') ||
        { echo "FAIL: mpcc --dump-plan failed at T = $T"; exit 1; }
    for target in c cuda; do
        for how in loop flat; do
            opt=(); [ $how = flat ] && opt=(--no-loop)
            "$MPCC" "$tmp/t$T.mp" --target $target "${opt[@]}" -o "$tmp/t$T.$how.$target" ||
                { echo "FAIL: mpcc --target $target ${opt[*]} failed at T = $T"; exit 1; }
            size[$T.$how.$target]=$(wc -c <"$tmp/t$T.$how.$target")
        done
        n=$(loops "$tmp/t$T.loop.$target" "$T")
        [ "$n" -ge 2 ] || bad "the $target program at T = $T has $n loops over the steps, expected the forward and the backward pass"
        ! grep -q mp_loop0 "$tmp/t$T.flat.$target" || bad "--no-loop still wrote a loop ($target, T = $T)"
    done
done
echo "the plan: ${ops[16]} operations at T = 16, ${ops[128]} at T = 128 (the IR is unrolled: linear in T)"
[ "${ops[128]}" -gt $((4 * ops[16])) ] || bad "the plan does not grow with T: is the model unrolled at all?"
for target in c cuda; do
    a=${size[16.loop.$target]} b=${size[128.loop.$target]} fa=${size[16.flat.$target]} fb=${size[128.flat.$target]}
    echo "the $target program: $a bytes at T = 16, $b at T = 128; with --no-loop $fa and $fb"
    if [ $((b - a)) -le $((a / 100)) ] && [ $((a - b)) -le $((a / 100)) ]; then
        echo "ok   the $target program is flat in T (within 1%)"
    else
        bad "the $target program grows with T: $a bytes at T = 16, $b at T = 128"
    fi
    [ "$fb" -gt $((2 * fa)) ] || bad "the $target program with --no-loop does not grow with T: the check cannot tell"
done

# ---- 2. the loops change nothing ------------------------------------------
model 6 "$tmp/t6.mp"
for T in 16 6; do
    "$MPCC" "$tmp/t$T.mp" --dump-plan=json >"$tmp/t$T.json" && mkdir -p "$tmp/data$T" &&
        $PY tests/py/synth_data.py "$tmp/t$T.json" "$tmp/t$T.mp" "$tmp/data$T" 4 >"$tmp/data$T.args" ||
        { echo "FAIL: synth_data.py"; exit 1; }
done
run() {   # run BIN NAME [T]: train 4 steps on T's data (16), save
    local data
    read -ra data <"$tmp/data${3:-16}.args"
    "$1" "${data[@]}" --no-shuffle --steps 4 --save "$tmp/$2.st" --log "$tmp/$2.jsonl" >/dev/null 2>"$tmp/$2.err" ||
        bad "$2: $(tail -n 1 "$tmp/$2.err")"
}
same() {   # same A B: the runs A and B are bit-identical (else 1)
    cmp -s "$tmp/$1.st" "$tmp/$2.st" || { bad "$1 and $2 differ (checkpoint)"; return 1; }
    cmp -s <(sed 's/"samples_per_s":[0-9.e+]*//' "$tmp/$1.jsonl") \
        <(sed 's/"samples_per_s":[0-9.e+]*//' "$tmp/$2.jsonl") || { bad "$1 and $2 log different losses"; return 1; }
}
for p in float32 mixed_float16; do
    build_trainer "$tmp/t16.mp" "$tmp/loop.$p" --precision "$p" -- -O0 || { bad "build $p"; continue; }
    build_trainer "$tmp/t16.mp" "$tmp/flat.$p" --precision "$p" --no-loop -- -O0 || { bad "build $p --no-loop"; continue; }
    run "$tmp/loop.$p" "loop.$p"
    run "$tmp/flat.$p" "flat.$p"
    same "loop.$p" "flat.$p" && echo "ok   $p: the C program's loops give the bits of every step written out"
done
if build_trainer "$tmp/t6.mp" "$tmp/loop6" --precision float32 -- -O0 &&
    build_trainer "$tmp/t6.mp" "$tmp/flat6" --precision float32 --no-loop -- -O0; then
    grep -q "mp_loop[0-9]*_at\[l\]" "$tmp/loop6.c" || bad "T = 6: no loop reads a table"
    run "$tmp/loop6" loop6 6
    run "$tmp/flat6" flat6 6
    same loop6 flat6 && echo "ok   T = 6, float32: loops with tables give the bits of every step written out"
else
    bad "build T = 6"
fi
emu_trainer "$tmp/t16.mp" "$tmp/emu.loop" --precision float32; rc=$?
if [ $rc = 0 ] && emu_trainer "$tmp/t16.mp" "$tmp/emu.flat" --precision float32 --no-loop; then
    run "$tmp/emu.loop" emu.loop
    run "$tmp/emu.flat" emu.flat
    same emu.loop emu.flat && echo "ok   float32: the CUDA program's (CPU stand-in) loops give the bits of every step written out"
    if msg=$($PY tests/py/st.py close "$tmp/loop.float32.st" "$tmp/emu.loop.st" 1e-5); then
        echo "ok   the CUDA program against the C program: $msg"
    else
        bad "the CUDA program's parameters differ from the C program's: $msg"
    fi
elif [ $rc = 1 ]; then
    bad "the CUDA program does not build for the CPU stand-in"
fi

[ $fail = 0 ] && echo "PASS: t_for_scale"
exit $fail
