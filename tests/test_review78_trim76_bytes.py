"""review78: trim76's put path writes the bytes 60c078b wrote (tests/review78_old.py holds
the replaced expressions): the recorded manifest's template and step table at every msgpack
width boundary, ``ref_key``'s one-slot cache (surrogates, NUL, non-ASCII, str subclasses,
threads, a fork), ``pack_checkpoint_value`` and a ref's value on bytes-likes; and, end to
end on both engines, processes recording runs with non-ASCII names into one store.
"""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import review78_old as old
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pg_cluster import backend_url  # noqa: F401 - the url fixture

import cpstore
from cpstore.native.records import Digest
from cpstore.store import model
from cpstore.store.manifest_encode import encode_recorded_manifest
from cpstore.store.model import pack_checkpoint_value, ref_key
from cpstore.store.refs import RECORDED, SET, pack_ref

#: Each msgpack int width's ends (fixint, uint8, uint16, uint32, uint64) and the table's.
_EDGES = sorted(
    {
        v
        for e in (0, 127, 128, 255, 256, 4095, 4096, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1)
        for v in (e - 1, e, e + 1)
        if 0 <= v < 2**63
    }
)
_steps = st.one_of(st.sampled_from(_EDGES), st.integers(0, 2**63 - 1))
#: Digests and pre-encoded fields holding "%" bytes: the template's arguments are not formats.
_digest = st.one_of(
    st.none(), st.binary(min_size=16, max_size=16), st.just(b"%b%%%s" * 2 + b"%%%%")
)
_blob = st.one_of(st.binary(max_size=40), st.just(b"%b"), st.just(b"%"), st.just(b"%%s%b"))
_LOGS = ("observations", "call_graph", "effects", "harness", "transcript")


class _Step(int):
    """An int subclass step (``_step`` accepts one; msgpack packs its value)."""


class _EnumStep(enum.IntEnum):
    LOW = 127
    EDGE = 4095
    PAST = 4096


def _both(step: int, parent: Any, logs: dict[str, Any], blobs: list[Any], sealed: bool) -> None:
    kwargs: dict[str, Any] = dict(
        zip(("run_id", "branch", "state", "tokens", "tags", "metadata"), blobs, strict=True)
    )
    want = old.encode_recorded_manifest(
        logs, step=step, parent=parent, ledger_sealed=sealed, **kwargs
    )
    got = encode_recorded_manifest(logs, step=step, parent=parent, ledger_sealed=sealed, **kwargs)
    assert type(got) is bytes
    assert got == want


@settings(max_examples=400, deadline=None)
@given(
    step=_steps,
    parent=_digest,
    logs=st.fixed_dictionaries({name: _digest for name in _LOGS}),
    blobs=st.lists(_blob, min_size=6, max_size=6),
    sealed=st.booleans(),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
@example(
    step=4096, parent=None, logs=dict.fromkeys(_LOGS), blobs=[b""] * 6, sealed=False, kind=bytes
)
def test_the_recorded_manifest_is_60c078bs_bytes(  # noqa: PLR0917 - given's arguments
    step: int,
    parent: bytes | None,
    logs: dict[str, bytes | None],
    blobs: list[bytes],
    sealed: bool,
    kind: type,
) -> None:
    """Random fields, steps at each width's edges and the table's, "%" in every argument,
    pre-encoded fields and digests given as bytes, bytearray or memoryview."""

    def wrap(raw: bytes) -> Any:
        return raw if kind is bytes else kind(raw)

    _both(
        step,
        None if parent is None else wrap(parent),
        {k: None if v is None else wrap(v) for k, v in logs.items()},
        [wrap(b) for b in blobs],
        sealed,
    )


@pytest.mark.parametrize("step", [*_EDGES, *_EnumStep])
def test_an_int_subclass_step_is_packed_as_its_value(step: int) -> None:
    """``Recorder._step`` lets an int subclass through: the table and msgpack agree on it."""
    blobs = [b"\xa1r", b"\xa4main", b"\x80", b"\xc0", b"\x90", b"\x80"]
    for value in (step, _Step(step)) if not isinstance(step, enum.Enum) else (step,):
        _both(value, None, dict.fromkeys(_LOGS), blobs, True)


_names = st.text(
    st.characters(blacklist_categories=(), codec=None), min_size=0, max_size=10
)  # surrogates (Cs), NUL and every plane included


@settings(max_examples=400, deadline=None)
@given(a=_names, b=_names, c=_names)
def test_ref_key_is_60c078bs_through_its_cache(a: str, b: str, c: str) -> None:
    """Asked again with the very strs (a hit), with equal copies, the pair swapped, and a
    third name in between: always the two encodes' bytes."""
    a2, b2 = "".join(list(a)), "".join(list(b))  # equal, maybe other objects
    for run, branch in ((a, b), (a, b), (a2, b), (a, b2), (b, a), (a, c), (a, b), (c, c)):
        assert ref_key(run, branch) == old.ref_key(run, branch)


class _Upper(str):
    """A str subclass whose encode differs from str's: its key is never cached."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return str.encode(self.upper(), encoding, errors)


class _Counting(str):
    """A str subclass encoding differently on each call (the cache must not freeze it)."""

    calls = 0

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        type(self).calls += 1
        return str.encode(f"{self}{type(self).calls}", encoding, errors)


def test_ref_key_of_str_subclasses_is_their_encode_every_time() -> None:
    run, branch = _Upper("run\udcff"), _Upper("main")
    for _ in range(3):
        assert ref_key(run, branch) == old.ref_key(run, branch) == b"RUN\xed\xb3\xbf\0MAIN"
        assert ref_key("run\udcff", branch) == old.ref_key("run\udcff", branch)
    counting = _Counting("r")
    first, second = ref_key(counting, "b"), ref_key(counting, "b")
    assert (first, second) == (b"r1\0b", b"r2\0b")  # 60c078b's answers: encode asked each time
    assert model._LAST_REF_KEY[0][0] is not counting


def test_ref_key_under_threads_with_different_runs() -> None:
    """Eight threads, each with its own run and branch objects (some equal to another
    thread's, some not), switching every microsecond: each gets its own key every time."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    bad: list[tuple[str, str, bytes]] = []
    pairs = [(f"run-{i % 3}-é", "\udcff" * (i % 2) + f"b{i}") for i in range(8)]

    def work(run: str, branch: str) -> None:
        run, branch = "".join(list(run)), "".join(list(branch))  # this thread's own objects
        want = old.ref_key(run, branch)
        for _ in range(20_000):
            got = ref_key(run, branch)
            if got != want:
                bad.append((run, branch, got))
                return

    try:
        threads = [threading.Thread(target=work, args=pair) for pair in pairs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert bad == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_ref_key_cache_across_fork() -> None:
    """A fork() child inherits the slot: the same strs give the same key, others theirs."""
    run, branch = "rün", "máin"
    ref_key(run, branch)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ok = ref_key(run, branch) == old.ref_key(run, branch)
        ok = ok and ref_key("x", branch) == b"x\0m\xc3\xa1in"
        ok = ok and ref_key(run, branch) == old.ref_key(run, branch)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


_cids = st.binary(min_size=16, max_size=16)


@settings(max_examples=300, deadline=None)
@given(
    created=st.floats(allow_nan=True, allow_infinity=True),
    manifest=st.binary(max_size=64),
    cid=st.one_of(st.none(), _cids),
    kind=st.sampled_from(["bytes", "digest", "bytearray", "memoryview"]),
    view=st.booleans(),
)
def test_pack_checkpoint_value_is_60c078bs(
    created: float, manifest: bytes, cid: bytes | None, kind: str, view: bool
) -> None:
    wrap: dict[str, Any] = {
        "bytes": bytes,
        "digest": Digest,
        "bytearray": bytearray,
        "memoryview": memoryview,
    }
    given_cid = None if cid is None else wrap[kind](cid)
    body: Any = memoryview(manifest) if view else manifest
    assert pack_checkpoint_value(created, body, given_cid) == old.pack_checkpoint_value(
        created, body, given_cid
    )


@settings(max_examples=300, deadline=None)
@given(
    key=st.binary(min_size=1, max_size=40),
    cid=_cids,
    origin=st.sampled_from([RECORDED, SET]),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_a_ref_value_is_60c078bs(key: bytes, cid: bytes, origin: int, kind: type) -> None:
    given_cid = cid if kind is bytes else kind(cid)
    assert pack_ref(key, given_cid, origin) == old.ref_value(key, cid, origin)


_RECORDER = r"""
import sys
import cpstore
url, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with cpstore.open(url, durability="none") as st:
    recs = [st.recorder(run), st.recorder(run + "\u00e9", branch="br\u00e4nch")]
    for i in range(n):
        for j, rec in enumerate(recs):
            rec.checkpoint(i, {"i": i, "who": run, "j": j, "pad": bytes(300 * (i % 7))})
"""


def test_processes_recording_non_ascii_runs_into_one_store(url: str, tmp_path: Path) -> None:
    """Three processes, each two recorders (ASCII and non-ASCII run and branch names)
    alternating commits, so each process's ``ref_key`` slot turns over every put: every
    head is its recorder's last checkpoint and the store verifies (refs digest included)."""
    n = 25
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RECORDER, url, f"r\u00f6{i}\U0001f600", str(n)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    with cpstore.open(url) as store:
        for i in range(3):
            run = f"r\u00f6{i}\U0001f600"
            for r, b in ((run, "main"), (run + "\u00e9", "br\u00e4nch")):
                head = store.branches(r)[b]
                with store.read(head) as view:
                    m = view.manifest
                    assert (m.step, m.run_id, m.branch) == (n - 1, r, b)
        report = store.verify()
        assert report.ok, report


_ROOT = Path(__file__).resolve().parent.parent
_RECORD = Path(__file__).resolve().parent / "review78_record.py"


def _tree(at: Path, commit: str) -> Path | None:
    """``commit``'s cpstore package exported under ``at`` with this build's native core (its
    C sources are trim76's own: csrc did not change since 60c078b), or None without git."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(_ROOT), "archive", commit, "cpstore"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    at.mkdir()
    subprocess.run(["tar", "-x", "-C", str(at)], input=archive, check=True, timeout=60)
    native = next((_ROOT / "cpstore").glob("_cpstore_native*.so"))
    (at / "cpstore" / native.name).write_bytes(native.read_bytes())
    return at


@pytest.mark.parametrize("seed", [3, 5, 6, 11])
def test_the_store_is_60c078bs_byte_for_byte(url: str, tmp_path: Path, seed: int) -> None:
    """The same seeded scenario (tests/review78_record.py) recorded by 60c078b's cpstore and
    by this one, same clock and hash seed: every stored entry equal, on both engines."""
    old_tree = _tree(tmp_path / "old", "60c078b")
    if old_tree is None:
        pytest.skip("60c078b is not in this checkout")
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    got = []
    for tree, where in ((old_tree, "a"), (_ROOT, "b")):
        location = (
            str(tmp_path / where)
            if not url.startswith("postgresql:")
            else (url if where == "a" else url.replace("schema=", "schema=b"))
        )
        run = subprocess.run(
            [sys.executable, str(_RECORD), str(tree), location, str(seed)],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        got.append(run.stdout.split())
    assert got[0] == got[1] and int(got[0][0]) > 100


_CHECKS = Path(__file__).resolve().parent / "review78_checks.py"
#: trim76's tip (merged as 06f4681): its refusals, before other branches changed messages.
_TRIM76 = "816f091cfe24e16424dc06f0e8f178a1d8ec3726"


def test_the_put_paths_refusals_are_60c078bs(url: str, tmp_path: Path) -> None:
    """A named object deleted (twice), its heap entry gone, a damaged ref, a vanished ref
    beside a new and a re-made run (refs70), a reentrant write, a moved branch, a read-only
    store (tests/review78_checks.py): 60c078b and trim76 raise the same class with the same
    message and fields, on both engines."""
    trees = [
        _tree(tmp_path / name, commit) for name, commit in (("old", "60c078b"), ("new", _TRIM76))
    ]
    if None in trees:
        pytest.skip("60c078b or trim76 is not in this checkout")
    got = []
    for n, tree in enumerate(trees):
        pg = url.startswith("postgresql:")
        base = url.replace("schema=", f"schema=t{n}") if pg else str(tmp_path / f"s{n}")
        run = subprocess.run(
            [sys.executable, str(_CHECKS), str(tree), base],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        got.append(run.stdout)
    assert got[0] == got[1]
    assert got[1].count("\n") >= (6 if url.startswith("postgresql:") else 9), got[1]
    assert "no error" not in got[1]
