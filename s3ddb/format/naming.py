"""Manifest naming schemes.

V1: ``<version>.manifest``. V2: ``<u64::MAX - version, 20 digits>.manifest``, so that
lexicographic listing returns the newest version first (version 1 ->
``18446744073709551614.manifest``). V2 is the default for new datasets; both are read;
a dataset keeps the scheme it was created with.

A staged manifest (external-store protocol) is the final name plus ``-<uuid hex>``.
"""

from __future__ import annotations

import enum
import re
import uuid

U64_MAX = 2**64 - 1
_V1_RE = re.compile(r"^(\d{1,19})\.manifest$")
_V2_RE = re.compile(r"^(\d{20})\.manifest$")
_STAGED_RE = re.compile(r"^(\d{1,20})\.manifest-([0-9a-f]{32})$")


class NamingScheme(enum.Enum):
    V1 = 1
    V2 = 2

    def manifest_name(self, version: int) -> str:
        """File name (no directory) of ``version``'s final manifest."""
        if version < 1 or version >= U64_MAX:
            raise ValueError(f"version out of range: {version}")
        if self is NamingScheme.V1:
            return f"{version}.manifest"
        return f"{U64_MAX - version:020d}.manifest"


DEFAULT_NAMING = NamingScheme.V2


def parse_manifest_name(name: str) -> tuple[int, NamingScheme] | None:
    """(version, scheme) of a final manifest file name, or None if it is not one."""
    m = _V2_RE.match(name)
    if m:
        return U64_MAX - int(m.group(1)), NamingScheme.V2
    m = _V1_RE.match(name)
    if m and int(m.group(1)) > 0:
        return int(m.group(1)), NamingScheme.V1
    return None


def staged_manifest_name(final_name: str, token: str | None = None) -> str:
    """A unique staged name for ``final_name``: ``<final>-<uuid hex>``."""
    return f"{final_name}-{token or uuid.uuid4().hex}"


def parse_staged_name(name: str) -> tuple[int, NamingScheme] | None:
    """(version, scheme) of a staged manifest file name, or None."""
    m = _STAGED_RE.match(name)
    if not m:
        return None
    return parse_manifest_name(f"{m.group(1)}.manifest")
