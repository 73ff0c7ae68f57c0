"""Names pylance code uses, so that switching is a change of import.

``import s3ddb as lance`` then ``lance.LanceOperation.Overwrite(schema, fragments)``,
``lance.LanceDataset.commit(uri, op, read_version=...)``; docs/pylance.md lists every
pylance call and whether s3ddb supports it, differs (and why), or not.
"""

from __future__ import annotations

from typing import Any

from s3ddb.commit.base_operations import Clone
from s3ddb.commit.data_replacement import DataReplacement, DataReplacementGroup
from s3ddb.commit.row_operations import Delete, Rewrite, RewriteGroup, Update
from s3ddb.commit.schema_ops import Merge, Project
from s3ddb.commit.transaction import Append, Overwrite, Restore, UpdateConfig
from s3ddb.errors import UnsupportedOperationError
from s3ddb.index.operations import CreateIndex

#: cleanup_old_versions options of pylance that only tune how files are deleted.
CLEANUP_TUNING = frozenset({"delete_rate_limit", "delete_concurrency"})


class LanceOperation:
    """pylance's ``LanceOperation`` namespace: the s3ddb operations of the same names
    (``BaseOperation`` is :class:`s3ddb.commit.transaction.Operation`)."""

    from s3ddb.commit.transaction import Operation as BaseOperation

    Append = Append
    Overwrite = Overwrite
    Restore = Restore
    Delete = Delete
    Update = Update
    Rewrite = Rewrite
    RewriteGroup = RewriteGroup
    Merge = Merge
    Project = Project
    UpdateConfig = UpdateConfig
    CreateIndex = CreateIndex
    DataReplacement = DataReplacement
    DataReplacementGroup = DataReplacementGroup
    Clone = Clone


def check_cleanup_options(error_if_tagged_old_versions: bool, options: dict[str, Any]) -> None:
    """Refuse pylance cleanup options whose meaning s3ddb does not implement.

    Raises:
        UnsupportedOperationError: ``error_if_tagged_old_versions=True``, ``versions``,
            or an unknown option.
    """
    if error_if_tagged_old_versions:
        raise UnsupportedOperationError(
            "error_if_tagged_old_versions=True is not supported: s3ddb always keeps "
            "tagged versions and does not report them"
        )
    unknown = sorted(k for k, v in options.items() if k not in CLEANUP_TUNING and v is not None)
    if unknown:
        raise UnsupportedOperationError(f"cleanup_old_versions option(s) {unknown} not supported")
