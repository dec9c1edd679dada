"""`benchmarks/profile_demo.py` runs on the default model."""

from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.tensorflow_only


def test_profile_demo_runs_on_the_default_model(monkeypatch, capsys):
    # The classifier of the default model (n-gram branch on) reads the
    # pooled vector and the n-gram score: the profile fed it the pooled
    # vector alone and stopped with a shape error.
    from benchmarks import profile_demo
    from keras_selfattn.imdb import data

    full = data.load_bundled()
    small = dataclasses.replace(
        full, train_texts=full.train_texts[:96], train_labels=full.train_labels[:96]
    )
    monkeypatch.setattr(data, "load_bundled", lambda *a, **k: small)
    assert profile_demo.main(["--batches", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "whole train_on_batch" in out
    assert "pooling + n-gram branch + classifier + loss (fwd+bwd)" in out
