"""validate() of two stored checkpoints while another process grows the LMDB map (audit26).

validate holds the recorded side's read view open while it opens the replayed side's.
When another process doubled the map in between, LMDB refuses the second read until
this process adopts the new size, which it may only do with no read open: the caller,
who holds no view, got StoreError "the map must change size but this thread holds an
open read view" (chaos run, seed 26011, LMDB variant: ``validate`` refused so).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import StoreError

validate_module = importlib.import_module("cpstore.decision.validate")


def _grow(path: str) -> None:
    """Another process: write objects until the map has doubled more than once."""
    with cpstore.open(path, map_size=1 << 20) as st:
        for _ in range(12):
            st.put_object(os.urandom(256 * 1024))


def test_validate_while_another_process_grows_the_map_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "s")
    st = cpstore.open(path, map_size=1 << 20)
    rec = st.recorder("r")
    first = rec.checkpoint(0, {"a": 1})
    second = rec.checkpoint(1, {"a": 2})
    real = validate_module.load_side
    calls: list[str] = []

    def load_side(*args: Any, **kw: Any) -> Any:
        got = real(*args, **kw)
        if not calls:  # the recorded side's view is open: another process grows the map
            calls.append("grown")
            proc = multiprocessing.get_context("spawn").Process(target=_grow, args=(path,))
            proc.start()
            proc.join(timeout=120)
            assert proc.exitcode == 0
        return got

    monkeypatch.setattr(validate_module, "load_side", load_side)
    try:
        decision = cpstore.validate(first, second, store=st)
    except StoreError as exc:
        pytest.fail(f"validate refused by the map growth: {exc!r}")
    finally:
        monkeypatch.setattr(validate_module, "load_side", real)
    assert calls == ["grown"]
    assert decision.audit_digest is not None
    again = cpstore.validate(first, second, store=st)  # no growth: the same judgement
    assert (decision.verdict, decision.findings) == (again.verdict, again.findings)
    st.close()
