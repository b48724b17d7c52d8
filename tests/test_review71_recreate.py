"""review71: refs70's create check refuses no create after cpstore's own deletions.

``delete_run``, ``gc``/``prune``, ``reset_ref`` to None and LangGraph's ``delete_thread``
and ``keep_latest`` delete refs through ``delete_ref`` (the digest's count moves in the
same txn): re-creating the same names afterwards, or new ones, must never meet the
refusal, and the store must verify, on both engines.
"""

from __future__ import annotations

from lg_puts import cfg, put_value
from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore
from cpstore.langgraph import CpstoreSaver


def test_re_creating_after_every_deletion_is_never_refused(url: str) -> None:
    with cpstore.open(url) as st:
        for run in ("a", "b", "c"):
            rec = st.recorder(run)
            for i in range(3):
                rec.checkpoint(i, {"run": run, "i": i})
        head = st.branches("a")["main"]
        st.fork("a", "f", head)
        st.delete_run("b")
        st.reset_ref("a", "f", None, expected_old=head, operator="o", reason="drop")
        st.gc(keep_last=1)
        st.prune(keep_last=1, run_id="c")
        assert st.recorder("b").checkpoint(0, {"again": True})
        st.fork("a", "f", head)
        saver = CpstoreSaver(st)
        parent = None
        for value in ("t1", "t2", "t3"):
            parent = put_value(saver, "t", parent, value)
        put_value(saver, "u", None, "u1")
        saver.prune(["t"])
        saver.delete_thread("u")
        put_value(saver, "u", None, "u-again")
        put_value(saver, "v", None, "v1")
        tup = saver.get_tuple(cfg("u"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": "u-again"}
        st.gc(keep_last=1)
        assert st.recorder("d").checkpoint(0, {"new": True})
        assert st.verify().ok
