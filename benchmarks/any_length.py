"""A training step in a TensorFlow graph traced for any length: ours against Keras's.

Keras's TensorFlow `fit`, `evaluate` and `predict` trace their step for any
sequence length from the second length they meet on (`reduce_retracing`),
so the kernel sees the length as unknown there: it takes the plain path, or
the chunked one with an explicit `chunk_size` (`keras_selfattn.plan_attention`,
rule 2). This script times one training step (forward and backward with a
`tf.GradientTape`, batch `--batch`, model dim `--dim`, `--heads` heads) in
a `tf.function` whose input signature leaves the length unknown, in a plain
graph and under XLA (`jit_compile=True`, as Keras compiles where a GPU is
present), of:

- `keras.layers.MultiHeadAttention(heads, dim // heads)` ("Keras MHA"),
  the baseline;
- `keras_selfattn.SelfAttention(dim, num_heads=heads)` ("ours"): the
  plain path;
- the same layer with `chunk_size=256` ("ours, chunk_size=256"): the
  chunked path, its loop counting the blocks when the graph runs.

The three alternate, `--repeats` times `--steps` steps each, at each length
of `--lengths`; printed per mode and length: the median milliseconds per
step and the ratios to Keras's.

    python benchmarks/any_length.py [--lengths 128,512,1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

# `from benchmarks import _environment` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment

ARMS = ("Keras MHA", "ours", "ours, chunk_size=256")


def make_step(arm: str, dim: int, heads: int, jit: bool):
    """One training step of `arm` on (batch, any length, dim) inputs."""
    import keras
    import tensorflow as tf

    import keras_selfattn

    if arm == "Keras MHA":
        layer = keras.layers.MultiHeadAttention(heads, dim // heads)
        layer.build((None, None, dim), (None, None, dim))

        def call(x):
            return layer(x, x, training=True)

    else:
        chunk = 256 if arm == ARMS[2] else None
        layer = keras_selfattn.SelfAttention(dim, num_heads=heads, chunk_size=chunk)
        layer.build((None, None, dim))

        def call(x):
            return layer(x, training=True)

    @tf.function(input_signature=[tf.TensorSpec((None, None, dim))], jit_compile=jit)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(call(x)))
        return loss, tape.gradient(loss, layer.trainable_weights)

    return step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="128,512,1024")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(_environment.header())
    import tensorflow as tf

    lengths = [int(n) for n in args.lengths.split(",")]
    for mode, jit in (("tf.function", False), ("XLA", True)):
        steps = {arm: make_step(arm, args.dim, args.heads, jit) for arm in ARMS}

        def run(arm, x, steps=steps):
            loss, _ = steps[arm](x)
            loss.numpy()

        for n in lengths:
            x = tf.random.normal((args.batch, n, args.dim), seed=n)
            times = {arm: [] for arm in ARMS}
            for arm in ARMS:
                run(arm, x)  # traced (or compiled for this length) here
            for _ in range(args.repeats):
                for arm in ARMS:  # alternating: load changes hit all alike
                    start = time.perf_counter()
                    for _ in range(args.steps):
                        run(arm, x)
                    times[arm].append((time.perf_counter() - start) / args.steps * 1e3)
            keras_ms, ours, chunked = (np.median(times[arm]) for arm in ARMS)
            print(
                f"{mode:11s} n={n:5d}  Keras MHA {keras_ms:8.2f} ms  ours "
                f"{ours:8.2f} ms ({ours / keras_ms:.2f}x)  ours, chunk_size=256 "
                f"{chunked:8.2f} ms ({chunked / keras_ms:.2f}x)"
            )


if __name__ == "__main__":
    main()
