"""Checkpoint names resolve to the checkpoint they name, or to a clear error (audit63).

Run ids and branch names may hold ``@``, ``~`` and spaces. ``resolve`` stripped the
name (``" a@main"`` named run ``a``'s head), split at the last ``@`` and the last
``~`` only (``a@x~1`` was branch ``x``'s parent although a branch ``x~1`` exists,
``r@b@c`` run ``r@b`` although run ``r`` has a branch ``b@c``), and took any
``str.isdigit`` N (``~²`` raised ValueError: ``cpstore inspect`` exited 1 with a
traceback). On both backends; the moving-branch case runs in two processes.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pg_cluster import backend_store, backend_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, InvalidInputError, NotFoundError
from cpstore.store import ids
from cpstore.store.facade import Store

ROOT = Path(__file__).resolve().parent.parent


def _chain(
    store: Store, run: str, branch: str = "main", parent: str | None = None, n: int = 1
) -> list[str]:
    rec = store.recorder(run, branch=branch, parent=parent)
    base = 0 if parent is None else store.manifest(parent).step + 1
    return [rec.checkpoint(base + i, {"run": run, "branch": branch, "i": i}) for i in range(n)]


def test_a_padded_name_is_never_another_runs_head(store: Store) -> None:
    """`` a@main`` names run `` a``: its head when it exists, NotFoundError when not."""
    a = _chain(store, "a", n=2)
    assert store.resolve("a@main") == a[-1]
    with pytest.raises(NotFoundError):
        store.resolve(" a@main")
    with pytest.raises(NotFoundError):
        store.resolve("a@main ")
    padded = _chain(store, " a")
    assert store.resolve(" a@main") == padded[0]
    assert store.resolve(f"  {a[0]}\n") == a[0]  # an id has no spaces: padding is harmless


def test_a_tilde_branch_and_its_parent_reading_are_ambiguous(store: Store) -> None:
    """``a@x~1`` with branches ``x`` and ``x~1``: InvalidInputError naming both readings."""
    a = _chain(store, "a", n=3)
    x = _chain(store, "a", "x", a[0], n=2)
    assert store.resolve("a@x~1") == x[0]  # no branch x~1 yet: the one reading
    x1 = _chain(store, "a", "x~1", a[1])
    with pytest.raises(InvalidInputError) as info:
        store.resolve("a@x~1")
    assert "ambiguous" in info.value.what
    assert "'x~1' ~0" in str(info.value.expected) and "'x' ~1" in str(info.value.expected)
    assert store.resolve("a@x~1~0") == x1[0]
    assert store.resolve("a@x~1~1") == a[1]
    assert store.resolve("a@x~0") == x[-1]


def test_an_at_in_a_branch_or_run_is_read_every_way(store: Store) -> None:
    """``r@b@c``: run ``r`` branch ``b@c`` alone resolves; with run ``r@b`` too, ambiguous."""
    b = _chain(store, "r", "b@c")
    assert store.resolve("r@b@c") == b[0]
    _chain(store, "r@b", "c")
    with pytest.raises(InvalidInputError) as info:
        store.resolve("r@b@c")
    assert "ambiguous" in info.value.what


@pytest.mark.parametrize("n", ["²", "\u0663", "1x", "-1", ""])
def test_a_tilde_count_not_in_ascii_digits_is_bad_input(store: Store, n: str) -> None:
    _chain(store, "a", n=5)
    with pytest.raises(InvalidInputError) as info:
        store.resolve(f"a@main~{n}")
    assert "non-negative integer" in info.value.what


@pytest.mark.parametrize(
    "name,error",
    [
        ("a@main~3", NotFoundError),  # past the root
        ("a@main~99999999999999999999", NotFoundError),
        ("a@nope", NotFoundError),
        ("nope@main", NotFoundError),
        ("@main", InvalidInputError),
        ("a@main\0", InvalidInputError),
        ("a\0@main", InvalidInputError),
        ("a@" + "x" * 201, InvalidInputError),
        ("a@\ud800", InvalidInputError),
    ],
)
def test_names_no_branch_holds_are_clear_errors(store: Store, name: str, error: type) -> None:
    _chain(store, "a", n=3)
    with pytest.raises(error):
        store.resolve(name)


def test_a_long_branch_name_resolves(store: Store) -> None:
    long = "é" * 100  # 200 UTF-8 bytes, the limit
    a = _chain(store, "a", long)
    assert store.resolve(f"a@{long}") == a[0]
    assert store.resolve(f"a@{long}~0") == a[0]


def _cli(store_dir: str, name: bytes) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", "inspect", name, "--store", store_dir],
        capture_output=True,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    "name,code",
    [
        ("r@main~²".encode(), 3),
        (b"r@\xffmain", 3),
        (b"\xff@main", 3),
        (b"r@main~\xb2", 3),
        (b"r@main~5", 4),
        (b"r@nope", 4),
        (b" r@main", 4),
    ],
)
def test_cli_names_exit_bad_input_or_not_found(tmp_path: Path, name: bytes, code: int) -> None:
    """Through the command line (argv bytes, not UTF-8 too): exit 3 or 4, no traceback."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as st:
        _chain(st, "r")
    done = _cli(path, name)
    assert done.returncode == code, done.stderr
    assert b"Traceback" not in done.stderr


# -- a name resolved while another process moves its branch -----------------------


def _mover(url: str, rounds: int, out: multiprocessing.Queue, reading: str) -> None:  # type: ignore[type-arg]
    """Extend r@main, resetting it two back every fifth step; report every acknowledged id
    with its parent (the tree a ``~2`` reading must come from). Starts once the reader
    reads (``reading`` exists): a reader slow to spawn under load read nothing (CI)."""
    deadline = time.monotonic() + 120
    while not os.path.exists(reading) and time.monotonic() < deadline:
        time.sleep(0.01)
    with cpstore.open(url) as st:
        for i in range(rounds):
            head = st.ref("r")
            if i % 5 == 4 and head is not None:
                parent = st.manifest(head).parent
                if parent is not None:
                    st.reset_ref("r", "main", parent, expected_old=head, operator="o", reason="t")
                    continue
            rec = st.recorder("r", parent=head)
            step = 0 if head is None else st.manifest(head).step + 1
            try:
                cid = rec.checkpoint(step, {"i": i})
            except ConflictError:
                continue
            out.put((cid, head))
    out.put(None)


def _reader(url: str, until: str, out: multiprocessing.Queue, reading: str) -> None:  # type: ignore[type-arg]
    seen: list[str] = []
    errors: list[str] = []
    with cpstore.open(url) as st:
        while not os.path.exists(until):
            try:
                seen.append(st.resolve("r@main~2"))
            except NotFoundError as exc:
                errors.append(exc.what)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            if len(seen) + len(errors) == 1:
                Path(reading).touch()
    out.put((seen, errors))


def test_tilde_names_on_a_branch_another_process_moves(url: str, tmp_path: Path) -> None:
    """``r@main~2`` read while another process extends and resets main: every answer is
    the grandparent of a checkpoint that was a head; the only error is "no ancestor"."""
    with cpstore.open(url) as st:
        first = _chain(st, "r", n=3)
    ctx = multiprocessing.get_context("spawn")
    moves, reads = ctx.Queue(), ctx.Queue()
    until, reading = str(tmp_path / "done"), str(tmp_path / "reading")
    reader = ctx.Process(target=_reader, args=(url, until, reads, reading), daemon=True)
    mover = ctx.Process(target=_mover, args=(url, 60, moves, reading), daemon=True)
    reader.start()
    mover.start()
    parent_of: dict[str, str | None] = {first[0]: None, first[1]: first[0], first[2]: first[1]}
    try:
        while (item := moves.get(timeout=300)) is not None:
            parent_of[item[0]] = item[1]
    finally:
        Path(until).touch()  # the reader stops however the mover ended
    seen, errors = reads.get(timeout=300)
    mover.join(60)
    reader.join(60)
    assert mover.exitcode == 0 and reader.exitcode == 0
    grand = {parent_of[p] for p in parent_of.values() if p is not None}
    assert seen and set(seen) <= grand
    assert all("no ancestor 2 back" in e for e in errors), errors
    with cpstore.open(url) as st:
        assert st.verify().ok


def _collide(url: str, prefix: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Record on run w until a checkpoint id starts with ``prefix``; report it."""
    with cpstore.open(url) as st:
        rec = st.recorder("w")
        for i in range(5000):
            cid = rec.checkpoint(i, {"i": i})
            if cid.startswith(prefix):
                out.put(cid)
                return
    out.put(None)


def test_a_prefix_another_process_makes_ambiguous(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the other process's put the prefix names X; after, InvalidInputError naming
    both, never one of them. (A 2-hex prefix, allowed here only, so a collision is cheap.)"""
    monkeypatch.setattr(ids, "MIN_PREFIX", 2)
    with cpstore.open(url) as st:
        x = _chain(st, "r")[0]
        prefix = x[:2]
        assert st.resolve(prefix) == x
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        writer = ctx.Process(target=_collide, args=(url, prefix, out), daemon=True)
        writer.start()
        other = out.get(timeout=300)
        writer.join(60)
        assert other is not None and other != x
        with pytest.raises(InvalidInputError) as info:
            st.resolve(prefix)
        assert x in str(info.value.expected) and other in str(info.value.expected)
        assert st.resolve(x[:16]) == x  # a longer prefix still names X alone
