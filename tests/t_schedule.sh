#!/usr/bin/env bash
# t_schedule.sh - learning-rate schedules that cannot do what they seem to:
#   1. mpcc warns (file:line:col, exit 0) about cosine's min at or above lr
#      and a warmup that is not below steps, and not about sound schedules;
#   2. the program warns at start when --steps goes past the train block's
#      steps, and from there on lr holds the schedule's last value (the log's
#      lr of every step past the horizon equals the one the warning names).
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

# model FILE SCHEDULE STEPS: mlp_small with that schedule and optimizer lr 0.1
model() {
    sed -e "s/^  steps .*/  steps = $3\n  lr_schedule = $2/" tests/models/mlp_small.mp >"$1"
}

echo "== 1. mpcc's warnings"
# check SCHEDULE STEPS FRAGMENT: the warning (or none when FRAGMENT is empty)
check() {
    model "$tmp/s.mp" "$1" "$2"
    ./mpcc "$tmp/s.mp" --target c -o "$tmp/s.c" 2>"$tmp/err"; rc=$?
    line=$(grep -n "lr_schedule" "$tmp/s.mp" | cut -d: -f1)
    if [ $rc != 0 ]; then
        bad "$1, steps $2: exit $rc: $(head -n 1 "$tmp/err")"
    elif [ -z "$3" ]; then
        [ -s "$tmp/err" ] && bad "$1, steps $2: unexpected: $(head -n 1 "$tmp/err")" || echo "ok   $1, steps $2: no warning"
    elif ! grep -q "^$tmp/s.mp:$line:[0-9]*: warning: .*$3" "$tmp/err"; then
        bad "$1, steps $2: no warning '$3' at line $line:"; sed 's/^/    /' "$tmp/err"
    else
        echo "ok   $(head -n 1 "$tmp/err" | sed "s|$tmp/||")"
    fi
}
check "cosine(warmup = 2, min = 0.5)" 40 "cosine's min = 0.5 is not below the optimizer's lr = 0.1"
check "cosine(min = 0.1)" 40 "stays put"
check "linear(warmup = 40)" 40 "warmup = 40 is not below steps = 40"
grep -q "s.mp:$(grep -n "^  steps" "$tmp/s.mp" | cut -d: -f1):[0-9]*: note: steps given here" "$tmp/err" ||
    bad "no note pointing at steps"
check "cosine(warmup = 50, min = 0.01)" 40 "the whole run is warmup"
check "cosine(warmup = 2, min = 0.01)" 40 ""
check "linear(warmup = 39)" 40 ""

echo "== 2. --steps past the schedule's end"
mnist_first train 256 "$tmp/x.npy" "$tmp/y.npy" || exit 1
model "$tmp/h.mp" "cosine(warmup = 2, min = 0.01)" 10
build_trainer "$tmp/h.mp" "$tmp/h" || exit 1
D=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --log-every 1)
"$tmp/h" "${D[@]}" --steps 10 2>"$tmp/in.err" || bad "a run within the schedule failed"
grep -q warning "$tmp/in.err" && bad "a warning within the schedule: $(grep warning "$tmp/in.err")"
"$tmp/h" "${D[@]}" --steps 16 --log "$tmp/h.jsonl" 2>"$tmp/h.err" || bad "the long run failed"
w=$(grep "^warning: --steps 16 is past the train block's steps 10" "$tmp/h.err")
[ -n "$w" ] && echo "ok   $w" || bad "no warning for --steps past the schedule: $(head -n 1 "$tmp/h.err")"
$PY - "$tmp/h.jsonl" "$w" <<'EOF' || bad "lr past the horizon"
import json, sys, re
lr = [json.loads(l)["lr"] for l in open(sys.argv[1]) if '"eval"' not in l]
held = float(re.search(r"lr stays at (\S+) from step 11", sys.argv[2])[1])
print(f"  lr at steps 9..16: {lr[8:]}")
sys.exit(len(lr) != 16 or any(abs(x - held) > 1e-9 * held for x in lr[10:]) or lr[9] == lr[10] == lr[8])
EOF
exit $fail
