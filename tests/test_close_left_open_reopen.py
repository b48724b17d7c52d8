"""After a close left the environment open (Env.left_open), every handle closed and the
txn that kept it open ended, the store opens as if closed: with another durability or
read-only, compacted, and in a fork() child (also one forked inside the close that the
next open makes of it). They were refused "already open in this process" (or ForkError
in a child) for the rest of the process (audit49, audit50)."""

from __future__ import annotations

from pathlib import Path

import pytest
from left_open import SCRIPT_HEAD, check_child_wrote, left_open
from script_run import run_script

import cpstore
from cpstore.store import compact_store, lmdb_txns


@pytest.mark.parametrize(
    "options", [{"durability": "none"}, {"readonly": True, "create": False}], ids=["none", "ro"]
)
def test_a_store_left_open_opens_with_another_mode_once_its_txn_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, object]
) -> None:
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.5)
    path = str(tmp_path / "s")
    cid = left_open(path)
    with cpstore.open(path, **options) as again:  # type: ignore[arg-type]  # before: refused
        assert again.ref("r") == cid


def test_a_store_left_open_compacts_once_its_txn_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.5)
    path = str(tmp_path / "s")
    cid = left_open(path)
    compact_store(path)  # before: "close the store in this process before compacting it"
    with cpstore.open(path, readonly=True, create=False) as ro:
        assert ro.ref("r") == cid
        assert ro.verify().ok


_FORK = SCRIPT_HEAD + "fork_child_writes(path)\n"

#: The fork lands inside the close of the store left open that the next is_open_here makes
#: (_close_left_open), its own handle taken: the child counted it as a user's and was
#: refused every open of the store, ForkError "opened before fork()" (audit50).
_FORK_IN_ITS_CLOSE = (
    SCRIPT_HEAD
    + """
real = lmdb_registry.release_env
def release_env(env, failed=None, **kwargs):  # kwargs: _close_left_open's taken (meta80)
    fork_child_writes(path, "none")
    return real(env, failed, **kwargs)
lmdb_registry.release_env = release_env
lmdb_registry.is_open_here(path)  # closes the store left open (release_env)
lmdb_registry.release_env = real
with cpstore.open(path) as again:
    print("parent sees", [m.step for m in again.history("r")], flush=True)
"""
)


def test_a_fork_child_opens_a_store_its_parent_left_open(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    check_child_wrote(run_script(_FORK, path), path)


def test_a_fork_child_beside_a_close_of_a_store_left_open_opens_it(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    lines = check_child_wrote(run_script(_FORK_IN_ITS_CLOSE, path), path)
    assert "parent sees [1, 0]" in lines, lines
