"""Where per-fragment work runs: a local thread pool, or the mapper set for a block
(the Spark extension's executors), and the files its tasks wrote
(:mod:`.fragment_map`)."""

__all__: list[str] = []
