"""Runs the `Example:` sections of the docstrings, so they never drift."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import keras
import numpy as np
import pytest

import keras_selfattn
from keras_selfattn.layers import grouped_query_attention

# The library's modules (the demo's are TensorFlow-only and have no examples;
# GroupQueryAttention's need a Keras that has the layer it subclasses).
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(keras_selfattn.__path__, "keras_selfattn.")
    if not info.name.startswith("keras_selfattn.imdb")
    and (grouped_query_attention.ON_THIS_KERAS or "grouped_query" not in info.name)
)


def _examples(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    return [test for test in finder.find(module) if test.examples]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    tests = _examples(module_name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = []
    for test in tests:
        test.globs.update(
            {"np": np, "keras": keras, **vars(keras_selfattn)}, __name__="__doc__"
        )
        runner.run(test, out=report.append)
    failed = runner.summarize(verbose=False).failed
    assert failed == 0, "".join(report)


def test_every_public_class_and_the_kernel_has_an_example():
    documented = {
        test.name.rsplit(".", 1)[-1] for name in MODULES for test in _examples(name)
    }
    public = set(keras_selfattn.__all__) - {"__version__"}
    if not grouped_query_attention.ON_THIS_KERAS:
        public.discard("GroupQueryAttention")
    assert public <= documented, public - documented
