"""The test runner's lanes (TensorFlow's pass, the longest, runs alone) and
its pass at the Keras floor of setup.cfg."""

from __future__ import annotations

import doctest
import subprocess

import pytest

from tests import run_backends
from tests.run_backends import _lanes, _plan, floor_python, keras_floor

pytestmark = pytest.mark.backend_independent

BACKENDS = ["tensorflow", "jax", "torch"]


@pytest.mark.parametrize(
    "jobs, lanes",
    [
        (1, [BACKENDS]),
        (2, [["tensorflow"], ["jax", "torch"]]),
        (3, [["tensorflow"], ["jax"], ["torch"]]),
        (8, [["tensorflow"], ["jax"], ["torch"]]),
        (0, [BACKENDS]),
    ],
    ids=["one_lane", "two_lanes", "three_lanes", "more_jobs_than_passes", "zero"],
)
def test_lanes(jobs, lanes):
    assert _lanes(BACKENDS, jobs) == lanes


def test_one_backend_is_one_lane():
    assert _lanes(["jax"], 2) == [["jax"]]


def test_the_floor_pass_ends_the_last_lane_unless_left_out():
    floor = "tensorflow (keras 3.7.0)"
    assert _plan(BACKENDS, 2, "3.7.0") == [["tensorflow"], ["jax", "torch", floor]]
    assert _plan(BACKENDS, 1, "3.7.0") == [[*BACKENDS, floor]]
    assert _plan(["jax"], 2, "3.7.0") == [["jax", floor]]
    assert _plan(BACKENDS, 2, None) == _lanes(BACKENDS, 2)


def test_the_floor_is_setup_cfgs_and_the_floor_pass_skips_the_demo():
    floor = keras_floor()
    assert floor.count(".") == 2 and floor.startswith("3.")
    demo = {"tests/imdb", "tests/test_notebooks.py", "tests/test_docs.py"}
    assert demo <= set(run_backends.FLOOR_IGNORES)
    assert run_backends.pytest_command("jax", floor)[1:] == ["-m", "pytest"]


def test_docstring_examples():
    assert doctest.testmod(run_backends).failed == 0


@pytest.mark.slow
def test_floor_venv_has_the_floor_keras_and_the_running_packages(tmp_path):
    floor = keras_floor()
    python = floor_python(floor, home=tmp_path)
    code = "import keras, numpy, pytest; print(keras.__version__)"
    found = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert found == [floor]
    assert floor_python(floor, home=tmp_path) == python  # made once, then kept
