"""review102: refkey100's neighbour check attacked with hypothesis, intact and damaged.

Intact stores: run ids and branch names drawn to sort next to one another (prefixes of one
another, characters at the UTF-8 boundaries 0x7f/0x80/0x7ff/0x800/0xffff/0x10000, 0x01 just
past the key's NUL, any surrogate-free character, names up to the 200-byte limit, many
runs): every create from nothing and every absent read passes, on both engines.

Damaged stores: one bit flipped anywhere in one ref row's key (the row renamed behind
cpstore's back, the table's count kept) or value. A value flip reads as IntegrityError at
the ref itself. A key flip must be refused by the absent read of the true key and by its
create wherever the documented walk looks (``ref_neighbours``): the damaged row among
its run's rows while the run holds at most ``RUN_ROWS`` refs, or with no other row of the
run between it and the key; outside the run's rows, with no other row between it and the
run's rows. The other flips (an early byte of the run id moving the row among other runs'
rows, a big run's branch moved away from the key) are the documented blind spot: the
oracle below says which, from the table as stored, and only those may read None.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_cluster import backend_url, fresh_url  # noqa: F401 - fixture

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.facade import Store
from cpstore.store.model import MAX_NAME_BYTES, ref_key
from cpstore.store.ref_neighbours import RUN_ROWS
from cpstore.store.refs import SET, read_ref, write_ref

_EDGES = [
    "a",
    "b",
    "~",
    "\x01",
    "\x7f",
    "\x80",
    "\xff",
    "é",
    "\u07ff",
    "\u0800",
    "\uffff",
    "\U00010000",
    "\U0010ffff",
]
_CHARS = st.sampled_from(_EDGES) | st.characters(
    exclude_categories=["Cs"], exclude_characters="\x00"
)
_SHORT = st.text(_CHARS, min_size=1, max_size=4)


def _cut(name: str) -> str:
    """``name`` repeated to the 200-byte limit, cut on a character boundary."""
    raw = (name * MAX_NAME_BYTES).encode()[:MAX_NAME_BYTES]
    return raw.decode("utf-8", "ignore")


_NAME = _SHORT | _SHORT.map(_cut)


@st.composite
def _names(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Refs whose keys crowd one another: each run or branch a fresh name, one an
    earlier name extended or cut (a prefix of another), or an earlier one reused."""
    out: list[tuple[str, str]] = []
    runs: list[str] = []
    for _ in range(draw(st.integers(1, 14))):
        how = draw(st.sampled_from(["new", "grow", "cut", "same"])) if runs else "new"
        if how == "new":
            run = draw(_NAME)
        elif how == "grow":
            run = _cut(draw(st.sampled_from(runs)) + draw(_SHORT))
        elif how == "cut":
            base = draw(st.sampled_from(runs))
            run = base[: draw(st.integers(1, len(base)))]
        else:
            run = draw(st.sampled_from(runs))
        runs.append(run)
        for _ in range(draw(st.integers(1, RUN_ROWS + 3))):
            out.append((run, draw(_NAME)))
    return out


_CID = bytes(range(16))  # a ref's target is not read by a create or a read of its head


def _create(st_: Store, key: bytes) -> None:
    """A ref created from nothing, through the one path every create takes."""
    b = st_.backend

    def write(txn: Any) -> None:
        assert read_ref(txn, b.dbs, key, layout=2) is None
        write_ref(txn, b.dbs, key, _CID, SET, old=None)

    b.write_txn(write)


def _rows(st_: Store) -> list[bytes]:
    b = st_.backend
    with b.read_txn() as txn, txn.cursor(db=b.db("refs")) as cur:
        return sorted(bytes(k) for k, _ in cur)


def _swap(st_: Store, old: bytes, new: bytes, value: bytes | None = None) -> bytes:
    """Row ``old`` moved to key ``new`` (its value replaced by ``value`` when given), the
    digest untouched: damage behind cpstore's back. The old value."""
    b = st_.backend
    refs = b.db("refs")
    kept: list[bytes] = []

    def write(txn: Any) -> None:
        stored = bytes(txn.get(old, None, refs))
        kept.append(stored)
        txn.delete(old, db=refs)
        txn.put(new, stored if value is None else value, db=refs)

    b.write_txn(write)
    return kept[0]


def _seen(rows: list[bytes], key: bytes, damaged: bytes) -> bool:
    """Whether the documented walk for absent ``key`` meets row ``damaged`` (``rows``:
    the table as stored, ``damaged`` in it, ``key`` not)."""
    prefix = key[: key.index(0) + 1]
    others = [r for r in rows if r != damaged]
    if damaged.startswith(prefix):
        mine = [r for r in rows if r.startswith(prefix)]
        if len(mine) <= RUN_ROWS:
            return True
        lo, hi = sorted((key, damaged))
        return not any(lo < r < hi for r in others if r.startswith(prefix))
    if damaged < prefix:
        return not any(damaged < r < prefix for r in others)
    end = prefix[:-1] + b"\x01"  # every key of the run sorts below it
    return not any(end <= r < damaged for r in others)


@contextmanager
def _opened(engine: str, tmp_path: Path, n: list[int]) -> Iterator[Store]:
    n[0] += 1
    url = str(tmp_path / f"s{n[0]}") if engine == "lmdb" else fresh_url()
    with cpstore.open(url) as opened:
        yield opened


_ENGINES = pytest.mark.parametrize("engine", ["lmdb", "postgresql"])


def _examples(engine: str) -> settings:
    return settings(
        max_examples=40 if engine == "lmdb" else 8,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )


@_ENGINES
def test_intact_creates_and_misses_are_never_refused(engine: str, tmp_path: Path) -> None:
    n = [0]

    @_examples(engine)
    @given(_names(), st.randoms(use_true_random=False))
    def run(names: list[tuple[str, str]], rng: Any) -> None:
        with _opened(engine, tmp_path, n) as s:
            made: list[tuple[str, str]] = []
            for run_id, branch in names:
                if (run_id, branch) in made:
                    continue
                assert s.ref(run_id, branch) is None
                _create(s, ref_key(run_id, branch))
                made.append((run_id, branch))
            for run_id, branch in rng.sample(made, min(len(made), 6)):
                for probe in (branch + "\x01", branch[:-1] or "\x01", branch + "\U0010ffff"):
                    if (run_id, probe) not in made and len(probe.encode()) <= MAX_NAME_BYTES:
                        assert s.ref(run_id, probe) is None
                for probe in (run_id + "\x01", run_id + "\x7f", run_id[:-1] or "\x01"):
                    if len(probe.encode()) <= MAX_NAME_BYTES and (probe, "main") not in made:
                        assert s.ref(probe, "main") is None

    run()


@_ENGINES
def test_one_flipped_bit_is_refused_wherever_the_walk_looks(engine: str, tmp_path: Path) -> None:
    n = [0]

    @_examples(engine)
    @given(_names(), st.data())
    def run(names: list[tuple[str, str]], data: st.DataObject) -> None:
        with _opened(engine, tmp_path, n) as s:
            made = list(dict.fromkeys(names))
            for run_id, branch in made:
                _create(s, ref_key(run_id, branch))
            key = ref_key(*data.draw(st.sampled_from(made)))
            in_value = data.draw(st.booleans())
            if in_value:
                value = _swap(s, key, key)
                at = data.draw(st.integers(0, len(value) - 1))
                flipped = bytearray(value)
                flipped[at] ^= 1 << data.draw(st.integers(0, 7))
                _swap(s, key, key, bytes(flipped))
                with pytest.raises(IntegrityError):
                    _read(s, key)
                return
            at = data.draw(st.integers(0, len(key) - 1))
            damaged = bytearray(key)
            damaged[at] ^= 1 << data.draw(st.integers(0, 7))
            if bytes(damaged) in _rows(s):
                return  # the flip gives another stored key: no rename without a loss
            _swap(s, key, bytes(damaged))
            seen = _seen(_rows(s), key, bytes(damaged))
            try:
                got = _read(s, key)
            except IntegrityError:
                got = "refused"
            if seen:
                assert got == "refused", (key, bytes(damaged))
                with pytest.raises(IntegrityError):
                    _create(s, key)
            else:
                assert got in ("refused", None)

    run()


def _read(s: Store, key: bytes) -> object:
    """``Store.ref`` of ``key`` (a name, or a key no name encodes to read raw)."""
    run_id, _, branch = key.partition(b"\0")
    return s.ref(run_id.decode(), branch.decode())


@pytest.mark.parametrize("at", [1, 0], ids=["nul-flipped", "late-run-byte"])
def test_a_big_runs_row_moved_just_past_its_rows_is_refused(url: str, at: int) -> None:
    """Found by the test above: a run of more than RUN_ROWS refs (a LangGraph thread's
    namespaces and forks) had its rows beside the key checked but not the row just past
    its rows, which the docs say is checked in every run: a flip of the NUL (``0\\x01a``)
    or of the run id's last byte (``0`` as ``1``) moved the ref there, and ``ref()`` read
    None and its recorder started the run anew, with no other run's row between."""
    with cpstore.open(url) as s:
        key = ref_key("0", "a")  # not the run's last: the rows beside it are the run's
        for branch in ["a", *(f"b{i}" for i in range(RUN_ROWS + 1))]:
            _create(s, ref_key("0", branch))
        damaged = bytearray(key)
        damaged[at] ^= 0x01
        _swap(s, key, bytes(damaged))
        with pytest.raises(IntegrityError) as read:
            s.ref("0", "a")
        assert "it is that ref" in str(read.value)
        with pytest.raises(IntegrityError):
            _create(s, key)
