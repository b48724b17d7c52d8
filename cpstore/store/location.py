"""Where a store lives: a folder (LMDB) or a ``postgresql://`` URL (PostgreSQL).

Imports nothing of either engine, so the facade and the command line can
tell the two apart before loading one; a password in a URL never reaches an
error message or ``store.path`` (:func:`redact`).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

__all__ = ["URL_SCHEMES", "is_store_url", "redact"]

#: URL schemes that name a PostgreSQL store (libpq's two spellings).
URL_SCHEMES = ("postgresql://", "postgres://")


def is_store_url(path: object) -> bool:
    """True when ``path`` is a ``postgresql://`` (or ``postgres://``) URL, not a folder."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return isinstance(path, str) and path[:13].lower().startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and ``store.path``)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
        netloc = f"{user}:***@{host}{port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    except ValueError:
        return url.split("://", 1)[0] + "://(unparseable URL)"
