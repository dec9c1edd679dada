"""Executes every notebook in notebooks/, so that the tutorials never rot.

Each notebook runs top to bottom in a fresh Jupyter kernel; a cell that raises
(its asserts included) fails the test. Notebook 03 runs its fast setting
(`KERAS_SELFATTN_NOTEBOOK_FAST=1` in the kernel's environment). The kernel is
a temporary kernelspec that starts `sys.executable`, the interpreter running
pytest, so the notebooks see exactly this environment and this checkout,
whatever other `python3` kernels the machine has registered. Matplotlib is
headless (Agg).

The notebooks are committed with their outputs (the docs render them as they
are); each test run first clears them, so that it executes from scratch and
depends on nothing stored.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import keras
import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL_NAME = "keras-selfattn-tests"
CELL_TIMEOUT_S = 600  # a hang guard, not a speed requirement

pytestmark = pytest.mark.notebook

# The IMDB notebook needs TensorFlow (the demo); the others (the two
# tutorials, 04 with keras-hub's GPT-2 converted) run on any backend, and run
# once, in the JAX pass (tests/conftest.py): the lane of the shorter passes.
_PASS = {"03_imdb_sentiment": pytest.mark.tensorflow_only}


def _run_cases() -> list:
    return [
        pytest.param(p, id=p.stem, marks=_PASS.get(p.stem, pytest.mark.jax_pass))
        for p in NOTEBOOKS
    ]


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> Path:
    """A Jupyter data dir holding one kernelspec that runs this interpreter."""
    data_dir = tmp_path_factory.mktemp("jupyter")
    spec_dir = data_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
        "env": {
            "MPLBACKEND": "Agg",
            "KERAS_BACKEND": keras.backend.backend(),
            "TF_CPP_MIN_LOG_LEVEL": "3",
            # Notebook 03's test-size setting (read in its first cell).
            "KERAS_SELFATTN_NOTEBOOK_FAST": "1",
        },
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return data_dir


def execute(notebook: nbformat.NotebookNode, kernel_dir: Path, cwd: Path, monkeypatch):
    """Runs `notebook` in place; raises CellExecutionError on a failing cell."""
    # JUPYTER_PATH is searched before every other kernelspec directory.
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    client = NotebookClient(
        notebook,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()


@pytest.mark.slow
@pytest.mark.parametrize("path", _run_cases())
def test_notebook_runs(path, kernel_dir, tmp_path, monkeypatch):
    notebook = nbformat.read(path, as_version=4)
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    for cell in code_cells:
        cell.outputs, cell.execution_count = [], None
    execute(notebook, kernel_dir, tmp_path, monkeypatch)
    assert code_cells
    assert all(c.execution_count is not None for c in code_cells)


@pytest.mark.backend_independent
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_executed(path):
    """The committed outputs, which the docs render, are of one clean run."""
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code_cells]
    assert counts == list(range(1, len(code_cells) + 1)), counts
    for cell in code_cells:
        assert all(o.output_type != "error" for o in cell.outputs), cell.get("id")


def _scrub_logs():
    """notebooks/scrub_logs.py (a script: the notebooks folder is no package)."""
    spec = importlib.util.spec_from_file_location(
        "scrub_logs", ROOT / "notebooks" / "scrub_logs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.backend_independent
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_start_up_log_noise_is_stored(path):
    # The docs render the stored outputs; TensorFlow's start-up lines were
    # in them although docs/notebooks.md said they had been removed.
    noisy_lines = _scrub_logs().noisy_lines
    notebook = json.loads(path.read_text(encoding="utf-8"))
    noise = [line for cell in notebook["cells"] for line in noisy_lines(cell)]
    assert not noise, noise


@pytest.mark.backend_independent
def test_the_scrub_drops_the_noise_and_keeps_the_rest(tmp_path):
    scrub_logs = _scrub_logs()
    stderr = [
        "WARNING: All log messages before absl::InitializeLog() is called are "
        "written to STDERR\n",
        "I0000 00:00:1796409871.460199   30596 port.cc:153] oneDNN custom "
        "operations are on.\n",
        "a warning of the notebook's own\n",
    ]
    cells = [
        {"cell_type": "code", "outputs": [
            {"output_type": "stream", "name": "stderr", "text": stderr},
            {"output_type": "stream", "name": "stdout", "text": ["I0000 kept\n"]},
        ]},
        {"cell_type": "code", "outputs": [
            {"output_type": "stream", "name": "stderr", "text": ["WARNING:absl:x\n"]}
        ]},
    ]  # fmt: skip
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    assert scrub_logs.scrub(path) == 3
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["outputs"][0]["text"] == ["a warning of the notebook's own\n"]
    assert cells[0]["outputs"][1]["text"] == ["I0000 kept\n"]  # stdout: untouched
    assert cells[1]["outputs"] == []  # a stream left empty goes


@pytest.mark.backend_independent
def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert "01_self_attention_from_scratch.ipynb" in names
    assert "02_multi_head_attention.ipynb" in names
    assert "03_imdb_sentiment.ipynb" in names
    assert "04_existing_models.ipynb" in names
