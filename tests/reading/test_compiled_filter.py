"""One compiled filter (s3ddb.expressions.compiled): SQL text is parsed once for the
predicate, the pruning and the index terms; a pyarrow Expression filter is pruned by
statistics and answered by a BTREE index as the same filter in SQL text is, returns
the same rows, and prunes only by what it is sure of (an unknown function, a NULL in
an ``is_in`` set, NaN counted as NULL)."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import s3ddb
import s3ddb.expressions._sql as sql_module
from s3ddb.expressions import parse_predicate
from s3ddb.expressions._arrow_tree import expression_tree
from s3ddb.expressions.compiled import compile_filter
from s3ddb.format import datafile
from s3ddb.format.parquet_source import ParquetSource
from s3ddb.index.query import plan_indexed_scan
from s3ddb.scan import fragment_may_match

FRAGMENTS, ROWS, GROUP = 4, 1000, 250  # 16 row groups in all
START = dt.datetime(2024, 1, 1)


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datafile, "DEFAULT_ROW_GROUP_SIZE", GROUP)


def _table() -> pa.Table:
    ids = np.arange(FRAGMENTS * ROWS, dtype=np.int64)
    return pa.table(
        {
            "id": pa.array(ids),
            # A permutation: its row-group statistics prune nothing, its index does.
            "k": pa.array([None if i % 500 == 7 else (i * 7919) % 4000 for i in ids], pa.int64()),
            "s": pa.array([f"v{i:06d}" for i in ids]),
            "x": pa.array([float("nan") if i % 100 == 3 else i / 2 for i in ids]),
            "maybe": pa.array([None if i < 500 else int(i) for i in ids], pa.int64()),
            "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(i) // 100) for i in ids]),
            "ts": pa.array([START + dt.timedelta(minutes=int(i)) for i in ids], pa.timestamp("us")),
        }
    )


@pytest.fixture
def ds(tmp_path: Path) -> s3ddb.Dataset:
    return s3ddb.write_dataset(_table(), str(tmp_path / "ds"), max_rows_per_file=ROWS)


@pytest.fixture
def groups_read(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, int]]:
    """The (data file, row group) pairs of every column read from now on."""
    read: set[tuple[str, int]] = set()
    original = ParquetSource.read

    def spy(self: ParquetSource, groups: list[int], names: list[str], *args: Any) -> pa.Table:
        if names:
            read.update((self.where, g) for g in groups)
        return original(self, groups, names, *args)

    monkeypatch.setattr(ParquetSource, "read", spy)
    return read


def _read(ds: s3ddb.Dataset, filter: Any, read: set[tuple[str, int]]) -> tuple[pa.Table, int]:
    """The rows ``filter`` keeps and how many row groups the read touched."""
    read.clear()
    table = ds.to_table(filter=filter)
    return table, len(read)


def _expected(ds: s3ddb.Dataset, filter: Any) -> pa.Table:
    """The rows by no pruning and no index: every row read, the filter applied after."""
    return ds.to_table().filter(parse_predicate(filter, ds.schema))


def _same(got: pa.Table, expected: pa.Table) -> bool:
    """Equal rows in equal order (NaN equal to NaN, unlike Table.equals)."""

    def rows(table: pa.Table) -> list[tuple[Any, ...]]:
        return [
            tuple("NaN" if isinstance(v, float) and v != v else v for v in row.values())
            for row in table.to_pylist()
        ]

    return got.schema == expected.schema and rows(got) == rows(expected)


def _ts(minutes: int) -> pa.Scalar:
    return pa.scalar(START + dt.timedelta(minutes=minutes), pa.timestamp("us"))


# (SQL text, the same filter as a pyarrow Expression, whether statistics prune it)
SHAPES: list[tuple[str, pc.Expression, bool]] = [
    ("id = 1234", pc.field("id") == 1234, True),
    ("1234 = id", pc.scalar(1234) == pc.field("id"), True),
    ("id < 300", pc.field("id") < 300, True),
    ("id BETWEEN 1990 AND 2010", (pc.field("id") >= 1990) & (pc.field("id") <= 2010), True),
    ("id IN (5, 3500)", pc.field("id").isin([5, 3500]), True),
    ("maybe IS NULL", pc.field("maybe").is_null(), True),
    ("maybe IS NOT NULL", pc.field("maybe").is_valid(), True),  # two groups of NULLs only
    ("id >= 3000 AND s > 'v0'", (pc.field("id") >= 3000) & (pc.field("s") > "v0"), True),
    ("id < 100 OR id >= 3900", (pc.field("id") < 100) | (pc.field("id") >= 3900), True),
    ("NOT (id < 3000)", ~(pc.field("id") < 3000), False),  # NOT prunes nothing
    ("s = 'v002500'", pc.field("s") == "v002500", True),
    ("s < 'v000100'", pc.field("s") < "v000100", True),
    ("d = DATE '2024-01-05'", pc.field("d") == pa.scalar(dt.date(2024, 1, 5)), True),
    ("x > 1900.0", pc.field("x") > 1900.0, True),
    # Timestamps are not pruned by statistics (SQL text neither); rows still equal.
    (
        "ts >= TIMESTAMP '2024-01-01 10:00:00' AND ts < TIMESTAMP '2024-01-01 10:05:00'",
        (pc.field("ts") >= _ts(600)) & (pc.field("ts") < _ts(605)),
        False,
    ),
]


@pytest.mark.parametrize(("text", "expr", "prunes"), SHAPES, ids=[s[0] for s in SHAPES])
def test_an_expression_filter_reads_what_the_sql_text_reads_and_returns_the_same_rows(
    ds: s3ddb.Dataset, groups_read: set[tuple[str, int]], text: str, expr: pc.Expression,
    prunes: bool,
) -> None:  # fmt: skip
    _everything, full = _read(ds, None, groups_read)
    assert full == FRAGMENTS * ROWS // GROUP
    by_text, text_groups = _read(ds, text, groups_read)
    by_expr, expr_groups = _read(ds, expr, groups_read)
    expected = _expected(ds, text)
    assert _same(by_text, expected) and _same(by_expr, expected)
    assert expected.num_rows > 0
    assert ds.count_rows(expr) == ds.count_rows(text) == expected.num_rows
    assert expr_groups == text_groups
    assert expr_groups < full if prunes else expr_groups == full
    # Fragments: the same are skipped by their statistics in the manifest.
    schema = ds.manifest.schema

    def opened(filter: Any) -> list[int]:
        may_match = compile_filter(filter, ds.schema).may_match
        return [f.id for f in ds.manifest.fragments if fragment_may_match(f, schema, may_match)]

    assert opened(expr) == opened(text)


def test_an_unknown_function_prunes_by_the_terms_beside_it_and_never_drops_a_row(
    ds: s3ddb.Dataset, groups_read: set[tuple[str, int]]
) -> None:
    _everything, full = _read(ds, None, groups_read)
    long_name = pc.utf8_length(pc.field("s")) == 7
    # AND: the known term prunes, the unknown one is evaluated on the rows read.
    anded = (pc.field("id") < 300) & long_name
    table, groups = _read(ds, anded, groups_read)
    assert groups == 2 and _same(table, _expected(ds, "id < 300 AND length(s) = 7"))
    # OR with an unknown branch: nothing pruned.
    ored = (pc.field("id") < 300) | (pc.utf8_length(pc.field("s")) > 7)
    table, groups = _read(ds, ored, groups_read)
    assert groups == full and _same(table, _expected(ds, "id < 300 OR length(s) > 7"))
    # Unknown alone, a cast, arithmetic of the column: nothing pruned, rows correct.
    for expr, text in [
        (pc.utf8_length(pc.field("s")) > 7, "length(s) > 7"),
        (pc.field("id").cast(pa.int32()) == 7, "CAST(id AS INT) = 7"),
        (pc.field("id") * 2 == 14, "id * 2 = 14"),
        (pc.field("id") == 7.0, "id = 7.0"),  # compared as float64: not pruned
    ]:
        table, groups = _read(ds, expr, groups_read)
        assert groups == full, expr
        assert _same(table, _expected(ds, text)), expr
    # and_not: its left side prunes.
    table, groups = _read(ds, pc.and_not(pc.field("id") < 300, pc.field("id") == 3), groups_read)
    assert groups == 2 and table.num_rows == 299


def test_only_what_is_sure_prunes_nulls_in_sets_and_nan_as_null(
    ds: s3ddb.Dataset, groups_read: set[tuple[str, int]]
) -> None:
    _everything, full = _read(ds, None, groups_read)
    # is_in matching NULL keeps the rows whose value is NULL (ids 0..499): the groups
    # of NULLs must be read although no listed value is in them.
    with_null = pc.field("maybe").isin(pa.array([3999, None], pa.int64()))
    table, groups = _read(ds, with_null, groups_read)
    assert table.num_rows == 501 and _same(table, _expected(ds, with_null))
    assert groups == full
    skipping = pc.is_in(pc.field("maybe"), pa.array([3999, None], pa.int64()), skip_nulls=True)
    table, groups = _read(ds, skipping, groups_read)
    assert table.column("id").to_pylist() == [3999] and groups == 1
    # nan_is_null: NaN rows (every group has some) match, statistics count no NaN.
    nan_or_null = pc.field("x").is_null(nan_is_null=True)
    table, groups = _read(ds, nan_or_null, groups_read)
    assert table.num_rows == FRAGMENTS * ROWS // 100 and groups == full
    # NaN literal: nothing pruned on it, no error.
    table, _groups = _read(ds, pc.field("x") == float("nan"), groups_read)
    assert table.num_rows == 0


def test_an_expression_filter_uses_the_btree_index(
    ds: s3ddb.Dataset, groups_read: set[tuple[str, int]]
) -> None:
    _everything, full = _read(ds, None, groups_read)
    # k's statistics prune nothing: without the index every group is read.
    _table, groups = _read(ds, pc.field("k") == 1234, groups_read)
    assert groups == full
    ds.create_scalar_index("k")
    ds.create_scalar_index("ts")
    store = ds.handler.store
    cases: list[tuple[pc.Expression, str]] = [
        (pc.field("k") == 1234, "k = 1234"),
        (pc.field("k").isin([5, 77, 3999]), "k IN (5, 77, 3999)"),
        ((pc.field("k") >= 100) & (pc.field("k") < 103), "k >= 100 AND k < 103"),
        ((pc.field("k") == 42) & (pc.utf8_length(pc.field("s")) == 7), "k = 42 AND length(s) = 7"),
        (pc.scalar(2) > pc.field("k"), "2 > k"),
        ((pc.field("ts") >= _ts(10)) & (pc.field("ts") <= _ts(12)), "ts BETWEEN "
         "TIMESTAMP '2024-01-01 00:10:00' AND TIMESTAMP '2024-01-01 00:12:00'"),
    ]  # fmt: skip
    for expr, text in cases:
        scan = plan_indexed_scan(store, ds.manifest, compile_filter(expr, ds.schema))
        assert scan is not None, expr
        text_scan = plan_indexed_scan(store, ds.manifest, compile_filter(text, ds.schema))
        assert text_scan is not None and scan.offsets.keys() == text_scan.offsets.keys(), expr
        for fragment in scan.offsets:
            assert (scan.offsets[fragment] == text_scan.offsets[fragment]).all(), expr
        table, groups = _read(ds, expr, groups_read)
        expected = _expected(ds, text)
        assert expected.num_rows > 0 and _same(table, expected), expr
        assert groups <= 4 < full, (expr, groups)  # one row group per matching row
        assert ds.count_rows(expr) == expected.num_rows
    # Not answered by the index: OR, NOT, a NULL matched by is_in (NULL keys are not
    # in the index), a float literal (compared as float64).
    for expr in [
        (pc.field("k") == 1) | (pc.field("k") == 2),
        ~(pc.field("k") == 1),
        pc.field("k").isin(pa.array([1, None], pa.int64())),
        pc.field("k") == 1.0,
    ]:
        assert plan_indexed_scan(store, ds.manifest, compile_filter(expr, ds.schema)) is None
        table, _groups = _read(ds, expr, groups_read)
        assert _same(table, _expected(ds, expr)), expr
    assert ds.count_rows(pc.field("k").isin(pa.array([1, None], pa.int64()))) == 9  # 8 NULLs


def test_delete_and_update_with_an_expression_prune_fragments(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(), uri, max_rows_per_file=ROWS)
    wanted = ds.manifest.fragments[1]
    for fragment in ds.manifest.fragments:  # only fragment 1 may be opened
        if fragment.id != wanted.id:
            os.remove(Path(uri) / "data" / fragment.files[0].path)
    assert ds.count_rows(pc.field("id") == 1234) == 1
    assert ds.delete(pc.field("id") == 1234) == {"num_deleted_rows": 1}
    assert ds.update({"s": "'changed'"}, where=pc.field("id").isin([1500, 1501])) == {
        "num_rows_updated": 2
    }
    assert ds.to_table(filter=pc.field("s") == "changed").column("id").to_pylist() == [1500, 1501]
    with pytest.raises(FileNotFoundError):
        ds.count_rows(pc.utf8_length(pc.field("s")) == 1)  # no pruning: every fragment


def test_sql_text_is_parsed_once_per_read_and_delete(
    ds: s3ddb.Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds.create_scalar_index("id")
    calls: list[str] = []
    original = sql_module.parse_sql_tree

    def counted(text: str) -> Any:
        calls.append(text)
        return original(text)

    for module in list(sys.modules.values()):  # wherever it was imported
        if getattr(module, "parse_sql_tree", None) is original:
            monkeypatch.setattr(module, "parse_sql_tree", counted)
    text = "id IN (3, 5) AND s > 'v0'"
    assert ds.to_table(filter=text).column("id").to_pylist() == [3, 5]
    assert calls == [text]
    assert ds.count_rows("id < 10") == 10 and len(calls) == 2
    assert ds.delete("id = 3") == {"num_deleted_rows": 1} and len(calls) == 3


def test_expression_trees_read_exactly_or_not_at_all() -> None:
    for expr in [
        (pc.field("a") == 1) & pc.field("b").isin(["x", 'y"z', "and (c"]),
        pc.field("s", "t") > pa.scalar(dt.date(2024, 1, 1)),
        pc.if_else(pc.field("a").is_valid(), pc.field("a") > 1, pa.scalar(None, pa.bool_())),
        pc.starts_with(pc.field("b"), "ab", ignore_case=True),
    ]:
        tree = expression_tree(expr)
        assert tree is not None, expr
    # A reference by position has no name to read: no tree, no pruning.
    assert expression_tree(pc.field(0) == 1) is None
    # A long OR chain (nesting thousands deep) is read without recursion.
    chain = pc.field("a") == 0
    for i in range(1, 3000):
        chain = chain | (pc.field("a") == i)
    assert expression_tree(chain) is not None


def test_statistics_estimate_the_share_of_matching_rows_only_where_they_say_all() -> None:
    """``match_share``: values taken as spread evenly between min and max; integers
    counted, floats measured; None where the statistics cannot tell or the filter
    holds a term they do not read."""
    from s3ddb.format.rowgroups import ColumnStats

    schema = pa.schema(
        [("k", pa.int32()), ("x", pa.float64()), ("s", pa.string()), ("t", pa.timestamp("us"))]
    )
    stats = {
        "k": ColumnStats(0, 999, 0, 1000),
        "x": ColumnStats(0.0, 1.0, 250, 750),  # a quarter NULL
        "s": ColumnStats("a", "z", 0, 1000),
        "t": ColumnStats(dt.datetime(2026, 1, 1), dt.datetime(2026, 2, 1), 0, 1000),
    }

    def share(text: str) -> float | None:
        estimate = compile_filter(text, schema).match_share
        return None if estimate is None else estimate(stats, 1000)

    assert share("k < 10") == pytest.approx(0.01)
    assert share("k <= 9") == pytest.approx(0.01)
    assert share("k >= 990") == pytest.approx(0.01)
    assert share("k > 989") == pytest.approx(0.01)
    assert share("k = 5") == pytest.approx(0.001)
    assert share("k IN (1, 2, 2, 5000)") == pytest.approx(0.002)  # 5000 lies outside
    assert share("k BETWEEN 100 AND 199") == pytest.approx(0.1)  # one range, not two
    assert share("k >= 100 AND k < 200 AND k > 50") == pytest.approx(0.1)
    assert share("k = 5000") == 0.0  # the statistics rule it out
    assert share("x < 0.5") == pytest.approx(0.375)  # half of the three quarters not NULL
    assert share("x IS NULL") == pytest.approx(0.25)
    assert share("x = 0.5") == 0.0  # one point of a continuum
    assert share("k < 10 AND x < 0.5") == pytest.approx(0.00375)
    assert share("k < 10 OR k >= 990") == pytest.approx(0.02)
    # What they cannot tell: no estimate at all, rather than one of part of the filter.
    assert share("s < 'm'") is None  # text
    assert share("t < TIMESTAMP '2026-01-15 00:00:00'") is None  # not numbers
    assert share("k < 10 AND s LIKE 'a%'") is None  # a term without a condition
    assert share("k < 10 OR x + 1 > 2") is None

    def arrow_share(expression: pc.Expression) -> float | None:
        estimate = compile_filter(expression, schema).match_share
        return None if estimate is None else estimate(stats, 1000)

    # The same from pyarrow Expressions.
    assert arrow_share(pc.field("k") < 10) == pytest.approx(0.01)
    assert arrow_share((pc.field("k") >= 100) & (pc.field("k") < 200)) == pytest.approx(0.1)
    assert arrow_share((pc.field("k") < 10) | pc.field("x").is_null()) == pytest.approx(0.26)
    assert arrow_share(pc.field("k").isin([1, 2])) == pytest.approx(0.002)
    assert arrow_share((pc.field("k") < 10) & pc.match_substring(pc.field("s"), "a")) is None
    assert arrow_share(pc.and_not(pc.field("k") < 10, pc.field("x") < 0.5)) is None
