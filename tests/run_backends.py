"""Runs the test suite once per Keras backend and sums up.

Usage: python tests/run_backends.py [--backends tensorflow,jax,torch]
       [--jobs 2] [--no-keras-floor] [pytest args]

Keras picks its backend once per process (KERAS_BACKEND), so each backend gets
its own pytest process. Each pass runs the suite but the tests another pass
owns (tests/conftest.py): those marked `tensorflow_only` or
`backend_independent` run in the TensorFlow pass only, `jax_pass` in the JAX
pass only.

The passes run in `--jobs` lanes at once (default 2: TensorFlow in one, JAX
then PyTorch in the other). Much of a test run is single-threaded Python and
waiting on subprocesses, so two lanes on two cores finish well before one
pass after the other. Each pass's output is printed whole when it ends, so
the log reads as if they had run in turn; `--jobs 1` runs them in turn.

One more pass, `tensorflow (keras FLOOR)`, runs the library's tests (not the
demo's: not tests/imdb, the notebooks, the docs build or the install test) on
the TensorFlow backend with the oldest Keras that setup.cfg allows. It runs
in a virtual environment of its own, `.keras-floor/keras-FLOOR/`, made on the
first run and kept: it holds only that Keras (pip downloads it once) and sees
every other package of the running environment through a `.pth` file. It
runs after the others of the last lane; `--no-keras-floor` leaves it out.
"""

from __future__ import annotations

import argparse
import configparser
import os
import re
import site
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The floor pass: the library's tests only.
FLOOR_IGNORES = (
    "tests/imdb",
    "tests/test_notebooks.py",
    "tests/test_docs.py",
    "tests/test_install.py",
    "tests/test_lint.py",
    # This runner's own tests: they test no Keras, and make a floor venv.
    "tests/test_run_backends.py",
    "tests/benchmarks",
    # keras-hub 0.32 does not import on Keras 3.7 (it needs newer Keras
    # internals, such as `keras.src.utils.backend_utils.in_grain_data_pipeline`).
    "tests/layers/test_keras_hub_suite.py",
    "tests/layers/test_keras_hub_parity.py",
    "tests/test_convert_hub.py",
)


def keras_floor(setup_cfg: Path = ROOT / "setup.cfg") -> str:
    """The oldest Keras that setup.cfg allows: `keras>=X,<4` gives `X`."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg)
    requires = parser.get("options", "install_requires")
    found = re.search(r"^\s*keras\s*>=\s*([\w.]+)", requires, re.MULTILINE)
    if not found:
        raise ValueError(f"{setup_cfg}: no `keras>=...` in install_requires")
    return found.group(1)


def floor_name(floor: str) -> str:
    """The floor pass's name in the log and the summary."""
    return f"tensorflow (keras {floor})"


def floor_python(floor: str, home: Path = ROOT / ".keras-floor") -> Path:
    """The floor venv's Python, made (once) on top of the running environment.

    The venv holds Keras `floor` alone; a `.pth` file adds the running
    environment's site-packages after its own, so that everything else
    (TensorFlow, pytest, ...) is the running one's and only Keras is
    downloaded. It is kept, and made again for another running environment.
    """
    venv = home / f"keras-{floor}"
    python = venv / "bin" / "python"
    done = venv / "ready"  # what it was made for: remade for another
    made_for = "\n".join([f"keras=={floor}", *site.getsitepackages()]) + "\n"
    if done.exists() and done.read_text() == made_for:
        return python
    make = [sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)]
    subprocess.run(make, check=True)
    own = layer_on_running_environment(python)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    subprocess.run([*pip, "--target", own, f"keras=={floor}"], check=True)
    done.write_text(made_for)
    return python


def layer_on_running_environment(python: Path) -> Path:
    """Lets the venv of `python` see the running environment's packages.

    A `.pth` file in the venv's site-packages adds the running one's after
    it: what the venv holds itself comes first. Returns that site-packages.
    """
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    own = subprocess.run(
        [python, "-c", where], check=True, capture_output=True, text=True
    ).stdout.strip()
    running = site.getsitepackages()
    lines = [f"import site; site.addsitedir({path!r})\n" for path in running]
    (Path(own) / "running_environment.pth").write_text("".join(lines))
    return Path(own)


def pytest_command(name: str, floor: str) -> list[str]:
    """The pytest command of the pass `name` (a backend, or the floor pass)."""
    if name != floor_name(floor):
        return [sys.executable, "-m", "pytest"]
    ignores = [f"--ignore={path}" for path in FLOOR_IGNORES]
    return [str(floor_python(floor)), "-m", "pytest", *ignores]


def _counts(junit: Path) -> dict[str, int]:
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ET.parse(junit).getroot()
    for suite in root.iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
    return totals


def _lanes(backends: list[str], jobs: int) -> list[list[str]]:
    """The backends in `jobs` lanes run side by side.

    The first `jobs - 1` backends get a lane each and the rest share the
    last, in turn: TensorFlow's pass, the longest, runs alone.

    >>> _lanes(["tensorflow", "jax", "torch"], 2)
    [['tensorflow'], ['jax', 'torch']]
    >>> _lanes(["tensorflow", "jax", "torch"], 1)
    [['tensorflow', 'jax', 'torch']]
    """
    count = max(1, min(jobs, len(backends)))
    return [[backend] for backend in backends[: count - 1]] + [backends[count - 1 :]]


def _plan(backends: list[str], jobs: int, floor: str | None) -> list[list[str]]:
    """The lanes of passes: `_lanes`, then the floor pass (unless `floor` is
    None) last in the last lane, after JAX's and PyTorch's passes (`.ci/run`
    on 2026-12-06, 20:36 UTC, on the 2-core EPYC: TensorFlow 908 s; JAX
    523, PyTorch 183, the floor 205 s: 911 s in all).

    >>> _plan(["tensorflow", "jax", "torch"], 2, "3.7.0")
    [['tensorflow'], ['jax', 'torch', 'tensorflow (keras 3.7.0)']]
    """
    lanes = _lanes(backends, jobs)
    if floor is not None:
        lanes[-1].append(floor_name(floor))
    return lanes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--jobs", type=int, default=2, help="passes run at once")
    parser.add_argument(
        "--keras-floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the library's tests with the oldest Keras of setup.cfg",
    )
    args, pytest_args = parser.parse_known_args(argv)
    backends = args.backends.split(",")
    floor = keras_floor()
    lanes = _plan(backends, args.jobs, floor if args.keras_floor else None)
    passes = [name for lane in lanes for name in lane]
    results: dict[str, tuple[int, dict[str, int], float]] = {}
    print_lock = threading.Lock()
    start_all = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:

        def run(name: str) -> None:
            junit = Path(tmp) / f"pass-{passes.index(name)}.xml"
            log = junit.with_suffix(".log")
            env = dict(os.environ, KERAS_BACKEND=name.split()[0])
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
            start = time.perf_counter()
            try:
                command = pytest_command(name, floor)
            except subprocess.CalledProcessError as error:
                log.write_text(f"could not make the Keras {floor} venv: {error}\n")
                code = 1
            else:
                with open(log, "w") as out:
                    code = subprocess.call(
                        [*command, f"--junitxml={junit}", *pytest_args],
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
            seconds = time.perf_counter() - start
            counts = (
                _counts(junit)
                if junit.exists()
                else {"tests": 0, "failures": 1, "errors": 0, "skipped": 0}
            )
            with print_lock:
                print(f"\n===== backend: {name} ({seconds:.0f} s) =====")
                print(log.read_text(), end="", flush=True)
            results[name] = (code, counts, seconds)

        def lane(names: list[str]) -> None:
            for name in names:
                run(name)

        threads = [threading.Thread(target=lane, args=(names,)) for names in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    width = max(11, *(len(name) for name in passes))
    print(f"\n{'backend':<{width}} passed  failed  skipped  seconds")
    failed_any = False
    passed_total = failed_total = skipped_total = 0
    for name in passes:
        code, c, seconds = results[name]
        # pytest exits 5 when it collected no test: a failure here.
        failed_any |= code != 0
        failed = c["failures"] + c["errors"]
        passed = c["tests"] - failed - c["skipped"]
        passed_total += passed
        failed_total += failed
        skipped_total += c["skipped"]
        print(
            f"{name:<{width}} {passed:>6}  {failed:>6}  {c['skipped']:>7}  "
            f"{seconds:7.1f}"
        )
    wall = time.perf_counter() - start_all
    print(f"all passes in {wall:.1f} s ({len(lanes)} at once)")
    print(
        f"total: {passed_total} passed, {failed_total} failed, {skipped_total} skipped"
    )
    return 1 if failed_any or failed_total else 0


if __name__ == "__main__":
    sys.exit(main())
