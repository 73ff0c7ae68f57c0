"""Ready-to-paste code that reads a dataset's published Iceberg or Delta table with
another engine: ``s3ddb open-formats URI --reader NAME``.

Each reader needs the table's location and, on S3, the storage settings s3ddb itself
uses for that dataset, spelled its own way: DuckDB a secret (``ENDPOINT`` without the
scheme, ``URL_STYLE 'path'``, ``USE_SSL false``), pyiceberg ``s3.*`` properties,
deltalake and polars object_store options (``AWS_ALLOW_HTTP``), Spark ``fs.s3a.*``
settings. The snippets carry the endpoint, region, addressing style and whether it is
plain HTTP; credentials appear only as the names of the environment variables that
hold them (``os.environ["AWS_ACCESS_KEY_ID"]``), never as values, so a snippet can be
pasted into a ticket. On a local path they use the plain path.

Every snippet but Spark's is Python for the ``readers`` extra (``pip install
"s3ddb[readers]"``) and ends with ``rows``, the newest version's rows (deleted rows
removed: the Delta readers chosen apply deletion vectors), and ``print(rows)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from s3ddb.errors import InvalidInputError
from s3ddb.io.service_settings import ServiceSettings

__all__ = [
    "READERS",
    "EnvironmentCredentials",
    "PublishedTable",
    "S3Access",
    "published_table",
    "reader_snippet",
    "s3_access",
]

#: The region s3ddb falls back to when nothing names one (as :mod:`s3ddb.io.aws` does).
_FALLBACK_REGION = "us-east-1"


@dataclass(frozen=True)
class EnvironmentCredentials:
    """The names of the environment variables a snippet reads the keys from."""

    key_id: str = "AWS_ACCESS_KEY_ID"
    secret: str = "AWS_SECRET_ACCESS_KEY"
    token: str | None = None


@dataclass(frozen=True)
class S3Access:
    """How a reader reaches the bucket: ``endpoint`` None is AWS's own; ``credentials``
    None leaves them to each reader's default chain; ``note`` says, as a comment in
    the snippet, what the reader must do about credentials s3ddb found elsewhere."""

    endpoint: str | None
    region: str
    path_style: bool
    allow_http: bool
    credentials: EnvironmentCredentials | None
    note: str | None = None


@dataclass(frozen=True)
class PublishedTable:
    """A dataset's published tables: ``root`` is ``s3://bucket/prefix`` or a local
    absolute path; ``formats`` what its newest version publishes."""

    root: str
    version: int
    formats: tuple[str, ...]
    s3: S3Access | None

    @property
    def delta(self) -> bool:
        return "delta" in self.formats

    @property
    def iceberg(self) -> bool:
        return "iceberg" in self.formats


def s3_access(settings: ServiceSettings, environ: Mapping[str, str]) -> S3Access:
    """The reader-side view of the S3 settings s3ddb resolved for a dataset
    (:meth:`s3ddb.io.aws.AwsConfig.settings`), with ``environ`` the environment they
    were resolved in. Credentials become environment variable names: those s3ddb read
    them from, else the standard names with a note saying how to set them."""
    endpoint = settings.endpoint
    style = settings.addressing_style
    path_style = style == "path" or (endpoint is not None and style != "virtual")
    allow_http = endpoint is not None and endpoint.lower().startswith("http://")
    where = settings.source("credentials")
    credentials: EnvironmentCredentials | None = EnvironmentCredentials()
    note = None
    if where.startswith("environment AWS_ACCESS_KEY_ID_"):
        service = where.rsplit("_", 1)[1]
        token = f"AWS_SESSION_TOKEN_{service}"
        credentials = EnvironmentCredentials(
            f"AWS_ACCESS_KEY_ID_{service}",
            f"AWS_SECRET_ACCESS_KEY_{service}",
            token if environ.get(token) else None,
        )
    elif where.startswith("storage option") and settings.access_key_id:
        note = (
            f"s3ddb took the keys from a {where.removeprefix('storage option ')} storage "
            "option; they are not printed: export them as AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY"
        )
    elif settings.profile:
        note = (
            f"s3ddb signs with the profile {settings.profile!r}; these readers take keys: "
            f'eval "$(aws configure export-credentials --profile {settings.profile} '
            '--format env)"'
        )
    elif environ.get("AWS_ACCESS_KEY_ID"):
        token_set = bool(environ.get("AWS_SESSION_TOKEN"))
        credentials = EnvironmentCredentials(token="AWS_SESSION_TOKEN" if token_set else None)
    else:
        credentials = None
        note = "no access key in the environment: each reader uses its own default chain"
    if settings.role_arn:
        extra = f"s3ddb assumes the role {settings.role_arn}; these keys must be allowed to read"
        note = f"{note}; {extra}" if note else extra
    return S3Access(
        endpoint=endpoint,
        region=settings.region or _FALLBACK_REGION,
        path_style=path_style,
        allow_http=allow_http,
        credentials=credentials,
        note=note,
    )


def published_table(
    store_url: str, version: int, formats: tuple[str, ...], s3: S3Access | None
) -> PublishedTable:
    """The published tables of a dataset whose objects are under ``store_url``.

    Raises:
        InvalidInputError: the dataset publishes no open format, or lives in memory
            (other processes cannot read it).
    """
    if not formats:
        raise InvalidInputError(
            f"version {version} publishes no open formats: enable them first "
            "(s3ddb open-formats URI --enable iceberg,delta)"
        )
    parts = urlsplit(store_url)
    if parts.scheme == "file":
        return PublishedTable(unquote(parts.path), version, tuple(formats), None)
    if parts.scheme == "s3":
        return PublishedTable(store_url.rstrip("/"), version, tuple(formats), s3)
    raise InvalidInputError(
        f"{store_url}: other engines read tables on S3 or a local path, not {parts.scheme}://"
    )


def reader_snippet(reader: str, table: PublishedTable) -> str:
    """Code that reads ``table``'s newest version with ``reader`` (one of
    :data:`READERS`), ending in a newline.

    Raises:
        InvalidInputError: an unknown reader, or one that needs a format the dataset
            does not publish (pyiceberg: Iceberg; deltalake: Delta).
    """
    build = _BUILDERS.get(reader)
    if build is None:
        raise InvalidInputError(f"unknown reader {reader!r}: expected one of {', '.join(READERS)}")
    needed = {"pyiceberg": "iceberg", "deltalake": "delta"}.get(reader)
    if needed is not None and needed not in table.formats:
        raise InvalidInputError(
            f"{reader} reads the {needed.capitalize()} table, which version {table.version} "
            f"does not publish (it publishes {', '.join(table.formats)}): "
            f"s3ddb open-formats URI --enable {','.join(sorted({*table.formats, needed}))}"
        )
    return "\n".join(build(table)) + "\n"


# --- the builders: lines of code ---------------------------------------------------


def _env(name: str) -> str:
    return f"os.environ[{name!r}]"


def _sql_text(value: str) -> str:
    """``value`` as a SQL string literal's body (quotes doubled)."""
    return value.replace("'", "''")


def _sql_in_f_string(value: str) -> str:
    """``value`` as a SQL string literal's body inside a Python f-string."""
    return _sql_text(value).replace("{", "{{").replace("}", "}}")


def _header(table: PublishedTable, *install: str) -> list[str]:
    lines = [f"# s3ddb version {table.version}, published as {' and '.join(table.formats)}"]
    lines += [f"# {line}" for line in install]
    if table.s3 is not None and table.s3.note:
        lines.append(f"# credentials: {table.s3.note}")
    return lines


def _imports(table: PublishedTable, *modules: str) -> list[str]:
    uses_environ = table.s3 is not None and table.s3.credentials is not None
    return [f"import {m}" for m in sorted({*modules, *(("os",) if uses_environ else ())})]


def _duckdb(table: PublishedTable) -> list[str]:
    s3 = table.s3
    lines = _header(table, 'pip install "s3ddb[readers]" (DuckDB with its extensions: no download)')
    lines += _imports(table, "importlib", "pathlib")
    lines += ["import duckdb", "", "con = duckdb.connect()"]
    extensions = (("httpfs",) if s3 is not None else ()) + ("avro", "iceberg", "delta")
    lines += [
        f"for name in {extensions!r}:  # avro before iceberg, which needs it",
        '    package = pathlib.Path(importlib.import_module(f"duckdb_extension_{name}").__file__)',
        "    con.execute(f\"LOAD '{next(package.parent.rglob(f'{name}.duckdb_extension'))}'\")",
    ]
    if s3 is not None:
        settings = []
        if s3.credentials is not None:
            c = s3.credentials
            settings += [
                f"KEY_ID '{{{_env(c.key_id)}}}'",
                f"SECRET '{{{_env(c.secret)}}}'",
            ]
            if c.token:
                settings.append(f"SESSION_TOKEN '{{{_env(c.token)}}}'")
        else:
            settings.append("PROVIDER credential_chain")  # needs DuckDB's aws extension
        settings.append(f"REGION '{_sql_in_f_string(s3.region)}'")
        if s3.endpoint is not None:
            host = urlsplit(s3.endpoint).netloc or s3.endpoint
            settings.append(f"ENDPOINT '{_sql_in_f_string(host)}'")
        if s3.path_style:
            settings.append("URL_STYLE 'path'")
        if s3.allow_http:
            settings.append("USE_SSL false")
        lines.append('con.execute(f"""CREATE SECRET (TYPE s3,')
        lines += [f"    {s}," for s in settings[:-1]]
        lines.append(f'    {settings[-1]})""")')
    root = _sql_text(table.root)
    delta = f"select * from delta_scan('{root}')"
    iceberg = f"select * from iceberg_scan('{root}')"
    first, other = (delta, iceberg) if table.delta else (iceberg, None)
    if other is not None and table.iceberg:
        lines.append(f"# or the Iceberg table: {other}")
    lines += [f"rows = con.sql({first!r}).to_arrow_table()", "print(rows)"]
    return lines


def _pyiceberg(table: PublishedTable) -> list[str]:
    s3 = table.s3
    lines = _header(table, 'pip install "s3ddb[readers]" (pyiceberg)')
    lines += _imports(table)
    lines += ["from pyiceberg.table import StaticTable", ""]
    properties: list[tuple[str, str]] = []
    if s3 is not None:
        if s3.endpoint is not None:
            properties.append(("s3.endpoint", repr(s3.endpoint)))
        properties.append(("s3.region", repr(s3.region)))
        if s3.credentials is not None:
            c = s3.credentials
            properties += [("s3.access-key-id", _env(c.key_id))]
            properties += [("s3.secret-access-key", _env(c.secret))]
            if c.token:
                properties.append(("s3.session-token", _env(c.token)))
    lines.append("# The table's location: its metadata/version-hint.text names the newest version;")
    lines.append(f"# or one version's file: {table.root}/metadata/v{table.version}.metadata.json")
    if properties:
        lines.append(f"table = StaticTable.from_metadata({table.root!r}, properties={{")
        lines += [f"    {key!r}: {value}," for key, value in properties]
        lines.append("})")
    else:
        lines.append(f"table = StaticTable.from_metadata({table.root!r})")
    lines += ["rows = table.scan().to_arrow()", "print(rows)"]
    return lines


def _object_store_options(s3: S3Access, upper: bool) -> list[tuple[str, str]]:
    """deltalake's (upper case) or polars' (lower case) object_store options."""
    options: list[tuple[str, str]] = []
    if s3.endpoint is not None:
        options.append(("AWS_ENDPOINT_URL", repr(s3.endpoint)))
    options.append(("AWS_REGION", repr(s3.region)))
    if s3.credentials is not None:
        c = s3.credentials
        options += [("AWS_ACCESS_KEY_ID", _env(c.key_id))]
        options += [("AWS_SECRET_ACCESS_KEY", _env(c.secret))]
        if c.token:
            options.append(("AWS_SESSION_TOKEN", _env(c.token)))
    if s3.allow_http:
        options.append(("AWS_ALLOW_HTTP", repr("true")))
    if s3.endpoint is not None:
        style = "false" if s3.path_style else "true"
        options.append(("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", repr(style)))
    return [(k if upper else k.lower(), v) for k, v in options]


def _dict_lines(opening: str, items: list[tuple[str, str]], closing: str) -> list[str]:
    return [f"{opening}{{", *(f"    {k!r}: {v}," for k, v in items), f"}}{closing}"]


def _deltalake(table: PublishedTable) -> list[str]:
    lines = _header(table, 'pip install "s3ddb[readers]" (deltalake)')
    lines += _imports(table, "pyarrow as pa")
    lines += ["from deltalake import DeltaTable, QueryBuilder", ""]
    if table.s3 is not None:
        options = _object_store_options(table.s3, upper=True)
        lines += _dict_lines("storage_options = ", options, "")
        lines.append(f"table = DeltaTable({table.root!r}, storage_options=storage_options)")
    else:
        lines.append(f"table = DeltaTable({table.root!r})")
    lines += [
        "# QueryBuilder applies Delta deletion vectors; table.to_pyarrow_table() and",
        "# table.to_pandas() refuse a table that has them (any dataset with a delete).",
        'result = QueryBuilder().register("t", table).execute("select * from t")',
        "rows = pa.table(result.read_all())",
        "print(rows)",
    ]
    return lines


def _polars(table: PublishedTable) -> list[str]:
    lines = _header(table, 'pip install "s3ddb[readers]" (polars 2, which reads deletion vectors)')
    lines += _imports(table, "polars as pl")
    lines.append("")
    s3 = table.s3
    if table.delta:
        call = f"pl.scan_delta({table.root!r}"
        options = _object_store_options(s3, upper=False) if s3 is not None else []
    else:  # polars reads Iceberg through pyiceberg, with its property names
        call = f"pl.scan_iceberg({table.root!r}"
        options = []
        if s3 is not None:
            if s3.endpoint is not None:
                options.append(("s3.endpoint", repr(s3.endpoint)))
            options.append(("s3.region", repr(s3.region)))
            if s3.credentials is not None:
                options.append(("s3.access-key-id", _env(s3.credentials.key_id)))
                options.append(("s3.secret-access-key", _env(s3.credentials.secret)))
                if s3.credentials.token:
                    options.append(("s3.session-token", _env(s3.credentials.token)))
    if options:
        lines += _dict_lines(f"rows = {call}, storage_options=", options, ").collect()")
    else:
        lines.append(f"rows = {call}).collect()")
    lines.append("print(rows)")
    return lines


def _spark(table: PublishedTable) -> list[str]:
    s3 = table.s3
    lines = _header(
        table,
        "Spark needs the format's package and, on S3, hadoop-aws (s3a://); the versions",
        "below are for Spark 4.0 (Scala 2.13, Hadoop 3.4.1): take the releases that match",
        "your Spark",
    )
    lines += _imports(table)
    lines += ["from pyspark.sql import SparkSession", ""]
    packages = []
    config: list[tuple[str, str]] = []
    if table.delta:
        packages.append("io.delta:delta-spark_2.13:4.0.0")
        config += [
            ("spark.sql.extensions", repr("io.delta.sql.DeltaSparkSessionExtension")),
            (
                "spark.sql.catalog.spark_catalog",
                repr("org.apache.spark.sql.delta.catalog.DeltaCatalog"),
            ),
        ]
    else:
        packages.append("org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.0")
    if s3 is not None:
        packages.append("org.apache.hadoop:hadoop-aws:3.4.1")
        if s3.endpoint is not None:
            config.append(("spark.hadoop.fs.s3a.endpoint", repr(s3.endpoint)))
        config.append(("spark.hadoop.fs.s3a.endpoint.region", repr(s3.region)))
        if s3.path_style:
            config.append(("spark.hadoop.fs.s3a.path.style.access", repr("true")))
        if s3.allow_http:
            config.append(("spark.hadoop.fs.s3a.connection.ssl.enabled", repr("false")))
        if s3.credentials is not None:
            c = s3.credentials
            config.append(("spark.hadoop.fs.s3a.access.key", _env(c.key_id)))
            config.append(("spark.hadoop.fs.s3a.secret.key", _env(c.secret)))
            if c.token:
                config.append(("spark.hadoop.fs.s3a.session.token", _env(c.token)))
                provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
                config.append(("spark.hadoop.fs.s3a.aws.credentials.provider", repr(provider)))
    lines.append("spark = (SparkSession.builder")
    lines.append(f"    .config('spark.jars.packages', {','.join(packages)!r})")
    lines += [f"    .config({key!r}, {value})" for key, value in config]
    lines.append("    .getOrCreate())")
    if s3 is not None:
        location = "s3a://" + table.root.removeprefix("s3://")
    else:
        location = "file://" + table.root
    if table.delta:
        lines.append(f"rows = spark.read.format('delta').load({location!r})")
    else:
        metadata = f"{location}/metadata/v{table.version}.metadata.json"
        lines.append(f"rows = spark.read.format('iceberg').load({metadata!r})")
    lines.append("rows.show()")
    return lines


#: Reader name -> the builder of its snippet (each returns the snippet's lines).
_BUILDERS: dict[str, Callable[[PublishedTable], list[str]]] = {
    "duckdb": _duckdb,
    "pyiceberg": _pyiceberg,
    "deltalake": _deltalake,
    "polars": _polars,
    "spark": _spark,
}

#: The readers ``--reader`` accepts, in the order ``--help`` lists them.
READERS = tuple(_BUILDERS)
