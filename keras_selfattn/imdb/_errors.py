"""The one line of an error's message that the demo shows its users."""

from __future__ import annotations


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
    lines = [line.strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line and not line.startswith(skip)]
    name = type(error).__name__
    if not lines:
        return name
    line = lines[0]
    if line.endswith(":") and len(lines) > 1:
        line = f"{line} {lines[1]}"
    return f"{name}: {line}" if typed else line
