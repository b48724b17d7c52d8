"""A put-back while two refs have vanished must be one of them, when the digest names both.

With the refs table two refs short of ``meta/refs_digest``, the XOR difference is the two
vanished refs' hashes together. review73 left the first put-back unchecked there: a
wrong one (``s/typo``) went in, the repair re-derived the XOR, and the second put-back,
whatever it was, then filled the count: refs70's refusal lifted with both true heads
lost (a new recorder on either run started a new root). Now, when two stored
checkpoints and branch names give the difference (``pair_search``), a put-back that is
neither is ``PutBackMismatchError`` naming both, nothing written; the right one is
accepted, and the second is then checked as a one-short put-back (review73's carry).
When no two nameable refs give it (one was a fork never recorded on) the put-back is
not refused: it may be the right one. Both engines."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_refs70_create_short import _snapshot

import cpstore
from cpstore.errors import IntegrityError, NotFoundError, PutBackMismatchError
from cpstore.store.facade import Store


def _two_vanished(url: str) -> tuple[list[str], list[str]]:
    """Runs r (3 checkpoints) and s (2) and t (1); then r's and s's main rows deleted."""
    with cpstore.open(url) as st:
        r, s = st.recorder("r"), st.recorder("s")
        rs = [r.checkpoint(i, {"r": i}) for i in range(3)]
        ss = [s.checkpoint(i, {"s": i}) for i in range(2)]
        st.recorder("t").checkpoint(0, {"t": 0})
    _raw_ref(url, b"r\0main", None)
    _raw_ref(url, b"s\0main", None)
    return rs, ss


def _audits(st: Store) -> int:
    return len(list(st.audit_records()))


def _named(exc: PutBackMismatchError) -> set[tuple[Any, Any, Any]]:
    e = exc.expected
    assert isinstance(e, dict)
    other = e["or"]
    return {(e["run"], e["branch"], e["head"]), (other["run"], other["branch"], other["head"])}


@pytest.mark.parametrize(
    "wrong",
    [
        ("t", "typo", "t_head"),  # a name that never existed
        ("r", "main", "r_older"),  # the right name at an older head
        ("s", "main", "s_root"),
        ("r", "fork", "r_head"),  # the right head under another branch name
    ],
)
def test_a_put_back_that_is_neither_vanished_ref_is_refused_naming_both(
    url: str, wrong: tuple[str, str, str]
) -> None:
    rs, ss = _two_vanished(url)
    with cpstore.open(url) as st:
        heads = {
            "t_head": st.ref("t"),
            "r_older": rs[1],
            "s_root": ss[0],
            "r_head": rs[2],
        }
        run, branch, which = wrong
        before, audits = _snapshot(st), _audits(st)
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref(run, branch, heads[which], operator="o", reason="put back")
        assert _named(info.value) == {("r", "main", rs[2]), ("s", "main", ss[1])}
        assert "two refs short" in str(info.value) and "force=True" in str(info.value)
        assert _snapshot(st) == before and _audits(st) == audits
        with pytest.raises(IntegrityError, match="fewer refs"):
            st.recorder("r").checkpoint(9, {"new": "root"})


def test_the_right_put_backs_go_in_one_by_one_and_the_second_is_checked(url: str) -> None:
    rs, ss = _two_vanished(url)
    with cpstore.open(url) as st:
        st.repair_ref("s", "main", ss[1], operator="o", reason="s first")
        # one short now: the second put-back is checked against r/main (review73's carry)
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref("r", "main", rs[1], operator="o", reason="older")
        assert info.value.expected == {"run": "r", "branch": "main", "head": rs[2]}
        st.repair_ref("r", "main", rs[2], operator="o", reason="r second")
        assert st.verify().ok
        assert st.manifest(st.recorder("r").checkpoint(3, {"r": 3})).parent == rs[2]
        assert st.manifest(st.recorder("s").checkpoint(2, {"s": 2})).parent == ss[1]


def test_force_accepts_it_and_records_both_it_overrode(url: str) -> None:
    rs, ss = _two_vanished(url)
    with cpstore.open(url) as st:
        t0 = st.ref("t")
        rec = st.repair_ref("t", "typo", t0, operator="o", reason="forced", force=True)
        over = rec.body["overrode"]
        named = {(over["run"], over["branch"], over["head"])}
        named.add((over["or"]["run"], over["or"]["branch"], over["or"]["head"]))
        assert named == {("r", "main", rs[2]), ("s", "main", ss[1])}
        assert rec.body["forced"] is True and st.ref("t", "typo") == t0


def test_with_an_unnameable_other_ref_the_put_back_is_not_refused(url: str) -> None:
    """A fork never recorded on is in no checkpoint's branch, so no two names give the
    difference; the put-back may be the right one (here it is): accepted, as before."""
    with cpstore.open(url) as st:
        r = st.recorder("r")
        rs = [r.checkpoint(i, {"r": i}) for i in range(2)]
        st.fork("r", "bare", rs[0])
    _raw_ref(url, b"r\0main", None)
    _raw_ref(url, b"r\0bare", None)
    with cpstore.open(url) as st:
        assert st.vanished_refs() == []
        rec = st.repair_ref("r", "main", rs[1], operator="o", reason="right one")
        assert rec.body["overrode"] is None
        assert st.manifest(st.recorder("r").checkpoint(2, {"r": 2})).parent == rs[1]


def _wrong_put_backs(url: str, head: str, sync: tuple[Any, Any, Any], out: Any) -> None:
    """Put back ``t/typo<i>`` at ``head`` until both refs are back (NotFoundError: the
    table passes its digest); every one is refused, never accepted. ``sync``: the start
    barrier, the test's done event, and the shared count of refusals."""
    start, done, seen = sync
    refused = absent = 0
    errors: list[str] = []
    with cpstore.open(url) as st:
        start.wait()
        i = 0
        while not (done.is_set() and absent) and i < 5000:
            try:
                st.repair_ref("t", f"typo{i}", head, operator="w", reason="race")
                errors.append(f"accepted typo{i}")
                break
            except PutBackMismatchError:
                refused += 1
                seen.value = refused
            except NotFoundError:
                absent += 1
            i += 1
    out.put((refused, absent, errors))


def test_wrong_put_backs_in_another_process_while_both_are_put_back(url: str) -> None:
    """Another process puts back wrong refs the whole time the test puts back the two
    right ones, one at a time: none of its put-backs is accepted, before, between or
    after (the second right one is checked as one short); the runs go on from their
    heads and the store verifies."""
    rs, ss = _two_vanished(url)
    with cpstore.open(url) as st:
        t0 = st.ref("t")
    assert t0 is not None
    ctx = multiprocessing.get_context("spawn")
    start, done, out, seen = ctx.Barrier(2), ctx.Event(), ctx.Queue(), ctx.Value("i", 0)
    proc = ctx.Process(target=_wrong_put_backs, args=(url, t0, (start, done, seen), out))

    def refused_more(than: int) -> int:
        """Wait (a bound, not an assertion) until the other process is refused again."""
        deadline = time.monotonic() + 60
        while seen.value <= than and time.monotonic() < deadline:
            time.sleep(0.01)
        return int(seen.value)

    proc.start()
    try:
        with cpstore.open(url) as st:
            start.wait()
            two_short = refused_more(0)  # its wrong put-backs against two refs short
            st.repair_ref("r", "main", rs[2], operator="o", reason="r first")
            refused_more(two_short)  # and against one short
            st.repair_ref("s", "main", ss[1], operator="o", reason="s second")
            done.set()
    finally:
        done.set()
        refused, absent, errors = out.get(timeout=300)
        proc.join(120)
    assert proc.exitcode == 0 and errors == []
    assert refused >= 2 and absent >= 1
    with cpstore.open(url) as st:
        assert not [b for b in st.branches("t") if b != "main"]
        assert st.manifest(st.recorder("r").checkpoint(3, {"r": 3})).parent == rs[2]
        assert st.manifest(st.recorder("s").checkpoint(2, {"s": 2})).parent == ss[1]
        assert st.verify().ok
