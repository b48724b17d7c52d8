"""An interrupt landing anywhere in a sweep, a ref move or a hold's release.

Each maintenance call (``prune``, ``gc(delete_run=)`` with a decided checkpoint swept,
so its ``gc`` audit record is written, ``delete_run``, ``reset_ref``, ``set_ref``,
``release_retained``, ``release_retained_by``) runs on a small store with a trace
function raising KeyboardInterrupt at the k-th function entry of cpstore's own code
(every ``STRIDE``-th k, through to the call running through; tests/trace_interrupts.py).
After each landing:

* the store is one of exactly two states: the call's (it landed whole) or the one before
  it (nothing of it): refs, holds, the stored checkpoints and the audit kinds;
* the same handle still writes (no writer lock or txn left held): the call again, or a
  record, goes through;
* closed and opened again, ``verify()`` is clean and every ref's history reads whole.

LMDB and PostgreSQL (psycopg's own frames left out: tests/test_psycopg_interrupts.py).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixture
from trace_interrupts import interrupting, not_in_psycopg

import cpstore
from cpstore.store.facade import Store

#: Every STRIDE-th function entry gets the interrupt (a full sweep of each is ~10x longer);
#: PostgreSQL's calls make more entries and each store costs a schema: a wider stride.
STRIDE = {"lmdb": 7, "postgresql": 17}

Snapshot = tuple[Any, ...]


def _ours(frame: FrameType) -> bool:
    return "/cpstore/" in frame.f_code.co_filename and not_in_psycopg(frame)


def _build(url: str) -> dict[str, str]:
    """r/main: m0..m3 reset back to m2 (a hold on m3); r/b forked at m1, two more;
    q/main: three; a decision about q's first checkpoint."""
    names: dict[str, str] = {}
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        for i in range(4):
            rec.observe(i, "src", b"shared-%d" % (i % 2), pinned_at=1.0)
            names[f"m{i}"] = rec.checkpoint(i, {"i": i, "blob": b"x" * 500 * (i % 2)})
        rec.close()
        st.reset_ref("r", "main", names["m2"], expected_old=names["m3"], operator="o", reason="t")
        rec = st.recorder("r", branch="b", parent=names["m1"])
        for i in range(2):
            names[f"b{i}"] = rec.checkpoint(10 + i, {"i": i, "blob": b"x" * 500})
        rec.close()
        rec = st.recorder("q")
        for i in range(3):
            names[f"q{i}"] = rec.checkpoint(i, {"q": i, "blob": b"x" * 500 * (i % 2)})
        rec.close()
        body = {
            "decision_id": "d-q0",
            "recorded": {"checkpoint_id": names["q0"], "run_id": "q", "branch": "main"},
            "findings": [],
            "verdict": "ACCEPT",
        }
        st.append_audit("decision", body)
    return names


def _snapshot(st: Store, names: dict[str, str]) -> Snapshot:
    refs = {(run, b): h for run in st.runs() for b, h in st.branches(run).items()}
    holds = {
        c: sorted((h["run"], h["branch"]) for h in v["holds"]) for c, v in st.retained().items()
    }
    stored = set()
    for name, cid in names.items():
        if st.verify_checkpoint(cid) == ():
            stored.add(name)
    kinds = [r.kind for r in st.audit_records()]
    return (refs, holds, stored, kinds)


OPS: dict[str, Callable[[Store, dict[str, str]], Any]] = {
    "prune": lambda st, n: st.prune(keep_last=1),
    "gc_delete_run": lambda st, n: st.gc(delete_run="q"),
    "reset_ref": lambda st, n: st.reset_ref(
        "r", "b", n["m0"], expected_old=n["b1"], operator="o", reason="t"
    ),
    "set_ref": lambda st, n: st.set_ref("r", "main", n["m3"], expected_old=n["m2"]),
    "release_retained": lambda st, n: st.release_retained(n["m3"], operator="o", reason="t"),
    "release_retained_by": lambda st, n: st.release_retained_by(
        st.retained()[n["m3"]]["audit"], operator="o", reason="t"
    ),
    "delete_run": lambda st, n: st.delete_run("r"),
}


def _sweep(url_of: Callable[[], str], op: str, stride: int) -> None:
    call = OPS[op]
    # What the call does when nothing interrupts it.
    url = url_of()
    names = _build(url)
    with cpstore.open(url) as st:
        before = _snapshot(st, names)
        call(st, names)
        after = _snapshot(st, names)
    assert before != after
    problems: list[str] = []
    landings = 0
    for k in range(1, 100_000, stride):
        url = url_of()
        names = _build(url)
        with cpstore.open(url) as st:
            trace, landed = interrupting(k, _ours)
            gc.disable()  # collector off while hooked: tests/trace_interrupts.py
            sys.settrace(trace)
            try:
                call(st, names)
            except KeyboardInterrupt:
                pass
            finally:
                sys.settrace(None)
                gc.enable()
            if not landed:
                break  # the call ran through: every landing was tried
            landings += 1
            now = _snapshot(st, names)
            if now not in (before, after):
                problems.append(f"{landed[0]}: neither before nor after: {now}")
                continue
            if now == before:
                call(st, names)  # the same handle writes: no lock or txn left held
                if _snapshot(st, names) != after:
                    problems.append(f"{landed[0]}: the call again did not land whole")
            rec = st.recorder("z")
            rec.checkpoint(1, {"k": k})
            rec.close()
        with cpstore.open(url) as st:
            report = st.verify()
            if not report.ok:
                problems.append(f"{landed[0]}: verify after reopen: {report.problems[:3]}")
            for run in st.runs():
                for branch in st.branches(run):
                    for m in st.history(run, branch):
                        if st.verify_checkpoint(m.id) != ():
                            problems.append(f"{landed[0]}: {run}/{branch} {m.id} damaged")
    assert landings > 3, landings
    assert not problems, problems[:5]


@pytest.mark.parametrize("op", sorted(OPS))
def test_interrupted_maintenance_is_all_or_nothing_on_lmdb(op: str, tmp_path: Any) -> None:
    """LMDB: every landing leaves the call whole or undone, and the store usable."""
    made = iter(range(100_000))
    _sweep(lambda: str(tmp_path / f"s{next(made)}"), op, STRIDE["lmdb"])


@pytest.mark.parametrize("op", sorted(OPS))
def test_interrupted_maintenance_is_all_or_nothing_on_postgresql(
    op: str,
    pg_cluster: object,  # noqa: F811
) -> None:
    """PostgreSQL: the same, outside psycopg's own frames."""
    _sweep(fresh_url, op, STRIDE["postgresql"])
