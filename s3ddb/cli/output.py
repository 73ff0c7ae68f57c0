"""How the ``s3ddb`` command prints: JSON documents, aligned tables, values as text,
progress bars, and all of it terminal-safe.

The verbs share these helpers: :func:`emit_json` (``--json``: one document, values
JSON has no type for as :func:`json_default` writes them), :func:`print_table`
(aligned columns), :func:`value_text` (a value as one line of text) and
:func:`progress_bar` (a bar on a terminal, nothing in a pipe or with ``--json``).

Nothing read from a dataset can control the terminal. Stored text (operation names,
committers, tag names, schema field names, metadata, data values, messages quoting
them) is written by someone else, maybe hostile. A terminal obeys escape sequences in
what it prints: ``ESC ] 0 ;`` retitles the window, ``ESC [ 2 J`` clears it, a carriage
return overwrites the line, a bidi override reverses what follows. So every verb
prints stored text through this module:

* :func:`safe_text` escapes control characters visibly (``\\x1b`` becomes the four
  characters ``\\x1b``) and keeps printable Unicode;
* :func:`json_text` is ``json.dumps`` with the same characters as ``\\uXXXX`` escapes
  (JSON escapes C0 controls itself, but not DEL, C1 controls such as U+009B CSI,
  U+2028/U+2029 or bidi controls);
* :func:`guarded_output`, which ``s3ddb.cli.main.main`` wraps around every verb,
  escapes any such character that still reaches stdout or stderr (newlines and tabs
  excepted), so a verb that forgets is safe too.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = [
    "UNSAFE",
    "Progress",
    "emit_json",
    "guarded_output",
    "help_summary",
    "help_text",
    "json_default",
    "json_text",
    "print_table",
    "progress_bar",
    "raw_stream",
    "safe_text",
    "value_text",
]

#: Characters never written raw: C0 controls, DEL, C1 controls (U+0080-U+009F, among
#: them U+009B, a one-character CSI), the Arabic letter mark, left/right marks, line
#: and paragraph separators, bidi embeddings, overrides and isolates.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(char: str) -> str:
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def safe_text(value: object, keep: str = "") -> str:
    """``str(value)`` with every :data:`UNSAFE` character escaped visibly, except
    those in ``keep`` (e.g. ``"\\n\\t"`` for CSV fields, which the CSV quoting keeps
    apart). Tabs and newlines are escaped by default: a value stays on its line."""
    text = value if isinstance(value, str) else str(value)
    return UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


def json_text(data: Any, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """``json.dumps(data, ensure_ascii=False, ...)`` with the :data:`UNSAFE`
    characters JSON leaves raw written as ``\\uXXXX`` escapes (still valid JSON, and
    the same string once parsed)."""
    text = json.dumps(data, default=default, ensure_ascii=False, **kwargs)
    # JSON escapes every C0 control inside strings, so a raw newline or tab is the
    # indentation's. Outside strings there is only ASCII: other matches are in strings.
    return UNSAFE.sub(
        lambda m: m.group() if m.group() in "\n\t" else f"\\u{ord(m.group()):04x}", text
    )


class _SafeStream:
    """A text stream that escapes :data:`UNSAFE` characters except newline and tab;
    everything else (flush, fileno, isatty, encoding...) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(safe_text(text, keep="\n\t"))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


@contextmanager
def guarded_output() -> Iterator[None]:
    """Within the block, ``sys.stdout`` and ``sys.stderr`` escape what the helpers
    above would (newlines and tabs excepted). The original streams are back after."""
    saved = sys.stdout, sys.stderr
    sys.stdout = _SafeStream(saved[0])  # type: ignore[assignment]
    sys.stderr = _SafeStream(saved[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def raw_stream(stream: TextIO) -> TextIO:
    """The terminal stream under a guarded one, for output that must carry escape
    sequences of our own (the progress bar of rich), never stored text."""
    inner = getattr(stream, "raw", None) if isinstance(stream, _SafeStream) else None
    return inner if inner is not None else stream


def json_default(value: Any) -> Any:
    """A value JSON has no type for: dates and times in ISO 8601, bytes in base64,
    anything else (Decimal exactly, timedelta...) as ``str``."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)  # Decimal (exactly), timedelta, anything else


def emit_json(data: Any) -> None:
    """One JSON document on stdout (``--json``), control characters escaped."""
    print(json_text(data, default=json_default, indent=2))


def value_text(value: Any) -> str:
    """A non-null value as one line of text (csv fields and table cells)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, list, dict)):  # true/false, nested values as JSON
        return json.dumps(value, default=json_default, ensure_ascii=False)
    return str(json_default(value))


def print_table(header: list[str], rows: list[list[str]], right: Collection[int] = ()) -> None:
    """Aligned columns (those in ``right`` aligned right); every cell is stored text,
    so escaped (:func:`safe_text`)."""
    header = [safe_text(h) for h in header]
    rows = [[safe_text(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    for cells in [header, ["-" * w for w in widths], *rows]:
        padded = [
            (c.rjust if i in right else c.ljust)(w) for i, (c, w) in enumerate(zip(cells, widths))
        ]
        print("  ".join(padded).rstrip())


#: A progress callback: (what, done, total or None).
Progress = Callable[[str, int, "int | None"], None]


@contextmanager
def progress_bar(shown: bool = True) -> Iterator[Progress]:
    """A progress callback: a rich bar on a terminal (stderr) when ``shown``, nothing
    otherwise (pipes, ``--json``)."""
    if not shown or not sys.stderr.isatty():
        yield lambda what, done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress as Bar

    # The bar's own escape sequences go to the terminal itself, not through the guard.
    console = Console(file=raw_stream(sys.stderr))
    with Bar(console=console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(what: str, done: int, total: int | None) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        yield update


# --- help text ------------------------------------------------------------------------

_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_RST_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`")
# The end of a sentence: a full stop before a capital (not "e.g. the").
_SENTENCE_END = re.compile(r"\.(?=\s+[A-Z])")


def _plain_literal(match: re.Match[str]) -> str:
    text = match.group(1) if match.group(1) is not None else match.group(2)
    # A word reads as itself; a lone symbol (``-``, ``?``) needs quotes to be seen.
    return text if any(c.isalnum() for c in text) else f"'{text}'"


def help_text(doc: str) -> str:
    """A docstring as ``--help`` shows it: reStructuredText inline markup made plain
    (``x`` and `x` become x, a lone symbol is quoted: '-'; :func:`~a.b` becomes b,
    :class:`a.b` becomes a.b). Lines and paragraphs are kept."""

    def role(match: re.Match[str]) -> str:
        target = match.group(1)
        return target.rsplit(".", 1)[-1] if match.group(0).count("~") else target

    return _RST_LITERAL.sub(_plain_literal, _RST_ROLE.sub(role, doc))


def help_summary(doc: str) -> str:
    """The one-sentence summary of a verb in ``s3ddb --help``: the first sentence of
    the docstring's first paragraph (a sentence may span lines), made plain
    (:func:`help_text`), lower-cased first letter, no full stop."""
    paragraph = help_text(doc).strip().split("\n\n", 1)[0]
    sentence = _SENTENCE_END.split(" ".join(paragraph.split()), 1)[0].rstrip(".")
    return sentence[:1].lower() + sentence[1:]
