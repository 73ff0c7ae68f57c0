"""Keeping a dataset healthy: compaction (:mod:`.compaction`), removing old versions
(:mod:`.cleanup`), checking a dataset (:mod:`.verify`; the kinds of problem it reports
in :mod:`.problems`), repairing it (:mod:`.repair`), deleting it (:mod:`.drop`) and
checking a deployment's configuration (:mod:`.doctor`)."""

__all__ = []
