"""The command line's start: quiet TensorFlow, and one line without the demo."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from keras_selfattn import _launcher
from keras_selfattn.imdb import cli

pytestmark = pytest.mark.tensorflow_only

MODEL = Path(__file__).parent.parent / "data" / "imdb_demo_v0.1.keras"
PREDICTION = re.compile(r"(positive|negative)\t\d\.\d{4}\ta great film")


def _commands() -> list[list[str]]:
    commands = [[sys.executable, "-m", "keras_selfattn"]]
    script = Path(sys.executable).parent / _launcher.PROG
    if script.exists():  # the console script of this environment
        commands.append([str(script)])
    return commands


@pytest.mark.slow
@pytest.mark.parametrize("command", _commands(), ids=lambda c: Path(c[-1]).name)
def test_predict_prints_only_its_own_line(command, subprocess_env):
    # As a user's shell has it: no TF_CPP_MIN_LOG_LEVEL, no debug.
    env = {k: v for k, v in subprocess_env.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.pop("KERAS_SELFATTN_DEBUG", None)
    result = subprocess.run(
        [*command, "predict", str(MODEL), "a great film"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and PREDICTION.fullmatch(lines[0]), result.stdout[:3000]


@pytest.mark.parametrize(
    ("given", "debug", "expected"),
    [(None, None, "3"), ("1", None, "1"), (None, "1", None)],
    ids=["default-silent", "the-users-level", "debug-keeps-tensorflows"],
)
def test_the_command_silences_tensorflows_cpp_logs(given, debug, expected, monkeypatch):
    for name, value in (
        ("TF_CPP_MIN_LOG_LEVEL", given),
        ("KERAS_SELFATTN_DEBUG", debug),
    ):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    _launcher.set_environment()
    assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, "true"), ("false", "false")],
    ids=["default-bfc", "the-users-choice"],
)
def test_the_command_uses_tensorflows_caching_cpu_allocator(
    given, expected, monkeypatch
):
    # Set first, so that the test leaves the variable as it found it.
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", given or "unset")
    if given is None:
        monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC")
    _launcher.set_environment()
    assert os.environ["TF_CPU_ALLOCATOR_USE_BFC"] == expected


def test_quiet_stderr_hides_file_descriptor_2(capfd, monkeypatch):
    monkeypatch.delenv("KERAS_SELFATTN_DEBUG", raising=False)
    with _launcher.quiet_stderr():
        os.write(2, b"I0000 start-up noise\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_quiet_stderr_replays_what_it_hid_when_the_import_fails(capfd, monkeypatch):
    monkeypatch.delenv("KERAS_SELFATTN_DEBUG", raising=False)
    with pytest.raises(ImportError), _launcher.quiet_stderr():
        os.write(2, b"why it failed\n")
        raise ImportError("no TensorFlow")
    assert capfd.readouterr().err == "why it failed\n"


def test_debug_keeps_file_descriptor_2(capfd, monkeypatch):
    monkeypatch.setenv("KERAS_SELFATTN_DEBUG", "1")
    with _launcher.quiet_stderr():
        os.write(2, b"I0000 start-up noise\n")
    assert capfd.readouterr().err == "I0000 start-up noise\n"


@pytest.mark.parametrize("missing", _launcher.DEMO_MODULES)
def test_without_the_demo_one_line_names_the_install_and_exits_2(
    missing, capsys, monkeypatch
):
    find_spec = _launcher.importlib.util.find_spec
    monkeypatch.setattr(
        _launcher.importlib.util,
        "find_spec",
        lambda name, *a: None if name == missing else find_spec(name, *a),
    )
    with pytest.raises(SystemExit) as exit_:
        _launcher.check_demo_installed()
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("keras-selfattn: ")
    assert (
        missing in lines[0]
        and 'pip install ".[demo]" (in the keras-selfattn checkout)' in lines[0]
    )
    # Called in-process, the command line says the same and returns 2.
    assert cli.main(["predict", "model.keras", "text"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        lines[0].replace("keras-selfattn: ", "keras-selfattn: error: ")
    ]


@pytest.mark.parametrize("backend", ["nonsense", "jax"])
def test_another_backend_is_one_line_and_exit_2_before_keras_loads(
    backend, subprocess_env
):
    # KERAS_BACKEND=nonsense made Keras's import end in a traceback (exit 1).
    result = subprocess.run(
        [sys.executable, "-m", "keras_selfattn", "predict", str(MODEL), "good"],
        capture_output=True,
        text=True,
        env={**subprocess_env, "KERAS_BACKEND": backend},
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "keras-selfattn: the IMDB demo runs on the TensorFlow backend; unset "
        f"KERAS_BACKEND or set it to tensorflow (it is '{backend}')"
    ]


@pytest.mark.parametrize(
    "orig_argv, argv0, expected",
    [
        (["python", "-m", "keras_selfattn", "predict"], "-m", True),
        (["python", "-u", "-m", "keras_selfattn"], "-m", True),
        (["python", "-m", "keras_selfattn.imdb.cli"], "-m", True),
        (["/v/bin/python", "/v/bin/keras-selfattn"], "/v/bin/keras-selfattn", True),
        (["python", "-m", "pytest"], "-m", False),
        (["python", "-c", "import keras_selfattn"], "-c", False),
        (["python", "-m"], "-m", False),
    ],
    ids=["module", "module_with_flags", "cli_module", "console_script", "pytest",
         "c", "bare_m"],
)  # fmt: skip
def test_is_command_line(orig_argv, argv0, expected, monkeypatch):
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", [argv0])
    assert _launcher.is_command_line() is expected
