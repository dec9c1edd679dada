"""Keras's own MultiHeadAttention tests, run against ours.

The test file belongs to Keras and changes with it, so it is read from the
installed Keras at run time (never copied here): every
`layers.MultiHeadAttention` in it becomes `keras_selfattn.MultiHeadAttention`,
subclasses in it included, and its test class runs as it is. The few tests
that check behaviour we change on purpose are listed in `DIFFERS_ON_PURPOSE`
with the reason (the README's "differs on purpose" list says the same); they
are expected to fail (strict xfail: one that starts passing is reported).
`tests/conftest.py` prints the pass count after the run.
"""

from __future__ import annotations

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

# Test name -> why ours differs from Keras there, on purpose.
DIFFERS_ON_PURPOSE: dict[str, str] = {}


def _load_suite() -> type:
    code = SOURCE.read_text().replace("layers.MultiHeadAttention", "_LAYER_UNDER_TEST")
    module = types.ModuleType("keras_multi_head_attention_test")
    module.__file__ = str(SOURCE)
    module._LAYER_UNDER_TEST = keras_selfattn.MultiHeadAttention
    exec(compile(code, str(SOURCE), "exec"), module.__dict__)
    suite = module.MultiHeadAttentionTest
    for name, reason in DIFFERS_ON_PURPOSE.items():
        setattr(
            suite,
            name,
            pytest.mark.xfail(strict=True, reason=reason)(getattr(suite, name)),
        )
    return suite


KerasMultiHeadAttentionTest = _load_suite()
