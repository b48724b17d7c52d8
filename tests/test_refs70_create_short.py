"""refs70: no ref is created from nothing while the refs table is short of its digest's count.

A ref row deleted behind cpstore's back leaves the table one ref short of the count
``meta/refs_digest`` records. Every write that creates a ref compare-and-sets against
"absent", and the damage met that expectation: a new recorder on the run started a new
root (the runtime saw its run as new and would replay its effects), ``fork``,
``set_ref(expected_old=None)`` and ``reset_ref(expected_old=None)`` put a head where the
true one stood, a LangGraph put on the thread went on as if nothing was lost, and a push
landing a branch created and then deleted after its last check created it with no
divergence check (push69's remaining race). Now such a write is an IntegrityError naming
``meta/refs_digest`` with the counts, and writes nothing; a ref that moves is not
refused (its CAS reads the ref), and ``repair_ref`` putting the vanished ref back ends it.
The damage is done by another process (LMDB) or connection (PostgreSQL).
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from lg_puts import put_value
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _digest, _raw_ref

import cpstore
from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.store import transfer as transfer_module
from cpstore.store.facade import Store
from cpstore.store.pg_open import parse_url
from cpstore.store.refs import SET, pack_ref
from cpstore.store.stats import store_stats
from cpstore.store.transfer import transfer


def _refused(exc: IntegrityError, counted: int, found: int) -> None:
    assert exc.where == "meta/refs_digest"
    assert "fewer refs" in str(exc) and "repair_ref" in str(exc)
    assert (exc.expected, exc.got) == (f"{counted} refs", f"{found} refs")


def _snapshot(st: Store) -> tuple[Any, ...]:
    """What a refused write must leave as it was: refs, digest, checkpoints, objects."""
    b = st.backend
    with b.read_txn() as txn, txn.cursor(db=b.db("refs")) as cur:
        refs = sorted((bytes(k), bytes(v)) for k, v in cur)
    stats = store_stats(st)
    return refs, _digest(st), stats.checkpoints, stats.objects


def _main_vanished(url: str, st: Store) -> list[str]:
    """Run ``r`` with three checkpoints and a run ``s``; then ``r``'s main row deleted."""
    rec = st.recorder("r")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
    st.recorder("s").checkpoint(0, {"s": 0})
    _raw_ref(url, b"r\0main", None)
    return ids


def test_a_new_recorder_on_a_run_whose_head_vanished_starts_no_new_root(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        before = _snapshot(st)
        with pytest.raises(IntegrityError) as info:
            st.recorder("r").checkpoint(9, {"new": "root"})
        _refused(info.value, 2, 1)
        assert _snapshot(st) == before
        assert st.branches("r") == {}
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        nxt = st.recorder("r").checkpoint(3, {"i": 3})  # extends the true head
        assert st.manifest(nxt).parent == ids[2]


@pytest.mark.parametrize("how", ["fork", "set_ref", "reset_ref", "new_run", "new_branch"])
def test_every_create_is_refused_while_the_table_is_short(url: str, how: str) -> None:
    """The digest cannot say which ref vanished, so no ref is created anywhere: another
    run or branch too (the same stance as push69's for a one-run push)."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        before = _snapshot(st)
        with pytest.raises(IntegrityError) as info:
            if how == "fork":
                st.fork("r", "main", ids[1])
            elif how == "set_ref":
                st.set_ref("r", "main", ids[2], expected_old=None)
            elif how == "reset_ref":
                st.reset_ref("r", "main", ids[0], expected_old=None, operator="o", reason="x")
            elif how == "new_run":
                st.recorder("t").checkpoint(0, {"t": 0})
            else:
                st.fork("r", "b", ids[0])
        _refused(info.value, 2, 1)
        assert _snapshot(st) == before


def test_moves_go_on_and_a_repair_ends_the_refusal(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s1 = st.recorder("s").checkpoint(1, {"s": 1})  # a ref that moves: its CAS reads it
        assert st.ref("s") == s1
        with pytest.raises(IntegrityError):
            st.fork("s", "b", s1)
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert st.ref("r") == ids[2]
        assert st.recorder("r").checkpoint(3, {"i": 3}) != ids[2]
        st.fork("s", "b", s1)
        st.recorder("t").checkpoint(0, {"t": 0})
        assert st.verify().ok


def test_a_count_the_table_exceeds_refuses_nothing(url: str) -> None:
    """A ref added behind cpstore's back (the table longer than its count) loses no head:
    creates go on (``verify()`` reports the table, retention stays stopped)."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        value = pack_ref(b"r\0extra", bytes.fromhex(ids[0]), SET)
        if url.startswith("postgresql"):
            with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
                conn.execute(
                    f'INSERT INTO "{parse_url(url).schema}"."refs" (k, v) VALUES (%s, %s)',
                    (b"r\0extra", value),
                )
        else:
            _raw_ref(url, b"r\0extra", value)
        st.fork("r", "b", ids[0])
        assert set(st.branches("r")) == {"main", "extra", "b"}
        assert not st.verify().ok


def test_a_langgraph_put_on_a_thread_whose_head_vanished_is_refused(url: str) -> None:
    with cpstore.open(url) as st:
        saver = CpstoreSaver(st)
        parent = None
        for value in ("a1", "a2", "a3"):
            parent = put_value(saver, "t", parent, value)
        put_value(saver, "u", None, "u1")
        run = run_for("t")
        [(branch, _)] = st.branches(run).items()
        _raw_ref(url, f"{run}\0{branch}".encode(), None)
        before = _snapshot(st)
        with pytest.raises(IntegrityError):
            put_value(saver, "t", None, "fresh")  # the thread's first checkpoint, again
        with pytest.raises(IntegrityError):
            put_value(saver, "v", None, "v1")  # a new thread: any create
        assert _snapshot(st) == before


def test_a_push_lands_no_branch_created_then_deleted_after_its_last_check(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """push69's remaining race: the destination's branch absent at the last check, then
    forked by cpstore and deleted behind its back before the landing: the landing's CAS
    "absent" held, and the push created it at the source's head over the fork's."""
    with cpstore.open(tmp_path / "src") as src, cpstore.open(url) as dst:
        rec = src.recorder("r")
        shared = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        transfer(src.backend, dst.backend)
        src.fork("r", "b", shared[0])
        src.recorder("r", branch="b").checkpoint(5, {"b": 5})
        land = transfer_module._land_branch

        def fork_delete_then_land(*args: Any, **kwargs: Any) -> Any:
            dst.fork("r", "b", shared[1])  # the destination's own branch b
            _raw_ref(url, b"r\0b", None)
            return land(*args, **kwargs)

        monkeypatch.setattr(transfer_module, "_land_branch", fork_delete_then_land)
        with pytest.raises(IntegrityError) as info:
            transfer(src.backend, dst.backend, run_id="r")
        _refused(info.value, 2, 1)
        monkeypatch.undo()
        assert set(dst.branches("r")) == {"main"}
        dst.repair_ref("r", "b", shared[1], operator="o", reason="put back")
        assert dst.verify().ok and dst.ref("r", "b") == shared[1]


def _create(url: str, start: Any, out: Any) -> None:
    """Fork branch f<i> at run s's head, one after another, until one is refused (or a
    minute passed); then 20 more, which the standing damage must all refuse. Puts
    (acknowledged before the refusal, acknowledged after it, whether one was refused)."""
    before: list[str] = []
    after: list[str] = []
    refused = False
    with cpstore.open(url) as st:
        head = st.ref("s")
        assert head is not None
        start.wait()
        deadline = time.monotonic() + 60
        i = 0
        while time.monotonic() < deadline:
            try:
                st.fork("s", f"f{i}", head)
            except IntegrityError:
                refused = True
                break
            before.append(f"f{i}")
            i += 1
        for j in range(i + 1, i + 21 if refused else i):
            try:
                st.fork("s", f"f{j}", head)
            except IntegrityError:
                continue
            after.append(f"f{j}")
    out.put((before, after, refused))


def _delete(url: str, start: Any) -> None:
    start.wait()
    _raw_ref(url, b"r\0main", None)


def test_creates_racing_a_deletion_in_another_process(url: str) -> None:
    """One process forks branch after branch while another deletes run r's main behind
    cpstore's back: the creates acknowledged are all before the deletion (none after the
    first refusal), and the table ends exactly one ref short, which repair_ref mends."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        st.recorder("s").checkpoint(0, {"s": 0})
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(2), ctx.Queue()
    creator = ctx.Process(target=_create, args=(url, start, out))
    deleter = ctx.Process(target=_delete, args=(url, start))
    creator.start()
    deleter.start()
    before, after, refused = out.get(timeout=300)
    deleter.join(120)
    creator.join(120)
    assert creator.exitcode == 0 and deleter.exitcode == 0
    assert refused, "the creator never met the deletion"
    assert after == [], f"created after the refusal: {after}"
    with cpstore.open(url) as st:
        assert sorted(st.branches("s")) == sorted(["main", *before])
        problems = st.verify().problems
        assert [p.where for p in problems] == ["meta/refs_digest"], problems
        st.repair_ref("r", "main", ids[1], operator="o", reason="put back")
        assert st.verify().ok
