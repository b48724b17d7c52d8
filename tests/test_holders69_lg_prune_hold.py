"""holders69: a LangGraph ``prune`` (keep_latest) releases only its own hold.

``keep_latest`` resets each old branch of the thread's run away (``reset_ref`` to None,
a hold on its head) and then releases that head. When an operator's reset already held
the same head (a branch forked at it and reset away, still kept by that audit record),
the prune's reset overwrote the one retained row and its release freed it: the sweep
took the head the operator's hold kept. It now releases its own hold, by its reset's
record, and the operator's stands. Both engines.
"""

from __future__ import annotations

from lg_puts import thread_with_held_fork
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures
from test_review68_repair_model import _stored

from cpstore.store import Store


def test_keep_latest_leaves_an_operators_hold_on_the_head_it_resets(store: Store) -> None:
    saver, run, branch, head, hold = thread_with_held_fork(store)
    saver.prune(["t"])
    assert _stored(store, head)  # the operator's hold stands, and so its lineage
    assert [h["audit"] for h in store.retained()[head]["holds"]] == [hold.digest]
    assert store.branches(run) and branch not in store.branches(run)
    assert store.verify().ok
