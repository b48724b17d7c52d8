"""Store layout 5, adversarial: what the heap (content.py) must hold under damage, seq
reuse, mixed layouts and another process's upgrade (audit6's findings and checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stored import to_layout_4

import cpstore
from cpstore.errors import IntegrityError, NotFoundError, StoreError
from cpstore.store.facade import Store


def _record(st: Store, run: str, steps: int, start: int = 0) -> list[str]:
    rec = st.recorder(run)
    return [rec.checkpoint(i, {"a": f"{run} {i} " * 40, "b": i}) for i in range(start, steps)]


def _damage(st: Store, fn: Any) -> None:
    """Run ``fn(txn, dbs)`` in a raw write txn (damage behind the store's back)."""
    with st.backend.env.env.begin(write=True) as txn:
        fn(txn, st.backend.dbs)


_WRITE = (
    "import sys, cpstore\n"
    "with cpstore.open(sys.argv[1]) as st:\n"
    "    rec = st.recorder('old')\n"
    "    print(rec.checkpoint(9, {'a': 'old new ' * 40, 'b': 9}))\n"
)


class TestAppendRefused:
    def test_a_put_whose_heap_append_is_refused_is_not_acknowledged(self, tmp_path: Path) -> None:
        """A stray heap key sorting after every seq makes MDB_APPEND refuse the entry: the put
        raises IntegrityError and writes nothing, instead of an index row naming no entry."""
        with cpstore.open(tmp_path / "s") as st:
            _record(st, "r", 1)
            _damage(st, lambda txn, dbs: txn.put(b"\x00\x05", b"stray", db=dbs["heap"]))
            with pytest.raises(IntegrityError, match="heap"):
                st.put_object(b"a new object " * 20)
            with pytest.raises(IntegrityError, match="heap"):
                _record(st, "r", 2, start=1)
            with st.backend.read_txn() as txn:  # nothing of either put landed
                assert txn.stat(st.backend.db("oloc"))["entries"] == 2
                assert txn.stat(st.backend.db("cloc"))["entries"] == 1
            assert any("heap/0005" in p.where for p in st.verify().problems)


class TestReadOnlyAcrossUpgrade:
    def test_a_nested_read_across_another_process_upgrade_never_misreports(
        self, tmp_path: Path
    ) -> None:
        """A read-only layout-4 handle whose thread holds a read while another process
        upgrades and writes: a nested read raises StoreError (end the outer read), never
        NotFoundError for the acknowledged checkpoint nor a false IntegrityError or verify
        problem; once the outer read ends, everything reads."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            old = _record(st, "old", 3)
        to_layout_4(path)
        with cpstore.open(path, readonly=True) as ro:
            with ro.read(old[0]) as outer:
                new = subprocess.run(
                    [sys.executable, "-c", _WRITE, str(path)],
                    check=True,
                    timeout=60,
                    capture_output=True,
                    text=True,
                ).stdout.strip()
                attempts: list[Any] = [
                    lambda: ro.ref("old"),
                    lambda: ro.read(new).__enter__(),
                    lambda: ro.latest("old").__enter__(),
                    ro.verify,
                ]
                for attempt in attempts:
                    with pytest.raises(StoreError, match="upgraded") as info:
                        attempt()
                    assert not isinstance(info.value, (IntegrityError, NotFoundError))
                assert outer.state_part("b") == 0  # the outer read's snapshot reads on
            assert ro.ref("old") == new
            with ro.read(new) as cp:
                assert cp.state_part("b") == 9
            report = ro.verify()
            assert report.ok, report.problems
