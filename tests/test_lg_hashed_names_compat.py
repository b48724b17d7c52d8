"""A store an older release wrote with scheme-1 hashed names (``lg:#<XXH3-128 hex>``,
``ns#<hex>``, ``fork#<hex>``) after the move to scheme 2 (BLAKE2b-256, ``#b2:``), on
both backends: it reads as written; a thread on a scheme-1 run keeps that run for every
new checkpoint, new namespaces and roots included (``_write.root_run`` finds it in the
thread's index entries); it deletes and prunes clean. A new thread whose XXH3-128 meets
an old thread's gets a run of its own: the old run is found by the thread's entries,
never by whether a run of the old name exists. The store is built by writing with
scheme 1 (``lg_collide.scheme1_names``) and the pinned names checked."""

from __future__ import annotations

from lg_collide import A, B, conf, placed, put_at, scheme1, scheme1_names, scheme2, values
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.store import Store

# just over a name's 200 bytes with their prefixes ("lg:", "ns:", "main@"), and an
# entry key's names (thread, namespace, checkpoint id) within its 500
L = "L" * 198  # a thread id hashed in both schemes
N = "n" * 198  # a namespace hashed in both schemes
M = "m" * 198  # a namespace first used after the upgrade
F = "f" * 196  # a checkpoint id whose fork branch name is hashed
OLD = scheme1("lg:#", L)


def _old_store(store: Store) -> CpstoreSaver:
    """Thread L (root namespace 0 -> 1, a fork off 0 with a long id, namespace N, a
    pending write) and thread A, written with scheme 1; a new saver (scheme 2) on it."""
    with scheme1_names():
        saver = CpstoreSaver(store)
        put_at(saver, L, None, "0", "l0")
        put_at(saver, L, "0", "1", "l1")
        put_at(saver, L, "0", F, "lf")
        put_at(saver, L, None, "0", "n0", ns=N)
        saver.put_writes(conf(L, "", "1"), [("x", "wl")], "task")
        put_at(saver, A, None, "0", "a0")
    assert placed(store, L) == {
        ("", "0"): (OLD, "main"),
        ("", "1"): (OLD, "main"),
        ("", F): (OLD, scheme1("fork#", "main@" + F)),
        (N, "0"): (OLD, scheme1("ns#", N)),
    }
    assert len(OLD) == 36 and placed(store, A) == {("", "0"): (scheme1("lg:#", A), "main")}
    return CpstoreSaver(store)


def test_a_scheme_1_store_reads_as_written(store: Store) -> None:
    saver = _old_store(store)
    assert values(saver, L) == ["lf", "l1", "l0"] and values(saver, L, N) == ["n0"]
    assert sorted(values(saver, L, None)) == ["l0", "l1", "lf", "n0"] and values(saver, A) == ["a0"]
    one = saver.get_tuple(conf(L, "", "1"))
    assert one is not None and one.pending_writes == [("task", "x", "wl")]
    assert store.verify().ok


def test_a_scheme_1_thread_keeps_its_run_for_new_checkpoints(store: Store) -> None:
    saver = _old_store(store)
    put_at(saver, L, "1", "2", "l2")  # continues main
    put_at(saver, L, "0", "3", "l3")  # forks off 0
    put_at(saver, L, "0", "4", "n4", ns=N)  # continues the scheme-1 namespace branch
    put_at(saver, L, None, "0", "m0", ns=M)  # a new namespace: a root
    put_at(saver, L, None, "9", "l9")  # a root of the root namespace, main taken
    got = placed(store, L)
    assert got[("", "2")] == (OLD, "main") and got[("", "3")] == (OLD, "main@3")
    assert got[(N, "4")] == (OLD, scheme1("ns#", N))
    assert got[(M, "0")] == (OLD, scheme2("ns#", M))  # the thread's run, a scheme-2 label
    assert got[("", "9")] == (OLD, "main@9")
    assert store.branches(run_for(L)) == {}  # nothing went to the scheme-2 run
    assert values(saver, L) == ["lf", "l9", "l3", "l2", "l1", "l0"]
    assert values(saver, L, N) == ["n4", "n0"] and values(saver, L, M) == ["m0"]
    assert store.verify().ok


def test_a_new_thread_whose_xxh3_meets_an_old_threads_gets_its_own_run(store: Store) -> None:
    """A is on scheme-1 run R; B (same XXH3-128) arrives after the upgrade: own run."""
    saver = _old_store(store)
    old_a = scheme1("lg:#", A)
    assert scheme1("lg:#", B) == old_a and run_for(B) != old_a
    put_at(saver, B, None, "0", "b0")
    put_at(saver, B, "0", "1", "b1")
    put_at(saver, A, "0", "1", "a1")
    assert set(placed(store, B).values()) == {(run_for(B), "main")}
    assert set(placed(store, A).values()) == {(old_a, "main")}
    assert set(store.branches(old_a)) == {"main"}
    saver.prune([A])  # not shared: keep_latest runs
    assert values(saver, A) == ["a1"] and values(saver, B) == ["b1", "b0"]
    saver.delete_thread(A)  # not shared: the old run is swept
    assert store.branches(old_a) == {} and values(saver, B) == ["b1", "b0"]
    assert store.verify().ok


def test_a_scheme_1_thread_prunes_and_deletes_clean(store: Store) -> None:
    saver = _old_store(store)
    saver.prune([L])
    assert values(saver, L) == ["lf"] and values(saver, L, N) == ["n0"]
    assert {run for run, _ in placed(store, L).values()} == {OLD}
    assert store.verify().ok
    saver.delete_thread(L)
    assert values(saver, L, None) == [] and store.branches(OLD) == {}
    assert values(saver, A) == ["a0"]
    assert store.verify().ok


def test_copy_thread_moves_a_scheme_1_thread_onto_a_scheme_2_run(store: Store) -> None:
    """The way off a scheme-1 run (one shared with a colliding thread, say): copy, delete."""
    saver = _old_store(store)
    target = "K" * 198
    saver.copy_thread(L, target)
    assert {run for run, _ in placed(store, target).values()} == {run_for(target)}
    saver.delete_thread(L)
    assert store.branches(OLD) == {}
    assert sorted(values(saver, target, None)) == ["l0", "l1", "lf", "n0"]
    one = saver.get_tuple(conf(target, "", "1"))
    assert one is not None and one.pending_writes == [("task", "x", "wl")]
    assert store.verify().ok
