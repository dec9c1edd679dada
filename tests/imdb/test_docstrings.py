"""The demo's API page (docs/demo-api.md): every entry's docstring names its
arguments and has an `Example:`, and the examples run."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import keras
import numpy as np
import pytest

from tests.helpers import (
    arguments_not_in_args_section,
    docstring_examples,
    failed_examples,
)

pytestmark = pytest.mark.tensorflow_only

PAGE = Path(__file__).resolve().parents[2] / "docs" / "demo-api.md"
ENTRIES = re.findall(r"^::: (keras_selfattn\.imdb\.\S+)$", PAGE.read_text(), re.M)
MODULES = sorted({entry.rsplit(".", 1)[0] for entry in ENTRIES})
# Records that a function on the page returns: that function's example shows
# them (an example of their own would make one to show it).
RETURNED_BY = {
    "TrainResult": "train",
    "Evaluation": "evaluate",
    "Explanation": "explain",
}


def _object(entry: str):
    module, name = entry.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def test_the_page_lists_the_demo_api():
    assert len(ENTRIES) >= 20, ENTRIES
    assert len(set(ENTRIES)) == len(ENTRIES)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    failures = failed_examples(
        docstring_examples(module_name), {"np": np, "keras": keras}
    )
    assert not failures, failures


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_entry_has_an_example(entry):
    module, name = entry.rsplit(".", 1)
    with_examples = {t.name.rsplit(".", 1)[-1] for t in docstring_examples(module)}
    assert RETURNED_BY.get(name, name) in with_examples


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_argument_is_named_in_the_args_section(entry):
    missing = arguments_not_in_args_section(_object(entry))
    assert not missing, missing
