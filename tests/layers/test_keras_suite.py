"""Keras's own MultiHeadAttention tests, run against ours.

The test file belongs to Keras and changes with it, so it is read from the
installed Keras at run time (never copied here; a Keras whose wheel lacks it,
the floor's, has a copy in `keras_upstream/`): every
`layers.MultiHeadAttention` in it becomes `keras_selfattn.MultiHeadAttention`,
subclasses in it included, and its test class runs as it is: every test must
pass, none is excused (the only skips are Keras's own). A test below checks
that the swap happened, so the suite cannot quietly test Keras's class
instead. `tests/conftest.py` prints the pass count after the run.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import keras
import pytest

import keras_selfattn

SOURCE = (
    Path(keras.__file__).parent
    / "src"
    / "layers"
    / "attention"
    / "multi_head_attention_test.py"
)
if not SOURCE.exists():  # Keras's wheels before 3.15 lack it: the floor's copy
    SOURCE = (
        Path(__file__).parent
        / "keras_upstream"
        / f"multi_head_attention_test-{keras.__version__}.py.txt"
    )


def _swapped(code: str) -> str:
    """Keras's test code with every use of its layer class replaced by ours."""
    return code.replace("layers.MultiHeadAttention", "_LAYER_UNDER_TEST")


def _load_suite() -> type:
    code = _swapped(SOURCE.read_text())
    module = types.ModuleType("keras_multi_head_attention_test")
    module.__file__ = str(SOURCE)
    module._LAYER_UNDER_TEST = keras_selfattn.MultiHeadAttention
    exec(compile(code, str(SOURCE), "exec"), module.__dict__)
    return module.MultiHeadAttentionTest


KerasMultiHeadAttentionTest = _load_suite()


@pytest.mark.backend_independent
def test_the_suite_builds_only_our_layer():
    code = SOURCE.read_text()
    assert code.count("layers.MultiHeadAttention") >= 20, "Keras's test file moved on"
    # No other way to Keras's class is left: no bare `MultiHeadAttention(`
    # call, no import of it.
    swapped = _swapped(code)
    bare_use = r"(?<![\w.])MultiHeadAttention\s*\(|import[^\n]*\bMultiHeadAttention\b"
    assert "layers.MultiHeadAttention" not in swapped
    assert not re.search(bare_use, swapped)
    assert KerasMultiHeadAttentionTest.__module__ == "keras_multi_head_attention_test"
