"""audit52: the LangGraph saver's maintenance never records a gated checkpoint again.

``copy_thread`` and ``prune(strategy="keep_latest")`` record checkpoints again as new
cpstore checkpoints (another run or fresh branches): no decision names the new ones.
A checkpoint whose standing decision was a REJECT (its thread refused to go on from
it: "needs a ResumePermit") came out of either as a checkpoint with no decision, and
the thread (or the copy) went on from it with no sign-off and no permit. Both now
refuse (GateError) before anything is recorded or dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from script_run import run_to_done
from test_langgraph_store import _put

import cpstore
from cpstore import GateError
from cpstore.langgraph import CpstoreSaver, _maintain


def _rejected_thread(url: str) -> tuple[str, str]:
    """A thread "t" of three checkpoints whose head has a REJECT (state diverged):
    (the LangGraph id of the head, the cpstore id of it)."""
    parent = None
    with CpstoreSaver.from_conn_string(url) as saver:
        for i in range(3):
            parent = _put(saver, "t", {"doc": f"v{i}"}, parent)
        st = saver.store
        (head,) = st.branches("lg:t").values()
        with st.read(head) as cp:
            m = cp.manifest
            replay = cpstore.Run(
                m.run_id,
                m.step,
                "0" * 32,
                tokens=cpstore.PackedTokens(bytes(cp.tokens())),
                mode=cpstore.ReplayMode.STRICT,
                transcript_digest=m.transcript_digest,
            )
        decision = cpstore.validate(head, replay, store=st)
        assert decision.verdict is cpstore.Verdict.REJECT and not decision.releasable
    assert parent is not None
    return parent, head


def _with_saver(url: str, act: Any) -> Any:
    with CpstoreSaver.from_conn_string(url) as saver:
        return act(saver)


def test_the_rejected_head_refuses_a_put_on_it(url: str) -> None:
    parent, _ = _rejected_thread(url)
    with pytest.raises(GateError, match="ResumePermit"):
        _with_saver(url, lambda s: _put(s, "t", {"doc": "next"}, parent))


def test_keep_latest_refuses_to_record_a_rejected_checkpoint_again(url: str) -> None:
    parent, head = _rejected_thread(url)
    with pytest.raises(GateError, match="REJECT"):
        _with_saver(url, lambda s: s.prune(["t"], strategy="keep_latest"))
    with pytest.raises(GateError, match="ResumePermit"):
        _with_saver(url, lambda s: _put(s, "t", {"doc": "next"}, parent))
    with CpstoreSaver.from_conn_string(url) as saver:
        assert list(saver.store.branches("lg:t").values()) == [head]
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 3


def test_copy_thread_refuses_to_copy_a_rejected_checkpoint(url: str) -> None:
    parent, _ = _rejected_thread(url)
    with pytest.raises(GateError, match="REJECT"):
        _with_saver(url, lambda s: s.copy_thread("t", "t2"))
    with CpstoreSaver.from_conn_string(url) as saver:
        assert list(saver.list({"configurable": {"thread_id": "t2"}})) == []
        with pytest.raises(GateError, match="ResumePermit"):
            _put(saver, "t", {"doc": "next"}, parent)


def test_an_accepted_or_undecided_thread_is_still_pruned_and_copied(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    parent = None
    with CpstoreSaver.from_conn_string(url) as saver:
        for i in range(3):
            parent = _put(saver, "t", {"doc": f"v{i}"}, parent)
        saver.copy_thread("t", "t2")
        saver.prune(["t"], strategy="keep_latest")
        _put(saver, "t", {"doc": "next"}, parent)
        _put(saver, "t2", {"doc": "next"}, parent)


_REJECT = """
import sys
import cpstore
with cpstore.open(sys.argv[1]) as st:
    head = sys.argv[2]
    with st.read(head) as cp:
        m = cp.manifest
        replay = cpstore.Run(
            m.run_id, m.step, "0" * 32, tokens=cpstore.PackedTokens(bytes(cp.tokens())),
            mode=cpstore.ReplayMode.STRICT, transcript_digest=m.transcript_digest,
        )
    assert cpstore.validate(head, replay, store=st).verdict is cpstore.Verdict.REJECT
print("done")
"""


def test_a_reject_another_process_records_during_keep_latest_stops_its_re_record(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head is REJECTed by another process after keep_latest's prune txn checked it and
    before it is recorded again: the re-record is refused all the same, the old branch
    stays, and the thread still reads its head and refuses to go on from it."""
    parent = None
    with CpstoreSaver.from_conn_string(url) as saver:
        for i in range(3):
            parent = _put(saver, "t", {"doc": f"v{i}"}, parent)
        (head,) = saver.store.branches("lg:t").values()
    real = _maintain._reclaim

    def meanwhile(*args: Any, **kwargs: Any) -> None:
        run_to_done(_REJECT, url, head)
        real(*args, **kwargs)

    monkeypatch.setattr(_maintain, "_reclaim", meanwhile)
    with pytest.raises(GateError, match="REJECT"):
        _with_saver(url, lambda s: s.prune(["t"], strategy="keep_latest"))
    monkeypatch.undo()
    with CpstoreSaver.from_conn_string(url) as saver:
        assert head in saver.store.branches("lg:t").values()
        tup = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert tup is not None and tup.checkpoint["channel_values"]["doc"] == "v2"
        with pytest.raises(GateError, match="ResumePermit"):
            _put(saver, "t", {"doc": "next"}, parent)
        assert saver.store.verify().ok
