"""Audit 35: PostgreSQL sessions terminated at random beside writer and sweeper processes.

Two writer processes (each its own pool) record checkpoints whose state holds a chat
history (an ``AppendLog`` of the same messages on both, so their chunk trees share
frames and nodes) and append audit records; a sweeper process records a scratch run
of the same messages and deletes it again (``gc(delete_run=...)``: the sweep removes
only what no live head reaches). Meanwhile this process calls
``pg_terminate_backend`` on every other session of the database, again and again,
so connections die between transactions, inside them and while committing.

Every outcome a process is told is checked against the store afterwards:

- acknowledged (a checkpoint id, an audit record): stored, at that index;
- refused with an error that says nothing was committed (a ``StoreConnectionError``
  "nothing of this transaction was committed", a ``ConflictError``): absent;
- lost while committing ("committed whole or not at all"): either, never half;
- any other error is a finding (an aborted txn reused, a damaged read, ...).

Each writer's head then reads back its whole history byte-identical, and
``verify()`` is clean (no chunk a live checkpoint uses was swept).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixtures
from test_pg_faults import _terminate_all

import cpstore
from cpstore.errors import NotFoundError
from cpstore.store import Store

#: The messages every process appends (the same bytes: shared chunks across runs).
MESSAGE = "msg {i} " + "chunked history text " * 12

_CHILD = r"""
import json, sys, time
import cpstore
from cpstore.errors import ConflictError, CpstoreError, StoreConnectionError
from cpstore.native.append_log import AppendLog

url, role, seconds, message = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
least = int(sys.argv[5])  # failures to meet before stopping (0: none are expected)

def outcome(exc):
    text = str(exc)
    if isinstance(exc, StoreConnectionError) and "committed whole or not at all" in text:
        return "unknown"
    if isinstance(exc, StoreConnectionError) and (
        "nothing of this transaction was committed" in text
        or "could not be reached" in text
        or "no connection to the server" in text
    ):
        return "absent"
    if isinstance(exc, ConflictError):
        return "absent"
    return "other"

def say(**fields):
    print(json.dumps(fields), flush=True)

def opened():
    while True:
        try:
            return cpstore.open(url)
        except StoreConnectionError:
            time.sleep(0.01)

st = opened()
attempted = [None]
commit = st.backend.commit

def noted(op):
    attempted[0] = bytes(op.cid).hex()  # the id of the checkpoint this attempt writes
    return commit(op)

st.backend.commit = noted
print("ready", flush=True)
deadline = time.monotonic() + seconds
bound = time.monotonic() + 10 * seconds
n = failures = 0
rec = None
log = None
while time.monotonic() < deadline or (failures < least and time.monotonic() < bound):
    n += 1
    nonce = f"{role}-{n}"
    if role.startswith("w"):
        attempted[0] = None
        try:
            if rec is None:
                rec = st.recorder(role)
                log = AppendLog()
                if rec.head is not None:
                    with st.read(rec.head) as view:
                        log.extend(view.state()["history"])
            log.append(message.format(i=len(log)))
            cid = rec.checkpoint(n, {"history": log}, metadata={"n": nonce})
            say(op="cp", nonce=nonce, status="ok", cid=cid, size=len(log))
        except CpstoreError as exc:
            kind = outcome(exc)
            failures += 1
            say(op="cp", nonce=nonce, status=kind, error=type(exc).__name__, text=str(exc)[:300],
                cid=attempted[0])
            if kind != "absent" or isinstance(exc, ConflictError):
                rec = None  # the head is not known: read it again
            # else the recorder goes on: its next checkpoint holds the element this one
            # appended too (a failed commit's continued tree is stashed again whole)
        try:
            a = st.append_audit("note", {"n": nonce})
            say(op="audit", nonce=nonce, status="ok", digest=a.digest, index=a.index)
        except CpstoreError as exc:
            failures += 1
            say(op="audit", nonce=nonce, status=outcome(exc), error=type(exc).__name__,
                text=str(exc)[:300])
    else:
        try:
            r = st.recorder("scratch")
            r.checkpoint(n, {"history": [message.format(i=i) for i in range(40 + n % 30)]})
            st.gc(keep_last=None, run_id=None, delete_run="scratch", dry_run=False)
            st.prune(keep_last=2)  # the writers' older checkpoints: their frames are shared
            say(op="sweep", nonce=nonce, status="ok")
        except CpstoreError as exc:
            kind = outcome(exc)
            if type(exc).__name__ == "NotFoundError":
                kind = "absent"  # the scratch run's checkpoint was lost with its connection
            failures += 1
            say(op="sweep", nonce=nonce, status=kind, error=type(exc).__name__,
                text=str(exc)[:300])
st.close()
say(op="done")
"""


def _spawn(
    url: str, role: str, seconds: float, out: Path, least: int = 3
) -> subprocess.Popen[bytes]:
    """A child process writing its outcomes to ``out`` (a file: a pipe nobody reads
    while the children run would fill and stop them)."""
    with out.open("wb") as sink, out.with_suffix(".err").open("wb") as errors:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, role, str(seconds), MESSAGE, str(least)],
            stdout=sink,
            stderr=errors,  # the pool logs each dead connection it drops
        )
    deadline = time.monotonic() + 120
    while b"ready" not in out.read_bytes():
        failed = out.with_suffix(".err").read_text()[-3000:]
        assert child.poll() is None and time.monotonic() < deadline, failed
        time.sleep(0.05)
    return child


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    """A new, empty store on this process's test cluster (started once)."""
    request.getfixturevalue("pg_cluster")
    return fresh_url()


def _fate(st: Store, cid: str) -> str:
    """``stored``, ``pruned`` (stored once: gc left its tombstone) or ``never``."""
    try:
        with st.read(cid) as view:
            view.state()
    except NotFoundError as exc:
        return "pruned" if "pruned" in exc.what else "never"
    return "stored"


def test_terminated_sessions_never_lose_an_ack_nor_keep_a_refused_write(
    url: str, tmp_path: Path
) -> None:
    pg_url = url
    with cpstore.open(pg_url):
        pass  # made once, before the processes open it
    seconds = 6.0
    roles = ("w1", "w2", "sweeper")
    children = {r: _spawn(pg_url, r, seconds, tmp_path / f"{r}.out") for r in roles}
    kills = 0
    while any(child.poll() is None for child in children.values()):
        time.sleep(0.15)
        kills += _terminate_all(pg_url)
    lines: dict[str, list[dict[str, Any]]] = {}
    for role, child in children.items():
        text = (tmp_path / f"{role}.out").read_text()
        assert child.wait() == 0, (tmp_path / f"{role}.err").read_text()[-3000:]
        lines[role] = [json.loads(x) for x in text.splitlines()[1:] if x.strip()]
        assert lines[role][-1] == {"op": "done"}, text[-3000:]
    every = [x for v in lines.values() for x in v if x["op"] != "done"]
    others = [x for x in every if x["status"] == "other"]
    assert not others, others[:5]  # every failure is a documented outcome
    assert kills > 0
    failed = [x for x in every if x["status"] != "ok"]
    assert len(failed) >= 3, "too few operations met a terminated session"
    with cpstore.open(pg_url) as st:
        report = st.verify()  # no chunk a live checkpoint uses was swept
        assert report.ok, report.problems
        audit = {r.body["n"]: r for r in st.audit_records(kind="note")}
        for role in ("w1", "w2"):
            nonces = {m.metadata["n"] for m in st.history(role)}
            for x in [x for x in lines[role] if x["op"] == "cp"]:
                if x["status"] == "ok":  # acknowledged: stored (or pruned since)
                    assert _fate(st, x["cid"]) in ("stored", "pruned"), x
                elif x["status"] == "absent":  # "nothing committed": never stored
                    assert x["nonce"] not in nonces, x
                    assert x["cid"] is None or _fate(st, x["cid"]) == "never", x
            head = st.ref(role)
            assert head is not None
            with st.read(head) as view:
                state = view.state()
            assert isinstance(state, dict)
            history = state["history"]
            assert history == [MESSAGE.format(i=i) for i in range(len(history))]
            for x in [x for x in lines[role] if x["op"] == "audit"]:
                if x["status"] == "ok":
                    got = audit[x["nonce"]]
                    assert (got.digest, got.index) == (x["digest"], x["index"]), x
                elif x["status"] == "absent":
                    assert x["nonce"] not in audit, x
        indexes = [r.index for r in st.audit_records()]
        assert indexes == list(range(len(indexes)))


def test_lmdb_writers_reusing_chunks_beside_a_concurrent_sweeper_lose_nothing(
    tmp_path: Path,
) -> None:
    """The same three processes on one LMDB store, running at once (no kills): every
    checkpoint and audit append is acknowledged, the heads read back whole, verify clean.
    (tests/test_append_state.py sweeps between puts, one at a time.)"""
    path = str(tmp_path / "s")
    with cpstore.open(path):
        pass
    roles = ("w1", "w2", "sweeper")
    children = {r: _spawn(path, r, 4.0, tmp_path / f"{r}.out", least=0) for r in roles}
    lines: dict[str, list[dict[str, Any]]] = {}
    for role, child in children.items():
        text = (tmp_path / f"{role}.out").read_text() if child.wait() == 0 else ""
        assert text, (tmp_path / f"{role}.err").read_text()[-3000:]
        lines[role] = [json.loads(x) for x in text.splitlines()[1:] if x.strip()]
        assert lines[role][-1] == {"op": "done"}
    every = [x for v in lines.values() for x in v if x["op"] != "done"]
    assert every and all(x["status"] == "ok" for x in every), [
        x for x in every if x["status"] != "ok"
    ][:5]
    with cpstore.open(path) as st:
        report = st.verify()
        assert report.ok, report.problems
        for role in ("w1", "w2"):
            cps = [x for x in lines[role] if x["op"] == "cp"]
            assert st.ref(role) == cps[-1]["cid"]
            for x in cps:
                assert _fate(st, x["cid"]) in ("stored", "pruned"), x
            with st.read(cps[-1]["cid"]) as view:
                state = view.state()
            assert isinstance(state, dict)
            assert state["history"] == [MESSAGE.format(i=i) for i in range(cps[-1]["size"])]
