"""`benchmarks/imdb.py`'s command line: counts are checked before any work."""

from __future__ import annotations

import pytest

from benchmarks import imdb

pytestmark = pytest.mark.backend_independent


@pytest.mark.parametrize(
    "argv",
    [
        ["--repeats", "0"],  # was trained once, as if 1
        ["--limit", "0"],
        ["--seed", "-1"],
        ["--faithfulness-reviews", "0"],
        ["--occlusion-reviews", "-1"],
        ["--explained", "many"],
    ],
    ids=["no_repeats", "no_reviews", "negative_seed", "no_faithfulness",
         "negative_occlusion", "explained_not_a_number"],
)  # fmt: skip
def test_a_bad_count_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        imdb.main(argv)
    assert exit_.value.code == 2
    assert "expected an integer of at least" in capsys.readouterr().err


def test_help_shows_the_usage_examples_and_what_each_option_does(capsys):
    with pytest.raises(SystemExit):
        imdb.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "python benchmarks/imdb.py --trust imdb.keras" in out
    for said in (
        "--limit LIMIT train on the first N training reviews",
        "--seed SEED training seed",
        "train one side only",
        "--repeats REPEATS trainings per side",
        "--set NAME=VALUE change a TrainConfig field",
        "instead of training, measure saved models",
        "held-out reviews for ERASER's faithfulness",
    ):
        assert said in out, said
