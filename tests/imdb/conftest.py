"""Fixtures of the demo's tests."""

from __future__ import annotations

import pytest

from tests.imdb.serving import train_tiny


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The `.keras` file of a tiny model trained in seconds (`serving.TINY`)."""
    return train_tiny(tmp_path_factory.mktemp("tiny"))
