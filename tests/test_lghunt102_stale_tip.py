"""lghunt102: a put continuing a checkpoint whose index entry another writer replaced.

Writer A puts X on main and remembers main's head as X's (its cached tip). Writer B (a
saver of its own: another process) puts the same checkpoint id X again under the same
parent with another value at the same channel version (a retried put of other content,
"the same id put twice": a fork, its entry replacing A's). X now reads as B's. A then
continues X (as read: B's) with a channel unchanged at that version. The put must
record from the checkpoint X's entry names (B's), as one saver, a fresh saver and
InMemorySaver do: before lghunt102 A's cached tip continued main from its own X, whose
entry was gone, so the new checkpoint read A's old value (which neither the caller nor
its parent held) and its cpstore lineage ran through a checkpoint no entry names;
``verify()`` was clean. LMDB and PostgreSQL; in-process savers and a real process.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from lghunt102_workers import WAIT, cfg
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._read import entry_at

V_DOC = "00000002.0"  # X's doc version, B's and A's alike


def _cp(cid: str | None, doc: str, version: str) -> Any:
    cp = empty_checkpoint()
    if cid is not None:
        cp["id"] = cid
    cp["channel_values"] = {"doc": doc}
    cp["channel_versions"] = {"doc": version}
    return cp


def _put(saver: Any, parent: str | None, cp: Any, new: dict[str, str], step: int) -> str:
    got = saver.put(cfg("T", "", parent), cp, {"source": "loop", "step": step}, new)
    return str(got["configurable"]["checkpoint_id"])


def _b_reputs(url: str, parent: str, x: str) -> None:
    """Writer B: X again under ``parent``, doc ``b`` at X's version."""
    with CpstoreSaver.from_conn_string(url) as b:
        _put(b, parent, _cp(x, "b", V_DOC), {"doc": V_DOC}, 1)


def _calls(a: Any, b_reputs: Any) -> tuple[str, str]:
    """P, X by A; X again by B; Y continuing X as it reads by A: (X, Y)."""
    p = _put(a, None, _cp(None, "p", "00000001.0"), {"doc": "00000001.0"}, 0)
    x = _put(a, p, _cp(None, "a", V_DOC), {"doc": V_DOC}, 1)
    b_reputs(p, x)
    now = a.get_tuple(cfg("T", "", x))
    assert now is not None and now.checkpoint["channel_values"] == {"doc": "b"}
    # Y: doc unchanged (not in new_versions), passed as X reads now
    y = _put(a, x, _cp(None, "b", V_DOC), {}, 2)
    return x, y


def _check(a: CpstoreSaver, x: str, y: str) -> None:
    memory = InMemorySaver()
    _, my = _calls(
        memory,
        lambda p, x: memory.put(
            cfg("T", "", p), _cp(x, "b", V_DOC), {"source": "loop", "step": 1}, {"doc": V_DOC}
        ),
    )
    want = memory.get_tuple(cfg("T", "", my))
    assert want is not None and want.checkpoint["channel_values"] == {"doc": "b"}
    got = a.get_tuple(cfg("T", "", y))
    assert got is not None
    assert got.checkpoint["channel_values"] == {"doc": "b"}, "Y reads a value no one gave"
    st = a.store
    meta = st.backend.db("meta")
    with st.backend.read_txn() as txn:
        ex, ey = entry_at(txn, meta, "T", "", x), entry_at(txn, meta, "T", "", y)
    assert ex is not None and ey is not None
    with st.read(ey.cid.hex()) as view:
        parent = view.manifest.parent
    assert parent == ex.cid.hex(), "Y extends a checkpoint X's entry does not name"
    report = st.verify()
    assert report.ok, report


def test_a_put_continuing_an_id_another_saver_put_again_reads_its_value(url: str) -> None:
    with cpstore.open(url) as st:
        a, b = CpstoreSaver(st), CpstoreSaver(st)
        x, y = _calls(a, lambda p, x: _put(b, p, _cp(x, "b", V_DOC), {"doc": V_DOC}, 1))
        _check(a, x, y)


def test_a_put_continuing_an_id_another_process_put_again_reads_its_value(url: str) -> None:
    ctx = multiprocessing.get_context("spawn")

    def b_reputs(p: str, x: str) -> None:
        child = ctx.Process(target=_b_reputs, args=(url, p, x))
        child.start()
        child.join(WAIT)
        assert child.exitcode == 0, child.exitcode

    with cpstore.open(url) as st:
        a = CpstoreSaver(st)
        x, y = _calls(a, b_reputs)
        _check(a, x, y)
