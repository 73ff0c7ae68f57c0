"""Naming schemes, framing, schemas with field ids, manifest and transaction round-trips."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3ddb.errors import InvalidInputError, ManifestCorruptError, SchemaMismatchError
from s3ddb.format.bases import BasePath
from s3ddb.format.fragment_metadata import DataFile, DeletionFile, FragmentMetadata
from s3ddb.format.manifest import Manifest
from s3ddb.format.naming import (
    NamingScheme,
    parse_manifest_name,
    parse_staged_name,
    staged_manifest_name,
)
from s3ddb.format.schema import DatasetSchema, conform
from s3ddb.operations import Append, Overwrite, Restore, Transaction, UpdateConfig


def test_v2_name_of_version_1_is_from_the_design() -> None:
    assert NamingScheme.V2.manifest_name(1) == "18446744073709551614.manifest"
    assert NamingScheme.V1.manifest_name(1) == "1.manifest"


@given(st.integers(min_value=1, max_value=2**63 - 2))  # MAX_VERSION is 2^63 - 1
def test_names_round_trip_and_v2_sorts_newest_first(version: int) -> None:
    for scheme in NamingScheme:
        assert parse_manifest_name(scheme.manifest_name(version)) == (version, scheme)
    assert NamingScheme.V2.manifest_name(version + 1) < NamingScheme.V2.manifest_name(version)


def test_staged_names_are_not_final_names() -> None:
    final = NamingScheme.V2.manifest_name(7)
    staged = staged_manifest_name(final)
    assert parse_manifest_name(staged) is None
    assert parse_staged_name(staged) == (7, NamingScheme.V2)
    assert parse_manifest_name("7.manifest.tmp") is None
    assert parse_manifest_name("0.manifest") is None


def test_only_ascii_digits_name_a_version() -> None:
    """``int()`` reads any script's digits: a planted manifest named with an
    Arabic-Indic one must not be taken for version 1."""
    for other in ("\u0661", "\u0967", "\uff11"):  # Arabic-Indic, Devanagari, fullwidth
        assert parse_manifest_name(f"{other}.manifest") is None
        assert parse_manifest_name("\u0660" * 19 + "4.manifest") is None
        assert parse_staged_name(f"{other}.manifest-{'0' * 32}") is None


def _schema() -> DatasetSchema:
    return DatasetSchema.assign(
        pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                pa.field("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
                pa.field("tags", pa.list_(pa.string()), metadata={"k": "v"}),
            ],
            metadata={"owner": "me"},
        )
    )


def test_field_ids_are_depth_first_and_stable() -> None:
    schema = _schema()
    assert schema.field_id("id") == 0
    assert schema.field_id("s", "a") == 2
    assert schema.field_id("tags") == 4
    evolved = schema.with_arrow(schema.arrow.append(pa.field("new", pa.float64())))
    assert evolved.field_id("tags") == 4
    assert evolved.field_id("new") == schema.max_field_id + 1


def _manifest(naming: NamingScheme = NamingScheme.V2) -> Manifest:
    deletion = DeletionFile("roaring", 3, "abc", 2)
    fragments = (
        FragmentMetadata(0, (DataFile("a.parquet", (0, 1, 4), file_size_bytes=10),), 5),
        FragmentMetadata(
            1, (DataFile("b.parquet", (0, 1), base_id=2), DataFile("c.parquet", (4,))), 7, deletion
        ),
    )
    return Manifest(
        version=9,
        schema=_schema(),
        fragments=fragments,
        max_fragment_id=1,
        config={"c": "1"},
        table_metadata={"m": "2"},
        timestamp_nanos=123,
        naming_scheme=naming,
        transaction_file="8-x.txn",
        operation="Append",
        base_paths=(BasePath(2, "s3://other-bucket/source", name="v3"),),
        cloned_from_version=3,
    )


@pytest.mark.parametrize("naming", list(NamingScheme))
def test_manifest_round_trip(naming: NamingScheme) -> None:
    m = _manifest(naming)
    again = Manifest.from_bytes(m.to_bytes(), "mem")
    assert again == m
    assert again.schema.arrow.equals(m.schema.arrow, check_metadata=True)
    assert again.num_rows == 5 + 7 - 2
    assert again.to_bytes() == m.to_bytes()  # deterministic serialization


@pytest.mark.parametrize("cut", [0, 1, 10, 30, -1, -5, -20])
def test_truncated_manifest_is_detected(cut: int) -> None:
    data = _manifest().to_bytes()
    with pytest.raises(ManifestCorruptError, match="where-it-is"):
        Manifest.from_bytes(data[:cut], "where-it-is")


def test_corrupted_manifest_is_detected() -> None:
    data = bytearray(_manifest().to_bytes())
    data[40] ^= 0xFF
    with pytest.raises(ManifestCorruptError, match="checksum"):
        Manifest.from_bytes(bytes(data), "x")
    with pytest.raises(ManifestCorruptError, match="not an s3ddb file"):
        Manifest.from_bytes(b"PAR1" + bytes(64), "x")


def test_transactions_round_trip() -> None:
    frag = FragmentMetadata(0, (DataFile("a.parquet", (0,)),), 3)
    for op in (
        Append((frag,)),
        Overwrite((frag,), _schema(), {"k": "v"}),
        Restore(4),
        UpdateConfig({"a": "1"}, ("b",), {"m": "x"}, ()),
    ):
        txn = Transaction(5, op, properties={"writer": "w"})
        again = Transaction.from_bytes(txn.to_bytes(), "t")
        assert again == txn
        assert again.file_name == f"5-{txn.uuid}.txn"


def test_operations_validate_themselves() -> None:
    with pytest.raises(InvalidInputError):
        Append(())
    with pytest.raises(InvalidInputError):
        Restore(0)
    with pytest.raises(ValueError):
        FragmentMetadata(0, (), 1)
    with pytest.raises(InvalidInputError, match="field ids"):
        Overwrite((FragmentMetadata(0, (DataFile("a.parquet", (99,)),), 1),), _schema())


def test_fragment_metadata_pickles_and_jsons() -> None:
    import pickle

    frag = _manifest().fragments[1]
    assert pickle.loads(pickle.dumps(frag)) == frag
    assert FragmentMetadata.from_json(frag.to_json()) == frag


def test_conform_reorders_and_rejects_mismatches() -> None:
    target = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    data = pa.table({"s": pa.array(["x"], pa.large_string()), "id": [1]})
    out = conform(data, target, where="ds")
    assert out.schema.equals(target)
    with pytest.raises(SchemaMismatchError, match="missing columns"):
        conform(pa.table({"id": [1]}), target, where="ds")
    with pytest.raises(SchemaMismatchError, match="is double"):
        conform(pa.table({"id": [1.5], "s": ["a"]}), target, where="ds")
    with pytest.raises(SchemaMismatchError, match="not nullable"):
        conform(pa.table({"id": [None, 1], "s": ["a", "b"]}), target, where="ds")


def test_schema_pickles_after_encoding() -> None:
    import pickle

    schema = DatasetSchema.assign(pa.schema([("a", pa.int64()), ("b", pa.string())]))
    first = schema.to_pb()
    first.fields[0].name = "changed by a caller"  # callers get a copy, never the cache
    again = pickle.loads(pickle.dumps(schema))
    assert again == schema
    assert again.to_pb() == schema.to_pb() != first


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=70),
        st.lists(st.one_of(st.none(), st.text(max_size=5)), max_size=70),
        st.lists(st.one_of(st.none(), st.booleans()), max_size=70),
        st.lists(st.one_of(st.none(), st.dates()), max_size=70),
    )
)
def test_small_columns_get_the_bounds_the_kernel_gives(values: list[object]) -> None:
    """Columns of a few values are bounded in Python, larger ones by pyarrow's min_max:
    both give the same statistics."""
    from s3ddb.format import stats

    try:
        array = pa.chunked_array([pa.array(values)])
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return  # e.g. all None with no type to infer
    if array.type == pa.null():
        return
    if pa.types.is_date(array.type):
        array = array.cast(pa.date32())
    small = stats._bounds(array)
    original = stats._SMALL
    try:
        stats._SMALL = -1
        kernel = stats._bounds(array)
    finally:
        stats._SMALL = original
    assert small == kernel


def test_unique_names_have_the_uuid4_form_and_differ_in_a_forked_child() -> None:
    """File names come from one generator per process, seeded again after a fork: a
    child forked from a writer never repeats its parent's next names."""
    import multiprocessing
    import uuid

    from s3ddb.format.naming import unique_hex

    names = [unique_hex() for _ in range(2000)]
    assert len(set(names)) == len(names)
    for name in names:
        parsed = uuid.UUID(hex=name)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, name)
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        in_child = pool.apply(_names, (5,))
    assert not set(in_child) & set(_names(5))


def _names(count: int) -> list[str]:
    from s3ddb.format.naming import unique_hex

    return [unique_hex() for _ in range(count)]
