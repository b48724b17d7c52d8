"""damage98: ``push`` and ``pull`` read their LMDB source in a child (cli.child.reads_in_child).

A damaged source leaf whose value runs past the end of ``data.mdb`` killed the command with
SIGBUS, no word (bus97's strict xfails). In a child, the death is exit 5 naming the source;
the receiver is left as a killed transfer leaves it: it opens again, verifies, every ref it
has names a checkpoint it holds, and a push from a sound copy completes it. A receiver this
process has open is written here (the child would share its environment), as before.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from small_store import leaf_nodes

import cpstore
from cpstore import cli
from cpstore.cli import child

_ROOT = str(Path(__file__).resolve().parents[1])


def _source(tmp_path: Path) -> tuple[str, str, dict[str, str]]:
    """(a sound store, its compacted copy, each run's head): runs "a" then "b"."""
    raw = str(tmp_path / "raw")
    heads = {}
    with cpstore.open(raw) as store:
        for run in ("a", "b"):
            rec = store.recorder(run)
            for step in range(3):
                heads[run] = rec.checkpoint(step, {run: os.urandom(200).hex()})
    compact = str(tmp_path / "src")
    assert cli.main(["copy", compact, "--store", raw]) == 0
    return raw, compact, heads


def _value_past_the_file(path: str, key: bytes) -> None:
    """The leaf node keyed ``key`` gets 1 MiB more value length: it runs past the file."""
    data_path = os.path.join(path, "data.mdb")
    data = bytearray(Path(data_path).read_bytes())
    hit = 0
    for node in leaf_nodes(data):
        hi, node_flags, key_size = struct.unpack_from("<HHH", data, node + 2)
        if node_flags == 0 and data[node + 8 : node + 8 + key_size] == key:
            struct.pack_into("<H", data, node + 2, hi | 0x10)
            hit += 1
    assert hit == 1, hit
    Path(data_path).write_bytes(data)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *argv],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=_ROOT),
        timeout=120,
        check=False,
    )


def _consistent(dest: str) -> dict[str, str]:
    """``dest``'s heads per run, after checking it opens, verifies and reads each."""
    with cpstore.open(dest, readonly=True, create=False) as store:
        report = store.verify()
        assert report.ok, report
        heads: dict[str, str] = {}
        for run in store.runs():
            cid = store.ref(run, "main")
            assert cid is not None, run  # every run listed has its branch's head
            with store.read(cid) as cp:
                assert cp.state()
            heads[run] = cid
    return heads


@pytest.mark.parametrize("verb", ["push", "pull"])
def test_a_transfer_dying_in_its_child_leaves_the_receiver_whole(tmp_path: Path, verb: str) -> None:
    raw, src, heads = _source(tmp_path)
    dest = str(tmp_path / "dest")
    with cpstore.open(dest) as store:  # the receiver has a run of its own
        mine = store.recorder("mine").checkpoint(0, {"mine": 1})
    _value_past_the_file(src, bytes.fromhex(heads["b"]))  # b's head record, read after a's
    if verb == "push":
        done = _cli("push", dest, "--store", src)
    else:
        done = _cli("pull", src, "--store", dest)
    assert done.returncode == 5, (done.returncode, done.stderr)  # was -SIGBUS
    assert "liblmdb died with SIGBUS" in done.stderr and src in done.stderr, done.stderr
    landed = _consistent(dest)
    assert landed["mine"] == mine and landed.get("b") != heads["b"]
    assert landed.get("a") in (None, heads["a"])  # a landed whole, or not at all
    again = _cli("push", dest, "--store", raw)  # the sound store completes it
    assert again.returncode == 0, again.stderr
    assert _consistent(dest) == {**heads, "mine": mine}


@pytest.mark.parametrize("verb", ["push", "pull"])
def test_a_transfer_into_a_store_open_here_runs_in_process(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    verb: str,
) -> None:
    """The receiver open in this process: the transfer is done here (a child would write
    through the parent's environment), and lands as before."""
    raw, _src, heads = _source(tmp_path)
    capsys.readouterr()
    forked: list[str] = []

    def in_child(*_args: object, **_kwargs: object) -> tuple[int, str, str]:
        forked.append("in_child")
        return 0, "", ""

    monkeypatch.setattr(child, "in_child", in_child)
    dest = str(tmp_path / "dest")
    argv = ["push", dest, "--store", raw] if verb == "push" else ["pull", raw, "--store", dest]
    with cpstore.open(dest) as store:
        assert cli.main(argv) == 0
        assert {run: store.ref(run, "main") for run in store.runs()} == heads
    assert forked == []
    assert cli.main(argv) == 0  # closed: in the child (here, the stub: nothing done)
    assert forked == ["in_child"]
