"""``python -m s3ddb.testing``: the same as ``s3ddb local-aws``."""

from __future__ import annotations

import sys

from s3ddb.cli.local_aws_cmd import main

if __name__ == "__main__":
    sys.exit(main())
