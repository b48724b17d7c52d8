"""push69: push and pull move no ref of a store whose refs table fails its checks.

A push into a destination whose ref row was deleted behind cpstore's back (the table
then fails ``meta/refs_digest``) recreated the ref at the source's head without the
divergence ConflictError: the destination's true head may have been on another
lineage, and the push "fast-forwarded" over a history it could not see. The same held
for a ref put back to an older head (the push moved it on from there), a flipped digest
or count (the push moved refs of a table that fails its digest), and on the source side
a pull carried refs the source could not vouch for (a vanished ref's neighbours, a ref
put back to an older head). Now either store's refs table failing a ref's check or its
digest is an IntegrityError before anything is copied, naming the side and the way out
(``verify``, ``repair_ref``). The damaged store is on each engine (``url``), the damage
done by another process (LMDB) or connection (PostgreSQL); the other store is LMDB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _digest, _raw_ref

import cpstore
from cpstore.cli import main
from cpstore.errors import ConflictError, IntegrityError, NotFoundError
from cpstore.store import transfer as transfer_module
from cpstore.store import transfer_objects
from cpstore.store.facade import Store
from cpstore.store.refs import RECORDED, REFS_DIGEST_KEY, pack_ref
from cpstore.store.stats import store_stats
from cpstore.store.transfer import transfer

DAMAGES = [
    "vanished",  # the pushed branch's own row deleted
    "vanished_other",  # another branch's row deleted: the digest cannot say which
    "rolled_back",  # put back to an older head with a true check, the digest not moved
    "value_flipped",  # a byte of the value: the ref fails its own check
    "digest_flipped",  # the XOR part of meta/refs_digest
    "count_changed",  # the count alone
    "digest_truncated",  # malformed
]


def _rows(st: Store) -> dict[str, bytes]:
    """Every refs row and the digest as stored (no check: some are damaged)."""
    b = st.backend
    with b.read_txn() as txn, txn.cursor(db=b.db("refs")) as cur:
        out = {bytes(k).hex(): bytes(v) for k, v in cur}
    out["digest"] = _digest(st)
    return out


def _counts(st: Store) -> tuple[int, int]:
    stats = store_stats(st)
    return stats.checkpoints, stats.objects


def _damage(url: str, st: Store, kind: str, key: bytes, older: str) -> None:
    """Damage ``st`` (at ``url``) behind cpstore's back; ``older`` is an ancestor of
    the head of ``key``, and ``s/main`` another ref of the store."""
    good = _digest(st)
    if kind == "vanished":
        _raw_ref(url, key, None)
    elif kind == "vanished_other":
        _raw_ref(url, b"s\0main", None)
    elif kind == "rolled_back":
        _raw_ref(url, key, pack_ref(key, bytes.fromhex(older), RECORDED))
    elif kind == "value_flipped":
        b = st.backend
        with b.read_txn() as txn:
            value = bytearray(txn.get(key, None, b.db("refs")))
        value[3] ^= 0x40
        _raw_ref(url, key, bytes(value))
    elif kind == "digest_flipped":
        _raw_ref(url, REFS_DIGEST_KEY, bytes([good[0] ^ 1]) + good[1:], "meta")
    elif kind == "count_changed":
        _raw_ref(url, REFS_DIGEST_KEY, good[:16] + bytes([good[16] ^ 1]) + good[17:], "meta")
    else:
        _raw_ref(url, REFS_DIGEST_KEY, good[:-1], "meta")


def _pushed_then_other_vanished(url: str, src: Store, dst: Store) -> None:
    """Runs r and s pushed to ``dst``, r moved on in ``src``, then ``dst``'s ``s/main``
    deleted behind cpstore's back: the digest cannot say which ref is damaged."""
    rec = src.recorder("r")
    rec.checkpoint(0, {"i": 0})
    src.recorder("s").checkpoint(0, {"s": 0})
    transfer(src.backend, dst.backend)
    rec.checkpoint(1, {"i": 1})
    _raw_ref(url, b"s\0main", None)


def _refused(exc: IntegrityError, side: str, kind: str) -> None:
    assert f"the {side} store's refs fail their checks" in exc.what, exc.what
    assert "repair_ref" in exc.what and "verify" in exc.what
    assert exc.where == ("refs/r/main" if kind == "value_flipped" else "meta/refs_digest")


# -- the observation: a vanished diverged ref is not recreated over a history ---------


def test_a_push_does_not_recreate_a_vanished_diverged_ref(url: str, tmp_path: Path) -> None:
    with cpstore.open(tmp_path / "src") as src, cpstore.open(url) as dst:
        rec = src.recorder("r")
        shared = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        transfer(src.backend, dst.backend)
        theirs = rec.checkpoint(2, {"src": 2})
        mine = dst.recorder("r").checkpoint(2, {"dst": 2})  # the destination diverged
        dst.recorder("s").checkpoint(0, {"s": 0})
        _raw_ref(url, b"r\0main", None)
        before, counts = _rows(dst), _counts(dst)
        with pytest.raises(IntegrityError) as info:
            transfer(src.backend, dst.backend)
        _refused(info.value, "destination", "vanished")
        assert "a ref vanished" in info.value.what
        assert _rows(dst) == before and _counts(dst) == counts  # nothing copied or landed
        assert dst.ref("r") is None
        with pytest.raises(NotFoundError):
            dst.manifest(theirs)
        # The way out: repair at the true head, then the push says what it is.
        dst.repair_ref("r", "main", mine, operator="o", reason="vanished")
        with pytest.raises(ConflictError, match="r/main"):
            transfer(src.backend, dst.backend)
        assert dst.ref("r") == mine and [e.id for e in dst.history("r")][1:] == shared[::-1]
        assert dst.verify().ok


# -- every damage of the destination ------------------------------------------------


@pytest.mark.parametrize("kind", DAMAGES)
def test_a_push_into_a_damaged_refs_table_is_refused_before_anything_is_copied(
    url: str, tmp_path: Path, kind: str
) -> None:
    """A fast-forward the push would otherwise make (or a new branch it would create)."""
    with cpstore.open(tmp_path / "src") as src, cpstore.open(url) as dst:
        rec = src.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        src.recorder("s").checkpoint(0, {"s": 0})
        transfer(src.backend, dst.backend)
        new = rec.checkpoint(3, {"i": 3, "pad": b"new" * 100})
        src.recorder("t").checkpoint(0, {"t": 0})  # a branch the push would create
        _damage(url, dst, kind, b"r\0main", ids[1])
        before, counts = _rows(dst), _counts(dst)
        with pytest.raises(IntegrityError) as info:
            transfer(src.backend, dst.backend)
        assert _rows(dst) == before and _counts(dst) == counts  # nothing copied or landed
        _refused(info.value, "destination", kind)
        with pytest.raises(NotFoundError):
            dst.manifest(new)


@pytest.mark.parametrize("kind", ["vanished", "rolled_back"])
def test_damage_done_while_objects_are_copied_is_refused_before_anything_lands(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The destination's ref vanishes (or is put back) after the first check, while the
    objects are copied: the heads the landings compare-and-set against are read with the
    table checked again, so the vanished diverged ref is not recreated (nor the put-back
    one moved on from its older head)."""
    with cpstore.open(tmp_path / "src") as src, cpstore.open(url) as dst:
        rec = src.recorder("r")
        shared = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        transfer(src.backend, dst.backend)
        theirs = rec.checkpoint(2, {"src": 2, "pad": b"s" * 200})
        mine = dst.recorder("r").checkpoint(2, {"dst": 2})
        dst.recorder("s").checkpoint(0, {"s": 0})
        copy = transfer_objects._copy_objects

        def copy_then_damage(*args: Any, **kwargs: Any) -> None:
            copy(*args, **kwargs)
            _damage(url, dst, kind, b"r\0main", shared[0])

        monkeypatch.setattr(transfer_module, "_copy_objects", copy_then_damage)
        with pytest.raises(IntegrityError) as info:
            transfer(src.backend, dst.backend)
        _refused(info.value, "destination", kind)
        with pytest.raises(NotFoundError):
            dst.manifest(theirs)
        monkeypatch.undo()
        dst.repair_ref("r", "main", mine, operator="o", reason=kind)
        assert dst.ref("r") == mine and dst.verify().ok


def test_a_run_scoped_pull_into_a_damaged_table_is_refused(url: str, tmp_path: Path) -> None:
    """Another run's ref vanished: the digest cannot say which, so no run's ref moves."""
    with cpstore.open(tmp_path / "src") as src, cpstore.open(url) as dst:
        _pushed_then_other_vanished(url, src, dst)
        before = _rows(dst)
        with pytest.raises(IntegrityError) as info:
            transfer(src.backend, dst.backend, run_id="r")
        _refused(info.value, "destination", "vanished_other")
        assert _rows(dst) == before


def test_a_push_into_a_whole_table_still_lands(url: str, tmp_path: Path) -> None:
    """The check refuses damage only: a healthy destination (new, then moved) lands."""
    with cpstore.open(tmp_path / "src") as src, cpstore.open(url) as dst:
        rec = src.recorder("r")
        rec.checkpoint(0, {"i": 0})
        assert transfer(src.backend, dst.backend).refs_created == 1
        head = rec.checkpoint(1, {"i": 1})
        report = transfer(src.backend, dst.backend)
        assert report.refs_moved == 1 and dst.ref("r") == head
        assert transfer(src.backend, dst.backend).refs_unchanged == 1
        assert dst.verify().ok


# -- the source side ----------------------------------------------------------------


@pytest.mark.parametrize("kind", DAMAGES)
@pytest.mark.parametrize("run_id", [None, "r"])
def test_a_pull_from_a_damaged_refs_table_carries_nothing(
    url: str, tmp_path: Path, kind: str, run_id: str | None
) -> None:
    """The source's refs cannot be vouched for (a ref put back to an older head would be
    carried as the head; a vanished ref's run pulled without it, or, pulled alone, "no
    such run" where the run's ref vanished): nothing is copied."""
    with cpstore.open(url) as src, cpstore.open(tmp_path / "dst") as dst:
        rec = src.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        src.recorder("s").checkpoint(0, {"s": 0})
        _damage(url, src, kind, b"r\0main", ids[1])
        with pytest.raises(IntegrityError) as info:
            transfer(src.backend, dst.backend, run_id=run_id)
        _refused(info.value, "source", kind)
        assert dst.runs() == [] and _counts(dst) == (0, 0)


# -- the command --------------------------------------------------------------------


def test_the_push_command_names_the_destinations_refs_digest(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local = str(tmp_path / "local")
    with cpstore.open(local) as src, cpstore.open(url) as dst:
        _pushed_then_other_vanished(url, src, dst)
    capsys.readouterr()
    assert main(["push", url, "--store", local]) == 5
    err = capsys.readouterr().err
    assert "destination store's refs" in err and "repair_ref" in err, err
    with cpstore.open(url) as dst:
        assert len(dst.history("r")) == 1


def test_the_pull_command_of_a_run_whose_ref_vanished_names_the_source_damage(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "no such run" (exit 4), and no store is made at the receiving path."""
    with cpstore.open(url) as src:
        src.recorder("r").checkpoint(0, {"i": 0})
        src.recorder("s").checkpoint(0, {"s": 0})
    _raw_ref(url, b"r\0main", None)
    laptop = tmp_path / "laptop"
    capsys.readouterr()
    assert main(["pull", url, "--run", "r", "--store", str(laptop)]) == 5
    err = capsys.readouterr().err
    assert "source store's refs" in err and "a ref vanished" in err, err
    assert not laptop.exists()
