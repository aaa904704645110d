"""rng.py - an independent reimplementation of the generated trainers'
randn / rand values (runtime/mp_kernels.h mp_k_randn, mp_k_rand) in
NumPy, for the reference tests (t_random.sh):

    key = mix(mix(mix(mix(seed + G) ^ (step + G)) ^ (micro + 2G)) ^ (node + 3G))
    z_i = mix(key + (i + 1) G)                 (64-bit wrap-around; G the golden ratio)
    rand:  (z_i >> 40) 2^-24
    randn: sqrt(-2 log u1) cos(2 pi u2), u1 = f32(f32(z_i >> 32) 2^-32 + 2^-33)
           (as the trainer's fmaf), u2 = (z_i & 0xffffff) 2^-24; the log, cos,
           square root and product here in double: the trainer's f32 value
           is within about 1e-6 of it

micro is the step's micro-batch (0 .. N*A - 1 over data-parallel ranks) in
training, -1 - b for evaluation / --predict batch b; node the node id
(--dump-plan=json)."""
import numpy as np

G = 0x9E3779B97F4A7C15
M = (1 << 64) - 1


def mix(z):
    """splitmix64's finaliser, on a uint64 array (wrapping products)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def key(seed, step, micro, node):
    def m(x):
        return int(mix(np.uint64(x & M)))
    k = m(seed + G)
    k = m(k ^ ((step + G) & M))
    k = m(k ^ ((micro + 2 * G) & M))
    return m(k ^ ((node + 3 * G) & M))


def bits(seed, step, micro, node, n):
    k = np.uint64(key(seed, step, micro, node))
    i = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return mix(k + i * np.uint64(G))


def rand(seed, step, micro, node, n):
    """f32, exactly the trainer's"""
    z = bits(seed, step, micro, node, n)
    return ((z >> np.uint64(40)).astype(np.float64) * 2.0 ** -24).astype(np.float32)


def randn(seed, step, micro, node, n):
    """float64 (the trainer's f32 values are these within a few ulps)"""
    z = bits(seed, step, micro, node, n)
    hi = (z >> np.uint64(32)).astype(np.float32).astype(np.float64)
    u1 = (hi * 2.0 ** -32 + 2.0 ** -33).astype(np.float32).astype(np.float64)   # exact, then one rounding
    u2 = (z & np.uint64(0xFFFFFF)).astype(np.float64) * 2.0 ** -24
    return np.sqrt(-2 * np.log(u1)) * np.cos(2 * np.pi * u2)
