"""The `keras-selfattn` command: smoke run, its output, interruption, errors."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import keras
import pytest

from keras_selfattn.imdb import cli
from tests.helpers import (
    DEMO_V0_1,
    needs_demo_v0_1,
    png_size,
    tensorboard_scalars,
    write_acl,
)

pytestmark = pytest.mark.tensorflow_only

# Small and fast: the smoke test is about the plumbing, not the accuracy.
SMALL = [
    "--epochs", "1", "--batch-size", "32", "--max-len", "64",
    "--vocab-size", "2000", "--bigram-vocab-size", "2000", "--embed-dim", "16",
    "--num-heads", "2",
    "--intermediate-dim", "32", "--seed", "7",
]  # fmt: skip
REVIEWS = [
    "A wonderful, moving film. The acting is superb and I loved every minute!",
    "Dull and far too long.<br /><br />The worst movie I have seen this year.",
]
LONG_REVIEW = " ".join(
    ["This film was not what I expected, and the second half is brilliant."] * 15
)  # about 200 words


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run: 128 synthetic reviews, 1 epoch, through the command line.

    Returns the model path, everything the command printed and the
    `--tensorboard` folder.
    """
    folder = tmp_path_factory.mktemp("smoke")
    data = write_acl(folder / "acl", n_train=128, n_test=32)
    out, logs = folder / "model.keras", folder / "logs"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        args = ["train", *SMALL, "--data", str(data), "--out", str(out)]
        args += ["--tensorboard", str(logs)]
        code = cli.main(args)
    assert code == 0
    return out, printed.getvalue(), logs


@pytest.fixture(scope="module")
def trained(smoke):
    return smoke[0]


def test_smoke_train_save_predict_explain(trained, tmp_path, capsys):
    assert trained.is_file()
    assert not Path(f"{trained}.backup").exists()  # cleaned after success

    assert cli.main(["predict", str(trained), *REVIEWS]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        label, probability, _ = line.split("\t")
        assert label in {"positive", "negative"}
        assert 0.0 <= float(probability) <= 1.0
        assert (label == "positive") == (float(probability) > 0.5)

    png = tmp_path / "explain.png"
    assert cli.main(["explain", str(trained), LONG_REVIEW, "--out", str(png)]) == 0
    out = capsys.readouterr().out
    assert "most-attended tokens" in out and "attributions towards" in out
    width, height = png_size(png)
    assert 600 <= width <= 2500 and 300 <= height <= 2500, (width, height)

    png_heads = tmp_path / "heads.png"
    args = ["explain", str(trained), REVIEWS[0], "--out", str(png_heads), "--heads"]
    assert cli.main(args) == 0
    assert png_size(png_heads)[1] > 300


def test_train_prints_device_progress_and_test_accuracy_last(smoke):
    lines = smoke[1].strip().splitlines()
    assert lines[0].startswith(("device: CPU", "device: GPU"))
    assert any("val_accuracy" in line for line in lines)
    # The synthetic reviews are easy: 1.0000 is a likely accuracy.
    assert re.fullmatch(r"test accuracy: (0\.\d{4}|1\.0000)", lines[-1]), lines[-1]
    # After training (the defaults: with the n-gram branch), NB-LR is fitted,
    # blended with the attention branch, and the test ECE reported.
    assert any(
        re.match(r"n-grams: NB-LR on \d+ texts \(C = 0.1\), ", line) for line in lines
    )
    assert any(re.match(r"blend: -?\d+\.\d{3} x attention \+ ", line) for line in lines)
    assert lines[-3].startswith("test accuracy of the branches: attention 0.")
    assert lines[-2].startswith("test ECE (15 bins): ")


def test_tensorboard_gets_the_epoch_scalars(smoke):
    scalars = tensorboard_scalars(smoke[2])
    for tag in ("epoch_loss", "epoch_accuracy", "epoch_learning_rate"):
        assert scalars["train"].get(tag) == 1, scalars  # one epoch
    for tag in ("epoch_loss", "epoch_accuracy"):
        assert scalars["validation"].get(tag) == 1, scalars


def test_evaluate_draws_the_reliability_diagram(trained, tmp_path, capsys):
    folder = write_acl(tmp_path / "acl", n_train=8, n_test=40)
    # It reads the test split alone: a folder without train/ will do (it
    # was "... is not an aclImdb folder: .../train/neg is missing").
    shutil.rmtree(folder / "train")
    png = tmp_path / "reliability.png"
    args = ["evaluate", str(trained), "--data", str(folder)]
    assert cli.main([*args, "--calibration-plot", str(png)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("expected calibration error (15 bins): 0.")
    assert out[-1].startswith("test accuracy: ")
    assert png_size(png)[0] > 300
    assert cli.main([*args, "--calibration-plot", str(tmp_path / "r.jpg")]) == 2


def test_an_interrupted_command_says_how_to_resume_with_exit_code_130(
    tmp_path, monkeypatch, capsys
):
    from keras_selfattn.imdb import train

    def interrupted(config, callbacks=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "train", interrupted)
    assert cli.main(["train", "--out", str(tmp_path / "m.keras")]) == 130
    captured = capsys.readouterr()
    assert captured.err == (
        "keras-selfattn: interrupted; run the same command again to resume\n"
    )
    # Other commands have nothing to resume (Ctrl+C is how `serve` stops).
    monkeypatch.setattr(cli, "COMMANDS", {**cli.COMMANDS, "serve": interrupted})
    assert cli.main(["serve", str(tmp_path / "m.keras")]) == 130
    assert capsys.readouterr().err == "keras-selfattn: interrupted\n"


def test_a_ctrl_c_that_tensorflow_turns_into_its_own_error_is_an_interruption(
    tmp_path, monkeypatch, capsys
):
    # Once in 20 tries a Ctrl+C during `train` came out as TensorFlow's
    # `InvalidArgumentError` (exit code 1): the interrupt raised inside code
    # that TensorFlow ran, which reported it as an error of its own.
    import signal

    from keras_selfattn.imdb import train

    def interrupted_in_tensorflow(config, callbacks=None):
        try:
            signal.raise_signal(signal.SIGINT)  # Python's handler raises here
        except KeyboardInterrupt:
            raise RuntimeError("Graph execution error: BroadcastTo") from None

    monkeypatch.setattr(train, "train", interrupted_in_tensorflow)
    assert cli.main(["train", "--out", str(tmp_path / "m.keras")]) == 130
    assert capsys.readouterr().err == (
        "keras-selfattn: interrupted; run the same command again to resume\n"
    )
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # Without a Ctrl+C, the same error is an error.
    monkeypatch.setattr(train, "train", lambda config, callbacks=None: 1 / 0)
    assert cli.main(["train", "--out", str(tmp_path / "m.keras")]) == 1
    assert capsys.readouterr().err.startswith("keras-selfattn: error: ZeroDivision")


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda d: ["predict", str(d / "missing.keras"), "hi"], "model file not found"),
        (lambda d: ["predict", str(d / "corrupt.keras"), "hi"], "cannot load model"),
        (lambda d: ["evaluate", str(d / "corrupt.keras")], "cannot load model"),
        (lambda d: ["explain", str(d / "missing.keras"), "  ", "--out", "x.png"],
         "empty text"),
        (lambda d: ["train", "--data", "nowhere", "--out", str(d / "m.keras")],
         "unknown data source"),
        (lambda d: ["train", "--out", str(d / "m.h5")], "argument `out`"),
        # Pointed to `keras-selfattn --help`, which lists no option of predict.
        (lambda d: ["predict", str(d / "m.keras"), "hi", "--bogus"],
         "unrecognized arguments: --bogus (see keras-selfattn predict --help)"),
        (lambda d: ["explain", str(d / "corrupt.keras"), "hi", "--out", "x.jpg"],
         "--out must end in .png"),
        # Outputs that cannot be written: said before any work.
        (lambda d: ["explain", str(d / "corrupt.keras"), "hi",
                    "--out", str(d / "no" / "x.png")], "--out: no folder"),
        (lambda d: ["explain", str(d / "corrupt.keras"), "hi",
                    "--out", str(d / "folder.png")], "--out is a folder"),
        (lambda d: ["evaluate", str(d / "corrupt.keras"),
                    "--calibration-plot", str(d / "no" / "r.PNG")],
         "--calibration-plot: no folder"),
        (lambda d: ["evaluate", str(d / "corrupt.keras"), "--calibration-plot", ""],
         "--calibration-plot must end in .png, got ''"),
        # A folder where no file can be made, even by root (CI runs as root).
        (lambda d: ["explain", str(d / "corrupt.keras"), "hi",
                    "--out", "/proc/x.png"], "--out: cannot write /proc/x.png"),
        # Texts the model cannot read, named.
        (lambda d: ["predict", str(d / "corrupt.keras"), "good", "-"],
         "give it alone"),
        (lambda d: ["predict", str(d / "corrupt.keras"), "good", "@@@ ###"],
         "no words the model reads (TEXT 2: '@@@ ###')"),
        (lambda d: ["predict", str(d / "corrupt.keras"), "good \udcff film"],
         "TEXT is not UTF-8 text"),
        # A .keras file, but not a demo model.
        (lambda d: ["predict", str(d / "plain.keras"), "good"],
         "not a keras-selfattn IMDB model (no layer 'text'"),
        # A zip but not a Keras archive: the reason without a KeyError's quotes.
        (lambda d: ["predict", str(d / "zip.keras"), "good"],
         "zip.keras: There is no item named 'config.json'"),
        # The folder `export` writes: it said "model file not found".
        (lambda d: ["predict", str(d / "folder.png"), "good"],
         "a folder, not a .keras file"),
    ],
    ids=[
        "missing", "corrupt", "evaluate_corrupt", "empty", "unknown_data",
        "not_keras", "unknown_option", "not_png", "no_folder", "out_is_folder",
        "plot_no_folder", "plot_empty", "proc", "dash_with_texts", "only_symbols",
        "not_utf8_argument", "not_demo_model", "zip_not_keras", "model_is_a_folder",
    ],
)  # fmt: skip
def test_user_errors_are_one_line_with_exit_code_2(
    tmp_path, capsys, make_args, message
):
    (tmp_path / "corrupt.keras").write_bytes(b"not a zip file at all")
    (tmp_path / "folder.png").mkdir()
    plain = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    plain.save(tmp_path / "plain.keras")
    with zipfile.ZipFile(tmp_path / "zip.keras", "w") as archive:
        archive.writestr("notes.txt", "not a model")
    assert cli.main(make_args(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_png_check_leaves_no_file_and_an_old_one_unchanged(tmp_path, capsys):
    (tmp_path / "corrupt.keras").write_bytes(b"not a zip file at all")
    old = tmp_path / "old.png"
    old.write_bytes(b"an earlier picture")
    for out in (old, tmp_path / "new.png"):
        args = ["explain", str(tmp_path / "corrupt.keras"), "hi", "--out", str(out)]
        assert cli.main(args) == 2
        assert "cannot load model" in capsys.readouterr().err
    assert old.read_bytes() == b"an earlier picture"
    assert not (tmp_path / "new.png").exists()


@needs_demo_v0_1
@pytest.mark.parametrize("command", ["predict", "explain"])
def test_a_text_an_older_model_cannot_read_is_refused_once_it_is_loaded(
    tmp_path, capsys, command
):
    # Accented letters alone: words for a model built today, none for 0.1's.
    args = [command, str(DEMO_V0_1), "\u00c9 \u00e9"]
    if command == "explain":
        args += ["--out", str(tmp_path / "x.png")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "no words the model reads (TEXT: '\u00c9 \u00e9')" in err, err
    assert len(err.splitlines()) == 1 and not (tmp_path / "x.png").exists()


def test_predict_empty_text_and_stdin(trained, capsys, monkeypatch):
    assert cli.main(["predict", str(trained), ""]) == 2
    assert "empty text" in capsys.readouterr().err

    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(REVIEWS) + "\n"))
    assert cli.main(["predict", str(trained), "-"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2


def test_predict_stops_quietly_when_the_reader_goes_away(trained, capsys, monkeypatch):
    # `keras-selfattn predict MODEL - < reviews | head -1`: it said
    # "error: BrokenPipeError: [Errno 32] Broken pipe" and exited with 1.
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(REVIEWS) + "\n"))
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli.main(["predict", str(trained), "-"]) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "stdin, message",
    [
        (b"good film\n\nbad film\n", "empty text (line 2 of stdin)"),
        (b"good film\ngood \xff film\n", "stdin is not UTF-8 text (line 2)"),
        (b"good film\n#@~\n", "no words the model reads (line 2 of stdin: '#@~')"),
        (b"", "empty text (stdin): give a non-empty review"),  # was unnamed
    ],
    ids=["blank_line", "not_utf8", "only_symbols", "nothing"],
)
def test_predict_names_the_bad_line_of_stdin(
    tmp_path, capsys, monkeypatch, stdin, message
):
    # Checked before the model is loaded: none is needed here.
    stream = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stream)
    assert cli.main(["predict", str(tmp_path / "none.keras"), "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_closed_stdin_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)  # what `<&-` leaves Python
    assert cli.main(["predict", str(tmp_path / "none.keras"), "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("'-' reads stdin, which is closed")
    assert len(err.splitlines()) == 1


def test_keras_loader_offline_is_one_line(tmp_path, capsys, monkeypatch):
    def offline(*args, **kwargs):
        raise Exception("URL fetch failure: [Errno -3] name resolution")

    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(keras.datasets.imdb, "load_data", offline)
    args = ["train", "--data", "keras", "--out", str(tmp_path / "m.keras")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "--data bundled" in err and len(err.splitlines()) == 1


def test_python_dash_m_error_is_one_line_without_traceback(tmp_path, subprocess_env):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_selfattn",
            "predict",
            str(tmp_path / "no.keras"),
            "hi",
        ],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
    )
    assert result.returncode == 2
    err = result.stderr.strip().splitlines()
    assert err[-1].startswith("keras-selfattn: error: model file not found")
    assert "Traceback" not in result.stderr


def test_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("train", "evaluate", "predict", "explain"):
        assert command in out


@pytest.mark.parametrize(
    "args, field",
    [
        (["--head-len", "-2"], "head_len"),
        (["--head-len", "65", "--max-len", "64"], "head_len"),
        (["--head-len", "many"], "head_len"),
        (["--bigram-vocab-size", "-1"], "bigram_vocab_size"),
        (["--bigram-vocab-size", "1.5"], "bigram_vocab_size"),
        (["--epochs", "0"], "epochs"),
        (["--dropout", "1"], "dropout"),
        (["--learning-rate=-1e-3"], "learning_rate"),
        (["--seed", "-1"], "seed"),
        (["--attention", "torch"], "--attention"),
        (["--num-heads", "3"], "num_heads"),
        (["--vocab-size", "1"], "vocab_size"),
        (["--seed", str(2**64)], "seed"),
        (["--ngram-c", "0"], "ngram_c"),
        (["--ngram-c", "nan"], "ngram_c"),
    ],
    ids=[
        "head_len_below_minus_one",
        "head_len_above_max_len",
        "head_len_not_a_number",
        "negative_bigrams",
        "float_bigrams",
        "zero_epochs",
        "dropout_one",
        "negative_learning_rate",
        "negative_seed",
        "unknown_attention",
        "heads_not_dividing_embed_dim",  # these three: exit code 1, after loading
        "vocab_of_one",
        "seed_past_every_backend",
        "zero_ngram_c",
        "nan_ngram_c",
    ],
)
def test_bad_train_options_are_one_line_with_exit_code_2(capsys, args, field):
    assert cli.main(["train", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("keras-selfattn: error: ")
    assert field in err
    assert captured.out == ""  # stopped before any training


def test_train_options_make_the_same_config_as_python():
    from keras_selfattn.imdb.train import TrainConfig

    parser = cli.build_parser()
    assert cli.config_from_args(parser.parse_args(["train"])) == TrainConfig()
    # Not given, --head-len is the default as far as --max-len allows.
    short = cli.config_from_args(parser.parse_args(["train", "--max-len", "64"]))
    assert short == TrainConfig(max_len=64, head_len=64)
    args = parser.parse_args(
        ["train", "--head-len", "-1", "--bigram-vocab-size", "0", "--attention",
         "keras", "--devices", "/cpu:0,/cpu:1", "--mixed-precision",
         "--ngram-c", "0.3"]
    )  # fmt: skip
    assert cli.config_from_args(args) == TrainConfig(
        ngram_c=0.3,
        head_len=None,
        bigram_vocab_size=0,
        attention="keras",
        devices=["/cpu:0", "/cpu:1"],
        mixed_precision=True,
    )
