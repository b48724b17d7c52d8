"""PostgreSQL: a lost COMMIT is settled only after the server has finished with it.

A connection lost on the client side (a network drop, a keepalive timeout, a proxy)
does not end the server's session at once: the backend that received COMMIT goes on
and commits a moment later, and learns of the dead client only when it answers. The
read-back that settles the lost commit (commit.landed) must not read before that
backend is done: a snapshot taken while its COMMIT is still running shows the branch
at its old head, and the put was told "not stored" for a checkpoint the server then
committed. The loss is made for real here: the COMMIT is held on the server by a
deferred trigger waiting for a lock the test holds, and the client's socket is shut
under psycopg.
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import CommitLostError, CpstoreError
from cpstore.store import pg_backend
from cpstore.store.pg_open import parse_url

_HOLD = 7_404_037  # the advisory lock the deferred trigger waits for


def _schema(url: str) -> str:
    return parse_url(url).schema


def _conninfo(url: str) -> str:
    return parse_url(url).conninfo


def _wait_for(what: Callable[[], Any], label: str) -> Any:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"never saw {label}")


def _hold_commits(side: psycopg.Connection[Any], schema: str) -> None:
    """Every later COMMIT that changes a ref waits (a deferred trigger) for ``_HOLD``."""
    side.execute(
        f"""CREATE FUNCTION "{schema}".hold() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_advisory_xact_lock({_HOLD}); RETURN NULL; END $$"""
    )
    side.execute(
        f'CREATE CONSTRAINT TRIGGER hold AFTER INSERT OR UPDATE ON "{schema}"."refs" '
        f'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".hold()'
    )


def _backend_waiting(side: psycopg.Connection[Any], query: str) -> int | None:
    row = side.execute(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND wait_event = 'advisory' AND query LIKE %s AND pid <> pg_backend_pid()",
        (query,),
    ).fetchone()
    return None if row is None else int(row[0])


def _cut_client_socket(pid: int) -> None:
    """Shut the client end of the connection whose server backend is ``pid``."""
    for obj in gc.get_objects():
        if isinstance(obj, psycopg.Connection) and not obj.closed and obj.pgconn.backend_pid == pid:
            sock = socket.socket(fileno=obj.pgconn.socket)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.detach()
            return
    raise AssertionError(f"no client connection to backend {pid}")


def _put_with_its_commit_held(
    pg_url: str, *, release_when_settling: bool
) -> tuple[str, str | None, Any]:
    """A put whose COMMIT the server holds while its client socket is cut; the COMMIT is
    let go once the put's settle waits (``release_when_settling``) or once the put has
    answered. (first ref, ref after the held backend ended, the put's cid or error)."""
    schema = _schema(pg_url)
    with cpstore.open(pg_url) as store:
        rec = store.recorder("run")
        first = rec.checkpoint(0, {"i": 0})
        with psycopg.connect(_conninfo(pg_url), autocommit=True) as side:
            _hold_commits(side, schema)
            side.execute("SELECT pg_advisory_lock(%s)", (_HOLD,))
            outcome: dict[str, Any] = {}

            def put() -> None:
                try:
                    outcome["got"] = rec.checkpoint(1, {"i": 1})
                except CpstoreError as exc:
                    outcome["got"] = exc

            writer = threading.Thread(target=put)
            writer.start()
            # The put's COMMIT is on the server, held by the trigger: cut the client.
            pid = _wait_for(lambda: _backend_waiting(side, "%COMMIT%"), "the held COMMIT")
            _cut_client_socket(pid)
            if release_when_settling:
                _wait_for(
                    lambda: (
                        not writer.is_alive() or _backend_waiting(side, "%pg_advisory_xact_lock%")
                    ),
                    "the put's answer or its settle waiting",
                )
            else:
                writer.join(60)
            side.execute("SELECT pg_advisory_unlock(%s)", (_HOLD,))
            writer.join(60)
            assert not writer.is_alive()
            # The held backend commits once let go: wait until it has ended.
            _wait_for(
                lambda: side.execute(
                    "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()[0],  # type: ignore[index]
                "the held backend to end",
            )
        now = store.ref("run")
        assert store.verify().ok
        return first, now, outcome["got"]


def test_a_lost_commit_still_running_on_the_server_is_not_called_not_stored(
    pg_url: str,
) -> None:
    first, now, got = _put_with_its_commit_held(pg_url, release_when_settling=True)
    if isinstance(got, CommitLostError) and "not stored" in str(got):
        raise AssertionError(f"told 'not stored', yet the ref moved from {first} to {now}")
    # The settle waited for the held backend, which committed: the put is acknowledged.
    assert got == now and now != first, repr(got)


def test_a_settle_that_cannot_get_the_lock_leaves_the_outcome_open(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_backend, "SETTLE_WAIT", 0.2)
    first, now, got = _put_with_its_commit_held(pg_url, release_when_settling=False)
    assert isinstance(got, CommitLostError), repr(got)
    assert "committed whole or not at all" in str(got) and "not stored" not in str(got)
    assert now != first  # it did commit once the server let it go
