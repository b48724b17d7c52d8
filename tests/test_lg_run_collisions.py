"""Two long thread ids whose XXH3-128 collide shared one cpstore run under scheme 1
(``lg:#<XXH3-128 hex>``, the naming before BLAKE2b-256): XXH3 is not collision-resistant
against chosen ids, and this pair (``tests/lg_collide.py``: two valid-UTF-8 400-byte
ids, built in under a second from XXH3's public default secret) hashed to one run.
Puts and reads stay right (the index keys hold the whole id); ``delete_thread`` of one
deleted the run and so every checkpoint of the other, with ``verify()`` clean, and
``prune`` (keep_latest) reset and pruned the other's branches. Now a shared run is kept
by a delete and refuses keep_latest before anything is dropped (found by a read-only
study after session 13's CI). New threads get scheme-2 runs, which no chosen pair
shares (tests/test_lg_hashed_names.py); the guard stays for the scheme-1 runs a store
already holds, which these tests build by writing with scheme 1."""

from __future__ import annotations

import pytest
from lg_collide import A, B, scheme1, scheme1_names
from lg_puts import cfg, put_value
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.native.binding import digest
from cpstore.store import Store

_A, _B = A, B


def _values(saver: CpstoreSaver, thread: str) -> list[str]:
    return [t.checkpoint["channel_values"]["x"] for t in saver.list(cfg(thread))]


def _two_threads(store: Store) -> CpstoreSaver:
    """Both ids, two checkpoints each, interleaved, in their one shared scheme-1 run
    (as a release before scheme 2 wrote them); the saver returned names by scheme 2."""
    with scheme1_names():
        saver = CpstoreSaver(store)
        a1 = put_value(saver, _A, None, "a1")
        b1 = put_value(saver, _B, None, "b1")
        put_value(saver, _A, a1, "a2")
        put_value(saver, _B, b1, "b2")
    assert store.branches(scheme1("lg:#", _A)).keys() == {"main", f"main@{b1}"}
    return saver


def test_the_pair_collides_into_one_scheme_1_run_and_two_scheme_2_runs() -> None:
    """The premise: distinct ids, one XXH3-128, one scheme-1 run; two runs now."""
    assert _A != _B
    assert digest(_A.encode()) == digest(_B.encode())
    assert scheme1("lg:#", _A) == scheme1("lg:#", _B)
    assert run_for(_A) != run_for(_B)


def test_puts_and_reads_of_colliding_threads_stay_apart(store: Store) -> None:
    saver = _two_threads(store)
    assert _values(saver, _A) == ["a2", "a1"]
    assert _values(saver, _B) == ["b2", "b1"]


@pytest.mark.parametrize("which", ["A", "B"])
def test_deleting_one_colliding_thread_keeps_the_other(store: Store, which: str) -> None:
    """delete_thread (and prune's delete strategy) of one thread leaves the other whole."""
    saver = _two_threads(store)
    gone, kept, want = (_A, _B, ["b2", "b1"]) if which == "A" else (_B, _A, ["a2", "a1"])
    saver.delete_thread(gone)
    assert _values(saver, gone) == []
    assert _values(saver, kept) == want
    assert saver.get_tuple(cfg(kept)) is not None
    saver.prune([gone], strategy="delete")
    assert _values(saver, kept) == want
    assert store.verify().ok


def test_keep_latest_of_a_colliding_thread_is_refused_before_anything_is_dropped(
    store: Store,
) -> None:
    saver = _two_threads(store)
    with pytest.raises(InvalidInputError, match="shares its cpstore run"):
        saver.prune([_A])
    assert _values(saver, _A) == ["a2", "a1"]
    assert _values(saver, _B) == ["b2", "b1"]
    assert store.verify().ok
