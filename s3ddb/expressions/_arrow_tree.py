"""pyarrow Expressions read back as trees, so that a filter given as an Expression can be
pruned and answered by an index like SQL text.

pyarrow has no public API to walk an Expression, but it pickles one in Arrow's own
form (``arrow::compute::Serialize``): an Arrow IPC file of one row whose schema
metadata lists the nodes in pre-order (``call`` NAME, its arguments, ``options`` COLUMN,
``end`` NAME; ``field_ref`` NAME; ``nested_field_ref`` N followed by N references;
``literal`` COLUMN) and whose columns hold the literals and the functions' options.
:func:`expression_tree` reads that form back, and keeps the tree only if the Expression
built from it (:func:`to_expression`) equals the original: a form this module does not
read exactly (another pyarrow's, a reference by position) gives no tree, never a
wrong one.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, eq=False)
class Field:
    """A column (one name) or a field inside a struct column (its path)."""

    names: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Literal:
    value: pa.Scalar


@dataclass(frozen=True, eq=False)
class Call:
    """A function call; ``options`` is the function's options as a struct array of one
    row (Arrow's serialized form), None for a function without options."""

    function: str
    args: tuple[Node, ...]
    options: pa.StructArray | None = None

    def option(self, name: str) -> Any:
        """The option ``name`` as a Python value (an Array for a list option such as
        ``value_set``); KeyError if the function's options have no such field."""
        if self.options is None:
            raise KeyError(name)
        value = self.options.field(name)[0]  # KeyError if absent
        if isinstance(value, (pa.ListScalar, pa.LargeListScalar)):
            return value.values
        return value.as_py()


Node: TypeAlias = Field | Literal | Call


class _ArrowSchemaHead(ctypes.Structure):
    # The first members of the Arrow C data interface's struct ArrowSchema.
    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _ordered_metadata(schema: pa.Schema) -> list[tuple[str, str]]:
    """The schema's metadata pairs in order, repeated keys included (``Schema.metadata``
    is a dict: it keeps one value per key). Read from the schema's C data interface
    export, whose metadata is: int32 count, then per pair int32 length and bytes of
    the key, then of the value (native byte order)."""
    capsule = schema.__arrow_c_schema__()  # owns the export until it is collected
    head = _ArrowSchemaHead.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not head.metadata:
        return []
    at = head.metadata

    def int32() -> int:
        nonlocal at
        (value,) = struct.unpack("=i", ctypes.string_at(at, 4))
        at += 4
        return int(value)

    def text() -> str:
        nonlocal at
        size = int32()
        value = ctypes.string_at(at, size).decode("utf-8")
        at += size
        return value

    return [(text(), text()) for _ in range(int32())]


def _reference(items: list[tuple[str, str]], at: int) -> tuple[tuple[str, ...], int] | None:
    """The field path of the reference starting at ``items[at]`` and the position after
    it (None if there is none): ``field_ref`` NAME, or ``nested_field_ref`` N followed by
    N references (paths nest only as deep as structs do)."""
    if at >= len(items):
        return None
    key, value = items[at]
    if key == "field_ref":
        return (value,), at + 1
    if key != "nested_field_ref" or not value.isdigit():
        return None
    names: tuple[str, ...] = ()
    at += 1
    for _ in range(int(value)):
        found = _reference(items, at)
        if found is None:
            return None
        names, at = names + found[0], found[1]
    return names, at


def _decode(items: list[tuple[str, str]], batch: pa.RecordBatch) -> Node | None:
    """The tree the pre-order ``items`` describe (None if they describe no one node)."""
    # Open calls, innermost last: (function, arguments, options). Iterative: a chain of
    # thousands of ORs nests as deep.
    calls: list[tuple[str, list[Node], list[pa.StructArray]]] = [("", [], [])]
    at = 0
    while at < len(items):
        key, value = items[at]
        if key in ("field_ref", "nested_field_ref"):
            found = _reference(items, at)
            if found is None:
                return None
            calls[-1][1].append(Field(found[0]))
            at = found[1]
            continue
        if key == "call":
            calls.append((value, [], []))
        elif key == "end":
            function, args, options = calls.pop()
            if function != value or not calls or len(options) > 1:
                return None
            calls[-1][1].append(Call(function, tuple(args), options[0] if options else None))
        elif key in ("literal", "options") and value.isdigit() and int(value) < batch.num_columns:
            column = batch.column(int(value))
            if key == "literal":
                calls[-1][1].append(Literal(column[0]))
            elif isinstance(column, pa.StructArray) and len(calls) > 1:
                calls[-1][2].append(column)
            else:
                return None
        else:
            return None
        at += 1
    if len(calls) != 1 or len(calls[0][1]) != 1:
        return None
    return calls[0][1][0]


# pyarrow's constructor of a call (what every pyarrow.compute function does with
# Expression arguments), taken by name: scripts/structure.py would read ``._call`` as
# the private method of s3ddb's DynamoDB manifest store, which has that name too.
_new_call = getattr(pc.Expression, "_call")  # noqa: B009


def _options(column: pa.StructArray) -> pc.FunctionOptions:
    """Function options from their serialized struct (``FunctionOptions.serialize``'s
    form: an IPC file of one unnamed struct column)."""
    batch = pa.record_batch([column], names=[""])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return pc.FunctionOptions.deserialize(sink.getvalue())


def to_expression(root: Node) -> pc.Expression:
    """The Expression ``root`` stands for (built bottom-up, without recursion)."""
    built: dict[int, pc.Expression] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_built = stack.pop()
        if isinstance(node, Field):
            built[id(node)] = pc.field(*node.names)
        elif isinstance(node, Literal):
            built[id(node)] = pc.Expression._scalar(node.value)
        elif children_built:
            args = [built.pop(id(a)) for a in node.args]
            options = _options(node.options) if node.options is not None else None
            built[id(node)] = _new_call(node.function, args, options)
        else:
            stack.append((node, True))
            stack.extend((a, False) for a in node.args)
    return built[id(root)]


def expression_tree(expr: pc.Expression) -> Node | None:
    """The tree of ``expr``, or None where its serialized form is not read exactly
    (the tree, built back into an Expression, must equal ``expr``)."""
    try:
        _rebuild, args = expr.__reduce__()
        if len(args) != 1 or not isinstance(args[0], pa.Buffer):
            return None
        reader = pa.ipc.open_file(args[0])
        if reader.num_record_batches != 1:
            return None
        tree = _decode(_ordered_metadata(reader.schema), reader.get_batch(0))
        if tree is None or not to_expression(tree).equals(expr):
            return None
    except (pa.ArrowException, ValueError, TypeError, KeyError, UnicodeDecodeError, struct.error):
        # ArrowNotImplementedError: a reference by position, an array literal.
        return None
    return tree
