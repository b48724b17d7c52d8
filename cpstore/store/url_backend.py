"""The PostgreSQL backend, loaded only when a store URL asks for it (an optional extra)."""

from __future__ import annotations

from typing import Any

from cpstore.errors import StoreError
from cpstore.store.location import redact

__all__ = ["postgres_backend"]


def postgres_backend(url: str, **options: Any) -> Any:
    """The PostgreSQL backend for ``url``, or a clear error when its extra is missing."""
    try:
        from cpstore.store.pg_backend import PgBackend  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise StoreError(
            "a postgresql:// store needs the PostgreSQL extra: pip install 'cpstore[postgres]'",
            where=redact(url),
            expected="psycopg[binary] and psycopg-pool installed",
            got=str(exc),
        ) from None
    return PgBackend(url, **options)
