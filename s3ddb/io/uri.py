"""Dataset URIs: parsing and normalization.

Supported forms:
  * a local path or ``file:///abs/path`` — commits by rename-if-not-exists;
  * ``memory://name`` — in-process, put-if-not-exists;
  * ``s3://bucket/prefix`` — S3 conditional PUT (If-None-Match);
  * ``s3+ddb://bucket/prefix?ddbTableName=TABLE`` — objects on S3, commits through
    the DynamoDB external manifest store.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from s3ddb.errors import InvalidURIError
from s3ddb.io.redact import redact_url

__all__ = ["DatasetURI", "parse_uri"]

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,254}$")


@dataclass(frozen=True)
class DatasetURI:
    """A parsed dataset URI.

    Attributes:
        scheme: "file", "memory", "s3" or "s3+ddb".
        path: backend path of the dataset root without scheme: an absolute local path,
            ``/name/...`` for memory, ``bucket/prefix`` for S3.
        ddb_table: the DynamoDB table name for ``s3+ddb``.
        original: the URI as given.
    """

    scheme: str
    path: str
    ddb_table: str | None = None
    original: str = ""

    @property
    def storage_protocol(self) -> str:
        """The object store protocol: "file", "memory" or "s3"."""
        return "s3" if self.scheme.startswith("s3") else self.scheme

    @property
    def object_url(self) -> str:
        """URL of the dataset root on its object store (no DynamoDB, no query)."""
        if self.storage_protocol == "file":
            return "file://" + self.path
        if self.storage_protocol == "memory":
            return "memory://" + self.path.lstrip("/")
        return "s3://" + self.path

    @property
    def base_uri(self) -> str:
        """The normalized URI that keys the dataset in the external store.

        ``s3://bucket/prefix``: scheme and bucket included, no trailing slash, no query.
        """
        return self.object_url

    @property
    def bucket(self) -> str | None:
        return self.path.split("/", 1)[0] if self.storage_protocol == "s3" else None

    @property
    def uses_external_store(self) -> bool:
        return self.scheme == "s3+ddb"


def parse_uri(uri: str | os.PathLike[str]) -> DatasetURI:
    """Parse a dataset URI or local path.

    Raises:
        InvalidURIError: unknown scheme, missing bucket, a missing or unexpected
            query parameter.
    """
    # Anything but text or a path (an int, a Dataset...) is refused by the check below.
    text = os.fspath(uri) if isinstance(uri, (str, os.PathLike)) else uri
    if not isinstance(text, str) or not text:
        raise InvalidURIError(
            f"dataset URI must be a non-empty string, got {type(uri).__name__} {redact_url(uri)!r}"
        )
    if "://" not in text:
        if text[:6].lower() == "file:/":  # RFC 8089's short form, file:/abs/path
            return DatasetURI("file", _normalize_local(text[5:]), original=text)
        slip = _SCHEME_SLIP_RE.match(text)
        if slip is not None:
            # "s3:/bucket/p" or "s3:bucket/p" would be a local folder named "s3:".
            scheme, rest = slip.group(1).lower(), text[slip.end() :].lstrip("/")
            raise InvalidURIError(
                f"{redact_url(text)!r}: did you mean '{scheme}://{redact_url(rest)}'? A "
                "URI's scheme is followed by two slashes (a local folder whose name starts "
                f"with '{slip.group(1)}:' is written ./{slip.group(1)}:...)"
            )
        return DatasetURI("file", _normalize_local(text), original=text)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    # Messages show the URI without user info or query values: a URI refused for
    # carrying credentials (s3://KEY:SECRET@bucket, ?aws_secret_access_key=...) must
    # not print them.
    shown = redact_url(text)
    if scheme == "file":
        if parts.query:
            raise InvalidURIError(f"unexpected query in {shown!r} (values hidden)")
        return DatasetURI("file", _normalize_local(parts.netloc + parts.path), original=text)
    if scheme == "memory":
        path = "/" + (parts.netloc + parts.path).strip("/")
        if path == "/":
            raise InvalidURIError(f"memory URI needs a name: memory://<name>, got {shown!r}")
        return DatasetURI("memory", path, original=text)
    if scheme in ("s3", "s3a", "s3+ddb"):
        bucket = parts.netloc
        if not bucket or not _BUCKET_RE.match(bucket):
            raise InvalidURIError(f"invalid or missing S3 bucket in {shown!r}")
        prefix = parts.path.strip("/")
        if any(segment in ("", ".", "..") for segment in prefix.split("/")) and prefix:
            # Object keys are not paths: "a/../b" would be a prefix of its own, beside
            # the dataset the URI seems to name.
            raise InvalidURIError(
                f"S3 dataset prefix {prefix!r} in {shown!r} has an empty, '.' or '..' segment"
            )
        if not prefix:
            # A dataset at a bucket's root would share _versions/ with anything else
            # there; require a prefix so that base_uri stays unambiguous.
            shown_scheme = "s3+ddb" if scheme == "s3+ddb" else "s3"
            query_shown = "?ddbTableName=<table>" if scheme == "s3+ddb" else ""
            raise InvalidURIError(
                f"{shown!r}: a dataset URI needs a prefix under the bucket: "
                f"{shown_scheme}://{bucket}/<prefix>{query_shown}"
            )
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        table = None
        if scheme == "s3+ddb":
            table = query.pop("ddbTableName", None)
            misspelt = [k for k in query if k.lower().replace("_", "") == "ddbtablename"]
            if not table and misspelt:
                raise InvalidURIError(
                    f"{shown!r}: misspelt query key {misspelt[0]!r}; the key is exactly "
                    f"'ddbTableName': s3+ddb://{bucket}/{prefix}?ddbTableName=<table>"
                )
            if not table:
                raise InvalidURIError(
                    f"{shown!r}: s3+ddb URIs need the DynamoDB table: "
                    f"s3+ddb://{bucket}/{prefix}?ddbTableName=<table>"
                )
        if query:
            raise InvalidURIError(_unexpected_query_message(list(query), shown, scheme))
        return DatasetURI(
            "s3+ddb" if scheme == "s3+ddb" else "s3",
            f"{bucket}/{prefix}",
            ddb_table=table,
            original=text,
        )
    raise InvalidURIError(
        f"unsupported URI scheme {scheme!r} in {shown!r}; "
        "use a local path, file://, memory://, s3:// or s3+ddb://"
    )


# A URI scheme s3ddb reads, followed by one slash or none: a slip, never a local path
# anyone means (a local folder of that name is written ./s3:...).
_SCHEME_SLIP_RE = re.compile(r"(s3|s3a|s3\+ddb|memory|file):(?!//)", re.IGNORECASE)


def _normalize_local(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"


_KNOWN_QUERY_KEYS = ("ddbTableName",)


def _unexpected_query_message(keys: list[str], shown: str, scheme: str) -> str:
    """Say which query keys are not understood, naming only near misses of known keys.

    An unknown key is echoed only when it is a near miss of a known one (a case or
    spelling slip such as ``ddbtablename``): anything else may be a secret pasted in
    the wrong place (``?SECRET``), so it is counted, never shown.
    """
    near = [
        (key, known)
        for key in keys
        for known in _KNOWN_QUERY_KEYS
        if difflib.SequenceMatcher(None, key.lower(), known.lower()).ratio() >= 0.8
    ]
    hint = "" if scheme == "s3+ddb" else " (did you mean s3+ddb://...?ddbTableName=T)"
    # Imported here: the URI parser needs the option table only to explain a refusal.
    from s3ddb.io.aws import is_storage_option

    options = [key for key in keys if is_storage_option(key)]
    if options:
        # A known option's name is no secret (its value stays hidden).
        return (
            f"{shown!r}: {options[0]!r} is a storage option, not part of the URI: pass it "
            f"in storage_options (on the command line: --storage-option {options[0]}=...)"
        )
    if near:
        key, known = near[0]
        return f"{shown!r}: unknown query key {key!r}; did you mean {known!r}?{hint}"
    return f"{len(keys)} unexpected query parameter(s) in {shown!r} (names hidden){hint}"
