"""review71: creates and moves in other processes racing the deletion of
``meta/refs_digest`` and of run ``r``'s ``main`` behind cpstore's back, on both engines.

One process forks branch after branch, another moves run ``m``'s ``main`` without pause
(each move used to write the missing row back counted from 0, re-opening the hole), a
third deletes the digest row and then ``r``'s ``main``. No create is acknowledged after
the first refusal, every move goes on, ``verify()`` names the digest, and
``repair_ref`` putting ``r``'s ``main`` back leaves the store verified.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_refs70_create_short import _create

import cpstore
from cpstore.store.refs import REFS_DIGEST_KEY


def _move(url: str, start: Any, stop: Any, out: Any) -> None:
    moved = 0
    with cpstore.open(url) as st:
        rec = st.recorder("m")
        rec.checkpoint(0, {"m": 0})
        start.wait()
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            moved += 1
            rec.checkpoint(moved, {"m": moved})
    out.put(moved)


def _delete(url: str, start: Any) -> None:
    start.wait()
    time.sleep(0.05)  # a few creates and moves first (not asserted on)
    _raw_ref(url, REFS_DIGEST_KEY, None, table="meta")
    _raw_ref(url, b"r\0main", None)


def test_creates_racing_the_loss_of_the_digest_row(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        st.recorder("s").checkpoint(0, {"s": 0})
    ctx = multiprocessing.get_context("spawn")
    start, stop, created, moves = ctx.Barrier(3), ctx.Event(), ctx.Queue(), ctx.Queue()
    creator = ctx.Process(target=_create, args=(url, start, created))
    mover = ctx.Process(target=_move, args=(url, start, stop, moves))
    deleter = ctx.Process(target=_delete, args=(url, start))
    for p in (creator, mover, deleter):
        p.start()
    before, after, refused = created.get(timeout=300)
    deleter.join(120)
    stop.set()
    moved = moves.get(timeout=120)
    mover.join(120)
    creator.join(120)
    assert (creator.exitcode, mover.exitcode, deleter.exitcode) == (0, 0, 0)
    assert refused, "the creator never met the deletion"
    assert after == [], f"created after the refusal: {after}"
    assert moved > 0
    with cpstore.open(url) as st:
        assert sorted(st.branches("s")) == sorted(["main", *before])
        problems = st.verify().problems
        assert [p.where for p in problems] == ["meta/refs_digest"], problems
        # Missing, or written back whole by a PostgreSQL writer that read it before the
        # deletion committed (what deletes behind cpstore's back takes no writer lock)
        assert "missing" in problems[0].what or "a ref vanished" in problems[0].what
        st.repair_ref("r", "main", ids[1], operator="o", reason="put back")
        assert st.verify().ok
        st.fork("s", "after", st.branches("s")["main"])
