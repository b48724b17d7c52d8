"""A PostgreSQL store stays at layout 5 (PG_STORE_VERSION): layout 6 changed only
LMDB's heap entries, so a layout-5 release keeps sharing a PostgreSQL store that this
release opened writable, on a real server the suite starts itself."""

from __future__ import annotations

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.native.canonical import encode_value
from cpstore.store import lmdb_open
from cpstore.store.lmdb_open import FORMAT, FORMAT_KEY
from cpstore.store.model import PG_STORE_VERSION, STORE_VERSION
from cpstore.store.pg_open import parse_url


def _format_version(url: str) -> int:
    schema = parse_url(url).schema
    with psycopg.connect(parse_url(url).conninfo) as conn:
        row = conn.execute(
            f'SELECT v FROM "{schema}"."meta" WHERE k = %s', (FORMAT_KEY,)
        ).fetchone()
    assert row is not None
    return int(lmdb_open.check_format(bytes(row[0]), url))


def _as_layout_5_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads only layouts 1-5, as a layout-5 release does."""
    old = {k: v for k, v in lmdb_open._FORMAT_RECORDS.items() if v <= 5}
    monkeypatch.setattr(lmdb_open, "READABLE_VERSIONS", (1, 2, 3, 4, 5))
    monkeypatch.setattr(lmdb_open, "_FORMAT_RECORDS", old)


def test_a_new_postgresql_store_is_written_at_layout_5(pg_url: str) -> None:
    """The format record says PG_STORE_VERSION (5), while LMDB stores say 6."""
    assert (PG_STORE_VERSION, STORE_VERSION) == (5, 6)
    with cpstore.open(pg_url) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
        assert st.backend.layout == 5
    assert _format_version(pg_url) == 5
    with cpstore.open(pg_url, readonly=True) as st, st.read(cid) as cp:
        assert cp.state() == {"a": 1}


def test_a_layout_5_release_opens_a_store_this_release_wrote(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writable and read-only, the older release reads what this one recorded."""
    with cpstore.open(pg_url) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    _as_layout_5_release(monkeypatch)
    for readonly in (False, True):
        with cpstore.open(pg_url, readonly=readonly) as st, st.read(cid) as cp:
            assert cp.state() == {"a": 1}


def test_a_store_an_earlier_build_marked_6_stays_6_and_reads(pg_url: str) -> None:
    """A format record saying 6 (same data) is read as it is and never moved back."""
    with cpstore.open(pg_url) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    schema = parse_url(pg_url).schema
    with psycopg.connect(parse_url(pg_url).conninfo) as conn:
        conn.execute(
            f'UPDATE "{schema}"."meta" SET v = %s WHERE k = %s',
            (encode_value({**FORMAT, "version": 6}), FORMAT_KEY),
        )
    with cpstore.open(pg_url) as st:
        assert st.backend.layout == 6
        st.recorder("r").checkpoint(1, {"a": 2})
        with st.read(cid) as cp:
            assert cp.state() == {"a": 1}
    assert _format_version(pg_url) == 6
