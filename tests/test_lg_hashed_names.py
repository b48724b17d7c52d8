"""What colliding hashed names do to the LangGraph saver, on both backends.

Thread ids, namespaces and fork branch names too long for a run or branch name are
hashed (``_codec.run_for``, ``branch_label``, ``fork_branch``). With XXH3-128 (not
collision-resistant) the pairs of ``tests/lg_collide.py`` meet; these tests pin what
the saver does with them TODAY (session b2run, step 1) — see the comments marked
WRONG for the results a user would not expect.
"""

from __future__ import annotations

import pytest
from lg_collide import FORK_A, FORK_B, A, B, conf, placed, put_at, values
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver
from cpstore.native.binding import digest
from cpstore.store import Store


def _two_threads(store: Store) -> CpstoreSaver:
    """A and B, the same checkpoint ids ("01" root, "02"), one pending write each."""
    saver = CpstoreSaver(store)
    put_at(saver, A, None, "01", "a1")
    put_at(saver, B, None, "01", "b1")
    put_at(saver, A, "01", "02", "a2")
    put_at(saver, B, "01", "02", "b2")
    saver.put_writes(conf(A, "", "02"), [("x", "wa")], "task")
    saver.put_writes(conf(B, "", "02"), [("x", "wb")], "task")
    return saver


def _own_view(saver: CpstoreSaver) -> None:
    """Each thread reads only its own checkpoints and writes (get_tuple, list, writes)."""
    for thread, mine in ((A, "a"), (B, "b")):
        assert values(saver, thread) == [f"{mine}2", f"{mine}1"]
        assert values(saver, thread, None) == [f"{mine}2", f"{mine}1"]
        latest = saver.get_tuple(conf(thread))
        assert latest is not None
        assert latest.checkpoint["channel_values"] == {"x": f"{mine}2"}
        assert latest.pending_writes == [("task", "x", f"w{mine}")]
        first = saver.get_tuple(conf(thread, "", "01"))
        assert first is not None and first.checkpoint["channel_values"] == {"x": f"{mine}1"}


def test_colliding_threads_share_one_run_and_read_apart(store: Store) -> None:
    saver = _two_threads(store)
    _own_view(saver)
    a, b = placed(store, A), placed(store, B)
    (run,) = {r for r, _ in a.values()} | {r for r, _ in b.values()}
    # WRONG (run level): one cpstore run holds both threads: B's root found A's main
    # and forked. Reads stay apart (the index keys hold whole ids), but store-level
    # tools act on both (`cpstore gc --delete-run`, history, push/pull of the run).
    assert {br for _, br in a.values()} == {"main"}
    assert {br for _, br in b.values()} == {"main@01"}
    assert set(store.branches(run)) == {"main", "main@01"}
    assert store.verify().ok


def test_deleting_one_colliding_thread_leaves_its_branch_in_the_shared_run(
    store: Store,
) -> None:
    saver = _two_threads(store)
    (run,) = {r for r, _ in placed(store, A).values()}
    saver.delete_thread(A)
    assert values(saver, A) == [] and saver.get_tuple(conf(A)) is None
    assert values(saver, B) == ["b2", "b1"]
    # WRONG (space): the guard keeps the shared run, so A's deleted checkpoints stay
    # stored on its branch, unreachable, until B is deleted too.
    assert set(store.branches(run)) == {"main", "main@01"}
    put_at(saver, A, None, "03", "a3")  # A again: a root, forked beside its old main
    assert placed(store, A) == {("", "03"): (run, "main@03")}
    saver.delete_thread(B)
    saver.delete_thread(A)
    assert store.branches(run) == {}
    assert store.verify().ok


def test_keep_latest_of_a_colliding_thread_is_refused(store: Store) -> None:
    saver = _two_threads(store)
    # WRONG (an error): keep_latest cannot run on either thread (the guard refuses it
    # before anything is dropped, rather than sweep the other's checkpoints).
    for thread in (A, B):
        with pytest.raises(InvalidInputError, match="shares its cpstore run"):
            saver.prune([thread])
    _own_view(saver)
    assert store.verify().ok


def test_colliding_namespaces_fork_to_their_own_branches(store: Store) -> None:
    """Namespaces A and B of one thread: one hashed label; the second root forks."""
    saver = CpstoreSaver(store)
    for ns, v in ((A, "a"), (B, "b")):
        put_at(saver, "t", None, "01", f"{v}1", ns=ns)
    for ns, v in ((A, "a"), (B, "b")):
        put_at(saver, "t", "01", "02", f"{v}2", ns=ns)
    where = placed(store, "t")
    label = where[(A, "01")][1]
    assert label.startswith("ns#") and where[(A, "02")][1] == label
    # the second namespace's root found the first's branch and forked off it by name
    assert {where[(B, c)][1] for c in ("01", "02")} == {f"{label}@01"}
    assert values(saver, "t", A) == ["a2", "a1"] and values(saver, "t", B) == ["b2", "b1"]
    saver.prune(["t"])
    assert values(saver, "t", A) == ["a2"] and values(saver, "t", B) == ["b2"]
    assert store.verify().ok
    saver.delete_thread("t")
    assert values(saver, "t", None) == [] and store.verify().ok


def test_colliding_fork_names_take_the_next_attempt(store: Store) -> None:
    """Two forks off one parent whose hashed fork names meet: the second takes ``~1``."""
    saver = CpstoreSaver(store)
    put_at(saver, "t", None, "0", "root")
    put_at(saver, "t", "0", "1", "main")
    put_at(saver, "t", "0", FORK_A, "fa")
    put_at(saver, "t", "0", FORK_B, "fb")
    where = placed(store, "t")
    fa, fb = where[("", FORK_A)][1], where[("", FORK_B)][1]
    # B's first name is A's (the XXH3-128 of "main@"+id meet): it was taken, so the
    # existence check moved B on to attempt 1, "main@<id>~1" hashed anew. Harmless.
    assert fa == "fork#" + digest(("main@" + FORK_B).encode()).hex()
    assert fb == "fork#" + digest(("main@" + FORK_B + "~1").encode()).hex()
    for cid, v in ((FORK_A, "fa"), (FORK_B, "fb"), ("1", "main")):
        got = saver.get_tuple(conf("t", "", cid))
        assert got is not None and got.checkpoint["channel_values"] == {"x": v}
    assert store.verify().ok
