"""watch.py - the checks of tests/t_watch.sh ("Watching a run", TRAINER.md).

    watch.py events DIR LOG.jsonl
        DIR holds exactly one event file, events.out.tfevents.<time>.<host>;
        its TFRecord framing is checked here (lengths, masked CRC-32C of
        length and data, with an independent CRC-32C); then TensorBoard's
        own reader (EventAccumulator, when the tensorboard package imports)
        loads it: the first event is the file version, and every scalar
        train/{loss, loss_avg, lr, loss_scale, grad_norm, skipped,
        samples_per_s} at each logged step, eval/loss and eval/<metric> at
        each evaluation equal the JSONL log's values (as f32).
    watch.py tty PROGRAM ARGS...
        Runs the program on a pseudo-terminal: each log line must appear on
        a line of its own (the progress line cleared first with ESC [K), and
        the run must end with the one-line summary.
Exit 0 when all holds, 1 with what failed.
"""
import glob
import json
import os
import re
import struct
import sys

import numpy as np


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    raw = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(raw):
        head = raw[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", raw[pos + 8:pos + 12])
        data = raw[pos + 12:pos + 12 + n]
        (dc,) = struct.unpack("<I", raw[pos + 12 + n:pos + 16 + n])
        if hc != masked(crc32c(head)) or dc != masked(crc32c(data)) or len(data) != n:
            raise ValueError(f"{path}: record at byte {pos}: bad length or CRC")
        out.append(data)
        pos += 16 + n
    return out


def f32(x):
    return float(np.float32(x))


def cmd_events(d, log):
    errs = []
    files = glob.glob(os.path.join(d, "*"))
    host = os.uname().nodename
    if len(files) != 1 or not re.fullmatch(r"events\.out\.tfevents\.\d+\." + re.escape(host),
                                            os.path.basename(files[0])):
        return [f"{d}: expected one file events.out.tfevents.<time>.{host}, found {files}"]
    path = files[0]
    recs = records(path)
    print(f"{path}: {len(recs)} records, framing and CRC-32C good")
    want = {}
    for line in open(log):
        o = json.loads(line)
        if "eval" in o:
            for k, v in o["eval"].items():
                want[(f"eval/{k}", o["step"])] = v
        else:
            for k in ("loss", "loss_avg", "lr", "loss_scale", "grad_norm", "skipped", "samples_per_s"):
                want[(f"train/{k}", o["step"])] = o[k]
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea
        from tensorboard.backend.event_processing import event_file_loader
    except ImportError as e:
        print(f"SKIP TensorBoard's reader: {e}")
        return errs
    first = next(iter(event_file_loader.EventFileLoader(path).Load()))
    if first.file_version != "brain.Event:2":
        errs.append(f"the first event is not the file version: {first}")
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    got = {(t, s.step): s.value for t in acc.Tags()["scalars"] for s in acc.Scalars(t)}
    for key, v in sorted(want.items()):
        if key not in got:
            errs.append(f"TensorBoard has no {key[0]} at step {key[1]}")
        elif key[0] != "train/samples_per_s" and f32(got[key]) != f32(v) and not (
                abs(got[key] - v) <= 1e-6 * abs(v)):
            errs.append(f"{key[0]} at step {key[1]}: TensorBoard {got[key]!r}, the log {v!r}")
    extra = sorted(set(got) - set(want))
    if extra:
        errs.append(f"scalars not in the log: {extra}")
    tags = sorted({k[0] for k in got})
    print(f"TensorBoard reads {len(got)} scalars, tags {tags}")
    return errs


def cmd_tty(argv):
    import pty
    import subprocess
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = bytearray()
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:            # EIO: the program has ended
            break
        if not b:
            break
        out.extend(b)
    status = proc.wait()
    text = out.decode(errors="replace")
    errs = [] if status == 0 else [f"exit status {status}"]
    logged = re.findall(r"(?:^|\n|\x1b\[K)(step \d+/\d+ loss [^\r\n]*loss_avg[^\r\n]*)\r?\n", text)
    if len(logged) < 2:
        errs.append(f"log lines not on lines of their own on a terminal: {text[-600:]!r}")
    if "\x1b[K" not in text or "left" not in text:
        errs.append("no progress line on the terminal")
    if not re.search(r"\ndone: \d+ steps \(to step \d+\) in [^\n]*checkpoint", text):
        errs.append(f"no summary line: {text[-300:]!r}")
    print(f"terminal: {len(logged)} log lines kept above the progress line")
    return errs


def main():
    errs = cmd_events(sys.argv[2], sys.argv[3]) if sys.argv[1] == "events" else cmd_tty(sys.argv[2:])
    for e in errs:
        print("FAIL:", e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
