"""Fuzzing stored metadata: whatever is done to a dataset's manifests, transaction
files, deletion files, index files and tags, every read is a typed error or a correct
read, in bounded time and memory.

A small real dataset (local path: several versions, a deletion file, a BTREE index,
a tag) is built once; then each mutation damages one stored file, the reads run, and
the file is put back. Mutations are of two kinds:

* **bytes**: random damage (bit flips, truncation, a byte range duplicated or zeroed,
  garbage appended);
* **semantic**: what a hostile writer with valid checksums could store: the protobuf
  parsed, repeated fields duplicated, swapped or dropped (fragments, data files,
  schema fields, indices), counts, ids, offsets and versions set to absurd values (0,
  -1 where signed, 2^31, 2^32, 2^63, 2^64-1...), then framed again with a valid CRC;
  valid Roaring bitmaps or Arrow arrays of out-of-range offsets; BTREE files of other
  rows; tag files of other JSON.

The reads: open, ``count_rows``, ``to_table``, a filtered scan (through the index),
``versions()``, tags, a checkout of the tagged and of an older version; every eighth
mutation also appends and deletes on a copy, and commits from a stale version (which
rebases over the transaction files). Each read must raise an ``S3DDBError`` or be
correct:

* after **byte damage to a checksummed file** (manifest, transaction), correct means
  *identical* to the same read of the undamaged dataset;
* otherwise (semantic mutations, and byte damage to the files that carry no checksum:
  deletion files, index files, tags) correct means *self-consistent*: the columns are
  ``id, s, v`` and every row is one of the rows ever written with each column under its
  own name (``s == f"s{id}"``, ``v == id / 2``), no id twice, ``count_rows`` equal to
  the rows ``to_table`` returns, the filtered scan returning only rows that match it
  and that ``to_table`` returns.

The mutations run in a child process with an address-space limit (RLIMIT_AS, 3 GiB)
and a per-mutation time limit (SIGALRM; the parent also kills a child that stops
reporting); the parent reports each untyped error, wrong read, hang or crash with the
mutation's seed. Reproduce one with ``S3DDB_FUZZ_SEED=<seed> S3DDB_FUZZ_MUTATIONS=1``.

``S3DDB_FUZZ_MUTATIONS=<n>`` sets the number of mutations (default 500, about half a minute
here); ``S3DDB_FUZZ_SEED`` the first seed (default 0).

A second run does the same to a dataset whose manifests keep their fragments in
fragment-list chunks (format 2; :func:`build_chunked`, ``S3DDB_FUZZ_CHUNK_MUTATIONS``,
default 200): chunk files damaged as bytes, or their fragments mutated and framed
again with the roots' references updated to the new size and CRC (so only the
semantic checks stand between them and a reader); roots whose chunk references are
duplicated (under their own name, or as a copy of the file under another), dropped,
swapped, pointed at another chunk, joined by an older version's reference, given
other id ranges, id runs, counts or column bounds; inline tails repeating a chunk's
fragment. The same reads must be correct: never a row twice, never a row no version
held. Reproduce one with ``S3DDB_FUZZ_SEED=<seed> S3DDB_FUZZ_CHUNK_MUTATIONS=1``.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

DEFAULT_MUTATIONS = 500
DEFAULT_CHUNK_MUTATIONS = 200
MEMORY_LIMIT = 3 << 30
PER_MUTATION_SECONDS = 20
FILTER = "id >= 3"
ABSURD_U64 = [0, 1, 2, 3, 5, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
ABSURD_I32 = [-1, 0, 1, 2, 3, 7, 2**31 - 1, -(2**31)]
ABSURD_I64 = [-1, 0, 1, 2**62, 2**63 - 1, -(2**63)]


# --- the dataset ---------------------------------------------------------------------------


def _rows(ids: range) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "s": [f"s{i}" for i in ids],
            "v": [i / 2 for i in ids],
        }
    )


def build(uri: str) -> None:
    """Versions 1-5: an overwrite of 3 fragments, an append, a delete (a deletion
    file), a BTREE index on ``id``, another append; tag ``t1`` names version 2."""
    import s3ddb

    s3ddb.write_dataset(_rows(range(12)), uri, max_rows_per_file=4)
    s3ddb.write_dataset(_rows(range(12, 16)), uri, mode="append")
    s3ddb.dataset(uri).delete("id = 5 OR id = 13")
    s3ddb.dataset(uri).create_scalar_index("id")
    s3ddb.write_dataset(_rows(range(16, 18)), uri, mode="append")
    s3ddb.dataset(uri).tags.create("t1", 2)


def build_chunked(uri: str) -> None:
    """Like :func:`build`, in chunks of at most 4 fragments with 2 inline: versions
    1-8 are an overwrite of 2 one-row fragments (format 1), a config change, an
    append of 5 two-row fragments (chunks from here on), a delete (a deletion file; a
    fragment removed, so a chunk's ids have a gap), a BTREE index, another append, a
    compaction (new fragments among older ones: chunks whose id ranges overlap, told
    apart by their id runs); tag ``t1`` names version 2."""
    import s3ddb

    s3ddb.write_dataset(_rows(range(2)), uri, max_rows_per_file=1)
    s3ddb.dataset(uri).update_config({"s3ddb.chunk_fragments": "4", "s3ddb.inline_fragments": "2"})
    s3ddb.write_dataset(_rows(range(2, 12)), uri, mode="append", max_rows_per_file=2)
    s3ddb.dataset(uri).delete("id = 5 OR id = 8 OR id = 9")
    s3ddb.dataset(uri).create_scalar_index("id")
    s3ddb.write_dataset(_rows(range(12, 18)), uri, mode="append", max_rows_per_file=2)
    s3ddb.dataset(uri).optimize.compact_files(target_rows_per_fragment=2)
    s3ddb.dataset(uri).tags.create("t1", 2)


# --- mutations -----------------------------------------------------------------------------


def _unframe(data: bytes, magic: bytes) -> bytes:
    from s3ddb.format.framing import unframe

    return unframe(data, magic, "fuzz")


def _manifest_bytes(m: Any, rng: random.Random) -> bytes:
    """``m`` framed as s3ddb lays it out (header, then fragments), checksums valid; the
    summary recomputed from the fragments, or kept as mutated."""
    from s3ddb.format._proto import manifest_pb2 as pb
    from s3ddb.format.framing import frame
    from s3ddb.format.manifest import MANIFEST_MAGIC

    header = pb.Manifest()
    header.CopyFrom(m)
    for name in ("fragments", "fragments_offset", "header_crc"):
        header.ClearField(name)
    if rng.random() < 0.7:
        header.fragment_count = len(m.fragments)
        rows = sum(
            f.physical_rows
            - (f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0)
            for f in m.fragments
        )
        header.visible_rows = min(max(0, rows), 2**64 - 1)
    if rng.random() < 0.1:  # the earlier layout: one message, parsed whole
        whole = pb.Manifest()
        whole.CopyFrom(header)
        whole.fragments.extend(m.fragments)
        return frame(whole.SerializeToString(), MANIFEST_MAGIC)
    body = header.SerializeToString()
    fragments = pb.Manifest(fragments=m.fragments).SerializeToString()
    prefix = struct.pack("<2sI2sI", b"\x85\x01", 12 + len(body), b"\x9d\x01", zlib.crc32(body))
    return frame(prefix + body + fragments, MANIFEST_MAGIC)


def _mutate_repeated(rng: random.Random, field: Any) -> None:
    """Duplicate, swap, drop or reverse entries of a repeated message field."""
    n = len(field)
    if n == 0:
        return
    kind = rng.choice(["dup", "swap", "drop", "reverse"])
    items = [type(field[0])() for _ in range(n)]
    for item, src in zip(items, field, strict=True):
        item.CopyFrom(src)
    if kind == "dup":
        items.insert(rng.randrange(n + 1), items[rng.randrange(n)])
    elif kind == "swap" and n > 1:
        i, j = rng.sample(range(n), 2)
        items[i], items[j] = items[j], items[i]
    elif kind == "drop":
        del items[rng.randrange(n)]
    else:
        items.reverse()
    del field[:]
    field.extend(items)


def _set_absurd(rng: random.Random, message: Any, name: str, values: list[int]) -> None:
    try:
        setattr(message, name, rng.choice(values))
    except (ValueError, TypeError):
        pass


def _mutate_fragment(rng: random.Random, f: Any) -> None:
    choice = rng.randrange(9)
    if choice == 0:
        _set_absurd(rng, f, "id", ABSURD_U64)
    elif choice == 1:
        _set_absurd(rng, f, "physical_rows", [*ABSURD_U64, f.physical_rows + 1, 1])
    elif choice == 2 and f.HasField("deletion_file"):
        _set_absurd(rng, f.deletion_file, "num_deleted_rows", [0, 2, 3, *ABSURD_U64])
    elif choice == 3 and f.HasField("deletion_file"):
        _set_absurd(rng, f.deletion_file, "read_version", ABSURD_U64)
    elif choice == 4 and f.files:
        _mutate_repeated(rng, f.files)
    elif choice == 5 and f.files:
        d = f.files[rng.randrange(len(f.files))]
        if rng.random() < 0.5:
            _mutate_repeated_scalar(rng, d.fields, ABSURD_I32)
        else:
            _set_absurd(rng, d, "file_size_bytes", ABSURD_U64)
    elif choice == 6:
        _set_absurd(rng, f, rng.choice(["created_at_version", "last_updated_at_version"]),
                    ABSURD_U64)  # fmt: skip
    elif choice == 7 and f.HasField("deletion_file"):
        f.deletion_file.kind = 1 - f.deletion_file.kind
    else:
        f.ClearField("deletion_file")


def _mutate_repeated_scalar(rng: random.Random, field: Any, values: list[int]) -> None:
    items = list(field)
    kind = rng.randrange(3)
    if kind == 0 and items:
        items[rng.randrange(len(items))] = rng.choice(values)
    elif kind == 1:
        items.reverse()
    else:
        items.append(rng.choice(items or values))
    del field[:]
    field.extend(items)


def _mutate_manifest(rng: random.Random, data: bytes) -> bytes:
    from s3ddb.format._proto import manifest_pb2 as pb
    from s3ddb.format.manifest import MANIFEST_MAGIC

    m = pb.Manifest.FromString(_unframe(data, MANIFEST_MAGIC))
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        target = rng.randrange(10)
        if target == 0:
            _mutate_repeated(rng, m.fragments)
        elif target in (1, 2) and m.fragments:
            _mutate_fragment(rng, m.fragments[rng.randrange(len(m.fragments))])
        elif target == 3:
            _mutate_repeated(rng, m.schema.fields)
        elif target == 4 and m.schema.fields:
            field = m.schema.fields[rng.randrange(len(m.schema.fields))]
            name = rng.choice(["id", "parent_id", "name"])
            if name == "name":
                field.name = rng.choice(["id", "s", "v", "x", ""])
            else:
                _set_absurd(rng, field, name, ABSURD_I32)
        elif target == 5:
            name = rng.choice(["version", "max_fragment_id", "fragment_count", "visible_rows",
                               "cloned_from_version", "next_row_id"])  # fmt: skip
            _set_absurd(rng, m, name, ABSURD_U64)
        elif target == 6:
            _set_absurd(rng, m, "timestamp_nanos", ABSURD_I64)
        elif target == 7 and m.indices:
            index = m.indices[rng.randrange(len(m.indices))]
            kind = rng.randrange(4)
            if kind == 0:
                index.fragment_bitmap = _bitmap(rng, [0, 1, 2, 3, 4, 5, 9, 2**31, 2**32 - 1])
            elif kind == 1:
                _mutate_repeated_scalar(rng, index.fields, ABSURD_I32)
            elif kind == 2:
                _set_absurd(rng, index, "dataset_version", ABSURD_U64)
            else:
                index.fragment_bitmap = bytes(rng.randrange(256) for _ in range(12))
        elif target == 8:
            _mutate_repeated(rng, m.indices)
        else:
            _mutate_repeated(rng, m.base_paths)
    return _manifest_bytes(m, rng)


def _mutate_transaction(rng: random.Random, data: bytes) -> bytes:
    from s3ddb.format._proto import transaction_pb2 as tpb
    from s3ddb.format.framing import frame
    from s3ddb.operations import TRANSACTION_MAGIC

    t = tpb.Transaction.FromString(_unframe(data, TRANSACTION_MAGIC))
    which = t.WhichOneof("operation")
    body = getattr(t, which) if which else None
    choice = rng.randrange(4)
    if choice == 0:
        _set_absurd(rng, t, "read_version", ABSURD_U64)
    elif choice == 1 and body is not None and hasattr(body, "fragments") and body.fragments:
        if rng.random() < 0.5:
            _mutate_repeated(rng, body.fragments)
        else:
            _mutate_fragment(rng, body.fragments[rng.randrange(len(body.fragments))])
    elif choice == 2 and body is not None:
        for descriptor, value in body.ListFields():
            if descriptor.type == descriptor.TYPE_UINT64 and rng.random() < 0.7:
                _set_absurd(rng, body, descriptor.name, ABSURD_U64)
            elif hasattr(value, "add") and len(value) and rng.random() < 0.5:
                _mutate_repeated(rng, value)  # a repeated message field
    else:
        t.ClearField(which) if which else None
    return frame(t.SerializeToString(), TRANSACTION_MAGIC)


def _bitmap(rng: random.Random, pool: list[int]) -> bytes:
    from pyroaring import BitMap

    kind = rng.randrange(3)
    if kind == 0:
        bitmap = BitMap(rng.sample(pool, rng.randint(0, len(pool))))
    elif kind == 1:
        bitmap = BitMap()
        start = rng.choice([0, 1, 2**16, 2**31])
        bitmap.add_range(start, start + rng.choice([1, 4, 5, 2**16, 2**20]))
    else:
        bitmap = BitMap(rng.randrange(8) for _ in range(rng.randint(0, 6)))
    bitmap.run_optimize()
    return bytes(bitmap.serialize())


def _mutate_deletion(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.7:
        return _bitmap(rng, [0, 1, 2, 3, 4, 5, 6, 2**31, 2**32 - 1])
    values = [rng.choice([0, 1, 2, 3, 4, 9, 2**31, 2**32 - 1]) for _ in range(rng.randint(0, 4))]
    array = pa.array(values, rng.choice([pa.uint32(), pa.int64(), pa.uint64()]))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pa.schema([("offsets", array.type)])) as writer:
        writer.write_batch(pa.record_batch([array], names=["offsets"]))
    return bytes(sink.getvalue().to_pybytes())


def _mutate_index(rng: random.Random, data: bytes) -> bytes:
    import io

    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    columns = {n: table.column(n).to_pylist() for n in table.column_names}
    n = table.num_rows
    kind = rng.randrange(5)
    if kind == 0:  # an offset or a fragment id elsewhere
        name = rng.choice(["fragment_id", "row_offset"])
        columns[name][rng.randrange(n)] = rng.choice([0, 1, 2, 3, 4, 5, 2**31, 2**32 - 1])
    elif kind == 1:  # rows dropped or duplicated
        keep = sorted(rng.sample(range(n), rng.randint(0, n)) + rng.sample(range(n), 2))
        columns = {k: [v[i] for i in keep] for k, v in columns.items()}
    elif kind == 2:  # keys shuffled (the file no longer sorted)
        rng.shuffle(columns["key"])
    elif kind == 3:  # other keys
        columns["key"] = [k + rng.choice([-3, 0, 1, 100]) for k in columns["key"]]
    else:
        return bytes(data[: rng.randrange(len(data))])
    out = io.BytesIO()
    pq.write_table(
        pa.table(columns, schema=table.schema), out, row_group_size=rng.choice([3, 8192])
    )
    return out.getvalue()


def _mutate_tag(rng: random.Random, data: bytes) -> bytes:
    version: Any = rng.choice(
        [0, 1, 2, 3, 5, 6, 99, -1, 1.5, True, "2", None, 2**63, 2**64, [2], {}]
    )
    body = rng.choice(
        [{"version": version}, {"version": version, "manifestSize": 1}, [version], version, {}]
    )
    return json.dumps(body).encode()


def _damage_bytes(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0 and out:
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del out[rng.randrange(len(out) + 1) :]
    elif kind == 2 and out:
        i = rng.randrange(len(out))
        j = min(len(out), i + rng.randint(1, 64))
        at = rng.randrange(len(out) + 1)
        out[at:at] = out[i:j]
    elif kind == 3 and out:
        i = rng.randrange(len(out))
        out[i : i + rng.randint(1, 32)] = b"\x00" * len(out[i : i + 32])
    else:
        out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(out)


# --- mutations of fragment-list chunks and the roots listing them -----------------------------


def _chunk_message(path: Path) -> Any:
    from s3ddb.format._proto import manifest_pb2 as pb
    from s3ddb.format.chunks import CHUNK_MAGIC

    return pb.Manifest.FromString(_unframe(path.read_bytes(), CHUNK_MAGIC))


def _roots(root: Path) -> list[tuple[Path, Any]]:
    """Every root of format 2 (path, parsed message), newest first."""
    from s3ddb.format._proto import manifest_pb2 as pb
    from s3ddb.format.manifest import CHUNKED_MANIFEST_MAGIC

    out = []
    for path in sorted((root / "_versions").glob("*.manifest")):
        data = path.read_bytes()
        if data[:8] == CHUNKED_MANIFEST_MAGIC:
            out.append((path, pb.Manifest.FromString(_unframe(data, CHUNKED_MANIFEST_MAGIC))))
    return out


def _root_bytes(m: Any, rng: random.Random) -> bytes:
    """``m`` framed as a root (the earlier layout: parsed whole); its summary
    recomputed from its chunk references and tail, or kept as mutated."""
    from s3ddb.format.framing import frame
    from s3ddb.format.manifest import CHUNKED_MANIFEST_MAGIC

    m.ClearField("fragments_offset")
    m.ClearField("header_crc")
    if rng.random() < 0.7:
        m.fragment_count = sum(c.fragment_count for c in m.chunks) + len(m.fragments)
        tail = sum(
            f.physical_rows
            - (f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0)
            for f in m.fragments
        )
        rows = sum(c.visible_rows for c in m.chunks) + tail
        m.visible_rows = min(max(0, rows), 2**64 - 1)
    return frame(m.SerializeToString(), CHUNKED_MANIFEST_MAGIC)


def _mutate_chunk_ref(rng: random.Random, ref: Any) -> None:
    choice = rng.randrange(7)
    if choice == 0:
        near = [ref.min_fragment_id + 1, max(0, ref.max_fragment_id - 1)]
        _set_absurd(rng, ref, rng.choice(["min_fragment_id", "max_fragment_id"]),
                    [*ABSURD_U64, *near])  # fmt: skip
    elif choice == 1:
        ref.ClearField("id_runs")  # as written before references recorded their ids
    elif choice == 2:
        ref.ClearField("id_runs")
        ref.id_runs.extend(rng.choice([0, 1, 2, 3, 2**32]) for _ in range(rng.choice([1, 2, 4, 6])))
    elif choice == 3:
        name = rng.choice(["fragment_count", "visible_rows", "physical_rows"])
        _set_absurd(rng, ref, name, [*ABSURD_U64, getattr(ref, name) + 1, getattr(ref, name) - 1])
    elif choice == 4 and ref.bounds:
        bound = ref.bounds[rng.randrange(len(ref.bounds))]
        which = rng.choice(["min_int", "max_int", "min_float", "max_float", "null_count"])
        try:
            setattr(bound, which, rng.choice([0, 3, 7, 100, -1, 2**62]))
        except (ValueError, TypeError):
            pass
    elif choice == 5:
        _mutate_repeated(rng, ref.bounds)
    else:
        _set_absurd(rng, ref, "size", [0, 1, ref.size + 1, ref.size - 1, 2**28, 2**63])


def _mutate_root(rng: random.Random, path: Path, m: Any, root: Path) -> None:
    """One hostile change to the root ``m`` (stored at ``path``): its references and
    tail (chunk files copied as a writer with valid checksums could)."""
    names = sorted(p.name for p in (root / "_fragments").glob("*.chunk"))
    others = [c for _, other in _roots(root) for c in other.chunks]
    for _ in range(rng.choice([1, 1, 2])):
        kind = rng.randrange(8)
        if kind == 0:
            _mutate_repeated(rng, m.chunks)  # duplicated (same name), swapped, dropped...
        elif kind == 1 and m.chunks:  # a chunk copied under another name, listed too
            ref = type(m.chunks[0])()
            ref.CopyFrom(m.chunks[rng.randrange(len(m.chunks))])
            copy = f"{rng.getrandbits(128):032x}.chunk"
            (root / "_fragments" / copy).write_bytes((root / "_fragments" / ref.name).read_bytes())
            ref.name = copy
            m.chunks.insert(rng.randrange(len(m.chunks) + 1), ref)
        elif kind == 2 and m.chunks and names:  # a reference pointing at another chunk
            m.chunks[rng.randrange(len(m.chunks))].name = rng.choice(names)
        elif kind == 3 and others:  # an older (or newer) version's chunk listed as well
            m.chunks.insert(rng.randrange(len(m.chunks) + 1), rng.choice(others))
        elif kind == 4 and others and m.chunks:  # ... or instead of one of its own
            m.chunks[rng.randrange(len(m.chunks))].CopyFrom(rng.choice(others))
        elif kind == 5 and m.chunks:  # the tail repeats a chunk's fragment
            ref = m.chunks[rng.randrange(len(m.chunks))]
            fragments = _chunk_message(root / "_fragments" / ref.name).fragments
            if fragments:
                m.fragments.append(fragments[rng.randrange(len(fragments))])
        elif kind == 6 and m.fragments:
            _mutate_fragment(rng, m.fragments[rng.randrange(len(m.fragments))])
        elif m.chunks:
            _mutate_chunk_ref(rng, m.chunks[rng.randrange(len(m.chunks))])


def _mutate_chunk_file(rng: random.Random, path: Path, root: Path) -> None:
    """The fragments of the chunk at ``path`` mutated and framed again; mostly with
    every root's reference to it updated to its new size and CRC-32."""
    import zlib

    from s3ddb.format.chunks import CHUNK_MAGIC
    from s3ddb.format.framing import frame

    m = _chunk_message(path)
    if rng.random() < 0.4 or not m.fragments:
        _mutate_repeated(rng, m.fragments)
    else:
        _mutate_fragment(rng, m.fragments[rng.randrange(len(m.fragments))])
    data = frame(m.SerializeToString(), CHUNK_MAGIC)
    path.write_bytes(data)
    if rng.random() < 0.8:
        for root_path, r in _roots(root):
            for ref in r.chunks:
                if ref.name == path.name:
                    ref.size, ref.crc32 = len(data), zlib.crc32(data)
            root_path.write_bytes(_root_bytes(r, random.Random(0)))


def _chunk_mutation(rng: random.Random, root: Path) -> tuple[str, bool]:
    """Damage the chunked dataset at ``root``: (what was mutated, whether semantically:
    a mutation with valid checksums)."""
    roots = _roots(root)
    chunks = sorted((root / "_fragments").glob("*.chunk"))
    semantic = rng.random() < 0.75
    if rng.random() < 0.6:
        path, m = rng.choice(roots)
        if semantic:
            _mutate_root(rng, path, m, root)
            path.write_bytes(_root_bytes(m, rng))
        else:
            path.write_bytes(_damage_bytes(rng, path.read_bytes()))
        return "root", semantic
    path = rng.choice(chunks)
    if semantic:
        _mutate_chunk_file(rng, path, root)
    else:
        path.write_bytes(_damage_bytes(rng, path.read_bytes()))
    return "chunk", semantic


SEMANTIC: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "manifest": _mutate_manifest,
    "transaction": _mutate_transaction,
    "deletion": _mutate_deletion,
    "index": _mutate_index,
    "tag": _mutate_tag,
}
CHECKSUMMED = {"manifest", "transaction"}


def _targets(root: Path) -> list[tuple[str, Path]]:
    kinds = {"_versions": "manifest", "_transactions": "transaction", "_deletions": "deletion",
             "_indices": "index", "_refs": "tag"}  # fmt: skip
    out = []
    for path in sorted(root.rglob("*")):
        top = path.relative_to(root).parts[0]
        if path.is_file() and top in kinds:
            out.append((kinds[top], path))
    return out


# --- the reads and what correct means --------------------------------------------------------


class Timeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise Timeout()


def _reads(uri: str) -> dict[str, Callable[[], Any]]:
    import s3ddb

    return {
        "count_rows": lambda: s3ddb.dataset(uri).count_rows(),
        "to_table": lambda: _named_rows(s3ddb.dataset(uri).to_table()),
        "filtered": lambda: _named_rows(s3ddb.dataset(uri).scanner(filter=FILTER).to_table()),
        "versions": lambda: [(v.version, v.operation) for v in s3ddb.dataset(uri).versions()],
        "tags": lambda: s3ddb.dataset(uri).tags.list(),
        "tagged": lambda: _named_rows(s3ddb.dataset(uri, version="t1").to_table()),
        "older": lambda: _named_rows(s3ddb.dataset(uri, version=3).to_table(filter="id < 100")),
    }


def _named_rows(table: pa.Table) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The column names (sorted) and the rows, each as (id, s, v) when the table has
    those columns (in any order: a schema's field order is its own), sorted."""
    names = sorted(table.column_names)
    order = ["id", "s", "v"] if names == ["id", "s", "v"] else names
    columns = [table.column(n).to_pylist() for n in order]
    return names, sorted(zip(*columns, strict=True), key=repr)


def _writes(uri: str, scratch: Path) -> dict[str, Callable[[], Any]]:
    import s3ddb

    def run() -> Any:
        shutil.copytree(uri, scratch)
        target = str(scratch)
        stale = s3ddb.dataset(target, version=2)
        out = []
        for op in (
            lambda: s3ddb.write_dataset(_rows(range(100, 102)), target, mode="append").version,
            lambda: s3ddb.dataset(target).delete("id = 1"),
            lambda: stale.delete("id = 2", conflict_retries=2),
            lambda: s3ddb.dataset(target).to_table(),
        ):
            try:
                out.append(op())
            except Exception as exc:
                if not isinstance(exc, s3ddb.S3DDBError):
                    raise
                out.append(exc)
        table = out[-1]
        return table if isinstance(table, pa.Table) else None

    return {"writes": run}


def _self_consistent(results: dict[str, Any]) -> str | None:
    """Why these reads are not self-consistent (None: they are)."""
    written = {i: (f"s{i}", i / 2) for i in [*range(18), 100, 101]}

    def check_rows(name: str, names: list[str], rows: list[tuple[Any, ...]]) -> str | None:
        # Any of the columns says which row it is: every present column must agree.
        ids = []
        for r in rows:
            # A NULL is a column no data file holds (one added later reads as NULLs).
            row = {k: v for k, v in zip(names, r, strict=True) if v is not None}
            if not row:
                continue
            candidates = {
                row.get("id"),
                int(row["s"][1:]) if isinstance(row.get("s"), str) and row["s"][1:].isdigit()
                else None,
                int(row["v"] * 2) if isinstance(row.get("v"), float) else None,
            } - {None}  # fmt: skip
            if len(candidates) != 1 or (i := candidates.pop()) not in written:
                return f"{name}: row {row!r} was never written (columns under other names?)"
            expected = {"id": i, "s": written[i][0], "v": written[i][1]}
            if any(expected[k] != v for k, v in row.items()):
                return f"{name}: row {row!r} was never written (columns under other names?)"
            ids.append(i)
        if len(set(ids)) != len(ids):
            return f"{name}: a row twice"
        return None

    written_table = results.get("writes")
    tables = {name: results.get(name) for name in ("to_table", "filtered", "tagged", "older")}
    tables["after writes"] = None if written_table is None else _named_rows(written_table)
    for name, found in tables.items():
        if found is None:
            continue
        names, rows = found
        if not names or not set(names) <= {"id", "s", "v"}:
            return f"{name}: columns {names}"  # a dropped column is a consistent read
        order = ["id", "s", "v"] if names == ["id", "s", "v"] else names
        if (why := check_rows(name, order, rows)) is not None:
            return why
    table, count = tables["to_table"], results.get("count_rows")
    if table is not None and count is not None and count != len(table[1]):
        return f"count_rows {count} but to_table returned {len(table[1])} rows"
    filtered = tables["filtered"]
    if filtered is not None and filtered[0] == ["id", "s", "v"]:
        if any(r[0] is not None and r[0] < 3 for r in filtered[1]):
            return "filtered: a row that does not match the filter"
        if table is not None and not set(filtered[1]) <= set(table[1]):
            return "filtered: rows to_table does not return"
    return None


def _run_reads(reads: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], list[str]]:
    """Each read's result (None when it raised a typed error), and the untyped errors."""
    from s3ddb.errors import S3DDBError

    results: dict[str, Any] = {}
    untyped = []
    for name, read in reads.items():
        try:
            results[name] = read()
        except S3DDBError:
            results[name] = None
        except Timeout:
            raise
        except BaseException as exc:  # everything else is a finding
            if isinstance(exc, KeyboardInterrupt):
                raise
            results[name] = None
            untyped.append(f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    return results, untyped


def child(workdir: Path, first_seed: int, count: int, log: Path) -> None:
    """Run ``count`` mutations on the dataset at ``workdir / 'ds'``, appending one
    JSON line per mutation (and one before it starts) to ``log``."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGALRM, _on_alarm)
    root = workdir / "ds"
    uri = str(root)
    reads = _reads(uri)
    pristine, untyped = _run_reads(reads)
    assert not untyped and all(v is not None for v in pristine.values()), (untyped, pristine)
    assert _self_consistent(pristine) is None
    targets = _targets(root)
    with log.open("a") as out:
        for seed in range(first_seed, first_seed + count):
            rng = random.Random(seed)
            kind, path = rng.choice(targets)
            semantic = rng.random() < 0.6
            original = path.read_bytes()
            out.write(json.dumps({"seed": seed, "start": str(path.relative_to(root))}) + "\n")
            out.flush()
            finding = None
            try:
                mutate = SEMANTIC[kind] if semantic else _damage_bytes
                try:
                    mutated = mutate(rng, original)
                except (ValueError, TypeError, OverflowError):
                    mutated = original  # a value protobuf cannot hold: nothing to store
                path.write_bytes(mutated)
                signal.alarm(PER_MUTATION_SECONDS)
                todo = dict(reads)
                if seed % 8 == 0:
                    todo.update(_writes(uri, workdir / f"w{seed}"))
                results, untyped = _run_reads(todo)
                signal.alarm(0)
                if untyped:
                    finding = "untyped error: " + untyped[0]
                elif kind in CHECKSUMMED and not semantic:
                    for name, value in results.items():
                        if value is not None and name in pristine and value != pristine[name]:
                            finding = f"wrong read: {name} differs from the undamaged read"
                            break
                if finding is None and (why := _self_consistent(results)) is not None:
                    finding = "wrong read: " + why
            except Timeout:
                finding = f"hang: over {PER_MUTATION_SECONDS} s"
            finally:
                signal.alarm(0)
                path.write_bytes(original)
                shutil.rmtree(workdir / f"w{seed}", ignore_errors=True)
            record = {"seed": seed, "file": str(path.relative_to(root)), "kind": kind,
                      "semantic": semantic, "finding": finding}  # fmt: skip
            out.write(json.dumps(record) + "\n")
            out.flush()


def _snapshot(root: Path) -> dict[Path, bytes]:
    """The roots and chunks of the dataset at ``root`` (a mutation of chunks may
    change several, and copy chunks under new names)."""
    return {p: p.read_bytes() for d in ("_versions", "_fragments") for p in (root / d).glob("*")}


def _restore(root: Path, saved: dict[Path, bytes]) -> None:
    for d in ("_versions", "_fragments"):
        for p in (root / d).glob("*"):
            if p not in saved:
                p.unlink()
    for p, data in saved.items():
        if p.read_bytes() != data:
            p.write_bytes(data)


def chunk_child(workdir: Path, first_seed: int, count: int, log: Path) -> None:
    """:func:`child` for the chunked dataset: each mutation damages roots or chunks
    (see :func:`_chunk_mutation`), the reads run, everything is put back."""
    from s3ddb.format.chunks import clear_chunk_cache

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGALRM, _on_alarm)
    root = workdir / "ds"
    uri = str(root)
    reads = _reads(uri)
    pristine, untyped = _run_reads(reads)
    assert not untyped and all(v is not None for v in pristine.values()), (untyped, pristine)
    assert _self_consistent(pristine) is None
    saved = _snapshot(root)
    with log.open("a") as out:
        for seed in range(first_seed, first_seed + count):
            rng = random.Random(seed)
            out.write(json.dumps({"seed": seed, "start": "chunks"}) + "\n")
            out.flush()
            finding, kind, semantic = None, "", False
            try:
                try:
                    kind, semantic = _chunk_mutation(rng, root)
                except (ValueError, TypeError, OverflowError):
                    kind, semantic = "none", True  # a value protobuf cannot hold
                clear_chunk_cache()  # as a new process: the chunks are read again
                signal.alarm(PER_MUTATION_SECONDS)
                todo = dict(reads)
                if seed % 8 == 0:
                    todo.update(_writes(uri, workdir / f"w{seed}"))
                results, untyped = _run_reads(todo)
                signal.alarm(0)
                if untyped:
                    finding = "untyped error: " + untyped[0]
                elif not semantic:  # every byte is checksummed (a chunk's in its root)
                    for name, value in results.items():
                        if value is not None and name in pristine and value != pristine[name]:
                            finding = f"wrong read: {name} differs from the undamaged read"
                            break
                if finding is None and (why := _self_consistent(results)) is not None:
                    finding = "wrong read: " + why
            except Timeout:
                finding = f"hang: over {PER_MUTATION_SECONDS} s"
            finally:
                signal.alarm(0)
                _restore(root, saved)
                shutil.rmtree(workdir / f"w{seed}", ignore_errors=True)
            record = {"seed": seed, "file": kind, "kind": kind, "semantic": semantic,
                      "finding": finding}  # fmt: skip
            out.write(json.dumps(record) + "\n")
            out.flush()


# --- the test ----------------------------------------------------------------------------------


def _fuzz(tmp_path: Path, mode: str, count: int) -> list[dict[str, Any]]:
    """Run ``count`` mutations of the dataset built at ``tmp_path / "ds"`` in a child
    (``mode``: "metadata" or "chunks"); assert no finding; the mutations' records."""
    first = int(os.environ.get("S3DDB_FUZZ_SEED", 0))
    log = tmp_path / "log.jsonl"
    log.touch()
    budget = 120 + count * 0.5
    repo = Path(__file__).resolve().parents[2]
    started = time.monotonic()
    argv = [sys.executable, "-m", "tests.format.test_fuzz_metadata", str(tmp_path)]
    process = subprocess.Popen(
        [*argv, str(first), str(count), str(log), mode],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    elapsed = time.monotonic() - started
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    done = {r["seed"]: r for r in records if "finding" in r}
    started_seeds = [r["seed"] for r in records if "start" in r]
    findings = [f"seed {s} ({r['file']}, {'semantic' if r['semantic'] else 'bytes'}): "
                f"{r['finding']}" for s, r in done.items() if r["finding"]]  # fmt: skip
    unfinished = [s for s in started_seeds if s not in done]
    for seed in unfinished:
        findings.append(
            f"seed {seed}: the child died or hung (exit {process.returncode}): "
            f"{output.decode(errors='replace')[-2000:]}"
        )
    if process.returncode != 0 and not unfinished:
        findings.append(f"the child failed: {output.decode(errors='replace')[-3000:]}")
    assert not findings, f"{len(findings)} finding(s) in {len(done)} mutations:\n" + "\n".join(
        findings[:20]
    )
    assert len(done) == count, f"{len(done)} of {count} mutations ran in {elapsed:.0f} s"
    return list(done.values())


def test_mutated_metadata_reads_correctly_or_fails_typed(tmp_path: Path) -> None:
    count = int(os.environ.get("S3DDB_FUZZ_MUTATIONS", DEFAULT_MUTATIONS))
    build(str(tmp_path / "ds"))
    done = _fuzz(tmp_path, "metadata", count)
    kinds = {r["kind"] for r in done}
    assert kinds == set(SEMANTIC) or count < 50, kinds


def test_mutated_chunks_read_correctly_or_fail_typed(tmp_path: Path) -> None:
    count = int(os.environ.get("S3DDB_FUZZ_CHUNK_MUTATIONS", DEFAULT_CHUNK_MUTATIONS))
    build_chunked(str(tmp_path / "ds"))
    done = _fuzz(tmp_path, "chunks", count)
    kinds = {(r["kind"], r["semantic"]) for r in done}
    expected = {(k, s) for k in ("root", "chunk") for s in (True, False)}
    assert expected <= kinds or count < 50, kinds


if __name__ == "__main__":
    run = chunk_child if sys.argv[5:] == ["chunks"] else child
    run(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
