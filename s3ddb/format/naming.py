"""Manifest naming schemes.

V1: ``<version>.manifest``. V2: ``<u64::MAX - version, 20 digits>.manifest``, so that
lexicographic listing returns the newest version first (version 1 ->
``18446744073709551614.manifest``). V2 is the default for new datasets; both are read;
a dataset keeps the scheme it was created with.

A staged manifest (external-store protocol) is the final name plus ``-<uuid hex>``.
"""

from __future__ import annotations

import enum
import os
import random
import re

__all__ = [
    "DEFAULT_NAMING",
    "MAX_VERSION",
    "U64_MAX",
    "NamingScheme",
    "is_valid_version",
    "name_bits",
    "parse_manifest_name",
    "parse_staged_name",
    "staged_manifest_name",
    "unique_hex",
]

_OS_SEEDED = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_OS_SEEDED.seed)

#: Where :func:`unique_hex` takes its bits: a generator seeded from the OS's randomness
#: when the module is imported and again in every forked child, so processes never
#: share a sequence. A test that must replay a run exactly, file names included (the
#: commit simulation), puts a seeded one here for the run.
name_bits: random.Random = _OS_SEEDED


def unique_hex() -> str:
    """32 random lowercase hex digits (a version 4 UUID's form) that name a new file:
    a data file, a transaction, a staged manifest, a deletion file, a chunk.

    Unique, not secret: names need no cryptographic strength (reading one tells
    nothing an object listing does not), and ``uuid.uuid4`` asks the OS for
    randomness on every call, releasing the GIL each time, which costs a commit about
    half a millisecond when other threads wait for it (measured with the local
    endpoint in process). Tokens that grant anything keep using :mod:`secrets`.
    """
    value = name_bits.getrandbits(128)
    # The version (4) and variant (10) bits of a UUID, as uuid.uuid4().hex has them.
    value = (value & ~(0xF000 << 64) | (0x4000 << 64)) & ~(0xC000 << 48) | (0x8000 << 48)
    return f"{value:032x}"


U64_MAX = 2**64 - 1
#: The largest version s3ddb reads or writes. Versions are u64 in the format, but V2
#: names are ``u64::MAX - version``, and stored counters go through signed 64-bit
#: integers in Arrow, DynamoDB numbers and other readers: anything from 2^63 up is
#: refused as damaged or hostile, and a name that would parse to it is no manifest.
MAX_VERSION = 2**63 - 1
_V1_RE = re.compile(r"^([0-9]{1,19})\.manifest$")
_V2_RE = re.compile(r"^([0-9]{20})\.manifest$")
_STAGED_RE = re.compile(r"^([0-9]{1,20})\.manifest-([0-9a-f]{32})$")


class NamingScheme(enum.Enum):
    V1 = 1
    V2 = 2

    def manifest_name(self, version: int) -> str:
        """File name (no directory) of ``version``'s final manifest."""
        if not is_valid_version(version):
            raise ValueError(f"version out of range: {version} (1 to {MAX_VERSION})")
        if self is NamingScheme.V1:
            return f"{version}.manifest"
        return f"{U64_MAX - version:020d}.manifest"


DEFAULT_NAMING = NamingScheme.V2


def is_valid_version(version: object) -> bool:
    """Whether ``version`` is an int (not a bool) from 1 to :data:`MAX_VERSION`."""
    return type(version) is int and 1 <= version <= MAX_VERSION


def parse_manifest_name(name: str) -> tuple[int, NamingScheme] | None:
    """(version, scheme) of a final manifest file name, or None if it is not one (also
    when it would name a version outside 1..:data:`MAX_VERSION`: a V2 name of 20
    digits can exceed ``u64::MAX`` or name version 0)."""
    m = _V2_RE.match(name)
    if m:
        version, scheme = U64_MAX - int(m.group(1)), NamingScheme.V2
    else:
        m = _V1_RE.match(name)
        if not m:
            return None
        version, scheme = int(m.group(1)), NamingScheme.V1
    return (version, scheme) if is_valid_version(version) else None


def staged_manifest_name(final_name: str, token: str | None = None) -> str:
    """A unique staged name for ``final_name``: ``<final>-<uuid hex>``."""
    return f"{final_name}-{token or unique_hex()}"


def parse_staged_name(name: str) -> tuple[int, NamingScheme] | None:
    """(version, scheme) of a staged manifest file name, or None."""
    m = _STAGED_RE.match(name)
    if not m:
        return None
    return parse_manifest_name(f"{m.group(1)}.manifest")
