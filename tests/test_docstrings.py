"""Runs the `Example:` sections of the docstrings, so they never drift."""

from __future__ import annotations

import pkgutil

import keras
import numpy as np
import pytest

import keras_selfattn
from keras_selfattn.layers import grouped_query_attention
from tests.helpers import (
    arguments_not_in_args_section,
    docstring_examples,
    failed_examples,
)

# The library's modules (the demo's are TensorFlow-only: their examples run in
# tests/imdb/test_docstrings.py; GroupQueryAttention's need a Keras that has
# the layer it subclasses).
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(keras_selfattn.__path__, "keras_selfattn.")
    if not info.name.startswith("keras_selfattn.imdb")
    and (grouped_query_attention.ON_THIS_KERAS or "grouped_query" not in info.name)
)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    globs = {"np": np, "keras": keras, **vars(keras_selfattn)}
    failures = failed_examples(docstring_examples(module_name), globs)
    assert not failures, failures


def test_every_public_class_and_the_kernel_has_an_example():
    documented = {
        test.name.rsplit(".", 1)[-1]
        for name in MODULES
        for test in docstring_examples(name)
    }
    public = set(keras_selfattn.__all__) - {"__version__"}
    if not grouped_query_attention.ON_THIS_KERAS:
        public.discard("GroupQueryAttention")
    assert public <= documented, public - documented


def _public_callables():
    names = sorted(set(keras_selfattn.__all__) - {"__version__"})
    if not grouped_query_attention.ON_THIS_KERAS:
        names.remove("GroupQueryAttention")
    return [getattr(keras_selfattn, name) for name in names]


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "obj", [o for o in _public_callables() if callable(o)], ids=lambda o: o.__name__
)
def test_every_argument_is_named_in_the_args_section(obj):
    # CachedMultiHeadAttention's docstring named 2 of its 20 arguments.
    missing = arguments_not_in_args_section(obj)
    assert not missing, missing
