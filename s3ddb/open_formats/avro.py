"""A small, deterministic Avro object container file encoder and decoder.

Iceberg's manifests and manifest lists are Avro container files. s3ddb writes them
without a dependency: :func:`encode_container` turns an Avro schema (a Python dict, as
its JSON) and records (Python values) into the bytes of a file, :func:`decode_container`
reads such a file back.

Supported schemas: records, ``null``, ``boolean``, ``int``, ``long`` (zigzag varints),
``float``, ``double``, ``bytes``, ``string``, ``fixed``, arrays, maps, unions (``null``
included) and references to named types (records and fixed) defined earlier in the
schema. Extra attributes (``field-id``, ``logicalType``...) are kept in the written
schema and otherwise ignored. Enums are not supported.

Python values: a record is a dict keyed by field name; a union's value is the value of
its branch (the encoder picks the first branch that accepts it, so ``None`` selects
``null``); arrays are lists, maps dicts with ``str`` keys, ``bytes``/``fixed`` are
``bytes``.

Files are deterministic: no compression (codec ``null``), at most one data block (none
when there are no records), the file metadata in a fixed order (``avro.schema``,
``avro.codec``, then the caller's entries in the caller's order) and a sync marker
derived from the content (the first 16 bytes of the SHA-256 of the schema and the
encoded records), so the same input always gives the same bytes.

A schema is checked and compiled once (:class:`AvroSchema`; :func:`encode_container`
keeps the dicts it was given compiled, by identity, while their JSON stays the same):
names are resolved and each union's branch tests fixed ahead of time, so encoding a
value runs only the checks of its own type. Records encode as the concatenation of
their fields, so a caller may join parts it encoded earlier
(:meth:`AvroSchema.container`).

The decoder treats its input as untrusted, in bounded time and memory: every declared
count (of records, array and map items, metadata entries) is checked against the bytes
left, at the fewest bytes one item of its type takes, and against a budget of decoded
values before any item is decoded, so items of no bytes (null, an empty record) cannot
stand for millions of objects; records are capped too, and so is the nesting depth; a
caller may require the writer's schema to be its own (:func:`decode_container`'s
``schema``) or take the records one at a time (:func:`stream_container`). Anything
truncated, malformed or over a bound raises :class:`~s3ddb.errors.StoredMetadataError`
naming the file.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from s3ddb.errors import StoredMetadataError

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "DEFAULT_MAX_VALUES",
    "MAGIC",
    "AvroFile",
    "AvroSchema",
    "decode_container",
    "encode_container",
    "stream_container",
]

#: The first four bytes of every Avro object container file.
MAGIC = b"Obj\x01"

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
# Nested values deeper than this are refused (a recursive schema could otherwise
# recurse as deep as the input is long and overflow Python's stack).
_MAX_DEPTH = 64
# Bound on the decoded schema JSON (it is parsed before anything is checked).
_MAX_SCHEMA_BYTES = 1 << 20
_SYNC_SIZE = 16


@dataclass(frozen=True)
class AvroFile:
    """A decoded container file.

    Attributes:
        schema: the writer's schema (parsed ``avro.schema``).
        metadata: every file metadata entry, ``avro.*`` ones included.
        records: the records, in file order.
    """

    schema: Any
    metadata: dict[str, bytes]
    records: list[Any]


# --- schemas -------------------------------------------------------------------------


class _SchemaError(Exception):
    """A schema is malformed (turned into ValueError or StoredMetadataError)."""


def _collect_names(schema: Any, names: dict[str, Any], depth: int = 0) -> None:
    """Record every named type (record, fixed) of ``schema`` in ``names``, checking
    the schema's shape on the way."""
    if depth > _MAX_DEPTH:
        raise _SchemaError("schema nests too deeply")
    if isinstance(schema, str):
        if schema not in _PRIMITIVES and schema not in names:
            raise _SchemaError(f"unknown type {schema!r}")
        return
    if isinstance(schema, list):
        if not schema:
            raise _SchemaError("empty union")
        for branch in schema:
            if isinstance(branch, list):
                raise _SchemaError("a union directly inside a union")
            _collect_names(branch, names, depth + 1)
        return
    if not isinstance(schema, dict):
        raise _SchemaError(f"a schema is a name, a list or an object, not {type(schema).__name__}")
    kind = schema.get("type")
    if kind in ("record", "error", "fixed"):
        name = schema.get("name")
        if not isinstance(name, str) or not name:
            raise _SchemaError(f"a {kind} without a name")
        if name in names or name in _PRIMITIVES:
            raise _SchemaError(f"type name {name!r} defined twice")
        names[name] = schema
        if kind == "fixed":
            size = schema.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise _SchemaError(f"fixed {name!r} has no valid size")
            return
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise _SchemaError(f"record {name!r} has no field list")
        seen: set[str] = set()
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise _SchemaError(f"record {name!r} has a field without a name")
            if f["name"] in seen:
                raise _SchemaError(f"record {name!r} has field {f['name']!r} twice")
            seen.add(f["name"])
            if "type" not in f:
                raise _SchemaError(f"field {f['name']!r} of {name!r} has no type")
            _collect_names(f["type"], names, depth + 1)
        return
    if kind == "array":
        if "items" not in schema:
            raise _SchemaError("an array without items")
        _collect_names(schema["items"], names, depth + 1)
        return
    if kind == "map":
        if "values" not in schema:
            raise _SchemaError("a map without values")
        _collect_names(schema["values"], names, depth + 1)
        return
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return
    if isinstance(kind, (dict, list)):
        _collect_names(kind, names, depth + 1)
        return
    raise _SchemaError(f"unsupported type {kind!r}")


def _resolve(schema: Any, names: Mapping[str, Any]) -> Any:
    """``schema`` with a top-level name reference or ``{"type": <primitive>}``
    replaced by what it stands for."""
    while True:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return schema
            schema = names[schema]
            continue
        if isinstance(schema, dict) and not isinstance(schema.get("type"), str):
            schema = schema["type"]
            continue
        if isinstance(schema, dict) and schema["type"] in _PRIMITIVES:
            return schema["type"]
        return schema


# --- encoding ------------------------------------------------------------------------

_LONG_MASK = 0xFFFFFFFFFFFFFFFF
_PACK_FLOAT = struct.Struct("<f").pack
_PACK_DOUBLE = struct.Struct("<d").pack


def _varint(n: int, out: bytearray) -> None:
    z = ((n << 1) ^ (n >> 63)) & _LONG_MASK  # zigzag, as 64 bits
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    _varint(n, out)
    return bytes(out)


def _encode_bytes(data: bytes, out: bytearray) -> None:
    _varint(len(data), out)
    out += data


class _Unfit(Exception):
    """A value does not fit its schema. ``path`` collects where, innermost segment
    first, as the error travels up (nothing is formatted while values fit)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []

    def error(self, where: str) -> ValueError:
        return ValueError(f"{where}{''.join(reversed(self.path))}: {self.message}")


#: Writes one value (checking it fits) to the bytearray; raises _Unfit.
_Writer = Callable[[Any, bytearray], None]
#: Whether a value can be written as a union branch (the branch the encoder picks).
_Accepts = Callable[[Any], bool]


def _is_null(value: Any) -> bool:
    return value is None


def _is_boolean(value: Any) -> bool:
    return isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def _is_number(value: Any) -> bool:
    t = type(value)
    return (
        t is float or t is int or (isinstance(value, (int, float)) and not isinstance(value, bool))
    )


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _is_bytes(value: Any) -> bool:
    return isinstance(value, (bytes, bytearray))


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


_PRIMITIVE_ACCEPTS: dict[str, _Accepts] = {
    "null": _is_null,
    "boolean": _is_boolean,
    "int": _is_integer,
    "long": _is_integer,
    "float": _is_number,
    "double": _is_number,
    "bytes": _is_bytes,
    "string": _is_string,
}


def _unfit(value: Any, schema: Any) -> _Unfit:
    return _Unfit(f"{value!r} is not a valid {schema!r}")


def _write_null(value: Any, out: bytearray) -> None:
    if value is not None:
        raise _unfit(value, "null")


def _write_boolean(value: Any, out: bytearray) -> None:
    if not isinstance(value, bool):
        raise _unfit(value, "boolean")
    out.append(1 if value else 0)


def _integer_writer(kind: str, low: int, high: int) -> _Writer:
    def write(value: Any, out: bytearray) -> None:
        if type(value) is not int and (not isinstance(value, int) or isinstance(value, bool)):
            raise _unfit(value, kind)
        if not low <= value <= high:
            raise _Unfit(f"{value} is out of range for {kind}")
        z = ((value << 1) ^ (value >> 63)) & _LONG_MASK
        if z <= 0x7F:
            out.append(z)
            return
        while z > 0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)

    return write


def _float_writer(kind: str, pack: Callable[[Any], bytes]) -> _Writer:
    def write(value: Any, out: bytearray) -> None:
        if not _is_number(value):
            raise _unfit(value, kind)
        out += pack(value)

    return write


def _write_string(value: Any, out: bytearray) -> None:
    if not isinstance(value, str):
        raise _unfit(value, "string")
    data = value.encode("utf-8")
    _varint(len(data), out)
    out += data


def _write_bytes(value: Any, out: bytearray) -> None:
    if not isinstance(value, (bytes, bytearray)):
        raise _unfit(value, "bytes")
    _varint(len(value), out)
    out += value


_PRIMITIVE_WRITERS: dict[str, _Writer] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _integer_writer("int", *_INT_RANGE),
    "long": _integer_writer("long", *_LONG_RANGE),
    "float": _float_writer("float", _PACK_FLOAT),
    "double": _float_writer("double", _PACK_DOUBLE),
    "bytes": _write_bytes,
    "string": _write_string,
}


class _Compiler:
    """Turns a checked schema into writers: every name and ``{"type": ...}`` wrapper
    resolved once, each union's branch tests fixed, so writing a value only runs the
    checks its own type needs. A named type is compiled once (references share it,
    a recursive record reaches itself through its cell)."""

    def __init__(self, names: Mapping[str, Any]) -> None:
        self.names = names
        self.named: dict[str, list[_Writer]] = {}

    def accepts(self, schema: Any) -> _Accepts:
        schema = _resolve(schema, self.names)
        if isinstance(schema, str):
            return _PRIMITIVE_ACCEPTS[schema]
        kind = schema["type"]
        if kind == "fixed":
            size = schema["size"]
            return lambda value: isinstance(value, (bytes, bytearray)) and len(value) == size
        if kind == "array":
            return _is_sequence
        return _is_mapping  # map, record

    def writer(self, schema: Any) -> _Writer:
        schema = _resolve(schema, self.names)
        if isinstance(schema, str):
            return _PRIMITIVE_WRITERS[schema]
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        if kind in ("record", "error", "fixed"):
            name = schema["name"]
            cell = self.named.get(name)
            if cell is None:
                cell = self.named[name] = []
                cell.append(self._fixed(schema) if kind == "fixed" else self._record(schema))
            if cell:
                return cell[0]
            return lambda value, out: cell[0](value, out)  # a record inside itself
        if kind == "array":
            return self._array(schema)
        return self._map(schema)

    def _union(self, schema: list[Any]) -> _Writer:
        branches = [
            (self.accepts(branch), _varint_bytes(index), self.writer(branch))
            for index, branch in enumerate(schema)
        ]

        def fail(value: Any) -> _Unfit:
            return _Unfit(f"no branch of union {schema!r} accepts {value!r}")

        if len(branches) == 2 and _resolve(schema[0], self.names) == "null":
            (_a, _t, _w), (accepts, tag, write_value) = branches

            def write_optional(value: Any, out: bytearray) -> None:
                if value is None:
                    out.append(0)
                elif accepts(value):
                    out += tag
                    write_value(value, out)
                else:
                    raise fail(value)

            return write_optional

        def write(value: Any, out: bytearray) -> None:
            for accepts, tag, write_branch in branches:
                if accepts(value):
                    out += tag
                    write_branch(value, out)
                    return
            raise fail(value)

        return write

    def _fixed(self, schema: Mapping[str, Any]) -> _Writer:
        size = schema["size"]

        def write(value: Any, out: bytearray) -> None:
            if not isinstance(value, (bytes, bytearray)) or len(value) != size:
                raise _unfit(value, schema)
            out += value

        return write

    def _array(self, schema: Mapping[str, Any]) -> _Writer:
        write_item = self.writer(schema["items"])

        def write(value: Any, out: bytearray) -> None:
            if not isinstance(value, (list, tuple)):
                raise _unfit(value, schema)
            if value:
                _varint(len(value), out)
                for i, item in enumerate(value):
                    try:
                        write_item(item, out)
                    except _Unfit as exc:
                        exc.path.append(f"[{i}]")
                        raise
            out.append(0)

        return write

    def _map(self, schema: Mapping[str, Any]) -> _Writer:
        write_value = self.writer(schema["values"])

        def write(value: Any, out: bytearray) -> None:
            if not _is_mapping(value):
                raise _unfit(value, schema)
            if value:
                _varint(len(value), out)
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise _Unfit(f"map key {key!r} is not a string")
                    _encode_bytes(key.encode("utf-8"), out)
                    try:
                        write_value(item, out)
                    except _Unfit as exc:
                        exc.path.append(f"[{key!r}]")
                        raise
            out.append(0)

        return write

    def _record(self, schema: Mapping[str, Any]) -> _Writer:
        record_name = schema["name"]
        # Compiled after the cell exists but before it is filled: a field that refers
        # to this record gets the indirect writer.
        fields: list[tuple[str, _Writer]] = []

        def write(value: Any, out: bytearray) -> None:
            if type(value) is not dict and not isinstance(value, Mapping):
                raise _unfit(value, schema)
            for name, write_field in fields:
                if name not in value:
                    raise _Unfit(f"record {record_name!r} lacks field {name!r}")
                try:
                    write_field(value[name], out)
                except _Unfit as exc:
                    exc.path.append(f".{name}")
                    raise

        fields.extend((f["name"], self.writer(f["type"])) for f in schema["fields"])
        return write


class AvroSchema:
    """An Avro schema checked and compiled once, to encode many values and files.

    The schema (a Python dict, as its JSON) must not change afterwards: its JSON and
    its writers are taken when it is compiled.

    Raises:
        ValueError: the schema is malformed or unsupported.
    """

    __slots__ = ("_write", "json", "schema")

    def __init__(self, schema: Any) -> None:
        self._init(schema, _checked_names(schema))

    @classmethod
    def _of(cls, schema: Any, names: Mapping[str, Any]) -> AvroSchema:
        self = cls.__new__(cls)
        self._init(schema, names)
        return self

    def _init(self, schema: Any, names: Mapping[str, Any]) -> None:
        self.schema = schema
        #: The schema as the file header writes it (``avro.schema``).
        self.json = json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self._write = _Compiler(names).writer(schema)

    def encode(self, value: Any, where: str = "value") -> bytes:
        """The Avro binary encoding of ``value`` (records encode as the concatenation
        of their fields' encodings, so parts can be joined).

        Raises:
            ValueError: ``value`` does not match the schema (the message starts with
                ``where`` and the path inside it).
        """
        out = bytearray()
        try:
            self._write(value, out)
        except _Unfit as exc:
            raise exc.error(where) from None
        return bytes(out)

    def container(
        self, encoded: Sequence[bytes], metadata: Sequence[tuple[str, bytes]] = ()
    ) -> bytes:
        """The container file of records already encoded with this schema
        (:meth:`encode`), the same bytes :func:`encode_container` writes for them."""
        _check_metadata(metadata)
        return self._file(b"".join(encoded), len(encoded), metadata)

    def _file(self, body: bytes, count: int, metadata: Sequence[tuple[str, bytes]]) -> bytes:
        schema_json = self.json
        sync = hashlib.sha256(schema_json + b"\x00" + body).digest()[:_SYNC_SIZE]
        out = bytearray(MAGIC)
        entries = [("avro.schema", schema_json), ("avro.codec", b"null"), *metadata]
        _varint(len(entries), out)
        for key, value in entries:
            _encode_bytes(key.encode("utf-8"), out)
            _encode_bytes(bytes(value), out)
        out.append(0)
        out += sync
        if count:
            _varint(count, out)
            _varint(len(body), out)
            out += body
            out += sync
        return bytes(out)


def _checked_names(schema: Any) -> dict[str, Any]:
    names: dict[str, Any] = {}
    try:
        _collect_names(schema, names)
    except _SchemaError as exc:
        raise ValueError(f"Avro schema: {exc}") from None
    return names


def _check_metadata(metadata: Sequence[tuple[str, bytes]]) -> None:
    keys = [key for key, _v in metadata]
    if len(set(keys)) != len(keys) or any(k.startswith("avro.") for k in keys):
        raise ValueError(f"Avro metadata keys must be distinct and not avro.*: {keys!r}")


# Schemas compiled lately, by identity; an entry keeps its schema object alive (so its
# id is not reused) and its JSON (so a schema changed in place is compiled again).
_COMPILED: dict[int, AvroSchema] = {}
_COMPILED_MAX = 64
_COMPILED_LOCK = threading.Lock()


def _cached(schema: Any) -> AvroSchema | None:
    compiled = _COMPILED.get(id(schema))
    if compiled is None or compiled.schema is not schema:
        return None
    try:
        same = (
            json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode() == compiled.json
        )
    except (TypeError, ValueError):
        same = False
    return compiled if same else None


def _remember(compiled: AvroSchema) -> None:
    with _COMPILED_LOCK:
        _COMPILED.pop(id(compiled.schema), None)
        _COMPILED[id(compiled.schema)] = compiled
        while len(_COMPILED) > _COMPILED_MAX:
            del _COMPILED[next(iter(_COMPILED))]


def encode_container(
    schema: Any, records: Sequence[Any], metadata: Sequence[tuple[str, bytes]] = ()
) -> bytes:
    """The bytes of an Avro container file holding ``records`` written as ``schema``.

    ``metadata`` entries follow ``avro.schema`` and ``avro.codec`` in the given order.
    The schema JSON keeps the dicts' key order, so a caller that builds its schema the
    same way gets the same bytes. ``schema`` is a dict or an :class:`AvroSchema`; a dict
    is compiled once and reused while it stays the same object with the same JSON.

    Raises:
        ValueError: the schema is malformed or unsupported, a record does not match it
            (a missing field, a value of the wrong type, an int out of range), or
            ``metadata`` names an ``avro.`` key or a key twice.
    """
    if isinstance(schema, AvroSchema):
        compiled: AvroSchema | None = schema
        names = None
    else:
        compiled = _cached(schema)
        names = _checked_names(schema) if compiled is None else None
    _check_metadata(metadata)
    if compiled is None:
        assert names is not None
        compiled = AvroSchema._of(schema, names)
        _remember(compiled)
    write = compiled._write
    body = bytearray()
    for i, record in enumerate(records):
        try:
            write(record, body)
        except _Unfit as exc:
            raise exc.error(f"record {i}") from None
    return compiled._file(bytes(body), len(records), metadata)


# --- decoding ------------------------------------------------------------------------

#: How many records :func:`decode_container` decodes at most, unless told otherwise.
DEFAULT_MAX_RECORDS = 1 << 20
#: How many values :func:`decode_container` decodes at most, unless told otherwise:
#: every value counts (a record, each of its fields, each item of an array or map,
#: each metadata entry), so this bounds the Python objects a file turns into (about
#: 100 bytes each at most, beside the bytes of strings, which the file holds).
DEFAULT_MAX_VALUES = 1 << 21

# The fewest bytes a value of each primitive type takes.
_PRIMITIVE_MIN_BYTES = {
    "null": 0,
    "boolean": 1,
    "int": 1,
    "long": 1,
    "float": 4,
    "double": 8,
    "bytes": 1,
    "string": 1,
}


class _MinBytes:
    """The fewest bytes a value of a (checked) schema takes, per schema node: a
    declared count of items is checked against the bytes left with it before any is
    decoded. Zero-byte values (null, an empty record) are bounded by the value
    budget alone."""

    def __init__(self, names: Mapping[str, Any]) -> None:
        self.names = names
        self.memo: dict[int, int] = {}
        self.active: set[int] = set()

    def of(self, schema: Any, depth: int = 0) -> int:
        schema = _resolve(schema, self.names)
        if isinstance(schema, str):
            return _PRIMITIVE_MIN_BYTES[schema]
        key = id(schema)
        if key in self.memo:
            return self.memo[key]
        if key in self.active or depth > _MAX_DEPTH:
            # A record inside itself, or types referring to types deeper than values
            # may nest: take no bytes for granted (the value budget still bounds).
            return 0
        self.active.add(key)
        try:
            if isinstance(schema, list):
                # The branch index, then the smallest branch.
                size = 1 + min(self.of(branch, depth + 1) for branch in schema)
            elif schema["type"] == "fixed":
                size = int(schema["size"])
            elif schema["type"] in ("array", "map"):
                size = 1  # the count that ends it
            else:
                size = sum(self.of(f["type"], depth + 1) for f in schema["fields"])
        finally:
            self.active.discard(key)
        self.memo[key] = size
        return size


class _Reader:
    """A cursor over untrusted bytes; every failure raises StoredMetadataError.

    ``values`` is how many more values may be decoded: each decoded value spends
    one, and a declared count is checked against it (and against the bytes left)
    before any of its items is decoded."""

    def __init__(self, data: bytes, what: str, values: int) -> None:
        self.data = data
        self.pos = 0
        self.what = what
        self.values = values

    def fail(self, message: str) -> StoredMetadataError:
        return StoredMetadataError(f"{self.what}: {message} (at byte {self.pos})")

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def spend(self) -> None:
        if self.values <= 0:
            raise self.fail("more values than s3ddb reads from one file")
        self.values -= 1

    def take(self, n: int) -> bytes:
        if n < 0 or n > self.left:
            raise self.fail(f"needs {n} bytes, {self.left} left (truncated or corrupt)")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def long(self) -> int:
        z = 0
        for shift in range(0, 70, 7):
            if self.pos >= len(self.data):
                raise self.fail("truncated varint")
            b = self.data[self.pos]
            self.pos += 1
            z |= (b & 0x7F) << shift
            if not b & 0x80:
                if z >> 64:
                    raise self.fail("varint longer than 64 bits")
                return (z >> 1) ^ -(z & 1)
        raise self.fail("varint longer than 10 bytes")

    def count(self, what: str, min_bytes: int) -> int:
        """A block's count of items, each at least ``min_bytes`` long, checked before
        any item is decoded."""
        n = self.long()
        if n < 0:
            # A negative block count is followed by the block's size in bytes.
            n = -n
            size = self.long()
            if size < 0 or size > self.left:
                raise self.fail(f"{what} block of {size} bytes, {self.left} left")
        if n > self.values or n * min_bytes > self.left:
            raise self.fail(
                f"{what} block of {n} items is more than the {self.left} bytes left hold "
                "(or than s3ddb reads from one file)"
            )
        return n

    def blob(self) -> bytes:
        n = self.long()
        if n < 0:
            raise self.fail(f"negative length {n}")
        return self.take(n)

    def text(self) -> str:
        raw = self.blob()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string is not UTF-8") from None


def _decode(schema: Any, sizes: _MinBytes, r: _Reader, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise r.fail("values nest too deeply")
    r.spend()
    schema = _resolve(schema, sizes.names)
    if isinstance(schema, list):
        index = r.long()
        if not 0 <= index < len(schema):
            raise r.fail(f"union branch {index} of {len(schema)}")
        return _decode(schema[index], sizes, r, depth + 1)
    if isinstance(schema, str):
        if schema == "null":
            return None
        if schema == "boolean":
            b = r.take(1)[0]
            if b > 1:
                raise r.fail(f"boolean byte {b}")
            return b == 1
        if schema in ("int", "long"):
            n = r.long()
            if schema == "int" and not _INT_RANGE[0] <= n <= _INT_RANGE[1]:
                raise r.fail(f"int {n} out of range")
            return n
        if schema == "float":
            return struct.unpack("<f", r.take(4))[0]
        if schema == "double":
            return struct.unpack("<d", r.take(8))[0]
        if schema == "string":
            return r.text()
        return r.blob()
    kind = schema["type"]
    if kind == "fixed":
        return r.take(schema["size"])
    if kind == "array":
        items: list[Any] = []
        item_bytes = sizes.of(schema["items"])
        while n := r.count("array", item_bytes):
            for _ in range(n):
                items.append(_decode(schema["items"], sizes, r, depth + 1))
        return items
    if kind == "map":
        entries: dict[str, Any] = {}
        entry_bytes = 1 + sizes.of(schema["values"])  # the key's length, then the value
        while n := r.count("map", entry_bytes):
            for _ in range(n):
                key = r.text()
                entries[key] = _decode(schema["values"], sizes, r, depth + 1)
        return entries
    return {f["name"]: _decode(f["type"], sizes, r, depth + 1) for f in schema["fields"]}


@dataclass(frozen=True)
class _Opened:
    """A container file's header, read and checked; ``reader`` stands at its first
    data block."""

    reader: _Reader
    schema: Any
    sizes: _MinBytes
    metadata: dict[str, bytes]
    sync: bytes


def _open(data: bytes, what: str, expected: AvroSchema | None, values: int) -> _Opened:
    r = _Reader(data, what, values)
    if r.take(len(MAGIC)) != MAGIC:
        raise StoredMetadataError(f"{what}: not an Avro container file (bad magic)")
    metadata: dict[str, bytes] = {}
    while n := r.count("metadata", 2):
        for _ in range(n):
            r.spend()
            key = r.text()
            metadata[key] = r.blob()
    sync = r.take(_SYNC_SIZE)
    codec = metadata.get("avro.codec", b"null")
    if codec != b"null":
        raise StoredMetadataError(f"{what}: Avro codec {codec!r} is not supported (only null)")
    raw_schema = metadata.get("avro.schema")
    if raw_schema is None:
        raise StoredMetadataError(f"{what}: no avro.schema in the file metadata")
    if expected is not None and raw_schema != expected.json:
        raise StoredMetadataError(f"{what}: its avro.schema is not the schema s3ddb writes")
    if len(raw_schema) > _MAX_SCHEMA_BYTES:
        raise StoredMetadataError(f"{what}: avro.schema of {len(raw_schema)} bytes is too large")
    try:
        schema = json.loads(raw_schema)
        names: dict[str, Any] = {}
        _collect_names(schema, names)
    except (ValueError, RecursionError, _SchemaError) as exc:
        raise StoredMetadataError(f"{what}: unusable avro.schema: {exc}") from None
    return _Opened(r, schema, _MinBytes(names), metadata, sync)


def _records(opened: _Opened, max_records: int, values_each: int | None) -> Iterator[Any]:
    """The records of an opened file, each block's count checked against the bytes
    it holds and ``max_records`` before any of its records is decoded. With
    ``values_each``, each record may hold that many values (the caller keeps
    none); else every record spends the file's budget."""
    r, schema, sizes, sync = opened.reader, opened.schema, opened.sizes, opened.sync
    record_bytes = sizes.of(schema)
    records_left = max_records
    while r.left:
        count = r.long()
        size = r.long()
        if size < 0 or size > r.left:
            raise r.fail(f"data block of {size} bytes, {r.left} left")
        if count < 0 or count > records_left or count * record_bytes > size:
            raise r.fail(
                f"data block of {count} records is more than its {size} bytes hold "
                f"(or than the {max_records} records s3ddb reads from one file)"
            )
        if values_each is None and count > r.values:
            raise r.fail(f"data block of {count} records is more than s3ddb reads")
        records_left -= count
        end = r.pos + size
        for _ in range(count):
            if values_each is not None:
                r.values = values_each
            yield _decode(schema, sizes, r, 0)
            if r.pos > end:
                raise r.fail("a data block's records run past its size")
        if r.pos != end:
            raise r.fail("a data block's size disagrees with its records")
        if r.take(_SYNC_SIZE) != sync:
            raise r.fail("sync marker does not match the header's")


def decode_container(
    data: bytes,
    what: str,
    *,
    schema: AvroSchema | None = None,
    max_records: int = DEFAULT_MAX_RECORDS,
    max_values: int = DEFAULT_MAX_VALUES,
) -> AvroFile:
    """Decode an Avro container file (codec ``null``), any number of blocks, in
    memory bounded by ``max_values`` (see :data:`DEFAULT_MAX_VALUES`).

    ``what`` names the file in error messages. With ``schema``, the file's
    ``avro.schema`` must be that schema's JSON, byte for byte (a file s3ddb wrote).

    Raises:
        StoredMetadataError: ``data`` is not such a file: wrong magic, truncated,
            a malformed or unsupported schema (or not ``schema``), another codec, a
            sync marker that does not match, a block whose size disagrees with its
            records, a count larger than the bytes left can hold, more than
            ``max_records`` records or ``max_values`` values, values nested too
            deeply.
    """
    opened = _open(data, what, schema, max_values)
    records = list(_records(opened, max_records, None))
    return AvroFile(opened.schema, opened.metadata, records)


def stream_container(
    data: bytes,
    what: str,
    *,
    schema: AvroSchema | None = None,
    max_records: int = DEFAULT_MAX_RECORDS,
    max_record_values: int = DEFAULT_MAX_VALUES,
) -> tuple[dict[str, bytes], Iterator[Any]]:
    """The file metadata of an Avro container file and its records one at a time:
    for files with many records the caller checks and drops. Each record may hold
    ``max_record_values`` values; the header is read (and checked, as by
    :func:`decode_container`) before this returns.

    Raises:
        StoredMetadataError: as :func:`decode_container`, the record errors while
            iterating.
    """
    opened = _open(data, what, schema, DEFAULT_MAX_VALUES)
    return opened.metadata, _records(opened, max_records, max_record_values)
