"""review99: a push or pull whose child dies names both stores and what it left.

damage98 runs a push/pull from an LMDB source whole in a child (cli.child.reads_in_child).
That child reads and writes the receiver too, but a death was worded as the source's
alone: a receiver whose record runs past the end of its data file (SIGBUS) was told "the
data file is damaged ... reading the source; at <source>", sending the operator to a
sound store; and a child killed after some branches landed (the OOM killer's SIGKILL)
said only "ended without a result" at the source, "(starting)". Now the message names
the source or the receiver, says the branches landed before stay whole in the receiver
and the others did not land; the exit codes are as before (5 damage, 7 unavailable).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixtures
from test_damage98_push_child import _cli, _value_past_the_file

import cpstore
import cpstore.store.transfer as transfer_module
from cpstore import cli


@pytest.mark.parametrize("verb", ["push", "pull"])
def test_a_damaged_receiver_is_not_told_as_the_sources_damage(tmp_path: Path, verb: str) -> None:
    src, raw, dest = str(tmp_path / "src"), str(tmp_path / "raw"), str(tmp_path / "dest")
    with cpstore.open(src) as store:
        rec = store.recorder("a")
        for step in range(3):
            old = rec.checkpoint(step, {"a": os.urandom(200).hex()})
    assert cli.main(["push", raw, "--store", src]) == 0
    assert cli.main(["copy", dest, "--store", raw]) == 0  # compacted: one leaf per record
    with cpstore.open(src) as store:
        store.recorder("a").checkpoint(3, {"a": 3})  # its parent: the receiver's head
    _value_past_the_file(dest, bytes.fromhex(old))  # the receiver's head record, not the source's
    with cpstore.open(src, readonly=True, create=False) as store:
        assert store.verify().ok  # the source is sound
    argv = ["push", dest, "--store", src] if verb == "push" else ["pull", src, "--store", dest]
    done = _cli(*argv)
    assert done.returncode == 5, (done.returncode, done.stderr)
    assert "liblmdb died with SIGBUS reading the source or the receiver" in done.stderr
    assert f"{dest} (the receiver)" in done.stderr, done.stderr  # before: the source alone
    assert "the branches it landed before stay in the receiver" in done.stderr


def _sources(tmp_path: Path) -> tuple[str, dict[str, str]]:
    src = str(tmp_path / "src")
    heads = {}
    with cpstore.open(src) as store:
        for run in ("a", "b", "c"):
            rec = store.recorder(run)
            for step in range(2):
                heads[run] = rec.checkpoint(step, {run: step})
    return src, heads


@pytest.mark.parametrize("receiver", ["lmdb", "postgresql"])
def test_a_child_killed_after_a_branch_landed_says_what_it_left(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    receiver: str,
) -> None:
    src, heads = _sources(tmp_path)
    if receiver == "lmdb":
        dest = str(tmp_path / "dest")
    else:
        request.getfixturevalue("pg_cluster")
        dest = fresh_url()
    real = transfer_module._land_branch
    calls: list[int] = []

    def land(*args: Any, **kwargs: Any) -> Any:  # runs in the child (forked after this)
        calls.append(1)
        if len(calls) == 2:  # the first branch landed: the OOM killer, say
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    monkeypatch.setattr(transfer_module, "_land_branch", land)
    capsys.readouterr()
    assert cli.main(["push", dest, "--store", src]) == 7  # store unavailable, as before
    err = capsys.readouterr().err
    assert "the push process ended without a result" in err, err
    assert "(the receiver)" in err and "the branches it landed before stay" in err, err
    assert calls == []  # the transfer ran in the child
    with cpstore.open(dest, readonly=True, create=False) as store:
        landed = {run: store.ref(run) for run in store.runs()}
        assert landed == {"a": heads["a"]}  # the first branch whole, the others not at all
        assert store.verify().ok
    monkeypatch.setattr(transfer_module, "_land_branch", real)
    assert cli.main(["push", dest, "--store", src]) == 0  # run again: completed
    with cpstore.open(dest, readonly=True, create=False) as store:
        assert {run: store.ref(run) for run in store.runs()} == heads
