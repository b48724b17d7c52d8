"""audit28: the run a hashed LangGraph thread's root put records on (``_write.root_run``),
attacked on both backends.

The rule: a root put of a thread whose name is hashed records on the run its first
index entry names, and only a thread without entries gets its scheme-2 run
(``lg:#b2:<BLAKE2b-256>``). These tests pin what holds when that seek is stale (the
index changed between the put's planning read txn and its write txn), when a thread's
entries sit on both schemes' runs (an older release writing after this one), when the
entry the seek reads is damaged, and when it names a run that cannot be the thread's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from lg_collide import A, B, conf, placed, put_at, scheme1, scheme1_names, values
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver, _write
from cpstore.langgraph._codec import run_for
from cpstore.langgraph._read import Entry
from cpstore.store import Store, retention
from cpstore.store.lg_index import checkpoint_key, pack, scan, thread_runs

L = "L" * 198  # hashed in both schemes
N = "n" * 198  # a namespace hashed in both schemes
OLD = scheme1("lg:#", L)
NEW = run_for(L)


@contextmanager
def older_release() -> Iterator[None]:
    """Within: the saver names as a release before scheme 2 did (scheme-1 names, and a
    root put of a hashed thread goes to ``run_for``, whatever its entries name)."""
    with scheme1_names(), mock.patch.object(_write, "root_run", lambda t, m, tid: run_for(tid)):
        yield


@contextmanager
def after_plan(hook: Callable[[], None]) -> Iterator[None]:
    """Within: ``hook`` runs once, after the first put's planning read txn and before its
    write txn: what another process would do in between."""
    real = _write.Writer._plan
    fired: list[bool] = []

    def plan(self: _write.Writer, *args: Any) -> Any:
        out = real(self, *args)
        if not fired:
            fired.append(True)
            hook()
        return out

    with mock.patch.object(_write.Writer, "_plan", plan):
        yield


def _legacy(store: Store) -> CpstoreSaver:
    """Thread L on its scheme-1 run (root namespace "0" -> "1"), as an older release left it."""
    with older_release():
        old = CpstoreSaver(store)
        put_at(old, L, None, "0", "l0")
        put_at(old, L, "0", "1", "l1")
    assert set(placed(store, L).values()) == {(OLD, "main")}
    return CpstoreSaver(store)


def test_a_root_put_planned_before_a_delete_lands_on_the_old_run_and_stays_reachable(
    store: Store,
) -> None:
    """L is on its scheme-1 run. A root put (new namespace) plans it there; before its
    write another saver deletes L and puts L's new first checkpoint (scheme-2 run). The
    planned put then records on the old run: L spans two runs, every acknowledged
    checkpoint reads, and delete_thread sweeps both runs."""
    saver = _legacy(store)
    other = CpstoreSaver(store)

    def meanwhile() -> None:
        other.delete_thread(L)
        assert store.branches(OLD) == {}
        put_at(other, L, None, "5", "r5")

    with after_plan(meanwhile):
        put_at(saver, L, None, "0", "x0", ns="x")
    assert placed(store, L) == {("", "5"): (NEW, "main"), ("x", "0"): (OLD, "ns:x")}
    assert values(saver, L) == ["r5"] and values(saver, L, "x") == ["x0"]
    assert sorted(values(saver, L, None)) == ["r5", "x0"]
    assert store.verify().ok
    saver.prune([L])  # keep_latest over two runs
    assert sorted(values(saver, L, None)) == ["r5", "x0"] and store.verify().ok
    saver.delete_thread(L)
    assert store.branches(OLD) == {} and store.branches(NEW) == {}
    assert store.verify().ok


def test_a_root_put_planned_before_keep_latest_keeps_the_threads_run(store: Store) -> None:
    """keep_latest between a root put's plan and its write: the kept entry stays in the
    index throughout, so the thread never loses the run its entries name."""
    saver = _legacy(store)
    other = CpstoreSaver(store)
    with after_plan(lambda: other.prune([L])):
        put_at(saver, L, None, "0", "x0", ns="x")
    put_at(saver, L, None, "0", "y0", ns="y")  # a root planned after the prune
    assert {run for run, _ in placed(store, L).values()} == {OLD}
    assert values(saver, L) == ["l1"] and values(saver, L, "x") == ["x0"]
    assert values(saver, L, "y") == ["y0"] and store.branches(NEW) == {}
    assert store.verify().ok


def _mixed(store: Store) -> CpstoreSaver:
    """L's root namespace on its scheme-2 run (this release), then namespace N on its
    scheme-1 run (an older release writing after)."""
    saver = CpstoreSaver(store)
    put_at(saver, L, None, "0", "l0")
    put_at(saver, L, "0", "1", "l1")
    with older_release():
        old = CpstoreSaver(store)
        put_at(old, L, None, "0", "n0", ns=N)
        put_at(old, L, "0", "1", "n1", ns=N)
    got = placed(store, L)
    assert {got[("", c)][0] for c in "01"} == {NEW} and {got[(N, c)][0] for c in "01"} == {OLD}
    return CpstoreSaver(store)


def test_a_thread_on_both_schemes_reads_writes_and_deletes_whole(store: Store) -> None:
    saver = _mixed(store)
    assert values(saver, L) == ["l1", "l0"] and values(saver, L, N) == ["n1", "n0"]
    assert sorted(values(saver, L, None)) == ["l0", "l1", "n0", "n1"]
    one = saver.get_tuple(conf(L, N, "1"))
    assert one is not None and one.checkpoint["channel_values"] == {"x": "n1"}
    put_at(saver, L, "1", "2", "n2", ns=N)  # continues the scheme-1 branch
    put_at(saver, L, None, "0", "m0", ns="m")  # a root: the first entry's run
    got = placed(store, L)
    assert got[(N, "2")][0] == OLD and got[("m", "0")][0] == NEW
    assert store.verify().ok
    saver.delete_thread(L)
    assert values(saver, L, None) == []
    assert store.branches(OLD) == {} and store.branches(NEW) == {}
    assert store.verify().ok


def test_a_thread_on_both_schemes_prunes_and_copies(store: Store) -> None:
    saver = _mixed(store)
    target = "K" * 198
    saver.copy_thread(L, target)
    assert {run for run, _ in placed(store, target).values()} == {run_for(target)}
    assert sorted(values(saver, target, None)) == ["l0", "l1", "n0", "n1"]
    saver.prune([L])
    assert values(saver, L) == ["l1"] and values(saver, L, N) == ["n1"]
    # the kept checkpoints moved to the run the first entry names; both old runs swept
    assert {run for run, _ in placed(store, L).values()} == {NEW}
    assert store.branches(OLD) == {}
    assert sorted(values(saver, target, None)) == ["l0", "l1", "n0", "n1"]
    assert store.verify().ok


def _entries(store: Store, thread: str) -> list[tuple[bytes, bytes]]:
    backend = store.backend
    with backend.read_txn() as txn:
        return list(scan(txn, backend.db("meta"), checkpoint_key(thread, sized=False)))


def test_a_damaged_first_entry_refuses_a_root_put_instead_of_moving_the_thread(
    store: Store,
) -> None:
    """The entry the seek reads fails its check: the root put is an IntegrityError, never
    a silent move of the thread to its scheme-2 run."""
    saver = _legacy(store)
    key, value = _entries(store, L)[0]
    damaged = value[:-1] + bytes([value[-1] ^ 1])
    store.backend.write_txn(lambda txn: txn.put(key, damaged, db=store.backend.db("meta")))
    with pytest.raises(IntegrityError):
        put_at(saver, L, None, "0", "x0", ns="x")
    assert store.branches(NEW) == {} and set(store.branches(OLD)) == {"main"}


def test_an_entry_naming_another_threads_run_does_not_steer_a_root_put(store: Store) -> None:
    """An index entry of L (its check made anew, as anyone who can write the index can)
    names the plain run of thread "victim". A root put of L must not record on it: that
    run is no name L ever had (its scheme-2, scheme-1 or pre-``#``-rule name), and once
    L's entries named it, ``delete_thread(L)`` would sweep the victim's run (a plain run
    is not checked for sharing)."""
    saver = CpstoreSaver(store)
    put_at(saver, "victim", None, "0", "v0")
    put_at(saver, L, None, "0", "l0")
    key, value = _entries(store, L)[0]
    e = Entry.decode(key, value)
    body = Entry.body_of(
        e.cid, run=run_for("victim"), branch="main", parent=None, run_id=None, have=list(e.have)
    )
    store.backend.write_txn(lambda txn: txn.put(key, pack(key, body), db=store.backend.db("meta")))
    report = store.verify()  # verify names the entry too
    assert [p.what for p in report.problems] == [
        "LangGraph index entry names a run that is not its thread's"
    ]
    assert report.problems[0].got == "lg:victim"
    with pytest.raises(IntegrityError) as err:
        put_at(saver, L, None, "0", "x0", ns="x")
    assert "lg:victim" in str(err.value)
    with pytest.raises(IntegrityError):
        saver.delete_thread(L)  # would sweep lg:victim
    with pytest.raises(IntegrityError):
        saver.prune([L])  # would reset lg:victim's branches
    assert set(store.branches(run_for("victim"))) == {"main"}
    assert values(saver, "victim") == ["v0"] and values(saver, L) == ["l0"]


def _put_for(saver: CpstoreSaver, thread: str, parent: str | None, cid: str, run_id: str) -> None:
    """Put checkpoint ``cid`` of ``thread`` with ``metadata["run_id"]`` (delete_for_runs)."""
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["id"] = cid
    cp["channel_values"] = {"x": cid}
    cp["channel_versions"] = {"x": cid}
    meta = {"source": "loop", "step": 0, "parents": {}, "run_id": run_id}
    saver.put(conf(thread, "", parent), cp, meta, {"x": cid})


def test_delete_thread_sweeps_a_legacy_run_delete_for_runs_emptied_of_entries(
    store: Store,
) -> None:
    """delete_for_runs drops every entry of L (its checkpoints stay on its scheme-1 run:
    "the bytes are reclaimed when the thread is deleted"); L's next put is a root, and
    with no entries left it goes to L's scheme-2 run. delete_thread(L) must still sweep
    the scheme-1 run: no entry names it any more, and nothing else ever would."""
    with older_release():
        _put_for(CpstoreSaver(store), L, None, "0", "r1")
    saver = CpstoreSaver(store)
    saver.delete_for_runs(["r1"])
    _put_for(saver, L, None, "1", "r2")
    assert set(placed(store, L).values()) == {(NEW, "main")}
    saver.delete_thread(L)
    assert store.branches(NEW) == {}
    assert store.branches(OLD) == {}
    assert store.verify().ok


@pytest.mark.parametrize("thread", ["plain", "#short", L])
def test_delete_thread_sweeps_a_run_delete_for_runs_emptied_of_entries(
    store: Store, thread: str
) -> None:
    """Every entry of the thread gone by delete_for_runs, then delete_thread: the run
    its checkpoints stay on (its own name: plain, or scheme 2) is swept, as the docs say."""
    saver = CpstoreSaver(store)
    _put_for(saver, thread, None, "0", "r1")
    _put_for(saver, "other", None, "0", "r1")
    saver.delete_for_runs(["r1"])
    saver.delete_thread(thread)
    assert store.branches(run_for(thread)) == {}
    assert set(store.branches(run_for("other"))) == {"main"}  # only the thread's run
    assert store.verify().ok


def test_delete_thread_keeps_a_legacy_run_a_colliding_thread_still_names(store: Store) -> None:
    """The extra sweep of the thread's scheme-1 name stays behind the shared-run guard:
    B's entries name A's scheme-1 run (both put there by an older release), so deleting
    A, whose entries are all gone, leaves B whole."""
    with older_release():
        old = CpstoreSaver(store)
        _put_for(old, A, None, "0", "ra")
        _put_for(old, B, None, "0", "rb")
    shared = scheme1("lg:#", A)
    assert {run for run, _ in placed(store, B).values()} == {shared}
    saver = CpstoreSaver(store)
    saver.delete_for_runs(["ra"])
    saver.delete_thread(A)
    assert values(saver, B) == ["0"] and "main" in store.branches(shared)
    assert store.verify().ok


def test_deleting_a_hash_shaped_thread_id_never_sweeps_the_run_it_spells(store: Store) -> None:
    """Thread ``"#b2:<hex>"`` spells the scheme-2 run of another thread V (``lg:#b2:<hex>``,
    and a release before the ``#`` rule put such a thread on that run). Its delete sweeps
    that run only when its own entries name it: V, whose entries delete_for_runs took
    (its checkpoints still on its run, its next root put going there), keeps its run."""
    saver = CpstoreSaver(store)
    _put_for(saver, L, None, "0", "r1")
    saver.delete_for_runs(["r1"])
    spelled = NEW[len("lg:") :]
    assert spelled.startswith("#b2:")
    saver.delete_thread(spelled)
    assert set(store.branches(NEW)) == {"main"}
    _put_for(saver, L, None, "1", "r2")  # V's next root: a fork beside the old main
    assert values(saver, L) == ["1"] and store.verify().ok


@pytest.mark.parametrize("scheme", [1, 2])
def test_verify_reports_a_cut_short_head_on_a_hashed_run_of_either_scheme(
    store: Store, scheme: int
) -> None:
    """verify() checks a head's framing on ``lg:#b2:`` and ``lg:#`` runs alike: a hashed
    run cannot be turned back into its thread, so every entry is looked through
    (``lg_head._indexed``); the entry's run is one of the thread's names, so only the
    head is reported."""
    run = NEW if scheme == 2 else OLD
    rec = store.recorder(run, branch="main")
    key = checkpoint_key(L, "", "1")
    got: list[bytes] = []

    def extra(cid: bytes) -> list[tuple[bytes, bytes | None]]:
        got.append(bytes(cid))
        body = Entry.body_of(bytes(cid), run=run, branch="main", parent=None, run_id=None, have=[])
        return [(key, pack(key, body))]

    rec.checkpoint(1, {}, metadata={"lg": b"\x02\x00\x00\x00\x01"}, extra_meta=extra)
    rec.close()
    problems = store.verify().problems
    assert [p.what for p in problems] == ["a LangGraph checkpoint head is cut short"]
    assert got[0].hex() in problems[0].where


@given(
    thread=st.one_of(
        st.text(max_size=60),
        st.text(min_size=190, max_size=260),
        st.text(max_size=60).map(lambda t: "#" + t),
        st.text(max_size=60).map(lambda t: t + "\x00"),
    )
)
@settings(max_examples=300, deadline=None)
def test_every_name_a_saver_release_gives_a_thread_is_one_of_its_runs(thread: str) -> None:
    """thread_runs (store room) and run_for (saver) agree, for this release's names and
    for scheme 1's: the verify() check and the saver's refusal never flag what a saver
    wrote."""
    runs = thread_runs(thread)
    assert run_for(thread) in runs
    with scheme1_names():
        assert run_for(thread) in runs
    if not run_for(thread).startswith("lg:#"):
        assert runs == {run_for(thread)}


def test_a_put_acknowledged_between_delete_threads_drop_and_its_sweep_stays_readable(
    store: Store,
) -> None:
    """Not scheme-specific (a plain thread): another saver's put of thread t commits after
    delete_thread(t) dropped t's entries and before it swept lg:t. The put was
    acknowledged and its entry is in the index; the sweep took its checkpoint (it read
    as retention-pruned, get_tuple None, verify() clean). Either outcome of the race is
    fine (the put deleted with its entry, or kept and readable); that one was neither.
    The sweep now drops only the heads delete_thread's txn saw."""
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    put_at(a, "t", None, "0", "v0")
    real = retention.delete_run
    fired: list[bool] = []

    def delete_run_racing(backend: Any, run: str, **kw: Any) -> int:
        if not fired:
            fired.append(True)
            put_at(b, "t", None, "9", "after-drop")
        return real(backend, run, **kw)

    with mock.patch.object(retention, "delete_run", delete_run_racing):
        a.delete_thread("t")
    assert fired
    if placed(store, "t"):
        assert values(b, "t") == ["after-drop"]
    assert values(b, "t") == ["after-drop"] or placed(store, "t") == {}
    assert store.verify().ok
