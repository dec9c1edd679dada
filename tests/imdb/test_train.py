"""TrainConfig's checks, and train(): its result, resuming, no global state left."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import re
import shutil

import keras
import numpy as np
import pytest

from keras_selfattn.imdb import distributed
from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb.distributed import DistributeError
from keras_selfattn.imdb.model import DEFAULTS
from keras_selfattn.imdb.train import TrainConfig, TrainResult, train
from tests.helpers import write_acl, write_reviews

pytestmark = pytest.mark.tensorflow_only

# A model small enough to train in seconds.
TINY = dict(
    epochs=1, batch_size=16, max_len=16, head_len=4, vocab_size=100,
    bigram_vocab_size=100, embed_dim=8, num_heads=2, intermediate_dim=8, verbose=0,
)  # fmt: skip


def test_defaults_are_the_models():
    config = TrainConfig()
    for field in dataclasses.fields(config):
        if field.name in DEFAULTS:
            assert getattr(config, field.name) == DEFAULTS[field.name], field.name
    # Every option of build_model, and nothing else.
    options = inspect.signature(imdb_model.build_model).parameters
    assert set(config.model_options()) == set(options) - {"train_texts", "train_labels"}


@pytest.mark.parametrize(
    "field, value",
    [
        ("epochs", 0),
        ("batch_size", -32),
        ("max_len", 1.5),
        ("head_len", -1),
        ("head_len", DEFAULTS["max_len"] + 1),
        ("vocab_size", 0),
        ("bigram_vocab_size", -1),
        ("embed_dim", "64"),
        ("num_heads", 0),
        ("num_layers", True),
        ("intermediate_dim", None),
        ("dropout", 1.0),
        ("learning_rate", 0.0),
        ("limit", 0),
        ("seed", -1),
        ("out", "model.h5"),
        ("out", "no/such/folder/model.keras"),
        ("data", ""),
        ("mixed_precision", "yes"),
        ("distribute", "parameter_server"),
        ("devices", "/gpu:0"),
        ("attention", "torch"),
        ("verbose", 3),
        ("vocab_size", 1),
        ("bigram_vocab_size", 1),
        ("bigram_vocab_size", False),
        ("num_heads", 3),
        ("seed", 2**31),
        ("tensorboard", ""),
        ("pooling_entropy", -1.0),
        ("ngram_c", 0.0),
        ("ngram_c", float("nan")),
        ("ngram_c", True),
        ("vocab_size", 2),
        ("bigram_vocab_size", 2),
        ("pooling_heads", 3),
        ("out", "folder.keras"),
        ("out", "/proc/model.keras"),
        ("tensorboard", "file.txt"),
        ("tensorboard", "file.txt/logs"),
        ("tensorboard", "/proc/logs"),
    ],
    ids=[
        "zero_epochs",
        "negative_batch",
        "float_max_len",
        "negative_head_len",
        "head_len_above_max_len",
        "zero_vocab",
        "negative_bigrams",
        "string_embed_dim",
        "zero_heads",
        "bool_layers",
        "no_intermediate_dim",
        "dropout_one",
        "zero_learning_rate",
        "zero_limit",
        "negative_seed",
        "not_keras_file",
        "missing_folder",
        "empty_data",
        "string_mixed_precision",
        "unknown_strategy",
        "devices_not_a_list",
        "unknown_attention",
        "verbose_three",
        "vocab_of_one",  # Keras's TextVectorization refused it after loading
        "bigram_vocab_of_one",
        "bool_bigram_vocab",
        "heads_not_dividing_embed_dim",  # refused by the encoder after loading
        "seed_past_every_backend",
        "empty_tensorboard",  # was accepted, then ignored
        "negative_pooling_entropy",
        "zero_ngram_c",
        "nan_ngram_c",
        "bool_ngram_c",
        # Each of the six below was accepted, then failed (exit code 1)
        # after the data loaded or, for `out`, after the whole training.
        "vocab_of_padding_and_unk_only",
        "bigram_vocab_of_padding_and_unk_only",
        "pooling_heads_not_dividing_embed_dim",
        "out_is_a_folder",
        "out_not_even_root_can_write",  # os.access says yes to root
        "tensorboard_is_a_file",
        # These two failed inside TensorBoard's writer (exit code 1), after
        # the data loaded.
        "tensorboard_under_a_file",
        "tensorboard_not_even_root_can_write",
    ],
)
def test_config_names_the_bad_field(tmp_path, monkeypatch, field, value):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.keras").mkdir()
    (tmp_path / "file.txt").write_text("")
    with pytest.raises(ValueError, match=f"argument `{field}`.*Received: {field}="):
        TrainConfig(**{field: value})


def test_config_errors_say_what_is_expected(tmp_path):
    with pytest.raises(ValueError, match=r"can write \(here: No such file or direc"):
        TrainConfig(out="/proc/model.keras")
    # The check leaves no file behind, and an existing model as it was.
    TrainConfig(out=tmp_path / "new.keras")
    assert not (tmp_path / "new.keras").exists()
    (tmp_path / "old.keras").write_bytes(b"an earlier model")
    TrainConfig(out=tmp_path / "old.keras")
    assert (tmp_path / "old.keras").read_bytes() == b"an earlier model"
    (tmp_path / "m.keras.backup").write_text("")
    with pytest.raises(ValueError, match=r"m\.keras\.backup \(the checkpoints\)"):
        TrainConfig(out=tmp_path / "m.keras")
    with pytest.raises(ValueError, match="expected a non-negative, finite float"):
        TrainConfig(pooling_entropy=-1.0)
    with pytest.raises(ValueError, match=r"a divisor of embed_dim=64.*num_heads=3"):
        TrainConfig(num_heads=3)
    (tmp_path / "notes").write_text("")
    with pytest.raises(ValueError, match=r"can write in \(here: .*notes is a file\)"):
        TrainConfig(tensorboard=tmp_path / "notes" / "logs")
    TrainConfig(tensorboard=tmp_path / "logs" / "run1")  # made later, by the writer
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "m.keras.backup",
        "notes",
        "old.keras",
    ]


def test_the_largest_seed_builds_the_model():
    # The sub-layers' seeds (seed + an offset) wrap into what every backend takes.
    texts = ["a good film", "a bad film"]
    options = {**TrainConfig(seed=2**31 - 1).model_options(), "vocab_size": 10}
    options.update(bigram_vocab_size=10, embed_dim=8, intermediate_dim=8, max_len=8)
    model = imdb_model.build_model(texts, **options)
    assert model(np.array(texts, dtype=object)).shape == (2, 1)


def test_tensorboard_without_its_package_is_refused_before_training(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else find_spec(name, *a),
    )
    with pytest.raises(ValueError, match=r"pip install tensorboard\). Received: "):
        TrainConfig(tensorboard="logs")
    assert TrainConfig(tensorboard=None).tensorboard is None


def test_config_accepts_the_edges(tmp_path):
    config = TrainConfig(
        head_len=None,
        bigram_vocab_size=0,
        dropout=0.0,
        seed=0,
        out=tmp_path / "m.keras",
        devices=["/cpu:0"],
        attention="keras",
    )
    assert config.model_options()["head_len"] is None
    assert TrainConfig(max_len=8, head_len=8).head_len == 8


def test_the_default_head_len_fits_a_short_max_len():
    # Left out, head_len is 100 or max_len where that is less, as
    # build_model's; given, it is checked against max_len (above).
    assert TrainConfig().head_len == DEFAULTS["head_len"] == 100
    assert TrainConfig(max_len=64) == TrainConfig(max_len=64, head_len=64)
    assert TrainConfig(max_len=64).model_options()["head_len"] == 64
    with pytest.raises(
        ValueError, match=r"\[0, 64\] or `None`. Received: head_len=100"
    ):
        TrainConfig(max_len=64, head_len=100)


def test_train_leaves_the_global_dtype_policy_as_it_found_it(tmp_path, capsys):
    data = write_acl(tmp_path / "acl", n_train=64, n_test=16)
    config = TrainConfig(
        data=str(data),
        out=tmp_path / "m.keras",
        mixed_precision=True,
        ngram_logit=False,  # the other calibration: a temperature
        **TINY,
    )
    before = keras.config.dtype_policy().name
    result = train(config)
    assert keras.config.dtype_policy().name == before == "float32"

    assert isinstance(result, TrainResult)
    encoder = result.model.get_layer(f"{imdb_model.ENCODER}_0")
    assert encoder.dtype_policy.name.startswith("mixed_")  # it trained mixed
    assert result.path == tmp_path / "m.keras" and result.path.is_file()
    assert 0.0 <= result.accuracy <= 1.0 and result.seconds > 0
    assert len(result.history["loss"]) == 1 and "val_accuracy" in result.history
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("device: ") and lines[1].startswith("mixed precision")
    # 3 validation reviews and their crops: too few to fit a temperature on.
    assert (
        "calibration: none: 6 validation texts, fewer than 10 reviews of a class "
        "or all on their side, to fit a temperature on"
    ) in lines
    assert imdb_model.NGRAM not in {layer.name for layer in result.model.layers}
    assert result.branch_accuracy == {}  # one branch
    assert lines[-1] == f"test accuracy: {result.accuracy:.4f}"


@pytest.mark.parametrize("ngram_logit", [True, False], ids=["blend", "temperature"])
def test_with_no_validation_reviews_the_log_says_what_was_not_fitted(
    ngram_logit, tmp_path, capsys
):
    # Under 20 training reviews none is kept to validate. The n-gram branch
    # was left unfitted then, with no word, in a model that has it.
    data = write_acl(tmp_path / "acl", n_train=12, n_test=4)
    config = TrainConfig(
        data=str(data), out=tmp_path / "m.keras", ngram_logit=ngram_logit, **TINY
    )
    result = train(config)
    lines = capsys.readouterr().out.strip().splitlines()
    assert any("training on 12, validating on 0" in line for line in lines), lines
    if ngram_logit:
        assert any(line.startswith("n-grams: NB-LR on 12 texts") for line in lines)
        blend = [line for line in lines if line.startswith("blend: ")]
        assert len(blend) == 1 and re.fullmatch(
            r"blend: 1\.000 x attention \+ 1\.000 x n-grams [+-]\d\.\d{3}, the "
            r"plain sum: 0 validation texts, fewer than 10 reviews of a class, "
            r"to fit it on",
            blend[0],
        ), lines
        assert result.branch_accuracy.keys() == {"attention", "ngrams"}
    else:
        assert (
            "calibration: none: 0 validation texts, fewer than 10 reviews of a "
            "class or all on their side, to fit a temperature on"
        ) in lines
    assert lines[-1] == f"test accuracy: {result.accuracy:.4f}"


def test_train_fits_a_temperature_on_the_validation_reviews(tmp_path, capsys):
    # Without the n-gram branch, a temperature is fitted on the validation
    # reviews and their crops. Every fifth review has the other class's
    # words, so that the logits cannot put every validation text on its side.
    words = {"pos": ["great", "superb", "loved"], "neg": ["awful", "boring", "hated"]}
    for split, n in (("train", 256), ("test", 16)):
        reviews = {
            label: [
                f"Seen on day {i}: {words[label if i % 5 else other][i % 3]}."
                for i in range(n)
            ]
            for label, other in (("pos", "neg"), ("neg", "pos"))
        }
        write_reviews(tmp_path / "acl", split, reviews)
    config = TrainConfig(
        data=str(tmp_path / "acl"),
        out=tmp_path / "m.keras",
        ngram_logit=False,
        **TINY,
    )
    result = train(config)
    lines = capsys.readouterr().out.strip().splitlines()
    fitted = [line for line in lines if line.startswith("calibration: ")]
    assert len(fitted) == 1, lines
    match = re.fullmatch(
        r"calibration: temperature (\d+\.\d{3}), fitted on 52 validation texts",
        fitted[0],
    )
    assert match, fitted  # 26 validation reviews and their crops
    assert float(match.group(1)) != 1.0
    assert any(re.fullmatch(r"test ECE \(15 bins\): [\d.]+ before, [\d.]+ after", line)
               for line in lines), lines  # fmt: skip
    assert lines[-1] == f"test accuracy: {result.accuracy:.4f}"


def test_the_default_model_trains_in_mixed_precision_with_its_blend(
    tmp_path, capsys, monkeypatch
):
    # The default (n-gram branch on) in mixed precision: NB-LR is fitted,
    # the blend too (25 validation texts and their crops: enough of each
    # class), and what it predicts is finite and survives a save and load.
    words = {"pos": ["great", "superb", "loved"], "neg": ["awful", "boring", "hated"]}
    for split, n in (("train", 256), ("test", 16)):
        reviews = {
            label: [
                f"Seen on day {i}: {mood[i % 3]}, {mood[i // 3 % 3]}." for i in range(n)
            ]
            for label, mood in words.items()
        }  # distinct texts, so that the validation split holds both classes
        write_reviews(tmp_path / "acl", split, reviews)
    config = TrainConfig(
        data=str(tmp_path / "acl"),
        out=tmp_path / "m.keras",
        mixed_precision=True,
        ngram_c=0.25,  # not the default: the fit gets it
        **TINY,
    )
    assert config.ngram_logit  # the default
    traces = []  # `train_step` runs in Python only while `fit` traces it
    step = keras.Model.train_step
    monkeypatch.setattr(
        keras.Model,
        "train_step",
        lambda self, data: traces.append(1) or step(self, data),
    )
    result = train(config)
    # Traced once: the accuracy metric exists before the first step (Keras
    # makes a metric named by a string inside it, and the step traced twice).
    assert len(traces) == 1
    assert keras.config.dtype_policy().name == "float32"
    encoder = result.model.get_layer(f"{imdb_model.ENCODER}_0")
    assert encoder.dtype_policy.name.startswith("mixed_")  # bfloat16 on a CPU
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(
        line.startswith("n-grams: NB-LR on 486 texts (C = 0.25)") for line in lines
    )
    blend = [line for line in lines if line.startswith("blend: ")]
    assert len(blend) == 1 and "fitted on 52 validation texts" in blend[0], blend
    # The branches' own accuracies, as logged:
    assert set(result.branch_accuracy) == {"attention", "ngrams"}
    assert (
        f"test accuracy of the branches: attention "
        f"{result.branch_accuracy['attention']:.4f}, n-grams "
        f"{result.branch_accuracy['ngrams']:.4f}"
    ) in lines
    texts = ["Seen on day 7: superb, loved.", "Seen on day 7: awful, hated."]
    probabilities = imdb_model.predict(result.model, texts)
    assert np.all(np.isfinite(probabilities))
    assert probabilities[0] > 0.5 > probabilities[1]  # the easy synthetic reviews
    loaded = keras.models.load_model(result.path)
    np.testing.assert_allclose(
        imdb_model.predict(loaded, texts), probabilities, atol=1e-6
    )
    assert lines[-1] == f"test accuracy: {result.accuracy:.4f}"


class _Fails(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        raise RuntimeError("stop here")


def test_train_restores_the_dtype_policy_when_it_fails(tmp_path):
    data = write_acl(tmp_path / "acl", n_train=32, n_test=8)
    config = TrainConfig(
        data=str(data), out=tmp_path / "m.keras", mixed_precision=True, **TINY
    )
    with pytest.raises(RuntimeError, match="stop here"):
        train(config, callbacks=[_Fails()])
    assert keras.config.dtype_policy().name == "float32"


class _InterruptAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            raise KeyboardInterrupt


# The run the resume tests interrupt after its first epoch.
_RESUMED = {**TINY, "epochs": 2, "batch_size": 32, "seed": 3}


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """Reviews, and the checkpoint of a run of `_RESUMED` on them interrupted
    after its first epoch: (data folder, checkpoint folder). Made once: each
    test resumes from a copy."""
    folder = tmp_path_factory.mktemp("interrupted")
    data = write_acl(folder / "acl", n_train=64, n_test=8)
    out = folder / "resume.keras"
    config = TrainConfig(data=str(data), out=out, **_RESUMED)
    with pytest.raises(KeyboardInterrupt):
        train(config, callbacks=[_InterruptAfterFirstEpoch()])
    assert not out.exists()
    backup = folder / "resume.keras.backup"
    assert (backup / "checkpoint").is_file()
    assert json.loads((backup / "options.json").read_text())["seed"] == 3
    return data, backup


def _resume_config(interrupted, tmp_path, **changes) -> TrainConfig:
    """`_RESUMED` with `changes`, its output in `tmp_path` beside a copy of
    the interrupted run's checkpoint (`tmp_path / "resume.keras.backup"`)."""
    data, backup = interrupted
    shutil.copytree(backup, tmp_path / "resume.keras.backup")
    out = tmp_path / "resume.keras"
    return TrainConfig(data=str(data), out=out, **{**_RESUMED, **changes})


def test_an_interrupted_run_resumes_after_its_last_epoch(interrupted, tmp_path, capsys):
    config = _resume_config(interrupted, tmp_path, verbose=1)
    capsys.readouterr()
    result = train(config)
    printed = capsys.readouterr().out
    assert "resuming after epoch 1" in printed
    assert "Epoch 2/2" in printed and "Epoch 1/2" not in printed
    assert len(result.history["loss"]) == 1  # the epoch it ran
    assert not (tmp_path / "resume.keras.backup").exists()
    # The optimizer state came back too: its step count covers both epochs.
    steps_per_epoch = -(-(64 - round(0.05 * 64)) // 32)
    model = keras.models.load_model(config.out)
    assert int(model.optimizer.iterations) == 2 * steps_per_epoch


def test_a_resume_with_other_options_is_refused_naming_them(
    interrupted, tmp_path, capsys
):
    # The checkpoint's weights would meet another vocabulary, seed and
    # schedule: it trained on and reported 0.5 without a word before.
    other = _resume_config(interrupted, tmp_path, seed=7)
    backup = tmp_path / "resume.keras.backup"
    with pytest.raises(DistributeError) as error:
        train(other)
    assert str(error.value) == (
        f"the checkpoint in {backup} was trained with other options (seed=3, "
        f"not 7); run the same command again to resume, or delete {backup} "
        "to start over"
    )
    assert not other.out.exists() and backup.is_dir()  # nothing trained, nothing lost
    # What leaves the weights alone may change: the run resumes.
    same = dataclasses.replace(other, seed=3, calibrate=False, ngram_c=0.5)
    capsys.readouterr()
    train(same)
    assert "resuming after epoch 1" in capsys.readouterr().out


def test_a_checkpoint_of_the_first_standardization_is_refused(interrupted, tmp_path):
    # The checkpoint holds the weights, not the vocabulary, which a resume
    # builds again: one written before `standardize_v2` would meet another.
    config = _resume_config(interrupted, tmp_path)
    backup = tmp_path / "resume.keras.backup"
    options = json.loads((backup / "options.json").read_text())
    assert options.pop("standardize") == "standardize_v2"
    (backup / "options.json").write_text(json.dumps(options))  # as 0.1 wrote
    with pytest.raises(DistributeError, match="older version, which did not record"):
        train(config)
    assert backup.is_dir()


def test_a_resume_on_another_number_of_replicas_is_refused(
    interrupted, tmp_path, monkeypatch
):
    # --batch-size is per replica: the global batch and the steps of the
    # learning-rate schedule follow the replicas, which TF_CONFIG's cluster
    # or the machine's GPUs set, not an option. A resume on another count
    # ended as neither run would have.
    config = _resume_config(interrupted, tmp_path)
    plan = distributed.plan

    def on_two_replicas(strategy, batch_size, n_train):
        return plan(strategy, batch_size, n_train)._replace(replicas=2)

    monkeypatch.setattr(distributed, "plan", on_two_replicas)
    with pytest.raises(DistributeError, match=r"\(replicas=1, not 2\)"):
        train(config)
