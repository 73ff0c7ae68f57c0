"""Keeping secrets out of messages: which options are secret, and URLs without them.

Redaction goes by *name*, never by the value's type: a secret given as bytes, a
bytearray, an int or an object whose ``str()`` is the secret is as secret as a string.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit, urlunsplit

__all__ = ["REDACTED", "is_secret_option", "redact_url"]

#: Option names holding any of these words are secret (``aws_secret_access_key``,
#: ``s3_session_token``, ``token``, ``password``...). Access key ids too: not secret
#: on their own, but nothing needs them in a message (``ServiceSettings`` shows their
#: last four characters where that helps).
_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential", "access_key", "signature")

#: Query parameters a dataset URI may carry; the values of all others are hidden.
_PUBLIC_QUERY = frozenset({"ddbtablename"})

REDACTED = "***"


def is_secret_option(name: object) -> bool:
    """Whether a storage option or query parameter called ``name`` holds a secret."""
    key = str(name).lower().replace("-", "_")
    return any(word in key for word in _SECRET_WORDS)


def redact_url(text: object) -> str:
    """``text`` (a URI, an endpoint URL) with its user info and the values of its
    query parameters other than ``ddbTableName`` replaced by ``***``; the fragment is
    dropped. Text that is not a URL is returned as ``str(text)``."""
    value = str(text)
    if "://" not in value:
        return value
    try:
        parts = urlsplit(value)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
        return urlunsplit((parts.scheme, netloc, parts.path, _redact_query(parts.query), ""))
    except ValueError:  # e.g. an invalid IPv6 netloc: show only the scheme
        return value.split("://", 1)[0] + "://" + REDACTED


def _redact_query(query: str) -> str:
    """``key=value`` pairs keep their key (an option's name); a value is shown only for
    ``ddbTableName``; a part without ``=`` (a bare token) is hidden whole."""
    parts = []
    for part in query.split("&") if query else ():
        key, sep, _value = part.partition("=")
        if not sep:
            parts.append(REDACTED)
        elif unquote_plus(key).lower() in _PUBLIC_QUERY:
            parts.append(part)
        else:
            parts.append(f"{key}={REDACTED}")
    return "&".join(parts)
