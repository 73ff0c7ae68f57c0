"""Spark's merge with its clauses in Spark SQL and its rows written by Spark's Parquet
writer gives what the library's own ``Dataset.merge_insert`` gives: the same counts,
the same rows, the same typed refusals.

Each case is drawn from a seeded generator: a target of a few fragments (NULL keys,
a key held twice, deleted rows, a renamed column, an added column), a source
(new and existing keys, NULL keys, sometimes a key twice, sometimes a source-only
``op`` column) and a set of clauses. One copy of the target is merged by the
library, its twin by Spark, and the two are compared.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb

pyspark = pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: How many generated cases (each two merges: the library's and Spark's).
CASES = 6
SEED = 46


def _target(rng: random.Random, root: Path) -> tuple[str, str, list[str]]:
    """A target and its twin; returns their URIs and the target's column names."""
    uri = str(root / "target")
    ids = rng.sample(range(60), 40)
    per = len(ids) // 3
    for f in range(3):
        part = ids[f * per : (f + 1) * per]
        rows = {
            "id": pa.array(part, pa.int64()),
            "v": [f"t{i}" for i in part],
            "n": [None if i % 9 == 0 else i for i in part],
        }
        s3ddb.write_dataset(pa.table(rows), uri, mode="append")
    ds = s3ddb.dataset(uri)
    extra = {"id": pa.array([None, ids[0]], pa.int64()), "v": ["null-key", "again"], "n": [1, 2]}
    if rng.random() < 0.5:  # a NULL key, and a key the target holds twice
        ds.insert(pa.table(extra))
    if rng.random() < 0.7:
        ds.delete(f"id % 7 = {rng.randrange(7)}")
    names = ["id", "v", "n"]
    if rng.random() < 0.5:
        ds.alter_columns({"path": "v", "name": "w"})
        names[1] = "w"
    if rng.random() < 0.4:
        ds.add_columns({"z": "n * 2"})
        names.append("z")
    twin = str(root / "twin")
    shutil.copytree(uri, twin)
    return uri, twin, names


def _source(rng: random.Random, names: list[str], op: bool) -> pa.Table:
    keys: list[int | None] = rng.sample(range(-5, 90), rng.randrange(5, 40))
    keys += [None] * rng.randrange(3)
    if rng.random() < 0.15 and keys[0] is not None:
        keys.append(keys[0])  # a key twice: refused
    rng.shuffle(keys)
    columns: dict[str, Any] = {
        "id": pa.array(keys, pa.int64()),
        names[1]: [f"s{k}" for k in keys],
        "n": pa.array(
            [None if rng.random() < 0.1 else rng.randrange(80) for _ in keys], pa.int64()
        ),
    }
    if "z" in names:
        columns["z"] = pa.array([rng.randrange(100) for _ in keys], pa.int64())
    if op:
        columns["op"] = [rng.choice("UUD") for _ in keys]
    return pa.table(columns)


def _clauses(rng: random.Random, op: bool) -> dict[str, Any]:
    clauses: dict[str, Any] = {
        "when_matched_update_all": rng.choice(
            [True, False, "source.n > target.n", "target.n IS NULL OR source.n < 20"]
        ),
        "when_not_matched_insert_all": rng.choice([True, False, "source.n > 30"]),
        "when_not_matched_by_source_delete": rng.choice(
            [False, False, True, "n < 20", "target.n >= 30"]
        ),
    }
    if op:
        clauses["when_matched_delete"] = "source.op = 'D'"
    elif rng.random() < 0.25:
        clauses["when_matched_delete"] = rng.choice([True, "target.n < 25"])
    if rng.random() < 0.1:
        clauses["when_matched_fail"] = True
    return clauses


def _library_merge(uri: str, source: pa.Table, clauses: dict[str, Any]) -> Any:
    builder = s3ddb.dataset(uri).merge_insert("id")
    calls = {
        "when_matched_update_all": builder.when_matched_update_all,
        "when_matched_delete": builder.when_matched_delete,
        "when_not_matched_insert_all": builder.when_not_matched_insert_all,
        "when_not_matched_by_source_delete": builder.when_not_matched_by_source_delete,
    }
    for name, value in clauses.items():
        if name == "when_matched_fail":
            builder = builder.when_matched_fail()
        elif value is True:
            builder = calls[name]()
        elif value is not False:
            builder = calls[name](value)
        calls = {
            "when_matched_update_all": builder.when_matched_update_all,
            "when_matched_delete": builder.when_matched_delete,
            "when_not_matched_insert_all": builder.when_not_matched_insert_all,
            "when_not_matched_by_source_delete": builder.when_not_matched_by_source_delete,
        }
    return builder.execute(source)


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """What ``fn`` returns, or the class of the s3ddb error it raises."""
    try:
        return fn(*args, **kwargs)
    except s3ddb.S3DDBError as exc:
        return type(exc)


def _rows(uri: str) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in s3ddb.dataset(uri).to_table().to_pylist())


def test_spark_merges_equal_the_library_merge(spark: Any, tmp_path: Path) -> None:
    import s3ddb.spark_ext

    refusals = 0
    for case in range(CASES):
        rng = random.Random(SEED * 1000 + case)
        uri, twin, names = _target(rng, tmp_path / str(case))
        op = rng.random() < 0.3
        source = _source(rng, names, op)
        clauses = _clauses(rng, op)
        version = s3ddb.dataset(uri).version
        df = spark.createDataFrame(source).repartition(2)
        # Spark's writer whatever the source's size (writer="auto" would send some of
        # these small sources through Python tasks).
        plan = s3ddb.spark_ext.explain_merge_insert(spark, uri, df, "id", writer="jvm", **clauses)
        assert "Spark's Parquet writer (JVM)" in plan, plan
        expected = _outcome(_library_merge, twin, source, clauses)
        got = _outcome(s3ddb.spark_ext.merge_insert, spark, uri, df, "id", writer="jvm", **clauses)
        where = f"case {case}: {clauses}, {source.num_rows} source rows, columns {names}"
        assert got == expected, where
        if isinstance(expected, type):
            refusals += 1
            assert s3ddb.dataset(uri).version == version, where
        assert _rows(uri) == _rows(twin), where
    assert refusals < CASES  # the cases do merge, not only refuse


@pytest.mark.parametrize("refusal", ["duplicate", "matched", "both"])
def test_refusals_are_the_library_errors_before_anything_commits(
    spark: Any, tmp_path: Path, refusal: str
) -> None:
    """A key twice in the source and ``when_matched_fail`` refuse the merge with the
    library's typed errors, a duplicate first when both apply, and leave the
    dataset's files as they were."""
    import s3ddb.spark_ext

    uri = str(tmp_path / "t")
    s3ddb.write_dataset(pa.table({"id": pa.array(range(50), pa.int64()), "v": ["t"] * 50}), uri)
    before = {p.name for p in Path(uri).rglob("*") if p.is_file()}
    ids = list(range(40, 300))
    if refusal in ("duplicate", "both"):
        ids.append(290)
    clauses = {"when_matched_fail": True} if refusal in ("matched", "both") else {}
    source = pa.table({"id": pa.array(ids, pa.int64()), "v": ["s"] * len(ids)})
    error = s3ddb.MatchedRowError if refusal == "matched" else s3ddb.DuplicateKeyError
    with pytest.raises(error) as local:
        _library_merge(uri, source, clauses)
    df = spark.createDataFrame(source).repartition(3)
    with pytest.raises(error) as spark_error:
        s3ddb.spark_ext.merge_insert(spark, uri, df, "id", writer="jvm", **clauses)
    if refusal == "duplicate":
        assert str(spark_error.value) == str(local.value)
    assert s3ddb.dataset(uri).version == 1
    assert {p.name for p in Path(uri).rglob("*") if p.is_file()} == before


def test_a_nondeterministic_source_is_merged_as_one_set_of_rows(spark: Any, tmp_path: Path) -> None:
    """A source Spark computes anew, with other keys, each time it is read (a
    nondeterministic UDF) is materialized once: the key ranges, the address job and
    the row job see the same keys, and every row written is one the merge counted."""
    import random

    from pyspark.sql import functions as F

    import s3ddb.spark_ext

    uri = str(tmp_path / "t")
    ids = pa.array(range(0, 2000, 2), pa.int64())
    s3ddb.write_dataset(pa.table({"id": ids, "v": ["t"] * 1000}), uri)
    key = F.udf(lambda _: random.randrange(4000), "long").asNondeterministic()
    df = spark.range(0, 600, numPartitions=3).select(
        key(F.col("id")).alias("id"), F.lit("s").alias("v")
    )
    df = df.dropDuplicates(["id"])
    got = s3ddb.spark_ext.merge_insert(spark, uri, df, "id", writer="jvm")
    table = s3ddb.dataset(uri).to_table()
    assert table.num_rows == 1000 + got["num_inserted_rows"]
    changed = table.filter(pa.compute.equal(table["v"], "s")).num_rows
    assert changed == got["num_inserted_rows"] + got["num_updated_rows"] > 0
    assert len(set(table["id"].to_pylist())) == table.num_rows


def test_explain_says_who_writes_the_rows(spark: Any, tmp_path: Path) -> None:
    """A local dataset is written by Spark's Parquet writer; a ``memory://`` one,
    which the JVM cannot reach, by Python tasks."""
    import s3ddb.spark_ext

    table = pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]})
    local = str(tmp_path / "t")
    s3ddb.write_dataset(table, local)
    df = spark.createDataFrame(pa.table({"id": pa.array([2, 3], pa.int64()), "v": ["x", "y"]}))
    plan = s3ddb.spark_ext.explain_merge_insert(spark, local, df, "id")
    assert "Spark's Parquet writer (JVM)" in plan
    # An upsert writes the source first; a conditional update needs the join's rows.
    assert "writes the source first" in plan, plan
    conditional = s3ddb.spark_ext.explain_merge_insert(
        spark, local, df, "id", when_matched_update_all="source.v <> target.v"
    )
    assert "writes the source first" not in conditional, conditional
    memory = f"memory://merge-explain-{tmp_path.name}"
    s3ddb.write_dataset(table, memory)
    plan = s3ddb.spark_ext.explain_merge_insert(spark, memory, df, "id")
    assert "Python tasks (pyarrow), because the JVM cannot reach" in plan, plan


def _shifting_source(spark: Any, tmp_path: Path, last_stays: bool) -> tuple[Any, Path]:
    """A source Spark sees as deterministic whose rows change between reads (a UDF
    reading a file; in life, files replaced under a path): 600 rows of even keys
    ``0..1198`` while the file holds 0, odd ones once it holds 1 (but key 1198 if
    ``last_stays``, so that the keys' range does not change)."""
    from pyspark.sql import functions as F

    shift = tmp_path / "shift"
    shift.write_text("0")
    path = str(shift)

    def shifted(i: int) -> int:
        with open(path) as f:
            moved = int(f.read())
        return 2 * i + (0 if last_stays and i == 599 else moved)

    key = F.udf(shifted, "long")
    df = spark.range(0, 600, numPartitions=3).select(
        key(F.col("id")).alias("id"), F.lit("s").alias("v")
    )
    return df, shift


def _shift_while_writing(monkeypatch: pytest.MonkeyPatch, shift: Path) -> None:
    """The source reads shifted while the merge writes its rows, and as at first after."""
    import s3ddb.spark_ext.merge as spark_merge

    real_write = spark_merge.write_staged

    def write_shifted(*args: Any, **kwargs: Any) -> Any:
        shift.write_text("1")
        try:
            return real_write(*args, **kwargs)
        finally:
            shift.write_text("0")

    monkeypatch.setattr(spark_merge, "write_staged", write_shifted)


def test_an_upsert_source_whose_keys_leave_the_planned_range_commits_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upsert's source is aggregated first (its key range chooses the target
    fragments that can match); a source whose rows then change so that a written key
    lies outside that range is refused, with nothing committed and no file left."""
    import s3ddb.spark_ext

    uri = str(tmp_path / "t")
    ids = pa.array(range(0, 2000, 2), pa.int64())
    s3ddb.write_dataset(pa.table({"id": ids, "v": ["t"] * 1000}), uri)
    before = {p.name for p in Path(uri).rglob("*") if p.is_file()}
    df, shift = _shifting_source(spark, tmp_path, last_stays=False)
    _shift_while_writing(monkeypatch, shift)
    with pytest.raises(s3ddb.InvalidInputError, match="other keys"):
        s3ddb.spark_ext.merge_insert(spark, uri, df, "id", writer="jvm")
    assert s3ddb.dataset(uri).version == 1
    assert {p.name for p in Path(uri).rglob("*") if p.is_file()} == before


def test_an_upsert_reads_its_source_once_and_merges_the_rows_it_wrote(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upsert writes the source first and joins the keys of the files written with
    the target's: a source that gives other rows (within the planned key range) to
    each read is merged as the one set of rows written, never as a mix of two reads.
    Here the write reads the odd keys (and 1198); the source reads even keys again
    afterwards, which would have matched (and deleted) 600 target rows."""
    import s3ddb.spark_ext

    uri = str(tmp_path / "t")
    ids = pa.array(range(0, 2000, 2), pa.int64())
    s3ddb.write_dataset(pa.table({"id": ids, "v": ["t"] * 1000}), uri)
    df, shift = _shifting_source(spark, tmp_path, last_stays=True)
    _shift_while_writing(monkeypatch, shift)
    counts = s3ddb.spark_ext.merge_insert(spark, uri, df, "id", writer="jvm")
    assert counts == {"num_inserted_rows": 599, "num_updated_rows": 1, "num_deleted_rows": 0}
    got = s3ddb.dataset(uri).to_table().sort_by("id")
    written = set(range(1, 1198, 2)) | {1198}
    want = sorted(set(range(0, 2000, 2)) | written)
    assert got.column("id").to_pylist() == want
    assert [v for i, v in zip(want, got.column("v").to_pylist()) if v == "s"] == ["s"] * 600
    assert {i for i, v in zip(want, got.column("v").to_pylist()) if v == "s"} == written


def test_addresses_grouped_in_64_row_words_give_every_row_back(spark: Any) -> None:
    """The address job groups rows in the JVM by (outcome, fragment, 64-row word) into
    masks; the Python tasks give back exactly the rows matched and removed, per
    fragment, with the counts, across word edges (rows 63, 64) and the mask's sign
    bit, and a refusal still names its key."""
    import random

    from pyroaring import BitMap

    from s3ddb.spark_ext.merge_jvm import (
        BY_SOURCE,
        DUPLICATE,
        OUTCOME,
        AddressTask,
        address_words,
    )
    from s3ddb.spark_ext.merge_tasks import FRAGMENT, RESULT_DDL, ROW
    from s3ddb.writes.merge_clauses import DELETE, KEEP, UPDATE

    rng = random.Random(7)
    rows = {(f, r) for f in (0, 3, 9) for r in (0, 62, 63, 64, 127, 128, 65_535, 2**31 - 1)}
    rows |= {(rng.choice((0, 3, 9)), rng.randrange(200_000)) for _ in range(5_000)}
    outcomes = {a: rng.choice((KEEP, UPDATE, DELETE, BY_SOURCE)) for a in rows}
    table = pa.table(
        {
            OUTCOME: pa.array([outcomes[a] for a in rows], pa.int8()),
            FRAGMENT: pa.array([f for f, _ in rows], pa.int64()),
            ROW: pa.array([r for _, r in rows], pa.int64()),
            "__s3ddb_key_0": pa.nulls(len(rows), pa.int64()),
        }
    )

    def run(t: pa.Table) -> list[Any]:
        frame = spark.createDataFrame(t).repartition(3)
        return address_words(frame, 1).mapInArrow(AddressTask(("id",)), RESULT_DDL).collect()

    got: dict[str, dict[int, set[int]]] = {"matched": {}, "removed": {}}
    counts = {"num_updated_rows": 0, "num_deleted_rows": 0}
    for kind, fid, data in run(table):
        if kind == "counts":
            for name, value in json.loads(data).items():
                counts[name] += value
        else:
            got[kind].setdefault(fid, set()).update(BitMap.deserialize(data))
    want: dict[str, dict[int, set[int]]] = {"matched": {}, "removed": {}}
    for (f, r), outcome in outcomes.items():
        if outcome in (KEEP, UPDATE, DELETE):
            want["matched"].setdefault(f, set()).add(r)
        if outcome in (UPDATE, DELETE, BY_SOURCE):
            want["removed"].setdefault(f, set()).add(r)
    assert got == want
    assert counts == {
        "num_updated_rows": sum(o == UPDATE for o in outcomes.values()),
        "num_deleted_rows": sum(o in (DELETE, BY_SOURCE) for o in outcomes.values()),
    }
    refused = pa.concat_tables(
        [
            table,
            pa.table(
                {
                    OUTCOME: pa.array([DUPLICATE, DUPLICATE], pa.int8()),
                    FRAGMENT: pa.nulls(2, pa.int64()),
                    ROW: pa.nulls(2, pa.int64()),
                    "__s3ddb_key_0": pa.array([41, 41], pa.int64()),
                }
            ),
        ]
    )
    errors = [json.loads(d) for kind, _f, d in run(refused) if kind == "error"]
    assert errors and errors[0]["type"] == "DuplicateKeyError"
    assert "id=41" in errors[0]["message"]
