"""Parse failures told in s3ddb's own words, with the position in the text.

sqlglot describes a failure in its own terms (``Required keyword: 'expression'
missing for <class 'sqlglot.expressions.core.GT'>``); a user wrote ``id >`` and needs
to hear that a value is missing after ``>``, and where.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "parse_problem",
    "unreadable_text_problem",
]

# sqlglot's node class names, as the SQL a user wrote.
_OPERATORS = {
    "And": "AND",
    "Or": "OR",
    "Not": "NOT",
    "EQ": "=",
    "NEQ": "!=",
    "GT": ">",
    "GTE": ">=",
    "LT": "<",
    "LTE": "<=",
    "Is": "IS",
    "In": "IN",
    "Like": "LIKE",
    "ILike": "ILIKE",
    "Between": "BETWEEN",
    "Add": "+",
    "Sub": "-",
    "Mul": "*",
    "Div": "/",
    "Mod": "%",
    "Cast": "CAST",
}
_MISSING = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")


def _where(info: dict[str, Any]) -> str:
    """'at character N' (1-based) where the text sqlglot points at starts."""
    highlight = str(info.get("highlight") or "")
    column = info.get("col")
    if not isinstance(column, int):
        return ""
    start = max(column - len(highlight) + 1, 1)
    line = info.get("line")
    return (
        f"at line {line}, character {start}" if line not in (1, None) else f"at character {start}"
    )


def parse_problem(info: dict[str, Any]) -> str:
    """What is wrong and where, from one entry of a sqlglot ``ParseError.errors``
    (keys description, line, col, highlight); never a sqlglot class name."""
    description = str(info.get("description") or "")
    highlight = str(info.get("highlight") or "")
    missing = _MISSING.match(description)
    if missing:
        role, node = missing.groups()
        op = _OPERATORS.get(node, node.upper())
        if node == "Between":
            what = "BETWEEN needs 'low AND high'"
        elif role == "this":
            what = f"a value is missing before '{op}'"
        else:
            what = f"a value is missing after '{op}'"
    elif description.startswith("Expecting )"):
        what = "a closing ')' is missing"
    elif description.startswith("Invalid expression / Unexpected token"):
        what = f"unexpected {highlight!r}"
    elif "<class" in description or "sqlglot" in description:
        what = f"syntax error near {highlight!r}"
    else:
        what = description.rstrip(".")
    where = _where(info)
    return f"{what} {where}" if where else what


def unreadable_text_problem(text: str) -> str:
    """Why ``text`` could not be split into words: the first quote without its
    closing quote and where it is, or a generic reason."""
    i = 0
    while i < len(text):
        quote = text[i]
        if quote in "'\"`":
            end = i + 1
            while True:
                end = text.find(quote, end)
                if end < 0:
                    kind = "string" if quote == "'" else "quoted name"
                    return f"unterminated {kind}: the {quote} at character {i + 1} is never closed"
                if text[end + 1 : end + 2] == quote:  # a doubled quote stands for itself
                    end += 2
                    continue
                break
            i = end + 1
            continue
        i += 1
    return "the text cannot be split into words (an unexpected character?)"
