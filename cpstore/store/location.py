"""Where a store lives: a folder (LMDB) or a ``postgresql://`` URL (PostgreSQL).

Imports nothing of either engine (nor the stores), so the facade and the command line can
tell the two apart before loading one; a password in a URL never reaches an
error message or ``store.path`` (:func:`redact`).
"""

from __future__ import annotations

import os
import stat
from typing import cast
from urllib.parse import unquote, urlsplit, urlunsplit

from cpstore.errors import InvalidInputError
from cpstore.native.args import check_text

__all__ = ["URL_SCHEMES", "check_store_path", "is_store_url", "redact", "refuse_empty"]

#: URL schemes that name a PostgreSQL store (libpq's two spellings).
URL_SCHEMES = ("postgresql://", "postgres://")


def is_store_url(path: object) -> bool:
    """True when ``path`` is a ``postgresql://`` (or ``postgres://``) URL, not a folder."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return isinstance(path, str) and path[:13].lower().startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and ``store.path``): the
    one before the host and libpq's ``password=`` query parameter alike."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:  # user:password@host: only the password goes
            userinfo, _, hostport = netloc.rpartition("@")
            user = userinfo.partition(":")[0]
            netloc = f"{user}:***@{hostport}"
        query = "&".join(_redact_param(p) for p in parts.query.split("&"))
        if netloc == parts.netloc and query == parts.query:
            return url
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return url.split("://", 1)[0] + "://(unparseable URL)"


def _redact_param(param: str) -> str:
    """One ``key=value`` of a URL's query, its value ``***`` when the key (percent-decoded,
    as libpq reads it) is ``password``."""
    key, eq, _ = param.partition("=")
    return f"{key}=***" if eq and unquote(key).strip().lower() == "password" else param


def refuse_empty(
    path: object, what: str, expected: str = "a folder or a postgresql:// URL"
) -> str | bytes | os.PathLike[str] | os.PathLike[bytes]:
    """``path``, or InvalidInputError for a path that is not a str, bytes or path-like,
    or is empty (``""``, ``b""``, or a path-like of one).

    The OS takes no empty path (``os.stat("")`` is FileNotFoundError, so it looked
    like a new store), and ``os.path.join("", name)`` is ``name`` in the working
    folder: an unset ``$DEST`` made a store there, and a failed copy's clean-up
    removed that folder's data file (audit58)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidInputError(
            f"a {what} path must be a str or path", where=what, got=type(path).__name__
        )
    if not os.fspath(path):
        raise InvalidInputError(
            f"the {what} path is empty (it would name the working folder)",
            where=what,
            expected=expected,
            got="''",
        )
    return path


def check_store_path(path: object) -> str | os.PathLike[str]:
    """Refuse a path that cannot be a store folder (or URL) before anything touches it;
    the path to open, a bytes path (or path-like of bytes) as the str it decodes to."""
    if is_store_url(path):
        return os.fsdecode(cast("str | bytes", path))
    path = refuse_empty(path, "store")
    if type(path) is not str or not path.isascii():  # (an ASCII str passes both checks)
        # LMDB takes the path as UTF-8: a name with undecodable bytes has no such form.
        text = os.fsdecode(path)
        check_text(text, "store path")
        if not isinstance(os.fspath(path), str):
            path = text  # the registry and LMDB work on str paths
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return cast("str | os.PathLike[str]", path)  # a new store
    except ValueError as exc:  # an embedded NUL: no OS path can hold it
        raise InvalidInputError("not a usable path", where="store path", got=str(exc)) from None
    except OSError as exc:
        raise InvalidInputError(
            "cannot use this path as a store folder",
            where=os.fsdecode(path),
            got=exc.strerror or str(exc),
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "a FIFO, socket or device"
        raise InvalidInputError(
            "not a store folder", where=os.fsdecode(path), expected="a folder", got=kind
        )
    return cast("str | os.PathLike[str]", path)  # str, or a path-like of str
