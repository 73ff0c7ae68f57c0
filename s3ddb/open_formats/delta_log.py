"""Reading the published Delta log back within bounds, and checking it against the
manifests.

The manifests are the source of truth; the log is output. :func:`load_checked_state`
gives the state after a version (what the next publication builds on) only once it
agrees with that version's :class:`~s3ddb.open_formats.model.TableVersion`, built
from its manifest: the live files are exactly the version's files (log path, size,
``numRecords``, and a deletion vector named after the file's deletion key, of its
number of deleted rows, whose file in ``dv/`` has the size the descriptor gives and
holds exactly the bytes s3ddb writes for the deleted rows its deletion file gives), the
table id and schema are the ones s3ddb derives, the configuration and protocol are
ones s3ddb writes, never lowered, and the newest commit is s3ddb's commit of that
version (its ``commitInfo``). What the manifests cannot give (when each file was
added, the protocol reached, the table's creation time, each deletion vector's size)
is taken from the log only once checked like that. Anything else raises
:class:`~s3ddb.errors.PublishedStateError` naming the file.

Bounds (all of a load together; ``N`` is the number of files the version lists, a
number from its manifest):

* bytes read: :data:`LOAD_BYTES` + :data:`LOAD_BYTES_PER_FILE` per file and per
  stray allowed; every read is a ranged read of at most what is left. A commit is read
  :data:`READ_BLOCK` at a time, line by line (one ranged GET for a commit of up to
  4 MiB);
* files live at any point of the replay that the version does not list ("strays":
  files later versions removed): :data:`MAX_STRAY_ADDS` + N. A checkpoint holds at most
  2 + N + that many rows, and its declared rows, values and sizes are checked before
  it is decoded (:mod:`s3ddb.open_formats.parquet_bounds`);
* commits replayed after the checkpoint: :data:`MAX_REPLAY`.

A log s3ddb wrote within those bounds always loads; one beyond them is refused like a
damaged one, and the next version is published afresh (with a checkpoint).

:func:`log_problems` is verify's view (every commit and checkpoint of the versions
up to the one checked, and the state after it), :class:`KeptLogCheck` its view of the
state after each older kept version (carried from one version to the next),
:func:`foreign_problems` what another engine wrote in the log; :func:`expire_log` is
cleanup's.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from s3ddb.errors import ManifestCorruptError, OpenFormatError, PublishedStateError, S3DDBError
from s3ddb.io.object_store import ObjectMeta, ObjectStore
from s3ddb.io.parallel import run_all_beside
from s3ddb.open_formats.deletion_vectors import (
    DV_PREFIX,
    dv_file_bytes,
    dv_path,
    parse_u_descriptor,
)
from s3ddb.open_formats.delta_schema import delta_schema
from s3ddb.open_formats.delta_state import (
    DV_FILE_OVERHEAD,
    ENABLE_DV,
    LAST_CHECKPOINT,
    LOG_DIR,
    MAX_ACTION_BYTES,
    MAX_SCHEMA_BYTES,
    CommitAction,
    CommitInfo,
    DeltaAdd,
    DeltaMetadata,
    DeltaState,
    Protocol,
    checkpoint_bytes,
    checkpoint_path,
    checkpoint_state,
    commit_path,
    deletion_files,
    dumps,
    dv_descriptor,
    log_path,
    log_version,
    needed_protocol,
    parse_commit_line,
    required_features,
)
from s3ddb.open_formats.model import CUT_KEY, DeletedPositions, PublishedFile, TableVersion
from s3ddb.open_formats.parquet_bounds import ParquetBounds

__all__ = [
    "LOAD_BYTES",
    "LOAD_BYTES_PER_FILE",
    "MAX_LAST_CHECKPOINT_BYTES",
    "MAX_REPLAY",
    "MAX_STRAY_ADDS",
    "READ_BLOCK",
    "KeptLogCheck",
    "LogListing",
    "expire_log",
    "foreign_problems",
    "list_log",
    "load_checked_state",
    "log_problems",
]

log = logging.getLogger(__name__)

#: A commit is read this many bytes at a time.
READ_BLOCK = 4 << 20
#: The most commits replayed after a checkpoint.
MAX_REPLAY = 1000
#: Files live at once during a replay that the version loaded does not list.
MAX_STRAY_ADDS = 10_000
#: Bytes one load reads, besides LOAD_BYTES_PER_FILE for each file and stray.
LOAD_BYTES = 64 << 20
#: Bytes one load may read per file the version lists and per stray allowed.
LOAD_BYTES_PER_FILE = 4 << 10
#: The largest ``_last_checkpoint`` read.
MAX_LAST_CHECKPOINT_BYTES = 64 << 10


# --- listing ---------------------------------------------------------------------------


@dataclass
class LogListing:
    """The files under ``_delta_log/``: commits and checkpoints by version, the
    ``_last_checkpoint`` pointer, and every other path."""

    commits: dict[int, ObjectMeta] = field(default_factory=dict)
    checkpoints: dict[int, ObjectMeta] = field(default_factory=dict)
    last_checkpoint: ObjectMeta | None = None
    others: list[str] = field(default_factory=list)


def list_log(listed: Iterable[ObjectMeta]) -> LogListing:
    """The log files among ``listed`` (any listing of the root, or of ``_delta_log/``)."""
    out = LogListing()
    for meta in listed:
        if not meta.path.startswith(f"{LOG_DIR}/"):
            continue
        parsed = log_version(meta.path)
        if parsed is None:
            if meta.path == LAST_CHECKPOINT:
                out.last_checkpoint = meta
            else:
                out.others.append(meta.path)
        elif parsed[1] == "commit":
            out.commits[parsed[0]] = meta
        else:
            out.checkpoints[parsed[0]] = meta
    return out


def foreign_problems(store: ObjectStore, newest_version: int) -> list[tuple[str, str]]:
    """What in ``_delta_log/`` s3ddb did not write beside its own versions: commits
    and checkpoints after ``newest_version`` (the newest s3ddb version), a
    ``_last_checkpoint`` naming a version after it, and files of kinds s3ddb never
    writes (checksums, compacted logs, other checkpoint kinds, staged commits), which
    readers would use; each as its path and what is wrong. A checkpoint after the
    newest version takes over Delta readers even with no commit beside it: they
    start from the newest checkpoint they list, and read its state as the newest
    version, whatever s3ddb commits after. One listing, and a read of
    ``_last_checkpoint`` when it is there; empty when all is s3ddb's. (Commits and
    checkpoints of s3ddb's versions that are not as s3ddb writes them are
    :func:`log_problems`'.)

    Raises:
        OSError: the store cannot be listed or read.
    """
    listing = list_log(store.iter_list(f"{LOG_DIR}/"))
    problems = [
        (meta.path, f"Delta {kind} {version} is newer than s3ddb version {newest_version}")
        for kind, found in (("commit", listing.commits), ("checkpoint", listing.checkpoints))
        for version, meta in sorted(found.items())
        if version > newest_version
    ]
    if listing.last_checkpoint is not None:
        named = _last_checkpoint(store)
        if named is not None and named > newest_version:
            problems.append(
                (
                    LAST_CHECKPOINT,
                    f"names checkpoint {named}, newer than s3ddb version {newest_version}",
                )
            )
    problems += [(path, f"not a file s3ddb writes in {LOG_DIR}/") for path in listing.others]
    return problems


# --- bounded reads ---------------------------------------------------------------------


def _fail(path: str, why: str) -> PublishedStateError:
    return PublishedStateError(f"{path}: {why}", path=path)


@dataclass(frozen=True)
class _Limits:
    """The bounds of one load, from the number of files the version lists."""

    files: int

    @property
    def strays(self) -> int:
        return MAX_STRAY_ADDS + self.files

    @property
    def load_bytes(self) -> int:
        return LOAD_BYTES + LOAD_BYTES_PER_FILE * (self.files + self.strays)

    @property
    def checkpoint(self) -> ParquetBounds:
        rows = 2 + self.files + self.strays
        return ParquetBounds(
            max_rows=rows,
            max_values=rows + 64,
            max_page_bytes=MAX_SCHEMA_BYTES + (1 << 20),
            max_decoded_bytes=2 * MAX_SCHEMA_BYTES + (8 << 10) * rows,
        )


class _Budget:
    """The bytes one load may still read."""

    def __init__(self, limit: int, spent: int = 0) -> None:
        self.limit = limit
        self.left = limit - spent

    @property
    def spent(self) -> int:
        return self.limit - self.left

    def take(self, count: int, path: str) -> None:
        self.left -= count
        if self.left < 0:
            raise _fail(path, f"the log read for one version exceeds {self.limit} bytes")

    def get(self, store: ObjectStore, path: str) -> bytes:
        """The whole of ``path``, refused unread beyond what is left.

        Raises:
            FileNotFoundError: it does not exist.
        """
        data = store.get_prefix(path, self.left + 1)
        self.take(len(data), path)
        return data


def _lines(store: ObjectStore, path: str, budget: _Budget, first: bytes | None) -> Iterator[bytes]:
    """The lines of commit ``path``, read a block at a time (``first``: its first
    block, already read)."""
    offset = 0
    pending = b""
    block = first
    while True:
        if block is None:
            try:
                block = store.get_range(path, offset, offset + READ_BLOCK)
            except FileNotFoundError as e:
                raise _fail(path, "deleted while it was read") from e
        budget.take(len(block), path)
        offset += len(block)
        lines = (pending + block).split(b"\n")
        pending = lines.pop()
        if len(pending) > MAX_ACTION_BYTES:
            raise _fail(path, f"a line longer than {MAX_ACTION_BYTES} bytes")
        for line in lines:
            if not line:
                raise _fail(path, "an empty line (s3ddb writes none)")
            yield line
        if len(block) < READ_BLOCK:
            break
        block = None
    if pending:
        raise _fail(path, "its last line is not terminated (a truncated commit)")


def _commit_actions(
    store: ObjectStore, path: str, version: int, budget: _Budget, first: bytes | None = None
) -> Iterator[CommitAction]:
    """The actions of commit ``path`` (of ``version``), each checked as one s3ddb
    writes (:func:`~s3ddb.open_formats.delta_state.parse_commit_line`)."""
    info: CommitInfo | None = None
    for line in _lines(store, path, budget, first):
        kind, value = parse_commit_line(line, path, version, info is None, info)
        if kind == "commitInfo":
            info = value
        yield kind, value
    if info is None:
        raise _fail(path, "an empty commit")


def _last_checkpoint(store: ObjectStore) -> int | None:
    """The version ``_last_checkpoint`` names, None when it is missing or unreadable
    (only a hint: what it names is checked when read)."""
    try:
        raw = store.get_prefix(LAST_CHECKPOINT, MAX_LAST_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(raw) > MAX_LAST_CHECKPOINT_BYTES or raw.count(b"{") + raw.count(b"[") > 4:
        return None
    try:
        last = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    version = last.get("version") if isinstance(last, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version >= 0:
        return version
    return None


# --- replay and checks -----------------------------------------------------------------


class _Replay:
    """The state the actions applied so far give, within the stray bound."""

    def __init__(self, want: Mapping[str, PublishedFile], limits: _Limits) -> None:
        self.want = want
        self.limits = limits
        self.protocol: tuple[Protocol, str] | None = None
        self.metadata: tuple[DeltaMetadata, str] | None = None
        self.adds: dict[str, tuple[DeltaAdd, str]] = {}
        self.strays = 0
        #: The most files live at once so far (strays of any version are fewer).
        self.peak = 0

    def rebase(self, want: Mapping[str, PublishedFile], limits: _Limits) -> None:
        """Go on replaying for another version (``want``, ``limits``): its strays are
        the live files it does not list."""
        self.want = want
        self.limits = limits
        self.strays = sum(1 for path in self.adds if path not in want)

    def start_at(self, data: bytes, where: str) -> None:
        """Start from checkpoint ``where`` (its bytes ``data``), read within the
        bounds of the version replayed."""
        protocol, metadata, adds = checkpoint_state(data, where, self.limits.checkpoint)
        self.set_protocol(protocol, where)
        self.metadata = (metadata, where)
        for add in adds:
            self.add(add, where)

    def set_protocol(self, protocol: Protocol, where: str) -> None:
        if self.protocol is not None and not protocol.covers(self.protocol[0]):
            raise _fail(where, f"lowers the protocol (from {self.protocol[0].to_json()})")
        self.protocol = (protocol, where)

    def add(self, add: DeltaAdd, where: str) -> None:
        if add.path not in self.adds and add.path not in self.want:
            self.strays += 1
            if self.strays > self.limits.strays:
                raise _fail(
                    where,
                    f"more than {self.limits.strays} files live at once that the version "
                    "checked does not list",
                )
        self.adds[add.path] = (add, where)
        self.peak = max(self.peak, len(self.adds))

    def remove(self, path: str) -> None:
        if self.adds.pop(path, None) is not None and path not in self.want:
            self.strays -= 1

    def apply(self, action: CommitAction, where: str) -> None:
        kind, value = action
        if kind == "protocol":
            self.set_protocol(value, where)
        elif kind == "metaData":
            self.metadata = (value, where)
        elif kind == "add":
            self.add(value, where)
        elif kind == "remove":
            self.remove(value)

    def checked(
        self,
        store: ObjectStore,
        expected: TableVersion,
        head: str,
        dv_checked: set[str] | None = None,
        dv_sizes: Mapping[str, int] | None = None,
    ) -> DeltaState:
        """The state, once it agrees with ``expected`` (see the module docstring).
        ``dv_checked`` is :func:`_check_dv_contents`' ``checked``, ``dv_sizes``
        :func:`_check_dv_files`' ``sizes``."""
        if self.protocol is None or self.metadata is None:
            raise _fail(head, "the log has no protocol or metaData")
        protocol, protocol_where = self.protocol
        metadata, metadata_where = self.metadata
        if metadata.table_id != expected.table_uuid:
            raise _fail(
                metadata_where,
                f"metaData id {metadata.table_id!r} is not the table's ({expected.table_uuid})",
            )
        if metadata.schema_string != delta_schema(expected.schema):
            raise _fail(
                metadata_where, f"schemaString is not the schema of version {expected.version}"
            )
        adds: dict[str, DeltaAdd] = {}
        for path, (found, where) in self.adds.items():
            f = self.want.get(path)
            if f is None:
                raise _fail(where, f"adds {path}, which version {expected.version} does not list")
            derived = _derived_add(f, found)
            if found != derived:
                raise _fail(where, f"add {path} is not what version {expected.version} gives")
            adds[path] = derived
        for path in self.want:
            if path not in adds:
                raise _fail(
                    head, f"version {expected.version} lists {path}, which the log does not add"
                )
        config = dict(metadata.configuration)
        if any(a.deletion_vector is not None for a in adds.values()) and ENABLE_DV not in config:
            raise _fail(metadata_where, f"deletion vectors without {ENABLE_DV}")
        if needed_protocol(protocol, required_features(config, expected.schema)) != protocol:
            raise _fail(protocol_where, f"protocol {protocol.to_json()} lacks a feature in use")
        _check_dv_files(store, adds, self.adds, dv_sizes)
        if expected.deleted is not None:
            _check_dv_contents(store, adds, self.adds, self.want, expected.deleted, dv_checked)
        return DeltaState(expected.version, protocol, metadata, adds)


def _derived_add(f: PublishedFile, found: DeltaAdd) -> DeltaAdd:
    """The ``add`` publication writes for ``f``, with what the manifests cannot give
    (when it was added, its deletion vector's size) taken from ``found``."""
    dv = None
    if f.deletion_key is not None:
        size = found.deletion_vector.size_in_bytes if found.deletion_vector else -1
        dv = dv_descriptor(f.deletion_key, size, f.deleted_rows)
    return DeltaAdd(
        log_path(f), f.size, found.modification_time, dumps({"numRecords": f.physical_rows}), dv
    )


def _check_dv_files(
    store: ObjectStore,
    adds: Mapping[str, DeltaAdd],
    found: Mapping[str, tuple[DeltaAdd, str]],
    sizes: Mapping[str, int] | None = None,
) -> None:
    """Each deletion vector's file is in ``dv/``, of the size its descriptor gives
    (one listing, when there are any and ``sizes``, the size of each file of ``dv/``
    by path, is not given)."""
    with_dv = {path: add for path, add in adds.items() if add.deletion_vector is not None}
    if not with_dv:
        return
    if sizes is None:
        sizes = {meta.path: meta.size for meta in store.iter_list(f"{DV_PREFIX}/")}
    for path, add in with_dv.items():
        descriptor = add.deletion_vector
        assert descriptor is not None
        _, dv_uuid = parse_u_descriptor(descriptor.path_or_inline_dv)
        name = dv_path(dv_uuid)
        size = sizes.get(name)
        if size != descriptor.size_in_bytes + DV_FILE_OVERHEAD:
            where = found[path][1]
            what = "missing" if size is None else f"{size} bytes"
            raise _fail(
                where,
                f"add {path}: its deletion vector {name} is {what}, the descriptor gives "
                f"{descriptor.size_in_bytes} + {DV_FILE_OVERHEAD}",
            )


#: Deletion vector files checked at once (each check holds one file and its rendering).
_DV_WAVE = 256


def _check_dv_contents(
    store: ObjectStore,
    adds: Mapping[str, DeltaAdd],
    found: Mapping[str, tuple[DeltaAdd, str]],
    want: Mapping[str, PublishedFile],
    deleted: DeletedPositions,
    checked: set[str] | None = None,
) -> None:
    """Each deletion vector's file (its size already checked) is, byte for byte, the
    one s3ddb writes for its data file's deleted rows, rendered again from s3ddb's
    deletion file (``deleted``): the next commit builds on these ``add`` actions
    (readers of the new version replay them, and its checkpoint lists them again),
    so a file rewritten with the same size (other positions, a valid CRC) would
    have every Delta reader of the new version delete other rows than s3ddb. Refused,
    the next version is published afresh, which writes every deletion vector file
    again under its name (derived from the deletion key), the changed one included.

    A deletion vector file and s3ddb's deletion file are read once each, the DV
    bounded by the length of its rendering (side by side on S3, in waves of
    :data:`_DV_WAVE`); the first problem, in the order of ``adds``, is raised.
    ``checked`` (when given) holds the deletion vector files found s3ddb's already,
    which are not read again, and gets those found s3ddb's here.

    Raises:
        PublishedStateError: naming the commit or checkpoint that adds the file;
            also when the file's deleted rows cannot be read (then it cannot be
            checked).
        OSError: the store cannot be read.
    """
    with_dv = [
        path
        for path, add in adds.items()
        if add.deletion_vector is not None
        and (checked is None or _dv_name(want[path]) not in checked)
    ]
    for start in range(0, len(with_dv), _DV_WAVE):
        run_all_beside(
            store,
            (
                functools.partial(_check_dv_content, store, want[path], found[path][1], deleted)
                for path in with_dv[start : start + _DV_WAVE]
            ),
        )
    if checked is not None:
        checked.update(_dv_name(want[path]) for path in with_dv)


def _dv_name(file: PublishedFile) -> str:
    assert file.deletion_key is not None  # it has a deletion vector
    return deletion_files(file.deletion_key)[0]


def _check_dv_content(
    store: ObjectStore, file: PublishedFile, where: str, deleted: DeletedPositions
) -> None:
    name = _dv_name(file)
    try:
        expected = dv_file_bytes(deleted(file))[0]
    except (ManifestCorruptError, OpenFormatError, ValueError) as exc:
        raise _fail(
            where, f"{name} cannot be checked: its deleted rows cannot be read ({exc})"
        ) from None
    try:
        stored, size = store.get_bounded(name, len(expected))
    except FileNotFoundError:
        raise _fail(where, f"its deletion vector {name} is missing") from None
    if size != len(expected) or stored != expected:
        raise _fail(
            where,
            f"add {log_path(file)}: its deletion vector {name} is not the one s3ddb writes "
            "for the file's deleted rows (its bytes were changed)",
        )


def _newest_checkpoint(
    store: ObjectStore, version: int, budget: _Budget
) -> tuple[int, bytes] | None:
    """The newest checkpoint at or before ``version`` and its bytes: the one
    ``_last_checkpoint`` names when it is at or before ``version`` and there, else the
    newest listed."""
    hinted = _last_checkpoint(store)
    if hinted is not None and hinted <= version:
        try:
            return hinted, budget.get(store, checkpoint_path(hinted))
        except FileNotFoundError:
            pass  # a stale pointer: the listing decides
    listing = list_log(store.iter_list(f"{LOG_DIR}/"))
    older = [v for v in listing.checkpoints if v <= version]
    if not older:
        return None
    newest = max(older)
    try:
        return newest, budget.get(store, checkpoint_path(newest))
    except FileNotFoundError as e:
        raise _fail(checkpoint_path(newest), "deleted while the log was read") from e


def _read_head(store: ObjectStore, expected: TableVersion) -> bytes | None:
    """The first block of ``expected.version``'s commit, once its ``commitInfo`` (its
    first line) is s3ddb's of that version: its cut, time and operation; None when
    the commit does not exist.

    Raises:
        PublishedStateError: it is not (naming the commit).
    """
    version = expected.version
    head = commit_path(version)
    try:
        first_block = store.get_range(head, 0, READ_BLOCK)
    except FileNotFoundError:
        return None
    newline = first_block.find(b"\n")
    if newline < 0:
        raise _fail(head, "no commitInfo line (s3ddb's is its first, and short)")
    _, info = parse_commit_line(first_block[:newline], head, version, True, None)
    if info.cut != expected.cut:
        raise _fail(head, f"commitInfo's {CUT_KEY} is not version {version}'s cut")
    if (info.timestamp, info.operation) != (expected.timestamp_ms, expected.operation):
        raise _fail(
            head,
            f"commitInfo says {info.operation} at {info.timestamp}, version {version} is "
            f"{expected.operation} at {expected.timestamp_ms}",
        )
    return first_block


def _replay_commits(
    store: ObjectStore,
    replay: _Replay,
    first: int,
    version: int,
    budget: _Budget,
    first_block: bytes,
) -> None:
    """Apply the commits ``first`` to ``version`` (whose first block, ``first_block``,
    is read already) to ``replay``, in order.

    Raises:
        PublishedStateError: one is missing, beyond the bounds or not as s3ddb writes
            it (naming it).
    """
    head = commit_path(version)
    for v in range(first, version + 1):
        where = commit_path(v)
        try:
            for action in _commit_actions(
                store, where, v, budget, first_block if v == version else None
            ):
                replay.apply(action, where)
        except FileNotFoundError as e:
            raise _fail(where, f"missing from the log before {head}") from e


def _check_replay_length(version: int, first: int) -> None:
    """Refuse replaying more than :data:`MAX_REPLAY` commits, ``first`` to ``version``."""
    if version - first >= MAX_REPLAY:
        raise _fail(
            commit_path(version), f"{version - first + 1} commits since the last checkpoint"
        )


def load_checked_state(store: ObjectStore, expected: TableVersion) -> DeltaState | None:
    """The Delta state after ``expected.version``, rebuilt from the log (``store``
    rooted at the dataset) and checked against ``expected`` (see the module
    docstring); None when ``_delta_log/<version>.json`` does not exist. It starts
    from the checkpoint ``_last_checkpoint`` names when that one is at or before the
    version, else from the newest listed (one listing).

    Raises:
        PublishedStateError: a log file beyond the bounds, malformed, not as s3ddb
            writes it, missing between the checkpoint and the version, or a state that
            disagrees with ``expected`` (naming the file).
    """
    version = expected.version
    first_block = _read_head(store, expected)
    if first_block is None:
        return None
    want = {log_path(f): f for f in expected.all_files()}
    limits = _Limits(len(want))
    budget = _Budget(limits.load_bytes)
    replay = _Replay(want, limits)
    start = _newest_checkpoint(store, version, budget)
    if start is not None:
        checkpoint, data = start
        replay.start_at(data, checkpoint_path(checkpoint))
        first = checkpoint + 1
    else:
        # No checkpoint (s3ddb writes one where publication starts): from the first
        # commit, which then must hold the protocol and metaData.
        commits = list_log(store.iter_list(f"{LOG_DIR}/")).commits
        first = min((v for v in commits if v <= version), default=version)
    _check_replay_length(version, first)
    _replay_commits(store, replay, first, version, budget, first_block)
    return replay.checked(store, expected, commit_path(version))


# --- verify ----------------------------------------------------------------------------


def _bases(files: Iterable[PublishedFile]) -> set[str]:
    """The roots of the other bases (a shallow clone's source) the files lie under."""
    return {f.path.rpartition("/data/")[0] for f in files if not f.is_relative}


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _outside(path: str, bases: set[str]) -> bool:
    """Whether a log path resolves outside the root and the declared bases."""
    raw = unquote(path)
    segments = raw.split("://", 1)[-1].split("/")
    if ".." in segments or "\\" in raw or not raw:
        return True
    # Any scheme makes a path absolute (``file:/x`` as ``file:///x``; Hadoop readers
    # resolve both), as does a leading slash.
    if _SCHEME.match(raw) or raw.startswith("/"):
        return not any(raw.startswith(f"{base}/") for base in bases if base)
    return False


def log_problems(store: ObjectStore, expected: TableVersion) -> list[str]:
    """What is wrong with the Delta log of ``expected.version`` and the versions before
    it, each a sentence naming the file: a commit or checkpoint that is not as s3ddb
    writes it (unreadable, beyond its bounds, of another version than it claims) or
    that names a path outside the root and its declared bases; a ``_last_checkpoint``
    naming no checkpoint; and the state after ``expected.version`` disagreeing with the
    manifests. Commits after it are :func:`~s3ddb.open_formats.delta.foreign_problems`'.
    Each file read within the bounds of a load."""
    found: dict[str, str] = {}

    def note(error: PublishedStateError) -> None:
        found.setdefault(error.path, str(error))

    try:
        files = expected.all_files()
    except S3DDBError:
        return []  # the version's own files cannot be read: verify's version checks say so
    try:
        load_checked_state(store, expected)
    except PublishedStateError as e:
        note(e)
    bases = _bases(files)
    limits = _Limits(len(files))
    listing = list_log(store.iter_list(f"{LOG_DIR}/"))
    for version, meta in sorted(listing.commits.items()):
        if version > expected.version or meta.path in found:
            continue
        try:
            budget = _Budget(limits.load_bytes)
            for kind, value in _commit_actions(store, meta.path, version, budget):
                path = value.path if kind == "add" else value if kind == "remove" else None
                if path is not None and _outside(path, bases):
                    raise _fail(meta.path, f"names {path}, outside the dataset")
        except PublishedStateError as e:
            note(e)
    for version, meta in sorted(listing.checkpoints.items()):
        if version > expected.version or meta.path in found:
            continue
        try:
            data = _Budget(limits.load_bytes).get(store, meta.path)
            for add in checkpoint_state(data, meta.path, limits.checkpoint)[2]:
                if _outside(add.path, bases):
                    raise _fail(meta.path, f"names {add.path}, outside the dataset")
        except FileNotFoundError:
            continue
        except PublishedStateError as e:
            note(e)
    if listing.last_checkpoint is not None:
        named = _last_checkpoint(store)
        if named is None or named not in listing.checkpoints:
            found.setdefault(
                LAST_CHECKPOINT, f"{LAST_CHECKPOINT}: does not name a checkpoint of the log"
            )
    return list(found.values())


# --- cleanup ---------------------------------------------------------------------------


def _holds(store: ObjectStore, path: str, data: bytes) -> bool:
    """Whether ``path`` holds exactly ``data`` (reading at most one byte more)."""
    try:
        stored, size = store.get_bounded(path, len(data))
    except FileNotFoundError:
        return False
    return size == len(data) and stored == data


def expire_log(
    store: ObjectStore,
    listed: Iterable[ObjectMeta],
    kept: Sequence[int],
    expected: Callable[[int], TableVersion | None],
) -> list[ObjectMeta]:
    """The log files cleanup deletes once the versions it removes are gone; ``listed``
    is a listing of the root (or of ``_delta_log/``), ``kept`` the versions cleanup
    keeps and ``expected`` gives a kept version as it is published when publication
    starts there (None: it does not publish Delta).

    A Delta log has no gaps: a reader that reaches a version replays every commit
    after the checkpoint it starts from. So the log starts at ``oldest``, the oldest
    version of the newest unbroken run of kept versions that publishes Delta (a tagged
    version kept apart, before a removed one, stays readable in s3ddb and Iceberg
    only), and every version a Delta reader can then reach is a kept one. When no
    version of that run publishes Delta, the commits and checkpoints before the run
    go.

    A checkpoint at ``oldest`` is written first unless one holding exactly its bytes
    is there: the state after it, loaded and checked against the manifests
    (:func:`load_checked_state`), so its bytes are what publication would write
    there. ``_last_checkpoint`` is pointed at it when it names an earlier checkpoint
    or none. When that state cannot be loaded
    (a damaged log), the log starts at the oldest checkpoint after ``oldest`` instead,
    or stays whole when there is none (said in a warning; ``s3ddb open-formats URI
    --rebuild`` mends it). Commits and checkpoints after the newest kept version are
    left alone, foreign or not (a concurrent writer may be publishing a newer
    version): :func:`foreign_problems` names another engine's.

    Raises:
        What ``expected`` or the store raises (a damaged log is not an error: see
        above).
    """
    listing = list_log(listed)
    if not kept or not (listing.commits or listing.checkpoints or listing.last_checkpoint):
        return []
    ordered = sorted(kept)
    run = len(ordered) - 1
    while run > 0 and ordered[run - 1] == ordered[run] - 1:
        run -= 1
    floor = ordered[run]
    oldest = None
    for version in ordered[run:]:
        if version not in listing.commits:
            continue  # not published in Delta
        oldest = expected(version)
        if oldest is not None:
            break
    entries = [*listing.commits.items(), *listing.checkpoints.items()]
    pointer: bytes | None = None
    if oldest is None:
        start = floor
    else:
        try:
            state = load_checked_state(store, oldest)
        except PublishedStateError as e:
            state = None
            log.warning("%s: cannot checkpoint Delta version %d: %s", store.url, oldest.version, e)
        if state is not None:
            data, rows = checkpoint_bytes(state)
            # A checkpoint listed there is used only if it is this one: any file can
            # bear the name, and every commit before it is about to go.
            if not _holds(store, checkpoint_path(oldest.version), data):
                store.put(checkpoint_path(oldest.version), data)
            start = oldest.version
            last = {
                "version": start,
                "size": rows,
                "sizeInBytes": len(data),
                "numOfAddFiles": len(state.adds),
            }
            pointer = dumps(last).encode()
        else:
            later = [v for v in listing.checkpoints if v > oldest.version]
            if not later:
                log.warning(
                    "%s: the Delta log before version %d stays: it has no checkpoint "
                    "after it (`s3ddb open-formats URI --rebuild` republishes the log)",
                    store.url, oldest.version,
                )  # fmt: skip
                return []
            start = min(later)
    doomed = [meta for version, meta in entries if version < start]
    if listing.last_checkpoint is not None or pointer is not None:
        named = _last_checkpoint(store) if listing.last_checkpoint is not None else None
        staying = {v for v in listing.checkpoints if v >= start} | ({start} if pointer else set())
        if named is None or named not in staying:
            if pointer is not None:
                store.put(LAST_CHECKPOINT, pointer)
            elif listing.last_checkpoint is not None:
                # Readers list the log without it; the next checkpoint writes it again.
                doomed.append(listing.last_checkpoint)
    return doomed


# --- verify, older versions ------------------------------------------------------------


@dataclass
class _Chain:
    """The log replayed from one start (a checkpoint, or the log's first commit when
    there is none) through commit ``through``: what the next version starting there
    extends."""

    start: int | None
    first: int
    replay: _Replay
    through: int
    #: Bytes read since the start (the checkpoint and commits): every version
    #: extending the chain counts them in its budget, as its own load would.
    read: int
    #: The fewest files a version the checkpoint was read for lists: the checkpoint
    #: was read within that version's bounds, the smallest so far (they grow with
    #: the files).
    files: int


class KeptLogCheck:
    """verify's check of the log of the kept versions older than the newest, one call
    per version (oldest first), each as its manifest gives it: the state after it,
    checked as :func:`load_checked_state` checks it (its commit, the live files, and
    each deletion vector's bytes against the one s3ddb renders from its deletion
    file), within the same bounds, with the same outcome. A version whose commit is not
    in the log (not published, or before where cleanup starts the log) is skipped.

    The versions share reads, so that checking ``V`` versions reads each commit and
    checkpoint about once and lists nothing: ``listed`` (a listing of the dataset
    root, or of ``_delta_log/`` and ``dv/``, taken before) gives the commits and
    checkpoints there are and the sizes of the deletion vector files. A version
    starts from the newest checkpoint listed at or before it, as a Delta reader
    travelling to it does (``_last_checkpoint`` names the newest of all). When the
    version before started there too, its state is carried forward by the version's
    commit alone rather than replayed again from the checkpoint; it is loaded anew
    when the replay before failed, or when the version's own load could be refused
    where the one before was not (its bounds, from its number of files, are below the
    bytes read or the files live so far). The bytes of the checkpoint read last are
    held, so that a version loaded anew from it does not read it again. A deletion
    vector file is compared once, whichever version lists it first: its name is a
    function of the deleted rows, so it is the same file for each. Memory: one
    version's state and one checkpoint's bytes, besides the names of the commits,
    checkpoints and deletion vector files.
    """

    def __init__(self, store: ObjectStore, listed: Iterable[ObjectMeta]) -> None:
        self._store = store
        metas = [m for m in listed if m.path.startswith((f"{LOG_DIR}/", f"{DV_PREFIX}/"))]
        listing = list_log(metas)
        self._commits = set(listing.commits)
        self._checkpoints = sorted(listing.checkpoints)
        self._dv_sizes = {m.path: m.size for m in metas if m.path.startswith(f"{DV_PREFIX}/")}
        self._dv_checked: set[str] = set()
        self._checkpoint: tuple[int, bytes] | None = None
        self._chain: _Chain | None = None

    def __call__(self, expected: TableVersion) -> list[str]:
        """What is wrong with the log of ``expected.version`` (a sentence naming the
        file), empty when nothing is.

        Raises:
            OSError: the store cannot be read.
        """
        try:
            self._check(expected)
        except PublishedStateError as exc:
            return [str(exc)]
        return []

    def _check(self, expected: TableVersion) -> None:
        version = expected.version
        if version not in self._commits:
            return  # not published, or before where cleanup starts the log
        first_block = _read_head(self._store, expected)
        if first_block is None:
            return  # deleted since the listing (a cleanup)
        want = {log_path(f): f for f in expected.all_files()}
        limits = _Limits(len(want))
        start = max((c for c in self._checkpoints if c <= version), default=None)
        chain = self._chain
        self._chain = None  # kept only once it is extended without error
        if (
            chain is None
            or chain.start != start
            or chain.through >= version
            or chain.read > limits.load_bytes
            or chain.replay.peak > limits.strays
        ):
            chain = self._fresh(start, version, want, limits)
        else:
            chain.replay.rebase(want, limits)
            if start is not None and limits.files < chain.files:
                # The checkpoint within this version's smaller bounds, as its own load
                # reads it (the bytes are held: no request).
                assert self._checkpoint is not None and self._checkpoint[0] == start
                checkpoint_state(self._checkpoint[1], checkpoint_path(start), limits.checkpoint)
                chain.files = limits.files
        _check_replay_length(version, chain.first)
        budget = _Budget(limits.load_bytes, chain.read)
        _replay_commits(self._store, chain.replay, chain.through + 1, version, budget, first_block)
        chain.through = version
        chain.read = budget.spent
        self._chain = chain
        chain.replay.checked(
            self._store, expected, commit_path(version), self._dv_checked, self._dv_sizes
        )

    def _fresh(
        self, start: int | None, version: int, want: Mapping[str, PublishedFile], limits: _Limits
    ) -> _Chain:
        """A chain from ``start`` (a checkpoint; None: the first commit listed) for
        ``version``, nothing replayed yet."""
        budget = _Budget(limits.load_bytes)
        replay = _Replay(want, limits)
        if start is None:
            # No checkpoint (s3ddb writes one where publication starts): from the first
            # commit, which then must hold the protocol and metaData.
            first = min(v for v in self._commits if v <= version)
        else:
            where = checkpoint_path(start)
            if self._checkpoint is not None and self._checkpoint[0] == start:
                data = self._checkpoint[1]
                budget.take(len(data), where)  # refused as a bounded read of it would be
            else:
                self._checkpoint = None
                try:
                    data = budget.get(self._store, where)
                except FileNotFoundError as e:
                    raise _fail(where, "deleted while the log was read") from e
                self._checkpoint = (start, data)
            replay.start_at(data, where)
            first = start + 1
        return _Chain(start, first, replay, first - 1, budget.spent, limits.files)
