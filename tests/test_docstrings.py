"""Runs the `Example:` sections of the docstrings, so they never drift."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re

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


def _args_section(doc: str) -> str:
    """The `Args:` section of a Keras-style docstring (`Attributes:`, of a
    dataclass)."""
    found = re.search(
        r"\n\s*(Args|Attributes):\n(.*?)(\n\s*\n\s*[A-Z][\w ]+:\n|\Z)", doc, re.S
    )
    assert found, "no Args: or Attributes: section"
    return found.group(2)


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
    function = obj.__init__ if inspect.isclass(obj) else obj
    parameters = [
        name
        for name, p in inspect.signature(function).parameters.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if not parameters:
        return
    args = _args_section(inspect.getdoc(obj))
    missing = [
        name
        for name in parameters
        if not re.search(rf"^\s*{name}:|`{name}`", args, re.M)
    ]
    assert not missing, missing
