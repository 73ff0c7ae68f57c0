"""A dataset's AWS Glue table, kept at its newest published version.

A dataset names its Glue table in its configuration: :data:`GLUE_TABLE_KEY`
(``DB.TABLE``) and :data:`GLUE_FORMAT_KEY` (the format the table reads, ``iceberg`` by
default, or ``delta``), set by ``s3ddb catalog register URI --glue DB.TABLE``.

* **Iceberg.** Every published version moves the table's ``metadata_location`` to its
  ``metadata/vN.metadata.json``, the location before it becoming
  ``previous_metadata_location``, with ``table_type`` ``ICEBERG``: the parameters
  Iceberg's own GlueCatalog sets and reads. The update is optimistic, as Iceberg's:
  ``UpdateTable`` carries the ``VersionId`` the table was read at, and a concurrent
  change (``ConcurrentModificationException``) makes it read again. It never moves the
  table backwards: the version the current location names (and the parameter
  :data:`VERSION_PARAMETER`, which must agree) is compared first, so a slower
  finisher of an older version leaves a newer one in place.
* **Delta.** A Delta table in Glue is its location: it is registered once
  (``table_type`` ``DELTA``) and is always current.

Everything read from Glue is untrusted. A table of another type under the name, a
``metadata_location`` that is not a metadata file of this dataset, or that names a
version newer than the newest committed one, a version parameter that disagrees with
it, a parameter that changes how engines read the table (:data:`REFUSED_PARAMETERS`),
parameters beyond their bounds: each is an :class:`~s3ddb.errors.UntrustedCatalogError`
naming the table, and nothing is written. ``s3ddb verify`` reports the same
(:func:`glue_problems`).

The table's parameters are shared: s3ddb sets the ones it owns
(:data:`OWNED_PARAMETERS`) and carries every other one forward unchanged, so that
what users and their tools add (a comment, an owner, Lake Formation's) survives its
updates; it refuses to write beside :data:`REFUSED_PARAMETERS`.

A catalog update never fails a commit (:func:`update_catalogs`): it runs after the
version is published, and a failure is logged, counted and caught up by the next
commit, by a reader that finishes an unpublished version, or by ``s3ddb catalog sync``.

Glue is reached with the dataset's AWS settings for the service ``glue``
(:class:`~s3ddb.io.aws.AwsConfig`: ``glue_endpoint``, ``glue_region``... then the
shared ``endpoint_url``, ``region``, credentials, then the environment).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from s3ddb.errors import (
    CatalogError,
    CredentialsError,
    EndpointUnreachableError,
    InvalidInputError,
    StoredMetadataError,
    UntrustedCatalogError,
)
from s3ddb.format.manifest import Manifest
from s3ddb.io.object_store import ObjectStore
from s3ddb.io.service_errors import Failure, classify, describe_error, error_code
from s3ddb.observe import telemetry
from s3ddb.open_formats.publisher import enabled_formats, published_schema, writer_of

__all__ = [
    "CATALOG_CONFIG_KEYS",
    "GLUE_FORMATS",
    "GLUE_FORMAT_KEY",
    "GLUE_TABLE_KEY",
    "MAX_ATTEMPTS",
    "OWNED_PARAMETERS",
    "REFUSED_PARAMETERS",
    "VERSION_PARAMETER",
    "GlueSync",
    "GlueTarget",
    "NewestVersion",
    "check_glue_name",
    "dataset_root",
    "glue_problems",
    "glue_target",
    "sync_glue_table",
    "update_catalogs",
]

log = logging.getLogger(__name__)

#: The dataset config key naming its Glue table, ``DB.TABLE``.
GLUE_TABLE_KEY = "s3ddb.catalog.glue"
#: The dataset config key naming the format its Glue table reads (default Iceberg).
GLUE_FORMAT_KEY = "s3ddb.catalog.glue_format"
#: The config keys that name a dataset's catalog table: a clone does not inherit them.
CATALOG_CONFIG_KEYS = (GLUE_TABLE_KEY, GLUE_FORMAT_KEY)
#: The formats a Glue table can read, the default first. They are the plug-ins'
#: names and Glue's ``table_type`` values (upper case): Glue's vocabulary.
GLUE_FORMATS = ("iceberg", "delta")

# Glue's table parameters, as Iceberg's GlueCatalog sets and reads them.
_TABLE_TYPE = "table_type"
_METADATA_LOCATION = "metadata_location"
_PREVIOUS_METADATA_LOCATION = "previous_metadata_location"
_EXTERNAL_TABLE = "EXTERNAL_TABLE"
#: s3ddb's own parameter: the s3ddb version the table's metadata location stands for.
VERSION_PARAMETER = "s3ddb.version"
#: The parameters of an Iceberg table s3ddb owns: every update sets them from the
#: version it moves the table to, whatever the table held.
OWNED_PARAMETERS = (_TABLE_TYPE, _METADATA_LOCATION, _PREVIOUS_METADATA_LOCATION, VERSION_PARAMETER)
#: Parameters (compared in lower case; a trailing "." names every key under it) that
#: make engines read an Iceberg table other than through its metadata file, each with
#: the engines that do. s3ddb never writes beside them: every update would carry them
#: forward, and an engine would read, say, every Parquet file under the dataset's root,
#: deleted rows and all.
REFUSED_PARAMETERS: dict[str, str] = {
    "spark.sql.": "Spark reads the table as a data source table of that provider",
    "classification": "Glue jobs and crawlers read the files as that format",
    "storage_handler": "Hive and Trino's Hive connector read through that handler",
    "transactional": "Hive reads the table as a transactional (ACID) one",
    "transactional_properties": "Hive reads the table as a transactional (ACID) one",
    "presto_view": "Presto and Trino read the table as a view",
}
#: What tells the newest version committed through the dataset's commit mechanism
#: (None: none); each call asks it anew.
NewestVersion = Callable[[], int | None]

# botocore's attempts per Glue request.
_GLUE_ATTEMPTS = 2
#: Reads and updates of one sync, at most (each lost to a concurrent update reads the
#: table again).
MAX_ATTEMPTS = 8

# Bounds of what a Glue table may hold before s3ddb reads it further (Glue's own are
# 255-character names and keys and 512 KB values; a location is far shorter).
_MAX_PARAMETERS = 200
_MAX_KEY = 255
_MAX_VALUE = 512 * 1024
_MAX_LOCATION = 4096
_MAX_VERSION_ID = 64
# A Glue database or table name: Glue allows lower-case letters, digits and "_"
# (Athena's rule), up to 255 characters.
_GLUE_NAME = re.compile(r"[a-z0-9_]{1,255}")
_METADATA_FILE = re.compile(r"v([0-9]{1,18})\.metadata\.json")
_DECIMAL = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True)
class GlueTarget:
    """The Glue table a dataset names: ``database``, ``table`` and the ``format`` it
    reads (one of :data:`GLUE_FORMATS`)."""

    database: str
    table: str
    format: str = GLUE_FORMATS[0]

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    @classmethod
    def parse(cls, text: str, format: str | None = None, where: str = "--glue") -> GlueTarget:
        """``DB.TABLE`` (and a format) as a target.

        Raises:
            InvalidInputError: not two Glue names joined by one dot (lower-case letters,
                digits and ``_``), or an unknown format.
        """
        database, dot, table = str(text).partition(".")
        if not dot or not _GLUE_NAME.fullmatch(database) or not _GLUE_NAME.fullmatch(table):
            raise InvalidInputError(
                f"{where} {str(text)[:300]!r}: expected DB.TABLE, two Glue names of "
                "lower-case letters, digits and '_'"
            )
        chosen = GLUE_FORMATS[0] if format is None else str(format)
        if chosen not in GLUE_FORMATS:
            raise InvalidInputError(
                f"Glue table format {chosen[:100]!r}: expected one of {', '.join(GLUE_FORMATS)}"
            )
        return cls(database, table, chosen)

    def config(self) -> dict[str, str]:
        """The dataset config keys naming this target."""
        return {GLUE_TABLE_KEY: self.name, GLUE_FORMAT_KEY: self.format}


def glue_target(config: Mapping[str, str], where: str = "") -> GlueTarget | None:
    """The Glue table a version's ``config`` names (None: none).

    Raises:
        StoredMetadataError: the keys hold no valid target (set by hand, say).
    """
    name = config.get(GLUE_TABLE_KEY)
    if name is None:
        return None
    try:
        return GlueTarget.parse(name, config.get(GLUE_FORMAT_KEY), f"config {GLUE_TABLE_KEY}")
    except InvalidInputError as exc:
        raise StoredMetadataError(f"{where}: {exc}" if where else str(exc)) from None


def dataset_root(store: ObjectStore) -> str:
    """The dataset's location as its published tables name it (the Iceberg metadata's
    ``location``): ``s3://bucket/prefix``, or a local path without ``file://``."""
    url = store.url
    return url[len("file://") :] if url.startswith("file://") else url.rstrip("/")


@dataclass(frozen=True)
class GlueSync:
    """What one sync of a Glue table found and did.

    ``action``: ``created`` (the table did not exist), ``updated`` (moved from
    ``catalog_version`` to ``version``), ``current`` (already at ``version``),
    ``ahead`` (at a newer version, ``catalog_version``: left alone, never moved back)
    or ``registered`` (a Delta table, at its location)."""

    table: str
    format: str
    action: str
    version: int
    catalog_version: int | None
    location: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "catalog": "glue",
            "table": self.table,
            "format": self.format,
            "action": self.action,
            "version": self.version,
            "catalog_version": self.catalog_version,
            "location": self.location,
        }

    def describe(self) -> str:
        if self.action == "updated":
            what = f"moved from version {self.catalog_version} to version {self.version}"
        elif self.action == "created":
            what = f"created at version {self.version}"
        elif self.action == "ahead":
            what = f"at version {self.catalog_version}, newer than {self.version}: left there"
        elif self.action == "registered":
            what = "registered by location (always current)"
        else:
            what = f"current at version {self.version}"
        return f"glue table {self.table} ({self.format}): {what}: {self.location}"


# --- Glue calls --------------------------------------------------------------------------


def _client(store: ObjectStore) -> Any:
    # botocore retries throttling, 5xx and refused connections once; a lost optimistic
    # update is retried here. A catalog that stays down costs a commit little: the
    # next one catches up.
    return store.aws.client("glue", max_attempts=_GLUE_ATTEMPTS)


def _failure(exc: BaseException, target: GlueTarget, action: str) -> BaseException:
    """The typed error for a failed Glue call (``exc`` itself if it is not botocore's)."""
    kind = classify(exc)
    if kind is None:
        return exc
    what = f"AWS Glue {action} of {target.name}"
    if kind is Failure.CREDENTIALS:
        return CredentialsError(f"{what} refused: {describe_error(exc)}")
    if kind is Failure.NOT_SENT:
        return EndpointUnreachableError(f"{what}: cannot connect: {exc}")
    return CatalogError(f"{what} failed: {describe_error(exc)}")


def _get_table(client: Any, target: GlueTarget) -> dict[str, Any] | None:
    try:
        response = client.get_table(DatabaseName=target.database, Name=target.table)
    except Exception as exc:
        if error_code(exc) == "EntityNotFoundException":
            return None
        raise _failure(exc, target, "GetTable") from exc
    table = response.get("Table") if isinstance(response, dict) else None
    if not isinstance(table, dict):
        raise UntrustedCatalogError(f"AWS Glue table {target.name}: GetTable answered no table")
    return table


def _create_table(client: Any, target: GlueTarget, table_input: dict[str, Any]) -> bool:
    """Create the table; False if another writer created it first."""
    try:
        client.create_table(DatabaseName=target.database, TableInput=table_input)
    except Exception as exc:
        code = error_code(exc)
        if code == "AlreadyExistsException":
            return False
        if code == "EntityNotFoundException":
            raise CatalogError(
                f"AWS Glue database {target.database} does not exist (creating table "
                f"{target.name}): create it, e.g. with the Terraform variable "
                "glue_database (docs/catalogs.md)"
            ) from exc
        raise _failure(exc, target, "CreateTable") from exc
    return True


def _update_table(
    client: Any, target: GlueTarget, table_input: dict[str, Any], version_id: str
) -> bool:
    """Update the table at ``version_id``; False if it changed since (or was deleted)."""
    try:
        client.update_table(
            DatabaseName=target.database,
            TableInput=table_input,
            VersionId=version_id,
            SkipArchive=True,
        )
    except Exception as exc:
        if error_code(exc) in ("ConcurrentModificationException", "EntityNotFoundException"):
            return False
        raise _failure(exc, target, "UpdateTable") from exc
    return True


# --- what a Glue table holds, checked -----------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """A Glue table's state, checked: its parameters, VersionId, and for Iceberg the
    s3ddb version its metadata location names."""

    parameters: dict[str, str]
    version_id: str
    location: str | None
    version: int | None


def _checked_parameters(table: Mapping[str, Any], target: GlueTarget) -> dict[str, str]:
    parameters = table.get("Parameters", {})
    if not isinstance(parameters, dict) or len(parameters) > _MAX_PARAMETERS:
        raise UntrustedCatalogError(
            f"AWS Glue table {target.name}: its Parameters are not a map of at most "
            f"{_MAX_PARAMETERS} entries"
        )
    for key, value in parameters.items():
        if not (
            isinstance(key, str)
            and isinstance(value, str)
            and len(key) <= _MAX_KEY
            and len(value) <= _MAX_VALUE
        ):
            raise UntrustedCatalogError(
                f"AWS Glue table {target.name}: parameter {str(key)[:80]!r} is not a string "
                f"of at most {_MAX_VALUE} characters under a key of at most {_MAX_KEY}"
            )
    return dict(parameters)


def _version_of_location(location: str, root: str) -> int | None:
    """The s3ddb version whose Iceberg metadata file ``location`` is, under ``root``
    (None: it is no such file)."""
    if len(location) > _MAX_LOCATION:
        return None
    match = _METADATA_FILE.fullmatch(location.rsplit("/", 1)[-1])
    if match is None:
        return None
    version = int(match.group(1))
    return version if location == _iceberg_location(root, version) else None


def _iceberg_location(root: str, version: int) -> str:
    return writer_of(GLUE_FORMATS[0]).reader_location(root, version)


def _checked_entry(table: Mapping[str, Any], target: GlueTarget, root: str) -> _Entry:
    """What the Glue table holds, checked against the dataset at ``root``.

    Raises:
        UntrustedCatalogError: another type of table, a location that is not this dataset's
            (a metadata file of its Iceberg table; for Delta, its root), a version
            parameter that disagrees with the location, an Iceberg table holding one
            of :data:`REFUSED_PARAMETERS`, or values beyond bounds.
    """
    parameters = _checked_parameters(table, target)
    version_id = table.get("VersionId")
    if not isinstance(version_id, str) or not 0 < len(version_id) <= _MAX_VERSION_ID:
        raise UntrustedCatalogError(f"AWS Glue table {target.name}: no valid VersionId")
    kind = parameters.get(_TABLE_TYPE, "")
    if kind.lower() != target.format:
        raise UntrustedCatalogError(
            f"AWS Glue table {target.name} has table_type {kind[:40]!r}, not "
            f"{target.format.upper()}: another table holds the name; drop it or name "
            "another table"
        )
    if target.format != GLUE_FORMATS[0]:
        storage = table.get("StorageDescriptor")
        location = storage.get("Location") if isinstance(storage, dict) else None
        if location != root and location != root + "/":
            shown = location[:200] if isinstance(location, str) else location
            raise UntrustedCatalogError(
                f"AWS Glue table {target.name} is at {shown!r}, not at the dataset {root}: "
                "drop it (s3ddb catalog sync then registers it again) or name another table"
            )
        return _Entry(parameters, version_id, location, None)
    location = parameters.get(_METADATA_LOCATION)
    if location is None:
        raise UntrustedCatalogError(f"AWS Glue table {target.name} has no {_METADATA_LOCATION}")
    version = _version_of_location(location, root)
    if version is None:
        raise UntrustedCatalogError(
            f"AWS Glue table {target.name}: {_METADATA_LOCATION} {location[:200]!r} is not "
            f"a metadata file of the dataset {root}: s3ddb does not move it (drop the "
            "table, then s3ddb catalog sync creates it again)"
        )
    named = parameters.get(VERSION_PARAMETER)
    if named is not None and (not _DECIMAL.fullmatch(named) or int(named) != version):
        raise UntrustedCatalogError(
            f"AWS Glue table {target.name}: parameter {VERSION_PARAMETER} {named[:40]!r} "
            f"disagrees with {_METADATA_LOCATION} (version {version})"
        )
    for key in parameters:
        why = _refused(key)
        if why is not None:
            raise UntrustedCatalogError(
                f"AWS Glue table {target.name}: parameter {key[:80]!r} makes engines read "
                f"the table other than through its Iceberg metadata ({why}): s3ddb does not "
                "move it (remove the parameter, or drop the table; then s3ddb catalog sync)"
            )
    return _Entry(parameters, version_id, location, version)


def _refused(key: str) -> str | None:
    """Why an Iceberg table may not hold the parameter ``key`` (None: it may)."""
    lowered = key.lower()
    for refused, why in REFUSED_PARAMETERS.items():
        if lowered == refused or (refused.endswith(".") and lowered.startswith(refused)):
            return why
    return None


# --- the table input --------------------------------------------------------------------


def _glue_type(t: pa.DataType) -> str:
    """A Glue (Hive) column type for ``t``, as Iceberg's GlueCatalog spells its types.
    The columns are informational: Iceberg readers read the metadata file."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "bigint" if t.bit_width == 64 else "int"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_struct(t):
        inner = ",".join(
            f"{t.field(i).name}:{_glue_type(t.field(i).type)}" for i in range(t.num_fields)
        )
        return f"struct<{inner}>"
    if pa.types.is_map(t):
        return f"map<{_glue_type(t.key_type)},{_glue_type(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return f"array<{_glue_type(t.value_type)}>"
    return "string"


def _columns(manifest: Manifest) -> list[dict[str, Any]]:
    columns = []
    for column in published_schema(manifest.schema):
        entry: dict[str, Any] = {"Name": column.name, "Type": _glue_type(column.type)}
        field_id = (column.metadata or {}).get(b"PARQUET:field_id")
        parameters = {"iceberg.field.optional": str(column.nullable).lower()}
        if field_id is not None:
            parameters["iceberg.field.id"] = field_id.decode()
        parameters["iceberg.field.current"] = "true"
        entry["Parameters"] = parameters
        columns.append(entry)
    return columns


def _table_input(
    target: GlueTarget,
    root: str,
    manifest: Manifest,
    parameters: Mapping[str, str],
) -> dict[str, Any]:
    return {
        "Name": target.table,
        "TableType": _EXTERNAL_TABLE,
        "Parameters": dict(parameters),
        "StorageDescriptor": {"Columns": _columns(manifest), "Location": root},
    }


# --- syncing ------------------------------------------------------------------------------


def check_glue_name(store: ObjectStore, target: GlueTarget) -> None:
    """Check, before a dataset names ``target``, that Glue can be reached and that the
    table is free or already this dataset's (of ``target``'s format, at its root).

    Raises:
        UntrustedCatalogError: the name holds another table, or an entry of this
            dataset's that s3ddb does not trust.
        CatalogError: Glue failed the GetTable.
        CredentialsError, EndpointUnreachableError: Glue refuses the credentials or
            cannot be reached.
    """
    table = _get_table(_client(store), target)
    if table is not None:
        _checked_entry(table, target, dataset_root(store))


def sync_glue_table(
    store: ObjectStore,
    manifest: Manifest,
    *,
    newest: NewestVersion,
    client: Any | None = None,
) -> GlueSync | None:
    """Move the Glue table ``manifest``'s version names to that version (Iceberg:
    creating it if it is missing, never moving it backwards; Delta: registering it
    once). ``manifest``'s version must be published. None: it names no Glue table.

    The table's own parameters are carried forward, and s3ddb's
    (:data:`OWNED_PARAMETERS`) set. A table at a newer version is left there
    (``ahead``) only if that version is committed: ``newest`` (the dataset's commit
    mechanism) is asked then, and only then. ``client`` is the boto3 Glue client to
    use (default: the one the dataset's AWS settings give).

    Raises:
        UntrustedCatalogError: Glue holds an entry s3ddb does not trust (nothing was
            written then), a version newer than ``newest`` among them.
        CatalogError: Glue refused; the version does not publish the table's format.
        CredentialsError, EndpointUnreachableError: Glue cannot be used.
        StoredMetadataError: the dataset's config keys are malformed.
        What ``newest`` raises: the commit mechanism cannot be asked.
    """
    target = glue_target(manifest.config, store.url)
    if target is None:
        return None
    if target.format not in enabled_formats(manifest):
        raise CatalogError(
            f"version {manifest.version} of {store.url} names the Glue table {target.name} "
            f"({target.format}) but does not publish {target.format}: s3ddb open-formats "
            f"URI --enable {target.format}"
        )
    root = dataset_root(store)
    client = _client(store) if client is None else client
    if target.format != GLUE_FORMATS[0]:
        return _register_delta(client, target, root, manifest)
    location = _iceberg_location(root, manifest.version)
    parameters_of_version = {
        _TABLE_TYPE: target.format.upper(),
        _METADATA_LOCATION: location,
        VERSION_PARAMETER: str(manifest.version),
    }
    for _ in range(MAX_ATTEMPTS):
        table = _get_table(client, target)
        if table is None:
            created = _create_table(
                client, target, _table_input(target, root, manifest, parameters_of_version)
            )
            if created:
                return GlueSync(
                    target.name, target.format, "created", manifest.version, None, location
                )
            continue  # another writer created it: read it
        entry = _checked_entry(table, target, root)
        assert entry.version is not None
        if entry.version > manifest.version:
            _check_committed(target, entry, newest())
            _check_published(store, target, entry, root)
        if entry.version >= manifest.version:
            action = "current" if entry.version == manifest.version else "ahead"
            return GlueSync(
                target.name, target.format, action, manifest.version, entry.version, location
            )
        parameters = {
            # Owned keys in any case are s3ddb's: no look-alike (METADATA_LOCATION) stays.
            **{k: v for k, v in entry.parameters.items() if k.lower() not in OWNED_PARAMETERS},
            **parameters_of_version,
            _PREVIOUS_METADATA_LOCATION: entry.location or "",
        }
        table_input = _table_input(target, root, manifest, parameters)
        if _update_table(client, target, table_input, entry.version_id):
            return GlueSync(
                target.name, target.format, "updated", manifest.version, entry.version, location
            )
    raise CatalogError(
        f"AWS Glue table {target.name}: {MAX_ATTEMPTS} updates to version "
        f"{manifest.version} lost to concurrent changes"
    )


def _check_committed(target: GlueTarget, entry: _Entry, newest: int | None) -> None:
    """Check that the newer version a Glue table names is committed (``newest``: the
    newest committed version, read after the table): s3ddb moves the table only to
    committed versions, so a newer one was put there by someone else, and leaving it
    would pin the table there for good.

    Raises:
        UntrustedCatalogError: the version is newer than ``newest``.
    """
    assert entry.version is not None
    if newest is None or entry.version > newest:
        raise UntrustedCatalogError(
            f"AWS Glue table {target.name}: {_METADATA_LOCATION} "
            f"{(entry.location or '')[:200]!r} names version {entry.version}, newer than "
            f"the newest committed, {newest or 'none'}: s3ddb does not move it (drop the table, "
            "then s3ddb catalog sync creates it again)"
        )


def _check_published(store: ObjectStore, target: GlueTarget, entry: _Entry, root: str) -> None:
    """Check that the newer version a Glue table names is published: its finisher
    publishes before it moves the table, so a location naming a missing file was put
    there by someone else.

    Raises:
        UntrustedCatalogError: the metadata file is missing.
    """
    assert entry.location is not None
    try:
        store.head(entry.location[len(root) + 1 :])
    except FileNotFoundError:
        raise UntrustedCatalogError(
            f"AWS Glue table {target.name}: {_METADATA_LOCATION} {entry.location[:200]!r} "
            f"names version {entry.version}, which the dataset has not published: s3ddb "
            "does not move it (drop the table, then s3ddb catalog sync creates it again)"
        ) from None


def _register_delta(client: Any, target: GlueTarget, root: str, manifest: Manifest) -> GlueSync:
    for _ in range(MAX_ATTEMPTS):
        table = _get_table(client, target)
        if table is not None:
            _checked_entry(table, target, root)
            return GlueSync(target.name, target.format, "registered", manifest.version, None, root)
        parameters = {_TABLE_TYPE: target.format.upper(), "classification": "parquet"}
        if _create_table(client, target, _table_input(target, root, manifest, parameters)):
            return GlueSync(target.name, target.format, "created", manifest.version, None, root)
    raise CatalogError(f"AWS Glue table {target.name}: created and dropped concurrently")


def update_catalogs(store: ObjectStore, manifest: Manifest, *, newest: NewestVersion) -> None:
    """Move the catalog table ``manifest``'s version names, after it is published (the
    publication hook; ``newest`` as for :func:`sync_glue_table`). Never raises: the
    version is committed whatever the catalog does; a failure is logged and counted
    (``s3ddb.catalog_update_failures``), and the next commit, a reader's repair or
    ``s3ddb catalog sync`` catches up. An entry s3ddb does not trust is a failure each
    time (never a silent ``ahead``) until someone drops or mends it; ``s3ddb verify``
    reports it. A Delta table needs nothing (it is its location)."""
    try:
        target = glue_target(manifest.config, store.url)
    except StoredMetadataError as exc:
        log.warning("version %d: %s", manifest.version, exc)
        return
    if target is None or target.format != GLUE_FORMATS[0]:
        return
    attributes = {
        "s3ddb.dataset": telemetry.dataset_attribute(store.url),
        "s3ddb.version": manifest.version,
        "s3ddb.catalog": "glue",
        "s3ddb.catalog.table": target.name,
    }
    with telemetry.span("s3ddb.catalog.update", attributes) as span:
        try:
            result = sync_glue_table(store, manifest, newest=newest)
        except Exception as exc:
            span.set_attribute("s3ddb.outcome", "error")
            telemetry.add("s3ddb.catalog_update_failures", 1, {"s3ddb.catalog": "glue"})
            # An untrusted entry stays until someone mends or drops it: saying the next
            # commit catches up would hide a table pinned for good.
            later = (
                "no commit moves it until the entry is mended or dropped; s3ddb verify reports it"
                if isinstance(exc, UntrustedCatalogError)
                else "the next commit, or s3ddb catalog sync, catches up"
            )
            log.warning(
                "could not move the AWS Glue table %s to version %d of %s (%s): %s",
                target.name, manifest.version, store.url, later, exc,
            )  # fmt: skip
            return
        action = result.action if result is not None else "none"
        span.set_attribute("s3ddb.outcome", action)
        telemetry.add("s3ddb.catalog_updates", 1, {"s3ddb.catalog": "glue"})


# --- verify ------------------------------------------------------------------------------


def glue_problems(store: ObjectStore, manifest: Manifest) -> list[tuple[str, str, str]]:
    """What is wrong with the Glue table the newest version ``manifest`` names, as
    ``(state, where, meaning)``: ``behind`` (it names an older version, or is
    missing), ``untrusted`` (it holds an entry s3ddb does not trust) or
    ``unreachable`` (Glue cannot be asked); verify reports them as the kinds
    ``catalog_behind``, ``catalog_untrusted`` and ``catalog_unreachable``. Empty:
    current, or no table."""
    try:
        target = glue_target(manifest.config, store.url)
    except StoredMetadataError as exc:
        return [("untrusted", GLUE_TABLE_KEY, str(exc))]
    if target is None:
        return []
    where = f"glue:{target.name}"
    root = dataset_root(store)
    try:
        table = _get_table(_client(store), target)
    except UntrustedCatalogError as exc:  # an answer without a table, not to be trusted
        return [("untrusted", where, str(exc))]
    except (CatalogError, CredentialsError, EndpointUnreachableError) as exc:
        # A GetTable the service failed (a server error, throttled past the retries)
        # says nothing of the entry: Glue could not be asked.
        return [("unreachable", where, str(exc))]
    if table is None:
        return [("behind", where, f"the AWS Glue table {target.name} is missing")]
    try:
        entry = _checked_entry(table, target, root)
    except UntrustedCatalogError as exc:
        return [("untrusted", where, str(exc))]
    if entry.version is not None and entry.version > manifest.version:
        return [
            (
                "untrusted",
                where,
                f"the AWS Glue table {target.name} names version {entry.version}, newer "
                f"than the newest, {manifest.version}",
            )
        ]
    if entry.version is not None and entry.version < manifest.version:
        return [
            (
                "behind",
                where,
                f"the AWS Glue table {target.name} names version {entry.version}; the "
                f"newest is {manifest.version}",
            )
        ]
    return []
