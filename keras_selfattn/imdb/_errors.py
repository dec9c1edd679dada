"""The one line of an error's message that the demo shows its users, and
the checks of an output file or folder that say why it cannot be written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def first_line(
    error: BaseException, *, skip: tuple[str, ...] = (), typed: bool = False
) -> str:
    """The first line of `error`'s message, for a one-line report.

    Blank lines, and lines that start with one of `skip`, are passed over; a
    line that ends in ":" (a heading, such as "The following tasks are
    lost:") keeps the line after it.

    Args:
        error: The exception.
        skip: Beginnings of lines that say where, not what (a traceback's
            `"File "`, say). Defaults to `()`.
        typed: Whether to put the error's type name in front
            (`"KeyError: 'x'"`). Defaults to `False`.

    Returns:
        The line; the error's type name where its message has none.
    """
    # A KeyError's str() is the repr of its message, quotes and all.
    text = (
        str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    )
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(skip)]
    name = type(error).__name__
    if not lines:
        return name
    line = lines[0]
    if line.endswith(":") and len(lines) > 1:
        line = f"{line} {lines[1]}"
    return f"{name}: {line}" if typed else line


def why_unwritable(path: str | Path) -> str | None:
    """Why the file `path` cannot be written, in the system's words, or None.

    Found by opening it to append, which changes no existing file, and
    removing the file if that made it: the one true test. `os.access` says
    yes to root for /proc, and a question about the folder misses a
    read-only file.

    Args:
        path: The file to be written later.

    Returns:
        None if it can be written; else the reason ("Permission denied").
    """
    path = Path(path)
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as error:
        return error.strerror or str(error)
    if not existed:
        path.unlink(missing_ok=True)
    return None


def why_no_folder(path: str | Path) -> str | None:
    """Why files cannot be written in the folder `path`, or None.

    Found as `why_unwritable` finds it, by doing it: a temporary folder is
    made in `path`, or in its nearest existing parent when `path` does not
    exist yet (the caller will make it), and removed.

    Args:
        path: The folder to be written in later.

    Returns:
        None if it can be; else the reason ("Permission denied", or which
        part of the path is a file).
    """
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file"
    try:
        probe = tempfile.mkdtemp(dir=existing)
    except OSError as error:
        return error.strerror or str(error)
    os.rmdir(probe)
    return None
