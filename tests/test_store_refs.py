"""Refs: compare-and-set heads, branches, listing runs and history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest.mock import ANY

import pytest

from cpstore.errors import (
    ConflictError,
    InvalidInputError,
    NotDescendantError,
    NotFoundError,
)
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


class TestCompareAndSet:
    def test_each_checkpoint_moves_the_branch_head(self, store: Store) -> None:
        """ref() is the latest checkpoint of the branch."""
        rec = store.recorder("run")
        assert store.ref("run") is None
        c1 = rec.checkpoint(1, b"a")
        assert store.ref("run") == c1
        c2 = rec.checkpoint(2, b"b")
        assert store.ref("run", "main") == c2

    def test_set_ref_with_a_stale_expected_value_conflicts(self, store: Store) -> None:
        """A CAS that lost names the head it found."""
        rec = store.recorder("run")
        c1 = rec.checkpoint(1, b"a")
        c2 = rec.checkpoint(2, b"b")
        with pytest.raises(ConflictError) as info:
            store.set_ref("run", "main", c1, expected_old=c1)
        assert info.value.got == c2
        store.reset_ref("run", "main", c1, expected_old=c2, operator="op", reason="test")
        assert store.ref("run") == c1

    def test_two_recorders_on_one_branch_conflict_and_the_loser_writes_nothing(
        self, store: Store
    ) -> None:
        """The second writer's checkpoint is refused whole: no manifest, no ref move."""
        a = store.recorder("run")
        b = store.recorder("run")
        ca = a.checkpoint(1, b"from a")
        with pytest.raises(ConflictError):
            b.checkpoint(1, b"from b")
        assert store.ref("run") == ca
        assert store.verify().counts["checkpoints"] == 1

    def test_set_ref_to_an_unknown_checkpoint_is_not_found(self, store: Store) -> None:
        """A ref can only point at a stored checkpoint."""
        with pytest.raises(NotFoundError):
            store.set_ref("run", "main", "cd" * 16, expected_old=None)

    def test_a_ref_cannot_point_into_another_run(self, store: Store) -> None:
        """set_ref checks the checkpoint's run id."""
        other = store.recorder("other").checkpoint(1, b"s")
        with pytest.raises(InvalidInputError):
            store.set_ref("run", "main", other, expected_old=None)

    def test_reset_ref_none_deletes_the_branch(self, store: Store) -> None:
        """new=None removes the head (with the same CAS rule), through the audited reset."""
        c1 = store.recorder("run").checkpoint(1, b"s")
        with pytest.raises(NotDescendantError):
            store.set_ref("run", "main", None, expected_old=c1)  # type: ignore[arg-type]
        store.reset_ref("run", "main", None, expected_old=c1, operator="op", reason="gone")
        assert store.ref("run") is None
        hold = {"run": "run", "branch": "main", "audit": ANY}
        assert store.retained() == {c1: {**hold, "holds": [hold]}}


class TestBranches:
    def test_fork_creates_a_branch_at_any_checkpoint(self, store: Store) -> None:
        """fork() points a new branch at an older checkpoint; a second fork conflicts."""
        rec = store.recorder("run")
        c1 = rec.checkpoint(1, b"a")
        rec.checkpoint(2, b"b")
        store.fork("run", "spec", c1)
        assert store.branches("run") == {"main": store.ref("run"), "spec": c1}
        with pytest.raises(ConflictError):
            store.fork("run", "spec", c1)

    def test_a_recorder_on_a_forked_branch_continues_from_the_fork(self, store: Store) -> None:
        """History of the new branch runs through the fork point."""
        rec = store.recorder("run")
        c1 = rec.checkpoint(1, b"a")
        c2 = rec.checkpoint(2, b"b")
        store.fork("run", "spec", c1)
        s2 = store.recorder("run", branch="spec", parent=c1).checkpoint(2, b"other")
        assert [m.id for m in store.history("run", "spec")] == [s2, c1]
        assert [m.id for m in store.history("run", "main")] == [c2, c1]


class TestListing:
    def test_runs_are_listed_once_each_in_order(self, store: Store) -> None:
        """runs() lists distinct run ids, sorted, with a limit."""
        for run in ("b", "a", "c"):
            rec = store.recorder(run)
            rec.checkpoint(1, b"s")
            store.fork(run, "x", rec.head or "")
        assert store.runs() == ["a", "b", "c"]
        assert store.runs(limit=2) == ["a", "b"]

    def test_runs_whose_names_are_prefixes_are_distinct(self, store: Store) -> None:
        """Run "ab" does not hide inside run "a"."""
        for run in ("a", "ab"):
            store.recorder(run).checkpoint(1, b"s")
        assert store.runs() == ["a", "ab"]
        assert list(store.branches("a")) == ["main"]

    def test_history_is_newest_first_with_a_limit(self, store: Store) -> None:
        """history() walks parents from the head."""
        rec = store.recorder("run")
        ids = [rec.checkpoint(step, bytes([step])) for step in range(10)]
        assert [m.id for m in store.history("run")] == ids[::-1]
        assert [m.step for m in store.history("run", limit=3)] == [9, 8, 7]
        assert store.history("nobody") == []
