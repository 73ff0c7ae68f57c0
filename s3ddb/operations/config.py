"""UpdateConfig: change configuration and metadata without touching data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from s3ddb.errors import InvalidInputError
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.operations.operation import Changes, Operation

__all__ = ["MapUpdate", "UpdateConfig"]


@dataclass(frozen=True)
class MapUpdate:
    """A change of a string map: ``replace`` swaps the whole map for ``upsert``;
    otherwise ``delete`` keys are removed and ``upsert`` keys set."""

    upsert: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    replace: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "upsert", dict(self.upsert))
        object.__setattr__(self, "delete", tuple(self.delete))
        for k, v in self.upsert.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidInputError(f"metadata keys and values must be strings: {k!r}={v!r}")

    def apply(self, before: dict[str, str]) -> dict[str, str]:
        out = {} if self.replace else {k: v for k, v in before.items() if k not in self.delete}
        out.update(self.upsert)
        return out

    def to_pb(self) -> tpb.UpdateMap:
        return tpb.UpdateMap(
            upsert=self.upsert, delete_keys=list(self.delete), replace=self.replace
        )

    @classmethod
    def from_pb(cls, message: tpb.UpdateMap) -> MapUpdate:
        return cls(dict(message.upsert), tuple(message.delete_keys), message.replace)


@dataclass(frozen=True)
class UpdateConfig(Operation):
    """Upsert and delete keys of the dataset config and table metadata, and change the
    schema's metadata and top-level fields' metadata (by field id)."""

    config_upsert: dict[str, str] = field(default_factory=dict)
    config_delete: tuple[str, ...] = ()
    metadata_upsert: dict[str, str] = field(default_factory=dict)
    metadata_delete: tuple[str, ...] = ()
    schema_metadata: MapUpdate | None = None
    field_metadata: dict[int, MapUpdate] = field(default_factory=dict)
    kind: ClassVar[str] = "UpdateConfig"
    pb_field: ClassVar[str] = "update_config"
    changes: ClassVar[Changes] = Changes.NOTHING
    committable: ClassVar[bool] = True
    in_lance_operation: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for mapping in (self.config_upsert, self.metadata_upsert):
            for k, v in mapping.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise InvalidInputError(f"config keys and values must be strings: {k!r}={v!r}")
        for updates in (self.schema_metadata, *self.field_metadata.values()):
            if updates is not None and not isinstance(updates, MapUpdate):
                raise InvalidInputError(
                    f"schema and field metadata changes must be MapUpdates: {updates!r}"
                )

    @property
    def changes_schema(self) -> bool:
        """Whether this changes the schema's or a field's metadata."""
        return self.schema_metadata is not None or bool(self.field_metadata)

    def to_pb(self) -> tpb.UpdateConfig:
        message = tpb.UpdateConfig(
            config=tpb.UpdateMap(upsert=self.config_upsert, delete_keys=list(self.config_delete)),
            table_metadata=tpb.UpdateMap(
                upsert=self.metadata_upsert, delete_keys=list(self.metadata_delete)
            ),
        )
        if self.schema_metadata is not None:
            message.schema_metadata.CopyFrom(self.schema_metadata.to_pb())
        for field_id, update in self.field_metadata.items():
            message.field_metadata[field_id].CopyFrom(update.to_pb())
        return message

    @classmethod
    def from_transaction_pb(cls, message: tpb.Transaction) -> UpdateConfig:
        body = message.update_config
        return cls(
            dict(body.config.upsert),
            tuple(body.config.delete_keys),
            dict(body.table_metadata.upsert),
            tuple(body.table_metadata.delete_keys),
            MapUpdate.from_pb(body.schema_metadata) if body.HasField("schema_metadata") else None,
            {i: MapUpdate.from_pb(u) for i, u in body.field_metadata.items()},
        )
