#!/usr/bin/env bash
# t_window.sh - window inputs (TRAINER.md "Window inputs") end to end, in the
# generated C program and in the CUDA program on the CPU stand-in.
# tests/models/window_ids.mp's loss is the mean offset of its batch's rows
# plus 4 (the stream's values equal their index), so the logged losses say
# which windows each step trained on:
#   1. shuffled: every offset in [0, N - W], both ends of the range reached,
#      a .npy and a raw .bin stream give the same steps;
#   2. --no-shuffle: the evaluation windows in order, one per batch row,
#      wrapping to offset 0 inside a batch;
#   3. --eval: floor((N - W) / (W - 1)) + 1 windows at offsets 0, W-1, ...
#      (the eval loss is their mean offset + 4, for three stream lengths);
#   4. --resume: 20 straight steps == 10, save, resume to 20, bit for bit;
#   5. refusals: a stream shorter than a window, of the wrong type, an id
#      out of range; exit 1 and one line naming the file;
#   6. the CUDA program (tests/cuda/mp_cuda_emu.h) logs the C program's
#      losses, shuffled and not (skipped without a C++ compiler).
set -u
cd "$(dirname "$0")/.."
MPCC=${MPCC:-./mpcc}
PY=/usr/bin/python3
CXX=${CXX:-$(command -v g++ || command -v c++ || true)}
. tests/py/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# gen BATCH TARGET OUT: window_ids with batch BATCH
gen() {
    sed "s/^const B = 1\$/const B = $1/" tests/models/window_ids.mp > "$tmp/w$1.mp" &&
        "$MPCC" "$tmp/w$1.mp" --target "$2" -o "$3" && grep -q '{"seq", .*NULL, NULL, 1, [01], ' "$3" ||
        { echo "mpcc does not make $3 a program with a window input"; return 1; }
}
for b in 1 5; do
    gen $b c "$tmp/w$b.c" && cc -O1 -o "$tmp/w$b" "$tmp/w$b.c" -lm || { echo "FAIL: window_ids B=$b does not build"; exit 1; }
done

"$PY" - "$tmp" <<'EOF' || { echo "FAIL: writing the streams"; exit 1; }
import sys, numpy as np
t = sys.argv[1]
s = np.arange(1000, dtype='<i4')
np.save(f'{t}/s.npy', s)
s.tofile(f'{t}/s.bin')
for n in (100, 104, 105):
    np.save(f'{t}/e{n}.npy', np.arange(n, dtype='<i4'))
np.save(f'{t}/short.npy', s[:5])
np.save(f'{t}/s64.npy', s.astype(np.int64))
b = s.copy(); b[700] = 1000
np.save(f'{t}/big_id.npy', b)
EOF

# losses LOG -> one loss per line
losses() { jsonl_field "$1" loss; }

# ---- 1. shuffled offsets ---------------------------------------------------
"$tmp/w1" --data seq="$tmp/s.npy" --steps 400 --log-every 1 --log "$tmp/a.jsonl" 2>"$tmp/err" || bad "w1 shuffled: $(tail -1 "$tmp/err")"
"$tmp/w1" --data seq="$tmp/s.bin" --steps 400 --log-every 1 --log "$tmp/b.jsonl" 2>"$tmp/err" || bad "w1 .bin: $(tail -1 "$tmp/err")"
[ "$(losses "$tmp/a.jsonl")" = "$(losses "$tmp/b.jsonl")" ] || bad ".npy and .bin streams trained on different windows"
losses "$tmp/a.jsonl" | "$PY" -c '
import sys
o = [float(l) - 4 for l in sys.stdin]
assert len(o) == 400, len(o)
assert all(abs(v - round(v)) < 0.05 for v in o), "a loss is not offset + 4"
r = [round(v) for v in o]
assert min(r) >= 0 and max(r) <= 991, (min(r), max(r))
assert min(r) < 40 and max(r) > 950, ("the range is not covered", min(r), max(r))
assert len(set(r)) > 300, len(set(r))
' || bad "shuffled window offsets"

# ---- 2. --no-shuffle: windows 0, 8, ..., 984 in order, wrapping ------------
"$tmp/w5" --data seq="$tmp/s.npy" --no-shuffle --steps 30 --log-every 1 --log "$tmp/n.jsonl" 2>"$tmp/err" || bad "w5 --no-shuffle: $(tail -1 "$tmp/err")"
losses "$tmp/n.jsonl" | "$PY" -c '
import sys
got = [float(l) for l in sys.stdin]
want = [sum(((5 * k + r) % 124) * 8 for r in range(5)) / 5 + 4 for k in range(30)]
assert len(got) == 30 and all(abs(g - w) < 0.05 for g, w in zip(got, want)), list(zip(got, want))
' || bad "--no-shuffle order (batch 25 spans the wrap: 960 .. 984, 0)"

# ---- 3. evaluation windows -------------------------------------------------
for nw in 100:12 104:12 105:13; do
    n=${nw%:*} k=${nw#*:}
    "$tmp/w1" --data seq="$tmp/s.npy" --eval seq="$tmp/e$n.npy" --steps 1 --log "$tmp/e.jsonl" 2>"$tmp/err" || bad "eval $n: $(tail -1 "$tmp/err")"
    got=$(last_eval "$tmp/e.jsonl" loss)
    "$PY" -c "import sys; sys.exit(abs($got - (8 * ($k - 1) / 2 + 4)) > 0.05)" ||
        bad "eval over $n values: loss $got, want the mean of $k windows' offsets + 4"
done

# ---- 4. resume exact ------------------------------------------------------
"$tmp/w5" --data seq="$tmp/s.bin" --steps 20 --log-every 1 --log "$tmp/r1.jsonl" --save "$tmp/r1.st" 2>"$tmp/err" || bad "straight: $(tail -1 "$tmp/err")"
"$tmp/w5" --data seq="$tmp/s.bin" --steps 10 --log-every 1 --log "$tmp/r2.jsonl" --save "$tmp/r2.st" 2>"$tmp/err" || bad "half: $(tail -1 "$tmp/err")"
"$tmp/w5" --data seq="$tmp/s.bin" --steps 20 --log-every 1 --log "$tmp/r2.jsonl" --resume "$tmp/r2.st" --save "$tmp/r3.st" 2>"$tmp/err" || bad "resume: $(tail -1 "$tmp/err")"
[ "$(losses "$tmp/r1.jsonl")" = "$(losses "$tmp/r2.jsonl")" ] || bad "resumed run's losses differ from the straight run's"
cmp -s "$tmp/r1.st" "$tmp/r3.st" || bad "resumed checkpoint differs from the straight run's"

# ---- 5. refusals -------------------------------------------------------------
refuse() {   # refuse FILE WORDS...
    local f=$1 out rc; shift
    out=$("$tmp/w1" --data seq="$tmp/$f" --steps 1 2>&1); rc=$?
    [ $rc = 1 ] || bad "$f: exit $rc, want 1"
    [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || bad "$f: more than one line: $out"
    for w in "$tmp/$f" "$@"; do
        case $out in *"$w"*) ;; *) bad "$f: '$w' not in: $out" ;; esac
    done
}
refuse short.npy "at least one window of 9 values" "holds 5"
refuse s64.npy "needs i32 (<i4)" "<i8 (int64" "a.astype(np.int32)"
refuse big_id.npy "value 700 of the stream" "1000 is outside [0, 1000)"

# ---- 6. the CUDA program ------------------------------------------------------
if [ -z "$CXX" ]; then
    echo "SKIP 6: no C++ compiler for the CUDA program's CPU stand-in"
elif gen 5 cuda "$tmp/w5.cu" &&
     "$CXX" -std=c++17 -O1 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h "$tmp/w5.cu" -o "$tmp/w5.emu" -lm 2>"$tmp/cxx.err"; then
    for mode in --no-shuffle --seed=7; do
        "$tmp/w5" --data seq="$tmp/s.npy" $mode --steps 25 --log-every 1 --log "$tmp/c.jsonl" 2>/dev/null
        "$tmp/w5.emu" --data seq="$tmp/s.npy" $mode --steps 25 --log-every 1 --log "$tmp/u.jsonl" 2>"$tmp/err" || bad "CUDA $mode: $(tail -1 "$tmp/err")"
        # within 1e-6 relative, not bit for bit: the CUDA program's means are
        # compensated f32 sums, the C program's double ones (a last-bit
        # difference); another window moves the loss by 1/(offset+4) > 1e-4
        paste -d' ' <(losses "$tmp/c.jsonl") <(losses "$tmp/u.jsonl") |
            awk 'NF != 2 || ($1 - $2) > 1e-6 * $1 || ($2 - $1) > 1e-6 * $1 { bad = 1 } END { exit bad || NR != 25 }' ||
            bad "CUDA program $mode: losses differ from the C program's"
    done
else
    bad "the CUDA window program does not build for the CPU: $(head -3 "$tmp/cxx.err")"
fi

[ $fail = 0 ] && echo "t_window: ok"
exit $fail
