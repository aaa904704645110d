"""vs_jax.py - JAX's side of bench/vs_frameworks.sh (run with the virtual
environment's python, which has jax and optax; no torch).

    vs_jax.py MODEL.mp --data NAME=FILE.npy ... --init FILE.safetensors
              --steps N --warmup W --out RESULT.json

The twins below are written from the .mp files, in float32: mnist_mlp2
(bench/mnist_mlp2.mp), char_transformer (examples/char_transformer.mp) and
char_gru (examples/char_gru.mp, lax.scan over the steps).
Each names its parameters and their shapes from the model's constants, and
the --init file must hold exactly those (so the parameter count is the
twin's own, not the file's). One jax.jit step: loss, gradients, optax
update (the train block's optimizer, schedule and clipping), parameters
and optimizer state donated. Each step's time includes moving the batch to
the device and waiting for the new parameters (block_until_ready), so
that steps do not overlap, as in the other frameworks. Threads: XLA's CPU
client takes its thread pool from the CPUs the process may run on, so the
driver pins it with taskset."""
import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import vs_common


def linear(p, name, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def xent(logits, labels):
    """(cross_entropy, accuracy): the loss and the models' metric, which the
    trainer's step computes too."""
    logits = logits.reshape(-1, logits.shape[-1])
    labels = labels.reshape(-1)
    picked = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return (jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked),
            jnp.mean(jnp.argmax(logits, axis=-1) == labels))


# ---- bench/mnist_mlp2.mp ---------------------------------------------------
def mlp2_shapes(c):
    return {"h1.weight": (512, 784), "h1.bias": (512,), "h2.weight": (512, 512), "h2.bias": (512,),
            "logits.weight": (10, 512), "logits.bias": (10,)}


def mlp2_loss(p, b, c):
    x = b["image"].astype(jnp.float32) / 255
    h1 = jax.nn.relu(linear(p, "h1", x))
    h2 = jax.nn.relu(linear(p, "h2", h1))
    return xent(linear(p, "logits", h2), b["label"])


# ---- examples/char_transformer.mp -----------------------------------------
def tf_shapes(c):
    T, V, D, L = c["T"], c["V"], c["D"], c["L"]
    s = {"pos": (T, D), "tok.weight": (V, D), "ln_f.weight": (D,), "ln_f.bias": (D,),
         "head.weight": (V, D), "head.bias": (V,)}
    for i in range(L):
        n = f"layers.{i}."
        for ln in ("ln1", "ln2"):
            s.update({n + ln + ".weight": (D,), n + ln + ".bias": (D,)})
        for lin in ("q", "k", "v", "proj"):
            s.update({n + "attn." + lin + ".weight": (D, D), n + "attn." + lin + ".bias": (D,)})
        s.update({n + "mlp.fc.weight": (4 * D, D), n + "mlp.fc.bias": (4 * D,),
                  n + "mlp.proj.weight": (D, 4 * D), n + "mlp.proj.bias": (D,)})
    return s


def layer_norm(p, name, x):
    mu = x.mean(-1, keepdims=True)
    var = jnp.square(x - mu).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * p[name + ".weight"] + p[name + ".bias"]


def self_attention(p, name, x, H):
    B, T, D = x.shape
    heads = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = (heads(linear(p, name + "." + n, x)) for n in ("q", "k", "v"))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // H)           # [B, H, T, T]
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    y = jax.nn.softmax(s, axis=-1) @ v                              # [B, H, T, D/H]
    return linear(p, name + ".proj", y.transpose(0, 2, 1, 3).reshape(B, T, D))


def tf_loss(p, b, c):
    x = p["tok.weight"][b["tokens"]] + p["pos"]
    for i in range(c["L"]):
        n = f"layers.{i}."
        x = x + self_attention(p, n + "attn", layer_norm(p, n + "ln1", x), c["H"])
        h = jax.nn.gelu(linear(p, n + "mlp.fc", layer_norm(p, n + "ln2", x)), approximate=False)
        x = x + linear(p, n + "mlp.proj", h)
    return xent(linear(p, "head", layer_norm(p, "ln_f", x)), b["targets"])


# ---- examples/char_gru.mp ---------------------------------------------------
def gru_shapes(c):
    V, D, H = c["V"], c["D"], c["HID"]
    s = {"embed.weight": (V, D), "head.weight": (V, H), "head.bias": (V,)}
    for i, n in enumerate((D, H)):
        s.update({f"rnn.weight_ih_l{i}": (3 * H, n), f"rnn.weight_hh_l{i}": (3 * H, H),
                  f"rnn.bias_ih_l{i}": (3 * H,), f"rnn.bias_hh_l{i}": (3 * H,)})
    return s


def gru_layer(p, i, x):
    """nn.GRU's layer i (batch_first): the input projection of all steps,
    then lax.scan over the steps."""
    wih, whh = p[f"rnn.weight_ih_l{i}"], p[f"rnn.weight_hh_l{i}"]
    bih, bhh = p[f"rnn.bias_ih_l{i}"], p[f"rnn.bias_hh_l{i}"]
    H = whh.shape[1]
    gi = jnp.swapaxes(x @ wih.T + bih, 0, 1)                        # [T, B, 3H]

    def cell(h, g):
        gh = h @ whh.T + bhh
        r = jax.nn.sigmoid(g[:, :H] + gh[:, :H])
        z = jax.nn.sigmoid(g[:, H:2 * H] + gh[:, H:2 * H])
        n = jnp.tanh(g[:, 2 * H:] + r * gh[:, 2 * H:])
        h = (h - n) * z + n
        return h, h
    _, hs = jax.lax.scan(cell, jnp.zeros((x.shape[0], H), x.dtype), gi)
    return jnp.swapaxes(hs, 0, 1)


def gru_loss(p, b, c):
    x = p["embed.weight"][b["tokens"]]
    for i in range(2):
        x = gru_layer(p, i, x)
    return xent(linear(p, "head", x), b["targets"])


TWINS = {"mnist_mlp2": (mlp2_shapes, mlp2_loss), "char_transformer": (tf_shapes, tf_loss),
         "char_gru": (gru_shapes, gru_loss)}


# ---- the train block -------------------------------------------------------
def schedule(tr):
    """lr of update `count` (0-based), as mp_optim.h: step k = count + 1."""
    name, kw, _ = vs_common.mpfile.call(tr.get("lr_schedule"), "constant")
    lr = vs_common.mpfile.call(tr["optimizer"])[1]["lr"]
    if name == "constant":
        return lr
    if kw.get("warmup_style", "torch") != "torch":
        sys.exit("vs_jax.py: only the torch warm-up style is mirrored")
    w, t, lo = kw.get("warmup", 0), tr.get("steps", 1000), kw.get("min", 0)

    def at(count):
        k = count + 1
        p = jnp.clip((k - 1 - w) / (t - w), 0, 1) if t > w else 1.0
        decay = lr * (1 - p) if name == "linear" else lo + (lr - lo) * (1 + jnp.cos(jnp.pi * p)) / 2
        return jnp.where(k <= w, lr * k / max(w, 1), decay)
    return at


def optimizer(tr):
    name, kw, _ = vs_common.mpfile.call(tr["optimizer"])
    if name not in ("adam", "adamw") or kw.get("no_decay"):
        sys.exit(f"vs_jax.py: optimizer {name} {kw} is not mirrored (adam, adamw without no_decay)")
    lr = schedule(tr)
    b1, b2, eps = kw.get("beta1", 0.9), kw.get("beta2", 0.999), kw.get("eps", 1e-8)
    if name == "adamw":
        tx = optax.adamw(lr, b1, b2, eps, weight_decay=kw.get("weight_decay", 0.01))
    elif kw.get("weight_decay", 0):
        tx = optax.chain(optax.add_decayed_weights(kw["weight_decay"]), optax.adam(lr, b1, b2, eps))
    else:
        tx = optax.adam(lr, b1, b2, eps)
    clip = tr.get("clip_grad_norm", 0)
    return optax.chain(optax.clip_by_global_norm(clip), tx) if clip else tx


def main():
    a = vs_common.parse_args(["float32"])
    if a.mp["name"] not in TWINS:     # the table shows no JAX row for it
        print(f"vs_jax.py: no JAX twin of {a.mp['name']}: left out", file=sys.stderr)
        return 0
    shapes_of, loss_of = TWINS[a.mp["name"]]
    c = a.mp["consts"]
    want = shapes_of(c)
    got = {k: tuple(v.shape) for k, v in a.params.items()}
    if got != want:
        sys.exit(f"vs_jax.py: {a.init} does not hold the twin's parameters: "
                 f"missing {sorted(set(want) - set(got))}, unexpected {sorted(set(got) - set(want))}, "
                 f"other shapes {sorted(k for k in want if k in got and got[k] != want[k])}")
    params = {k: jnp.asarray(v, jnp.float32) for k, v in a.params.items()}
    tx = optimizer(a.mp["train"])
    opt_state = tx.init(params)

    def update(params, opt_state, batch):
        (loss, acc), grads = jax.value_and_grad(loss_of, has_aux=True)(params, batch, c)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, acc
    update = jax.jit(update, donate_argnums=(0, 1))
    get = vs_common.batches(a.arrays, vs_common.batch_size(a.mp))
    state = [params, opt_state]

    def step(j):
        batch = {k: jax.device_put(v) for k, v in get(j).items()}
        state[0], state[1], loss, acc = update(state[0], state[1], batch)
        jax.block_until_ready((state[0], loss, acc))
        return loss
    loss1, last, ms = vs_common.timed(a, step)
    vs_common.write(a, f"jax {jax.__version__}", sum(int(np.prod(s)) for s in want.values()), (loss1, last), ms)


if __name__ == "__main__":
    main()
