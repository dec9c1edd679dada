"""`benchmarks/imdb.py`'s command line: counts are checked before any work."""

from __future__ import annotations

import types

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


@pytest.mark.parametrize("field", ["seed", "limit", "attention", "out", "verbose"])
def test_set_of_a_field_the_benchmark_sets_is_a_usage_error(field, capsys):
    # It was a TypeError from TrainConfig ("got multiple values").
    with pytest.raises(SystemExit) as exit_:
        imdb.main(["--only", "ours", "--set", f"{field}=3"])
    assert exit_.value.code == 2
    assert f"--set cannot change ['{field}']" in capsys.readouterr().err


def test_keep_makes_its_folder(tmp_path, monkeypatch):
    # TrainConfig wants the folder of `out` to exist: `--keep runs/`, as the
    # docstring gives it, failed on a fresh clone.
    from keras_selfattn.imdb import train as train_module

    kept = []

    def train(config):
        kept.append(config.out)
        return types.SimpleNamespace(history={}, accuracy=0.5, seconds=1.0)

    monkeypatch.setattr(train_module, "train", train)
    imdb.main(["--only", "ours", "--limit", "1", "--keep", str(tmp_path / "runs")])
    assert (tmp_path / "runs").is_dir()
    assert [path.parent for path in map(type(tmp_path), kept)] == [tmp_path / "runs"]


@pytest.mark.tensorflow_only
def test_the_reports_say_where_and_with_what_they_ran(capsys):
    # The --trust report printed its command only.
    imdb._print_environment()
    out = capsys.readouterr().out
    for start in ("date: ", "command: ", "machine: ", "versions: Python ", "device: "):
        assert any(line.startswith(start) for line in out.splitlines()), start
    assert " cores" in out and "TensorFlow " in out
