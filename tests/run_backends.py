"""Runs the test suite once per Keras backend and sums up.

Usage: python tests/run_backends.py [--backends tensorflow,jax,torch] [pytest args]

Keras picks its backend once per process (KERAS_BACKEND), so each backend gets
its own pytest process. TensorFlow runs everything; JAX and PyTorch run all but
the tests marked `tensorflow_only` (the demo, tf.function, tf.distribute).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    args, pytest_args = parser.parse_known_args(argv)
    rows, failed_any = [], False
    start_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            junit = Path(tmp) / f"{backend}.xml"
            env = dict(os.environ, KERAS_BACKEND=backend)
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
            command = [sys.executable, "-m", "pytest", f"--junitxml={junit}"]
            command += pytest_args
            print(f"\n===== backend: {backend} =====", flush=True)
            start = time.perf_counter()
            code = subprocess.call(command, cwd=ROOT, env=env)
            seconds = time.perf_counter() - start
            if code not in (0, 5) or not junit.exists():
                failed_any = True
            counts = (
                _counts(junit)
                if junit.exists()
                else {"tests": 0, "failures": 1, "errors": 0, "skipped": 0}
            )
            if code == 5:  # pytest: no tests collected
                failed_any = True
            rows.append((backend, counts, seconds))
    print("\nbackend     passed  failed  skipped  seconds")
    passed_total = failed_total = skipped_total = 0
    for backend, c, seconds in rows:
        failed = c["failures"] + c["errors"]
        passed = c["tests"] - failed - c["skipped"]
        passed_total += passed
        failed_total += failed
        skipped_total += c["skipped"]
        print(
            f"{backend:<11} {passed:>6}  {failed:>6}  {c['skipped']:>7}  {seconds:7.1f}"
        )
    wall = time.perf_counter() - start_all
    print(f"all backends in {wall:.1f} s")
    print(
        f"total: {passed_total} passed, {failed_total} failed, {skipped_total} skipped"
    )
    return 1 if failed_any or failed_total else 0


if __name__ == "__main__":
    sys.exit(main())
