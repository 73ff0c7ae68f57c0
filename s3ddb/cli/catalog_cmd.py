"""``s3ddb catalog``: name a dataset's table in a catalog and keep the catalog current.

``s3ddb catalog register URI --glue DB.TABLE [--format iceberg|delta]`` names the
dataset's AWS Glue table (docs/catalogs.md, "AWS Glue"); every later published version
moves it. ``s3ddb catalog sync URI`` brings the dataset's catalogs up to its newest
version (after a catalog failure, which never fails a commit). ``--rest NS.TABLE``
registers the dataset in s3ddb's Iceberg REST catalog (its registry at ``--registry
ROOT``), which ``s3ddb catalog serve --host H --port P`` serves
(:mod:`s3ddb.catalog_server`).
"""

from __future__ import annotations

import argparse
from typing import Any

from s3ddb.catalogs import (
    GLUE_FORMATS,
    GlueSync,
    GlueTarget,
    check_glue_name,
    glue_target,
    sync_glue_table,
)
from s3ddb.cli.commands import _verb, storage_options
from s3ddb.cli.output import emit_json
from s3ddb.errors import InvalidInputError, PathOutsideDatasetError

__all__ = [
    "register",
    "run_catalog",
    "run_catalog_register",
    "run_catalog_serve",
    "run_catalog_sync",
]


def run_catalog(args: argparse.Namespace) -> int:
    """Name a dataset's table in a catalog (register), or bring its catalogs up to the
    newest version (sync).

    AWS Glue (register --glue DB.TABLE): every published version moves the Glue
    table's Iceberg metadata_location; a Delta table is registered once by location.
    A catalog update never fails a commit: sync catches up after a failure.
    """
    args.catalog_parser.print_help()
    return 2


def _catalog_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The storage options of the flags, with the Glue-only ones."""
    options = dict(storage_options(args) or {})
    for flag in ("glue_endpoint", "glue_region"):
        value = getattr(args, flag, None)
        if value:
            options[flag] = value
    return options or None


def _open(args: argparse.Namespace) -> Any:
    import s3ddb

    return s3ddb.dataset(args.uri, storage_options=_catalog_options(args))


def _print_glue(result: GlueSync, as_json: bool) -> None:
    if as_json:
        emit_json(result.to_dict())
    else:
        print(result.describe())


def run_catalog_register(args: argparse.Namespace) -> int:
    """Name the dataset's table in a catalog: --glue DB.TABLE (AWS Glue) or --rest
    NS.TABLE (s3ddb's Iceberg REST catalog).

    --glue checks that the Glue table is free (or already this dataset's), commits a
    config change naming it (the config keys s3ddb.catalog.glue and
    s3ddb.catalog.glue_format), then creates the Glue table or moves it to the newest
    version. The dataset must publish the format (s3ddb open-formats URI --enable).
    Exit status 0: registered; 1: the catalog refused, or holds another table under
    the name; 2: bad arguments, or the dataset or catalog cannot be reached.
    """
    if args.rest is not None:
        return _register_rest(args)
    target = GlueTarget.parse(args.glue, args.format)
    ds = _open(args)
    if target.format not in ds.open_formats:
        raise InvalidInputError(
            f"{args.uri} does not publish {target.format}, which the Glue table would "
            f"read: s3ddb open-formats URI --enable {target.format} first"
        )
    store = ds.handler.store
    check_glue_name(store, target)
    if glue_target(ds.config, args.uri) != target:
        ds.update_config(target.config())
    _print_glue(_sync(ds), args.json)
    return 0


def _sync(ds: Any) -> GlueSync:
    """Publish the newest version if it is not yet (a commit whose finalizer has not
    run, or whose publication failed), then move its Glue table to it."""
    ds.checkout_latest()
    ds.publish_open_formats()
    result = sync_glue_table(ds.handler.store, ds.manifest, newest=ds.handler.newest_version)
    if result is None:
        raise InvalidInputError(
            f"{ds.uri} names no catalog table: s3ddb catalog register URI --glue DB.TABLE"
        )
    return result


def run_catalog_sync(args: argparse.Namespace) -> int:
    """Bring the dataset's catalog table up to its newest version.

    Publishes the newest version if it is not yet, then moves the Glue table the
    dataset names to it, never backwards, creating the table if it is missing.
    Exit status 0: current; 1: the catalog refused or holds an entry s3ddb does not
    trust (nothing written); 2: no catalog named, or the dataset or catalog cannot
    be reached.
    """
    _print_glue(_sync(_open(args)), args.json)
    return 0


#: The environment variable naming the REST catalog's registry root.
REGISTRY_ENV = "S3DDB_CATALOG_REGISTRY"


def _registry(args: argparse.Namespace) -> Any:
    """The REST catalog's registry that ``--registry`` (or S3DDB_CATALOG_REGISTRY) names.

    Raises:
        InvalidInputError: neither names one, or the extra is not installed.
    """
    import os

    root = getattr(args, "registry", None) or os.environ.get(REGISTRY_ENV)
    if not root:
        raise InvalidInputError(
            f"name the REST catalog's registry: --registry ROOT (or {REGISTRY_ENV}), the "
            "folder or S3 prefix the registered datasets are under"
        )
    try:
        from s3ddb.catalog_server import CatalogRegistry
    except ImportError as exc:
        raise InvalidInputError(
            f"the REST catalog needs the catalog extra: pip install 's3ddb[catalog]' ({exc})"
        ) from None
    return CatalogRegistry(root, storage_options(args))


def _register_rest(args: argparse.Namespace) -> int:
    """``register URI --rest NS.TABLE``: an entry in the registry (the dataset must
    publish Iceberg, which the catalog serves)."""
    from s3ddb.catalog_server import parse_table_name
    from s3ddb.catalog_server.table_loading import SERVED_FORMAT

    registry = _registry(args)
    name = parse_table_name(args.rest)
    try:
        registry.check_dataset_uri(args.uri)
    except PathOutsideDatasetError as exc:  # the user's argument, not stored metadata
        raise InvalidInputError(str(exc)) from None
    ds = _open(args)
    if SERVED_FORMAT not in ds.open_formats:
        raise InvalidInputError(
            f"{args.uri} does not publish Iceberg, which the REST catalog serves: "
            f"s3ddb open-formats URI --enable {SERVED_FORMAT} first"
        )
    added = registry.register(name, args.uri)
    if args.json:
        emit_json({"registered": str(name), "uri": args.uri, "registry": registry.root,
                   "new": added})  # fmt: skip
    else:
        print(f"{name}: {args.uri}" + ("" if added else " (registered already)"))
    return 0


def run_catalog_serve(args: argparse.Namespace) -> int:
    """Serve the registry's datasets as a read-only Iceberg REST catalog.

    loadTable returns each table's newest committed version (published first if a
    writer died before publishing it). Every request needs the bearer token from
    S3DDB_CATALOG_TOKEN or --token-file; --no-auth serves without one, on a loopback
    address only. Runs until interrupted. Exit status 2: bad arguments, or no
    token.
    """
    registry = _registry(args)
    try:
        from s3ddb.catalog_server import serve
        from s3ddb.catalog_server.server import read_token
    except ImportError as exc:  # pragma: no cover - _registry checked the extra
        raise InvalidInputError(f"pip install 's3ddb[catalog]' ({exc})") from None
    token = None if args.no_auth else read_token(args.token_file)

    def announce(url: str) -> None:
        print(f"s3ddb catalog: serving {registry.root} at {url}", flush=True)

    serve(registry, args.host, args.port, token=token, no_auth=args.no_auth, announce=announce)
    return 0


def _registry_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--registry",
        metavar="ROOT",
        help=f"the REST catalog's registry: the folder or S3 prefix the datasets are under "
        f"(default: {REGISTRY_ENV})",
    )


def _glue_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--glue-endpoint", help="AWS Glue endpoint only (default: AWS_ENDPOINT_URL_GLUE)"
    )
    parser.add_argument("--glue-region", help="AWS Glue region only (default: AWS_REGION_GLUE)")


def register(subparsers: Any) -> None:
    """Add the ``catalog`` verb and its actions."""
    parser = subparsers.add_parser(
        "catalog",
        help="name a dataset's table in a catalog (AWS Glue, Iceberg REST) and keep it current",
        description=" ".join((run_catalog.__doc__ or "").split()),
    )
    parser.set_defaults(func=run_catalog, catalog_parser=parser)
    actions = parser.add_subparsers(dest="catalog_action", metavar="ACTION")

    p = _verb(actions, "register", run_catalog_register)
    names = p.add_mutually_exclusive_group(required=True)
    names.add_argument("--glue", metavar="DB.TABLE", help="the AWS Glue database and table")
    names.add_argument(
        "--rest", metavar="NS.TABLE", help="the namespace and table in s3ddb's REST catalog"
    )
    p.add_argument(
        "--format",
        choices=GLUE_FORMATS,
        default=GLUE_FORMATS[0],
        help=f"the format the Glue table reads (default {GLUE_FORMATS[0]})",
    )
    _glue_flags(p)
    _registry_flag(p)

    p = _verb(actions, "sync", run_catalog_sync)
    _glue_flags(p)

    p = _verb(actions, "serve", run_catalog_serve, action=True, reports=False)
    _registry_flag(p)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8181, help="the port to listen on (8181)")
    p.add_argument(
        "--token-file", help="a file holding the bearer token (default: S3DDB_CATALOG_TOKEN)"
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without a token (only on a loopback address)",
    )
