"""An inherited part's location is checked in full at every commit, hint or no hint.

A continuing recorder's next checkpoint names parts its parent's record already
carries location hints for. The commit must still follow each part's index row to a
heap entry carrying the part's kind and key (docs/store.md): a check of the entry
the parent's hint names alone would acknowledge a checkpoint whose index row is
damaged (no read through the index could serve the part). A wrong or stale hint
in the parent's record is never trusted: the new record's hints are what the index
says. Each case runs in every durability mode: one txn per put, or (batched) a batch
flushed after that one checkpoint, so the checks here are those of a one-checkpoint txn;
the per-txn location record of a txn holding several checkpoints (``TxnChecked``) is
pinned by ``tests/test_audit22_txn_checked.py`` and ``tests/test_put_txn_checked.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from stored import damage

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.content import objects_of, records_of
from cpstore.store.facade import Store

_PARTS = 10
_MODES = ["sync", "none", "batched"]


def _recording(path: Path, durability: str) -> tuple[Store, Any, dict[str, str], str]:
    """A store, a recorder that keeps going, the state it last wrote and the head id."""
    store = cpstore.open(path, durability=durability)  # type: ignore[arg-type]
    rec = store.recorder("r")
    state = {f"p{i}": f"value {i} " * 30 for i in range(_PARTS)}
    head = ""
    for step in range(12):
        state[f"p{step % _PARTS}"] = f"step {step} " * 30
        head = rec.checkpoint(step, dict(state))
    store.flush()
    return store, rec, state, head


def _parts_and_hints(store: Store, cid: str) -> tuple[list[bytes], bytes]:
    """The record's part digests (manifest order) and its hints (4-byte seqs, no count)."""
    with store.read(cid) as view:
        parts = [bytes(d) for d in view.manifest.raw["state"]["parts"].values()]
    records = records_of(store.backend.dbs)
    with store.backend.env.env.begin(buffers=True) as txn:
        _, hints = records.hinted(txn, bytes.fromhex(cid))
    return parts, bytes(hints)


def _commit(store: Store, rec: Any, step: int, state: dict[str, str]) -> str:
    """One checkpoint, flushed (batched mode commits at the flush)."""
    cid: str = rec.checkpoint(step, dict(state))
    store.flush()
    return cid


_ROW_DAMAGES = [
    "row deleted",
    "row names another part's entry",
    "row names the entry after its own",
    "row of 8 zero bytes",
    "row names the parent's record entry",
]


def _damage_row(txn: Any, dbs: Any, keys: tuple[bytes, bytes, bytes], how: str) -> None:
    """Damage the index row of ``keys[0]`` (``keys``: victim, another part, the parent)."""
    victim, other, parent = keys
    oloc, cloc = dbs["oloc"], dbs["cloc"]
    seq = bytes(txn.get(victim, db=oloc))
    if how == "row deleted":
        txn.delete(victim, db=oloc)
    elif how == "row names another part's entry":
        txn.put(victim, bytes(txn.get(other, db=oloc)), db=oloc)
    elif how == "row names the entry after its own":
        txn.put(victim, (int.from_bytes(seq, "big") + 1).to_bytes(8, "big"), db=oloc)
    elif how == "row of 8 zero bytes":
        txn.put(victim, bytes(8), db=oloc)
    else:
        txn.put(victim, bytes(txn.get(parent, db=cloc)), db=oloc)


@pytest.mark.parametrize("durability", _MODES)
@pytest.mark.parametrize("how", _ROW_DAMAGES)
def test_an_inherited_part_whose_index_row_is_damaged_is_refused_though_its_hint_is_sound(
    tmp_path: Path, durability: str, how: str
) -> None:
    """The parent's hint still names the part's intact heap entry but its index row is
    damaged: the next checkpoint is refused with IntegrityError, the branch stays."""
    store, rec, state, head = _recording(tmp_path / "s", durability)
    with store:
        parts, _ = _parts_and_hints(store, head)
        victim, other = parts[4], parts[6]
        damage(
            store,
            lambda txn, dbs: _damage_row(txn, dbs, (victim, other, bytes.fromhex(head)), how),
        )
        state["p9"] = "a new value " * 30  # nine inherited parts, the victim among them
        with pytest.raises(IntegrityError):
            _commit(store, rec, 20, state)
        assert store.ref("r") == head


@pytest.mark.parametrize("durability", _MODES)
def test_an_inherited_part_whose_heap_entry_is_damaged_is_refused(
    tmp_path: Path, durability: str
) -> None:
    """The part's heap entry (which both its row and the parent's hint name) carries
    another key: the next checkpoint is refused, the branch stays."""
    store, rec, state, head = _recording(tmp_path / "s", durability)
    with store:
        parts, _ = _parts_and_hints(store, head)
        victim = parts[3]

        def hurt(txn: Any, dbs: Any) -> None:
            seq = bytes(txn.get(victim, db=dbs["oloc"]))
            entry = bytes(txn.get(seq, db=dbs["heap"]))
            txn.put(seq, entry[:2] + bytes(16) + entry[18:], db=dbs["heap"])

        damage(store, hurt)
        state["p9"] = "a new value " * 30
        with pytest.raises(IntegrityError):
            _commit(store, rec, 20, state)
        assert store.ref("r") == head


_HINT_DAMAGES = ["hints swapped", "hint names a seq past the heap", "hint names the record"]


@pytest.mark.parametrize("durability", _MODES)
@pytest.mark.parametrize("how", _HINT_DAMAGES)
def test_a_wrong_hint_in_the_parent_is_never_carried_into_the_child(
    tmp_path: Path, durability: str, how: str
) -> None:
    """The parent's hint block names the wrong entries (damage, or a seq reused since):
    the child commits with the hints its parts' index rows give, and reads back whole."""
    store, rec, state, head = _recording(tmp_path / "s", durability)
    with store:
        _, hints = _parts_and_hints(store, head)
        seqs = [hints[4 * i : 4 * i + 4] for i in range(_PARTS)]
        if how == "hints swapped":
            seqs[2], seqs[5] = seqs[5], seqs[2]
        elif how == "hint names a seq past the heap":
            seqs[2] = (2**31).to_bytes(4, "big")
        else:
            with store.backend.env.env.begin() as txn:
                cloc = store.backend.dbs["cloc"]
                seqs[2] = bytes(txn.get(bytes.fromhex(head), db=cloc))[4:]
        bad = b"".join(seqs)

        def hurt(txn: Any, dbs: Any) -> None:
            at = bytes(txn.get(bytes.fromhex(head), db=dbs["cloc"]))
            entry = bytes(txn.get(at, db=dbs["heap"]))
            txn.put(at, entry[:22] + bad + entry[22 + len(bad) :], db=dbs["heap"])

        damage(store, hurt)
        assert _parts_and_hints(store, head)[1] == bad
        state["p9"] = "a new value " * 30
        child = _commit(store, rec, 20, state)
        kids, got = _parts_and_hints(store, child)
        objects = objects_of(store.backend.dbs)
        with store.backend.env.env.begin(buffers=True) as txn:
            assert got == objects.locations(txn, kids)[4:]  # the index's answer, key by key
        assert got != bad
        with store.read(child) as view:
            assert view.state() == state
