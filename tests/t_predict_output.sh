#!/usr/bin/env bash
# t_predict_output.sh - the value --predict writes (TRAINER.md "Additions for
# the architectures users bring"):
#   - a loss that is one loss operation (tests/models/gate.mp: mse(y, ...)):
#     --output defaults to the value the loss is computed from (y), --help
#     says so, and --predict without --output writes it ([N, 16]);
#   - a loss made of several operations (tests/models/two_losses.mp:
#     cross_entropy + 0.1 * mse): no default; --predict without --output is
#     a usage error (exit 2) listing the names --output can take (the values
#     with one row per sample: h, logits, reg), before any file is written;
#     --help lists them and says there is no default; --output reg works;
#   - values around an attention that reads and writes [B, T, H, D] in
#     place (tests/gradcheck/gc_attention_layouts.mp, sema.c
#     fold_attention_layouts): y, whose transpose the op took, is still
#     written [B, H, T, D] (z, its transpose reshaped, agrees), and c, the
#     name of a transpose the op took over, is NumPy's attention of the q,
#     k, v values written;
#   - chunks attention reads in place (tests/gradcheck/gc_attention_chunk.mp,
#     ir.h ir_chunk_view): each part (and heads, a reshape of one) written
#     as its columns of the tensor it was cut from, by the C program and the
#     CUDA program's stand-in.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

expect() {    # expect RC WHAT CMD...: exit status RC and WHAT on stderr
    local rc=$1 what=$2
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    [ "$got" = "$rc" ] && grep -qF -- "$what" "$tmp/err" ||
        bad "$* -> exit $got (expected $rc), stderr: $(head -c 300 "$tmp/err") (expected '$what')"
}
rows() {      # rows FILE.npy: its shape, as "N,D"
    $PY -c 'import numpy as np, sys; print(",".join(map(str, np.load(sys.argv[1]).shape)))' "$1"
}

for n in gate two_losses; do
    build_trainer "tests/models/$n.mp" "$tmp/$n" -- -O1 || { bad "$n does not build"; continue; }
    read -r -a pairs <<<"$($PY tests/py/data.py --random "tests/models/$n.mp" "$tmp/$n.data" 40)"
    data=() pred=()
    for p in "${pairs[@]}"; do data+=(--data "$p"); pred+=(--predict "$p"); done
    "$tmp/$n" "${data[@]}" --steps 2 --save "$tmp/$n.st" >"$tmp/$n.train" 2>&1 ||
        bad "$n: training failed: $(tail -n 2 "$tmp/$n.train")"
    "$tmp/$n" --help >"$tmp/$n.help" 2>&1 || bad "$n: --help failed"
done

# one loss operation: the default is the loss's input
grep -qF -- "the value --predict writes (default: y)" "$tmp/gate.help" || bad "gate: --help does not name the default y"
grep -qF -- "--output can take (the values with one row per sample): a, b, h, y" "$tmp/gate.help" ||
    bad "gate: --help does not list the values: $(grep -F -- '--output' "$tmp/gate.help")"
expect 0 "wrote $tmp/g.npy: 'y' of 40 samples" "$tmp/gate" --init "$tmp/gate.st" \
    --predict x="$tmp/gate.data/x.npy" --out "$tmp/g.npy"
[ "$(rows "$tmp/g.npy")" = "40,16" ] || bad "gate: --predict wrote shape $(rows "$tmp/g.npy"), not 40,16"

# several operations: no default
grep -qF -- "the value --predict writes (default: none: the loss is not one loss operation)" \
    "$tmp/two_losses.help" || bad "two_losses: --help does not say there is no default"
grep -qF -- "--output can take (the values with one row per sample): h, logits, reg" "$tmp/two_losses.help" ||
    bad "two_losses: --help does not list the values: $(grep -F -- '--output' "$tmp/two_losses.help")"
expect 2 "--predict needs --output VALUE: the loss is not one loss operation, so there is no default (--output can take: h, logits, reg)" \
    "$tmp/two_losses" --init "$tmp/two_losses.st" --predict x="$tmp/two_losses.data/x.npy" --out "$tmp/t.npy"
[ -e "$tmp/t.npy" ] && bad "two_losses: the refused --predict wrote its --out file"
expect 0 "wrote $tmp/t.npy: 'reg' of 40 samples" "$tmp/two_losses" --init "$tmp/two_losses.st" \
    --predict x="$tmp/two_losses.data/x.npy" --out "$tmp/t.npy" --output reg
[ "$(rows "$tmp/t.npy")" = "40,2" ] || bad "two_losses: --output reg wrote shape $(rows "$tmp/t.npy"), not 40,2"

# attention's layouts: the values keep their shapes and contents
n=gc_attention_layouts
if build_trainer "tests/gradcheck/$n.mp" "$tmp/$n" -- -O1; then
    read -r -a pairs <<<"$($PY tests/py/data.py --random "tests/gradcheck/$n.mp" "$tmp/$n.data" 6)"
    data=() pred=()
    for p in "${pairs[@]}"; do data+=(--data "$p"); pred+=(--predict "$p"); done
    "$tmp/$n" "${data[@]}" --steps 1 --save "$tmp/$n.st" >"$tmp/$n.train" 2>&1 ||
        bad "$n: training failed: $(tail -n 2 "$tmp/$n.train")"
    for v in y z c q k v; do
        expect 0 "'$v' of 6 samples" "$tmp/$n" --init "$tmp/$n.st" "${pred[@]}" --out "$tmp/$n.$v.npy" --output $v
    done
    $PY - "$tmp/$n" <<'PYEOF' || bad "$n: the values around the attention disagree (above)"
import numpy as np, sys
p = sys.argv[1]
y, z, c, q, k, v = (np.load("%s.%s.npy" % (p, n)) for n in "yzcqkv")
ok = y.shape == (6, 2, 3, 4) and c.shape == (6, 3, 2, 4) and q.shape == (6, 2, 3, 4) and k.shape == (6, 2, 5, 4)
ok = ok and np.array_equal(z.reshape(6, 3, 2, 4).transpose(0, 2, 1, 3), y)
s = q @ k.transpose(0, 1, 3, 2) / 2.0
e = np.exp(s - s.max(-1, keepdims=True))
ref = ((e / e.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3)
err = float(np.abs(ref - c).max()) if c.shape == ref.shape else float("inf")
ok = ok and err < 1e-5
print("shapes y %s c %s q %s k %s; c from NumPy's attention %.2e" % (y.shape, c.shape, q.shape, k.shape, err))
sys.exit(0 if ok else 1)
PYEOF
else
    bad "$n does not build"
fi

# chunks attention reads in place (ir.h ir_chunk_view: views, no copy):
# each part is still written as its own value, equal to its columns of the
# tensor it was cut from (qkv, kv); g (a part read by a sum too) is a
# copy. The C program, and the CUDA program on the CPU (mp_cu_keep_rows),
# when a C++ compiler is there.
n=gc_attention_chunk
if build_trainer "tests/gradcheck/$n.mp" "$tmp/$n" -- -O1; then
    grep -q "a view of v[0-9]*_qkv: attention reads it in place" "$tmp/$n.c" ||
        bad "$n: q, k, v are not views of qkv in the C program"
    read -r -a pairs <<<"$($PY tests/py/data.py --random "tests/gradcheck/$n.mp" "$tmp/$n.data" 7)"
    data=() pred=()
    for p in "${pairs[@]}"; do data+=(--data "$p"); pred+=(--predict "$p"); done
    "$tmp/$n" "${data[@]}" --steps 1 --save "$tmp/$n.st" >"$tmp/$n.train" 2>&1 ||
        bad "$n: training failed: $(tail -n 2 "$tmp/$n.train")"
    progs=("$tmp/$n")
    emu_trainer "tests/gradcheck/$n.mp" "$tmp/$n.emu"
    case $? in
    0) grep -q "mp_cu_keep_rows" "$tmp/$n.emu.cu" || bad "$n: the CUDA program keeps no chunk view's rows"
       progs+=("$tmp/$n.emu") ;;
    1) bad "$n: the CUDA program does not build for the CPU" ;;
    esac
    for prog in "${progs[@]}"; do
        for v in qkv q heads k v kv a b g; do
            expect 0 "'$v' of 7 samples" "$prog" --init "$tmp/$n.st" "${pred[@]}" --out "$prog.$v.npy" --output $v
        done
        $PY - "$prog" <<'PYEOF' || bad "$prog: the chunks' values are not their columns (above)"
import numpy as np, sys
p = sys.argv[1]
val = {n: np.load("%s.%s.npy" % (p, n)) for n in ("qkv", "q", "heads", "k", "v", "kv", "a", "b", "g")}
ok = val["qkv"].shape == (7, 3, 24) and val["kv"].shape == (7, 5, 16) and val["g"].shape == (7, 3, 8)
for n, src, at in (("q", "qkv", 0), ("k", "qkv", 8), ("v", "qkv", 16), ("a", "kv", 0), ("b", "kv", 8)):
    ok = ok and np.array_equal(val[n], val[src][:, :, at:at + 8])
ok = ok and val["heads"].shape == (7, 3, 2, 4) and np.array_equal(val["heads"], val["q"].reshape(7, 3, 2, 4))
print("%s: q, heads, k, v, a, b %s their columns of qkv, kv" % (p.rsplit("/", 1)[-1], "are" if ok else "are NOT"))
sys.exit(0 if ok else 1)
PYEOF
    done
else
    bad "$n does not build"
fi

[ $fail = 0 ] && echo "PASS: t_predict_output" || echo "FAIL: t_predict_output"
exit $fail
