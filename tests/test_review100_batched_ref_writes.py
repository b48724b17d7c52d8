"""review100: a batched handle's ref writes commit its queue first (LMDB and PostgreSQL).

``set_ref``, ``fork`` and ``reset_ref`` of a batched handle were blind to the checkpoints
it had queued (ids returned): a reset or a forward set_ref moved a branch a queued
checkpoint extends, the write succeeded, and the handle's next flush failed
ConflictError and dropped the whole batch, another run's checkpoint too; a fork or
set_ref of a queued id was NotFoundError "no such checkpoint" for an id the handle had
returned. As a sweep does (retention96), each now commits the queue first: the queued
checkpoints land, and a write whose ``expected_old`` the queue moved loses its own
compare-and-set. Arguments are refused before the queue is touched; a commit that fails
is raised as the flush raised it, with a note that the write did not run.
``repair_ref`` does not commit first: a repair is what lets a queue on a vanished ref
commit (committed first, that queue would fail and drop the batch).
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_audit63_retention_digest import _raw_ref

import cpstore
from cpstore.errors import ConflictError, InvalidInputError, NotDescendantError


def _two(url: str) -> tuple[str, str]:
    """Run ``a`` with two committed checkpoints; (h0, h1)."""
    with cpstore.open(url) as s:
        rec = s.recorder("a")
        return rec.checkpoint(0, {"a": 0}), rec.checkpoint(1, {"a": 1})


def _batched(url: str) -> cpstore.Store:
    return cpstore.open(url, durability="batched", batch_size=1000)


@pytest.mark.parametrize("how", ["reset_ref", "set_ref"])
def test_a_ref_write_does_not_drop_the_queue(url: str, how: str) -> None:
    h0, h1 = _two(url)
    with cpstore.open(url) as s:  # a committed descendant of h1 on another branch
        s.fork("a", "side", h1)
        side = s.recorder("a", branch="side").checkpoint(2, {"side": 2})
    with _batched(url) as d:
        mine = d.recorder("a").checkpoint(2, {"a": 2})  # queued: extends h1
        other = d.recorder("q").checkpoint(0, {"q": 0})  # queued: another run
        with pytest.raises(ConflictError, match="compare-and-set lost") as raised:
            if how == "reset_ref":
                d.reset_ref("a", "main", h0, expected_old=h1, operator="op", reason="r")
            else:
                d.set_ref("a", "main", side, expected_old=h1)
        assert raised.value.got == mine  # the branch is where the queued checkpoint took it
        assert d.pending == 0
        d.flush()  # before: ConflictError here, both queued checkpoints dropped
        assert d.ref("a") == mine and d.ref("q") == other
        assert not d.retained()  # the refused reset held nothing
    with cpstore.open(url) as s:  # durable
        assert s.ref("a") == mine and s.ref("q") == other


@pytest.mark.parametrize("how", ["fork", "set_ref"])
def test_a_queued_id_may_be_forked_or_set(url: str, how: str) -> None:
    _two(url)
    with _batched(url) as d:
        mine = d.recorder("a").checkpoint(2, {"a": 2})  # queued, id returned
        if how == "fork":
            d.fork("a", "b", mine)  # before: NotFoundError "no such checkpoint"
        else:
            d.set_ref("a", "b", mine, expected_old=None)
        assert d.pending == 0
        assert d.ref("a") == mine and d.ref("a", "b") == mine
    with cpstore.open(url) as s:
        assert s.ref("a", "b") == mine


def test_a_refused_ref_write_commits_nothing(url: str) -> None:
    h0, h1 = _two(url)
    with _batched(url) as d:
        d.recorder("a").checkpoint(2, {"a": 2})
        with pytest.raises(NotDescendantError):
            d.set_ref("a", "main", None, expected_old=h1)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            d.fork("a", "b", "not an id")
        with pytest.raises(InvalidInputError):
            d.reset_ref("a", "main", h0, expected_old=h1, operator="", reason="r")
        assert d.pending == 1  # refused before the queue was touched
    with cpstore.open(url) as s:
        assert s.ref("a") != h1  # committed by the close


@pytest.mark.parametrize("how", ["reset_ref", "set_ref", "fork"])
def test_a_failed_commit_says_the_write_did_not_run(url: str, how: str) -> None:
    h0, h1 = _two(url)
    with _batched(url) as d:
        d.recorder("a").checkpoint(2, {"a": 2})  # queued on a, as d read it
        with cpstore.open(url) as o:  # another handle moves a: the queue conflicts
            moved = o.recorder("a").checkpoint(2, {"moved": 2})
        audits = len(list(d.audit_records()))
        with pytest.raises(ConflictError) as raised:
            if how == "reset_ref":
                d.reset_ref("a", "main", h0, expected_old=moved, operator="op", reason="r")
            elif how == "set_ref":
                d.set_ref("a", "b", h1, expected_old=None)
            else:
                d.fork("a", "b", h1)
        exc = raised.value
        assert exc.where == "refs/a/main" and "before the" not in str(exc)
        assert str(exc).startswith("the branch moved since this recorder read it")
        notes = getattr(exc, "__notes__", [])
        assert len(notes) == 1, notes
        assert f"before the {how}, which did not run: no " in notes[0]
        assert d.pending == 0
        assert d.ref("a") == moved and d.ref("a", "b") is None  # the write did not run
        assert len(list(d.audit_records())) == audits


def test_a_repair_does_not_commit_the_queue_first(url: str) -> None:
    """A queue extending a ref that vanished commits once the repair put it back;
    committed before the repair, it would fail and drop the batch."""
    _h0, h1 = _two(url)
    with _batched(url) as d:
        mine = d.recorder("a").checkpoint(2, {"a": 2})
        other = d.recorder("q").checkpoint(0, {"q": 0})
        _raw_ref(url, b"a\0main", None)  # a/main vanishes outside cpstore
        d.repair_ref("a", "main", h1, operator="op", reason="r")
        assert d.pending == 2
        d.flush()
        assert d.ref("a") == mine and d.ref("q") == other


def test_release_moves_no_ref_and_keeps_the_queue(url: str) -> None:
    """A release neither commits the queue nor costs it anything (a sweep commits it)."""
    h0, h1 = _two(url)
    with cpstore.open(url) as s:
        s.reset_ref("a", "main", h0, expected_old=h1, operator="op", reason="r")
    with _batched(url) as d:
        mine = d.recorder("a").checkpoint(1, {"again": 1})
        d.release_retained(h1, operator="op", reason="r")
        assert d.pending == 1
        d.prune(keep_last=1)
        assert d.ref("a") == mine
