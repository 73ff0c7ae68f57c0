"""Every per-kind table has every operation of ``s3ddb.operations.OPERATIONS``.

Each operation class states the facts of its kind (``kind``, ``pb_field``, ``changes``,
``committable``, ``in_lance_operation``) and the literal tuple ``OPERATIONS`` lists
every class once. The tables derived from it (the decoder, the stream planner's
kinds) and the literal tables in higher layers (the manifest builders, the conflict
matrix and docs/conflicts.md, pylance's ``LanceOperation``) are checked here, so that
an operation added to the tuple and forgotten in one table fails, naming the table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import s3ddb
from s3ddb.commit.builders import BUILDERS
from s3ddb.commit.conflicts import CONFLICT_MATRIX
from s3ddb.format._proto import transaction_pb2 as tpb
from s3ddb.operations import OPERATION_KINDS, OPERATIONS, Changes, OpaqueOperation, Operation
from s3ddb.operations.kinds import BY_KIND, BY_PB_FIELD, COMMITTABLE
from s3ddb.operations.transaction import DECODERS, Transaction, operation_from_pb
from s3ddb.pylance_compat import LanceOperation, pylance_overwrite
from s3ddb.spark_ext.stream_plan import APPENDING_KINDS, NO_ROW_KINDS

CONFLICTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "conflicts.md"

#: The facts every operation class states itself (not inherited from another class).
FACTS = {
    "kind": str,
    "pb_field": str,
    "changes": Changes,
    "committable": bool,
    "in_lance_operation": bool,
}

#: pylance names whose s3ddb member builds the operation from pylance's arguments
#: instead of being the class itself.
PYLANCE_FACTORIES = {s3ddb.operations.Overwrite: pylance_overwrite}

IDS = [op.kind for op in OPERATIONS]


def _missing(table: str, expected: set[str], present: set[str]) -> str:
    return f"{table} lacks {sorted(expected - present)}, has extra {sorted(present - expected)}"


def test_operations_are_the_transaction_oneof_in_its_order() -> None:
    oneof = tpb.Transaction.DESCRIPTOR.oneofs_by_name["operation"]
    assert [f.name for f in oneof.fields] == [op.pb_field for op in OPERATIONS]
    assert [f.message_type.name for f in oneof.fields] == list(OPERATION_KINDS)
    assert len(set(OPERATIONS)) == len(OPERATIONS)


@pytest.mark.parametrize("op", OPERATIONS, ids=IDS)
def test_every_operation_states_its_own_facts(op: type[Operation]) -> None:
    for name, kind in FACTS.items():
        assert name in vars(op), f"{op.__name__} does not state {name}"
        assert isinstance(vars(op)[name], kind), f"{op.__name__}.{name}"
    assert op.kind == op.__name__


def test_every_operation_class_is_listed_and_exported() -> None:
    exported = {
        value
        for name in s3ddb.operations.__all__
        if isinstance(value := getattr(s3ddb.operations, name), type)
        and issubclass(value, Operation)
        and value not in (Operation, OpaqueOperation)
    }
    assert exported == set(OPERATIONS), "s3ddb.operations.__all__"
    for op in OPERATIONS:
        # s3ddb lists no operation class and has none as an attribute.
        assert not hasattr(s3ddb, op.kind) and op.kind not in s3ddb.__all__, "s3ddb"


@pytest.mark.parametrize("op", OPERATIONS, ids=IDS)
def test_the_decoder_reads_every_committable_kind(op: type[Operation]) -> None:
    assert BY_KIND[op.kind] is op and BY_PB_FIELD[op.pb_field] is op
    if op.committable:
        assert "from_transaction_pb" in vars(op), f"{op.kind} has no decoder"
        assert DECODERS.get(op.pb_field) == op.from_transaction_pb, (
            f"operations.transaction.DECODERS lacks {op.pb_field!r}"
        )
    else:
        assert op.pb_field not in DECODERS, "operations.transaction.DECODERS"
        # Read back as an opaque operation of its kind, and written again as it was.
        message = tpb.Transaction(read_version=1, uuid="u")
        getattr(message, op.pb_field).SetInParent()
        decoded = operation_from_pb(message)
        assert isinstance(decoded, OpaqueOperation) and decoded.kind_name == op.kind
        again = Transaction(1, decoded, uuid="u").to_pb()
        assert again.WhichOneof("operation") == op.pb_field


def test_the_builders_build_every_committable_kind() -> None:
    expected = {op.kind for op in COMMITTABLE}
    assert set(BUILDERS) == set(COMMITTABLE), _missing(
        "commit.builders.BUILDERS", expected, {op.kind for op in BUILDERS}
    )


def test_the_conflict_matrix_has_a_row_per_committable_kind_and_every_column() -> None:
    expected = {op.kind for op in COMMITTABLE}
    assert set(CONFLICT_MATRIX) == expected, _missing(
        "commit.conflicts.CONFLICT_MATRIX rows", expected, set(CONFLICT_MATRIX)
    )
    for mine, row in CONFLICT_MATRIX.items():
        assert list(row) == list(OPERATION_KINDS), f"CONFLICT_MATRIX[{mine!r}] columns"


def test_docs_conflicts_matrix_has_a_row_per_committable_kind_and_every_column() -> None:
    text = CONFLICTS_DOC.read_text()
    table = text.split("<!-- matrix:begin -->")[1].split("<!-- matrix:end -->")[0]
    lines = [line for line in table.strip().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    rows = {line.strip("|").split("|")[0].strip().strip("*") for line in lines[2:]}
    assert header == list(OPERATION_KINDS), "docs/conflicts.md matrix columns"
    expected = {op.kind for op in COMMITTABLE}
    assert rows == expected, _missing("docs/conflicts.md matrix rows", expected, rows)


def test_the_stream_tables_place_every_kind() -> None:
    no_rows = {op.kind for op in OPERATIONS if op.changes in (Changes.NOTHING, Changes.SCHEMA)}
    appending = {op.kind for op in OPERATIONS if op.changes is Changes.APPENDS}
    assert set(NO_ROW_KINDS) == no_rows, _missing("stream_plan.NO_ROW_KINDS", no_rows, NO_ROW_KINDS)
    assert set(APPENDING_KINDS) == appending, _missing(
        "stream_plan.APPENDING_KINDS", appending, APPENDING_KINDS
    )


@pytest.mark.parametrize("op", OPERATIONS, ids=IDS)
def test_lance_operation_has_every_kind_pylance_has(op: type[Operation]) -> None:
    member = getattr(LanceOperation, op.kind, None)
    if not op.in_lance_operation:
        assert member is None, f"LanceOperation.{op.kind}: pylance has no such operation"
    else:
        assert member is PYLANCE_FACTORIES.get(op, op), f"LanceOperation.{op.kind}"


@pytest.mark.parametrize("op", OPERATIONS, ids=IDS)
def test_in_lance_operation_is_what_pylance_has(op: type[Operation]) -> None:
    lance = pytest.importorskip("lance")
    assert hasattr(lance.LanceOperation, op.kind) == op.in_lance_operation
