"""Operations that add or replace a dataset's data as a whole: Append, Overwrite
(which also creates datasets) and Restore."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from s3ddb.errors import InvalidInputError, UnsupportedOperationError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.format.fragment_metadata import FragmentMetadata, data_file_paths
from s3ddb.format.limits import MAX_VERSION, check_range
from s3ddb.format.schema import DatasetSchema
from s3ddb.operations.operation import Changes, Operation

__all__ = ["Append", "Overwrite", "Restore"]


@dataclass(frozen=True)
class Append(Operation):
    """Add new fragments. Rebases over any concurrent commit that keeps the schema."""

    fragments: tuple[FragmentMetadata, ...]
    kind: ClassVar[str] = "Append"
    pb_field: ClassVar[str] = "append"
    changes: ClassVar[Changes] = Changes.APPENDS
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "fragments", tuple(self.fragments))
        if not self.fragments:
            raise InvalidInputError("Append needs at least one fragment")

    def to_pb(self) -> tpb.Append:
        return tpb.Append(fragments=[f.to_pb() for f in self.fragments])

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Append:
        return cls(tuple(FragmentMetadata.from_pb(f) for f in message.append.fragments))

    def written_paths(self) -> tuple[str, ...]:
        return data_file_paths(self.fragments)


@dataclass(frozen=True, init=False)
class Overwrite(Operation):
    """Replace the whole dataset (fragments and schema); also creates datasets."""

    fragments: tuple[FragmentMetadata, ...]
    schema: DatasetSchema
    config_upsert_values: dict[str, str]
    kind: ClassVar[str] = "Overwrite"
    pb_field: ClassVar[str] = "overwrite"
    changes: ClassVar[Changes] = Changes.APPENDS
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __init__(
        self,
        fragments: Any = (),
        schema: DatasetSchema | pa.Schema | None = None,
        config_upsert_values: dict[str, str] | None = None,
        *,
        new_schema: DatasetSchema | pa.Schema | None = None,
        initial_bases: Any = None,
    ) -> None:
        """``Overwrite(fragments, schema)``; ``new_schema=`` is pylance's name for
        ``schema`` (pylance's positional order is
        :attr:`s3ddb.LanceOperation.Overwrite`'s). ``schema`` is a DatasetSchema or a
        pyarrow Schema (field ids assigned as for a new dataset, as
        :func:`s3ddb.fragment.write_fragments` assigns them to the same schema).

        Raises:
            InvalidInputError: no schema, a schema given as ``fragments``, both
                ``schema`` and ``new_schema``, or a data file with fields not in the
                schema.
            UnsupportedOperationError: pylance's ``initial_bases``.
        """
        if isinstance(fragments, pa.Schema | DatasetSchema):
            # A plain error, not a silent swap: one order per constructor.
            raise InvalidInputError(
                "Overwrite(fragments, schema) got a schema as fragments; pylance's order "
                "is LanceOperation.Overwrite(new_schema, fragments)"
            )
        if new_schema is not None:
            if schema is not None:
                raise InvalidInputError("Overwrite: give schema or new_schema, not both")
            schema = new_schema
        if isinstance(schema, pa.Schema):
            schema = DatasetSchema.assign(schema)
        if initial_bases:
            raise UnsupportedOperationError("Overwrite(initial_bases=...) is not supported")
        if not isinstance(schema, DatasetSchema):
            raise InvalidInputError(
                "Overwrite needs a schema (a pyarrow Schema or DatasetSchema), got "
                f"{type(schema).__name__}"
            )
        fragments = tuple(fragments)
        known = {i for _p, i in schema.ids}
        for fragment in fragments:
            for data_file in fragment.files:
                unknown = {i for i in data_file.fields if i >= 0} - known
                if unknown:
                    raise InvalidInputError(
                        f"data file {data_file.path} holds field ids {sorted(unknown)} "
                        "that are not in the schema"
                    )
        object.__setattr__(self, "fragments", fragments)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "config_upsert_values", dict(config_upsert_values or {}))

    def to_pb(self) -> tpb.Overwrite:
        return tpb.Overwrite(
            fragments=[f.to_pb() for f in self.fragments],
            schema=self.schema.to_pb(),
            config_upsert_values=self.config_upsert_values,
        )

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Overwrite:
        body = message.overwrite
        return cls(
            tuple(FragmentMetadata.from_pb(f) for f in body.fragments),
            DatasetSchema.from_pb(body.schema),
            dict(body.config_upsert_values),
        )

    def written_paths(self) -> tuple[str, ...]:
        return data_file_paths(self.fragments)


@dataclass(frozen=True)
class Restore(Operation):
    """Make an older version the latest (its fragments and schema)."""

    version: int
    kind: ClassVar[str] = "Restore"
    pb_field: ClassVar[str] = "restore"
    changes: ClassVar[Changes] = Changes.ROWS
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.version < 1:
            raise InvalidInputError(f"Restore.version must be >= 1, got {self.version}")

    def to_pb(self) -> tpb.Restore:
        return tpb.Restore(version=self.version)

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> Restore:
        version = message.restore.version
        return cls(check_range(version, 1, MAX_VERSION, "restore version", "restore"))
