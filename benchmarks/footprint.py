"""Measures the constants of the kernel's choice of path (`plan_attention`).

Each figure comes from a fresh process: one training step (forward and
backward) of the kernel, after a warm-up step at n = 64 and a reset of the
peak resident set (VmHWM, /proc/self/clear_refs); the peak minus the
resident set before the step. Batch 1, 8 heads, float32.

    python benchmarks/footprint.py weights   # bytes per weight-matrix element
    python benchmarks/footprint.py blocks    # chunked: bytes per block element
    python benchmarks/footprint.py speed     # chunked: step time by block size

`weights` runs the plain path (and the fused one on JAX and PyTorch) at
n = 1024 and 2048, dim 16, unmasked and padded, and prints the slope
(peak(2048) - peak(1024)) / (elements(2048) - elements(1024)): the linear
parts cancel. TensorFlow runs under `tf.function` (as `fit` does), JAX under
`jax.jit`, PyTorch eagerly. `blocks` and `speed` run the chunked path on
TensorFlow under `tf.function`, n = 4096, dim 64. Linux only (VmHWM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

# `from benchmarks import _environment` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment

_HEADS = 8


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024


def _step(n, dim, chunk_size, flash, padded):
    """One fwd+bwd step of the kernel, on the current backend."""
    import keras

    from keras_selfattn import attention

    attention.set_memory_budget(1 << 60)  # the plain path unless chunk_size
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, n, _HEADS, dim)).astype("float32") for _ in "qkv")
    mask = np.arange(n)[None] < n - n // 4 if padded else None

    def fn(q, k, v):
        return attention.scaled_dot_product_attention(
            q, k, v, padding_mask=mask, chunk_size=chunk_size, flash_attention=flash
        )

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function
        def step(q, k, v):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                loss = tf.reduce_sum(fn(q, k, v))
            return tape.gradient(loss, [q, k, v])

        return lambda: [g.numpy() for g in step(q, k, v)]
    if backend == "jax":
        import jax

        step = jax.jit(jax.grad(lambda *a: fn(*a).sum(), argnums=(0, 1, 2)))
        return lambda: [np.asarray(g) for g in step(q, k, v)]
    import torch

    def run():
        args = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
        fn(*args).sum().backward()
        return [a.grad for a in args]

    return run


def _child(n, dim, chunk_size, flash, padded):
    _step(64, dim, chunk_size, flash, padded)()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status("VmRSS")
    _step(n, dim, chunk_size, flash, padded)()
    print(json.dumps(_status("VmHWM") - before))


def _peak(backend, n, dim, chunk_size=None, flash=False, padded=False):
    code = (
        "import sys; sys.path.insert(0, 'benchmarks'); import footprint; "
        f"footprint._child({n}, {dim}, {chunk_size}, {flash}, {padded})"
    )
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def weights():
    for backend in ("tensorflow", "jax", "torch"):
        paths = ("plain",) if backend == "tensorflow" else ("plain", "fused")
        for path in paths:
            for padded in (False, True):
                flash = None if path == "fused" else False
                peaks = [
                    _peak(backend, n, 16, None, flash, padded) for n in (1024, 2048)
                ]
                elements = _HEADS * (2048**2 - 1024**2)
                slope = (peaks[1] - peaks[0]) / elements
                print(f"{backend:10} {path:5} padded={padded!s:5} peaks {peaks} "
                      f"-> {slope:.2f} bytes per element")  # fmt: skip


def blocks():
    sizes = (128, 1024)
    peaks = [_peak("tensorflow", 4096, 64, size) for size in sizes]
    slope = (peaks[1] - peaks[0]) / (_HEADS * 4096 * (sizes[1] - sizes[0]))
    print(f"chunked, blocks {sizes}: peaks {peaks} -> {slope:.2f} bytes per element")


def speed(sizes=(64, 128, 256, 512), repeats=3):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    steps = {size: _step(4096, 64, size, False, False) for size in sizes}
    for step in steps.values():
        step()
    times = {size: [] for size in sizes}
    for _ in range(repeats):  # alternating
        for size, step in steps.items():
            start = time.perf_counter()
            step()
            times[size].append(time.perf_counter() - start)
    for size in sizes:
        print(f"chunk_size={size}: median {np.median(times[size]):.2f} s")


MEASURES = {"weights": weights, "blocks": blocks, "speed": speed}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in MEASURES:
        print(f"usage: python benchmarks/footprint.py {{{','.join(MEASURES)}}}",
              file=sys.stderr)  # fmt: skip
        return 2
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    print(_environment.header(), flush=True)
    MEASURES[argv[0]]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
