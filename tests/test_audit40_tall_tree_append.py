"""Continued trees (append_state.py) go through the same height bound as whole ones: a tall
chain built build after build is read back, and a build that is refused or interrupted
leaves the recorder able to go on, its next checkpoint whole.

audit40: LogTree.build records its settled chunks and nodes as it goes, and the next
build stashes only what is new when the last root it built is stored. A build that
raised after settling (pack_root's height refusal, an interrupt) left those chunks and
nodes recorded but never stashed: the next checkpoint was acknowledged and named
objects never written ("object not in the store" on every read).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from tall_tree import force_ends, stored_height

import cpstore
from cpstore.errors import InvalidInputError
from cpstore.native.append_log import AppendLog
from cpstore.native.canonical import encode_value
from cpstore.store import append_state, chunk_tree
from cpstore.store.chunk_tree import MAX_LEVEL, build_tree
from cpstore.store.facade import Store

_RNG = random.Random(40)
#: 600-byte elements: each ends a chunk (RUN_MIN 512), so every build settles them all.
_ELEMENTS = [_RNG.randbytes(600) for _ in range(24)]


def _state(kind: str, n: int, log: AppendLog) -> dict[str, Any]:
    """The part as an AppendLog (grown in place) or as a plain list (a new list)."""
    if kind == "log":
        log.extend(_ELEMENTS[len(log) : n])
        return {"log": log}
    return {"log": _ELEMENTS[:n]}


def _whole(store: Store, cid: str, n: int) -> None:
    """The checkpoint reads back, verifies, and names the tree build_tree makes of it."""
    with store.read(cid) as cp:
        assert cp.state_part("log") == _ELEMENTS[:n]
    assert store.verify_checkpoint(cid) == ()
    root = store.manifest(cid).raw["state"]["chunked"]["log"]
    assert root == build_tree(encode_value(_ELEMENTS[:n]), canonical=True).root


@pytest.mark.parametrize("kind", ["log", "list"])
def test_a_tall_chain_continued_build_after_build_is_read_back(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = AppendLog()
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        cids = []
        for step, n in enumerate((10, 14, 20)):
            with monkeypatch.context() as m:
                force_ends(m, 200, real=True)
                cids.append(rec.checkpoint(step, _state(kind, n, log)))
        heights = [stored_height(store, cid, "log") for cid in cids]
        assert min(heights) > 12, heights
        for cid, n in zip(cids, (10, 14, 20), strict=True):
            with store.read(cid) as cp:
                assert cp.state_part("log") == _ELEMENTS[:n]
            assert store.verify_checkpoint(cid) == ()
        assert store.verify().ok


def _pure_tall_rule(mp: pytest.MonkeyPatch) -> None:
    """A grouping rule that is a function of (key, count) only, as the real one is (so a
    continued tree must equal build_tree's), but ends a node of one *node* entry 7 in 8
    times: chains of single-node levels, 24 levels over these elements."""
    real = chunk_tree._ends_node
    chunks = {f[:16] for f, _, _ in build_tree(encode_value(_ELEMENTS), canonical=True).chunks}

    def ends(key: bytes, count: int) -> bool:
        return real(key, count) or (count == 1 and key not in chunks and key[0] % 8 != 0)

    mp.setattr(chunk_tree, "_ends_node", ends)
    mp.setattr(append_state, "ends_node", ends)


@pytest.mark.parametrize("kind", ["log", "list"])
def test_a_tall_tree_continued_is_the_tree_built_whole(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Continued build after build past 12 levels, each checkpoint's root is build_tree's
    of the whole part, byte for byte, and it reads back and verifies."""
    log = AppendLog()
    _pure_tall_rule(monkeypatch)
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        heights = []
        for step, n in enumerate((8, 12, 16, 17, 20, 24)):
            cid = rec.checkpoint(step, _state(kind, n, log))
            _whole(store, cid, n)
            heights.append(stored_height(store, cid, "log"))
        assert heights[0] < 13 <= heights[-1] <= MAX_LEVEL, heights
        assert store.verify().ok


@pytest.mark.parametrize("kind", ["log", "list"])
def test_after_a_refused_build_the_next_checkpoint_is_stored_whole(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pack_root refuses the grown part's tree (too tall); the same recorder's next
    checkpoint, the part grown again, builds the tree afresh and stores it whole."""
    log = AppendLog()
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        first = rec.checkpoint(0, _state(kind, 10, log))
        with monkeypatch.context() as m:
            force_ends(m, 10_000)
            with pytest.raises(InvalidInputError, match="taller than any read accepts"):
                rec.checkpoint(1, _state(kind, 14, log))
        assert store.ref("r") == first
        cid = rec.checkpoint(1, _state(kind, 16, log))  # refused again ("got 837") before
        _whole(store, cid, 16)
        assert store.verify().ok


@pytest.mark.parametrize("at", ["pack_root", "stash"])
@pytest.mark.parametrize("kind", ["log", "list"])
def test_after_an_interrupted_build_the_next_checkpoint_is_stored_whole(
    kind: str, at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt at the build's last step (where the height refusal raises too), or
    between the build and its stash: the next checkpoint must name only objects it wrote
    or that are stored."""
    log = AppendLog()
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        first = rec.checkpoint(0, _state(kind, 10, log))

        def interrupted(*args: object) -> bytes:
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            if at == "pack_root":
                m.setattr(append_state, "pack_root", interrupted)
            else:
                m.setattr(append_state.LogTree, "stash", interrupted)
            with pytest.raises(KeyboardInterrupt):
                rec.checkpoint(1, _state(kind, 14, log))
        assert store.ref("r") == first
        cid = rec.checkpoint(1, _state(kind, 16, log))
        _whole(store, cid, 16)  # "object not in the store" before
        assert store.verify().ok
