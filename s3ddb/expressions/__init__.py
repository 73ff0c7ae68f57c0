"""SQL-like predicates and value expressions, compiled to pyarrow compute expressions.

Text is parsed by sqlglot (never by hand) and the syntax tree is translated, node by
node, into a :class:`pyarrow.compute.Expression` bound to a dataset schema. Every
node is type-checked as it is built, by evaluating it on an empty table of the
schema, so a type error is reported at parse time naming the fragment at fault
rather than later, deep inside a scan.

Semantics follow SQL: comparisons, ``IN``, ``BETWEEN`` and ``LIKE`` with a NULL
operand are NULL (unknown), ``AND``/``OR``/``NOT`` use three-valued (Kleene) logic,
and a filter keeps only rows where the predicate is TRUE. See ``docs/expressions.md``.
"""

from s3ddb.expressions._api import parse_predicate, parse_value_expression, referenced_columns
from s3ddb.expressions._sql import MAX_DECIMAL_PRECISION as MAX_DECIMAL_PRECISION
from s3ddb.expressions._sql import MAX_EXPRESSION_CHARS as MAX_EXPRESSION_CHARS
from s3ddb.expressions._sql import MAX_EXPRESSION_DEPTH as MAX_EXPRESSION_DEPTH
from s3ddb.expressions._sql import MAX_EXPRESSION_NODES as MAX_EXPRESSION_NODES
from s3ddb.expressions._sql import MAX_LIKE_WILDCARDS as MAX_LIKE_WILDCARDS
from s3ddb.expressions._sql import MAX_REPLACE_GROWTH as MAX_REPLACE_GROWTH
from s3ddb.expressions._sql import MAX_ROUND_DIGITS as MAX_ROUND_DIGITS
from s3ddb.expressions._sql import SUPPORTED_FUNCTIONS as SUPPORTED_FUNCTIONS
from s3ddb.expressions._sql import S3DDBDialect, parse_sql_tree

__all__ = [
    "S3DDBDialect",
    "parse_predicate",
    "parse_sql_tree",
    "parse_value_expression",
    "referenced_columns",
]
