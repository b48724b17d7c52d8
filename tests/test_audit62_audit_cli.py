"""audit62: ``cpstore audit`` lists no altered record as if it were sound.

A byte flipped inside a record that still decodes (its ``time``) was listed with exit 0
unless ``--check`` was given. The listing now checks that the chain vouches for each
record it prints (the next record's ``prev``, or the head's digest for the last) and
exits 5 at the first that it does not; ``--check`` reports it with the rest. Both
backends.
"""

from __future__ import annotations

import struct

import pytest
from audit_damage import flip_time
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

from cpstore.cli import main
from cpstore.cli.exit_codes import EXIT_INTEGRITY, EXIT_OK
from cpstore.decision.validate import validate
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

_INDEX = struct.Struct(">Q")


def _decided(store: Store, run: str) -> None:
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    cid = str(rec.checkpoint(1, b"state"))
    validate(cid, stored_replay(store, cid), store=store)


@pytest.mark.parametrize("index", [0, 2], ids=["middle", "last"])
def test_an_altered_record_is_exit_5(
    url: str, index: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(url) as store:
        for run in ("a", "b", "c"):
            _decided(store, run)
    assert main(["audit", "--store", url]) == EXIT_OK
    assert main(["audit", "--store", url, "--kind", "decision", "--start", "1"]) == EXIT_OK
    with open_store(url) as store:
        flip_time(store, index)
        assert len(list(store.audit_records())) == 3  # it still decodes
    capsys.readouterr()
    assert main(["audit", "--store", url]) == EXIT_INTEGRITY
    assert f"audit/{index}" in capsys.readouterr().err
    assert main(["audit", "--store", url, "--kind", "decision"]) == EXIT_INTEGRITY
    assert main(["audit", "--store", url, "--start", str(index), "--limit", "1"]) == (
        EXIT_INTEGRITY
    )
    assert main(["audit", "--store", url, "--check"]) == EXIT_INTEGRITY
    assert "AUDIT CHAIN BROKEN" in capsys.readouterr().out
    if index == 0:  # records the altered one does not touch still list
        assert main(["audit", "--store", url, "--start", "2"]) == EXIT_OK


def test_an_empty_listing_is_exit_0(url: str) -> None:
    with open_store(url) as store:
        _decided(store, "a")
    assert main(["audit", "--store", url, "--kind", "gc"]) == EXIT_OK
    assert main(["audit", "--store", url, "--start", "5"]) == EXIT_OK
