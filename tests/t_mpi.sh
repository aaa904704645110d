#!/usr/bin/env bash
# run_all: once (the trainer's process behaviour, which fusion does not change: make test-nofuse skips it)
# t_mpi.sh - data parallel (TRAINER.md "Data parallel", runtime/mp_dist.h):
# the C program built with mpicc -DMP_USE_MPI, run by mpirun on this machine.
#   1. 2 and 3 ranks (and 2 ranks x accumulate 2) against one process with
#      accumulate x N, same seed: every logged step's loss to 1e-6 relative,
#      the final parameters to 1e-6 of their magnitude, evaluation numbers
#      identical; the plain build references no MPI symbol.
#      A model with batch norm (statistics per rank, as in DDP), dropout,
#      clipping and Nesterov momentum: trainable parameters and losses as
#      one process's; the run's final evaluation (rank 0's statistics on
#      every rank) equals a --steps 0 evaluation of its checkpoint.
#   2. mixed_float16, one sample that overflows f16 in the micro-batch of
#      rank 1 only: the step is skipped on every rank, as by one process.
#   3. --resume with the same N is bit-exact; with another N (or a
#      one-process checkpoint on 2 ranks) training on is refused with exit 1.
#   4. Only rank 0 writes: one log, one checkpoint, one export, one
#      TensorBoard file, one summary line; --steps 0 --eval of a checkpoint
#      on 2 and 3 ranks gives one process's numbers, bit for bit.
#   5. Errors: a refused --save path (rank 0 alone sees it) ends the job
#      with exit 2; bad labels (every rank) with exit 1, messages "rank R: ".
#   6. SIGTERM to the ranks (as a scheduler sends it): exit 143, they stop
#      after the same step, one checkpoint, resume = uninterrupted.
#   7. The CUDA program through the CPU stand-in (tests/cuda/mp_cuda_emu.h)
#      with its stand-in NCCL on 2 ranks: the C program's numbers; under
#      mixed_float8 (amaxes reduced by NCCL's max) one process's with
#      accumulate 2.
# Skipped (with a message) only when mpicc or mpirun is missing.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
    { echo "SKIP: no mpicc / mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 0; }
test_tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi() { local n=$1; shift; mpirun --oversubscribe -np "$n" "$@"; }

$PY - "$tmp" <<'PYEOF' || exit 1
import sys
sys.path.insert(0, "tests/py")
import data, numpy as np
x, y = data.digits()
d = sys.argv[1]
np.save(d + "/x.npy", x[:1024]); np.save(d + "/y.npy", y[:1024])
np.save(d + "/ex.npy", x[1280:]); np.save(d + "/ey.npy", y[1280:])   # 517: a partial last batch
big = x[:1024].copy(); big[16] = 1e7      # batch 1 of --no-shuffle: rank 1's at step 1
np.save(d + "/xbig.npy", big)
bad = y[:1024].copy(); bad[700] = 12
np.save(d + "/ybad.npy", bad)
PYEOF
D=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --eval image="$tmp/ex.npy"
   --eval label="$tmp/ey.npy" --log-every 1 --steps 24)

# variant A OUT [mpcc options]: dp_mlp.mp with accumulate A, plain build
variant() {
    local a=$1 out=$2; shift 2
    sed "s/accumulate     = 1/accumulate     = $a/" tests/models/dp_mlp.mp >"$out.mp"
    build_trainer "$out.mp" "$out" "$@"
}
# mpi_trainer MODEL OUT [mpcc options]: the MPI build
mpi_trainer() {
    local model=$1 out=$2; shift 2
    "$MPCC" "$model" --target c "$@" -o "$out.c" && mpicc -O2 -DMP_USE_MPI -o "$out" "$out.c" -lm ||
        { echo "FAIL: the MPI build of $model"; exit 1; }
}
same_run() {   # same_run WHAT ONE.jsonl N.jsonl ONE.st N.st
    $PY tests/py/dp.py log "$2" "$3" || bad "$1: logs differ"
    $PY tests/py/dp.py ckpt "$4" "$5" || bad "$1: checkpoints differ"
}

echo "== 1. N ranks = one process with accumulate x N"
mpi_trainer tests/models/dp_mlp.mp "$tmp/dp"
variant 2 "$tmp/acc2" && variant 3 "$tmp/acc3" && variant 4 "$tmp/acc4" || exit 1
build_trainer tests/models/dp_mlp.mp "$tmp/plain" || exit 1
nm "$tmp/plain" | grep -qi ' mpi_' && bad "the build without -DMP_USE_MPI references MPI"
for n in 2 3; do
    "$tmp/acc$n" "${D[@]}" --log "$tmp/one$n.jsonl" --save "$tmp/one$n.st" 2>/dev/null || bad "accumulate $n failed"
    mpi "$n" "$tmp/dp" "${D[@]}" --log "$tmp/n$n.jsonl" --save "$tmp/n$n.st" 2>"$tmp/n$n.err" ||
        { bad "$n ranks failed: $(tail -n 3 "$tmp/n$n.err")"; continue; }
    same_run "$n ranks" "$tmp/one$n.jsonl" "$tmp/n$n.jsonl" "$tmp/one$n.st" "$tmp/n$n.st"
done
variant 2 "$tmp/dp2" >/dev/null && mpi_trainer "$tmp/dp2.mp" "$tmp/dpa2"
"$tmp/acc4" "${D[@]}" --log "$tmp/one4.jsonl" --save "$tmp/one4.st" 2>/dev/null || bad "accumulate 4 failed"
mpi 2 "$tmp/dpa2" "${D[@]}" --log "$tmp/a2.jsonl" --save "$tmp/a2.st" 2>/dev/null || bad "2 ranks x accumulate 2 failed"
same_run "2 ranks x accumulate 2" "$tmp/one4.jsonl" "$tmp/a2.jsonl" "$tmp/one4.st" "$tmp/a2.st"

# (2 ranks x accumulate 2 against accumulate 4 differs here by the rounding
# of the other order of the gradient sum, 2e-7 after one step, amplified to
# 1e-4 by 8 steps of this batch-normalised conv; 2 x 1 against 2 is exact)
echo "== 1. batch norm (statistics per rank), dropout, clipping: 2 ranks = accumulate 2"
mnist_first train 512 "$tmp/mx.npy" "$tmp/my.npy" && mnist_first t10k 200 "$tmp/mex.npy" "$tmp/mey.npy" || exit 1
M=(--data image="$tmp/mx.npy" --data label="$tmp/my.npy" --eval image="$tmp/mex.npy" --eval label="$tmp/mey.npy"
   --log-every 1 --steps 8)
sed "s/accumulate     = 2/accumulate     = 1/" tests/models/resume_accum.mp >"$tmp/bn1.mp"
build_trainer tests/models/resume_accum.mp "$tmp/bn4" && mpi_trainer "$tmp/bn1.mp" "$tmp/bn" || exit 1
"$tmp/bn4" "${M[@]}" --log "$tmp/bn1.jsonl" --save "$tmp/bn1.st" 2>/dev/null || bad "batch norm, one process failed"
mpi 2 "$tmp/bn" "${M[@]}" --log "$tmp/bn2.jsonl" --save "$tmp/bn2.st" 2>/dev/null || bad "batch norm, 2 ranks failed"
grep -v eval "$tmp/bn1.jsonl" >"$tmp/bn1t.jsonl"; grep -v eval "$tmp/bn2.jsonl" >"$tmp/bn2t.jsonl"
$PY tests/py/dp.py log "$tmp/bn1t.jsonl" "$tmp/bn2t.jsonl" || bad "batch norm: losses differ"
$PY tests/py/dp.py ckpt "$tmp/bn1.st" "$tmp/bn2.st" 1e-6 running_mean,running_var || bad "batch norm: parameters differ"
# the evaluation at the end used rank 0's statistics on both ranks: its checkpoint's
mpi 2 "$tmp/bn" "${M[@]:4:4}" --steps 0 --resume "$tmp/bn2.st" --log "$tmp/bne.jsonl" 2>/dev/null || bad "batch norm eval failed"
[ -n "$(grep eval "$tmp/bne.jsonl")" ] && [ "$(grep eval "$tmp/bne.jsonl" | sed 's/"step":[0-9]*,//')" = "$(grep eval "$tmp/bn2.jsonl" | sed 's/"step":[0-9]*,//')" ] ||
    bad "batch norm: the run's evaluation is not its checkpoint's: $(grep eval "$tmp/bn2.jsonl") vs $(grep eval "$tmp/bne.jsonl")"

echo "== 2. mixed_float16: an overflow on rank 1 skips the step on both"
variant 2 "$tmp/h2" --precision mixed_float16 || exit 1
mpi_trainer tests/models/dp_mlp.mp "$tmp/hdp" --precision mixed_float16
H=(--data image="$tmp/xbig.npy" --data label="$tmp/y.npy" --no-shuffle --log-every 1 --steps 6)
"$tmp/h2" "${H[@]}" --log "$tmp/h1.jsonl" --save "$tmp/h1.st" 2>/dev/null || bad "f16 one process failed"
mpi 2 "$tmp/hdp" "${H[@]}" --log "$tmp/hn.jsonl" --save "$tmp/hn.st" 2>"$tmp/hn.err" || bad "f16 on 2 ranks failed"
same_run "mixed_float16 overflow" "$tmp/h1.jsonl" "$tmp/hn.jsonl" "$tmp/h1.st" "$tmp/hn.st"
[ "$(jsonl_field "$tmp/hn.jsonl" skipped | head -n 1)" = 1 ] || bad "step 1 was not skipped on 2 ranks"
grep -q "1 skipped" "$tmp/hn.err" || bad "the summary does not report the skipped step"

echo "== 3. --resume: exact with the same N, refused with another"
mpi 2 "$tmp/dp" "${D[@]}" --steps 10 --save "$tmp/r.st" --log "$tmp/r.jsonl" 2>/dev/null &&
    mpi 2 "$tmp/dp" "${D[@]}" --resume "$tmp/r.st" --save "$tmp/r.st" --log "$tmp/r.jsonl" 2>/dev/null ||
    bad "2 ranks: stop at 10 and resume failed"
$PY tests/py/same.py ckpt "$tmp/n2.st" "$tmp/r.st" || bad "resumed on 2 ranks: checkpoint differs"
$PY tests/py/same.py log "$tmp/n2.jsonl" "$tmp/r.jsonl" || bad "resumed on 2 ranks: log differs"
refused() {   # refused WHAT WANT-TEXT command...
    local what=$1 want=$2 rc; shift 2
    "$@" >"$tmp/ref.out" 2>&1; rc=$?
    if [ $rc = 1 ] && grep -q "$want" "$tmp/ref.out"; then echo "ok   $what: $(grep -m1 "$want" "$tmp/ref.out")"
    else bad "$what: exit $rc, want 1 and '$want': $(tail -n 2 "$tmp/ref.out")"; fi
}
refused "a 2-rank checkpoint on 3 ranks" "written by a run on 2 processes, this run has 3" \
    mpi 3 "$tmp/dp" "${D[@]}" --steps 30 --resume "$tmp/n2.st"
refused "a 2-rank checkpoint in one process" "written by a run on 2 processes, this run has 1" \
    "$tmp/plain" "${D[@]}" --steps 30 --resume "$tmp/n2.st"
"$tmp/plain" "${D[@]}" --steps 3 --save "$tmp/p1.st" 2>/dev/null || bad "one-process run failed"
refused "a one-process checkpoint on 2 ranks" "written by a run on 1 process, this run has 2" \
    mpi 2 "$tmp/dp" "${D[@]}" --resume "$tmp/p1.st"

echo "== 4. only rank 0 writes; evaluation on 2 and 3 ranks = one process"
mkdir -p "$tmp/out"
mpi 2 "$tmp/dp" "${D[@]}" --steps 5 --save "$tmp/out/ck.st" --log "$tmp/out/log.jsonl" \
    --export "$tmp/out/w.st" --tensorboard "$tmp/out/tb" 2>"$tmp/out.err" || bad "2 ranks with every output failed"
files=$(cd "$tmp/out" && find . -type f | sort | tr '\n' ' ')
case $files in "./ck.st ./log.jsonl ./tb/events.out.tfevents."*" ./w.st ") echo "ok   files: $files" ;;
    *) bad "files written: $files (want ck.st log.jsonl one tb event file w.st)" ;; esac
[ "$(grep -c '"step"' "$tmp/out/log.jsonl")" = 6 ] || bad "the log has $(wc -l <"$tmp/out/log.jsonl") lines, want 6"
[ "$(grep -c '^done:' "$tmp/out.err")" = 1 ] || bad "$(grep -c '^done:' "$tmp/out.err") summary lines, want 1"
[ "$(grep -c '^step 5/5' "$tmp/out.err")" = 1 ] || bad "the last step is logged $(grep -c '^step 5/5' "$tmp/out.err") times"
# (a checkpoint of any N evaluates on any N: no data order is continued)
E=(--eval image="$tmp/ex.npy" --eval label="$tmp/ey.npy" --steps 0 --resume)
"$tmp/plain" "${E[@]}" "$tmp/one2.st" --log "$tmp/e1.jsonl" 2>/dev/null || bad "eval in one process failed"
for n in 2 3; do
    "$tmp/plain" "${E[@]}" "$tmp/n$n.st" --log "$tmp/e1.$n.jsonl" 2>/dev/null || bad "eval in one process failed"
    mpi $n "$tmp/dp" "${E[@]}" "$tmp/one2.st" --log "$tmp/e$n.jsonl" 2>/dev/null || bad "eval on $n ranks failed"
    [ -n "$(grep eval "$tmp/e1.jsonl")" ] && [ "$(grep eval "$tmp/e$n.jsonl")" = "$(grep eval "$tmp/e1.jsonl")" ] ||
        bad "eval on $n ranks: $(grep eval "$tmp/e$n.jsonl") vs one process: $(grep eval "$tmp/e1.jsonl")"
    [ "$(grep eval "$tmp/e1.$n.jsonl")" = "$(grep eval "$tmp/n$n.jsonl")" ] ||
        bad "the $n-rank run's evaluation differs from one process's of its checkpoint"
done

echo "== 5. errors end the job with the documented code"
mpi 2 "$tmp/dp" "${D[@]}" --save "$tmp/no/such/dir/ck.st" >"$tmp/e.out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "^rank 0: dp: error: --save" "$tmp/e.out" || bad "refused --save: exit $rc: $(grep error "$tmp/e.out")"
mpi 2 "$tmp/dp" --data image="$tmp/x.npy" --data label="$tmp/ybad.npy" >"$tmp/e.out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "^rank [01]: dp: error: .*ybad.npy" "$tmp/e.out" || bad "bad labels: exit $rc: $(grep error "$tmp/e.out")"
echo "ok   errors: $(grep -h -m1 'error' "$tmp/e.out")"

echo "== 6. SIGTERM: all ranks stop after the same step, one checkpoint"
S=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --log-every 1 --steps 60)
mpi 2 "$tmp/dp" "${S[@]}" --save "$tmp/sfull.st" --log "$tmp/sfull.jsonl" 2>/dev/null || bad "uninterrupted run failed"
stop_run() {   # stop_run ranks: signal the ranks (Open MPI's mpirun, signalled
               # itself, forwards SIGTERM too but exits 1 on its own account)
               # while rank 0 is paused after step 20 (MPCC_TEST_PAUSE) and
               # rank 1 waits for it to agree on step 21
    local ck=$tmp/s$1.st log=$tmp/s$1.jsonl err=$tmp/s$1.err ranks r
    pause_start 20 mpirun --oversubscribe -x MPCC_TEST_PAUSE -np 2 "$tmp/dp" "${S[@]}" --save "$ck" --log "$log" 2>"$err"
    if ! pause_next || [ -n "$exit_rc" ]; then
        bad "SIGTERM to $1: rank 0 did not pause after step 20: $pause_line: $(tail -n 2 "$err")"; pause_end; return
    fi
    ranks=$(pgrep -P "$(ps -o ppid= -p "$paused_pid" | tr -d " ")" | tr "\n" " ")     # mpirun's children
    [ "$(echo $ranks | wc -w)" = 2 ] || bad "SIGTERM to $1: ranks '$ranks', want 2"
    for r in $ranks; do [ "$r" = "$paused_pid" ] || kill -TERM "$r"; done
    pause_signal TERM || bad "SIGTERM to $1: rank 0 did not catch it: $pause_line"
    pause_say run
    pause_next
    pause_end
    [ "$exit_rc" = 143 ] || bad "SIGTERM to the ranks: $pause_line, want exit 143"
    [ "$(grep -c 'stopped by SIGTERM after step 20 of 60' "$err")" = 1 ] && [ -f "$ck" ] ||
        { bad "SIGTERM to $1: not one stop line after step 20 and a checkpoint: $(tail -n 2 "$err")"; return; }
    echo "ok   SIGTERM to $1 ($pause_line): $(grep 'stopped by' "$err")"
    mpi 2 "$tmp/dp" "${S[@]}" --resume "$ck" --save "$ck" --log "$log" 2>/dev/null || bad "resume after SIGTERM failed"
    $PY tests/py/same.py ckpt "$tmp/sfull.st" "$ck" || bad "SIGTERM to $1 + resume: checkpoints differ"
    $PY tests/py/same.py log "$tmp/sfull.jsonl" "$log" || bad "SIGTERM to $1 + resume: logs differ"
}
stop_run ranks

echo "== 7. the CUDA program on 2 ranks (CPU stand-in, stand-in NCCL over MPI) = the C program"
CXX=mpicxx EMU_FLAGS=-DMP_USE_MPI emu_trainer tests/models/dp_mlp.mp "$tmp/cu" --precision mixed_float16
case $? in
0)  mpi 2 "$tmp/hdp" "${D[@]}" --log "$tmp/hc.jsonl" --save "$tmp/hc.st" 2>/dev/null || bad "C, f16, 2 ranks failed"
    mpi 2 "$tmp/cu" "${D[@]}" --log "$tmp/hcu.jsonl" --save "$tmp/hcu.st" 2>"$tmp/hcu.err" ||
        bad "the CUDA program on 2 ranks failed: $(tail -n 3 "$tmp/hcu.err")"
    # the CUDA program's reductions are compensated f32 where the C program's
    # are double: against the C program at t_cuda_emu's tolerance, against
    # itself on one process (accumulate 2) as tightly as the C program
    msg=$($PY tests/cuda/compare_logs.py "$tmp/hc.jsonl" "$tmp/hcu.jsonl" 2e-3 2>&1) ||
        bad "CUDA program, 2 ranks: the log differs from the C program's: $msg"
    sed "s/accumulate     = 1/accumulate     = 2/" tests/models/dp_mlp.mp >"$tmp/cacc2.mp"
    emu_trainer "$tmp/cacc2.mp" "$tmp/cu1" --precision mixed_float16 &&
        "$tmp/cu1" "${D[@]}" --log "$tmp/hcu1.jsonl" --save "$tmp/hcu1.st" 2>/dev/null ||
        bad "the CUDA program with accumulate 2 on one process failed"
    same_run "CUDA program, 2 ranks = one process, accumulate 2" "$tmp/hcu1.jsonl" "$tmp/hcu.jsonl" "$tmp/hcu1.st" "$tmp/hcu.st"
    mpi 2 "$tmp/cu" "${H[@]}" --log "$tmp/hbcu.jsonl" --save "$tmp/hbcu.st" 2>/dev/null || bad "CUDA, overflow run failed"
    same_run "CUDA program, overflow on rank 1" "$tmp/hn.jsonl" "$tmp/hbcu.jsonl" "$tmp/hn.st" "$tmp/hbcu.st"
    # mixed_float8: each rank's amaxes reduced by NCCL's max before the
    # device's step end, as one process's over its 2 micro-batches
    CXX=mpicxx EMU_FLAGS=-DMP_USE_MPI emu_trainer tests/models/dp_mlp.mp "$tmp/cu8" --precision mixed_float8 &&
        mpi 2 "$tmp/cu8" "${D[@]}" --log "$tmp/f8cu.jsonl" --save "$tmp/f8cu.st" 2>/dev/null &&
        emu_trainer "$tmp/cacc2.mp" "$tmp/cu18" --precision mixed_float8 &&
        "$tmp/cu18" "${D[@]}" --log "$tmp/f8cu1.jsonl" --save "$tmp/f8cu1.st" 2>/dev/null ||
        bad "the CUDA program under mixed_float8 on 2 ranks or with accumulate 2 failed"
    same_run "CUDA program under mixed_float8, 2 ranks = one process, accumulate 2" "$tmp/f8cu1.jsonl" \
        "$tmp/f8cu.jsonl" "$tmp/f8cu1.st" "$tmp/f8cu.st" ;;
1)  fail=1 ;;
esac

exit $fail
