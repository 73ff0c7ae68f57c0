"""Iceberg schemas of s3ddb versions: derived from the Arrow schema and its field ids
(:func:`iceberg_schema`), the name mapping that keeps earlier names of renamed fields
(:func:`name_mapping`), and the checks of a schema or name mapping read back from a
published metadata file (:func:`checked_struct`, :func:`mapping_names`): only the
shapes, keys and types s3ddb writes, so nothing else is carried into the next one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from s3ddb.errors import InvalidInputError

__all__ = [
    "MAX_TYPE_DEPTH",
    "RESERVED_IDS",
    "checked_struct",
    "field_ids",
    "iceberg_schema",
    "mapping_names",
    "name_mapping",
]

#: Field ids from here up are reserved by the Iceberg spec for metadata columns.
RESERVED_IDS = 2147483000
#: Deepest nesting of types a schema read back may have.
MAX_TYPE_DEPTH = 64


# --- from Arrow ----------------------------------------------------------------------


class _TypeProblem(Exception):
    pass


def _field_id(f: pa.Field, path: str) -> int:
    raw = (f.metadata or {}).get(b"PARQUET:field_id")
    try:
        value = int(raw) if raw is not None else -1
    except ValueError:
        value = -1
    if not 0 <= value < RESERVED_IDS:
        raise _TypeProblem(f"column {path!r} has no valid PARQUET:field_id ({raw!r})")
    return value


def _primitive(t: pa.DataType) -> str | None:
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"  # int8/int16 widen: every value is an Iceberg int
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed[{t.byte_width}]"
    if isinstance(t, pa.Decimal128Type) and t.precision <= 38:
        return f"decimal({t.precision}, {t.scale})"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_time64(t) and t.unit == "us":
        return "time"
    if pa.types.is_timestamp(t) and t.unit == "us":
        return "timestamptz" if t.tz is not None else "timestamp"
    return None


def _type(t: pa.DataType, path: str) -> Any:
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field(t.field(i), path) for i in range(t.num_fields)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = t.value_field
        return {
            "type": "list",
            "element-id": _field_id(element, f"{path}.{element.name}"),
            "element": _type(element.type, f"{path}.{element.name}"),
            "element-required": not element.nullable,
        }
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return {
            "type": "map",
            "key-id": _field_id(key, f"{path}.{key.name}"),
            "key": _type(key.type, f"{path}.{key.name}"),
            "value-id": _field_id(item, f"{path}.{item.name}"),
            "value": _type(item.type, f"{path}.{item.name}"),
            "value-required": not item.nullable,
        }
    name = _primitive(t)
    if name is None:
        raise _TypeProblem(f"column {path!r} has type {t}, which Iceberg v2 cannot hold exactly")
    return name


def _field(f: pa.Field, parent: str) -> dict[str, Any]:
    path = f"{parent}.{f.name}" if parent else f.name
    # Optional always: files written before a column was added lack it.
    return {
        "id": _field_id(f, path),
        "name": f.name,
        "required": False,
        "type": _type(f.type, path),
    }


def iceberg_schema(schema: pa.Schema) -> dict[str, Any]:
    """The Iceberg schema (a struct, without ``schema-id``) of an Arrow schema whose
    fields, nested ones included, carry ``PARQUET:field_id``.

    Raises:
        InvalidInputError: a type has no exact Iceberg counterpart, a field id is
            missing, or two fields share an id (the message names the column).
    """
    try:
        struct = {"type": "struct", "fields": [_field(f, "") for f in schema]}
    except _TypeProblem as exc:
        raise InvalidInputError(str(exc)) from None
    ids = field_ids(struct)
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise InvalidInputError(f"field id(s) {twice} are used by more than one field")
    return struct


def field_ids(node: Any) -> list[int]:
    """Every field id of an Iceberg type."""
    if not isinstance(node, dict):
        return []
    if node["type"] == "struct":
        return [i for f in node["fields"] for i in (f["id"], *field_ids(f["type"]))]
    if node["type"] == "list":
        return [node["element-id"], *field_ids(node["element"])]
    return [node["key-id"], *field_ids(node["key"]), node["value-id"], *field_ids(node["value"])]


def name_mapping(
    struct: Mapping[str, Any], known: Mapping[int, Sequence[str]]
) -> tuple[list[dict[str, Any]], dict[int, tuple[str, ...]]]:
    """The name mapping of ``struct`` and the names it gives each id: a field's
    current name first, then its earlier names (from ``known``) that no sibling uses
    now or had too, so files written before a rename still resolve."""
    names: dict[int, tuple[str, ...]] = {}

    def of_fields(fields: Sequence[tuple[int, str, Any]]) -> list[dict[str, Any]]:
        current = {name for _i, name, _t in fields}
        earlier: dict[str, int] = {}
        for i, name, _t in fields:
            for old in known.get(i, ()):
                if old != name:
                    earlier[old] = earlier.get(old, 0) + 1
        out = []
        for i, name, t in fields:
            extra = [
                old
                for old in known.get(i, ())
                if old != name and old not in current and earlier[old] == 1
            ]
            names[i] = (name, *extra)
            entry: dict[str, Any] = {"field-id": i, "names": list(names[i])}
            children = of_type(t)
            if children:
                entry["fields"] = children
            out.append(entry)
        return out

    def of_type(t: Any) -> list[dict[str, Any]]:
        if not isinstance(t, dict):
            return []
        if t["type"] == "struct":
            return of_fields([(f["id"], f["name"], f["type"]) for f in t["fields"]])
        if t["type"] == "list":
            return of_fields([(t["element-id"], "element", t["element"])])
        return of_fields([(t["key-id"], "key", t["key"]), (t["value-id"], "value", t["value"])])

    return of_type(struct), names


# --- read back (untrusted) -----------------------------------------------------------

_PRIMITIVES = frozenset(
    {"boolean", "int", "long", "float", "double", "string", "binary", "date", "time"}
    | {"timestamp", "timestamptz"}
)
_FIXED = re.compile(r"fixed\[([0-9]{1,9})\]")
_DECIMAL = re.compile(r"decimal\(([0-9]{1,2}), ([0-9]{1,2})\)")
_STRUCT_KEYS = frozenset({"type", "fields"})
_FIELD_KEYS = frozenset({"id", "name", "required", "type"})
_LIST_KEYS = frozenset({"type", "element-id", "element", "element-required"})
_MAP_KEYS = frozenset({"type", "key-id", "key", "value-id", "value", "value-required"})


def checked_struct(node: Any) -> list[int]:
    """Check that ``node`` (a schema read back, without ``schema-id``) has only what
    :func:`iceberg_schema` writes: structs, lists and maps with exactly their keys,
    optional struct fields with names, the primitive types s3ddb maps to, field ids
    below :data:`RESERVED_IDS`, each once, nested at most :data:`MAX_TYPE_DEPTH`
    deep. Returns its field ids.

    Raises:
        ValueError: what is not s3ddb's, as a phrase.
    """
    ids: list[int] = []
    _check_type(node, ids, 0, top=True)
    if len(set(ids)) != len(ids):
        raise ValueError("a field id is used twice")
    return ids


def _check_id(value: Any, ids: list[int]) -> None:
    if type(value) is not int or not 0 <= value < RESERVED_IDS:
        raise ValueError(f"field id {value!r} is not one s3ddb gives")
    ids.append(value)


def _check_type(node: Any, ids: list[int], depth: int, top: bool = False) -> None:
    if depth > MAX_TYPE_DEPTH:
        raise ValueError("types nest too deeply")
    if isinstance(node, str):
        if top:
            raise ValueError("a schema is a struct")
        fixed, decimal = _FIXED.fullmatch(node), _DECIMAL.fullmatch(node)
        ok = (
            node in _PRIMITIVES
            or fixed is not None
            or (decimal is not None and int(decimal[2]) <= int(decimal[1]) <= 38)
        )
        if not ok:
            raise ValueError(f"type {node[:40]!r} is not one s3ddb writes")
        return
    if not isinstance(node, dict):
        raise ValueError(f"a type is a {type(node).__name__}")
    kind = node.get("type")
    keys = {"struct": _STRUCT_KEYS, "list": _LIST_KEYS, "map": _MAP_KEYS}.get(str(kind))
    if keys is None or set(node) != keys or (top and kind != "struct"):
        raise ValueError(f"a {str(kind)[:20]!r} type has other keys than s3ddb writes")
    if kind == "struct":
        fields = node["fields"]
        if not isinstance(fields, list):
            raise ValueError("a struct's fields are not a list")
        for f in fields:
            if not isinstance(f, dict) or set(f) != _FIELD_KEYS:
                raise ValueError("a field has other keys than s3ddb writes")
            if not isinstance(f["name"], str) or f["required"] is not False:
                raise ValueError(f"field {f.get('id')!r} is not an optional field with a name")
            _check_id(f["id"], ids)
            _check_type(f["type"], ids, depth + 1)
    elif kind == "list":
        if not isinstance(node["element-required"], bool):
            raise ValueError("a list's element-required is not a boolean")
        _check_id(node["element-id"], ids)
        _check_type(node["element"], ids, depth + 1)
    else:
        if not isinstance(node["value-required"], bool):
            raise ValueError("a map's value-required is not a boolean")
        _check_id(node["key-id"], ids)
        _check_type(node["key"], ids, depth + 1)
        _check_id(node["value-id"], ids)
        _check_type(node["value"], ids, depth + 1)


def mapping_names(nodes: Any) -> dict[int, tuple[str, ...]]:
    """The names a name mapping read back gives each field id (every id once, each
    with one name or more, strings, nested at most :data:`MAX_TYPE_DEPTH` deep).
    Whether it is the mapping s3ddb derives from them is for the caller to compare.

    Raises:
        ValueError: what is malformed, as a phrase.
    """
    names: dict[int, tuple[str, ...]] = {}
    _mapping_level(nodes, names, 0)
    return names


def _mapping_level(nodes: Any, names: dict[int, tuple[str, ...]], depth: int) -> None:
    if depth > MAX_TYPE_DEPTH or not isinstance(nodes, list):
        raise ValueError("the name mapping is not a list of fields (or nests too deeply)")
    for node in nodes:
        if not isinstance(node, dict) or not set(node) <= {"field-id", "names", "fields"}:
            raise ValueError("a name mapping entry has other keys than s3ddb writes")
        field_id, listed = node.get("field-id"), node.get("names")
        if type(field_id) is not int or not 0 <= field_id < RESERVED_IDS or field_id in names:
            raise ValueError(f"the name mapping's field id {field_id!r} is malformed or repeated")
        if not isinstance(listed, list) or not listed:
            raise ValueError(f"the name mapping of field {field_id} has no names")
        if not all(isinstance(n, str) for n in listed) or len(set(listed)) != len(listed):
            raise ValueError(f"the name mapping of field {field_id} repeats a name")
        names[field_id] = tuple(listed)
        if "fields" in node:
            _mapping_level(node["fields"], names, depth + 1)
