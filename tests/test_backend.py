"""The backend seam: `values_known` (eager values are read, traced ones not),
`comparable_dim` and `may_need_gradient`."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn import _backend, scaled_dot_product_attention
from tests.helpers import BACKEND, assert_close


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


def test_comparable_dims_are_ints_and_symbolic_ones_unknown():
    assert _backend.comparable_dim(None) is None
    assert _backend.comparable_dim(np.int64(3)) == 3
    assert type(_backend.comparable_dim(np.int64(3))) is int
    if BACKEND == "jax":
        # The batch of a model that `jax.export` (jax2tf, jax2onnx) traces:
        # `batch <= 10` raises there, so the choice of path must not see it.
        from jax import export

        (batch,) = export.symbolic_shape("batch")
        assert _backend.comparable_dim(batch) is None


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's autograd and tracer")
def test_torch_runs_the_chunked_loop_plainly_where_nothing_is_recorded():
    import torch

    assert _backend.may_need_gradient()
    with torch.no_grad():
        assert not _backend.may_need_gradient()
    seen = []

    def record(x):
        seen.append(_backend.may_need_gradient(x))
        return x * 2

    torch.jit.trace(record, torch.ones(2), check_trace=False)  # as ONNX export
    assert seen == [False]
    # The same numbers either way.
    q, k, v = (np.random.default_rng(i).normal(size=(2, 9, 4)) for i in range(3))
    q, k, v = (torch.tensor(t, dtype=torch.float32) for t in (q, k, v))
    with_gradient = scaled_dot_product_attention(q, k, v, chunk_size=4)
    with torch.no_grad():
        without = scaled_dot_product_attention(q, k, v, chunk_size=4)
    assert_close(without, with_gradient, atol=1e-6)
