"""float32 attention gradients against a float64 reference, by logit size.

One call of `scaled_dot_product_attention` (batch 1, 64 queries and keys,
2 heads of 16), its inputs scaled so that the logits are near 10, 1e3 and
1e5, differentiated with a random upstream gradient on the TensorFlow
backend: in float64 (the reference; TensorFlow computes float64 in float64)
and in float32 on the plain and the chunked path (`chunk_size=16`). Printed
per row: the relative error (Frobenius norm) of the gradients of the query,
key and value. docs/math.md quotes it.

    python benchmarks/precision.py

No thresholds: this script measures; the tests check the paths against a
NumPy reference at ordinary logits.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np

# `from benchmarks import _environment` from any working folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import _environment

MAGNITUDES = (1e1, 1e3, 1e5)
SHAPE = (1, 64, 2, 16)  # (batch, seq, heads, dim)
PATHS = {"plain": None, "chunked": 16}


def gradients(inputs, upstream, dtype: str, chunk_size: int | None):
    """The gradients of sum(output * upstream) with respect to q, k, v."""
    import tensorflow as tf

    from keras_selfattn import scaled_dot_product_attention

    tensors = [tf.constant(t, dtype) for t in inputs]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        output = scaled_dot_product_attention(*tensors, chunk_size=chunk_size)
        loss = tf.reduce_sum(output * tf.constant(upstream, dtype))
    return [g.numpy().astype("float64") for g in tape.gradient(loss, tensors)]


def main() -> None:
    print(_environment.header())
    rng = np.random.default_rng(0)
    for magnitude in MAGNITUDES:
        q, k, v, upstream = (rng.normal(size=SHAPE) for _ in range(4))
        # q.k over 16 dims, times the scale 1/4, has standard deviation 1;
        # q and k each stretched by sqrt(magnitude / 4) give logits of
        # standard deviation magnitude / 4 (a row's largest near magnitude).
        stretch = np.sqrt(magnitude / 4)
        inputs = (q * stretch, k * stretch, v)
        reference = gradients(inputs, upstream, "float64", None)
        for name, chunk_size in PATHS.items():
            got = gradients(inputs, upstream, "float32", chunk_size)
            errors = [
                np.linalg.norm(a - b) / np.linalg.norm(b)
                for a, b in zip(got, reference, strict=True)
            ]
            print(
                f"logits ~{magnitude:.0e}  {name:8s}  relative error: "
                f"d_query {errors[0]:.2e}  d_key {errors[1]:.2e}  "
                f"d_value {errors[2]:.2e}"
            )


if __name__ == "__main__":
    main()
