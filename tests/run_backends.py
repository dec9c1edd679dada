"""Runs the test suite once per Keras backend and sums up.

Usage: python tests/run_backends.py [--backends tensorflow,jax,torch]
       [--jobs 2] [pytest args]

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
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--jobs", type=int, default=2, help="passes run at once")
    args, pytest_args = parser.parse_known_args(argv)
    backends = args.backends.split(",")
    results: dict[str, tuple[int, dict[str, int], float]] = {}
    print_lock = threading.Lock()
    start_all = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:

        def run(backend: str) -> None:
            junit = Path(tmp) / f"{backend}.xml"
            log = Path(tmp) / f"{backend}.log"
            env = dict(os.environ, KERAS_BACKEND=backend)
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
            command = [sys.executable, "-m", "pytest", f"--junitxml={junit}"]
            start = time.perf_counter()
            with open(log, "w") as out:
                code = subprocess.call(
                    command + pytest_args,
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
                print(f"\n===== backend: {backend} ({seconds:.0f} s) =====")
                print(log.read_text(), end="", flush=True)
            results[backend] = (code, counts, seconds)

        def lane(names: list[str]) -> None:
            for backend in names:
                run(backend)

        threads = [
            threading.Thread(target=lane, args=(names,))
            for names in _lanes(backends, args.jobs)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    print("\nbackend     passed  failed  skipped  seconds")
    failed_any = False
    passed_total = failed_total = skipped_total = 0
    for backend in backends:
        code, c, seconds = results[backend]
        # pytest exits 5 when it collected no test: a failure here.
        failed_any |= code != 0
        failed = c["failures"] + c["errors"]
        passed = c["tests"] - failed - c["skipped"]
        passed_total += passed
        failed_total += failed
        skipped_total += c["skipped"]
        print(
            f"{backend:<11} {passed:>6}  {failed:>6}  {c['skipped']:>7}  {seconds:7.1f}"
        )
    wall = time.perf_counter() - start_all
    print(f"all backends in {wall:.1f} s ({args.jobs} at once)")
    print(
        f"total: {passed_total} passed, {failed_total} failed, {skipped_total} skipped"
    )
    return 1 if failed_any or failed_total else 0


if __name__ == "__main__":
    sys.exit(main())
