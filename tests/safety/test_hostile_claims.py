"""A manifest whose claims about its files do not hold, and a transaction file grown
huge: each is a typed error naming what is wrong, never rows read twice or hidden, and
``verify`` reports it whichever version makes the claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import s3ddb
from s3ddb.errors import DataFileError, StoredMetadataError
from s3ddb.format import layout
from s3ddb.maintenance.verify import verify
from tests.support.storage import plant_manifest

REPO = Path(__file__).resolve().parents[2]


def _ids(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


def _three_fragments(uri: str) -> None:
    """Version 1: fragments 0 (ids 0-2) and 1 (3-5); version 2 appends fragment 2 (6-8)."""
    s3ddb.write_dataset(_ids(range(6)), uri, max_rows_per_file=3)
    s3ddb.write_dataset(_ids(range(6, 9)), uri, mode="append")


def _share_a_file(message: Any) -> None:
    message.fragments[2].files[0].path = message.fragments[1].files[0].path


def _second_file_with_the_same_column(message: Any) -> None:
    message.fragments[1].files.add().CopyFrom(message.fragments[2].files[0])


def _same_file_twice(message: Any) -> None:
    message.fragments[1].files.add().CopyFrom(message.fragments[1].files[0])


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_share_a_file, "is listed by fragments 1 and 2"),
        (_second_file_with_the_same_column, "field id 0 is in two data files"),
        (_same_file_twice, "is listed twice"),
    ],
    ids=["two fragments, one file", "one column in two files", "one file twice"],
)
def test_a_data_file_a_manifest_reads_twice_is_refused(
    tmp_path: Path, edit: Any, says: str
) -> None:
    """Rows would come back twice, or in place of another fragment's: every read and
    compaction refuse the manifest, verify reports it, and nothing is committed."""
    uri = str(tmp_path / "ds")
    _three_fragments(uri)
    fragments = s3ddb.dataset(uri).manifest.fragments
    files = {layout.data_file_path(d.path) for f in fragments for d in f.files}
    plant_manifest(uri, edit)
    for name, run in {
        "to_table": lambda ds: ds.to_table(),
        "filtered read": lambda ds: ds.to_table(filter="id >= 0"),
        "compaction": lambda ds: ds.optimize.compact_files(),
        "delete": lambda ds: ds.delete("id = 0"),
    }.items():
        with pytest.raises(StoredMetadataError, match=says) as raised:
            run(s3ddb.dataset(uri))
        assert "version 2" in str(raised.value), (name, raised.value)
    assert s3ddb.dataset(uri).version == 2
    report = verify(uri, grace_seconds=0)
    first = report.problems[0]
    assert (first.kind, first.version) == ("unreadable_manifest", 2), report.problems
    assert says in first.meaning, first
    # The only other problems: version 2's own files, which no readable version lists
    # now (nothing was written by the refused calls).
    others = report.problems[1:]
    assert {p.kind for p in others} <= {"unreferenced_file"}, others
    assert {p.path for p in others} <= files, others
    assert s3ddb.dataset(uri, 1).to_table() == _ids(range(6))


def test_verify_checks_each_versions_own_claim_of_a_shared_data_file(tmp_path: Path) -> None:
    """Version 1 lists fragment 1's file truly; version 2 claims it holds 5 rows (it
    holds 3). Checked once by path, version 2's claim would go unread."""
    uri = str(tmp_path / "ds")
    _three_fragments(uri)
    path = layout.data_file_path(s3ddb.dataset(uri).manifest.fragments[1].files[0].path)

    def five_rows(message: Any) -> None:
        message.fragments[1].physical_rows = 5
        message.visible_rows += 2  # the summary agrees: only the data file tells

    plant_manifest(uri, five_rows)
    with pytest.raises(DataFileError, match="holds 3 rows, its fragment records 5"):
        s3ddb.dataset(uri).to_table()
    report = verify(uri, grace_seconds=0)
    [problem] = report.problems
    assert (problem.kind, problem.path, problem.version) == ("corrupt_data_file", path, 2)


def test_a_fragment_claiming_no_rows_is_checked_against_its_file(tmp_path: Path) -> None:
    """A fragment claiming 0 rows would never be read: its 3 rows would vanish from
    every read. Its footer is read, and the claim refused."""
    uri = str(tmp_path / "ds")
    _three_fragments(uri)

    def no_rows(message: Any) -> None:
        message.fragments[1].physical_rows = 0
        message.visible_rows -= 3  # the summary agrees: only the data file tells

    plant_manifest(uri, no_rows)
    with pytest.raises(DataFileError, match="holds 3 rows, its fragment records 0"):
        s3ddb.dataset(uri).to_table()
    with pytest.raises(DataFileError, match="holds 3 rows, its fragment records 0"):
        s3ddb.dataset(uri).to_table(columns=["id"])
    assert [p.kind for p in verify(uri, grace_seconds=0).problems] == ["corrupt_data_file"]


_CHILD = """
import resource, sys
limit = 2 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import s3ddb
for name, run in (
    ("transactions", lambda: s3ddb.dataset(sys.argv[1]).delta(1).list_transactions()),
    ("rebase", lambda: s3ddb.dataset(sys.argv[1], 1).delete("id = 1")),
):
    try:
        run()
        print(name, "no error")
    except BaseException as exc:
        print(name, type(exc).__name__, isinstance(exc, s3ddb.S3DDBError), str(exc)[:300])
"""


def test_a_transaction_file_grown_to_gibibytes_is_refused_unread(tmp_path: Path) -> None:
    """Listing a version's transaction, and a writer rebasing over it, read the file
    in bounded memory: a child limited to 2 GiB of address space gets a typed error."""
    uri = str(tmp_path / "ds")
    s3ddb.write_dataset(_ids(range(4)), uri)
    s3ddb.write_dataset(_ids(range(4, 8)), uri, mode="append")
    name = s3ddb.dataset(uri).manifest.transaction_file
    os.truncate(tmp_path / "ds" / layout.transaction_path(name), 5 << 30)  # sparse
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, uri],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2, done.stdout
    for line in lines:
        assert " ManifestCorruptError True " in line and "refused unread" in line, line
        assert name in line, line
    assert s3ddb.dataset(uri).version == 2
