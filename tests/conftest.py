"""Shared test setup: seeding, backend selection, helpers."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

BACKEND = keras.backend.backend()


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend: {BACKEND}"


def pytest_collection_modifyitems(config, items):
    """Deselects TensorFlow-only tests (the demo, tf.function, tf.distribute)
    on the JAX and PyTorch backends: they are run in the TensorFlow pass."""
    if BACKEND == "tensorflow":
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("tensorflow_only") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(autouse=True)
def _seeded_and_float32():
    keras.utils.set_random_seed(1234)
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


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
