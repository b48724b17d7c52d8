"""The PostgreSQL server's version is checked at open: older than 14 is refused.

The docs said "PostgreSQL >= 14" and nothing looked: an older server opened and
failed later wherever it lacked something. The open now reads the version the server
sent when the connection started (no extra round trip) and refuses an older one with
``ServerVersionError``, naming what it found and what is required, before anything
is created. Only 15 is installed here: the check itself is a pure function driven
with versions below, at and above the limit; the real server shows that 15 opens, and
that the open does apply the check (the limit raised above it for one test).
"""

from __future__ import annotations

import psycopg
import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.cli.exit_codes import EXIT_UNAVAILABLE, exit_code_for
from cpstore.errors import ServerVersionError, StoreError
from cpstore.store import pg_open
from cpstore.store.pg_open import (
    MIN_SERVER_VERSION,
    check_server_version,
    show_version,
)


@pytest.mark.parametrize("found", [0, 90624, 130011, 139999])
def test_a_server_below_14_is_refused_naming_both_versions(found: int) -> None:
    with pytest.raises(ServerVersionError) as caught:
        check_server_version(found, "postgresql://h/db")
    err = caught.value
    assert (err.found, err.required) == (found, MIN_SERVER_VERSION) == (found, 140000)
    assert isinstance(err, StoreError) and exit_code_for(err) == EXIT_UNAVAILABLE
    assert show_version(found) in str(err) and "14.0 or newer" in str(err)
    assert "tested on 15" in str(err)


@pytest.mark.parametrize("found", [140000, 140011, 150018, 170002])
def test_a_server_at_or_above_14_passes(found: int) -> None:
    check_server_version(found, "postgresql://h/db")


def test_versions_are_shown_as_people_write_them() -> None:
    assert [show_version(n) for n in (90624, 130011, 140000, 150018)] == [
        "9.6.24",
        "13.11",
        "14.0",
        "15.18",
    ]


def test_the_installed_server_15_opens(pg_cluster: Cluster) -> None:
    url = fresh_url()
    with psycopg.connect(
        f"host={pg_cluster.socket_dir} user=postgres dbname=postgres", autocommit=True
    ) as conn:
        found = conn.info.server_version
        (shown,) = conn.execute("SHOW server_version_num").fetchone() or ("",)
    assert found == int(shown) and found // 10000 == pg_open.TESTED_SERVER_VERSION
    with cpstore.open(url) as store:
        cid = store.recorder("r").checkpoint(0, {"a": 1})
    with cpstore.open(url, readonly=True) as store:
        assert store.ref("r") == cid


def test_the_open_applies_the_check_before_creating_anything(
    pg_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real 15 server against a limit raised to 16: refused, no schema made."""
    url = fresh_url()
    schema = url.rpartition("schema=")[2]
    monkeypatch.setattr(pg_open, "MIN_SERVER_VERSION", 160000)
    with pytest.raises(ServerVersionError) as caught:
        cpstore.open(url)
    assert caught.value.required == 160000
    assert caught.value.found is not None and caught.value.found // 10000 == 15
    assert url.split("?")[0] in str(caught.value)
    with psycopg.connect(
        f"host={pg_cluster.socket_dir} user=postgres dbname=postgres", autocommit=True
    ) as conn:
        made = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    assert made is None
