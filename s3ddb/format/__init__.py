"""The stored model: manifests, fragments, data/deletion/index files, layout and naming."""

__all__: list[str] = []
