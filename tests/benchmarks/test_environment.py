"""What the benchmarks print first, and the small scripts' command lines."""

from __future__ import annotations

import re
import sys

import keras
import pytest

from benchmarks import _environment, footprint, gpu


def test_the_header_names_the_command_the_machine_and_the_versions():
    lines = _environment.header().splitlines()
    names = [line.split(":")[0] for line in lines]
    assert names == ["date", "command", "machine", "versions"]
    assert re.fullmatch(r"date: 20\d\d-\d\d-\d\d \d\d:\d\d UTC", lines[0])
    assert " cores" in lines[2]
    assert f"Keras {keras.__version__} (backend {keras.backend.backend()})" in lines[3]
    assert "device: " in lines[3]


@pytest.mark.parametrize("argv", [[], ["nothing"], ["weights", "blocks"]])
def test_footprint_without_a_measure_is_a_usage_line(argv, capsys):
    # It was an IndexError (no argument) or a KeyError.
    assert footprint.main(argv) == 2
    assert capsys.readouterr().err.startswith(
        "usage: python benchmarks/footprint.py {weights,blocks,speed}"
    )


def test_gpu_alternates_its_processes_and_takes_their_medians(monkeypatch, capsys):
    order = []
    step_ms = {"keras_mha": [10.0, 30.0, 20.0], "ours_mha": [5.0, 6.0, 7.0],
               "ours_self": [8.0, 8.0, 8.0]}  # fmt: skip

    def run_child(name, length, args):
        order.append(name)
        return {"ms": step_ms[name][order.count(name) - 1], "peak": 0}

    monkeypatch.setattr(gpu, "_run_child", run_child)
    monkeypatch.setattr(sys, "argv", ["gpu.py", "--lengths", "64", "--repeats", "3"])
    gpu.main()
    assert order[:3] == ["keras_mha", "ours_mha", "ours_self"]
    assert order[3:6] == ["ours_mha", "ours_self", "keras_mha"]  # rotated
    assert order[6:] == ["ours_self", "keras_mha", "ours_mha"]
    out = capsys.readouterr().out
    assert out.startswith("date: ")
    # Medians 20 and 6 ms: ratio 0.30. No memory statistics (CPU): "-", not 0.00.
    assert "| 64 | ours_mha | 6.00 | 0.00 | 0.30 | - |" in out
