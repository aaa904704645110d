"""tb_plot.py - a PNG of a run's curves, read from the event files that
--tensorboard writes, with TensorBoard's own reader (pip install
tensorboard matplotlib):

    python3 tools/tb_plot.py RUN_DIR OUT.png [TITLE]

Left: train/loss, train/loss_avg and eval/loss against the step; right:
every other eval/<metric>. docs/watching.png was made this way.
"""
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: E402


def main():
    run, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else run
    acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]

    def series(tag):
        s = acc.Scalars(tag)
        return [e.step for e in s], [e.value for e in s]

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for tag, style in (("train/loss", dict(alpha=0.35, lw=1)), ("train/loss_avg", dict(lw=2)),
                       ("eval/loss", dict(marker="o", lw=2))):
        if tag in tags:
            a.plot(*series(tag), label=tag, **style)
    a.set_yscale("log")
    a.set_xlabel("step")
    a.set_title("loss")
    a.legend()
    for tag in tags:
        if tag.startswith("eval/") and tag != "eval/loss":
            b.plot(*series(tag), marker="o", label=tag)
    b.set_xlabel("step")
    b.set_title("evaluation")
    b.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main()
