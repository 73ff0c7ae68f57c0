"""Shared pieces of the test suite: child-process entry points (``python -m
tests.support.workers`` and the like), the local AWS endpoints beyond moto, object
listings, the deterministic simulation and the CLI run in-process."""
