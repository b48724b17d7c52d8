"""review71: a LangGraph keep_latest prune that meets refs70's refusal part-way (a ref of
another thread vanished behind cpstore's back) loses no acknowledged checkpoint or
pending write, on both engines, and a second prune after repair_ref completes it.

chaos70 saw the prune's first txn drop the thread's older index entries, then the
re-record of the kept checkpoint refused (it creates a fresh branch): the latest stayed
readable. This pins what must hold then: the latest checkpoint, its pending writes and
its parent chain as LangGraph lists it; the store verifies with only the digest named;
after the repair a second prune leaves the thread whole and the store verified.
"""

from __future__ import annotations

import pytest
from lg_puts import cfg, put_value
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref

import cpstore
from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for


def _state(saver: CpstoreSaver, thread: str) -> tuple[object, ...]:
    tup = saver.get_tuple(cfg(thread))
    assert tup is not None
    return (
        tup.config["configurable"]["checkpoint_id"],
        tup.checkpoint["channel_values"],
        sorted((w[0], w[1], w[2]) for w in tup.pending_writes or []),
    )


@pytest.mark.parametrize("vanished", ["u", "t"])
def test_a_refused_prune_loses_nothing_and_completes_after_the_repair(
    url: str, vanished: str
) -> None:
    with cpstore.open(url) as st:
        saver = CpstoreSaver(st)
        parent = None
        for value in ("a1", "a2", "a3"):
            parent = put_value(saver, "t", parent, value)
        assert parent is not None
        saver.put_writes(cfg("t", parent), [("x", "w1"), ("y", "w2")], "task-1")
        put_value(saver, "u", None, "u1")
        run_v = run_for(vanished)
        [(branch_v, head_v)] = st.branches(run_v).items()
        want_t, want_u = _state(saver, "t"), _state(saver, "u")
        _raw_ref(url, f"{run_v}\0{branch_v}".encode(), None)
        with pytest.raises(IntegrityError) as info:
            saver.prune(["t"])
        assert info.value.where == "meta/refs_digest"
        assert _state(saver, "t") == want_t
        assert [p.where for p in st.verify().problems] == ["meta/refs_digest"]
        st.repair_ref(run_v, branch_v, head_v, operator="o", reason="put back")
        assert st.verify().ok
        assert _state(saver, "u") == want_u
        saver.prune(["t"])
        assert _state(saver, "t") == want_t
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))] == [
            want_t[0]
        ]
        assert st.verify().ok
        saver.prune(["t"])  # a third prune changes nothing
        assert _state(saver, "t") == want_t
        assert _state(saver, "u") == want_u


def test_a_recorder_refused_its_first_checkpoint_keeps_its_logs(url: str) -> None:
    """A recorder whose first checkpoint (a create) met the refusal keeps what it logged:
    after repair_ref its next checkpoint holds every token, observation and effect."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.recorder("s").checkpoint(0, {"s": 0})
    _raw_ref(url, b"r\0main", None)
    with cpstore.open(url) as st:
        n = st.recorder("n")
        for i in range(3):
            n.token("llm", f"t{i}")
        n.observe(0, "web", b"payload", pinned_at=1.0)
        n.effect("mail", b"send")
        with pytest.raises(IntegrityError):
            n.checkpoint(0, {"n": 1})
        assert st.branches("n") == {}
        st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        n.token("llm", "t3")
        cid = n.checkpoint(0, {"n": 1})
        with st.read(cid) as cp:
            assert [cp.token(i)[3] for i in range(cp.token_count())] == ["t0", "t1", "t2", "t3"]
            assert [(s, t) for s, t, _ in cp.effects()] == [(0, "mail")]
            assert cp.payload(0, "web") == b"payload"
            assert cp.state() == {"n": 1}
        assert st.verify().ok
