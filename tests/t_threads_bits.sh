#!/usr/bin/env bash
# t_threads_bits.sh - a trainer's results do not depend on OMP_NUM_THREADS.
# examples/char_transformer.mp (B*T = 1024 rows of width 64: products of
# K = 64 shared by rows, weight gradients 256x64x1024, 64x256x1024 and
# 65x64x1024 shared along K by runtime/mp_kernels_gemm.h's mp_gemm_ksplit) is built with -fopenmp and
# trained a few steps on 1, 2 and 3 threads, in float32 (A read in place
# by the micro-kernel) and mixed_bfloat16 (A packed); checkpoints and
# logged losses must agree bit for bit. The unit test test_threads_same_bits
# checks the same of single kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp
# Threads sleep rather than spin while waiting (a shared machine; results
# do not depend on it).
export OMP_WAIT_POLICY=passive
$PY - "$tmp" <<'EOF' || exit 1
import os, sys
import numpy as np
sys.path.insert(0, "tests/py")
import data
x, y = data.shakespeare_vocab(64, 48, stride=211)
np.save(os.path.join(sys.argv[1], "x.npy"), x)
np.save(os.path.join(sys.argv[1], "y.npy"), y)
np.random.RandomState(7).randint(0, 65, 4096).astype("<u2").tofile(os.path.join(sys.argv[1], "tok.bin"))
EOF
for prec in float32 mixed_bfloat16; do
    bin=$tmp/ct_$prec
    build_trainer examples/char_transformer.mp "$bin" --precision $prec -- -O2 -march=native -fopenmp ||
        { fail=1; continue; }
    for th in 1 2 3; do
        OMP_NUM_THREADS=$th "$bin" --data tokens="$tmp/x.npy" --data targets="$tmp/y.npy" \
            --steps 4 --seed 5 --log "$tmp/$prec.$th.jsonl" --log-every 1 \
            --save "$tmp/$prec.$th.safetensors" >"$tmp/$prec.$th.out" 2>&1 ||
            { bad "$prec on $th threads:"; tail -n 3 "$tmp/$prec.$th.out"; continue; }
        [ $th -eq 1 ] && continue
        $PY tests/py/same.py ckpt "$tmp/$prec.$th.safetensors" "$tmp/$prec.1.safetensors" ||
            bad "$prec: checkpoint on $th threads differs from 1 thread"
        $PY tests/py/same.py log "$tmp/$prec.$th.jsonl" "$tmp/$prec.1.jsonl" ||
            bad "$prec: log on $th threads differs from 1 thread"
    done
    echo "ok $prec"
done
# examples/gpt2.mp with a width of 576 (> MP_CHUNK: the embedding gradient's
# scatter into wte's gradient is split across threads by columns) and its
# tied lm_head (a product reading wte transposed in place, whose gradient
# adds into the same buffer): float32, 1 and 2 threads, the same bits. In
# mixed_bfloat16 the embedding gradient is a bf16 tensor whose rows the
# threads share (runtime mp_embedding_dw_rows): the same bits too.
sed -e 's/^const B = .*/const B = 4/' -e 's/^const T = .*/const T = 16/' -e 's/^const D = .*/const D = 576/' \
    -e 's/^const L = .*/const L = 1/' -e 's/^const P = .*/const P = 0.0/' examples/gpt2.mp >"$tmp/g.mp"
for prec in float32 mixed_bfloat16; do
    bin=$tmp/g_$prec
    build_trainer "$tmp/g.mp" "$bin" --precision $prec -- -O2 -march=native -fopenmp ||
        { fail=1; continue; }
    for th in 1 2; do
        OMP_NUM_THREADS=$th "$bin" --data seq="$tmp/tok.bin" --no-shuffle --steps 3 \
            --log "$tmp/g_$prec.$th.jsonl" --log-every 1 --save "$tmp/g_$prec.$th.safetensors" \
            >"$tmp/g_$prec.$th.out" 2>&1 || { bad "gpt2 $prec on $th threads:"; tail -n 3 "$tmp/g_$prec.$th.out"; }
    done
    if [ $prec = float32 ]; then
        grep -q "mp_k_embedding_dw_acc(mp_params\[0\].grad" "$bin.c" ||
            bad "gpt2: wte's embedding gradient does not add into its gradient buffer"
    fi
    $PY tests/py/same.py ckpt "$tmp/g_$prec.2.safetensors" "$tmp/g_$prec.1.safetensors" ||
        bad "gpt2 $prec: checkpoint on 2 threads differs from 1 thread"
    echo "ok gpt2 $prec (tied wte)"
done
[ $fail -eq 0 ] && echo "PASS t_threads_bits" || echo "FAIL t_threads_bits"
exit $fail
