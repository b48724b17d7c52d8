"""Colliding hashed names land apart: thread ids, namespaces and fork branch names too
long for a run or branch name are hashed with BLAKE2b-256 (scheme 2, ``lg:#b2:<hex>``,
``ns#b2:``, ``fork#b2:``), on both backends.

The pairs of ``tests/lg_collide.py`` have one XXH3-128. Under scheme 1 (XXH3-128, the
naming before) thread ids A and B shared one run: B's root forked beside A's main;
reads stayed apart, but ``delete_thread`` of one left its branch in the run (space) and
``prune`` (keep_latest) was refused on both; colliding namespaces and fork names only
moved the second to a fork or the next attempt. Each test below failed before
(session b2run); what they pinned then is in the commit before the naming change.
"""

from __future__ import annotations

from lg_collide import FORK_A, FORK_B, A, B, conf, placed, put_at, scheme2, values
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
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


def _own_view(saver: CpstoreSaver, a: list[str], b: list[str]) -> None:
    """Each thread reads only its own checkpoints and writes (get_tuple, list, writes)."""
    for thread, mine, want in ((A, "a", a), (B, "b", b)):
        assert values(saver, thread) == want
        assert values(saver, thread, None) == want
        latest = saver.get_tuple(conf(thread))
        assert latest is not None
        assert latest.checkpoint["channel_values"] == {"x": f"{mine}2"}
        assert latest.pending_writes == [("task", "x", f"w{mine}")]


def test_colliding_threads_land_on_two_runs_and_read_apart(store: Store) -> None:
    saver = _two_threads(store)
    _own_view(saver, ["a2", "a1"], ["b2", "b1"])
    for thread in (A, B):
        first = saver.get_tuple(conf(thread, "", "01"))
        assert first is not None and first.pending_writes == []
    ra, rb = run_for(A), run_for(B)
    assert (ra, rb) == (scheme2("lg:#", A), scheme2("lg:#", B)) and ra != rb
    assert set(placed(store, A).values()) == {(ra, "main")}
    assert set(placed(store, B).values()) == {(rb, "main")}
    assert set(store.branches(ra)) == set(store.branches(rb)) == {"main"}
    assert store.verify().ok


def test_deleting_one_colliding_thread_sweeps_its_run_and_keeps_the_other(
    store: Store,
) -> None:
    saver = _two_threads(store)
    saver.delete_thread(A)
    assert values(saver, A) == [] and saver.get_tuple(conf(A)) is None
    assert store.branches(run_for(A)) == {}  # swept: nothing of A stays stored
    assert values(saver, B) == ["b2", "b1"]
    kept = saver.get_tuple(conf(B))
    assert kept is not None and kept.pending_writes == [("task", "x", "wb")]
    put_at(saver, A, None, "03", "a3")  # A again: a root on its own run's main
    assert placed(store, A) == {("", "03"): (run_for(A), "main")}
    assert store.verify().ok


def test_keep_latest_prunes_each_colliding_thread(store: Store) -> None:
    saver = _two_threads(store)
    saver.prune([A])
    _own_view(saver, ["a2"], ["b2", "b1"])
    saver.prune([B])
    _own_view(saver, ["a2"], ["b2"])
    for thread in (A, B):  # each run holds its one kept checkpoint, nothing of the other
        (branch,) = store.branches(run_for(thread))
        assert len(store.history(run_for(thread), branch)) == 1
    # the audit reasons name each thread apart too (an id too long for a reason is
    # named by its length and digest: two XXH3-128 tags of these ids were one)
    reasons = {r.body["run"]: r.body["reason"] for r in store.audit_records(kind="ref_reset")}
    assert reasons.keys() == {run_for(A), run_for(B)}
    assert reasons[run_for(A)] != reasons[run_for(B)]
    assert store.verify().ok


def test_colliding_namespaces_get_their_own_labels(store: Store) -> None:
    """Namespaces A and B of one thread: two hashed labels, two root branches."""
    saver = CpstoreSaver(store)
    for ns, v in ((A, "a"), (B, "b")):
        put_at(saver, "t", None, "01", f"{v}1", ns=ns)
    for ns, v in ((A, "a"), (B, "b")):
        put_at(saver, "t", "01", "02", f"{v}2", ns=ns)
    where = placed(store, "t")
    for ns in (A, B):
        assert {where[(ns, c)] for c in ("01", "02")} == {("lg:t", scheme2("ns#", ns))}
    assert values(saver, "t", A) == ["a2", "a1"] and values(saver, "t", B) == ["b2", "b1"]
    saver.prune(["t"])
    assert values(saver, "t", A) == ["a2"] and values(saver, "t", B) == ["b2"]
    assert store.verify().ok
    saver.delete_thread("t")
    assert values(saver, "t", None) == [] and store.branches("lg:t") == {}
    assert store.verify().ok


def test_colliding_fork_names_are_two_first_attempts(store: Store) -> None:
    """Two forks off one parent whose fork names' XXH3-128 meet: two first-attempt names."""
    saver = CpstoreSaver(store)
    put_at(saver, "t", None, "0", "root")
    put_at(saver, "t", "0", "1", "main")
    put_at(saver, "t", "0", FORK_A, "fa")
    put_at(saver, "t", "0", FORK_B, "fb")
    where = placed(store, "t")
    assert where[("", FORK_A)] == ("lg:t", scheme2("fork#", "main@" + FORK_A))
    assert where[("", FORK_B)] == ("lg:t", scheme2("fork#", "main@" + FORK_B))
    for cid, v in ((FORK_A, "fa"), (FORK_B, "fb"), ("1", "main")):
        got = saver.get_tuple(conf("t", "", cid))
        assert got is not None and got.checkpoint["channel_values"] == {"x": v}
    assert store.verify().ok
