"""The kernel's choice of path: `plan_attention` on a table of cases (no
tensor is built), and the memory budget it is given."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import keras_selfattn.attention as attention
from keras_selfattn import AttentionPlan, plan_attention

pytestmark = pytest.mark.backend_independent

GIB = 1 << 30
_PER_ELEMENT = attention.TRAINING_BYTES_PER_ELEMENT
_FASTEST, _SMALLEST = attention.CHUNK_SIZES[0], attention.CHUNK_SIZES[-1]


def _weights(backend, path, batch, heads, q_len, k_len):
    """The footprint the table's budgets sit on either side of."""
    return batch * heads * q_len * k_len * _PER_ELEMENT[backend][path]


def _block(batch, heads, q_len, size):
    return batch * heads * q_len * size * attention.CHUNK_BYTES_PER_ELEMENT


_SHAPE = dict(batch=2, heads=8, q_len=4096, k_len=4096, dim=64, value_dim=64)
_TF = _weights("tensorflow", "plain", 2, 8, 4096, 4096)
_JAX = _weights("jax", "fused", 2, 8, 4096, 4096)

# Each case: the shape and options (over `_SHAPE`), the backend, the budget,
# and the plan (path, chunk_size).
CASES = {
    "tf-fits-exactly-plain": ({}, "tensorflow", _TF, ("plain", None)),
    "tf-one-byte-short-chunked": ({}, "tensorflow", _TF - 1, ("chunked", _FASTEST)),
    "tf-16gib-batch2-n4096-plain": ({}, "tensorflow", 16 * GIB, ("plain", None)),
    "tf-16gib-batch8-n8192-chunked": (
        dict(batch=8, q_len=8192, k_len=8192),
        "tensorflow",
        16 * GIB,
        ("chunked", _FASTEST),
    ),
    "jax-fits-fused": ({}, "jax", _JAX, ("fused", None)),
    "jax-short-chunked": ({}, "jax", _JAX - 1, ("chunked", _FASTEST)),
    "torch-fits-fused": ({}, "torch", 16 * GIB, ("fused", None)),
    "jax-no-flash-fits-plain": (
        dict(flash_attention=False),
        "jax",
        16 * GIB,
        ("plain", None),
    ),
    "jax-half-on-cpu-plain": (dict(half_on_cpu=True), "jax", 16 * GIB, ("plain", None)),
    "jax-value-dim-differs-plain": (
        dict(value_dim=32),
        "jax",
        16 * GIB,
        ("plain", None),
    ),
    "unknown-batch-counts-as-one": (
        dict(batch=None),
        "tensorflow",
        _TF // 2,
        ("plain", None),
    ),
    "unknown-batch-one-too-big": (
        dict(batch=None),
        "tensorflow",
        _TF // 2 - 1,
        ("chunked", _FASTEST),
    ),
    "unknown-length-plain": (dict(k_len=None), "tensorflow", 1, ("plain", None)),
    "unknown-length-fused": (dict(q_len=None), "jax", 1, ("fused", None)),
    "unknown-length-dropout-plain": (
        dict(q_len=None, dropout=0.1),
        "torch",
        1,
        ("plain", None),
    ),
    # An explicit chunk_size keeps its path in a TensorFlow graph of any
    # length (Keras's `fit` retraces so from the second length on); JAX's
    # symbolic lengths (`jax.export`) still take the plain or fused path.
    "unknown-length-chunk-size-tensorflow-chunked": (
        dict(q_len=None, k_len=None, chunk_size=64),
        "tensorflow",
        16 * GIB,
        ("chunked", 64),
    ),
    "unknown-length-chunk-size-jax-fused": (
        dict(k_len=None, chunk_size=64),
        "jax",
        16 * GIB,
        ("fused", None),
    ),
    "unknown-length-chunk-size-scores-plain": (
        dict(k_len=None, chunk_size=64, return_scores=True),
        "tensorflow",
        16 * GIB,
        ("plain", None),
    ),
    "empty-keys-plain": (dict(k_len=0), "tensorflow", 1, ("plain", None)),
    "return-scores-plain": (dict(return_scores=True), "tensorflow", 1, ("plain", None)),
    "scores-beat-chunk-size": (
        dict(return_scores=True, chunk_size=64),
        "jax",
        1,
        ("plain", None),
    ),
    "dropout-keeps-plain": (dict(dropout=0.1), "tensorflow", 1, ("plain", None)),
    "explicit-chunk-size-over-fused": (
        dict(chunk_size=64),
        "jax",
        16 * GIB,
        ("chunked", 64),
    ),
    "explicit-chunk-size-one-known-block-chunked": (
        dict(q_len=16, k_len=16, chunk_size=64),
        "torch",
        16 * GIB,
        ("chunked", 64),
    ),
    # A 0-d array stands in for the 0-d tensors that PyTorch's tracer hands
    # on as lengths (`torch.onnx` traces an unknown length as 1).
    "traced-length-in-one-block-fused": (
        dict(q_len=np.array(1), k_len=np.array(1), chunk_size=64),
        "torch",
        16 * GIB,
        ("fused", None),
    ),
    "traced-length-in-one-block-no-flash-plain": (
        dict(k_len=np.array(64), chunk_size=64, flash_attention=False),
        "torch",
        16 * GIB,
        ("plain", None),
    ),
    "traced-length-beyond-one-block-chunked": (
        dict(k_len=np.array(65), chunk_size=64),
        "torch",
        16 * GIB,
        ("chunked", 64),
    ),
    # Without a chunk_size, over the budget: the same (PyTorch's ONNX file
    # of a model exported with a small memory budget computed no other
    # length, 2026-12-08).
    "traced-length-in-one-block-over-budget-fused": (
        dict(q_len=np.array(1), k_len=np.array(1)),
        "torch",
        1,
        ("fused", None),
    ),
    "traced-length-beyond-one-block-over-budget-chunked": (
        dict(k_len=np.array(_SMALLEST + 1)),
        "torch",
        1,
        ("chunked", _SMALLEST),
    ),
    "flash-true-fused-beyond-budget": (
        dict(flash_attention=True),
        "torch",
        1,
        ("fused", None),
    ),
    "flash-true-half-on-cpu-fused": (
        dict(flash_attention=True, half_on_cpu=True),
        "jax",
        1,
        ("fused", None),
    ),
    "masks-change-nothing": (
        dict(mask=True, padding_mask=True, causal=True, sliding_window=8),
        "tensorflow",
        _TF - 1,
        ("chunked", _FASTEST),
    ),
    "fastest-block-too-big-next": (
        {},
        "tensorflow",
        _block(2, 8, 4096, _FASTEST) - 1,
        ("chunked", attention.CHUNK_SIZES[1]),
    ),
    "no-block-fits-smallest": ({}, "tensorflow", 1, ("chunked", _SMALLEST)),
    "numpy-backend-plain": ({}, "numpy", 16 * GIB, ("plain", None)),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_plan_table(case):
    options, backend, budget, (path, chunk_size) = CASES[case]
    plan = plan_attention(
        **{**_SHAPE, **options}, backend=backend, memory_budget=budget
    )
    assert isinstance(plan, AttentionPlan)
    assert (plan.path, plan.chunk_size) == (path, chunk_size)


def test_plan_reports_the_footprint_it_compared():
    plan = plan_attention(**_SHAPE, backend="tensorflow", memory_budget=16 * GIB)
    assert plan.footprint == 2 * 8 * 4096 * 4096 * _PER_ELEMENT["tensorflow"]["plain"]
    with pytest.raises(AttributeError):
        plan.path = "fused"  # frozen


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(backend="tensorflow"), "the tensorflow backend has no fused kernel"),
        (dict(backend="jax", return_scores=True), "does not return the attention"),
        (dict(backend="torch", value_dim=32), "value's last dimension"),
    ],
    ids=["tensorflow", "return-scores", "value-dim"],
)
def test_flash_true_that_cannot_be_honoured_raises(options, match):
    with pytest.raises(ValueError, match=match):
        plan_attention(
            **{**_SHAPE, **options, "flash_attention": True}, memory_budget=GIB
        )


_BAD_PLANS = {
    "budget_negative": (
        dict(memory_budget=-5),
        r"`memory_budget`, expected a positive",
    ),
    "heads_zero": (dict(heads=0), r"`heads`, expected a positive integer"),
    "q_len_negative": (dict(q_len=-3), r"`q_len`, expected an integer >= 0 or `None`"),
    "backend_misspelt": (dict(backend="tensorflw"), r"`backend`, expected one of"),
    "dropout_above_1": (dict(dropout=2.0), r"`dropout`"),
    "window_zero": (dict(sliding_window=0), r"`sliding_window`"),
    "causal_a_string": (dict(causal="no"), r"`causal`, expected a boolean"),
    "chunk_size_zero": (dict(chunk_size=0), r"`chunk_size`"),
    # What the docstring's rule 3 calls an error, and the kernel refuses.
    "chunk_size_with_dropout": (dict(chunk_size=2, dropout=0.1), r"dropout"),
    "chunk_size_with_flash": (
        dict(chunk_size=2, flash_attention=True, backend="jax"),
        r"two different attention paths",
    ),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("options, match", _BAD_PLANS.values(), ids=_BAD_PLANS.keys())
def test_bad_arguments_are_a_value_error_not_a_plan(options, match):
    # plan_attention is public: these returned plans (a negative footprint,
    # a chunked plan with dropout), where the kernel would have refused.
    arguments = {**_SHAPE, "backend": "tensorflow", "memory_budget": GIB, **options}
    with pytest.raises(ValueError, match=match):
        plan_attention(**arguments)


# ------------------------------------------------------------------- budget


@pytest.fixture
def fresh_budget(monkeypatch):
    """No budget set or measured yet, and a host with 10 GiB free."""
    monkeypatch.setattr(attention, "_budget", {"set": None, "default": None})
    monkeypatch.delenv(attention.MEMORY_BUDGET_ENV, raising=False)
    monkeypatch.setattr(attention._backend, "free_memory", lambda: ("host", 10 * GIB))


def test_default_budget_is_a_share_of_free_memory_logged_once(fresh_budget, caplog):
    with caplog.at_level(logging.DEBUG, logger="keras_selfattn"):
        assert attention.memory_budget() == 5 * GIB
        assert attention.memory_budget() == 5 * GIB
    records = [r.getMessage() for r in caplog.records]
    assert records == [
        f"Attention memory budget: {5 * GIB} bytes (0.5 of the host's free "
        f"{10 * GIB} bytes)"
    ]


def test_budget_from_the_environment_and_the_setter(fresh_budget, monkeypatch):
    monkeypatch.setenv(attention.MEMORY_BUDGET_ENV, "3e9")
    assert attention.memory_budget() == 3_000_000_000
    attention.set_memory_budget(1234)
    try:
        assert attention.memory_budget() == 1234
    finally:
        attention.set_memory_budget(None)
    assert attention.memory_budget() == 3_000_000_000


@pytest.mark.parametrize(
    "raw",
    ["lots", "0", "-5", "inf", "1e400", "nan"],
    ids=["word", "zero", "negative", "infinite", "overflowing", "nan"],
)
def test_invalid_budget_from_the_environment(fresh_budget, monkeypatch, raw):
    monkeypatch.setenv(attention.MEMORY_BUDGET_ENV, raw)
    with pytest.raises(ValueError, match="KERAS_SELFATTN_MEMORY_BUDGET"):
        attention.memory_budget()


@pytest.mark.parametrize("budget", [0, -1, 1.5, True], ids=["0", "-1", "1.5", "True"])
def test_invalid_budget_for_the_setter(budget):
    with pytest.raises(ValueError, match="Received: budget="):
        attention.set_memory_budget(budget)
