"""OpenTelemetry spans and metric instruments, when ``opentelemetry-api`` is there.

``pip install "s3ddb[otel]"`` brings the API; an application that configures an SDK
(a ``TracerProvider``, a ``MeterProvider`` and their exporters: OTLP, Prometheus...)
then receives s3ddb's spans and measurements. Without the API nothing is recorded and
each call here costs a few attribute lookups; with the API and no SDK, the API's own
no-op objects are used.

Spans: ``s3ddb.commit`` (children ``s3ddb.commit.prepare``, ``s3ddb.commit.claim``
per claim attempt and ``s3ddb.commit.rebase`` after a lost one),
``s3ddb.commit.finish`` (steps 3-4 of the DynamoDB path, on the writer's finalizer),
``s3ddb.open``, ``s3ddb.scan`` (fragments read and pruned), ``s3ddb.repair`` (a reader
or writer finishing another writer's commit), ``s3ddb.publish`` (writing one version's
Iceberg or Delta metadata), ``s3ddb.catalog.update`` (moving a catalog table, AWS
Glue's, to a published version). Attributes are named ``s3ddb.*``;
``s3ddb.dataset`` names the dataset one way on every span: its root, the URL its
objects are under (``s3://bucket/prefix``, ``file:///path``, ``memory://name``), with
credentials redacted, whichever URI opened it (see :func:`dataset_attribute`).

Instruments: counters ``s3ddb.commits``, ``s3ddb.conflicts`` (versions lost to another
writer), ``s3ddb.retries``, ``s3ddb.repairs``, ``s3ddb.unknown_outcomes``,
``s3ddb.publications``, ``s3ddb.publication_failures``,
``s3ddb.damaged_publications``, ``s3ddb.catalog_updates``,
``s3ddb.catalog_update_failures``; histogram
``s3ddb.claim.duration`` (milliseconds).

Phases: while a commit runs, :func:`phase` also adds each phase's duration to the
commit's :class:`PhaseClock` (whatever OpenTelemetry does), so the version records
where its time went (:mod:`.commit_metrics`).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from s3ddb.errors import S3DDBError
from s3ddb.io.redact import redact_url
from s3ddb.io.uri import parse_uri
from s3ddb.version import __version__

try:  # optional: s3ddb[otel]
    import opentelemetry.metrics as _otel_metrics
    import opentelemetry.trace as _otel_trace
except ImportError:  # pragma: no cover - depends on the environment
    _otel_metrics = None  # type: ignore[assignment]
    _otel_trace = None  # type: ignore[assignment]

__all__ = [
    "COUNTERS",
    "NO_SPAN",
    "PhaseClock",
    "add",
    "available",
    "dataset_attribute",
    "phase",
    "record_claim",
    "span",
]

#: The counters s3ddb reports (name -> description).
COUNTERS = {
    "s3ddb.commits": "versions committed",
    "s3ddb.conflicts": "versions lost to another writer",
    "s3ddb.retries": "claim attempts after the first",
    "s3ddb.repairs": "versions a reader or writer finished for another writer",
    "s3ddb.unknown_outcomes": "commits whose outcome could not be known",
    "s3ddb.publications": "versions published as an open format (Iceberg, Delta)",
    "s3ddb.publication_failures": "publications of a version that failed (caught up later)",
    "s3ddb.damaged_publications": (
        "publications that found the published state of the version before damaged "
        "and published afresh (s3ddb open-formats URI --rebuild mends it)"
    ),
    "s3ddb.catalog_updates": "catalog tables (AWS Glue) brought to a published version",
    "s3ddb.catalog_update_failures": (
        "catalog table updates that failed (the next commit or s3ddb catalog sync catches up)"
    ),
}

_instruments: dict[str, Any] = {}


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed."""
    return _otel_trace is not None


def _tracer() -> Any:
    assert _otel_trace is not None
    return _otel_trace.get_tracer("s3ddb", __version__)


def _instrument(name: str) -> Any:
    found = _instruments.get(name)
    if found is None:
        assert _otel_metrics is not None
        meter = _otel_metrics.get_meter("s3ddb", __version__)
        if name == "s3ddb.claim.duration":
            found = meter.create_histogram(name, unit="ms", description="claim latency")
        else:
            found = meter.create_counter(name, description=COUNTERS[name])
        _instruments[name] = found
    return found


def dataset_attribute(uri: object) -> str:
    """The ``s3ddb.dataset`` attribute of a dataset: its root, the URL its objects are
    under, with credentials redacted.

    ``uri`` may be any URI of the dataset: ``s3+ddb://bucket/prefix?ddbTableName=T``,
    ``s3://bucket/prefix``, a relative local path... all give the same root
    (``s3://bucket/prefix``, ``file:///abs/path``), so the spans of a read (opened
    with the user's URI) and of a commit (made by the handler, which knows the root)
    name one dataset alike. Text that is not a dataset URI is only redacted."""
    try:
        root: object = parse_uri(str(uri)).object_url
    except (S3DDBError, ValueError):
        root = uri
    return redact_url(root)


class _NoSpan:
    """What :func:`span` yields without OpenTelemetry: accepts and drops attributes."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass


#: A span that records nothing (for code that reports to a span it may not have).
NO_SPAN = _NoSpan()


@contextmanager
def span(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A span ``name`` (a child of the current one) around the block, with
    ``attributes``; an exception leaving the block is recorded on it and sets
    ``s3ddb.outcome`` to ``"error"`` unless the block set it."""
    if not available():
        yield NO_SPAN
        return
    with _tracer().start_as_current_span(name, attributes=dict(attributes or {})) as current:
        yield current


def add(name: str, value: int = 1, attributes: Mapping[str, Any] | None = None) -> None:
    """Add ``value`` to the counter ``name`` (one of :data:`COUNTERS`)."""
    if _otel_metrics is not None and value:
        _instrument(name).add(value, attributes=dict(attributes or {}))


def record_claim(milliseconds: float, attributes: Mapping[str, Any] | None = None) -> None:
    """Record one claim's latency."""
    if _otel_metrics is not None:
        _instrument("s3ddb.claim.duration").record(milliseconds, attributes=dict(attributes or {}))


class PhaseClock:
    """Where a commit's time went: seconds per phase, summed over its attempts."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}

    def milliseconds(self) -> dict[str, int]:
        return {name: round(s * 1000) for name, s in self.seconds.items()}

    def elapsed_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)


_CLOCK: contextvars.ContextVar[PhaseClock | None] = contextvars.ContextVar(
    "s3ddb_commit_phases", default=None
)


@contextmanager
def timing(clock: PhaseClock) -> Iterator[PhaseClock]:
    """Make ``clock`` the one :func:`phase` adds to inside the block."""
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def phase(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A phase of a commit: a span ``s3ddb.commit.<name>``, and its duration added
    to the current commit's :class:`PhaseClock` (if one is timing)."""
    clock = _CLOCK.get()
    start = time.monotonic()
    try:
        with span(f"s3ddb.commit.{name}", attributes) as current:
            yield current
    finally:
        if clock is not None:
            clock.seconds[name] = clock.seconds.get(name, 0.0) + time.monotonic() - start
