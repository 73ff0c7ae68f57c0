"""Child-process entry points for concurrency and crash tests.

    python -m tests.workers append URI WRITER_ID COUNT [ROWS]

Each append writes ROWS rows whose ids encode (writer, attempt), so the parent can
check every row is present exactly once. Prints one line per successful commit:
``ok <writer> <i> <version> <attempts>``. Environment (AWS endpoint, failpoints) comes from the
parent.
"""

from __future__ import annotations

import sys

import pyarrow as pa


def rows_for(writer: int, i: int, rows: int) -> pa.Table:
    base = writer * 1_000_000 + i * 1000
    ids = list(range(base, base + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "writer": pa.array([writer] * rows, pa.int32()),
            "seq": pa.array([i] * rows, pa.int32()),
        }
    )


def append(uri: str, writer: int, count: int, rows: int) -> int:
    import s3ddb

    for i in range(count):
        ds = s3ddb.write_dataset(rows_for(writer, i, rows), uri, mode="append")
        attempts = ds.last_commit.attempts if ds.last_commit else 0
        print(f"ok {writer} {i} {ds.version} {attempts}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    verb, *args = argv
    if verb == "append":
        uri, writer, count, *rest = args
        return append(uri, int(writer), int(count), int(rest[0]) if rest else 3)
    raise SystemExit(f"unknown verb {verb}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
