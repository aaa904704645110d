#!/usr/bin/env bash
# run_all: once (the trainer's process behaviour, which fusion does not change: make test-nofuse skips it)
# t_signals.sh - TRAINER.md "Signals", for the C program and the CUDA
# program (through the CPU stand-in, tests/cuda/mp_cuda_emu.h):
#   1. SIGTERM, and SIGINT, in the middle of a run: exit 143 / 130, one line
#      saying where it stopped, a checkpoint at that step; --resume from it
#      to the end equals the uninterrupted run bit for bit (every tensor and
#      metadata of the final checkpoints, every logged step).
#   2. A second signal ends the program at once: no checkpoint is written
#      and no "stopped" line printed.
# Every signal is sent while the program is paused after a known step (the
# test-only hook MPCC_TEST_PAUSE, tests/py/lib.sh's pause_*), so the test
# does not depend on the machine's speed: the run stops after exactly that
# step.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

mnist_first train 512 "$tmp/x.npy" "$tmp/y.npy" || exit 1
D=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --log-every 1)
AT=10           # the step the signals come after

# interrupted BIN NAME SIGNAL WANT STEPS: stop a run with SIGNAL after step
# $AT, resume it, compare with NAME's uninterrupted run
interrupted() {
    local bin=$1 n=$2 sig=$3 want=$4 steps=$5
    local ck=$tmp/$n.$sig.st log=$tmp/$n.$sig.jsonl err=$tmp/$n.$sig.err
    pause_start $AT "$bin" "${D[@]}" --steps "$steps" --save "$ck" --log "$log" 2>"$err"
    if ! pause_next || [ -n "$exit_rc" ]; then
        bad "$n: SIG$sig: the run did not pause after step $AT: $pause_line: $(tail -n 2 "$err")"; pause_end; return
    fi
    pause_signal "$sig" || { bad "$n: SIG$sig: not caught: $pause_line"; pause_end; return; }
    pause_say run
    pause_next
    pause_end
    if [ "$exit_rc" != "$want" ]; then
        bad "$n: SIG$sig: $pause_line, want exit $want: $(tail -n 2 "$err")"; return
    fi
    local line
    line=$(grep "stopped by SIG$sig after step $AT of $steps" "$err")
    [ -n "$line" ] && [ -f "$ck" ] ||
        { bad "$n: SIG$sig: no stop line after step $AT or no checkpoint: $(tail -n 2 "$err")"; return; }
    [ "$(grep -c '"step"' "$log")" = $AT ] || bad "$n: SIG$sig: the log has not $AT steps"
    echo "ok   $n: $line"
    "$bin" "${D[@]}" --steps "$steps" --resume "$ck" --save "$ck" --log "$log" \
        2>"$err.2" || { bad "$n: resume after SIG$sig failed: $(tail -n 1 "$err.2")"; return; }
    $PY tests/py/same.py ckpt "$tmp/$n.full.st" "$ck" || bad "$n: SIG$sig + resume: checkpoints differ"
    $PY tests/py/same.py log "$tmp/$n.full.jsonl" "$log" || bad "$n: SIG$sig + resume: logs differ"
}

run_pair() {   # run_pair BIN NAME STEPS
    "$1" "${D[@]}" --steps "$3" --save "$tmp/$2.full.st" --log "$tmp/$2.full.jsonl" 2>/dev/null ||
        { bad "$2: the uninterrupted run failed"; return; }
    interrupted "$1" "$2" TERM 143 "$3"
    interrupted "$1" "$2" INT 130 "$3"
}

echo "== 1. stop, save, resume: the C program"
build_trainer tests/models/resume_adam.mp "$tmp/c" || exit 1
run_pair "$tmp/c" c 200

echo "== 1. the CUDA program (CPU stand-in)"
emu_trainer tests/models/resume_adam.mp "$tmp/cu"
case $? in 0) run_pair "$tmp/cu" cuda 100 ;; 1) fail=1 ;; esac

ls -a "$tmp" | grep -q mpcc-tmp && bad "a temporary file was left behind"

echo "== 2. a second signal ends the program at once"
# the first one caught (the program says so), the second one ends it in the
# pause: no stop line, no checkpoint
second() {   # second BIN NAME
    local ck=$tmp/$2.second.st err=$tmp/$2.second.err
    pause_start 3 "$1" "${D[@]}" --steps 20 --save "$ck" 2>"$err"
    if ! pause_next || [ -n "$exit_rc" ]; then
        bad "$2: second SIGTERM: the run did not pause after step 3: $pause_line: $(tail -n 2 "$err")"; pause_end; return
    fi
    pause_signal TERM || { bad "$2: the first SIGTERM was not caught: $pause_line"; pause_end; return; }
    kill -TERM "$paused_pid"
    pause_next
    pause_end
    if [ "$exit_rc" != 143 ] || [ -e "$ck" ] || grep -q stopped "$err"; then
        bad "$2: second SIGTERM: $pause_line (want exit 143), checkpoint" \
            "$([ -e "$ck" ] && echo written || echo none), stderr: $(tail -n 1 "$err")"
    else
        echo "ok   $2: the second SIGTERM ended it at once (exit 143), nothing saved"
    fi
}
second "$tmp/c" c
[ -x "$tmp/cu" ] && second "$tmp/cu" cuda
exit $fail
