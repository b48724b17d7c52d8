"""A handle opened before another process keyed the store's (then empty) audit log.

A log is keyed from its first record or never (docs/security.md); whether it is keyed
was read once, at open. A handle opened without the key on the empty log, then keyed
by another process (``open(..., audit_key=)``), still took the log for unkeyed: it
appended records with no MAC to the keyed log (every keyed handle's verify and gates
refused the log from then on) and trusted records the keyed handles refuse. Whether
the log is keyed is now read in the txn that appends or trusts a record, on LMDB
and PostgreSQL alike.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)
from test_decision_support import stored_replay

from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError
from cpstore.run.model import ReplayMode
from cpstore.store.facade import open as open_store
from cpstore.store.transfer import transfer

KEY = b"k" * 32
WAIT = 120


def _stale_handle(url: str, ready: Any, go: Any, out: Any) -> None:
    """Open without the key on the empty log, wait for the log to be keyed elsewhere,
    then append a record and ask whether record 0 (a keyed handle's) can be trusted."""
    try:
        with open_store(url) as st:
            ready.set()
            if not go.wait(WAIT):
                out.put(("error", "never told to go"))
                return
            try:
                st.check_audit_mac(0)
                trusted = "trusted"
            except CpstoreError as exc:
                trusted = f"refused: {exc.what}"
            try:
                st.append_audit("note", {"by": "stale handle"})
                appended = "appended"
            except CpstoreError as exc:
                appended = f"refused: {exc.what}"
            out.put((appended, trusted))
    except BaseException as exc:
        out.put(("error", repr(exc)))


def test_a_handle_opened_before_the_log_was_keyed_neither_appends_nor_trusts(url: str) -> None:
    with open_store(url):
        pass  # the store exists, its audit log empty and unkeyed
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_stale_handle, args=(url, ready, go, out))
    child.start()
    try:
        assert ready.wait(WAIT)
        with open_store(url, audit_key=KEY) as keyed:  # keys the empty log
            keyed.append_audit("note", {"by": "keyed handle"})
        go.set()
        appended, trusted = out.get(timeout=WAIT)
    finally:
        child.join(timeout=WAIT)
    assert child.exitcode == 0
    assert appended.startswith("refused: ") and "keyed" in appended, appended
    assert trusted.startswith("refused: ") and "keyed" in trusted, trusted
    with open_store(url, audit_key=KEY) as keyed:
        assert [r.body["by"] for r in keyed.audit_records()] == ["keyed handle"]
        report = keyed.verify()
        assert report.ok, report.problems


def _stale_destination(src: str, dst: str, ready: Any, go: Any, out: Any) -> None:
    """Open the destination without the key on its empty log, wait for it to be keyed
    elsewhere, then push the source's quarantined checkpoint into it."""
    try:
        with open_store(src) as source, open_store(dst) as dest:
            ready.set()
            if not go.wait(WAIT):
                out.put("never told to go")
                return
            try:
                report = transfer(source.backend, dest.backend)
                out.put(f"landed, {report.decisions} decision(s) carried")
            except CpstoreError as exc:
                out.put(f"refused: {exc.what}")
    except BaseException as exc:
        out.put(repr(exc))


def test_a_push_into_a_log_keyed_after_the_open_carries_no_unkeyed_decision(
    url: str, tmp_path: Path
) -> None:
    """The transfer's "keyed destination opened without its key" refusal (docs/store.md)
    is decided on the log as it is when the push runs, not as it was at the open."""
    dst = str(tmp_path / "dst") if "://" not in url else url.replace("schema=", "schema=dst_")
    with open_store(url) as source:
        rec = source.recorder("r")
        rec.observe(1, "clock", b"t", pinned_at=1.0)
        rec.token("rng", 1)
        cid = str(rec.checkpoint(1, b"state"))
        replay = stored_replay(source, cid, mode=ReplayMode.BEST_EFFORT)
        assert validate(cid, replay, store=source).verdict is Verdict.QUARANTINE
    with open_store(dst):
        pass
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_stale_destination, args=(url, dst, ready, go, out))
    child.start()
    try:
        assert ready.wait(WAIT)
        with open_store(dst, audit_key=KEY) as keyed:
            keyed.append_audit("note", {"by": "keyed handle"})
        go.set()
        told = out.get(timeout=WAIT)
    finally:
        child.join(timeout=WAIT)
    assert child.exitcode == 0
    assert told.startswith("refused: ") and "keyed" in told, told
    with open_store(dst, audit_key=KEY) as keyed:
        assert keyed.ref("r") is None  # nothing copied
        assert [r.kind for r in keyed.audit_records()] == ["note"]
        report = keyed.verify()
        assert report.ok, report.problems
