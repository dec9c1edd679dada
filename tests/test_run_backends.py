"""The test runner's lanes: TensorFlow's pass, the longest, runs alone."""

from __future__ import annotations

import pytest

from tests.run_backends import _lanes

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
