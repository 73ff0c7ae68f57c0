"""Native reads (``s3ddb.spark_ext.read``) and projected Python-source reads on real
local Spark: every version shape reads the same rows natively, through the Python
data source, and through ``s3ddb.dataset(...).to_table()``."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import uuid
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import SchemaMismatchError, UnsupportedOperationError
from s3ddb.format import layout
from s3ddb.spark_ext.native_plan import plan_native_read
from tests.conftest import TEST_BUCKET, TEST_TABLE

pytest.importorskip("pyspark")

import s3ddb.spark_ext

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# The Spark integration's fixture: one SparkSession per module.


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([i % 7 for i in ids], pa.int32()),
            "s": [f"s{i}" for i in ids],
            "x": [i / 4 for i in ids],
            "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i % 30) for i in ids]),
        }
    )


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def _spark_rows(df: Any) -> list[dict[str, Any]]:
    return _sorted([r.asDict() for r in df.collect()])


def _expected(uri: str, version: int, **kw: Any) -> list[dict[str, Any]]:
    return _sorted(s3ddb.dataset(uri, version, **kw).to_table().to_pylist())


def _python(spark: Any, uri: str, version: int, **options: str) -> Any:
    return spark.read.format("s3ddb").options(version=str(version), **options).load(uri)


def _is_native(df: Any) -> bool:
    # A file relation lists its files; the Python data source lists none.
    return bool(df.inputFiles())


def _check_version(spark: Any, uri: str, version: int) -> None:
    expected = _expected(uri, version)
    native = s3ddb.spark_ext.read(spark, uri, version, native=True)
    assert _is_native(native)
    assert native.columns == s3ddb.dataset(uri, version).schema.names
    assert _spark_rows(native) == expected, f"native read of version {version}"
    assert _spark_rows(_python(spark, uri, version)) == expected, f"Python read of {version}"


def test_native_and_python_reads_agree_on_every_version_shape(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 90), uri, max_rows_per_file=30)  # 3 fragments
    ds.insert(_table(90, 20))  # append
    ds.delete("id % 5 = 0")  # deletion files
    ds.update({"x": "x + 1000"}, "id < 40", rewrite="columns")  # a second data file
    ds.update({"s": "'u'"}, "id BETWEEN 60 AND 64", rewrite="rows")  # rows moved
    ds.add_columns({"z": "id * 2"})  # a third data file per fragment
    ds.alter_columns({"path": "s", "name": "t"})  # files keep the old name
    ds.alter_columns({"path": "k", "data_type": pa.int64()})  # k rewritten: a new file
    ds.delete("id % 7 = 1")  # deletions on fragments of several files
    ds.drop_columns(["d"])
    final = s3ddb.dataset(uri)

    # The shapes the test is about are really there.
    plan = plan_native_read(final)
    assert plan.refused is None
    assert any(len(shape.slots) > 1 and shape.deleted for shape in plan.shapes)
    columns = [c for shape in plan.shapes for slot in shape.slots for c in slot]
    assert any(c.name == "t" and c.physical == "s" for c in columns)
    assert any(c.name == "k" and c.physical_type == pa.int64() for c in columns)
    assert "d" not in s3ddb.spark_ext.read(spark, uri).columns

    for version in range(1, final.version + 1):
        _check_version(spark, uri, version)

    final.optimize.compact_files(target_rows_per_fragment=1000)
    compacted = s3ddb.dataset(uri)
    assert all(len(f.files) == 1 for f in compacted.get_fragments())
    _check_version(spark, uri, compacted.version)


def test_shallow_clone_reads_files_through_its_base_path(spark: Any, tmp_path: Path) -> None:
    src = s3ddb.write_dataset(_table(0, 60), str(tmp_path / "src"), max_rows_per_file=20)
    src.delete("id < 5")
    clone_uri = str(tmp_path / "clone")
    clone = src.shallow_clone(clone_uri)
    clone.delete("id % 3 = 0")  # its deletion files live in the clone's root
    clone.insert(_table(100, 10))
    clone.update({"x": "-x"}, "id > 50", rewrite="columns")
    src.delete("id > 10")  # the source moves on; the clone does not see it

    plan = plan_native_read(s3ddb.dataset(clone_uri))
    paths = [p.path for shape in plan.shapes for parts in shape.fragments for p in parts]
    assert any("/src/data/" in p for p in paths) and any("/clone/data/" in p for p in paths)
    for version in range(1, s3ddb.dataset(clone_uri).version + 1):
        _check_version(spark, clone_uri, version)


def test_deleted_rows_stay_deleted_when_spark_skips_row_groups(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 1000), uri, max_rows_per_group=100)
    ds.delete("id IN (3, 555, 556, 999)")
    df = s3ddb.spark_ext.read(spark, uri)
    # Spark prunes row groups by statistics: row_index must still be the file's own.
    assert df.filter("id = 555").count() == 0
    assert [r.id for r in df.filter("id BETWEEN 554 AND 557").collect()] == [554, 557]
    assert df.filter("id > 990").count() == 8
    assert df.count() == 996


def test_the_driver_reads_no_deleted_position(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted positions are read by the tasks: the driver process opens no deletion
    file (Spark's Python workers are other processes, which the patch does not
    reach)."""
    import s3ddb.format.deletion as deletion
    import s3ddb.spark_ext.native_plan as native_plan

    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 600), uri, max_rows_per_file=200)
    ds.delete("id % 7 = 0")
    read_on_driver: list[int] = []
    original = deletion.read_deleted_rows

    def recorded(files: Any, fragment: Any) -> Any:
        read_on_driver.append(fragment.id)
        return original(files, fragment)

    monkeypatch.setattr(native_plan, "read_deleted_rows", recorded)
    df = s3ddb.spark_ext.read(spark, uri, native=True)
    assert df.count() == 600 - len(range(0, 600, 7))
    assert df.filter("id % 7 = 0").count() == 0
    assert read_on_driver == []


def test_queries_on_the_native_frame(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 500), uri, max_rows_per_file=128)
    ds.delete("k = 3 AND id < 300")
    table = s3ddb.dataset(uri).to_table()
    df = s3ddb.spark_ext.read(spark, uri)
    assert df.filter("k = 6").count() == table.filter(pa.compute.equal(table["k"], 6)).num_rows
    assert df.filter("k = 3").count() == table.filter(pa.compute.equal(table["k"], 3)).num_rows
    assert df.agg({"x": "sum"}).collect()[0][0] == pytest.approx(sum(table["x"].to_pylist()))
    assert df.filter("id = 11").select("s").collect()[0].s == "s11"
    assert df.filter("id = 3").count() == 0  # k = 3, deleted
    projected = s3ddb.spark_ext.read(spark, uri, columns=["s", "id"])
    assert projected.columns == ["s", "id"]
    assert _spark_rows(projected) == _sorted(
        s3ddb.dataset(uri).to_table(columns=["s", "id"]).to_pylist()
    )


def test_temp_view_and_pins(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 50), uri)
    ds.tags.create("first", 1)
    stamp = dt.datetime.now(dt.timezone.utc)
    ds.insert(_table(50, 25))
    view = f"events_{uuid.uuid4().hex[:8]}"
    s3ddb.spark_ext.create_temp_view(spark, view, uri)
    ds.insert(_table(75, 25))  # the view stays on the version pinned when created
    assert spark.sql(f"SELECT COUNT(*) AS n FROM {view}").collect()[0].n == 75
    assert spark.sql(f"SELECT SUM(id) AS s FROM {view} WHERE k = 1").collect()[0].s == sum(
        i for i in range(75) if i % 7 == 1
    )
    assert s3ddb.spark_ext.read(spark, uri, tag="first").count() == 50
    assert s3ddb.spark_ext.read(spark, uri, timestamp=stamp).count() == 50
    assert s3ddb.spark_ext.read(spark, uri, version=2).count() == 75
    assert s3ddb.spark_ext.read(spark, uri).count() == 100


def test_a_type_spark_reads_differently_falls_back_once(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ns")
    times = pa.array([1_700_000_000_000_000_000 + i * 1000 for i in range(5)], pa.timestamp("ns"))
    s3ddb.write_dataset(pa.table({"id": pa.array(range(5), pa.int64()), "t": times}), uri)
    with pytest.warns(RuntimeWarning, match="'t' has ns timestamps"):
        df = s3ddb.spark_ext.read(spark, uri)
    assert not _is_native(df)
    assert [r.id for r in df.orderBy("id").collect()] == list(range(5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per dataset and reason
        s3ddb.spark_ext.read(spark, uri)
    with pytest.raises(UnsupportedOperationError, match="ns timestamps"):
        s3ddb.spark_ext.read(spark, uri, native=True)
    # A projection without that column reads natively.
    assert _is_native(s3ddb.spark_ext.read(spark, uri, columns=["id"], native=True))


def test_a_store_the_jvm_cannot_reach_falls_back_to_the_python_source(spark: Any, aws: Any) -> None:
    opts = dict(aws.storage_options())
    uri = f"s3+ddb://{TEST_BUCKET}/native-{uuid.uuid4().hex[:12]}?ddbTableName={TEST_TABLE}"
    ds = s3ddb.write_dataset(_table(0, 40), uri, storage_options=opts)
    ds.delete("id < 10")
    # This JVM has no S3A connector: the s3a:// files cannot be listed.
    with pytest.warns(RuntimeWarning, match="Spark cannot open its data files"):
        df = s3ddb.spark_ext.read(spark, uri, storage_options=opts)
    assert not _is_native(df)
    assert _spark_rows(df) == _expected(uri, 2, storage_options=opts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, whatever Spark's message was
        s3ddb.spark_ext.read(spark, uri, storage_options=opts, columns=["id"])
    with pytest.raises(UnsupportedOperationError, match="Spark cannot open"):
        s3ddb.spark_ext.read(spark, uri, storage_options=opts, native=True)


# --- projection in the Python data source ---------------------------------------------


def _without_column_files(uri: str, column: str) -> None:
    """Delete the data files that hold only ``column`` (written by add_columns): a
    read that touches the column fails, one that does not still works."""
    ds = s3ddb.dataset(uri)
    field_id = ds.manifest.schema.field_id(column)
    for fragment in ds.get_fragments():
        for data_file in fragment.files:
            if data_file.fields == (field_id,):
                os.remove(Path(uri) / layout.data_file_path(data_file.path))


def test_python_source_reads_only_the_projected_columns(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 60), uri, max_rows_per_file=25)
    ds.delete("id < 3")
    ds.add_columns({"z": "id * 2"})
    expected = _sorted(s3ddb.dataset(uri).to_table(columns=["id", "s"]).to_pylist())
    _without_column_files(uri, "z")
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("s3ddb").load(uri).collect()  # the full schema reads z

    by_schema = spark.read.format("s3ddb").schema("id long, s string").load(uri)
    assert by_schema.columns == ["id", "s"]
    assert _spark_rows(by_schema) == expected
    by_option = spark.read.format("s3ddb").option("columns", "s, id").load(uri)
    assert by_option.columns == ["s", "id"]
    assert _spark_rows(by_option) == expected
    # The native path reads only what it is asked for too.
    native = s3ddb.spark_ext.read(spark, uri, columns=["id", "s"], native=True)
    assert _spark_rows(native) == expected


def test_python_source_projection_is_checked(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(0, 5), uri)
    with pytest.raises(Exception, match=r"'k'.*reads as int, the given schema says string"):
        spark.read.format("s3ddb").schema("id long, k string").load(uri).collect()
    with pytest.raises(Exception, match="no column"):
        spark.read.format("s3ddb").schema("id long, nope string").load(uri).collect()
    with pytest.raises(Exception, match="no column"):
        spark.read.format("s3ddb").option("columns", "id,nope").load(uri).collect()
    assert issubclass(SchemaMismatchError, s3ddb.S3DDBError)
    # A given schema and a 'columns' option that name other columns are refused,
    # never settled silently; the same columns in the same order are fine.
    reader = spark.read.format("s3ddb").schema("id long")
    with pytest.raises(Exception, match=r"names columns \['id'\] but the 'columns' option"):
        reader.option("columns", "k").load(uri).collect()
    both = spark.read.format("s3ddb").schema("id long, k int").option("columns", "id, k")
    assert both.load(uri).columns == ["id", "k"]
    assert sorted(r.id for r in both.load(uri).collect()) == list(range(5))


def test_wide_read_benchmark_answers_agree(spark: Any) -> None:
    """benchmarks/spark_wide_read.py on a small table: every query gives the same
    answer natively, through the Python source and from s3ddb (run() checks each and
    raises otherwise); speed is not looked at."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "spark_wide_read.py"
    spec = importlib.util.spec_from_file_location("spark_wide_read", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run(spark, 3000, 1)
    assert sorted(result["ratios"]) == sorted(
        f"v{v} {q} {s}" for v in (1, 2) for q in bench.QUERIES for s in ("native", "python")
    )
    assert "1% deleted" in bench.report(result)


def test_timestamps_small_ints_and_empty_versions_read_alike(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "types")
    instant = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
    table = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "b": pa.array([1, -2, 3, None, 5, 6], pa.int8()),
            "h": pa.array([300, -300, 0, 1, 2, None], pa.int16()),
            "f": pa.array([0.5, None, 1.5, 2.5, float("nan"), -1.0], pa.float32()),
            "utc": pa.array([instant] * 6, pa.timestamp("us", tz="UTC")),
            "naive": pa.array([instant, None] * 3, pa.timestamp("us")),
            "ms": pa.array([instant.replace(microsecond=0)] * 6, pa.timestamp("ms")),
            "ok": pa.array([True, False, None, True, True, False]),
            "bin": pa.array([b"x", b"", None, b"\x00\xff", b"y", b"z"]),
            "dec": pa.array([1, 2, 3, 4, 5, None], pa.decimal128(10, 2)),
        }
    )
    ds = s3ddb.write_dataset(table, uri)
    ds.delete("id = 2")
    native = s3ddb.spark_ext.read(spark, uri, native=True)
    python = spark.read.format("s3ddb").load(uri)
    assert native.dtypes == python.dtypes
    assert repr(_spark_rows(native)) == repr(_spark_rows(python))  # NaN equals itself here
    assert len(_spark_rows(native)) == 5

    empty = str(tmp_path / "empty")
    s3ddb.write_dataset(table.slice(0, 0), empty)
    assert s3ddb.spark_ext.read(spark, empty, native=True).count() == 0
    assert s3ddb.spark_ext.read(spark, empty).dtypes == python.dtypes


def test_a_file_gone_after_planning_fails_the_query_whatever_the_session_says(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_table(0, 40), uri, max_rows_per_file=20)
    df = s3ddb.spark_ext.read(spark, uri)
    fragment = s3ddb.dataset(uri).get_fragments()[1]
    os.remove(Path(uri) / layout.data_file_path(fragment.files[0].path))
    key = "spark.sql.files.ignoreMissingFiles"
    spark.conf.set(key, "true")  # would silently drop the fragment's rows
    try:
        with pytest.raises(Exception, match=r"(?i)not exist|FileNotFound"):
            df.collect()
    finally:
        spark.conf.unset(key)


def test_a_column_named_like_sparks_metadata_column_reads_through_python(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(
        pa.table({"id": pa.array(range(4), pa.int64()), "_metadata": list("abcd")}), uri
    )
    ds.delete("id = 1")
    with pytest.raises(UnsupportedOperationError, match="'_metadata' has a name"):
        s3ddb.spark_ext.read(spark, uri, native=True)
    with pytest.warns(RuntimeWarning, match="reserves"):
        df = s3ddb.spark_ext.read(spark, uri)
    assert _spark_rows(df) == _expected(uri, 2)
    # Without that column, the read is native, and deletions still apply.
    native = s3ddb.spark_ext.read(spark, uri, columns=["id"], native=True)
    assert [r.id for r in native.orderBy("id").collect()] == [0, 2, 3]


def _physical_plan(df: Any) -> str:
    # Spark's own plan text: what the Parquet scan reads, pushes down and vectorizes.
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_deleted_rows_of_many_files_are_told_apart_by_file(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 70), uri, max_rows_per_file=10)  # 7 files
    # The first and last row of a file and one inside, in six of the seven files: the
    # same positions in every file, so only the file name tells them apart.
    ds.delete("id < 60 AND (id % 10 IN (0, 9) OR id % 10 = 4)")
    ds.delete("id = 33")  # a second deletion of one file
    plan = plan_native_read(s3ddb.dataset(uri))
    assert sorted(len(shape.deleted) for shape in plan.shapes) == [0, 6]
    expected = _expected(uri, 3)
    assert len(expected) == 70 - 19

    df = s3ddb.spark_ext.read(spark, uri)
    assert _spark_rows(df) == expected
    assert df.filter("id IN (0, 9, 33, 59, 60)").count() == 1  # 60: no deletion there
    assert df.filter("id BETWEEN 30 AND 39").count() == 6


def test_the_native_scan_with_deletions_stays_vectorized_pruned_and_filtered(
    spark: Any, tmp_path: Path
) -> None:
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(_table(0, 200), uri, max_rows_per_file=50)
    ds.delete("id % 10 = 7")
    df = s3ddb.spark_ext.read(spark, uri).filter("id = 17 OR id = 18").select("x")
    physical = _physical_plan(df)
    scans = [line for line in physical.splitlines() if "FileScan parquet" in line]
    assert scans and all("Batched: true" in line for line in scans), physical
    assert all("EqualTo(id,17)" in line for line in scans), physical  # pushed to the reader
    assert all("ReadSchema: struct<id:bigint,x:double" in line for line in scans), physical
    assert "LeftAnti" in physical
    assert [r.x for r in df.collect()] == [18 / 4]  # 17 is deleted


@pytest.mark.parametrize("hidden", ["_", ".", "copy-"])
def test_data_files_spark_skips_by_name_read_through_python(
    spark: Any, tmp_path: Path, hidden: str
) -> None:
    """Spark's file listing leaves out names starting with "_" or "." (and ending with
    "._COPYING_"), even given one by one: read natively, such a fragment's rows were
    silently missing. The read falls back, once, and returns every row."""
    import dataclasses

    uri = str(tmp_path / f"ds{hidden}")
    ds = s3ddb.write_dataset(_table(0, 2), uri)
    (fragment,) = s3ddb.fragment.write_fragments(_table(2, 2), uri, schema=ds.manifest.schema)
    data_file = fragment.files[0]
    name = data_file.path + "._COPYING_" if hidden == "copy-" else hidden + data_file.path
    os.rename(Path(uri) / layout.data_file_path(data_file.path), Path(uri) / "data" / name)
    renamed = dataclasses.replace(fragment, files=(dataclasses.replace(data_file, path=name),))
    s3ddb.Dataset.commit(uri, s3ddb.operations.Append([renamed]), read_version=ds.version)
    assert s3ddb.dataset(uri).count_rows() == 4  # s3ddb itself reads it
    assert plan_native_read(s3ddb.dataset(uri)).refused == (
        f"data file name {name!r} is one Spark skips"
    )
    with pytest.warns(RuntimeWarning, match="is one Spark skips"):
        df = s3ddb.spark_ext.read(spark, uri)
    assert not _is_native(df)
    assert _spark_rows(df) == _expected(uri, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per dataset and reason
        s3ddb.spark_ext.read(spark, uri)
    with pytest.raises(UnsupportedOperationError, match="is one Spark skips"):
        s3ddb.spark_ext.read(spark, uri, native=True)


def test_many_local_fragments_are_listed_without_a_spark_job(spark: Any, tmp_path: Path) -> None:
    """Spark lists more than 32 paths with a job of its own; a native read of a local
    dataset's 40 fragments lists them on the driver, so planning it runs no job, and
    the session's setting is as it was."""
    from s3ddb.spark_ext.native_read import scan_layout

    uri = str(tmp_path / "many")
    for i in range(40):
        s3ddb.write_dataset(pa.table({"id": [i]}), uri, mode="append")
    plan = plan_native_read(s3ddb.dataset(uri), ["id"], {})
    assert plan.refused is None
    (shape,) = plan.shapes
    paths = [p[0].path for p in shape.fragments]
    assert len(paths) == 40
    tracker = spark.sparkContext.statusTracker()
    group = f"listing-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "listing")
    try:
        df = scan_layout(spark, shape.slots[0], paths, keys=True)
        assert tracker.getJobIdsForGroup(group) == []
        assert sorted(r["id"] for r in df.select("id").collect()) == list(range(40))
    finally:
        spark.sparkContext.setJobGroup("", "")
    threshold = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    assert spark.conf.get(threshold) == "32"
