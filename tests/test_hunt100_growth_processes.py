"""LMDB map growth met by several processes at once (hunt100: what held, kept as tests).

Each process has its own handle (spawned, never forked). Two writers fill a 1 MiB map at
once while a third process holds a read view open; writers at ``max_map_size`` are refused
``StoreFullError`` whole; a handle opened before another process grew the map adopts the
new size on every path it then takes; a commit refused by a file-size limit (the
``RLIMIT_FSIZE`` stand-in for a full disk) writes nothing and the recorder continues once
the limit is lifted. After each, every acknowledged checkpoint is read back, each branch
head is the last acknowledged checkpoint, and the store verifies. Timeouts only guard.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import CpstoreError, StoreFullError

_JOIN = 300  # a failure guard only: a loaded 2-core machine may take long
_BLOB = 64 * 1024


def _writer(path: str, run: str, n: int, max_map: int, out: str) -> None:
    acked: list[str] = []
    err: str | None = None
    with cpstore.open(path, map_size=1 << 20, max_map_size=max_map) as st:
        rec = st.recorder(run)
        for i in range(n):
            try:
                acked.append(rec.checkpoint(i, {"blob": os.urandom(_BLOB).hex(), "i": i}))
            except StoreFullError as exc:
                err = f"StoreFullError: {exc}"
                break
    Path(out).write_text(json.dumps({"acked": acked, "err": err}))


def _reader(path: str, hold: float, max_map: int, out: str) -> None:
    with cpstore.open(path, map_size=1 << 20, max_map_size=max_map) as st:
        cid = st.ref("seed")
        assert cid is not None
        with st.read(cid) as cp:
            before = cp.state()
            time.sleep(hold)  # the writers grow the map meanwhile
            again = cp.state()
        with st.read(cid) as cp:  # a new read after the growth: adopted
            after = cp.state()
    Path(out).write_text(json.dumps({"same": before == again == after}))


def _spawn(target: Any, *args: Any) -> Any:
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args)
    proc.start()
    return proc


def _joined(*procs: Any) -> None:
    for proc in procs:
        proc.join(_JOIN)
        assert proc.exitcode == 0, f"child exit code {proc.exitcode}"


def _all_kept(path: str, results: dict[str, dict[str, Any]]) -> None:
    with cpstore.open(path, create=False) as st:
        for run, got in results.items():
            for cid in got["acked"]:
                assert st.manifest(cid).run_id == run  # raises NotFoundError when lost
            assert st.ref(run) == (got["acked"][-1] if got["acked"] else None)
        assert st.verify().ok


def _race(tmp_path: Path, n: int, max_map: int) -> tuple[str, dict[str, dict[str, Any]]]:
    path = str(tmp_path / "s")
    with cpstore.open(path, map_size=1 << 20, max_map_size=max_map) as st:
        st.recorder("seed").checkpoint(0, {"seed": True})
    outs = {run: str(tmp_path / f"{run}.json") for run in ("w0", "w1")}
    reader = _spawn(_reader, path, 2.0, max_map, str(tmp_path / "r.json"))
    writers = [_spawn(_writer, path, run, n, max_map, out) for run, out in outs.items()]
    _joined(reader, *writers)
    assert json.loads((tmp_path / "r.json").read_text())["same"]
    return path, {run: json.loads(Path(out).read_text()) for run, out in outs.items()}


def test_two_writer_processes_grow_the_map_beside_a_reader_and_lose_nothing(
    tmp_path: Path,
) -> None:
    path, results = _race(tmp_path, 40, 1 << 40)
    assert all(r["err"] is None and len(r["acked"]) == 40 for r in results.values()), results
    _all_kept(path, results)
    assert os.path.getsize(os.path.join(path, "data.mdb")) > 4 << 20  # it did grow


def test_writer_processes_at_max_map_size_are_refused_whole_and_lose_nothing(
    tmp_path: Path,
) -> None:
    max_map = 4 << 20
    path, results = _race(tmp_path, 60, max_map)
    refused = [r for r in results.values() if r["err"] is not None]
    assert refused, "60 x 128 KiB in two processes fit a 4 MiB map"
    assert all("maximum map size" in r["err"] for r in refused)
    _all_kept(path, results)
    assert os.path.getsize(os.path.join(path, "data.mdb")) <= max_map
    with cpstore.open(path, create=False, max_map_size=1 << 40) as st:
        more = st.recorder("w0").checkpoint(1000, {"blob": os.urandom(_BLOB).hex()})
        assert st.ref("w0") == more
        assert st.verify().ok


def _grow(path: str, run: str) -> None:
    with cpstore.open(path, map_size=1 << 20) as st:
        rec = st.recorder(run)
        for i in range(24):
            rec.checkpoint(i, {"blob": os.urandom(_BLOB).hex()})


def _state(st: cpstore.Store, cid: str) -> Any:
    with st.read(cid) as cp:
        return cp.state()


@pytest.mark.parametrize("readonly", [False, True])
def test_a_handle_opened_before_another_process_grew_the_map_adopts_it_everywhere(
    tmp_path: Path, readonly: bool
) -> None:
    path = str(tmp_path / "s")
    with cpstore.open(path, map_size=1 << 20) as st:
        rec = st.recorder("r")
        rec.observe(1, "src", b"x", pinned_at=1.0)
        rec.token("rng", 0.5)
        rec.decision(1, {"node": "n"})
        cid = rec.checkpoint(1, {"a": 1})
    st = cpstore.open(path, map_size=1 << 20, readonly=readonly)
    try:
        calls: dict[str, Any] = {
            "read": lambda: _state(st, cid),
            "ref": lambda: st.ref("r"),
            "history": lambda: list(st.history("r")),
            "resolve": lambda: st.resolve("r@main"),
            "validate": lambda: cpstore.validate(cid, cid, store=st, record=False),
            "verify": st.verify,
        }
        if not readonly:
            calls["checkpoint"] = lambda: st.recorder("r").checkpoint(2, {"a": 2})
        for i, (name, call) in enumerate(calls.items()):
            _joined(_spawn(_grow, path, f"g{i}"))  # another process grows the map first
            try:
                got = call()
            except CpstoreError as exc:
                pytest.fail(f"{name} after another process grew the map: {exc!r}")
            if name == "verify":
                assert got.ok
            if name == "validate":
                assert got.verdict is not cpstore.Verdict.REJECT
    finally:
        st.close()
    with cpstore.open(path, create=False) as again:
        assert again.verify().ok


def _limited_writer(path: str, limit: int, out: str) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    acked: list[str] = []
    errors: list[str] = []
    with cpstore.open(path, map_size=1 << 20) as st:
        rec = st.recorder("w")
        for i in range(60):
            if len(errors) == 3:  # refused three times: lift the limit, write on
                resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
            try:
                rec.token("rng", i)
                acked.append(rec.checkpoint(i, {"blob": os.urandom(48 * 1024).hex()}))
            except CpstoreError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    Path(out).write_text(json.dumps({"acked": acked, "errs": errors}))


def test_a_commit_refused_by_a_file_size_limit_writes_nothing_and_the_recorder_continues(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s")
    out = str(tmp_path / "w.json")
    _joined(_spawn(_limited_writer, path, 3 << 20, out))
    got = json.loads(Path(out).read_text())
    assert len(got["errs"]) == 3, got["errs"]
    assert all("not stored" in e for e in got["errs"]), got["errs"]
    assert len(got["acked"]) == 57
    _all_kept(path, {"w": got})
    with cpstore.open(path, create=False) as st:  # one chain: each parent the one before
        parents = [st.manifest(c).parent for c in got["acked"]]
        assert parents == [None, *got["acked"][:-1]]


def _open_big(path: str) -> None:
    with cpstore.open(path, map_size=1 << 20) as st:  # the default max_map_size, 1 TiB
        rec = st.recorder("big")
        for i in range(48):  # ~6 MiB: past the other handle's 4 MiB maximum
            rec.checkpoint(i, {"blob": os.urandom(_BLOB).hex()})


def test_max_map_size_bounds_a_handles_own_growth_not_a_map_another_process_committed(
    tmp_path: Path,
) -> None:
    """docs/durability.md: a map another process grew past this handle's maximum is
    adopted as it is (LMDB refuses this handle's txns until it is), and written in."""
    path = str(tmp_path / "s")
    with cpstore.open(path, map_size=1 << 20, max_map_size=4 << 20) as st:
        rec = st.recorder("w")
        rec.checkpoint(0, {"w": 0})
        _joined(_spawn(_open_big, path))
        acked = [rec.checkpoint(i, {"blob": os.urandom(_BLOB).hex()}) for i in range(1, 8)]
        assert st.ref("w") == acked[-1]
        assert st.verify().ok
    assert os.path.getsize(os.path.join(path, "data.mdb")) > 6 << 20
