"""Datasets together: ``s3ddb.atomic`` (changes to several datasets committed all or
nothing) and ``s3ddb.snapshot`` (a consistent cut of several datasets, never half of
a group). See docs/atomic.md.
"""

from s3ddb.groups.atomic_group import Atomic, AtomicGroup, atomic
from s3ddb.groups.snapshots import snapshot

__all__ = ["Atomic", "AtomicGroup", "atomic", "snapshot"]
