"""A checkpoint commit that reports an error: every caller is told what the store holds.

LMDB's ``mdb_txn_commit`` can report an error after the txn is in fact
committed (py-lmdb raising after liblmdb succeeded, an error after the meta
page was written), or fail having committed nothing. The tests inject both at
the narrowest seam, the write txn's commit (real LMDB underneath: the wrapped
txn really commits, or really aborts, and then raises), and check what each
writer is told against what the store then holds: a stored checkpoint is never
reported as a ConflictError (its ref CAS seeing its own result), nothing is
written twice, nothing unstored is reported stored, and what cannot be told
apart is a StoreError saying it may or may not be stored.
"""

from __future__ import annotations

import contextlib
import select
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from cpstore.errors import (
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    StoreError,
    StoreFatalError,
)
from cpstore.store import group_commit
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_errors import translate

#: The error LMDB reports for a failed commit (EIO: not taken for a full disk).
COMMIT_EIO = "mdb_txn_commit: Input/output error"


class _FaultTxn:
    """A write txn whose commit really commits (``lands``) or aborts, then raises."""

    def __init__(
        self,
        txn: Any,
        lands: bool,
        between: Callable[[], None] | None,
        error: Callable[[], lmdb.Error] = lambda: lmdb.Error(COMMIT_EIO),
    ) -> None:
        self._txn, self._lands, self._between, self._error = txn, lands, between, error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def __enter__(self) -> _FaultTxn:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is not None:
            self._txn.abort()
            return
        if self._lands:
            self._txn.commit()
        else:
            self._txn.abort()
        if self._between is not None:
            self._between()
        raise self._error()


def fail_commits(
    st: Store,
    *,
    lands: bool,
    times: int = 1,
    between: Callable[[], None] | None = None,
    error: Callable[[], lmdb.Error] = lambda: lmdb.Error(COMMIT_EIO),
) -> list[int]:
    """Make the next ``times`` write txns of ``st``'s environment fail their commit (after
    committing when ``lands``; ``between`` runs after the commit, before the error, which
    ``error`` makes). Returns a one-item list counting the faults still armed."""
    env = st.backend.env
    real = env._begin_write
    left = [times]

    def begin() -> Any:
        txn = real()
        if left[0] <= 0:
            return txn
        left[0] -= 1
        return _FaultTxn(txn, lands, between, error)

    env._begin_write = begin
    return left


class FailingEnv:
    """The real py-lmdb environment ``real``, with its method ``name`` raising ``error()``
    on every call (every other attribute passes through)."""

    def __init__(self, real: Any, name: str, error: Callable[[], lmdb.Error]) -> None:
        self._real, self._name, self._error = real, name, error

    def __getattr__(self, attr: str) -> Any:
        if attr == self._name:

            def fail(*args: Any, **kwargs: Any) -> Any:
                raise self._error()

            return fail
        return getattr(self._real, attr)


@contextlib.contextmanager
def reads_refused_after(st: Store) -> Iterator[Callable[[], None]]:
    """Yields a ``between`` making every later read txn of ``st``'s environment fail (EIO:
    the store cannot be read back); reads work again when the block ends."""
    env = st.backend.env
    real_read = env.begin_read

    def broken() -> None:
        def refuse() -> Any:
            raise lmdb.Error("mdb_txn_begin: Input/output error")

        env.begin_read = refuse

    try:
        yield broken
    finally:
        env.begin_read = real_read


def _group_of_two(st: Store, runs: tuple[str, str], arm: Callable[[], object]) -> dict[str, str]:
    """A first checkpoint on each of ``runs``, then ``arm()``, then a second checkpoint on
    each from two threads, committed as one group; run -> "ok <id>" or "<Type>: <message>"."""
    recs = {run: st.recorder(run) for run in runs}
    for rec in recs.values():
        rec.checkpoint(0, {"v": 0})
    arm()
    gc = st.backend.group
    gc._last_size, gc._last_seconds = 2, 30.0  # the first waits for the second
    gather, group_commit.MAX_GATHER_SECONDS = group_commit.MAX_GATHER_SECONDS, 30.0
    outcome: dict[str, str] = {}

    def one(run: str) -> None:
        try:
            outcome[run] = "ok " + recs[run].checkpoint(1, {"v": 1, "run": run})
        except Exception as exc:
            outcome[run] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=one, args=(run,), daemon=True) for run in runs]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a writer never returned"
    finally:
        group_commit.MAX_GATHER_SECONDS = gather
    return outcome


def _history_ids(st: Store, run: str) -> list[str]:
    return [m.id for m in st.history(run)]


class TestGroupedCommitErrors:
    def test_a_group_whose_commit_errors_after_landing_tells_every_writer_stored(
        self, tmp_path: Path
    ) -> None:
        """A group txn committed before its commit reports an error: each writer is told stored
        (not ConflictError), each branch holds its checkpoint once, the next checkpoint lands."""
        with open_store(tmp_path / "s") as st:
            gc = st.backend.group
            groups = gc.groups
            armed: list[list[int]] = []
            outcome = _group_of_two(
                st, ("a", "b"), lambda: armed.append(fail_commits(st, lands=True))
            )
            assert armed == [[0]]  # the group's commit did error
            assert gc.groups == groups + 2 + 1  # two lone first checkpoints, then the group
            for run in ("a", "b"):
                assert outcome[run].startswith("ok "), outcome
                ids = _history_ids(st, run)
                assert ids[0] == outcome[run][3:] and len(ids) == 2
                assert st.ref(run) == ids[0]
            rec = st.recorder("a")
            third = rec.checkpoint(2, {"v": 2})
            assert st.ref("a") == third
            report = st.verify()
            assert report.ok, report.problems

    def test_a_group_whose_commit_errors_without_landing_commits_each_write_alone(
        self, tmp_path: Path
    ) -> None:
        """A group txn that committed nothing: each write is committed again alone and stored."""
        with open_store(tmp_path / "s") as st:
            armed: list[list[int]] = []
            outcome = _group_of_two(
                st, ("a", "b"), lambda: armed.append(fail_commits(st, lands=False))
            )
            assert armed == [[0]]  # the group's commit did error
            for run in ("a", "b"):
                assert outcome[run].startswith("ok "), outcome
                assert st.ref(run) == outcome[run][3:]
            assert st.verify().ok

    def test_a_group_whose_outcome_cannot_be_read_back_is_told_it_may_be_stored(
        self, tmp_path: Path
    ) -> None:
        """A commit error after which the store cannot be read: every writer of the group gets
        StoreError "may or may not be stored", none a ConflictError or a false "stored"."""
        with open_store(tmp_path / "s") as st:
            with reads_refused_after(st) as broken:
                outcome = _group_of_two(
                    st, ("a", "b"), lambda: fail_commits(st, lands=True, between=broken)
                )
            for run in ("a", "b"):
                assert not outcome[run].startswith(("ok ", "ConflictError")), outcome
                assert "may or may not be stored" in outcome[run]
            assert st.verify().ok


class TestLoneCommitErrors:
    @pytest.mark.parametrize("durability", ["sync", "none"])
    def test_a_lone_commit_that_landed_despite_its_error_is_reported_stored(
        self, tmp_path: Path, durability: str
    ) -> None:
        """One checkpoint whose commit lands and then errors: stored, and the recorder goes on."""
        with open_store(tmp_path / "s", durability=durability) as st:  # type: ignore[arg-type]
            rec = st.recorder("run")
            rec.checkpoint(0, {"v": 0})
            left = fail_commits(st, lands=True)
            cid = rec.checkpoint(1, {"v": 1})
            assert left == [0]  # its commit did error
            assert st.ref("run") == cid
            assert rec.checkpoint(2, {"v": 2}) == st.ref("run")
            assert len(_history_ids(st, "run")) == 3
            assert st.verify().ok

    @pytest.mark.parametrize("durability", ["sync", "none"])
    def test_a_lone_commit_that_errors_without_landing_is_reported_not_stored(
        self, tmp_path: Path, durability: str
    ) -> None:
        """One checkpoint whose commit writes nothing: StoreError (not stored), and the same
        recorder's next checkpoint lands on the old head."""
        with open_store(tmp_path / "s", durability=durability) as st:  # type: ignore[arg-type]
            rec = st.recorder("run")
            first = rec.checkpoint(0, {"v": 0})
            fail_commits(st, lands=False)
            with pytest.raises(StoreError) as info:
                rec.checkpoint(1, {"v": 1})
            assert not isinstance(info.value, ConflictError)
            assert "not stored" in str(info.value)
            assert st.ref("run") == first
            second = rec.checkpoint(1, {"v": 1})
            assert _history_ids(st, "run") == [second, first]

    def test_a_commit_inside_a_read_block_that_landed_despite_its_error_is_stored(
        self, tmp_path: Path
    ) -> None:
        """The ungrouped path (a thread holding a read) resolves a landed commit as stored."""
        with open_store(tmp_path / "s") as st:
            rec = st.recorder("run")
            first = rec.checkpoint(0, {"v": 0})
            left = fail_commits(st, lands=True)
            writes = st.backend.group.writes
            with st.read(first):
                cid = rec.checkpoint(1, {"v": 1})
            assert left == [0]  # its commit did error
            assert st.backend.group.writes == writes  # not grouped
            assert st.ref("run") == cid


def _reset_back(st: Store, heads: dict[str, str]) -> Callable[[], None]:
    """A ``between``: another writer resets each run's main branch to ``heads[run]``."""

    def reset() -> None:
        for run, head in heads.items():
            st.reset_ref(run, "main", head, expected_old=st.ref(run), operator="ops", reason="undo")

    return reset


class TestBranchResetBack:
    """The txn landed, then its commit errored, and before the store is read back another
    writer reset each branch it moved back to the head the txn expected there (the same
    id again: ABA). The heads look untouched, yet the checkpoints are stored."""

    def test_a_lone_commit_whose_branch_was_reset_back_is_not_reported_not_stored(
        self, tmp_path: Path
    ) -> None:
        """The writer is told it may or may not be stored (OutcomeUnknownError), not "not
        stored" for a checkpoint the store holds; the reset stands."""
        with open_store(tmp_path / "s") as st:
            rec = st.recorder("run")
            first = rec.checkpoint(0, {"v": 0})
            fail_commits(st, lands=True, between=_reset_back(st, {"run": first}))
            with pytest.raises(StoreError) as info:
                rec.checkpoint(1, {"v": 1})
            assert isinstance(info.value, OutcomeUnknownError), info.value
            assert st.ref("run") == first
            assert len(st.retained()) == 1  # the stored checkpoint the reset moved off

    def test_a_group_whose_branches_were_reset_back_is_not_committed_again(
        self, tmp_path: Path
    ) -> None:
        """Each writer of the group is told it may or may not be stored, and nothing is
        committed a second time over the resets (each branch stays where it was reset)."""
        with open_store(tmp_path / "s") as st:
            firsts: dict[str, str] = {}

            def arm() -> None:
                firsts.update({run: str(st.ref(run)) for run in ("a", "b")})
                fail_commits(st, lands=True, between=_reset_back(st, firsts))

            outcome = _group_of_two(st, ("a", "b"), arm)
            for run in ("a", "b"):
                assert outcome[run].startswith("OutcomeUnknownError"), outcome
                assert st.ref(run) == firsts[run], outcome
            assert st.verify().ok

    def test_a_batch_whose_branch_was_reset_back_is_not_reported_not_stored(
        self, tmp_path: Path
    ) -> None:
        """A batched flush (three checkpoints on one branch) whose txn landed: flush raises
        OutcomeUnknownError, not "not stored"."""
        with open_store(tmp_path / "s") as st:
            first = st.recorder("run").checkpoint(0, {"v": 0})
        with open_store(tmp_path / "s", durability="batched", batch_size=100) as st:
            rec = st.recorder("run")
            for i in range(1, 4):
                rec.checkpoint(i, {"v": i})
            fail_commits(st, lands=True, between=_reset_back(st, {"run": first}))
            with pytest.raises(OutcomeUnknownError):
                st.flush()
            assert st.ref("run") == first


class TestFlushErrors:
    def test_a_batch_whose_commit_landed_despite_its_error_is_flushed(self, tmp_path: Path) -> None:
        """A batched flush whose txn committed before the error: flush returns, every queued
        checkpoint is stored once, and the recorder's next batch lands."""
        with open_store(tmp_path / "s", durability="batched", batch_size=100) as st:
            rec = st.recorder("run")
            ids = [rec.checkpoint(i, {"v": i}) for i in range(3)]
            left = fail_commits(st, lands=True)
            st.flush()
            assert left == [0]  # the flush's commit did error
            assert st.backend.pending == 0
            assert _history_ids(st, "run") == ids[::-1]
            more = rec.checkpoint(3, {"v": 3})
            st.flush()
            assert st.ref("run") == more

    def test_an_exit_flush_whose_outcome_is_unknown_does_not_warn_not_written(
        self, tmp_path: Path
    ) -> None:
        """The exit flush of a batch whose commit errored and cannot be read back warns that
        the queued checkpoints may or may not be written, not that they were NOT written."""
        with open_store(tmp_path / "s", durability="batched", batch_size=100) as st:
            rec = st.recorder("run")
            rec.checkpoint(0, {"v": 0})
            with reads_refused_after(st) as broken, pytest.warns(RuntimeWarning) as caught:
                fail_commits(st, lands=True, between=broken)
                st.backend.flush_at_exit(1.0)
            text = str(caught[0].message)
            assert "may or may not" in text and "NOT written" not in text
            assert st.ref("run") is not None  # it was in fact written

    def test_a_batch_whose_commit_wrote_nothing_raises_not_stored(self, tmp_path: Path) -> None:
        """A batched flush whose txn committed nothing: StoreError saying not stored; the batch
        is dropped (docs/durability.md) and nothing of it is stored."""
        with open_store(tmp_path / "s", durability="batched", batch_size=100) as st:
            rec = st.recorder("run")
            ids = [rec.checkpoint(i, {"v": i}) for i in range(3)]
            fail_commits(st, lands=False)
            with pytest.raises(StoreError) as info:
                st.flush()
            assert "not stored" in str(info.value)
            assert st.ref("run") is None and st.backend.pending == 0
            for cid in ids:
                with pytest.raises(NotFoundError), st.read(cid):
                    pass


class TestOtherWriteErrors:
    def test_an_audit_append_whose_commit_errors_after_landing_says_it_may_be_stored(
        self, tmp_path: Path
    ) -> None:
        """A write txn (an audit append) whose commit lands and then errors: the StoreError
        says the record may or may not be stored (a caller that retries on a plain "LMDB
        failed" appends it twice), and the record is indeed stored once."""
        with open_store(tmp_path / "s") as st:
            fail_commits(st, lands=True)
            with pytest.raises(StoreError) as info:
                st.append_audit("note", {"n": 1})
            assert "may or may not be stored" in str(info.value)
            assert [r.body for r in st.audit_records() if r.kind == "note"] == [{"n": 1}]

    def test_an_audit_append_whose_commit_wrote_nothing_is_not_stored(self, tmp_path: Path) -> None:
        """A write txn whose commit wrote nothing: StoreError, and no record is stored."""
        with open_store(tmp_path / "s") as st:
            fail_commits(st, lands=False)
            with pytest.raises(StoreError):
                st.append_audit("note", {"n": 1})
            assert [r for r in st.audit_records() if r.kind == "note"] == []
            st.append_audit("note", {"n": 2})
            assert [r.body for r in st.audit_records() if r.kind == "note"] == [{"n": 2}]

    def test_a_write_whose_commit_found_the_map_full_and_could_not_grow_is_not_stored(
        self, tmp_path: Path
    ) -> None:
        """A commit that failed on a full map wrote nothing (LMDB aborted it); when the map
        then cannot grow (this thread holds a read) the error says so, not "may or may not
        be stored" (which a full map never is), and nothing is stored; the append goes
        through once the read ended."""
        with open_store(tmp_path / "s") as st:
            first = st.recorder("run").checkpoint(0, {"v": 0})
            fail_commits(st, lands=False, error=lambda: lmdb.MapFullError("mdb_txn_commit"))
            with st.read(first), pytest.raises(StoreError) as info:
                st.append_audit("note", {"n": 1})
            assert not isinstance(info.value, OutcomeUnknownError), info.value
            assert "open read view" in str(info.value)
            assert [r for r in st.audit_records() if r.kind == "note"] == []
            st.append_audit("note", {"n": 2})
            assert [r.body for r in st.audit_records() if r.kind == "note"] == [{"n": 2}]

    @pytest.mark.parametrize("errno_text", ["No space left on device", "Read-only file system"])
    def test_a_none_mode_write_whose_sync_after_its_commit_fails_says_it_may_be_stored(
        self, tmp_path: Path, errno_text: str
    ) -> None:
        """durability="none": a write txn (an audit append) is committed, then fsynced; when
        that fsync fails (a full disk, a file system gone read-only) the txn is already
        committed: the error says it may or may not be stored, not a plain "full" or
        "read-only" that reads as "not written" (a caller retrying would append it twice)."""
        with open_store(tmp_path / "s", durability="none") as st:
            env = st.backend.env
            real_sync = env.sync
            calls = [0]

            def failing_sync() -> None:
                calls[0] += 1
                if calls[0] == 1:
                    raise translate(lmdb.Error(f"mdb_env_sync: {errno_text}"), env.path)
                real_sync()

            env.sync = failing_sync
            with pytest.raises(StoreError) as info:
                st.append_audit("note", {"n": 1})
            assert isinstance(info.value, OutcomeUnknownError), repr(info.value)
            assert [r.body for r in st.audit_records() if r.kind == "note"] == [{"n": 1}]

    @pytest.mark.parametrize("errno_text", ["No space left on device", "Read-only file system"])
    @pytest.mark.parametrize(
        "panic_text",
        [
            "mdb_txn_begin: MDB_PANIC: Update of meta page failed",
            "mdb_txn_begin: Update of meta page failed or environment had fatal error",
            "mdb_txn_begin: environment is unusable",
        ],
    )
    def test_a_write_whose_commit_failed_writing_its_meta_page_says_it_may_be_stored(
        self, tmp_path: Path, errno_text: str, panic_text: str
    ) -> None:
        """A commit whose meta-page write fails (a full disk, a file system gone read-only)
        after its pages were written: LMDB marks the environment fatal (lmdb.PanicError from
        then on, told by its class whatever its message says) and the new meta page may be on
        disk; the write txn (an audit append) says it may or may not be stored
        (OutcomeUnknownError), not a plain "full"/"read-only" that reads as "not written"."""
        with open_store(tmp_path / "s") as st:
            env = st.backend.env
            real = env.env

            def panic() -> None:  # LMDB after a failed meta-page write: every begin refused
                env.env = FailingEnv(real, "begin", lambda: lmdb.PanicError(panic_text))

            fail_commits(
                st,
                lands=True,
                between=panic,
                error=lambda: lmdb.Error(f"mdb_txn_commit: {errno_text}"),
            )
            try:
                with pytest.raises(StoreError) as info:
                    st.append_audit("note", {"n": 1})
            finally:
                env.env = real
            assert isinstance(info.value, OutcomeUnknownError), repr(info.value)
            assert [r.body for r in st.audit_records() if r.kind == "note"] == [{"n": 1}]

    @pytest.mark.parametrize("errno_text", ["No space left on device", "Read-only file system"])
    def test_a_write_whose_commit_failed_full_or_read_only_with_lmdb_sound_is_not_stored(
        self, tmp_path: Path, errno_text: str
    ) -> None:
        """A commit that failed full or read-only with LMDB's environment still sound (its
        pages' write failed, the txn aborted) stays that typed error: nothing stored."""
        with open_store(tmp_path / "s") as st:
            fail_commits(st, lands=False, error=lambda: lmdb.Error(f"mdb_txn_commit: {errno_text}"))
            with pytest.raises(StoreError) as info:
                st.append_audit("note", {"n": 1})
            assert type(info.value) is not StoreError, repr(info.value)
            assert not isinstance(info.value, OutcomeUnknownError), repr(info.value)
            assert [r for r in st.audit_records() if r.kind == "note"] == []

    def test_lmdbs_fatal_state_after_a_failed_meta_page_write_is_not_called_corruption(
        self, tmp_path: Path
    ) -> None:
        """MDB_PANIC (this process's environment refuses every txn once a meta-page write
        failed) is a StoreError saying to reopen, not an IntegrityError calling the file
        corrupt (the file on disk holds the last good meta page)."""
        exc = lmdb.PanicError(
            "mdb_txn_begin: MDB_PANIC: Update of meta page failed or environment had fatal error"
        )
        got = translate(exc, str(tmp_path))
        assert isinstance(got, StoreFatalError) and isinstance(got, StoreError)
        assert "open the store again" in got.what


CHILD = r"""
import sys, threading
sys.path.insert(0, sys.argv[3])
from test_group_commit_errors import _group_of_two, fail_commits
from cpstore.store.facade import open as open_store
path, lands = sys.argv[1], sys.argv[2] == "lands"
st = open_store(path)
def between():
    # Another process writes the same store before this one handles its commit error.
    print("failed", flush=True)
    sys.stdin.readline()
outcome = _group_of_two(st, ("a", "b"), lambda: fail_commits(st, lands=lands, between=between))
for run in ("a", "b"):
    print(run, outcome[run], flush=True)
st.close()
"""


@contextlib.contextmanager
def _paused_child(path: Path, lands: bool) -> Iterator[Callable[[], dict[str, str]]]:
    """A process (CHILD) whose group commit on runs a and b errors (after landing when
    ``lands``); the block is entered once that commit has errored, the process waiting
    before it handles the error. Yields ``resume``: let it go on, and return run -> what
    its writer was told. The process is killed if the block ends with it still running."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(path),
            "lands" if lands else "not",
            str(Path(__file__).parent),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    stdin = child.stdin

    def resume() -> dict[str, str]:
        stdin.write("\n")
        stdin.flush()
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        return dict(line.split(" ", 1) for line in out.splitlines())

    try:
        ready, _, _ = select.select([child.stdout], [], [], 60)
        line = child.stdout.readline() if ready else "(nothing within 60 s)"
        if line.strip() != "failed":
            child.kill()
            _, err = child.communicate()
            pytest.fail(f"the child never reached its failed commit: {line!r}\n{err}")
        # The faulted txn has ended (committed or aborted): this process can write.
        yield resume
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


class TestProcesses:
    @pytest.mark.parametrize("lands", [True, False])
    def test_a_grouping_process_whose_commit_errors_while_another_writes_gets_the_truth(
        self, tmp_path: Path, lands: bool
    ) -> None:
        """A process's group commit errors (landed or not) while another process writes the
        same store and moves one of the group's branches: every writer's answer matches what
        is stored, nobody is told ConflictError for its own stored checkpoint."""
        path = tmp_path / "s"
        open_store(path).close()
        with _paused_child(path, lands) as resume:
            with open_store(path) as st:
                mover = st.recorder("a")
                moved = mover.checkpoint(7, {"moved": True})
                st.recorder("c").checkpoint(0, {"c": 0})
            told = resume()
        with open_store(path) as st:
            assert told["b"].startswith("ok "), told
            assert _history_ids(st, "b")[0] == told["b"][3:]
            assert len(_history_ids(st, "b")) == 2
            history_a = _history_ids(st, "a")
            assert history_a[0] == moved
            if lands:
                # The group landed before the move; branch b shows it: both told stored.
                assert told["a"].startswith("ok "), told
                assert history_a[1] == told["a"][3:] and len(history_a) == 3
            else:
                # Nothing landed, and the other process moved a from its first checkpoint:
                # committed alone, a's second checkpoint conflicts for real and is not stored.
                assert told["a"].startswith("ConflictError"), told
                assert len(history_a) == 2
            report = st.verify()
            assert report.ok, report.problems

    def test_a_landed_group_another_process_reset_back_is_not_told_not_stored(
        self, tmp_path: Path
    ) -> None:
        """A process's group txn lands and errors; before it reads the store back another
        process resets both branches to the heads the group expected (ABA): both writers are
        told it may or may not be stored, and the resets stand (nothing committed again)."""
        path = tmp_path / "s"
        open_store(path).close()
        firsts: dict[str, str] = {}
        with _paused_child(path, lands=True) as resume:
            with open_store(path) as st:
                for run in ("a", "b"):
                    history = _history_ids(st, run)
                    assert len(history) == 2  # the group landed
                    firsts[run] = history[1]
                _reset_back(st, firsts)()
            told = resume()
        with open_store(path) as st:
            for run in ("a", "b"):
                assert told[run].startswith("OutcomeUnknownError"), told
                assert st.ref(run) == firsts[run]
            assert st.verify().ok

    def test_a_group_that_did_not_land_is_not_told_stored_for_a_twin_stored_elsewhere(
        self, tmp_path: Path
    ) -> None:
        """A process's group txn aborts and errors; before it reads the store back another
        process stores the very checkpoint one writer made (same id: same run, parent, step
        and state) and moves the other writer's branch on: the other writer, whose checkpoint
        is nowhere in the store, is never told it is stored."""
        path = tmp_path / "s"
        open_store(path).close()
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), "not", str(Path(__file__).parent)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "failed"
        with open_store(path) as st:
            twin = st.recorder("a").checkpoint(1, {"v": 1, "run": "a"})  # a's very checkpoint
            moved = st.recorder("b").checkpoint(7, {"moved": True})
        child.stdin.write("\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        told = dict(line.split(" ", 1) for line in out.splitlines())
        with open_store(path) as st:
            assert _history_ids(st, "a")[0] == twin
            assert _history_ids(st, "b")[0] == moved
            for run in ("a", "b"):
                if told[run].startswith("ok "):
                    assert told[run][3:] in _history_ids(st, run), told  # stored if told so
            assert not told["b"].startswith("ok "), told
            assert st.verify().ok
