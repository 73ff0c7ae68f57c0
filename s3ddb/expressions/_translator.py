"""The translator: one sqlglot syntax tree to a pyarrow compute expression."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from sqlglot import exp

from s3ddb.errors import ColumnNotFoundError, InvalidExpressionError
from s3ddb.expressions._sql import (
    _ARITHMETIC,
    _COMPARISONS,
    _UNARY_FUNCTIONS,
    _UNSUPPORTED,
    MAX_LIKE_WILDCARDS,
    MAX_REPLACE_GROWTH,
    MAX_ROUND_DIGITS,
    S3DDBDialect,
    _shown,
    _sql_type,
    parse_sql_tree,
)
from s3ddb.expressions._typed import (
    _NULL_BOOL,
    _bound_type,
    _cast_scalar,
    _coerce,
    _first_line,
    _int_range,
    _is_numeric,
    _is_stringlike,
    _lit,
    _Typed,
    _widened,
)

_MAX_LISTED_COLUMNS = 40
_INT64_MAX = 2**63 - 1


class _Translator:
    """Translates one sqlglot tree against one schema; collects referenced columns."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.columns: set[str] = set()
        self._probe = pads.dataset(schema.empty_table())

    # --- errors and type checks -----------------------------------------------------

    def error(self, what: str, node: exp.Expr | None = None) -> InvalidExpressionError:
        # Both cut to a readable length: a LIKE pattern or an IN list can be 100,000
        # characters long.
        where = f" at {_shown(node.sql(dialect=S3DDBDialect))}" if node is not None else ""
        return InvalidExpressionError(f"{what}{where} in expression {_shown(self.text, 400)}")

    def checked(self, expr: pc.Expression, node: exp.Expr | None) -> _Typed:
        """Type ``expr`` by evaluating it on zero rows; wrap Arrow's refusal."""
        try:
            out_type = _bound_type(self._probe, expr)
        except pa.ArrowException as e:
            raise self.error(f"cannot evaluate ({_first_line(e)})", node) from e
        return _Typed(expr, out_type)

    def boolean(self, item: _Typed, node: exp.Expr | None, what: str = "a condition") -> _Typed:
        if pa.types.is_null(item.type):
            return (
                _lit(_NULL_BOOL)
                if item.value is not None
                else _Typed(item.expr.cast(pa.bool_()), pa.bool_())
            )
        if not pa.types.is_boolean(item.type):
            raise self.error(f"expected a boolean for {what}, got {item.type}", node)
        return item

    def literal_int(
        self,
        node: exp.Expr | None,
        what: str,
        default: int,
        low: int = -_INT64_MAX - 1,
        high: int = _INT64_MAX,
    ) -> int:
        """An integer literal argument, checked to be within ``low..high``.

        Raises:
            InvalidExpressionError: it is not an integer literal, or is out of range
                (the message names ``what``, the value and the range).
        """
        if node is None:
            return default
        value = self.translate(node).value
        if value is None or not pa.types.is_integer(value.type) or not value.is_valid:
            raise self.error(f"{what} must be an integer literal", node)
        number = int(value.as_py())
        if not low <= number <= high:
            raise self.error(f"{what} {number} is out of range {low}..{high}", node)
        return number

    def literal_str(self, node: exp.Expr, what: str) -> str:
        if not (isinstance(node, exp.Literal) and node.is_string):
            raise self.error(f"{what} must be a string literal", node)
        return str(node.this)

    def unsupported(self, node: exp.Expr) -> InvalidExpressionError:
        for kinds, message in _UNSUPPORTED:
            if isinstance(node, kinds):
                name = (
                    node.name
                    if isinstance(node, exp.Anonymous)
                    else (node.sql_name() if isinstance(node, exp.Func) else "")
                )
                return self.error(message.format(name=name), node)
        return self.error(f"unsupported syntax ({type(node).__name__})", node)

    # --- dispatch ---------------------------------------------------------------------

    def translate(self, node: exp.Expr) -> _Typed:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise self.unsupported(node)
        return handler(self, node)

    def pair(self, left: _Typed, right: _Typed, numbers: bool = True) -> tuple[_Typed, _Typed]:
        """Re-type a literal operand to the type of the other, non-literal operand
        (float16 operands are widened to float32 first)."""
        left, right = _widened(left), _widened(right)
        if numbers or not (_is_numeric(left.type) and _is_numeric(right.type)):
            if left.value is not None and right.value is None:
                left = _coerce(left, right.type)
            elif right.value is not None and left.value is None:
                right = _coerce(right, left.type)
        return left, right

    def unify(self, items: list[_Typed], node: exp.Expr) -> list[_Typed]:
        """Cast items to one common type (CASE branches, COALESCE arguments)."""
        anchor = next((i.type for i in items if i.value is None), None)
        if anchor is not None:
            items = [_coerce(i, anchor) for i in items]
        types = [i.type for i in items if not pa.types.is_null(i.type)]
        if not types:
            return items
        try:
            common = (
                pa.unify_schemas(
                    [pa.schema([("v", t)]) for t in types], promote_options="permissive"
                )
                .field(0)
                .type
            )
        except pa.ArrowException as e:
            raise self.error(f"incompatible types {', '.join(map(str, types))}", node) from e
        out = []
        for item in items:
            if item.type == common:
                out.append(item)
            elif item.value is not None:
                try:
                    out.append(_lit(_cast_scalar(item.value, common)))
                except (pa.ArrowException, ValueError, OverflowError) as e:
                    raise self.error(f"cannot convert {item.value} to {common}", node) from e
            else:
                out.append(_Typed(item.expr.cast(common), common))
        return out

    # --- leaves -----------------------------------------------------------------------

    def column(self, node: exp.Column | exp.Dot) -> _Typed:
        parts = node.parts
        if any(not isinstance(p, exp.Identifier) for p in parts):
            raise self.unsupported(node)
        names = [p.name for p in parts]
        try:
            top = self._lookup(self.schema.names, names[0], "column")
        except ColumnNotFoundError:
            # An unquoted a.b may name a top-level column literally called "a.b".
            if len(names) > 1 and ".".join(names) in self.schema.names:
                names = [".".join(names)]
                top = names[0]
            else:
                raise
        path, dtype = [top], self.schema.field(top).type
        for name in names[1:]:
            if not pa.types.is_struct(dtype):
                raise ColumnNotFoundError(
                    f"column {'.'.join(path)!r} is of type {dtype}, not a struct, so it has "
                    f"no field {name!r} (expression {self.text!r})"
                )
            children = [dtype.field(i).name for i in range(dtype.num_fields)]
            path.append(self._lookup(children, name, f"field of {'.'.join(path)!r}"))
            dtype = dtype.field(path[-1]).type
        self.columns.add(top)
        return _Typed(pc.field(*path), dtype)

    def _lookup(self, names: list[str], wanted: str, what: str) -> str:
        """Exact match first, then a case-insensitive match if it is unambiguous."""
        if wanted in names:
            return wanted
        folded = [n for n in names if n.lower() == wanted.lower()]
        if len(folded) == 1:
            return folded[0]
        shown = ", ".join(names[:_MAX_LISTED_COLUMNS])
        if len(names) > _MAX_LISTED_COLUMNS:
            shown += f", ... ({len(names)} in all)"
        problem = f"is ambiguous (matches {', '.join(folded)})" if folded else "not found"
        label = "columns" if what == "column" else "fields"
        raise ColumnNotFoundError(
            f"{what} {wanted!r} {problem} in expression {self.text!r}; "
            f"available {label}: {shown or '(none)'}"
        )

    def literal(self, node: exp.Literal) -> _Typed:
        if node.is_string:
            return _lit(pa.scalar(str(node.this), pa.string()))
        try:
            number = int(str(node.this))
        except ValueError:  # 1.5, 1e3: sqlglot keeps the source text
            return _lit(pa.scalar(float(str(node.this)), pa.float64()))
        return _lit(self._integer(number, node))

    def _integer(self, number: int, node: exp.Expr) -> pa.Scalar:
        if -(2**63) <= number < 2**63:
            return pa.scalar(number, pa.int64())
        if 0 <= number < 2**64:
            return pa.scalar(number, pa.uint64())
        raise self.error(f"integer {number} is out of the 64-bit range", node)

    # --- operators --------------------------------------------------------------------

    def compare(self, node: exp.Expr) -> _Typed:
        left, right = self.pair(self.translate(node.this), self.translate(node.expression))
        return self.comparison(_COMPARISONS[type(node)], left, right, node)

    def comparison(
        self, op: Callable[[Any, Any], Any], left: _Typed, right: _Typed, node: exp.Expr
    ) -> _Typed:
        """``left op right`` for a comparison operator ``op``, operands already paired.

        An integer column compared with an integer literal outside its type's range
        (``id < 9223372036854775809`` on int64, ``u > -1`` on uint64) compares as
        numbers do: the same way for every value of the type, so TRUE or FALSE for
        each non-NULL row and NULL for a NULL one. (Arrow would cast the literal to
        the column's type and fail.)
        """
        for column, constant, flipped in ((left, right, False), (right, left, True)):
            value = constant.value
            if (
                column.value is None
                and value is not None
                and value.is_valid
                and pa.types.is_integer(column.type)
                and pa.types.is_integer(value.type)
            ):
                number = int(value.as_py())
                low, high = _int_range(column.type)
                if not low <= number <= high:
                    # Every value of the type lies on the same side of the literal
                    # as 0 does (0 is in every integer type's range).
                    outcome = bool(op(number, 0) if flipped else op(0, number))
                    expr = pc.if_else(column.expr.is_valid(), pa.scalar(outcome), _NULL_BOOL)
                    return self.checked(expr, node)
        if {_kind(left.type), _kind(right.type)} == {"int", "float"}:
            # An integer against a float compares as float64, the integer rounded to
            # the nearest (Arrow's own promotion, made explicit: left implicit, Arrow
            # picks float32 for some literals and its checked cast then fails on
            # any integer beyond 2**24).
            left, right = _as_float64(left), _as_float64(right)
        return self.binary(op, left, right, node)

    def arithmetic(self, node: exp.Expr) -> _Typed:
        # Numeric literals keep their own type here: x / 2.0 must not become x / 2.
        left, right = self.pair(
            self.translate(node.this), self.translate(node.expression), numbers=False
        )
        left, right = _arithmetic_operands(left, right, isinstance(node, exp.Sub))
        return self.binary(_ARITHMETIC[type(node)], left, right, node)

    def binary(
        self, op: Callable[[Any, Any], Any], left: _Typed, right: _Typed, node: exp.Expr
    ) -> _Typed:
        try:
            return self.checked(op(left.expr, right.expr), node)
        except InvalidExpressionError as e:
            # Name the types we know (Arrow's message shows narrowed literal types).
            cause = e.__cause__ or e
            raise self.error(
                f"incompatible operand types {left.type} and {right.type} ({_first_line(cause)})",
                node,
            ) from cause

    def negate(self, node: exp.Neg) -> _Typed:
        inner = self.translate(node.this)
        if inner.value is not None and _is_numeric(inner.type) and inner.value.is_valid:
            value = -inner.value.as_py()
            # Fold, so -5 stays a literal that comparisons can re-type.
            return _lit(
                self._integer(value, node)
                if isinstance(value, int)
                else pa.scalar(value, inner.type)
            )
        return self.checked(pc.negate_checked(inner.expr), node)

    def logical(self, node: exp.Connector) -> _Typed:
        # Flattened, not recursed into: "a = 1 OR a = 2 OR ..." with thousands of terms
        # would otherwise exhaust Python's recursion limit.
        terms = [self.boolean(self.translate(t), t).expr for t in node.flatten()]
        # & and | are and_kleene / or_kleene: FALSE AND NULL is FALSE, as in SQL.
        join = operator.and_ if isinstance(node, exp.And) else operator.or_
        return _Typed(functools.reduce(join, terms), pa.bool_())

    def not_(self, node: exp.Not) -> _Typed:
        return _Typed(~self.boolean(self.translate(node.this), node.this).expr, pa.bool_())

    def is_(self, node: exp.Is) -> _Typed:
        operand = self.translate(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return _Typed(operand.expr.is_null(), pa.bool_())
        if isinstance(target, exp.Boolean):
            cond = self.boolean(operand, node.this).expr
            cond = cond if target.this else ~cond
            return self.checked(pc.coalesce(cond, pa.scalar(False)), node)
        raise self.unsupported(node)

    def null_safe(self, node: exp.Expr) -> _Typed:
        left, right = self.pair(self.translate(node.this), self.translate(node.expression))
        eq = self.comparison(operator.eq, left, right, node).expr
        l_null, r_null = left.expr.is_null(), right.expr.is_null()
        expr = pc.if_else(l_null | r_null, l_null & r_null, eq)
        return _Typed(~expr if isinstance(node, exp.NullSafeNEQ) else expr, pa.bool_())

    def in_(self, node: exp.In) -> _Typed:
        if any(node.args.get(k) for k in ("query", "unnest", "field")):
            raise self.error("subqueries are not supported in IN", node)
        subject = _widened(self.translate(node.this))
        items = [_coerce(self.translate(v), subject.type) for v in node.expressions]
        if not items:
            raise self.error("empty IN list", node)
        value_set = None
        if subject.value is None and all(
            i.value is not None and i.type in (subject.type, pa.null()) for i in items
        ):
            try:  # One set lookup instead of thousands of ORs for long key lists.
                value_set = pa.array(
                    [i.value.as_py() for i in items if i.value is not None and i.value.is_valid],
                    subject.type,
                )
            except (pa.ArrowException, ValueError, TypeError):
                value_set = None
        if value_set is None:
            # Mixed or non-literal lists: OR of equalities gives the same 3-valued result.
            result: pc.Expression | None = None
            for value_node, item in zip(node.expressions, items):
                left, right = self.pair(subject, item)
                eq = self.comparison(operator.eq, left, right, value_node).expr
                result = eq if result is None else result | eq
            return _Typed(result, pa.bool_())
        # is_in yields FALSE for a NULL subject and ignores NULL list members; SQL says
        # x IN (...) is NULL when x is NULL, or when there is no match but a NULL member.
        hit = pc.is_in(subject.expr, value_set=value_set, skip_nulls=True)
        if len(value_set) < len(items):
            hit = pc.if_else(hit, pa.scalar(True), _NULL_BOOL)
        return self.checked(pc.if_else(subject.expr.is_valid(), hit, _NULL_BOOL), node)

    def between(self, node: exp.Between) -> _Typed:
        if node.args.get("symmetric"):
            raise self.error("BETWEEN SYMMETRIC is not supported", node)
        subject = self.translate(node.this)
        low, sub_l = self.pair(self.translate(node.args["low"]), subject)
        sub_h, high = self.pair(subject, self.translate(node.args["high"]))
        expr = (
            self.comparison(operator.le, low, sub_l, node).expr
            & self.comparison(operator.le, sub_h, high, node).expr
        )
        return _Typed(expr, pa.bool_())

    def like(self, node: exp.Expr, escape: str | None = None) -> _Typed:
        subject = self.translate(node.this)
        if not (_is_stringlike(subject.type) or pa.types.is_null(subject.type)):
            raise self.error(f"LIKE needs a string operand, got {subject.type}", node.this)
        pattern = self.literal_str(node.expression, "a LIKE pattern")
        if escape is not None:  # Arrow's LIKE always escapes with a backslash: translate.
            pattern = re.sub(
                f"{re.escape(escape)}(.)|\\\\",
                lambda m: "\\" + (m.group(1) or "\\"),
                pattern,
                flags=re.DOTALL,
            )
        ignore_case = isinstance(node, exp.ILike)
        self._check_like_pattern(pattern, node)
        expr = self.checked(_like(subject.expr, pattern, ignore_case), node).expr
        return _Typed(~expr if node.args.get("negate") else expr, pa.bool_())

    def _check_like_pattern(self, pattern: str, node: exp.Expr) -> None:
        """Refuse a pattern whose regular expression would be too slow to match.

        Raises:
            InvalidExpressionError: more than MAX_LIKE_WILDCARDS unescaped ``%``/``_``.
        """
        wildcards = sum(
            m.group() in ("%", "_") for m in re.finditer(r"\\.|[%_]", pattern, flags=re.DOTALL)
        )
        if wildcards > MAX_LIKE_WILDCARDS:
            raise self.error(
                f"LIKE pattern has {wildcards} wildcards (% and _), the limit is "
                f"{MAX_LIKE_WILDCARDS}",
                node,
            )

    def escape(self, node: exp.Escape) -> _Typed:
        esc = self.literal_str(node.expression, "the ESCAPE character")
        if not isinstance(node.this, (exp.Like, exp.ILike)) or len(esc) != 1:
            raise self.error("ESCAPE takes one character and follows LIKE", node)
        return self.like(node.this, esc)

    def cast(self, node: exp.Cast) -> _Typed:
        try:
            target = _sql_type(node.to)
        except InvalidExpressionError as e:
            raise self.error(str(e), node) from None
        if target is None:
            raise self.error(f"unsupported type {node.to.sql()}", node)
        operand = self.translate(node.this)
        if operand.value is None:
            typed = self.checked(operand.expr.cast(target), node)
            try:  # Arrow refuses some casts by type (int64 to decimal(5, 0)) only per row.
                pc.cast(pa.nulls(1, operand.type), target)
            except pa.ArrowException as e:
                raise self.error(
                    f"cannot cast {operand.type} to {target} ({_first_line(e)})", node
                ) from e
            return typed
        try:  # Fold constants so DATE 'nonsense' fails now and literals stay literals.
            if pa.types.is_timestamp(target) and _is_stringlike(operand.type):
                try:
                    return _lit(_cast_scalar(operand.value, target))
                except pa.ArrowInvalid:  # '...Z' / '+02:00' needs a zoned type
                    return _lit(_cast_scalar(operand.value, pa.timestamp(target.unit, "UTC")))
            return _lit(_cast_scalar(operand.value, target))
        except (pa.ArrowException, ValueError, OverflowError) as e:
            raise self.error(
                f"cannot convert {operand.value} to {target} ({_first_line(e)})", node
            ) from e

    def case(self, node: exp.Case) -> _Typed:
        subject = self.translate(node.this) if node.this else None
        conds, values = [], []
        for branch in node.args["ifs"]:
            when = self.translate(branch.this)
            if subject is not None:  # CASE x WHEN v THEN ...: compare x = v
                left, right = self.pair(subject, when)
                when = self.checked(left.expr == right.expr, branch.this)
            conds.append(self.boolean(when, branch.this, "a WHEN condition").expr)
            values.append(self.translate(branch.args["true"]))
        default = node.args.get("default")
        values.append(self.translate(default) if default else _lit(pa.scalar(None)))
        values = self.unify(values, node)
        # case_when takes the first TRUE condition; a NULL condition counts as not TRUE.
        struct = pc.make_struct(*conds, field_names=[f"c{i}" for i in range(len(conds))])
        return self.checked(pc.case_when(struct, *[v.expr for v in values]), node)

    # --- functions --------------------------------------------------------------------

    def unary_function(self, node: exp.Func) -> _Typed:
        if any(v for k, v in node.args.items() if k != "this"):
            raise self.error(f"{node.sql_name()}() takes exactly one argument", node)
        return self.checked(_UNARY_FUNCTIONS[type(node)](self.translate(node.this).expr), node)

    def round(self, node: exp.Round) -> _Typed:
        digits = self.literal_int(
            node.args.get("decimals"), "ROUND's digits", 0, -MAX_ROUND_DIGITS, MAX_ROUND_DIGITS
        )
        # SQL rounds halves away from zero (2.5 -> 3, -2.5 -> -3); Arrow's default is
        # half-to-even.
        expr = pc.round(
            self.translate(node.this).expr, ndigits=digits, round_mode="half_towards_infinity"
        )
        return self.checked(expr, node)

    def substring(self, node: exp.Substring) -> _Typed:
        start = self.literal_int(node.args.get("start"), "SUBSTRING's start", 1, 1)
        length = self.literal_int(node.args.get("length"), "SUBSTRING's length", -1, 0)
        # Arrow's offsets are int64: a stop past the longest string means "to the end".
        stop = None if length < 0 else min(start - 1 + length, _INT64_MAX)
        return self.checked(
            pc.utf8_slice_codeunits(self.translate(node.this).expr, start=start - 1, stop=stop),
            node,
        )

    def trim(self, node: exp.Trim) -> _Typed:
        position = str(node.args.get("position") or "BOTH").upper()
        arg = self.translate(node.this).expr
        side = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        chars = node.args.get("expression")
        if chars is None:
            expr = getattr(pc, f"utf8_{side}_whitespace")(arg)
        else:
            expr = getattr(pc, f"utf8_{side}")(
                arg, characters=self.literal_str(chars, "TRIM's characters")
            )
        return self.checked(expr, node)

    def replace(self, node: exp.Replace) -> _Typed:
        pattern = self.literal_str(node.expression, "REPLACE's search text")
        replacement = self.literal_str(node.args["replacement"], "REPLACE's replacement")
        if not pattern:  # Arrow's replace_substring never returns on an empty pattern
            raise self.error("REPLACE's search text must not be empty", node)
        if len(replacement) > MAX_REPLACE_GROWTH * len(pattern):
            raise self.error(
                f"REPLACE's replacement ({len(replacement):,} characters) is more than "
                f"{MAX_REPLACE_GROWTH} times as long as its search text ({len(pattern):,}): "
                "the result could be that many times the size of the input",
                node,
            )
        expr = pc.replace_substring(
            self.translate(node.this).expr, pattern=pattern, replacement=replacement
        )
        return self.checked(expr, node)

    def coalesce(self, node: exp.Coalesce) -> _Typed:
        args = self.unify([self.translate(a) for a in [node.this, *node.expressions]], node)
        return self.checked(pc.coalesce(*[a.expr for a in args]), node)

    def nullif(self, node: exp.Nullif) -> _Typed:
        value, other = self.unify(
            [self.translate(node.this), self.translate(node.expression)], node
        )
        # NULLIF(a, NULL) is a: a NULL comparison must not select the NULL branch.
        same = pc.coalesce(self.checked(value.expr == other.expr, node).expr, pa.scalar(False))
        return self.checked(pc.if_else(same, pa.scalar(None, value.type), value.expr), node)

    def concat(self, node: exp.Expr) -> _Typed:
        pipe = isinstance(node, exp.DPipe)
        parts = [node.this, node.expression] if pipe else node.expressions
        args = []
        for part in parts:
            item = self.translate(part)
            if not _is_stringlike(item.type):
                item = (
                    _lit(item.value.cast(pa.string()))
                    if item.value is not None
                    else self.checked(item.expr.cast(pa.string()), part)
                )
            args.append(item.expr)
        # a || NULL is NULL (standard SQL); CONCAT skips NULLs (PostgreSQL, DataFusion).
        expr = pc.binary_join_element_wise(
            *args, pc.scalar(""), null_handling="emit_null" if pipe else "skip"
        )
        return self.checked(expr, node)


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    return "float" if pa.types.is_floating(t) else "other"


def _as_float64(item: _Typed) -> _Typed:
    """``item`` as float64: integers rounded to the nearest float64 (so an unsafe
    cast: beyond 2**53 not every integer has one of its own), floats widened."""
    if pa.types.is_float64(item.type):
        return item
    if item.value is not None:
        return _lit(item.value.cast(pa.float64(), safe=False))
    return _Typed(item.expr.cast(pa.float64(), safe=False), pa.float64())


def _like(subject: pc.Expression, pattern: str, ignore_case: bool) -> pc.Expression:
    """LIKE via the cheapest equivalent kernel (prefix/suffix/substring tests)."""
    core = pattern.strip("%")
    if "\\" not in pattern and "_" not in pattern and core and "%" not in core:
        lead, trail = pattern.startswith("%"), pattern.endswith("%")
        if lead and trail:
            return pc.match_substring(subject, core, ignore_case=ignore_case)
        if trail:
            return pc.starts_with(subject, core, ignore_case=ignore_case)
        if lead:
            return pc.ends_with(subject, core, ignore_case=ignore_case)
    return pc.match_like(subject, pattern, ignore_case=ignore_case)


_HANDLERS: dict[type[exp.Expr], Callable[[_Translator, Any], _Typed]] = {
    exp.Column: _Translator.column,
    exp.Dot: _Translator.column,
    exp.Literal: _Translator.literal,
    exp.Boolean: lambda _t, n: _lit(pa.scalar(bool(n.this))),
    exp.Null: lambda _t, n: _lit(pa.scalar(None)),
    exp.Paren: lambda t, n: t.translate(n.this),
    exp.Neg: _Translator.negate,
    exp.Not: _Translator.not_,
    exp.And: _Translator.logical,
    exp.Or: _Translator.logical,
    exp.Is: _Translator.is_,
    exp.NullSafeEQ: _Translator.null_safe,
    exp.NullSafeNEQ: _Translator.null_safe,
    exp.In: _Translator.in_,
    exp.Between: _Translator.between,
    exp.Like: _Translator.like,
    exp.ILike: _Translator.like,
    exp.Escape: _Translator.escape,
    exp.Cast: _Translator.cast,
    exp.Case: _Translator.case,
    exp.Round: _Translator.round,
    exp.Substring: _Translator.substring,
    exp.Trim: _Translator.trim,
    exp.Replace: _Translator.replace,
    exp.Coalesce: _Translator.coalesce,
    exp.Nullif: _Translator.nullif,
    exp.Concat: _Translator.concat,
    exp.DPipe: _Translator.concat,
    **{k: _Translator.compare for k in _COMPARISONS},
    **{k: _Translator.arithmetic for k in _ARITHMETIC},
    **{k: _Translator.unary_function for k in _UNARY_FUNCTIONS},
}


def _translate(text: str, schema: pa.Schema) -> tuple[_Translator, _Typed]:
    translator, _tree, result = _parse_and_translate(text, schema)
    return translator, result


def _parse_and_translate(text: str, schema: pa.Schema) -> tuple[_Translator, exp.Expr, _Typed]:
    """The translator, the syntax tree of ``text`` and its translation."""
    if not isinstance(text, str):
        raise InvalidExpressionError(
            f"expected a SQL string or a pyarrow.compute.Expression, got {type(text).__name__}"
        )
    translator = _Translator(text, schema)
    try:
        tree = parse_sql_tree(text)
        return translator, tree, translator.translate(tree)
    except RecursionError as e:
        raise InvalidExpressionError(f"expression is nested too deeply: {text[:80]!r}...") from e


def _arithmetic_operands(left: _Typed, right: _Typed, subtract: bool) -> tuple[_Typed, _Typed]:
    """Operands of + - * / in types that hold both, where Arrow's own choice does not:
    Arrow adds an integer to a float in float32 when the float is float32, and adds
    a uint64 to an integer literal in int64: both fail on ordinary values (ids above
    2^24, uint64 values at or above 2^63). So an integer column beside a float is
    computed in float64 (beyond 2^53 rounded, as in SQL engines), an integer literal
    in the float's type when it holds it exactly, and a non-negative integer
    literal added to, multiplying or dividing a uint64 operand is a uint64. Not in a
    subtraction: there uint64 would fail on every value below the literal, Arrow's
    int64 only on values at or above 2^63 (docs/expressions.md)."""
    if pa.types.is_integer(left.type) and pa.types.is_floating(right.type):
        return _int_beside_float(left, right)
    if pa.types.is_floating(left.type) and pa.types.is_integer(right.type):
        right, left = _int_beside_float(right, left)
        return left, right
    unsigned = pa.uint64()
    if subtract:
        return left, right
    # _coerce re-types a literal only where its value is kept (not a negative one).
    if left.type == unsigned:
        return left, _coerce(right, unsigned)
    if right.type == unsigned:
        return _coerce(left, unsigned), right
    return left, right


def _int_beside_float(integer: _Typed, floating: _Typed) -> tuple[_Typed, _Typed]:
    """(integer, floating) in one float type: an integer literal the float's type
    holds exactly takes that type (``f32 * 10`` stays float32, as in SQL engines);
    otherwise both are float64."""
    retyped = _coerce(integer, floating.type)
    if retyped.type == floating.type:
        return retyped, floating
    return _as_float64(integer), _as_float64(floating)
