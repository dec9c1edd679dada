"""Shared test setup: seeding, backend selection, helpers."""

from __future__ import annotations

import os

# XLA compiles each test's small graphs (JAX's jit and its eager ops,
# TensorFlow's jit_compile) faster without its expensive optimization passes
# (the JAX pass took about half the time) and with its older CPU code
# emitter instead of the fusion emitters (about half again: 120 steps of
# einsum, softmax and arithmetic at new shapes, JAX 0.10 on a 2-core EPYC,
# 75 s -> 37 s; TensorFlow's jit_compile 5.8 s -> 3.3 s for 40). Results are
# the same within the tests' tolerances; the benchmarks, which measure
# speed, keep XLA's defaults.
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false",
)

import keras
import numpy as np
import pytest

import keras_selfattn.attention as _attention
from tests.helpers import BACKEND


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend: {BACKEND}"


# Tests with these marks run in one pass only. `tensorflow_only`: they need
# TensorFlow (the demo, tf.function, tf.distribute). `backend_independent`:
# they would test the same thing on every backend (argument checks, configs).
# `jax_pass`: backend-agnostic and slow (the notebooks that run on any
# backend), run once, in the JAX pass, to balance the two lanes (TensorFlow;
# JAX, then PyTorch and the Keras floor).
_ONE_PASS_MARKS = {
    "tensorflow_only": "tensorflow",
    "backend_independent": "tensorflow",
    "jax_pass": "jax",
}


def pytest_collection_modifyitems(config, items):
    """Deselects the tests that run in another backend's pass."""
    keep, drop = [], []
    for item in items:
        other_pass = any(
            item.get_closest_marker(mark) and backend != BACKEND
            for mark, backend in _ONE_PASS_MARKS.items()
        )
        (drop if other_pass else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _seeded_and_float32():
    """Every test starts seeded, under the float32 policy, and leaves it so."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def chunked_calls(monkeypatch):
    """Counts calls of the chunked path (and records the block sizes)."""
    calls = []
    original = _attention._chunked_attention

    def spy(*args, **kwargs):
        calls.append(kwargs["chunk_size"])
        return original(*args, **kwargs)

    monkeypatch.setattr(_attention, "_chunked_attention", spy)
    return calls


@pytest.fixture
def memory_budget():
    """Sets the kernel's memory budget for one test: `memory_budget(bytes)`."""
    yield _attention.set_memory_budget
    _attention.set_memory_budget(None)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def subprocess_env():
    """Environment for fresh Python processes: same backend, quiet TF logs."""
    env = dict(os.environ)
    env["KERAS_BACKEND"] = BACKEND
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def pytest_terminal_summary(terminalreporter):
    """Prints how Keras's and keras-hub's own layer tests fare on ours, one
    line a suite (an "xfailed" is a named expected failure)."""
    suites = (
        ("KerasMultiHeadAttentionTest", "multi_head_attention_test.py",
         "MultiHeadAttention"),
        ("KerasGroupedQueryAttentionTest", "grouped_query_attention_test.py",
         "GroupQueryAttention"),
    )  # fmt: skip
    hub_suites = (
        ("KerasHubTransformerEncoderTest", "transformer_encoder_test.py",
         "TransformerEncoder"),
        ("KerasHubTransformerDecoderTest", "transformer_decoder_test.py",
         "TransformerDecoder"),
        ("KerasHubCachedMultiHeadAttentionTest",
         "cached_multi_head_attention_test.py", "CachedMultiHeadAttention"),
        ("KerasHubTokenAndPositionEmbeddingTest",
         "token_and_position_embedding_test.py", "TokenAndPositionEmbedding"),
    )  # fmt: skip
    runs = [("test_keras_suite.py", "Keras's", *suite) for suite in suites]
    runs += [("test_keras_hub_suite.py", "keras-hub's", *s) for s in hub_suites]
    for module, owner, test_class, keras_file, ours in runs:
        counts = {}
        for outcome in ("passed", "failed", "skipped", "error", "xfailed"):
            counts[outcome] = sum(
                f"{module}::{test_class}::" in report.nodeid
                and getattr(report, "when", "call") in ("call", "setup")
                for report in terminalreporter.stats.get(outcome, [])
            )
        total = sum(counts.values())
        if total:
            listed = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
            terminalreporter.write_line(
                f"{owner} {keras_file} on keras_selfattn.{ours} ({BACKEND}): "
                f"{listed} of {total}"
            )
