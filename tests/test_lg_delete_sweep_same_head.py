"""delete_thread's sweep drops only the refs still at the heads its drop txn saw
(audit28); a head can be the same again though: a checkpoint recorded again on the same
run and branch name, from the same parts, is the same cpstore checkpoint.

Thread T is a copy of S. delete_thread(T) (A) drops T's entries and reads ``main`` at
head X; before A's sweep, another delete_thread of T (or a keep_latest's reset) frees
``main``, and copy_thread(S, T) records S's root again on T's ``main``: X, the very
head A read. A's sweep then dropped ``main`` and swept the copy — acknowledged after A
began, and not deleted by it — while its entries stayed (get_tuple None).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from lg_puts import cfg, put_value
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store, retention


def test_a_copy_back_on_the_head_the_drop_txn_saw_is_not_swept(store: Store) -> None:
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    c0 = put_value(a, "S", None, "v0")
    a.copy_thread("S", "T")
    real = retention.delete_run
    done: list[None] = []

    def between(*args: Any, **kw: Any) -> int:
        if not done:  # A's drop txn is done, its sweep next: B deletes T, then copies S
            done.append(None)
            b.delete_thread("T")
            b.copy_thread("S", "T")
        return real(*args, **kw)

    with mock.patch.object(retention, "delete_run", between):
        a.delete_thread("T")
    assert done

    tup = a.get_tuple(cfg("T", c0))
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": "v0"}
    assert [t.config["configurable"]["checkpoint_id"] for t in a.list(cfg("T"))] == [c0]
    assert store.verify().ok
