"""Removes start-up log noise from the notebooks' stored outputs.

Usage: python notebooks/scrub_logs.py [NOTEBOOK ...]   (default: all of them)

TensorFlow writes its start-up lines to stderr whatever `TF_CPP_MIN_LOG_LEVEL`
says (absl's "All log messages before absl::InitializeLog()", each line of its
C++ logger: `I0000 00:00:... port.cc:153] ...`, `E0000 ... failed call to
cuInit` on a machine without a GPU), and absl's Python logger and tqdm add
warnings that say nothing about the notebook. The docs render the stored
outputs as they are, so after executing the notebooks for the docs
(docs/notebooks.md gives the commands), run this: it drops those lines from
the stderr streams, and a stream left empty. `tests/test_notebooks.py` checks
that none is stored.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent

# One line of noise: absl's first line, a C++ log line (severity, date, time,
# thread, file:line) and the second line of the CPU-features one, absl's
# Python logger, tqdm's warning about Jupyter's widgets (and the
# `from .autonotebook import ...` line that follows it).
NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)"
    r"|[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
    r"|To enable the following instructions: .* rebuild TensorFlow"
    r"|WARNING:absl:"
    r"|.*TqdmWarning: IProgress not found"
    r"|\s+from \.autonotebook import tqdm as notebook_tqdm)"
)


def noisy_lines(cell: dict) -> list[str]:
    """The lines of noise in a code cell's stored stderr outputs."""
    return [
        line
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stderr"
        for line in "".join(output["text"]).splitlines()
        if NOISE.match(line)
    ]


def scrub(path: Path) -> int:
    """Drops the noise from one notebook, in place; the lines dropped."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    dropped = 0
    for cell in notebook["cells"]:
        kept_outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output["name"] == "stderr":
                lines = "".join(output["text"]).splitlines(keepends=True)
                kept = [line for line in lines if not NOISE.match(line)]
                dropped += len(lines) - len(kept)
                if not kept:
                    continue
                output["text"] = kept
            kept_outputs.append(output)
        if "outputs" in cell:
            cell["outputs"] = kept_outputs
    text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return dropped


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        print(f"{path}: {scrub(path)} lines of noise dropped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
