"""The read path's pruning never changes a result: fragment statistics (kept in the
manifest) and row-group statistics only skip data no matching row can be in.

A property test compares filtered scans with the unpruned scan (every row read, the
filter applied after) over random data (NULLs, NaN, long and non-ASCII strings,
dates, booleans), random filters, deletions, updates of some columns, schema
evolution, compaction, and fragments with and without statistics. Other tests pin
the statistics' contents, what a point lookup opens (local files and the local AWS
endpoint), and that the statistics stay correct through every kind of change.
"""

from __future__ import annotations

import datetime as dt
import gc
import os
import pickle
import random
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import s3ddb
import s3ddb.format.datafile
from s3ddb.errors import InvalidInputError
from s3ddb.expressions import parse_predicate
from s3ddb.expressions.compiled import compile_filter
from s3ddb.format.fragment_metadata import FragmentMetadata
from s3ddb.format.stats import STRING_PREFIX, fragment_column_stats
from s3ddb.fragment import write_fragments
from s3ddb.operations import Append
from s3ddb.scan import fragment_may_match
from tests.conftest import TEST_BUCKET, TEST_TABLE
from tests.support.endpoints import endpoint

_WORDS = ["a", "b", "zz", "é", "中文", "\U0001f600", "x'y", "prefix_shared_by_long_values_"]
_EPOCH = dt.date(2020, 1, 1)


def _strings(rng: random.Random, n: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.1:
            out.append(None)
            continue
        parts = [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))]
        out.append("".join(parts) + str(rng.randint(0, 30)))
    return out


def _batch(rng: random.Random, start: int, n: int) -> pa.Table:
    xs, days = [], range(n)
    for _ in days:
        r = rng.random()
        xs.append(None if r < 0.08 else float("nan") if r < 0.15 else rng.uniform(-50, 50))
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n), pa.int64()),
            "k": pa.array([rng.choice([None, *range(-20, 21)]) for _ in days], pa.int32()),
            "x": pa.array(xs, pa.float64()),
            "s": pa.array(_strings(rng, n), pa.string()),
            "d": pa.array([_EPOCH + dt.timedelta(rng.randint(0, 60)) for _ in days], pa.date32()),
            "b": pa.array([rng.random() < 0.3 for _ in days], pa.bool_()),
        }
    )  # fmt: skip


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _literal(rng: random.Random, column: str, t: pa.DataType, sample: list[Any]) -> str:
    values = [v for v in sample if v is not None and not (isinstance(v, float) and v != v)]
    value = rng.choice(values) if values and rng.random() < 0.7 else None
    if pa.types.is_string(t):
        text = value if value is not None else rng.choice(_WORDS) + str(rng.randint(0, 30))
        return _quote(text[: rng.randint(0, len(text))] if rng.random() < 0.2 else text)
    if pa.types.is_date32(t):
        day = value if value is not None else _EPOCH + dt.timedelta(days=rng.randint(-5, 70))
        return f"DATE '{day.isoformat()}'"
    if pa.types.is_boolean(t):
        return rng.choice(["true", "false"])
    if pa.types.is_floating(t):
        number = value if value is not None else rng.uniform(-60, 60)
        return repr(round(number + rng.choice([0, 0, 0.5, -0.5]), 3))
    number = value if value is not None else rng.randint(-30, 3000)
    return str(number + rng.choice([0, 0, 1, -1]))


def _edges(rng: random.Random, values: list[Any]) -> list[Any]:
    """The min and max of a few 64-row windows: the bounds statistics record for row
    groups, where an off-by-one in pruning would show."""
    out = []
    for _ in range(3):
        start = rng.randrange(0, max(1, len(values)), 64) if values else 0
        window = [
            v
            for v in values[start : start + 64]
            if v is not None and not (isinstance(v, float) and v != v)
        ]
        if window:
            out += [min(window), max(window)]
    return out


def _term(rng: random.Random, table: pa.Table) -> str:
    column = rng.choice(table.column_names)
    t = table.schema.field(column).type
    values = table.column(column).to_pylist()
    sample = values[:: max(1, table.num_rows // 50)]
    if not pa.types.is_boolean(t):
        sample = _edges(rng, values) * 3 + sample
    kind = rng.random()
    if kind < 0.1:
        return f"{column} IS {'NOT ' if rng.random() < 0.5 else ''}NULL"
    if pa.types.is_boolean(t):
        return f"{column} = {_literal(rng, column, t, sample)}"
    if kind < 0.2:
        low, high = sorted(
            [_literal(rng, column, t, sample), _literal(rng, column, t, sample)],
            key=lambda v: v,
        )
        return f"{column} BETWEEN {low} AND {high}"
    if kind < 0.3:
        items = ", ".join(_literal(rng, column, t, sample) for _ in range(rng.randint(1, 3)))
        return f"{column} IN ({items})"
    op = rng.choice(["=", "<", "<=", ">", ">=", "!=", "<>"])
    literal = _literal(rng, column, t, sample)
    return f"{column} {op} {literal}" if rng.random() < 0.8 else f"{literal} {op} {column}"


def _filter(rng: random.Random, table: pa.Table) -> str:
    text = _term(rng, table)
    for _ in range(rng.randint(0, 2)):
        joiner = rng.choice(["AND", "AND", "OR"])
        text = f"{text} {joiner} {_term(rng, table)}"
    return f"NOT ({text})" if rng.random() < 0.05 else text


def _without_stats(uri: str, so: dict[str, Any] | None, table: pa.Table) -> None:
    """Append ``table`` as fragments without statistics (as an older writer leaves)."""
    ds = s3ddb.dataset(uri, storage_options=so)
    written = write_fragments(table, uri, schema=ds.schema, storage_options=so)
    fragments = tuple(replace(f, stats=()) for f in written)
    s3ddb.Dataset.commit(uri, Append(fragments), read_version=ds.version, storage_options=so)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows as tuples, NaN as a marker (NaN != NaN would fail equal rows)."""
    nan = "<NaN>"
    return [
        tuple(nan if isinstance(v, float) and v != v else v for v in row.values())
        for row in table.to_pylist()
    ]


def _check(ds: s3ddb.Dataset, text: str, everything: pa.Table) -> None:
    """``ds`` filtered by ``text`` (read, counted and streamed) holds exactly the rows
    of ``everything`` (``ds.to_table()``: no filter, nothing pruned) that match."""
    expected = _rows(everything.filter(parse_predicate(text, ds.schema)))
    assert _rows(ds.to_table(filter=text)) == expected, text
    assert ds.count_rows(text) == len(expected), text
    streamed = ds.scanner(filter=text, readahead_bytes=1, fragment_readahead=2).to_table()
    assert _rows(streamed) == expected, text


def _random_history(rng: random.Random, uri: str, so: dict[str, Any] | None) -> s3ddb.Dataset:
    """A dataset after random appends (some without statistics) and random changes."""
    start = 0
    for step in range(rng.randint(3, 5)):
        n = rng.randint(1, 400)
        batch = _batch(rng, start, n)
        start += n
        if step and rng.random() < 0.3:
            _without_stats(uri, so, batch)
        else:
            rows_per_file = rng.randint(50, 400)
            s3ddb.write_dataset(
                batch, uri, mode="append", max_rows_per_file=rows_per_file, storage_options=so
            )
    ds = s3ddb.dataset(uri, storage_options=so)
    changes = ["delete", "update_columns", "update_rows", "add", "rename", "widen", "drop"]
    changes += ["compact"]
    for change in rng.sample(changes, rng.randint(2, 5)):
        table = ds.to_table()
        if change == "delete":
            ds.delete(_filter(rng, table))
        elif change == "update_columns" and "k" in ds.schema.names:
            ds.update({"k": "k + 100"}, _term(rng, table), rewrite="columns")
        elif change == "update_rows" and "s" in ds.schema.names:
            ds.update({"s": "'updated'"}, _term(rng, table), rewrite="rows")
        elif change == "add":
            ds.add_columns({"id2": "id * 2"})
        elif change == "rename" and "x" in ds.schema.names:
            ds.alter_columns({"path": "x", "name": "x_renamed"})
        elif change == "widen" and "k" in ds.schema.names:
            ds.alter_columns({"path": "k", "data_type": pa.int64()})
        elif change == "drop" and "b" in ds.schema.names:
            ds.drop_columns(["b"])
        elif change == "compact":
            ds.optimize.compact_files(target_rows_per_fragment=rng.randint(100, 1000))
    if rng.random() < 0.5:
        # Rows appended after the schema changed (their files hold the new field ids).
        batch = _batch(rng, start, rng.randint(1, 200))
        columns = {"x_renamed": batch.column("x"), "id2": pc.multiply(batch.column("id"), 2)}
        columns.update({n: batch.column(n) for n in batch.column_names})
        table = pa.table({n: columns[n] for n in ds.schema.names}).cast(ds.schema)
        s3ddb.write_dataset(table, uri, mode="append", storage_options=so)
    return s3ddb.dataset(uri, storage_options=so)


@pytest.mark.parametrize("seed", range(12))
def test_pruning_never_drops_a_matching_row(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small row groups, so that row-group pruning has something to decide.
    monkeypatch.setattr(s3ddb.format.datafile, "DEFAULT_ROW_GROUP_SIZE", 64)
    rng = random.Random(seed)
    ds = _random_history(rng, str(tmp_path / "ds"), None)
    table = ds.to_table()  # read once: ds stays at one version
    for _ in range(30):
        _check(ds, _filter(rng, table), table)


@pytest.mark.parametrize(("seed", "s3"), [(100, "moto"), (101, "moto"), (102, "seaweedfs")])
def test_pruning_never_drops_a_matching_row_on_the_endpoint(
    seed: int, s3: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on S3 + DynamoDB, every data file read by ranges (footer, then the
    coalesced column chunks), as large files are; on moto, and on SeaweedFS's S3 (a
    real store's ranged GETs) with moto's DynamoDB."""
    import s3ddb.format.parquet_source as source

    aws = endpoint(request, s3)

    monkeypatch.setattr(s3ddb.format.datafile, "DEFAULT_ROW_GROUP_SIZE", 64)
    monkeypatch.setattr(source, "WHOLE_READ_MAX_BYTES", 0)
    monkeypatch.setattr(source, "HOLE_BYTES", 256)  # some chunks coalesced, some not
    rng = random.Random(seed)
    uri = f"s3+ddb://{TEST_BUCKET}/t-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    ds = _random_history(rng, uri, aws.storage_options())
    table = ds.to_table()  # read once: ds stays at one version
    for _ in range(15):
        _check(ds, _filter(rng, table), table)


def _sorted(uri: str, so: dict[str, Any] | None, fragments: int = 5, rows: int = 1000) -> None:
    for i in range(fragments):
        ids = np.arange(i * rows, (i + 1) * rows)
        table = pa.table({"id": ids, "s": [f"v{j:06d}" for j in ids]})
        s3ddb.write_dataset(table, uri, mode="append", storage_options=so)


def test_statistics_are_recorded_compact_and_round_trip(tmp_path: Path) -> None:
    long_values = ["\U0001f600" * 20, "m" * 40 + "a", "m" * 40 + "z", None]
    table = pa.table(
        {
            "u": pa.array([0, 2**64 - 1, 5, None], pa.uint64()),
            "s": pa.array(long_values, pa.string()),
            "n": pa.array([None] * 4, pa.int32()),
            "x": pa.array([float("nan"), 1.5, -2.0, None]),
            "l": pa.array([[1], [2], [], None], pa.list_(pa.int64())),
            "top": pa.array(["\U0010ffff" * 20, "a", "b", "c"]),
        }
    )
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(table, uri)
    fragment = ds.manifest.fragments[0]
    for copy in (
        FragmentMetadata.from_pb(fragment.to_pb()),
        pickle.loads(pickle.dumps(fragment)),
        FragmentMetadata.from_json(fragment.to_json()),
    ):
        assert copy.stats == fragment.stats
    stats = fragment_column_stats(fragment, ds.manifest.schema)
    assert set(stats) == {"u", "s", "n", "x", "top"}  # a list column has none
    assert (stats["top"].min, stats["top"].max) == ("a", None)  # no short upper bound
    assert (stats["u"].min, stats["u"].max) == (0, None)  # over sint64: left out
    assert stats["n"].null_count == 4 and stats["n"].min is None
    assert (stats["x"].min, stats["x"].max, stats["x"].null_count) == (-2.0, 1.5, 1)
    low, high = stats["s"].min, stats["s"].max
    assert len(low) <= STRING_PREFIX and len(high) <= STRING_PREFIX
    present = [v for v in long_values if v is not None]
    assert all(low <= v for v in present) and all(v < high for v in present)
    # No filter on these bounds drops a row.
    for text in [f"s = '{'m' * 40}z'", "s > '\U0001f600'", "u > 6", "x < -1.9"]:
        assert ds.to_table(filter=text).num_rows == 1, text
    assert len(fragment.to_pb().SerializeToString()) < 300


def _prefix(uri: str) -> str:
    return "/" + uri.split("://", 1)[1].split("?", 1)[0] + "/data/"


def _data_reads(aws: Any, uri: str) -> list[str]:
    """The data files of ``uri`` read since the request log was cleared."""
    return sorted(
        {
            r.path
            for r in aws.requests
            if r.operation == "GetObject" and r.path.startswith(_prefix(uri))
        }
    )


def test_point_lookup_opens_only_the_fragment_whose_statistics_admit_the_key(
    location: tuple[str, dict[str, Any] | None], request: pytest.FixtureRequest
) -> None:
    uri, so = location
    _sorted(uri, so)
    ds = s3ddb.dataset(uri, storage_options=so)
    wanted = ds.manifest.fragments[3]
    pruner = compile_filter("id = 3500", ds.schema).may_match
    admitted = [
        f.id for f in ds.manifest.fragments if fragment_may_match(f, ds.manifest.schema, pruner)
    ]
    assert admitted == [wanted.id]
    if so is None:
        # The other fragments' files are gone: the lookup never opens them...
        for fragment in ds.manifest.fragments:
            if fragment.id != wanted.id:
                os.remove(Path(uri) / "data" / fragment.files[0].path)
        assert ds.to_table(filter="id = 3500").to_pylist() == [{"id": 3500, "s": "v003500"}]
        assert ds.count_rows("id >= 3990 AND id < 3999") == 9
        with pytest.raises(FileNotFoundError):
            ds.to_table()  # ...while a full scan does
        return
    aws = request.getfixturevalue("aws")
    aws.clear_requests()
    assert ds.to_table(filter="id = 3500").to_pylist() == [{"id": 3500, "s": "v003500"}]
    assert _data_reads(aws, uri) == [f"{_prefix(uri)}{wanted.files[0].path}"]
    aws.clear_requests()
    assert ds.count_rows("s = 'v004999'") == 1
    assert len(_data_reads(aws, uri)) == 1


def test_statistics_stay_correct_through_changes(
    location: tuple[str, dict[str, Any] | None],
) -> None:
    """Deletes keep bounds (of a superset); an update of some columns, a rename, a cast,
    compaction and a concurrent append never leave a bound that hides a row; time
    travel reads each earlier version as it was."""
    uri, so = location
    for i in range(3):
        ids = np.arange(i * 100, (i + 1) * 100)
        table = pa.table(
            {"id": ids, "k": pa.array(ids, pa.int32()), "s": [f"v{j:06d}" for j in ids]}
        )
        s3ddb.write_dataset(table, uri, mode="append", storage_options=so)
    ds = s3ddb.dataset(uri, storage_options=so)
    stale = s3ddb.dataset(uri, storage_options=so)  # pinned before the changes
    ds.delete("id < 50")
    v_deleted = ds.version
    assert ds.count_rows("id = 10") == 0 and ds.count_rows("id = 60") == 1
    ds.update({"k": "k + 100000"}, "id >= 100 AND id < 200", rewrite="columns")
    v_updated = ds.version
    assert ds.count_rows("k >= 100000") == 100
    assert ds.count_rows("k >= 100 AND k < 200") == 0  # the old bounds are not trusted
    # A concurrent append, committed from a Dataset pinned before the delete.
    stale.insert(pa.table({"id": [7], "k": pa.array([7], pa.int32()), "s": ["late"]}))
    ds = s3ddb.dataset(uri, storage_options=so)
    assert ds.count_rows("k = 7") == 1 and ds.count_rows("k >= 100000") == 100
    ds.alter_columns({"path": "s", "name": "label"})
    assert ds.to_table(filter="label = 'v000260'").column("id").to_pylist() == [260]
    ds.alter_columns({"path": "k", "data_type": pa.int64()})
    assert ds.count_rows("k >= 100000") == 100
    assert ds.count_rows("k = 150") == 0 and ds.count_rows("k = 250") == 1
    ds.optimize.compact_files(target_rows_per_fragment=1000)
    ds = s3ddb.dataset(uri, storage_options=so)
    assert len(ds.manifest.fragments) == 1 and ds.manifest.fragments[0].stats
    assert ds.count_rows("k >= 100000") == 100
    assert ds.to_table(filter="label = 'late'").column("id").to_pylist() == [7]
    assert ds.count_rows("id < 50") == 1  # only the late row
    # Time travel: each earlier version reads as it was.
    old = s3ddb.dataset(uri, version=v_deleted, storage_options=so)
    assert old.count_rows("k >= 100 AND k < 200") == 100
    old = s3ddb.dataset(uri, version=v_updated, storage_options=so)
    assert old.count_rows("k >= 100000") == 100 and old.count_rows("id = 60") == 1


def test_delete_and_merge_insert_find_rows_through_pruning(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _sorted(uri, None, fragments=4, rows=100)
    ds = s3ddb.dataset(uri)
    fragments = ds.manifest.fragments
    # Fragments whose bounds miss the keys and the predicate are never opened.
    for fragment in fragments[:3]:
        os.remove(Path(uri) / "data" / fragment.files[0].path)
    assert ds.delete("id = 350") == {"num_deleted_rows": 1}
    source = pa.table({"id": pa.array([351, 10_000], pa.int64()), "s": ["new", "added"]})
    counts = (
        ds.merge_insert("id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(source)
    )
    assert (counts["num_updated_rows"], counts["num_inserted_rows"]) == (1, 1)
    ds = s3ddb.dataset(uri)
    found = ds.to_table(filter="id >= 349 AND id <= 352").sort_by("id")
    assert found.to_pylist() == [
        {"id": 349, "s": "v000349"}, {"id": 351, "s": "new"}, {"id": 352, "s": "v000352"},
    ]  # fmt: skip
    assert ds.count_rows("id = 10000") == 1


def test_read_ahead_budget_bounds_memory(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    n = 200_000
    for i in range(10):
        ids = np.arange(i * n, (i + 1) * n)
        s3ddb.write_dataset(pa.table({"id": ids, "x": ids * 0.5}), uri, mode="append")
    ds = s3ddb.dataset(uri)
    budget = 4 * 1024 * 1024  # the version is about 32 MiB of decoded columns
    gc.collect()  # nothing of the writes above is released while this is measured
    baseline = pa.total_allocated_bytes()
    peak = rows = 0
    for batch in ds.scanner(readahead_bytes=budget).to_batches():
        rows += batch.num_rows
        peak = max(peak, pa.total_allocated_bytes() - baseline)
    assert rows == 10 * n
    # Arrow's count is process-wide (other threads of a busy test process count too):
    # measured up to 1.3 budgets; a scan that ignored the budget would hold ~8.
    assert peak < 4 * budget, peak
    with pytest.raises(InvalidInputError, match="readahead_bytes"):
        ds.scanner(readahead_bytes=0)


def test_sum_matches_pyarrow_on_the_same_files(tmp_path: Path) -> None:
    """The scan returns exactly what reading the data files with pyarrow returns."""
    import pyarrow.dataset as pads

    uri = str(tmp_path / "ds")
    _sorted(uri, None, fragments=3, rows=500)
    ds = s3ddb.dataset(uri)
    files = [str(Path(uri) / "data" / f.files[0].path) for f in ds.manifest.fragments]
    expected = pads.dataset(files, format="parquet").to_table(filter=pc.field("id") > 777)
    got = ds.to_table(filter="id > 777")
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()


def test_ranged_reads_on_the_endpoint_read_footers_once_and_coalesce(
    aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large data files (here: every file) are read by ranges: one GET for the footer,
    then the needed column chunks, nearby ones in one request."""
    import s3ddb.format.parquet_source as source

    monkeypatch.setattr(source, "WHOLE_READ_MAX_BYTES", 0)
    name = f"t-ranged-{uuid.uuid4().hex[:12]}"
    uri = f"s3+ddb://{TEST_BUCKET}/{name}?ddbTableName={TEST_TABLE}"
    so = aws.storage_options()
    n = 300_000  # five row groups
    ids = np.arange(n)
    table = pa.table({"id": ids, "x": ids * 0.5, "s": [f"v{i}" for i in range(n)]})
    ds = s3ddb.write_dataset(table, uri, storage_options=so)

    def gets(**kwargs: Any) -> tuple[pa.Table, int]:
        aws.clear_requests()
        result = ds.to_table(**kwargs)
        return result, len(_data_reads_all(aws, uri))

    got, requests = gets(columns=["x"])
    assert got.column("x").to_pylist() == table.column("x").to_pylist()
    assert requests == 2  # footer, then the x chunks as one coalesced range
    got, requests = gets(filter="id = 200000")
    assert got.to_pylist() == [{"id": 200000, "x": 100000.0, "s": "v200000"}]
    assert requests == 3  # footer, id of one row group, then x and s of that row group
    # A filter matching in every row group: its column's coalesced read spans most of
    # the other columns' chunks too, and the second read fetches only what it lacks.
    aws.clear_requests()
    got = ds.to_table(filter="x >= 0")
    assert got.equals(table)
    sizes = sorted(r.response_bytes for r in aws.requests
                   if r.operation == "GetObject" and r.path.startswith(_prefix(uri)))  # fmt: skip
    data_file = ds.manifest.fragments[0].files[0].file_size_bytes
    assert sum(sizes) < 1.2 * data_file, (sizes, data_file)  # each byte about once
    monkeypatch.setattr(source, "HOLE_BYTES", 0)
    monkeypatch.setattr(source, "FOOTER_GUESS_BYTES", 16)  # the footer takes two GETs
    got, requests = gets(columns=["x"])
    assert got.column("x").to_pylist() == table.column("x").to_pylist()
    assert requests == 2 + 5  # one per row group's x chunk, none coalesced
    assert ds.to_table().equals(table)


def _data_reads_all(aws: Any, uri: str) -> list[str]:
    return [
        r.path
        for r in aws.requests
        if r.operation == "GetObject" and r.path.startswith(_prefix(uri))
    ]


def test_a_dotted_column_beside_a_struct_is_pruned_by_its_own_row_group_bounds(
    tmp_path: Path,
) -> None:
    """A top-level column named "a.b" and the child b of a struct a share the dotted
    path "a.b" in a Parquet footer; row groups are pruned by each column's own bounds
    (found by position, not by that path), so no matching row is skipped."""
    table = pa.table(
        {
            "a.b": pa.array([1, 2, 3], pa.int64()),
            "a": pa.array([{"b": 100}, {"b": 200}, {"b": 300}]),
        }
    )
    ds = s3ddb.write_dataset(table, str(tmp_path / "ds"))
    row = {"a.b": 2, "a": {"b": 200}}
    for text in ['"a.b" = 2', "`a.b` = 2", "a.b = 200"]:
        assert ds.to_table(filter=text).to_pylist() == [row], text
        assert ds.count_rows(filter=text) == 1, text
    assert ds.to_table(filter="a.b = 2").num_rows == 0  # unquoted: the struct's child


def _longest_or_chain() -> int:
    """The most ``id = <n>`` terms an OR chain may have (the parser's node limit)."""
    from s3ddb.expressions import MAX_EXPRESSION_NODES, parse_sql_tree

    terms = MAX_EXPRESSION_NODES // 5 + 2  # about five nodes per term
    while True:
        try:
            parse_sql_tree(" OR ".join(f"id = {i}" for i in range(terms)))
        except InvalidInputError:
            terms -= 1
            continue
        return terms


def test_the_longest_accepted_or_and_and_chains_prune_scan_count_and_delete(
    tmp_path: Path,
) -> None:
    # Pruning once recursed per term of an OR / AND chain: a few hundred terms raised
    # RecursionError from scans, counts and deletes of a filter that had compiled.
    terms = _longest_or_chain()
    assert terms > 3000
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array(range(100), pa.int64())}), str(tmp_path / "ds"),
        max_rows_per_file=10,
    )  # fmt: skip
    wanted = [25, 27, 91]
    values = wanted + list(range(1000, 1000 + terms - len(wanted)))
    or_chain = " OR ".join(f"id = {v}" for v in values)
    pruner = compile_filter(or_chain, ds.schema).may_match
    assert pruner is not None  # pruning understands the chain; it does not give up
    fragments, schema = ds.manifest.fragments, ds.manifest.schema
    opened = [f.id for f in fragments if fragment_may_match(f, schema, pruner)]
    assert len(opened) == 2  # the fragments of 20..29 and 90..99 only
    assert ds.to_table(filter=or_chain)["id"].to_pylist() == wanted
    assert ds.count_rows(or_chain) == 3

    and_chain = " AND ".join(f"id <> {v}" for v in values)
    assert ds.count_rows(and_chain) == 97
    assert compile_filter(and_chain, ds.schema).may_match is None  # <> prunes nothing
    ranges = " AND ".join(f"id >= {v % 50}" for v in range(terms))
    pruner = compile_filter(ranges, ds.schema).may_match
    assert pruner is not None
    assert len([f for f in fragments if fragment_may_match(f, schema, pruner)]) == 6
    assert ds.count_rows(ranges) == 51

    assert ds.delete(or_chain) == {"num_deleted_rows": 3}
    assert ds.count_rows() == 97 and ds.count_rows(or_chain) == 0
