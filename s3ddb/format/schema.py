"""Dataset schemas: an Arrow schema plus stable field ids.

Every field, nested ones included, has an id that stays with it for the life of the
dataset. Ids are assigned depth first; a new field gets ``max_field_id + 1``. Data
files record the ids of the fields they hold, so renames and drops never need to
rewrite data.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from s3ddb.errors import SchemaMismatchError, StoredMetadataError
from s3ddb.format._proto import manifest_pb2 as pb

__all__ = ["DatasetSchema", "FieldPath", "conform"]

FieldPath = tuple[str, ...]


def _children(field: pa.Field) -> list[pa.Field]:
    t = field.type
    return [t.field(i) for i in range(t.num_fields)] if t.num_fields else []


def _walk(fields: list[pa.Field], prefix: FieldPath = ()) -> Iterator[tuple[FieldPath, pa.Field]]:
    for f in fields:
        path = (*prefix, f.name)
        _check_name(path)
        yield path, f
        yield from _walk(_children(f), path)


def _check_name(path: FieldPath) -> None:
    """Field names are stored as UTF-8 (Parquet, protobuf): refuse what is not text.

    Raises:
        SchemaMismatchError: the name holds a control character, a lone surrogate, or is
            otherwise unencodable.
    """
    bad = [c for c in path[-1] if ord(c) < 0x20 or ord(c) == 0x7F]
    if bad:
        raise SchemaMismatchError(
            f"column name {'.'.join(path)!r} holds control character(s) {bad!r}; other "
            "readers of the Parquet files could not name it"
        )
    try:
        path[-1].encode("utf-8")
    except UnicodeEncodeError as exc:
        shown = ".".join(path).encode("utf-8", "backslashreplace").decode("ascii", "replace")
        raise SchemaMismatchError(
            f"column name {shown!r} is not valid Unicode text ({exc.reason} at position "
            f"{exc.start}): s3ddb stores names as UTF-8"
        ) from None


@dataclass(frozen=True)
class DatasetSchema:
    """An Arrow schema and the ids of its fields.

    Attributes:
        arrow: the Arrow schema (top-level field order is the dataset's column order).
        ids: (field path, id) for every field, depth first.
    """

    arrow: pa.Schema
    ids: tuple[tuple[FieldPath, int], ...]

    @classmethod
    def assign(cls, arrow: pa.Schema, *, start: int = 0) -> DatasetSchema:
        """Give every field of ``arrow`` a fresh id, from ``start`` up, depth first."""
        ids = tuple((path, start + i) for i, (path, _f) in enumerate(_walk(list(arrow))))
        return cls(arrow, ids)

    @property
    def max_field_id(self) -> int:
        return max((i for _p, i in self.ids), default=-1)

    def field_id(self, *path: str) -> int:
        for p, i in self.ids:
            if p == path:
                return i
        raise KeyError(path)

    def top_level_ids(self, names: list[str] | None = None) -> list[int]:
        """Ids of top-level fields (all, or those in ``names``, in that order)."""
        wanted = names if names is not None else self.arrow.names
        return [self.field_id(name) for name in wanted]

    def names_for_ids(self, ids: list[int]) -> list[str]:
        by_id = {i: p for p, i in self.ids if len(p) == 1}
        return [by_id[i][0] for i in ids if i in by_id]

    @functools.cached_property
    def arrow_with_ids(self) -> pa.Schema:
        """The Arrow schema with each field's id as ``PARQUET:field_id`` metadata,
        nested fields included (struct fields, list elements, map keys and values), as
        data files carry them: readers that resolve columns by id (Iceberg's) need
        them at every level."""
        ids = dict(self.ids)

        def with_id(f: pa.Field, path: FieldPath) -> pa.Field:
            t = f.type
            children = [with_id(c, (*path, c.name)) for c in _children(f)]
            if children and pa.types.is_struct(t):
                t = pa.struct(children)
            elif children and pa.types.is_map(t):
                entries = children[0].type
                t = pa.map_(entries.field(0), entries.field(1), keys_sorted=t.keys_sorted)
            elif children and pa.types.is_large_list(t):
                t = pa.large_list(children[0])
            elif children and pa.types.is_list(t):
                t = pa.list_(children[0])
            metadata = dict(f.metadata or {})
            if path in ids:
                metadata[b"PARQUET:field_id"] = str(ids[path]).encode()
            return pa.field(f.name, t, f.nullable, metadata)

        return pa.schema([with_id(f, (f.name,)) for f in self.arrow], metadata=self.arrow.metadata)

    # --- protobuf --------------------------------------------------------------------

    def to_pb(self) -> pb.Schema:
        """The schema as a protobuf message (a fresh copy: callers may embed it)."""
        out = pb.Schema()
        out.CopyFrom(self._pb)
        return out

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_pb", None)  # a cache; protobuf messages do not pickle
        state.pop("arrow_with_ids", None)  # a cache
        return state

    @functools.cached_property
    def _pb(self) -> pb.Schema:
        # Built once per schema: every manifest a writer encodes carries it, and
        # building it serializes each field's Arrow type.
        out = pb.Schema()
        id_of = dict(self.ids)
        for path, f in _walk(list(self.arrow)):
            field = out.fields.add()
            field.id = id_of[path]
            field.parent_id = id_of[path[:-1]] if len(path) > 1 else -1
            field.name = f.name
            field.logical_type = str(f.type)
            field.nullable = f.nullable
            for k, v in (f.metadata or {}).items():
                field.metadata[k.decode()] = v.decode()
            if len(path) == 1:
                field.arrow_field = pa.schema([f]).serialize().to_pybytes()
        for k, v in (self.arrow.metadata or {}).items():
            out.metadata[k.decode()] = v.decode()
        return out

    @classmethod
    def from_pb(cls, message: pb.Schema) -> DatasetSchema:
        """Decode a stored schema, checked: each field id at most once and >= 0; a
        parent listed before its children; top-level fields with one Arrow field each,
        of the same name; the fields listed (depth first, with their names) exactly
        those of the Arrow types. Two fields sharing an id would read one column's
        values under the other's name.

        Raises:
            StoredMetadataError: any of these fails; the message names the field.
        """
        top: list[pa.Field] = []
        names_by_id: dict[int, FieldPath] = {}
        ids: list[tuple[FieldPath, int]] = []
        for field in message.fields:
            if field.id < 0:
                raise StoredMetadataError(f"schema: field id {field.id} ({field.name!r}) is < 0")
            if field.id in names_by_id:
                first = ".".join(names_by_id[field.id])
                raise StoredMetadataError(
                    f"schema: field id {field.id} is used twice ({first!r} and {field.name!r})"
                )
            if field.parent_id == -1:
                top.append(_arrow_field(field))
                path: FieldPath = (field.name,)
            elif field.parent_id in names_by_id:
                path = (*names_by_id[field.parent_id], field.name)
            else:
                raise StoredMetadataError(
                    f"schema: field {field.name!r} (id {field.id}) has parent id "
                    f"{field.parent_id}, which no earlier field has"
                )
            names_by_id[field.id] = path
            ids.append((path, field.id))
        metadata = dict(message.metadata) or None
        arrow = pa.schema(top, metadata=metadata)
        stored = [p for p, _i in ids]
        try:
            expected = [p for p, _f in _walk(list(arrow))]
        except SchemaMismatchError as exc:
            raise StoredMetadataError(f"schema: {exc}") from None
        if len(set(stored)) != len(stored):
            seen: set[FieldPath] = set()
            twice = next(p for p in stored if p in seen or seen.add(p))  # type: ignore[func-returns-value]
            raise StoredMetadataError(f"schema: field {'.'.join(twice)!r} is listed twice")
        if stored != expected:
            raise StoredMetadataError(f"schema: {_first_difference(stored, expected)}")
        return cls(arrow, tuple(ids))

    # --- evolution -------------------------------------------------------------------

    def with_arrow(self, arrow: pa.Schema) -> DatasetSchema:
        """This schema's ids for fields ``arrow`` shares with it; new fields get new ids."""
        known = dict(self.ids)
        next_id = self.max_field_id + 1
        ids = []
        for path, _f in _walk(list(arrow)):
            if path in known:
                ids.append((path, known[path]))
            else:
                ids.append((path, next_id))
                next_id += 1
        return DatasetSchema(arrow, tuple(ids))

    def extended(self, fields: list[pa.Field], start: int) -> DatasetSchema:
        """This schema with ``fields`` appended as top-level columns, their fields
        given fresh ids from ``start`` up (depth first)."""
        added = tuple((p, start + i) for i, (p, _f) in enumerate(_walk(fields)))
        arrow = pa.schema([*self.arrow, *fields], metadata=self.arrow.metadata)
        return DatasetSchema(arrow, self.ids + added)

    def with_schema_metadata(self, metadata: dict[str, str]) -> DatasetSchema:
        """This schema with its (schema-level) metadata replaced."""
        return DatasetSchema(self.arrow.with_metadata(metadata or None), self.ids)

    def with_field_metadata(self, field_id: int, metadata: dict[str, str]) -> DatasetSchema:
        """This schema with the metadata of top-level field ``field_id`` replaced.

        Raises:
            KeyError: no top-level field has that id.
        """
        names = {i: p[0] for p, i in self.ids if len(p) == 1}
        index = self.arrow.get_field_index(names[field_id])
        changed = self.arrow.field(index).with_metadata(metadata or None)
        if not metadata:
            changed = changed.remove_metadata()
        return DatasetSchema(self.arrow.set(index, changed), self.ids)


def _arrow_field(field: pb.Field) -> pa.Field:
    """The Arrow field of a stored top-level field.

    Its bytes are untrusted: pyarrow refuses garbled IPC bytes with ``ArrowInvalid``
    or, for a bad flatbuffer or continuation token, a bare ``OSError`` (no file is
    read here, so an ``OSError`` can only mean bad bytes).

    Raises:
        StoredMetadataError: it is missing, does not decode, is not one Arrow field,
            or is of another name; the message names the field and its id (the
            manifest's reader adds the manifest and version).
    """
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(field.arrow_field))
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise StoredMetadataError(
            f"schema: field {field.name!r} (id {field.id}) has no readable Arrow field: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    if len(schema) != 1 or schema.field(0).name != field.name:
        raise StoredMetadataError(
            f"schema: field {field.name!r} (id {field.id}) has the Arrow field(s) "
            f"{schema.names[:3]!r}"
        )
    return schema.field(0)


def _first_difference(stored: list[FieldPath], expected: list[FieldPath]) -> str:
    """Where the fields listed differ from the Arrow types' fields."""
    for a, b in zip(stored, expected, strict=False):
        if a != b:
            return f"field {'.'.join(a)!r} is listed where the Arrow types have {'.'.join(b)!r}"
    if len(stored) > len(expected):
        shown = ".".join(stored[len(expected)])
        return f"field {shown!r} is not in the Arrow types, or listed twice"
    return f"field {'.'.join(expected[len(stored)])!r} of the Arrow types is not listed"


def _family(t: pa.DataType) -> str | None:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    return None


def _same_family(a: pa.DataType, b: pa.DataType) -> bool:
    family = _family(a)
    return family is not None and family == _family(b)


def conform(table: pa.Table, target: pa.Schema, *, where: str) -> pa.Table:
    """``table`` with ``target``'s column order and exact types.

    Allowed differences: column order, string vs large_string (and binary likewise),
    nullable data for a non-nullable field when it holds no nulls, field metadata.

    Raises:
        SchemaMismatchError: missing or extra columns, other type differences, or
            nulls in a non-nullable field; the message lists every difference and
            names ``where`` (the dataset URI).
    """
    problems: list[str] = []
    names = set(table.column_names)
    missing = [n for n in target.names if n not in names]
    extra = [n for n in table.column_names if n not in set(target.names)]
    if missing:
        problems.append(f"missing columns {missing}")
    if extra:
        problems.append(f"unexpected columns {extra}")
    columns = []
    if not problems:
        for field in target:
            column = table.column(field.name)
            if not column.type.equals(field.type):
                if _same_family(column.type, field.type):
                    column = column.cast(field.type)
                else:
                    problems.append(
                        f"column {field.name!r} is {column.type}, dataset has {field.type}"
                    )
                    continue
            if not field.nullable and column.null_count:
                problems.append(f"column {field.name!r} has nulls but is not nullable")
                continue
            columns.append(column)
    if problems:
        raise SchemaMismatchError(
            f"data does not match the schema of {where}: "
            + "; ".join(problems)
            + f"\n  dataset schema: {_schema_line(target)}"
            + f"\n  data schema:    {_schema_line(table.schema)}"
        )
    return pa.Table.from_arrays(columns, schema=target)


def _schema_line(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema)
