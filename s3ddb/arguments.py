"""Checks of the numbers callers pass: counts, sizes, retries, versions.

One rule everywhere: an integer argument is an ``int`` and never a ``bool`` (Python
counts ``True`` as the int 1, which as a limit, a batch size or a version is always a
mistake). Below every package that takes arguments, so each uses the same check and
says the same thing when it refuses.
"""

from __future__ import annotations

from typing import TypeGuard

from s3ddb.errors import InvalidInputError

__all__ = ["check_int", "is_int"]


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` and not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: object, *, minimum: int) -> int:
    """``value``, if it is an ``int`` (not a ``bool``) of at least ``minimum``.

    Raises:
        InvalidInputError: it is not: ``"{name} must be an int >= {minimum}, got
            {value!r}"``.
    """
    if not is_int(value) or value < minimum:
        raise InvalidInputError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value
