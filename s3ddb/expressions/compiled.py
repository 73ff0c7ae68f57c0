"""A filter compiled once: its pyarrow predicate, the columns it reads, the pruning by
statistics it implies and the terms an index can answer, all from one parse.

SQL text is parsed once by sqlglot; that tree gives the predicate (the translator), the
pruner (:func:`s3ddb.expressions.pruning.sql_pruner`) and the index terms. A pyarrow
Expression is checked against the schema and read back as a tree
(:mod:`s3ddb.expressions._arrow_tree`), which gives its columns, pruner and index
terms the same way; one whose tree is not read exactly is used as is, without pruning
or index. Reads, counts, deletes, updates and the index planner all take a
:class:`CompiledFilter` made by :func:`compile_filter`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from s3ddb.errors import InvalidInputError
from s3ddb.expressions._api import _register, _sql_predicate, parse_predicate, referenced_columns
from s3ddb.expressions._arrow_tree import Call, Field, Node, expression_tree, to_expression
from s3ddb.expressions._translator import _Translator
from s3ddb.expressions._typed import _cast_scalar
from s3ddb.expressions.pruning import (
    _NOT_A_VALUE,
    ARROW_AND,
    Pruner,
    arrow_comparison,
    arrow_pruner,
    arrow_terms,
    arrow_value,
    arrow_value_set,
    sql_pruner,
)
from s3ddb.format.row_evaluation import evaluate
from s3ddb.format.rowgroups import MatchShare, RowGroupPredicate

__all__ = [
    "CompiledFilter",
    "IndexTerm",
    "compile_filter",
]


@dataclass(frozen=True)
class IndexTerm:
    """A term of a filter's top-level AND that an index of ``column`` can answer: the
    column equal to one of ``keys`` (sorted), or else within ``lo``..``hi`` (None:
    unbounded). ``expression`` is the term itself, an exact predicate over ``column``
    alone; the keys and bounds are the column's values the term can be TRUE for, as
    Python values of the column's type."""

    column: str
    expression: pc.Expression
    keys: tuple[Any, ...] | None = None
    lo: Any = None
    hi: Any = None
    lo_inclusive: bool = True
    hi_inclusive: bool = True


def _bounded(column: str, expression: pc.Expression, op: str, value: Any) -> IndexTerm:
    """The index term of ``column <op> value``."""
    if op == "eq":
        return IndexTerm(column, expression, keys=(value,))
    if op in ("gt", "ge"):
        return IndexTerm(column, expression, lo=value, lo_inclusive=op == "ge")
    return IndexTerm(column, expression, hi=value, hi_inclusive=op == "le")


@dataclass(frozen=True, eq=False)
class CompiledFilter:
    """One filter compiled against one schema (:func:`compile_filter`).

    Attributes:
        source: the filter as given (SQL text or a pyarrow Expression).
        predicate: the exact filter, for ``filter=`` of pyarrow scans: keeps exactly
            the rows where it is TRUE.
        columns: the top-level columns it reads.
        pruner: what it implies about column statistics (None: nothing), for
            fragments and row groups; see :mod:`s3ddb.expressions.pruning`.
        schema: the schema it was compiled against.
    """

    source: str | pc.Expression
    predicate: pc.Expression
    columns: frozenset[str]
    pruner: Pruner | None
    schema: pa.Schema = field(repr=False)
    # The parsed filter, for index terms: a sqlglot tree with the translator that
    # compiled it, or an Expression's tree (None: not read).
    _tree: exp.Expr | Node | None = field(default=None, repr=False)
    _translator: _Translator | None = field(default=None, repr=False)
    # Whether the pruner's conditions say all the filter says.
    _exact_pruner: bool = field(default=False, repr=False)

    @property
    def may_match(self) -> RowGroupPredicate | None:
        """The statistics test of :attr:`pruner` (None: prunes nothing)."""
        return self.pruner.may_match if self.pruner is not None else None

    @property
    def match_share(self) -> MatchShare | None:
        """The estimate of which share of a row group's rows match, from its
        statistics (:data:`~s3ddb.format.rowgroups.MatchShare`); None where the
        statistics test does not say all the filter says."""
        return self.pruner.match_share if self.pruner is not None and self._exact_pruner else None

    def index_terms(self, columns: Collection[str]) -> tuple[IndexTerm, ...]:
        """The terms of the filter's top-level AND on one of ``columns`` that an index
        can answer, in the filter's order: an equality, ``IN`` list, comparison or
        ``BETWEEN`` of the column with literals (for an Expression: ``equal``, ``less``
        ... of the column and a literal, ``is_in``). Derived on demand from the one
        parse: typing the keys of a long ``IN`` list costs about as much as compiling
        it, and only reads of indexed versions need them."""
        wanted, tree, translator = set(columns), self._tree, self._translator
        if isinstance(tree, exp.Expr) and translator is not None:
            found = [_sql_index_term(n, translator, wanted) for n in _conjuncts(tree)]
        elif isinstance(tree, Call):
            terms = arrow_terms(tree, ARROW_AND)
            found = [_arrow_index_term(n, self.schema, wanted) for n in terms]
        else:
            return ()
        return tuple(term for term in found if term is not None)


def compile_filter(filter: str | pc.Expression, schema: pa.Schema) -> CompiledFilter:
    """Compile ``filter`` (SQL text or a pyarrow Expression) against ``schema``, once.

    Raises:
        ColumnNotFoundError, InvalidExpressionError: as
            :func:`s3ddb.expressions.parse_predicate` (a bad filter is reported here,
            before any data is read).
    """
    if isinstance(filter, pc.Expression):
        predicate = parse_predicate(filter, schema)
        tree = expression_tree(predicate)
        if tree is None:  # used as is: pyarrow's form of it was not read exactly
            columns = frozenset(referenced_columns(predicate, schema))
            return CompiledFilter(filter, predicate, columns, None, schema)
        columns = _fields(tree)
        _register(predicate, columns)  # referenced_columns() need not probe for them
        pruner, exact = arrow_pruner(tree, schema)
        return CompiledFilter(filter, predicate, columns, pruner, schema, tree, None, exact)
    translator, tree_of_text, predicate = _sql_predicate(filter, schema)
    try:
        pruner, exact = sql_pruner(tree_of_text, schema)
    except RecursionError:  # nested deeper than the stack this runs on allows
        pruner, exact = None, False
    columns = frozenset(translator.columns)
    return CompiledFilter(
        filter, predicate, columns, pruner, schema, tree_of_text, translator, exact
    )


def _fields(tree: Node) -> frozenset[str]:
    """The top-level columns an Expression's tree reads."""
    out: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Field):
            out.add(node.names[0])
        elif isinstance(node, Call):
            stack.extend(node.args)
    return frozenset(out)


# --- index terms of SQL text -------------------------------------------------------------

_SQL_COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "eq", exp.GT: "gt", exp.GTE: "ge", exp.LT: "lt", exp.LTE: "le",
}  # fmt: skip
_FLIPPED = {"eq": "eq", "gt": "lt", "ge": "le", "lt": "gt", "le": "ge"}


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The terms of the top-level AND (the node itself if it is none), without
    recursion: a filter may AND thousands of terms."""
    out: list[exp.Expr] = []
    stack = [node]
    while stack:
        node = stack.pop()
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.And):
            stack.extend(reversed(list(node.flatten())))
        else:
            out.append(node)
    return out


def _column_name(node: exp.Expr, names: list[str]) -> str | None:
    if isinstance(node, exp.Column) and not node.table and node.name in names:
        return str(node.name)
    return None


def _key(node: exp.Expr, translator: _Translator, column: str) -> Any:
    """The value of a constant node as the column's type (raises if it is not one)."""
    if not isinstance(node, (exp.Literal, exp.Neg, exp.Cast, exp.Boolean)):
        raise InvalidInputError("not a literal")
    data_type = translator.schema.field(column).type
    item = translator.translate(node)
    if item.value is not None:
        value = item.value if item.type == data_type else _cast_scalar(item.value, data_type)
    else:
        expr = item.expr if item.type == data_type else item.expr.cast(data_type)
        value = evaluate(pa.table({"_": [0]}), {"v": expr}).column(0)[0]
    if not value.is_valid:
        raise InvalidInputError("NULL literal")
    return value.as_py()


def _sql_index_term(node: exp.Expr, translator: _Translator, wanted: set[str]) -> IndexTerm | None:
    """The index term of ``node``, if it is a usable comparison of a column of
    ``wanted`` with literals."""
    names = list(translator.schema.names)
    try:
        if isinstance(node, exp.In) and not node.args.get("query"):
            column = _column_name(node.this, names)
            if column is None or column not in wanted:
                return None
            keys = tuple(sorted({_key(v, translator, column) for v in node.expressions}))
            term = IndexTerm(column, _sql_expression(node, translator), keys=keys)
        elif isinstance(node, exp.Between):
            column = _column_name(node.this, names)
            if column is None or column not in wanted:
                return None
            lo = _key(node.args["low"], translator, column)
            hi = _key(node.args["high"], translator, column)
            term = IndexTerm(column, _sql_expression(node, translator), lo=lo, hi=hi)
        else:
            op = _SQL_COMPARISONS.get(type(node))
            if op is None:
                return None
            assert isinstance(node, exp.Binary)
            left, right = node.left, node.right
            column = _column_name(left, names)
            if column is None:
                column, left, right, op = _column_name(right, names), right, left, _FLIPPED[op]
            if column is None or column not in wanted:
                return None
            value = _key(right, translator, column)
            term = _bounded(column, _sql_expression(node, translator), op, value)
    except (InvalidInputError, KeyError, TypeError, ValueError, OverflowError, pa.ArrowException):
        return None
    return term


def _sql_expression(node: exp.Expr, translator: _Translator) -> pc.Expression:
    return translator.boolean(translator.translate(node), node).expr


# --- index terms of a pyarrow Expression ----------------------------------------------


def _arrow_index_term(node: Node, schema: pa.Schema, wanted: set[str]) -> IndexTerm | None:
    """The index term of ``node``, if it is a comparison of a column of ``wanted`` with
    a literal or an ``is_in`` of one, of plain values (:func:`pruning.arrow_value`)."""
    if not isinstance(node, Call):
        return None
    compared = arrow_comparison(node)
    if compared is not None:
        op, column, literal = compared
        if column not in wanted or column not in schema.names:
            return None
        value = arrow_value(literal, schema.field(column).type)
        return None if value is _NOT_A_VALUE else _bounded(column, to_expression(node), op, value)
    if node.function != "is_in" or len(node.args) != 1:
        return None
    subject = node.args[0]
    if not isinstance(subject, Field) or len(subject.names) != 1:
        return None
    column = subject.names[0]
    if column not in wanted or column not in schema.names:
        return None
    values = arrow_value_set(node, schema.field(column).type)
    if values is None:
        return None
    return IndexTerm(column, to_expression(node), keys=tuple(sorted(set(values))))
