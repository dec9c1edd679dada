"""`benchmarks/long_context.py`: where its results go."""

from __future__ import annotations

import json

import pytest

from benchmarks import long_context

pytestmark = pytest.mark.backend_independent

_CHECK = [
    "--lengths", "64", "128", "--layers", "2", "--hidden", "32", "--heads", "2",
    "--intermediate", "64", "--vocabulary", "50", "--chunk-size", "16",
    "--steps", "1", "--no-longest",
]  # fmt: skip


def test_the_check_run_leaves_the_committed_results_alone(tmp_path, monkeypatch):
    # The documented "check: minutes" run of a small model wrote its toy
    # figures over benchmarks/results/long_context.json, which the docs quote.
    committed = tmp_path / "benchmarks" / "results" / "long_context.json"
    committed.parent.mkdir(parents=True)
    committed.write_text('{"measured": true}')
    monkeypatch.setattr(long_context, "ROOT", str(tmp_path))
    monkeypatch.setattr(long_context, "_versions", lambda: "stub")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(long_context.tempfile, "tempdir", None)
    step = {
        "baseline_bytes": 1, "peak_bytes": 2, "median_step_s": 0.1, "step_s": [0.1],
        "chunked_path_layers": 0, "chunked_path_blocks": [],
    }  # fmt: skip
    monkeypatch.setattr(long_context, "_spawn", lambda *a, **k: dict(step))
    long_context.main(_CHECK)
    assert json.loads(committed.read_text()) == {"measured": True}
    assert (tmp_path / "long_context_check.json").is_file()
