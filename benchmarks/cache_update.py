"""A decoding step's cache update on TensorFlow: slice update against scatter.

One step of `CachedMultiHeadAttention` (batch 4, 8 heads of 64, one new
token, a cache of `--cache-len` positions, causal) timed eagerly, in a
`tf.function` and under XLA (`jit_compile=True`), with the cache written by
Keras's `slice_update` (`XlaDynamicUpdateSlice`) and by the scatter that
`keras_selfattn._backend.update_cache` takes in a graph (which ONNX
exports), alternating, `--repeats` times 20 steps each. Printed per mode:
the median milliseconds per step of each and the ratio scatter / slice.
`_backend.update_cache`'s docstring quotes it.

    python benchmarks/cache_update.py [--cache-len 1024] [--repeats 6]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np

# `from benchmarks import _environment` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment

BATCH, HEADS, HEAD_DIM, STEPS = 4, 8, 64, 20


def slice_update(cache, update, index):
    """Keras's slice update: what the cache update was before 2026-12-07."""
    from keras import ops

    return ops.slice_update(cache, [0, index, 0, 0], update)


def as_in_a_graph(update_cache):
    """`update_cache` taking its graph path (a scatter), eagerly too: run
    with `tf.executing_eagerly` answering False."""
    import tensorflow as tf

    def scatter(cache, update, index):
        eagerly = tf.executing_eagerly
        tf.executing_eagerly = lambda: False
        try:
            return update_cache(cache, update, index)
        finally:
            tf.executing_eagerly = eagerly

    return scatter


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-len", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args(argv)
    print(_environment.header())
    import tensorflow as tf

    from keras_selfattn import CachedMultiHeadAttention, _backend

    layer = CachedMultiHeadAttention(HEADS, HEAD_DIM)
    x = tf.random.normal((BATCH, 1, HEADS * HEAD_DIM), seed=1)
    cache = tf.random.normal((BATCH, 2, args.cache_len, HEADS, HEAD_DIM), seed=2)
    layer(x, x, cache=cache, cache_update_index=0)
    original = _backend.update_cache
    scatter = as_in_a_graph(original)

    def step(x, cache, index):
        return layer(x, x, cache=cache, cache_update_index=index, use_causal_mask=True)

    modes = {
        "eager": lambda: step,
        "tf.function": lambda: tf.function(step),
        "XLA": lambda: tf.function(step, jit_compile=True),
    }
    for mode, make in modes.items():
        times = {"slice": [], "scatter": []}
        for _ in range(args.repeats):
            for name, update in (("slice", slice_update), ("scatter", scatter)):
                _backend.update_cache = update
                run = make()
                run(x, cache, tf.constant(1))  # traced (and compiled) here
                start = time.perf_counter()
                for i in range(STEPS):
                    out, _ = run(x, cache, tf.constant(i + 2))
                out.numpy()
                times[name].append((time.perf_counter() - start) / STEPS * 1e3)
        _backend.update_cache = original
        sliced, scattered = (np.median(times[k]) for k in ("slice", "scatter"))
        print(
            f"{mode:12s} slice {sliced:7.2f} ms  scatter {scattered:7.2f} ms  "
            f"scatter / slice {scattered / sliced:.2f}"
        )


if __name__ == "__main__":
    main()
