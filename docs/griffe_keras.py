"""A griffe extension that reads docstrings in Keras's layout.

Keras writes its layer docstrings in the Google style with two sections that
griffe's Google parser does not know:

- `Call arguments:`, the arguments of `call()`, listed like `Args:`. Griffe
  reads an unknown title as an admonition, so mkdocstrings would render the
  list as running text. Here it becomes a parameters section of its own,
  titled "Call arguments" (a table, like `Args:`).
- `Example:` followed by a blank line and unindented doctest lines (`>>>`).
  Griffe needs the examples indented under an `Examples:` title to render
  them as code; here the block is re-indented under that title.

Registered in `mkdocs.yml` (`plugins: mkdocstrings: handlers: python: options:
extensions: [docs/griffe_keras.py]`).
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

CALL_ARGUMENTS = "Call arguments"
TITLE = "Call arguments:"  # as griffe titles "Parameters:"

# "Example:" (or "Examples:") on its own line, a blank line, then doctest lines
# at the same indentation as the title, up to the end of the docstring.
_UNINDENTED_EXAMPLE = re.compile(r"^Examples?:\n\n(?=>>> )", re.MULTILINE)


def _indent_examples(text: str) -> str:
    """Moves Keras's unindented `Example:` block under an `Examples:` title."""
    match = _UNINDENTED_EXAMPLE.search(text)
    if match is None:
        return text
    body = textwrap.indent(text[match.end() :], "    ")
    return f"{text[: match.start()]}Examples:\n{body}"


def _call_arguments(
    section: griffe.DocstringSection, obj: griffe.Object, parser: Any, options: dict
) -> griffe.DocstringSection:
    """The parameters section for a `Call arguments:` admonition, else `section`.

    Each argument's type and default come from the signature of `obj.call`
    where the class defines it (else the table would say "required" for
    every one).
    """
    if not isinstance(section, griffe.DocstringSectionAdmonition):
        return section
    if section.title != CALL_ARGUMENTS:
        return section
    # The leading newline keeps the indentation: griffe cleans a docstring's
    # value as `inspect.cleandoc` does, dedenting every line after the first.
    listing = "\nArgs:\n" + textwrap.indent(section.value.description, "    ")
    # A docstring of its own, with no parent: the call arguments are not the
    # constructor's parameters, so griffe must not check them against its
    # signature.
    parsed = griffe.Docstring(listing, parser=parser, parser_options=options).parsed
    params = [s for s in parsed if isinstance(s, griffe.DocstringSectionParameters)]
    if len(params) != 1:
        return section
    call = obj.members.get("call") if obj.is_class else None
    signature = call.parameters if call is not None and call.is_function else None
    for param in params[0].value:
        if signature is not None and param.name in signature:
            declared = signature[param.name]
            param.value = declared.default
            param.annotation = param.annotation or declared.annotation
    params[0].title = TITLE
    return params[0]


class KerasDocstrings(griffe.Extension):
    """Parses `Call arguments:` and Keras's `Example:` blocks (see the module)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None or obj.is_alias:
            return
        docstring.value = _indent_examples(docstring.value)
        parser, options = docstring.parser, docstring.parser_options
        sections = [
            _call_arguments(section, obj, parser, options)
            for section in docstring.parse()
        ]
        # `Docstring.parsed` is a cached property: what mkdocstrings renders.
        docstring.__dict__["parsed"] = sections
