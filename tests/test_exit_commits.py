"""What commits when a writer process ends: exactly which checkpoints a store holds afterwards.

One writer subprocess per way of ending (docs/durability.md, "What commits at exit"):
it commits checkpoint 0 durably, queues 1 and 2 (batched mode), then ends. Whenever
Python runs its exit hooks (a normal exit, ``sys.exit()``, an uncaught exception) the
queue commits -- the checkpoints just before a failure are the ones recovery needs;
``os._exit()``, SIGTERM and a forked child's exit commit nothing.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.store.content import records_of
from cpstore.store.facade import open as open_store

WRITER = r"""
import os, signal, sys, time
from cpstore.store.facade import open as open_store
path, how = sys.argv[1], sys.argv[2]
store = open_store(path, durability="batched", batch_size=64)
rec = store.recorder("r")
print(rec.checkpoint(0, {"n": 0}), flush=True)
store.flush()  # checkpoint 0 is durable
print(rec.checkpoint(1, {"n": 1}), flush=True)  # 1 and 2 queued
print(rec.checkpoint(2, {"n": 2}), flush=True)
if how == "normal":
    pass
elif how == "sys_exit":
    sys.exit(3)
elif how == "raise":
    raise RuntimeError("the agent failed")
elif how == "raise_mid_checkpoint":
    rec.checkpoint(3, {"n": object()})  # refused while the checkpoint is built
elif how == "interrupt_after_queueing":
    commit = store.backend.commit
    def interrupted(op):
        commit(op)  # checkpoint 3 is queued, then Ctrl-C arrives before it returns
        raise KeyboardInterrupt
    store.backend.commit = interrupted
    rec.checkpoint(3, {"n": 3})
elif how == "raise_in_with":
    with store:
        rec.checkpoint(3, {"n": 3})
        raise RuntimeError("the agent failed")
elif how == "console_error_then_normal":
    import code
    code.InteractiveInterpreter().runsource("1/0")  # a debugging console shows a handled error
elif how == "console_then_raise":
    import code, io
    sys.stdin = io.StringIO("")
    code.interact(banner="", exitmsg="")  # an embedded console (3.11 leaves sys.ps1 set)
    raise RuntimeError("the agent failed")
elif how == "generator_closed_in_with":
    def steps():
        with store:
            yield rec.checkpoint(3, {"n": 3})
            yield rec.checkpoint(4, {"n": 4})
    gen = steps()
    next(gen)
    gen.close()  # the consumer stops early: GeneratorExit leaves the with-block
elif how.startswith("warnings_are_errors"):
    import warnings
    warnings.simplefilter("error")  # -W error: every exit warning raises
    other = open_store(path + "-other", durability="batched", batch_size=64)
    print(other.recorder("o").checkpoint(0, {"n": 0}), file=sys.stderr, flush=True)
    rec.effect("mail", b"sent")  # unsealed: the recorder's exit warning raises first
    if how == "warnings_are_errors_raise":
        raise RuntimeError("the agent failed")
elif how == "os_exit":
    os._exit(0)
elif how == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
elif how == "unsealed_effect":
    rec.effect("mail", b"sent")  # after the last checkpoint: in no checkpoint
elif how.startswith("fork_child"):
    pid = os.fork()
    if pid == 0:
        try:
            rec.checkpoint(3, {"n": 3})  # the child's copy must not queue or commit
        except Exception as exc:
            print("child:", type(exc).__name__, flush=True)
        if how == "fork_child_raises":
            raise RuntimeError("the child failed")
        sys.exit(0)  # a normal interpreter exit of the child: its exit hooks run
    _, status = os.waitpid(pid, 0)
    print("child exit", os.waitstatus_to_exitcode(status), flush=True)
    if how == "fork_child_then_parent_dies":
        os._exit(0)
"""


def _end_writer(path: Path | str, how: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(path), how],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    ids = [line for line in done.stdout.split("\n") if len(line) == 32]
    assert len(ids) == 3, (done.stdout, done.stderr)
    return done, ids


def _stored(path: Path | str) -> set[str]:
    """Every checkpoint id the store holds (not only the heads)."""
    with open_store(path, readonly=True) as st:
        assert st.verify().ok
        with st.backend.read_txn() as txn:
            return {key.hex() for key in records_of(st.backend.dbs).keys(txn)}


@pytest.mark.parametrize(("how", "code"), [("normal", 0), ("sys_exit", 3)])
def test_a_normal_exit_commits_the_queue(tmp_path: Path, how: str, code: int) -> None:
    """The main module ending or sys.exit() (any code) commits every queued checkpoint."""
    done, ids = _end_writer(tmp_path / "s", how)
    assert done.returncode == code, done.stderr
    assert _stored(tmp_path / "s") == set(ids)
    assert "NOT written" not in done.stderr


@pytest.mark.parametrize("how", ["raise", "raise_mid_checkpoint", "console_then_raise"])
def test_an_uncaught_exception_still_commits_the_queue(tmp_path: Path, how: str) -> None:
    """A process dying of an uncaught exception keeps the checkpoints it queued before it."""
    done, ids = _end_writer(tmp_path / "s", how)
    assert done.returncode == 1, done.stderr
    assert "RuntimeError" in done.stderr or "CanonicalEncodingError" in done.stderr
    assert _stored(tmp_path / "s") == set(ids)
    assert "NOT written" not in done.stderr, done.stderr


def test_a_checkpoint_queued_before_an_interrupt_commits_whole(tmp_path: Path) -> None:
    """KeyboardInterrupt after the queue append: that complete checkpoint commits with the rest."""
    done, ids = _end_writer(tmp_path / "s", "interrupt_after_queueing")
    assert done.returncode != 0
    stored = _stored(tmp_path / "s")
    assert set(ids) < stored and len(stored) == 4, done.stderr
    with open_store(tmp_path / "s", readonly=True) as st, st.latest("r") as cp:
        assert cp.state() == {"n": 3} and cp.manifest.parent == ids[2]


def test_an_exception_leaving_the_stores_with_block_flushes_and_closes(tmp_path: Path) -> None:
    """Leaving ``with store:`` on an error commits the queue (close() flushes) and re-raises."""
    done, ids = _end_writer(tmp_path / "s", "raise_in_with")
    assert done.returncode == 1
    assert "RuntimeError: the agent failed" in done.stderr
    stored = _stored(tmp_path / "s")
    assert set(ids) < stored and len(stored) == 4


def test_a_handled_error_shown_by_a_console_does_not_drop_the_queue_at_a_normal_exit(
    tmp_path: Path,
) -> None:
    """sys.last_value left by code.InteractiveInterpreter is no uncaught exception: all commit."""
    done, ids = _end_writer(tmp_path / "s", "console_error_then_normal")
    assert done.returncode == 0, done.stderr
    assert "ZeroDivisionError" in done.stderr  # the console showed it
    assert "NOT written" not in done.stderr, done.stderr
    assert _stored(tmp_path / "s") == set(ids)


@pytest.mark.parametrize("how", ["warnings_are_errors", "warnings_are_errors_raise"])
def test_warnings_turned_into_errors_do_not_change_what_commits_at_exit(
    tmp_path: Path, how: str
) -> None:
    """Under -W error the recorder's exit warning raising cannot skip any store's flush."""
    done, ids = _end_writer(tmp_path / "s", how)
    other = done.stderr.split("\n")[0]
    assert len(other) == 32, done.stderr
    assert done.returncode == (0 if how == "warnings_are_errors" else 1), done.stderr
    assert "dropped 1 side effect(s)" in done.stderr  # printed, not lost
    assert _stored(tmp_path / "s") == set(ids)
    assert _stored(f"{tmp_path / 's'}-other") == {other}


def test_a_generator_closed_inside_the_stores_with_block_commits_the_queue(
    tmp_path: Path,
) -> None:
    """GeneratorExit (a consumer stopping early) is no error: leaving 'with store:' flushes."""
    done, ids = _end_writer(tmp_path / "s", "generator_closed_in_with")
    assert done.returncode == 0, done.stderr
    assert "NOT written" not in done.stderr, done.stderr
    stored = _stored(tmp_path / "s")
    assert set(ids) < stored and len(stored) == 4  # 0, 1, 2 and the yielded 3


@pytest.mark.parametrize("how", ["os_exit", "sigterm"])
def test_an_exit_that_runs_no_hook_commits_nothing(tmp_path: Path, how: str) -> None:
    """os._exit() and SIGTERM end the writer with its queue unwritten: only the flushed id."""
    done, ids = _end_writer(tmp_path / "s", how)
    assert done.returncode == (0 if how == "os_exit" else -15)
    assert _stored(tmp_path / "s") == {ids[0]}


@pytest.mark.parametrize("how", ["fork_child", "fork_child_raises"])
def test_a_forked_child_never_commits_its_parents_queue(tmp_path: Path, how: str) -> None:
    """A fork() child checkpointing and exiting commits nothing; the parent's own exit does."""
    done, ids = _end_writer(tmp_path / "s", how)
    assert done.returncode == 0, done.stderr
    assert "child: ForkError" in done.stdout
    assert _stored(tmp_path / "s") == set(ids)  # the parent's queue, once; nothing of the child


def test_a_forked_child_exit_commits_nothing_when_the_parent_dies(tmp_path: Path) -> None:
    """With the parent gone through os._exit(), the store holds only what it flushed itself."""
    done, ids = _end_writer(tmp_path / "s", "fork_child_then_parent_dies")
    assert done.returncode == 0, done.stderr
    assert "child exit 0" in done.stdout
    assert _stored(tmp_path / "s") == {ids[0]}


def test_unsealed_effects_at_exit_are_named_and_never_committed_silently(tmp_path: Path) -> None:
    """A normal exit commits the queue and names the unsealed effect, which no checkpoint holds."""
    done, ids = _end_writer(tmp_path / "s", "unsealed_effect")
    assert done.returncode == 0, done.stderr
    assert "'r' branch 'main' dropped 1 side effect(s)" in done.stderr
    assert _stored(tmp_path / "s") == set(ids)
    with open_store(tmp_path / "s", readonly=True) as st, st.read(ids[2]) as cp:
        assert cp.effects() == []


@pytest.mark.parametrize(("how", "code"), [("normal", 0), ("raise", 1), ("raise_in_with", 1)])
def test_the_rule_holds_on_postgresql(pg_url: str, how: str, code: int) -> None:  # noqa: F811
    """A batched PostgreSQL store: every exit that runs Python's hooks commits the queue."""
    url = pg_url.replace("schema=", f"schema=exit_{how}_")
    done, ids = _end_writer(url, how)
    assert done.returncode == code, done.stderr
    stored = _stored(url)
    assert set(ids) <= stored and len(stored) == (4 if how == "raise_in_with" else 3)
    assert "NOT written" not in done.stderr


def test_a_with_block_left_on_an_error_flushes_and_closes_under_warnings_as_errors(
    tmp_path: Path,
) -> None:
    """-W error changes nothing for 'with store:': the error propagates, the queue commits."""
    store = open_store(tmp_path / "s", durability="batched", batch_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="the agent failed"), store:
            cid = store.recorder("r").checkpoint(0, {"n": 0})
            raise ValueError("the agent failed")
    assert store.backend.closed
    assert _stored(tmp_path / "s") == {cid}
