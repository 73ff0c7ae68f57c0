"""The public entry points, and the bookkeeping of the columns an expression reads."""

from __future__ import annotations

import re
import weakref

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from sqlglot import exp

from s3ddb.errors import ColumnNotFoundError, InvalidExpressionError, InvalidInputError
from s3ddb.expressions._translator import (
    _MAX_LISTED_COLUMNS,
    _parse_and_translate,
    _translate,
    _Translator,
)
from s3ddb.expressions._typed import _bound_type, _cast_scalar, _first_line, _lit, _Typed

# Top-level columns referenced by expressions this module returned, keyed by id():
# a frozenset when known, or the schema to probe against (pass-through expressions).
_REFERENCED: dict[int, frozenset[str] | pa.Schema] = {}


def _register(expr: pc.Expression, columns: frozenset[str] | pa.Schema) -> pc.Expression:
    key = id(expr)
    if key not in _REFERENCED:  # a reused pass-through filter gets one finalizer, not many
        weakref.finalize(expr, _REFERENCED.pop, key, None)  # ids are reused after collection
    if key not in _REFERENCED or isinstance(columns, frozenset):
        _REFERENCED[key] = columns
    return expr


def _check_arrow(expr: pc.Expression, schema: pa.Schema) -> pa.DataType:
    """Bind a caller's pyarrow Expression to ``schema`` and return its result type."""
    try:
        return _bound_type(pads.dataset(schema.empty_table()), expr)
    except pa.ArrowException as e:
        message = _first_line(e)
        missing = re.match(r"No match for (FieldRef\S*?\((.*)\)) in ", message)
        if missing:
            ref = (
                missing.group(2)
                if missing.group(1).startswith("FieldRef.Name")
                else missing.group(1)
            )
            raise ColumnNotFoundError(
                f"column {ref!r} not found in expression {expr}; available columns: "
                f"{', '.join(schema.names[:_MAX_LISTED_COLUMNS])}"
            ) from e
        raise InvalidExpressionError(f"invalid expression {expr}: {message}") from e


def parse_predicate(predicate: str | pc.Expression, schema: pa.Schema) -> pc.Expression:
    """Compile a filter predicate against ``schema``.

    ``predicate`` is SQL text such as ``"id < 10 AND name LIKE 'ab%'"`` or a pyarrow
    Expression, which is returned unchanged after checking that it binds to
    ``schema`` and is boolean. The result is usable as ``filter=`` of pyarrow.dataset
    scans and ``Table.filter``, and keeps exactly the rows where the predicate is TRUE
    (SQL semantics: a NULL outcome drops the row).

    Raises:
        ColumnNotFoundError: a referenced column (or struct field) does not exist; the
            message names it, the expression and the available columns.
        InvalidExpressionError: the text does not parse, uses unsupported SQL
            (subqueries, aggregates, unknown functions, several statements), mixes
            incompatible types, or is not boolean. The message shows the fragment.
    """
    if isinstance(predicate, pc.Expression):
        out_type = _check_arrow(predicate, schema)
        if not pa.types.is_boolean(out_type):
            raise InvalidExpressionError(
                f"a predicate must be boolean, but {predicate} is {out_type}"
            )
        return _register(predicate, schema)
    return _sql_predicate(predicate, schema)[2]


def _sql_predicate(text: str, schema: pa.Schema) -> tuple[_Translator, exp.Expr, pc.Expression]:
    """:func:`parse_predicate` of SQL text, with the translator that compiled it and
    the syntax tree it parsed."""
    translator, tree, result = _parse_and_translate(text, schema)
    if not pa.types.is_boolean(result.type) and not pa.types.is_null(result.type):
        raise InvalidExpressionError(f"a predicate must be boolean, but {text!r} is {result.type}")
    result = translator.boolean(result, None)
    return translator, tree, _register(result.expr, frozenset(translator.columns))


def parse_value_expression(
    expr: str | pc.Expression, schema: pa.Schema, *, target_type: pa.DataType | None = None
) -> pc.Expression:
    """Compile a value expression (``update(values={"col": "x + 1"})``) against ``schema``.

    Supports column references, literals, arithmetic, ``CASE``, ``CAST`` and the
    functions in :data:`SUPPORTED_FUNCTIONS`; a pyarrow Expression is checked and
    passed through. With ``target_type`` (the type of the column being updated) the
    result is cast to it: literals at once (so ``'abc'`` for an int column fails
    here), other expressions by a safe cast when evaluated. Without it, ``NULL`` has
    Arrow's null type and the caller must cast.

    Raises:
        ColumnNotFoundError: a referenced column does not exist.
        InvalidExpressionError: the text does not parse, uses unsupported SQL, or
            cannot be converted to ``target_type``.
    """
    registered: frozenset[str] | pa.Schema
    if isinstance(expr, pc.Expression):
        translator = _Translator(str(expr), schema)
        result, registered = _Typed(expr, _check_arrow(expr, schema)), schema
    else:
        translator, result = _translate(expr, schema)
        registered = frozenset(translator.columns)
    if target_type is not None and result.type != target_type:
        if result.value is None:
            result = translator.checked(result.expr.cast(target_type), None)
        else:
            try:
                result = _lit(_cast_scalar(result.value, target_type))
            except (pa.ArrowException, ValueError, OverflowError) as e:
                raise translator.error(
                    f"cannot convert {result.value} to {target_type} ({_first_line(e)})"
                ) from e
    return _register(result.expr, registered)


def referenced_columns(expr: pc.Expression, schema: pa.Schema | None = None) -> set[str]:
    """The top-level columns ``expr`` reads (``s.a`` counts as ``s``), for projection.

    Exact and cheap for expressions returned by :func:`parse_predicate` or
    :func:`parse_value_expression`. For any other pyarrow Expression pass the
    ``schema`` it is evaluated against: pyarrow offers no way to walk an expression,
    so the columns are found by checking which fields it fails to bind without
    (a bisection: about 2k*log2(n) bindings for k of n columns).

    Raises:
        InvalidInputError: ``expr`` did not come from this module and no schema was
            given.
        ColumnNotFoundError, InvalidExpressionError: ``expr`` does not bind to ``schema``.
    """
    known = _REFERENCED.get(id(expr))
    if isinstance(known, frozenset):
        return set(known)
    target = schema if schema is not None else known
    if target is None:
        raise InvalidInputError(
            "referenced_columns() needs the schema for an expression not built by "
            "parse_predicate/parse_value_expression"
        )
    columns = _probe_columns(expr, target)
    if known is not None:
        _REFERENCED[id(expr)] = frozenset(columns)  # memoize for the next scan
    return columns


def _probe_columns(expr: pc.Expression, schema: pa.Schema) -> set[str]:
    def binds_without(skip: set[int]) -> bool:
        kept = pa.schema([f for i, f in enumerate(schema) if i not in skip])
        try:
            _bound_type(pads.dataset(kept.empty_table()), expr)
        except pa.ArrowException:
            return False
        return True

    if not binds_without(set()):
        _check_arrow(expr, schema)  # raises the precise error
    found: set[str] = set()

    def search(indices: list[int]) -> None:
        # Binding succeeds without a group of fields iff none of them is referenced.
        if not indices or binds_without(set(indices)):
            return
        if len(indices) == 1:
            found.add(schema.names[indices[0]])
            return
        half = len(indices) // 2
        search(indices[:half])
        search(indices[half:])

    search(list(range(len(schema))))
    return found
