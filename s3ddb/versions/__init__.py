"""Versions of a dataset: from a URI to its commit handler (:mod:`.connect`), opening a
version's manifest and history (:mod:`.opening`), the pinned version every operation
works on and commits from (:mod:`.pinned`), and tags (:mod:`.tags`)."""

__all__ = []
