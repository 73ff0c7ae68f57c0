"""Spark session settings changed for one step and put back afterwards."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["session_settings"]


@contextmanager
def session_settings(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Set ``settings`` on ``spark``'s session conf for the ``with`` block, then give
    each key back the value it had (unset when it had none), however the block ends.
    The conf is the session's: other threads' queries on the session see the settings
    meanwhile, so only settings that cannot change their answers belong here."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
