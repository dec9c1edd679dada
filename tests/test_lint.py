"""The code passes ruff's lint and format check (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.tensorflow_only  # once per suite run is enough
@pytest.mark.parametrize(
    "command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff(command):
    beside_python = Path(sys.executable).parent / "ruff"
    ruff = str(beside_python) if beside_python.exists() else shutil.which("ruff")
    assert ruff, "ruff is part of the test extra: pip install -e '.[test]'"
    result = subprocess.run(
        [ruff, *command], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
