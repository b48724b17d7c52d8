"""LangGraph prune(keep_latest) of a hashed thread (a long id) beside another process,
for a thread on a scheme-1 run (``lg:#<XXH3-128>``, an older release's) and on a scheme-2
one (``lg:#b2:``). The re-record of each kept checkpoint records on the run
``_write.root_run`` finds in the thread's index entries, conditional on the entry the
prune read (``meta_expected``): a delete_thread acknowledged meanwhile leaves no entry
and no branch on either run name (with the condition off, the deleted thread lists its
kept checkpoint again); puts acknowledged meanwhile all stay, on the thread's own run
(with the sweep's old keep_last bound, the older of the two was swept). Both checked
against the code with those parts reverted: every case fails."""

from __future__ import annotations

import subprocess
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from lg_collide import A, conf, placed, put_at, scheme1, scheme1_names, values
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.langgraph import CpstoreSaver, _copy_delete, _maintain
from cpstore.langgraph._codec import run_for

L = "L" * 198  # hashed in both schemes
N = "n" * 198


def _thread(url: str, scheme: int) -> str:
    """Thread L (root namespace 0 -> 1 -> 2, namespace N: 0) and thread A, written with
    ``scheme``'s names; the run L's entries name."""
    names: AbstractContextManager[Any] = scheme1_names() if scheme == 1 else nullcontext()
    with cpstore.open(url) as store, names:
        saver = CpstoreSaver(store)
        put_at(saver, L, None, "0", "l0")
        put_at(saver, L, "0", "1", "l1")
        put_at(saver, L, "1", "2", "l2")
        put_at(saver, L, None, "0", "n0", ns=N)
        put_at(saver, A, None, "0", "a0")
        runs = {run for run, _ in placed(store, L).values()}
    run = scheme1("lg:#", L) if scheme == 1 else run_for(L)
    assert runs == {run}
    return run


_DELETE = (
    "import sys\nfrom cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n    s.delete_thread(sys.argv[2])\n"
)

_PUTS = (
    "import sys\nsys.path.insert(0, sys.argv[3])\nfrom lg_collide import put_at\n"
    "from cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    put_at(s, sys.argv[2], '2', '3', 'l3')\n"
    "    put_at(s, sys.argv[2], '3', '4', 'l4')\n"
)


@pytest.mark.parametrize("scheme", [1, 2])
def test_a_hashed_thread_deleted_while_keep_latest_reclaims_stays_deleted(
    url: str, scheme: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _thread(url, scheme)
    with CpstoreSaver.from_conn_string(url) as saver:
        copy_one = _copy_delete._copy_one  # patched where the prune calls it
        raced: list[bool] = []

        def delete_then_record(*args: Any, **kwargs: Any) -> None:
            if not raced:
                raced.append(True)
                subprocess.run([sys.executable, "-c", _DELETE, url, L], check=True, timeout=120)
            copy_one(*args, **kwargs)

        monkeypatch.setattr(_maintain, "_copy_one", delete_then_record)
        saver.prune([L])
        assert raced
        assert placed(saver.store, L) == {}
        assert values(saver, L, None) == []
        assert saver.store.branches(run) == {} and saver.store.branches(run_for(L)) == {}
        assert values(saver, A) == ["a0"]
        assert saver.store.verify().ok


@pytest.mark.parametrize("scheme", [1, 2])
def test_puts_to_a_hashed_thread_while_keep_latest_reclaims_all_stay(
    url: str, scheme: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _thread(url, scheme)
    with CpstoreSaver.from_conn_string(url) as saver:
        reclaim = _maintain._reclaim

        def puts_then_reclaim(*args: Any) -> None:
            subprocess.run(
                [sys.executable, "-c", _PUTS, url, L, str(Path(__file__).parent)],
                check=True,
                timeout=120,
            )
            reclaim(*args)

        monkeypatch.setattr(_maintain, "_reclaim", puts_then_reclaim)
        saver.prune([L])
        assert values(saver, L) == ["l4", "l3", "l2"]  # the kept newest and both late puts
        assert values(saver, L, N) == ["n0"]
        for cid, value in (("3", "l3"), ("4", "l4")):
            tup = saver.get_tuple(conf(L, "", cid))
            assert tup is not None and tup.checkpoint["channel_values"] == {"x": value}
        assert {r for r, _ in placed(saver.store, L).values()} == {run}
        if scheme == 1:
            assert saver.store.branches(run_for(L)) == {}  # nothing on the scheme-2 name
        assert values(saver, A) == ["a0"]
        assert saver.store.verify().ok
