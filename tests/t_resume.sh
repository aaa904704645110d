#!/usr/bin/env bash
# t_resume.sh - a run of N steps equals the same run stopped and resumed,
# bit for bit: final checkpoints (every tensor byte-identical, same
# metadata) and logged steps (loss, loss scale, skipped, lr, grad norm).
# Shuffling on (the data order's state is part of the checkpoint); the
# split points fall mid-epoch and on an epoch boundary (1000 samples: 31
# batches of 32 per epoch, 31 steps of 2x16 for resume_accum).
# resume_rmsprop: resume_adam with centered RMSprop with momentum (its
# three state buffers square_avg, momentum_buffer, grad_avg).
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/py/lib.sh
W=${B:-build}/t_resume
mkdir -p "$W"
mnist_first train 1000 "$W/x.npy" "$W/y.npy" || exit 1
fail=0
# run BIN LOG OUT STEPS [--resume FILE]
run() {
    local bin=$1 log=$2 out=$3 steps=$4 seed=(--seed 7); shift 4
    [ $# -gt 0 ] && seed=()    # a resumed run takes the checkpoint's seed
    rm -f "$log"
    "$bin" --data image="$W/x.npy" --data label="$W/y.npy" --steps "$steps" "${seed[@]}" \
        --log "$log" --log-every 1 --save "$out" "$@" >"$log.out" 2>&1 ||
        { echo "trainer failed: $bin --steps $steps $*"; tail -n 3 "$log.out"; return 1; }
}
# same KIND A B: bit-for-bit comparison, failures counted
same() { $PY tests/py/same.py "$@" || fail=1; }

sed -e 's/^model resume_adam$/model resume_rmsprop/' \
    -e 's/^  optimizer   = adam(lr = 1e-3)$/  optimizer   = rmsprop(lr = 1e-3, momentum = 0.9, centered = true, weight_decay = 1e-4)/' \
    tests/models/resume_adam.mp >"$W/resume_rmsprop.mp"
grep -q "rmsprop(lr" "$W/resume_rmsprop.mp" || { echo "resume_rmsprop.mp: the optimizer was not replaced"; fail=1; }
for m in resume_adam resume_accum resume_rmsprop; do
    echo "== $m"
    mp=tests/models/$m.mp
    [ -f "$mp" ] || mp=$W/$m.mp
    build_trainer "$mp" "$W/$m" || { fail=1; continue; }
    t=$W/$m
    run "$t" "$t.full.jsonl" "$t.full.safetensors" 40 || { fail=1; continue; }
    # 20 + 20
    run "$t" "$t.a.jsonl" "$t.a.safetensors" 20 &&
    run "$t" "$t.b.jsonl" "$t.b.safetensors" 40 --resume "$t.a.safetensors" || { fail=1; continue; }
    same ckpt "$t.full.safetensors" "$t.b.safetensors"
    same log "$t.full.jsonl" "$t.a.jsonl"
    same log "$t.full.jsonl" "$t.b.jsonl"
    # 13 + 18 + 9: the second stop is on the epoch boundary (step 31)
    run "$t" "$t.c.jsonl" "$t.c.safetensors" 13 &&
    run "$t" "$t.d.jsonl" "$t.d.safetensors" 31 --resume "$t.c.safetensors" &&
    run "$t" "$t.e.jsonl" "$t.e.safetensors" 40 --resume "$t.d.safetensors" || { fail=1; continue; }
    same ckpt "$t.full.safetensors" "$t.e.safetensors"
    same log "$t.full.jsonl" "$t.d.jsonl"
    same log "$t.full.jsonl" "$t.e.jsonl"
    # the run must have exercised the state: steps skipped and the scale moved
    $PY - "$t.full.jsonl" <<'PYEOF' || fail=1
import json, sys
L = [json.loads(l) for l in open(sys.argv[1]) if l.strip() and '"eval"' not in l]
scales = {o["loss_scale"] for o in L}
print(f"  {len(L)} steps logged, loss scales seen {sorted(scales)}, skipped {L[-1]['skipped']}")
if len(L) != 40:
    sys.exit("  expected 40 logged steps")
PYEOF
done
exit $fail
