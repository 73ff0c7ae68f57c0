"""Keeping a dataset healthy: compaction (:mod:`.compaction`), removing old versions
(:mod:`.cleanup`), verify/sync/drop (:mod:`.health`) and checking a deployment's
configuration (:mod:`.doctor`)."""

__all__ = []
