"""A column an open format cannot hold is refused with the cast that fixes it: a pandas
datetime column (timestamp[ns]) for Iceberg v2 and Delta, an unsigned integer for
Iceberg; through the library and through ``s3ddb open-formats --enable``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import OpenFormatError
from tests.support.cli_runner import run_cli as run


def _frame() -> pd.DataFrame:
    stamps = pd.to_datetime(["2024-01-01 10:00", "2024-01-02 11:30"])
    return pd.DataFrame({"id": [1, 2], "at": stamps, "utc": stamps.tz_localize("UTC")})


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_pandas_datetime_column_is_refused_with_the_cast(tmp_path: Path, fmt: str) -> None:
    uri = str(tmp_path / "ds")
    frame = _frame()
    with pytest.raises(OpenFormatError) as refused:
        s3ddb.write_dataset(frame, uri, open_formats=fmt)
    message = str(refused.value)
    assert f"cannot publish as {fmt}: column 'at'" in message
    assert "cast 'at' to timestamp[us], 'utc' to timestamp[us, tz=UTC] before writing" in message
    assert "df['at'] = df['at'].astype('datetime64[us]')" in message
    assert "df['utc'] = df['utc'].astype('datetime64[us, UTC]')" in message
    assert not (tmp_path / "ds").exists()  # nothing written
    # The fix, as the message gives it, is enough.
    frame["at"] = frame["at"].astype("datetime64[us]")
    frame["utc"] = frame["utc"].astype("datetime64[us, UTC]")
    ds = s3ddb.write_dataset(frame, uri, open_formats=fmt)
    assert ds.open_formats == (fmt,)
    assert ds.to_table().column("at").to_pylist() == list(_frame()["at"])


def test_enabling_on_a_dataset_says_how_to_cast_what_it_holds(tmp_path: Path, capsys: Any) -> None:
    stamps = str(tmp_path / "stamps")
    s3ddb.write_dataset(_frame(), stamps)
    code, _, err = run(capsys, "open-formats", stamps, "--enable", "iceberg")
    assert code == 2  # OpenFormatError: a usage error
    said = " ".join(err.split())
    assert "cast 'at' to timestamp[us], 'utc' to timestamp[us, tz=UTC]" in said
    assert "write the dataset again with them cast (mode='overwrite')" in said
    assert "alter_columns" not in said  # it cannot narrow nanoseconds

    counts = str(tmp_path / "counts")
    s3ddb.write_dataset(pa.table({"n": pa.array([1, 2], pa.uint8())}), counts)
    code, _, err = run(capsys, "open-formats", counts, "--enable", "iceberg")
    assert code == 2  # OpenFormatError: a usage error
    said = " ".join(err.split())
    assert "cast 'n' to int16: alter_columns with data_type then optimize.compact_files()" in said
    ds = s3ddb.dataset(counts)
    ds.alter_columns({"path": "n", "data_type": pa.int16()})
    ds.optimize.compact_files()
    assert ds.enable_open_formats("iceberg").open_formats == ("iceberg",)


def test_a_type_no_cast_fixes_gets_no_hint(tmp_path: Path) -> None:
    table = pa.table({"d": pa.array([1, 2], pa.duration("us"))})
    with pytest.raises(OpenFormatError) as refused:
        s3ddb.write_dataset(table, str(tmp_path / "ds"), open_formats="iceberg")
    assert "column 'd'" in str(refused.value) and "Fix:" not in str(refused.value)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_change_to_a_published_dataset_is_refused_with_the_cast(tmp_path: Path, fmt: str) -> None:
    """A published dataset refuses, at commit, a change that brings in a type its
    format cannot hold: the refusal names the cast that fixes it, and the fix, as
    the message gives it, commits."""
    uri = str(tmp_path / "ds")
    ds = s3ddb.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), uri, open_formats=fmt)
    counts = pa.table({"n": pa.array([7, 8], pa.uint32())})
    with pytest.raises(OpenFormatError) as refused:
        ds.add_columns(counts)
    message = str(refused.value)
    assert f"cannot publish 2 as {fmt}: column 'n'" in message
    assert "Fix: cast 'n' to int64 in the data written" in message
    assert s3ddb.dataset(uri).version == 1  # nothing committed
    ds = s3ddb.dataset(uri).add_columns(counts.cast(pa.schema([("n", pa.int64())])))
    assert ds.to_table().column("n").to_pylist() == [7, 8]

    durations = pa.table({"d": pa.array([1, 2], pa.duration("us"))})
    with pytest.raises(OpenFormatError) as refused:
        ds.add_columns(durations)
    assert "Fix: leave the column out, or disable_open_formats first" in str(refused.value)
