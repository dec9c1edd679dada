"""The backend seam: `values_known` (eager values are read, traced ones not),
`comparable_dim`, `positions`, `update_cache`, `may_need_gradient` and the
fused kernel under torch.compile."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_selfattn import _backend, scaled_dot_product_attention
from keras_selfattn.layers._block import ExportableLayerNormalization
from tests.helpers import BACKEND, assert_close, to_numpy


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


@pytest.mark.parametrize("length", [0, 1, 7], ids=["empty", "one", "seven"])
def test_positions_are_int32_from_zero(length):
    got = _backend.positions(length)
    assert keras.backend.standardize_dtype(got.dtype) == "int32"
    np.testing.assert_array_equal(to_numpy(got), np.arange(length, dtype="int32"))


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's symbolic dimensions")
def test_positions_of_a_symbolic_length_have_that_length():
    import jax
    from jax import export

    (n,) = export.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n, 3), "float32")
    out = jax.eval_shape(lambda x: _backend.positions(x.shape[0]), spec)
    assert out.shape == (n,) and out.dtype == "int32"


_UPDATES = {
    # (batch, cache length, update length, index, the index as a tensor)
    "one-step-at-0": (2, 5, 1, 0, False),
    "one-step-at-the-end": (2, 5, 1, 4, True),
    "two-steps-in-the-middle": (3, 6, 2, 2, True),
    "whole-cache": (1, 4, 4, 0, False),
}


@pytest.mark.parametrize("case", list(_UPDATES), ids=list(_UPDATES))
def test_update_cache_writes_the_update_at_the_index_only(case):
    batch, size, length, index, as_tensor = _UPDATES[case]
    rng = np.random.default_rng(1)
    cache = rng.normal(size=(batch, size, 2, 3)).astype("float32")
    update = rng.normal(size=(batch, length, 2, 3)).astype("float32")
    want = cache.copy()
    want[:, index : index + length] = update
    at = keras.ops.convert_to_tensor(index, "int32") if as_tensor else index
    got = _backend.update_cache(
        keras.ops.convert_to_tensor(cache), keras.ops.convert_to_tensor(update), at
    )
    np.testing.assert_array_equal(to_numpy(got), want)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow's graphs")
def test_update_cache_in_a_tensorflow_graph_scatters_for_the_exporters():
    import tensorflow as tf

    spec = tf.TensorSpec((None, None, 2), tf.float32)
    index_spec = tf.TensorSpec((), tf.int32)
    graph = tf.function(_backend.update_cache).get_concrete_function(
        spec, spec, index_spec
    )
    op_types = {op.type for op in graph.graph.get_operations()}
    # tf2onnx has no conversion for XlaDynamicUpdateSlice (a slice update).
    assert "TensorScatterUpdate" in op_types
    assert "XlaDynamicUpdateSlice" not in op_types
    cache = np.arange(3 * 4 * 2, dtype="float32").reshape(3, 4, 2)
    update = -np.ones((3, 2, 2), "float32")
    want = cache.copy()
    want[:, 1:3] = update
    np.testing.assert_array_equal(graph(cache, update, tf.constant(1)).numpy(), want)


_NORMS = {
    # (layer arguments, input shape)
    "float32": ({}, (2, 3, 4)),
    "mixed-float16": ({"dtype": "mixed_float16"}, (2, 3, 4)),
    "scale-only": ({"center": False}, (2, 3, 4)),
    "center-only": ({"scale": False}, (2, 3, 4)),
    "rank-2": ({"epsilon": 1e-3}, (5, 6)),
}


@pytest.mark.parametrize("case", list(_NORMS), ids=list(_NORMS))
def test_layer_norm_is_keras_layer_normalization(case):
    kwargs, shape = _NORMS[case]
    rng = np.random.default_rng(2)
    x = (3 * rng.normal(size=shape) + 1).astype("float32")
    norm = ExportableLayerNormalization(**kwargs)
    norm.build(shape)
    # Over the last axis, the blocks' (Keras's PyTorch path fails on another).
    gamma, beta = rng.normal(size=(2, shape[-1])).astype("float32")
    norm.set_weights(
        [w for w, kept in ((gamma, norm.gamma), (beta, norm.beta)) if kept is not None]
    )
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    want = (x - mean) / np.sqrt(var + kwargs.get("epsilon", 1e-3))
    if norm.gamma is not None:
        want = want * gamma
    if norm.beta is not None:
        want = want + beta
    got = norm(x)
    assert keras.backend.standardize_dtype(got.dtype) == norm.compute_dtype
    assert_close(to_numpy(got), want, atol=1e-2 if "16" in case else 1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's autograd and tracer")
def test_torch_traces_the_chunked_path_and_skips_the_custom_gradient_there():
    import torch

    assert _backend.may_need_gradient()
    with torch.no_grad():
        assert not _backend.may_need_gradient()
    # `torch.jit.trace` (as `model.export(format="onnx")` runs it) cannot
    # record the custom gradient's `autograd.Function`: "unordered_map::at".
    q, k, v = (np.random.default_rng(i).normal(size=(2, 9, 4)) for i in range(3))
    q, k, v = (torch.tensor(t, dtype=torch.float32) for t in (q, k, v))

    def chunked(q, k, v):
        return scaled_dot_product_attention(q, k, v, chunk_size=4, causal=True)

    traced = torch.jit.trace(chunked, (q, k, v), check_trace=False)
    expected = scaled_dot_product_attention(q, k, v, causal=True, chunk_size=None)
    assert_close(traced(q, k, v), expected, atol=1e-6)


@pytest.mark.skipif(BACKEND != "jax", reason="jax.export's symbolic shapes")
def test_jax_exports_the_chunked_path_with_a_symbolic_batch_and_its_gradient():
    # What Keras's SavedModel (jax2tf) and ONNX (jax2onnx) exports trace:
    # a symbolic batch, which the choice of path cannot compare with the
    # memory budget, and (jax2tf) the gradient, which a custom gradient
    # closing over traced tensors broke.
    import jax
    import jax.numpy as jnp
    from jax import export

    def loss(q, k, v):
        out = scaled_dot_product_attention(q, k, v, chunk_size=4, causal=True)
        return jnp.sum(out**2)

    spec = jax.ShapeDtypeStruct(export.symbolic_shape("batch, 9, 2, 4"), "float32")
    exported = export.export(jax.jit(jax.grad(loss, argnums=(0, 1, 2))))(
        spec, spec, spec
    )
    q, k, v = (
        jnp.asarray(np.random.default_rng(i).normal(size=(3, 9, 2, 4)), "float32")
        for i in range(3)
    )

    def plain_loss(q, k, v):
        out = scaled_dot_product_attention(q, k, v, causal=True, flash_attention=False)
        return jnp.sum(out**2)

    expected = jax.grad(plain_loss, argnums=(0, 1, 2))(q, k, v)
    for got, want in zip(exported.call(q, k, v), expected, strict=True):
        assert_close(got, want, atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.compile")
def test_torch_compile_takes_the_fused_path_in_one_graph():
    # Keras's PyTorch op, left to choose, asks through `SDPAParams` (a C++
    # object torch.compile cannot trace) whether flash attention may run:
    # a compiled model broke its graph at every attention call.
    import torch

    from keras_selfattn.attention import memory_budget, plan_attention

    shape = dict(batch=2, q_len=5, k_len=5, heads=2, dim=4, value_dim=4)
    plan = plan_attention(
        **shape, backend="torch", memory_budget=memory_budget(), padding_mask=True
    )
    assert plan.path == "fused"
    q, k, v = (
        torch.tensor(
            np.random.default_rng(i).normal(size=(2, 5, 2, 4)), dtype=torch.float32
        )
        for i in range(3)
    )
    padding = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])

    def attend(q, k, v, padding):
        return scaled_dot_product_attention(q, k, v, padding_mask=padding)

    compiled = torch.compile(attend, fullgraph=True, backend="eager")
    expected = scaled_dot_product_attention(
        q, k, v, padding_mask=padding, flash_attention=False
    )
    assert_close(compiled(q, k, v, padding), expected, atol=1e-6)
    # Off a CPU (a meta tensor stands for a GPU's) Keras is left to choose
    # eagerly, as before; not under torch.compile.
    elsewhere = torch.empty((2,), device="meta")
    assert not _backend._torch_cpu_or_compiling(elsewhere)

    def asks_nothing(t):
        return torch.ones(1) if _backend._torch_cpu_or_compiling(t) else torch.zeros(1)

    compiled = torch.compile(asks_nothing, fullgraph=True, backend="eager")
    assert to_numpy(compiled(elsewhere)).tolist() == [1.0]
