"""Names pylance code uses, so that switching is a change of import.

``import s3ddb as lance`` then ``lance.LanceOperation.Overwrite(schema, fragments)``,
``lance.LanceDataset.commit(uri, op, read_version=...)``; docs/pylance.md lists every
pylance call and whether s3ddb supports it, differs (and why), or not.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from s3ddb.errors import UnsupportedOperationError
from s3ddb.format.schema import DatasetSchema
from s3ddb.operations import (
    Append,
    Clone,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    Restore,
    Rewrite,
    RewriteGroup,
    Update,
    UpdateConfig,
)

__all__ = ["CLEANUP_TUNING", "LanceOperation", "check_cleanup_options", "pylance_overwrite"]

#: cleanup_old_versions options of pylance that only tune how files are deleted.
CLEANUP_TUNING = frozenset({"delete_rate_limit", "delete_concurrency"})


def pylance_overwrite(
    new_schema: DatasetSchema | pa.Schema,
    fragments: Any,
    initial_bases: Any = None,
) -> Overwrite:
    """``Overwrite`` with pylance's parameters, in pylance's order
    (``LanceOperation.Overwrite(new_schema, fragments)``).

    Raises:
        InvalidInputError, UnsupportedOperationError: as :class:`s3ddb.Overwrite`.
    """
    return Overwrite(fragments, new_schema, initial_bases=initial_bases)


class LanceOperation:
    """pylance's ``LanceOperation`` namespace: the s3ddb operations of the same names
    (``BaseOperation`` is :class:`s3ddb.operations.Operation`; ``Overwrite`` builds an
    :class:`s3ddb.Overwrite` from pylance's argument order)."""

    BaseOperation = Operation
    Append = Append
    Overwrite = staticmethod(pylance_overwrite)
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
