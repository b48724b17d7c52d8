"""review70: a replay's ledger guard takes no ledger from a reader that skips hash checks.

``ReplaySession`` (and ``LedgerGuard.from_checkpoint``) took the effects log from a view
opened with ``store.read(id, verify=False)`` as it was stored: a damaged ledger made a
guard that admits effects by damaged digests, silently, where a verifying reader refuses
the ledger with IntegrityError. The guard decides which side effects escape, so such a
reader is now refused with InvalidInputError; the pinned reader and the cursor, which
check each payload and token against its record, still take one on their own
(tests/test_audit59_pinned_payload.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stored import edit_raw

import cpstore
from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.replay import LedgerGuard, ReplaySession
from cpstore.store.facade import open as open_store


def _sealed(path: Path) -> tuple[str, bytes]:
    """A checkpoint sealing a ledger of two effects; its id and the effects log's key."""
    with open_store(path) as store:
        rec = store.recorder("r")
        rec.effect("mail", b"hello")
        rec.effect("bank", b"pay 10")
        cid = rec.checkpoint(1, b"state", seal_ledger=True)
        rec.close()
        key = bytes.fromhex(store.manifest(cid).effects_digest or "")
    return cid, key


def test_a_session_refuses_a_reader_that_skips_hash_checks(tmp_path: Path) -> None:
    path = tmp_path / "s"
    cid, _ = _sealed(path)
    with open_store(path) as store:
        with store.read(cid, verify=False) as cp:
            assert cp.verified is False
            with pytest.raises(InvalidInputError, match="verify=False") as told:
                ReplaySession(cp)
            assert told.value.where == f"checkpoint {cid}"
            with pytest.raises(InvalidInputError, match="verify=False"):
                LedgerGuard.from_checkpoint(cp)
        with store.read(cid) as cp:
            assert cp.verified is True
            session = ReplaySession(cp)
            assert session.guard.check("mail", b"hello").seq == 0
            assert session.guard.check("bank", b"pay 10").seq == 1
            run = session.finish(cpstore.state_digest(b"state"))
        assert len(run.effects) == 2


def test_a_damaged_ledger_makes_no_guard_verified_or_not(tmp_path: Path) -> None:
    """Verified, the damaged ledger is an IntegrityError; unverified, it used to become the
    guard's ledger with nothing said."""
    path = tmp_path / "s"
    cid, key = _sealed(path)
    edit_raw(path, "objects", key, lambda old: old[:-1] + bytes([old[-1] ^ 0x01]))
    with open_store(path) as store:
        with store.read(cid) as cp, pytest.raises(IntegrityError):
            ReplaySession(cp)
        with store.read(cid, verify=False) as cp, pytest.raises(InvalidInputError):
            ReplaySession(cp)  # before: a guard over the damaged ledger
