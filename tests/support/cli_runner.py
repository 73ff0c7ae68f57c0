"""The ``s3ddb`` command run in-process, for the CLI tests."""

from __future__ import annotations

import pytest

from s3ddb.cli.main import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``s3ddb ARGV`` in-process: (exit status, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse errors and --help
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err
