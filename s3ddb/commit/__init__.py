"""Committing: how a transaction becomes the next version.

``committer`` is the commit loop (write the transaction, build the next manifest,
claim the version, on losing it resolve against what was committed meanwhile and
retry); ``build`` and ``builders`` turn a base manifest and an operation into the next
manifest; ``conflicts`` is the conflict matrix, with its rules in ``rebase``,
``fragment_reuse``, ``schema_rules`` and ``data_file_rules``; ``handlers`` and
``external`` claim versions (conditional put, or an external manifest store; the
latter also finishes its staged versions, steps 3-4, in the background through
``finalizer``).
"""

__all__: list[str] = []
