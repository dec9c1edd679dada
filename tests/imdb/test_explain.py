"""explain: the tokens the model read, and their picture drawn without pyplot."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from keras_selfattn.imdb import explain
from keras_selfattn.imdb.model import build_model
from tests.helpers import png_size

pytestmark = pytest.mark.tensorflow_only


def _explanation(n: int = 6, heads: int = 2) -> explain.Explanation:
    weights = np.arange(1, n + 1, dtype="float32")
    return explain.Explanation(
        tokens=[f"w{i}" for i in range(n)],
        weights=weights / weights.sum(),
        head_maps=np.full((heads, n, n), 1 / n, dtype="float32"),
        probability=0.7,
        contributions=np.linspace(-1, 1, n, dtype="float32"),
    )


def test_explain_long_review_shows_head_and_tail(tmp_path):
    model = build_model(
        ["a b c"], vocab_size=10, max_len=6, head_len=2, embed_dim=4, num_heads=1
    )
    text = " ".join(f"w{i}" for i in range(20))
    result = explain.explain(model, text)
    assert result.tokens == ["w0", "w1", "w16", "w17", "w18", "w19"]
    assert result.gap_after == 1
    png = explain.plot(result, tmp_path / "long.png", heads=True)
    assert png_size(png)[0] > 300


def test_plot_leaves_the_matplotlib_backend_alone(tmp_path):
    original = matplotlib.get_backend()
    matplotlib.use("svg")  # anything but Agg, which the plot draws with
    try:
        png = explain.plot(_explanation(), tmp_path / "e.png", heads=True)
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(original)
    width, height = png_size(png)
    assert width > 600 and height > 300


def test_summary_lists_the_top_tokens_and_both_sides():
    lines = _explanation().summary(top=2).splitlines()
    assert lines[0] == "most-attended tokens (of 6):"
    assert lines[1].split() == ["0.2857", "w5", "(token", "5)"]
    assert lines[2].split()[1] == "w4"
    assert lines[3].startswith("pushing towards positive: w5 (+1.000), w4")
    assert lines[4].startswith("pushing towards negative: w0 (-1.000), w1")
