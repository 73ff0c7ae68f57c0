"""How data files encode their columns: a column of many distinct values is written
plain, a column of few keeps its dictionary (s3ddb.format.datafile)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import s3ddb
from s3ddb.format.datafile import DEFAULT_ROW_GROUP_SIZE


def _column_chunks(path: Path, column: str) -> list[pq.ColumnChunkMetaData]:
    metadata = pq.ParquetFile(path).metadata
    index = metadata.schema.names.index(column)
    return [metadata.row_group(g).column(index) for g in range(metadata.num_row_groups)]


def test_unique_values_are_written_plain_and_few_values_keep_a_dictionary(
    tmp_path: Path,
) -> None:
    rows = 2 * DEFAULT_ROW_GROUP_SIZE
    rng = np.random.default_rng(7)
    table = pa.table(
        {
            # Random unique values: zstd cannot shrink them, so their size shows the
            # encoding: 8 bytes a row plain, about 10 with a dictionary of every value.
            "id": rng.choice(2**62, size=rows, replace=False).astype(np.int64),
            "kind": pa.array(["red", "green", "blue", "cyan"] * (rows // 4)),
        }
    )
    ds = s3ddb.write_dataset(table, str(tmp_path / "ds"))
    [data] = ds.manifest.fragments[0].files
    path = tmp_path / "ds" / "data" / data.path
    ids = _column_chunks(path, "id")
    kinds = _column_chunks(path, "kind")
    id_bytes = sum(c.total_compressed_size for c in ids)
    assert id_bytes < 8.6 * rows, id_bytes  # with pyarrow's default: 9.9
    for chunk in kinds:
        assert chunk.has_dictionary_page
        assert "RLE_DICTIONARY" in chunk.encodings
    assert sum(c.total_compressed_size for c in kinds) < rows / 8
    assert ds.to_table().equals(table)
