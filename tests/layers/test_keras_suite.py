"""Keras's own attention tests, run against ours.

The test files belong to Keras and change with it, so they are read from the
installed Keras at run time (never copied here; a Keras whose wheel lacks the
MultiHeadAttention file, the floor's, has a copy in `keras_upstream/`). The
GroupQueryAttention suite needs Keras 3.15, as our layer does. Every
`layers.MultiHeadAttention` in `multi_head_attention_test.py` becomes
`keras_selfattn.MultiHeadAttention`, every `layers.GroupedQueryAttention` in
`grouped_query_attention_test.py` becomes `keras_selfattn.GroupQueryAttention`,
subclasses in them included, and their test classes run as they are: every
test must pass, none is excused (the only skips are Keras's own). The tests
below check that the swap happened, so a suite cannot quietly test Keras's
class instead. `tests/conftest.py` prints the pass counts after the run.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import keras
import pytest

import keras_selfattn
from keras_selfattn.layers.grouped_query_attention import KERAS_NEEDED
from tests.helpers import needs_keras, release

ATTENTION_TESTS = Path(keras.__file__).parent / "src" / "layers" / "attention"
SOURCE = ATTENTION_TESTS / "multi_head_attention_test.py"
GQA_SOURCE = ATTENTION_TESTS / "grouped_query_attention_test.py"
if not SOURCE.exists():  # Keras's wheels before 3.15 lack it: the floor's copy
    SOURCE = (
        Path(__file__).parent
        / "keras_upstream"
        / f"multi_head_attention_test-{keras.__version__}.py.txt"
    )
GQA_ON_THIS_KERAS = release(keras.__version__) >= release(KERAS_NEEDED)
needs_gqa = needs_keras(KERAS_NEEDED, "our GroupQueryAttention mirrors its layer")


def _swapped(code: str, keras_name: str = "MultiHeadAttention") -> str:
    """Keras's test code with every use of its layer class replaced by ours."""
    return code.replace(f"layers.{keras_name}", "_LAYER_UNDER_TEST")


def _load_suite(source: Path, keras_name: str, ours: type, test_class: str) -> type:
    code = _swapped(source.read_text(), keras_name)
    module = types.ModuleType(f"keras_{source.stem}")
    module.__file__ = str(source)
    module._LAYER_UNDER_TEST = ours
    exec(compile(code, str(source), "exec"), module.__dict__)
    return getattr(module, test_class)


KerasMultiHeadAttentionTest = _load_suite(
    SOURCE,
    "MultiHeadAttention",
    keras_selfattn.MultiHeadAttention,
    "MultiHeadAttentionTest",
)
if GQA_ON_THIS_KERAS:
    KerasGroupedQueryAttentionTest = _load_suite(
        GQA_SOURCE,
        "GroupedQueryAttention",
        keras_selfattn.GroupQueryAttention,
        "GroupedQueryAttentionTest",
    )


def _check_swap(
    source: Path, keras_name: str, min_uses: int, suite: type, aliases=()
) -> None:
    code = source.read_text()
    assert code.count(f"layers.{keras_name}") >= min_uses, "Keras's test file moved on"
    # No other way to Keras's class is left: no bare `Name(` call, no import
    # of it, no attribute access to it, under its name or its `aliases`.
    swapped = _swapped(code, keras_name)
    for name in (keras_name, *aliases):
        bare_use = rf"(?<![\w.])\b{name}\s*\(|import[^\n]*\b{name}\b|\.{name}\b"
        assert not re.search(bare_use, swapped), name
    assert suite.__module__ == f"keras_{source.stem}"


@pytest.mark.backend_independent
def test_the_suite_builds_only_our_layer():
    _check_swap(SOURCE, "MultiHeadAttention", 20, KerasMultiHeadAttentionTest)


@pytest.mark.backend_independent
@needs_gqa
def test_the_gqa_suite_builds_only_our_layer():
    # Keras exports the class as `keras.layers.GroupQueryAttention` too.
    _check_swap(
        GQA_SOURCE,
        "GroupedQueryAttention",
        20,
        KerasGroupedQueryAttentionTest,
        aliases=("GroupQueryAttention",),
    )
