#!/usr/bin/env bash
# t_dry_run.sh - TRAINER.md "Before a run": --dry-run checks what a run
# would check (data, checkpoints, output paths), prints the memory the run
# needs and exits 0 without training or writing anything:
#   1. the C program: exit 0, nothing trained, no file written; parameters,
#      gradients, optimizer state and data bytes as counted from the
#      checkpoint and the .npy files, the activation arena as the generated
#      code allocates it;
#   2. bad data, a bad checkpoint, a bad output path: the run's own errors;
#   3. the CUDA program (CPU stand-in): the device memory it reports without
#      starting the device equals what a real start allocates.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

mnist_first train 256 "$tmp/x.npy" "$tmp/y.npy" || exit 1
mnist_first t10k 128 "$tmp/ex.npy" "$tmp/ey.npy" || exit 1
D=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --eval image="$tmp/ex.npy" --eval label="$tmp/ey.npy")
build_trainer tests/models/resume_adam.mp "$tmp/c" || exit 1
"$tmp/c" "${D[@]}" --steps 2 --save "$tmp/ck.st" 2>/dev/null || { echo "FAIL: a short run failed"; exit 1; }
cp "$tmp/ck.st" "$tmp/ck.orig"

echo "== 0. MP_CPU asking for what the CPU cannot do: a usage error before anything runs"
MP_CPU=avx1024 "$tmp/c" "${D[@]}" --steps 5 --save "$tmp/cpu.st" >/dev/null 2>"$tmp/cpu.err"
rc=$?
[ $rc = 2 ] && grep -q "^c: error: MP_CPU=avx1024: expected auto, portable, avx2, avx512 or avx512_bf16" "$tmp/cpu.err" &&
    [ ! -e "$tmp/cpu.st" ] && ! grep -q "^step " "$tmp/cpu.err" ||
    bad "MP_CPU=avx1024: exit $rc, want 2 and one line before training: $(head -n 2 "$tmp/cpu.err")"
# a level this CPU lacks (none where it has them all): named, with the highest it has
for lvl in avx2 avx512 avx512_bf16; do
    MP_CPU=$lvl "$tmp/c" "${D[@]}" --steps 1 --save "$tmp/cpu.st" >/dev/null 2>"$tmp/cpu.err"
    rc=$?
    if [ $rc = 0 ]; then echo "   MP_CPU=$lvl runs here"; continue; fi
    [ $rc = 2 ] && grep -q "^c: error: MP_CPU=$lvl: this CPU cannot run it; it runs up to " "$tmp/cpu.err" &&
        [ ! -e "$tmp/cpu.st" ] || bad "MP_CPU=$lvl: exit $rc, want 0 or 2 and one line: $(head -n 2 "$tmp/cpu.err")"
    echo "   MP_CPU=$lvl refused here: $(head -n 1 "$tmp/cpu.err")"
done
MP_CPU=portable "$tmp/c" "${D[@]}" --steps 1 >/dev/null 2>&1 || bad "MP_CPU=portable refused"

echo "== 1. the C program"
"$tmp/c" "${D[@]}" --steps 50 --resume "$tmp/ck.st" --save "$tmp/out.st" --log "$tmp/log.jsonl" \
    --dry-run >"$tmp/dry.out" 2>"$tmp/dry.err"
rc=$?
sed 's/^/    /' "$tmp/dry.out"
[ $rc = 0 ] || bad "--dry-run: exit $rc: $(tail -n 1 "$tmp/dry.err")"
[ -e "$tmp/out.st" ] || [ -e "$tmp/log.jsonl" ] && bad "--dry-run wrote an output file"
grep -q "^step " "$tmp/dry.err" && bad "--dry-run trained"
cmp -s "$tmp/ck.st" "$tmp/ck.orig" || bad "--dry-run changed the checkpoint"
arena=$(sed -n 's/.*mp_alloc_aligned(\([0-9]*\)).*/\1/p' "$tmp/c.c" | head -n 1)
$PY - "$tmp/dry.out" "$tmp/ck.st" "$tmp" "$arena" <<'EOF' || bad "--dry-run's memory figures"
import sys, os, re
sys.path.insert(0, "tests/py"); import st
out, ck, d, arena = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3], int(sys.argv[4])
got = {m[0].strip(): int(m[1]) for m in re.findall(r"^  ([a-z ]+?)\s+(\d+) bytes", out, re.M)}
t = st.read(ck)
params = [k for k in t if not k.startswith("optimizer.")]
flat = sum((t[k].size + 15) // 16 * 16 for k in params) * 4   # each 64-byte aligned
slots = {k.split(".")[1] for k in t if k.startswith("optimizer.")}
npy = lambda n: os.path.getsize(f"{d}/{n}") - 128          # numpy's 128-byte header
want = {"parameters": flat, "gradients": flat, "optimizer state": len(slots) * flat,
        "activation arena": arena, "training data": npy("x.npy") + npy("y.npy"),
        "evaluation data": npy("ex.npy") + npy("ey.npy")}
want["total"] = sum(want.values()) + got.get("batch buffers", -10**9)
errs = [f"{k}: {got.get(k)} bytes, expected {v}" for k, v in want.items() if got.get(k) != v]
print("\n".join("  " + e for e in errs) or f"  memory figures as expected ({len(want)} checked)")
sys.exit(1 if errs else 0)
EOF

echo "== 2. what a run refuses, a dry run refuses"
# expect RC FRAGMENT ARGS...: exit RC, the last stderr line holds FRAGMENT
expect() {
    local want=$1 frag=$2 rc; shift 2
    "$tmp/c" "$@" --dry-run >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ $rc != "$want" ] || ! tail -n 1 "$tmp/err" | grep -qF -- "$frag" || [ -s "$tmp/out" ]; then
        bad "--dry-run $*: exit $rc (want $want, '$frag'): $(tail -n 1 "$tmp/err")"
    else
        echo "ok   exit $rc: $(tail -n 1 "$tmp/err")"
    fi
}
head -c 100 "$tmp/x.npy" >"$tmp/short.npy"
expect 1 "short.npy: truncated" --data image="$tmp/short.npy" --data label="$tmp/y.npy"
head -c 1000 "$tmp/ck.st" >"$tmp/torn.st"
expect 1 "torn.st" "${D[@]}" --resume "$tmp/torn.st"
expect 2 "--save '$tmp/x.npy': is the same file as --data" "${D[@]}" --save "$tmp/x.npy"
expect 2 "does not exist" "${D[@]}" --log "$tmp/no/such.jsonl"

echo "== 3. the CUDA program's device memory, without a device"
emu_trainer tests/models/resume_adam.mp "$tmp/cu"
case $? in 2) exit $fail ;; 1) exit 1 ;; esac
MP_CUDA_DATA=0 "$tmp/cu" "${D[@]}" --steps 5 --dry-run >"$tmp/cu.dry" 2>"$tmp/cu.err" ||
    bad "CUDA --dry-run: exit $?: $(tail -n 1 "$tmp/cu.err")"
sed 's/^/    /' "$tmp/cu.dry"
# a real start, with the training set left on the host, says what it allocated
MP_CUDA_DATA=0 MP_CUDA_VERBOSE=1 "$tmp/cu" "${D[@]}" --steps 1 >/dev/null 2>"$tmp/cu.run" ||
    bad "CUDA run failed: $(tail -n 1 "$tmp/cu.run")"
$PY - "$tmp/cu.dry" "$tmp/cu.run" <<'EOF' || bad "device memory of --dry-run"
import sys, re
dry, run = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = re.search(r"device memory:\n  total\s+(\d+) bytes", dry)
r = re.search(r"([\d.]+) MiB of device memory in one allocation", run)
if not m or not r:
    sys.exit("  no device total in the dry run, or no allocation line in the run")
dry_mib = f"{int(m[1]) / 2**20:.1f}"
print(f"  dry run: {dry_mib} MiB, the device allocated {r[1]} MiB")
sys.exit(dry_mib != r[1])
EOF
exit $fail
