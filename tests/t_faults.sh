#!/usr/bin/env bash
# run_all: once (the trainer's process behaviour, which fusion does not change: make test-nofuse skips it)
# t_faults.sh - the generated trainer against bad input (TRAINER.md, "Data",
# "Checkpoints", "Exit status"), crashes while checkpointing, and the
# sanitizers.
#  1. Every bad data file, input name and checkpoint of tests/py/faults.py:
#     exit 1 (2 where the case allows bad usage) with exactly one line on
#     stderr that names the file (and tensor or sample) and matches the
#     case's expected-vs-found words; no step trained, nothing saved.
#  2. A version 2.0 .npy file is accepted.
#  3. kill -9 during --save-every 1 training, several times, each run
#     resuming from what the last one left, at a known step (the test-only
#     hook MPCC_TEST_PAUSE): the checkpoint always loads whole (never torn),
#     at that step or the one before, and resumes; at most one temporary
#     file is left, and the next save removes it.
#  4. Every model of tests/models and examples/ built with
#     -fsanitize=address,undefined runs a few steps on two batches of random
#     data (3 steps: into a second epoch; eval, save, resume for one more
#     step, --check-numerics) with no sanitizer report.
# SKIP_ASAN=1 leaves out part 4. The trainers of parts 1 to 3 are built at
# -O0: their runs are short, the compile is most of their CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
W=${B:-build}/t_faults
rm -rf "$W"
mkdir -p "$W"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

echo "== 1. bad input is refused before training"
sed 's/^  optimizer = .*/  optimizer = adam(lr = 1e-3)/' tests/models/mlp_small.mp >"$W/faults.mp"
build_trainer "$W/faults.mp" "$W/train" -- -O0 || exit 1
mnist_first train 256 "$W/gx.npy" "$W/gy.npy"
"$W/train" --data image="$W/gx.npy" --data label="$W/gy.npy" --steps 3 --save "$W/good.safetensors" \
    >"$W/good.out" 2>&1 || { tail -n 3 "$W/good.out"; bad "a good run failed"; exit 1; }
$PY tests/py/faults.py "$W/f" "$W/good.safetensors" >"$W/cases.tsv" || exit 1
ncases=0
while IFS=$'\t' read -r name argstr regexes codes; do
    ncases=$((ncases + 1))
    IFS='|' read -r -a args <<<"$argstr"
    rm -f "$W/case.jsonl" "$W/case.safetensors"
    "$W/train" "${args[@]}" --steps 2 --log "$W/case.jsonl" --log-every 1 \
        --save "$W/case.safetensors" >"$W/case.out" 2>"$W/case.err" </dev/null
    rc=$?
    msg=$(head -c 300 "$W/case.err")
    why=()
    [[ ",$codes," == *",$rc,"* ]] || why+=("exit $rc, expected $codes")
    lines=$(grep -c . "$W/case.err")
    [ "$lines" -eq 1 ] || why+=("$lines lines on stderr, expected 1")
    IFS=$'\x1f' read -r -a res <<<"$regexes"
    for r in "${res[@]}"; do
        grep -Eiq -- "$r" "$W/case.err" || why+=("message lacks /$r/")
    done
    [ -s "$W/case.jsonl" ] && grep -q '"loss"' "$W/case.jsonl" && why+=("it trained")
    [ -e "$W/case.safetensors" ] && why+=("it saved a checkpoint")
    grep -Eq 'Sanitizer|runtime error|Segmentation|core dumped' "$W/case.err" && why+=("it crashed")
    if [ ${#why[@]} -eq 0 ]; then
        echo "ok   $name: $msg"
    else
        bad "$name: $(IFS=';'; echo "${why[*]}"): $msg"
    fi
done <"$W/cases.tsv"
[ $ncases -ge 30 ] || bad "only $ncases fault cases generated"

echo "== 2. .npy version 2.0 is accepted"
"$W/train" --data image="$W/f/x_v2.npy" --data label="$W/f/y.npy" --steps 2 >"$W/v2.out" 2>&1 ||
    bad "a version 2.0 .npy was refused: $(tail -n 1 "$W/v2.out")"

echo "== 3. kill -9 while checkpointing every step"
build_trainer tests/models/spec_mnist_mlp.mp "$W/big" -- -O0 || exit 1
mnist_first train 2048 "$W/bx.npy" "$W/by.npy"
mkdir -p "$W/kill"
ck=$W/kill/ck.safetensors
tmp=$W     # the FIFOs of pause_start
# Each run pauses after step P (MPCC_TEST_PAUSE), 1 to 4 steps past where
# the last one stopped; it is let go and killed at once: the kill lands in
# P's save (in the middle of the write, or before or after it) or in step
# P + 1, and the run cannot end by itself (it would pause after P + 1): the
# checkpoint is whole, at step P - 1 or P.
for i in 1 2 3 4 5 6 7 8; do
    resume=() from=0
    if [ -e "$ck" ]; then
        resume=(--resume "$ck")
        from=$($PY -c 'import sys; sys.path.insert(0, "tests/py"); import st
print(st.read(sys.argv[1], with_meta=True)[1]["step"])' "$ck") || { bad "run $i: the checkpoint does not load"; break; }
    fi
    P=$((from + 1 + $(awk -v i=$i 'BEGIN { srand(i); printf "%d", 1 + 4 * rand() }')))
    pause_start $P "$W/big" --data image="$W/bx.npy" --data label="$W/by.npy" --steps 100000 --save-every 1 \
        --save "$ck" "${resume[@]}" >"$W/kill/run$i.out" 2>&1
    if ! pause_next || [ -n "$exit_rc" ]; then
        bad "run $i: no pause after step $P: $pause_line: $(tail -n 1 "$W/kill/run$i.out")"; pause_end; continue
    fi
    pause_say step
    kill -9 "$paused_pid"
    pause_next
    pause_end
    [ "$exit_rc" = 137 ] || { bad "run $i: $pause_line, not the kill's 137: $(tail -n 1 "$W/kill/run$i.out")"; continue; }
    [ -e "$ck" ] || { bad "run $i: no checkpoint after the kill"; continue; }
    echo "  run $i: let go after step $P and killed: $(ls -a "$W/kill" | grep -c 'mpcc-tmp') temporary file(s) left"
    $PY - "$ck" "$i" "$P" <<'PYEOF' || fail=1
import sys
sys.path.insert(0, "tests/py")
import st
try:
    t, m = st.read(sys.argv[1], with_meta=True)
except Exception as e:
    sys.exit(f"FAIL: run {sys.argv[2]}: torn checkpoint: {e}")
need = {"h.weight", "h.bias", "logits.weight", "logits.bias", "optimizer.exp_avg.h.weight"}
if not need <= set(t):
    sys.exit(f"FAIL: run {sys.argv[2]}: checkpoint lacks {sorted(need - set(t))}")
if m.get("step") not in (str(int(sys.argv[3]) - 1), sys.argv[3]):
    sys.exit(f"FAIL: run {sys.argv[2]}: checkpoint at step {m.get('step')}, want {int(sys.argv[3]) - 1} or {sys.argv[3]}")
print(f"  run {sys.argv[2]}: checkpoint whole at step {m.get('step')}")
PYEOF
done
left=$(find "$W/kill" -name '*safetensors*' ! -name ck.safetensors | wc -l)
echo "  temporary files left behind by the kills: $left"
[ "$left" -le 1 ] || bad "the kills left $left temporary files (one name per target: at most 1)"
"$W/big" --data image="$W/bx.npy" --data label="$W/by.npy" --steps 1 --save "$ck" >"$W/kill/next.out" 2>&1 ||
    bad "a save after the kills failed: $(tail -n 1 "$W/kill/next.out")"
left=$(find "$W/kill" -name '*safetensors*' ! -name ck.safetensors | wc -l)
[ "$left" -eq 0 ] || bad "the next save left $left temporary files behind"

echo "== 4. sanitizers"
if [ -n "${SKIP_ASAN:-}" ]; then
    echo "  skipped (SKIP_ASAN set)"
    exit $fail
fi
# -O0: a sanitized build at -O1 takes some 13 s of the compiler and the
# few steps run in about a second either way; unoptimised code keeps every
# load and store the sanitizers instrument (-O1 may drop some), so it sees
# at least as much.
# The models of under 0.2 GFLOP a step (small_opt MODEL 2e8, lib.sh) built
# by clang where it is installed: its sanitized -O0 build takes half GCC's
# time (3.4 s against 7.3 s for char_transformer, measured), with the same
# checks (address: every load and store; undefined: the same groups); the
# larger ones by GCC, whose unoptimised code runs their steps some 5x
# faster (mobilenetv2 at batch 64: 43 s against over 4 minutes, measured).
SANFLAGS=(-O0 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all)
san_cc=cc
command -v clang >/dev/null && san_cc=clang
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
# the examples whose steps take seconds at their batch (small_models, lib.sh)
mapfile -t models < <(small_models tests/models/*.mp examples/*.mp)
for m in "${models[@]}"; do     # builds, two at a time
    while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
    n=$(basename "$m" .mp)
    c=cc
    [ "$(small_opt "$m" 2e8)" = -O0 ] && c=$san_cc
    TRAINER_CC=$c build_trainer "$m" "$W/asan_$n" -- "${SANFLAGS[@]}" >"$W/asan_$n.build" 2>&1 &
done
wait
for m in "${models[@]}"; do
    n=$(basename "$m" .mp)
    [ -x "$W/asan_$n" ] || { bad "$n: does not build with sanitizers"; cat "$W/asan_$n.build"; continue; }
    # two batches (the batch: the first input's first dimension), which the
    # evaluation reads too: under the sanitizers every batch costs
    batch=$($PY -c 'import sys; sys.path.insert(0, "tests/py"); import mpfile
print(next(iter(mpfile.read(sys.argv[1])["inputs"].values()))[1][0])' "$m") ||
        { bad "$n: no batch size read"; continue; }
    read -r -a pairs <<<"$($PY tests/py/data.py --random "$m" "$W/rand_$n" $((2 * batch)))"
    dargs=() eargs=()
    for p in "${pairs[@]}"; do dargs+=(--data "$p"); eargs+=(--eval "$p"); done
    extra=(); [ "$n" = fwd_overflow ] && extra=(--check-numerics)
    "$W/asan_$n" "${dargs[@]}" "${eargs[@]}" --steps 3 --eval-every 3 --log "$W/asan_$n.jsonl" \
        --log-every 1 --save "$W/asan_$n.safetensors" "${extra[@]}" >"$W/asan_$n.out" 2>&1
    rc=$?
    want=0; [ "$n" = fwd_overflow ] && want=1
    if grep -Eq 'Sanitizer|runtime error' "$W/asan_$n.out"; then
        bad "$n: sanitizer report:"; grep -E -A12 'Sanitizer|runtime error' "$W/asan_$n.out" | head -n 30
    elif [ $rc -ne $want ]; then
        bad "$n: exit $rc under sanitizers (expected $want): $(tail -n 2 "$W/asan_$n.out")"
    elif [ $want -eq 0 ]; then
        "$W/asan_$n" "${dargs[@]}" --steps 4 --resume "$W/asan_$n.safetensors" \
            --save "$W/asan_$n.2.safetensors" >"$W/asan_$n.2.out" 2>&1
        rc=$?
        if [ $rc -ne 0 ] || grep -Eq 'Sanitizer|runtime error' "$W/asan_$n.2.out"; then
            bad "$n: resume under sanitizers: exit $rc"; grep -E -A12 'Sanitizer|runtime error' "$W/asan_$n.2.out" | head -n 30
        else
            echo "ok   $n (train, eval, save, resume)"
        fi
    else
        echo "ok   $n (exit $rc as expected)"
    fi
done
exit $fail
