"""The backend seam's `values_known`: eager values are read, traced ones not."""

from __future__ import annotations

import keras
import numpy as np

from keras_selfattn import _backend


def test_eager_values_are_known_traced_ones_are_not():
    ids = np.array([[1, 2]], "int32")
    assert _backend.values_known(ids)  # a NumPy array (it crashed on torch)
    assert _backend.values_known(keras.ops.convert_to_tensor(ids))
    assert not _backend.values_known(keras.KerasTensor((None, 2), "int32"))
    seen = []
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.function(lambda x: seen.append(_backend.values_known(x)) or x)(ids)
    elif backend == "jax":
        import jax

        jax.jit(lambda x: seen.append(_backend.values_known(x)) or x)(ids)
    else:
        import torch

        seen.append(_backend.values_known(torch.empty((1, 2), device="meta")))
    assert seen == [False]
