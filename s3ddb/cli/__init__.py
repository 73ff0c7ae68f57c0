"""The ``s3ddb`` command line: :func:`s3ddb.cli.main.main` and one module per group of verbs."""

__all__: list[str] = []
