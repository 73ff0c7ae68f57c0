"""Changing a dataset: the operations that plan a change on a pinned version, write its
files and commit it. Rows and versions (:mod:`.rows`), delete/update planning
(:mod:`.row_changes`), :mod:`.merge_insert`, :mod:`.schema_evolution`, :mod:`.clones`,
and turning user data into Arrow (:mod:`.user_data`)."""

__all__: list[str] = []
