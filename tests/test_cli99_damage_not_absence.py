"""cli99: a flipped key the store can tell should exist is damage (exit 5), never absence (4).

damage98's flips saw ``inspect``/``diff`` say exit 4 "not found" on a damaged store. One
flipped byte in a leaf's key made the lookup miss:

* the head's ref row (key ``run``/``main``): "no such run or branch", though the refs
  table then fails its checks and ``meta/refs_digest``;
* a parent checkpoint's row: ``run@main~1`` "no such checkpoint", though its child's
  hash-checked manifest names it and no tombstone says it was pruned;
* an object the head's manifest names (its observations log): "object not in the store",
  though no sweep removes what a stored checkpoint names.

Each is now :class:`IntegrityError`, exit 5. A name that is simply not there (another run,
an ancestor past the root, a pruned ancestor) keeps exit 4.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from small_store import compact_small_store, flip_key

import cpstore
from cpstore import cli
from cpstore.errors import IntegrityError, NotFoundError
from cpstore.store.model import ref_key


def _names(path: str) -> tuple[str, str, str]:
    """(head id, its parent's id, the head's observations log digest)."""
    with cpstore.open(path, readonly=True) as store:
        head = store.resolve("run@main")
        with store.read(head) as cp:
            return head, cp.manifest.parent or "", bytes(cp.manifest.raw["observations"]).hex()


def test_a_flipped_ref_key_is_damage_not_no_such_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = compact_small_store(tmp_path)
    damaged = flip_key(path, ref_key("run", "main"))
    capsys.readouterr()
    with cpstore.open(path, readonly=True) as store, pytest.raises(IntegrityError) as told:
        store.resolve("run@main")  # was NotFoundError "no such run or branch"
    assert (told.value.where or "").startswith("refs/")
    for argv in (("inspect", "run@main"), ("diff", "run@main~1", "run@main"), ("log", "run")):
        code = cli.main([*argv, "--store", path])
        err = capsys.readouterr().err
        assert code == 5, (argv, err)  # was 4
        # missing_ref's full walk, or (refkey100) the check of the rows beside the key
        assert "refs fail their checks" in err or "a damaged ref key may be" in err, err
    assert Path(path, "data.mdb").read_bytes() == damaged


def test_a_flipped_parent_key_is_damage_not_no_such_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = compact_small_store(tmp_path)
    head, parent, _ = _names(path)
    flip_key(path, bytes.fromhex(parent))
    capsys.readouterr()
    with cpstore.open(path, readonly=True) as store, pytest.raises(IntegrityError) as told:
        store.resolve("run@main~1")  # was the parent's id, then "no such checkpoint"
    assert told.value.where == f"checkpoints/{head}" and parent in str(told.value.got)
    for argv in (("inspect", "run@main~1"), ("diff", "run@main~1", "run@main")):
        code = cli.main([*argv, "--store", path])
        err = capsys.readouterr().err
        assert code == 5, (argv, err)  # was 4
        assert "parent checkpoint does not resolve" in err, err


def test_a_flipped_object_key_is_damage_not_object_not_in_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = compact_small_store(tmp_path)
    head, _, observations = _names(path)
    flip_key(path, bytes.fromhex(observations))
    capsys.readouterr()
    with (
        cpstore.open(path, readonly=True) as store,
        store.read(head) as cp,
        pytest.raises(IntegrityError) as told,
    ):
        cp.observations()  # was NotFoundError "object not in the store"
    assert told.value.got == observations
    code = cli.main(["inspect", "run@main", "--store", path])
    err = capsys.readouterr().err
    assert code == 5, err  # was 4
    assert observations in err


def test_what_is_simply_not_there_is_still_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sound refs: another run, an ancestor past the root, a pruned ancestor stay exit 4."""
    path = compact_small_store(tmp_path)
    for name in ("other@main", "run@side", "run@main~3"):
        with cpstore.open(path, readonly=True) as store, pytest.raises(NotFoundError):
            store.resolve(name)
        assert cli.main(["inspect", name, "--store", path]) == 4, name
    with cpstore.open(path) as store:
        store.prune(keep_last=1)
    capsys.readouterr()
    assert cli.main(["inspect", "run@main~1", "--store", path]) == 4
    assert "pruned" in capsys.readouterr().err


def test_stats_counts_a_log_that_does_not_decode_instead_of_calling_it_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The head's observations log made undecodable (its first byte 0xc1, which msgpack
    never uses): ``stats`` said "bytes are not a msgpack value", exit 3 (bad input, of a
    store's own bytes: cli99's flips, 3 of 1 000). It counts on, as for other damage
    (verify names it), and ``verify`` says exit 5."""
    path = compact_small_store(tmp_path)
    _, _, observations = _names(path)
    with cpstore.open(path, readonly=True) as store:
        raw = store.get_object(observations)
    data_path = Path(path, "data.mdb")
    data = bytearray(data_path.read_bytes())
    at = data.find(raw)
    assert at >= 0 and data.find(raw, at + 1) < 0
    data[at] = 0xC1
    data_path.write_bytes(bytes(data))
    capsys.readouterr()
    assert cli.main(["stats", "--store", path]) == 0, capsys.readouterr().err  # was 3
    assert cli.main(["verify", "--store", path]) == 5
