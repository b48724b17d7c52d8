"""review76: a harness access is a canonical value wherever a run is built.

``parse_document`` refuses a harness access with no canonical encoding, and
docs/run-document.md says ``Run(...)`` checks every field as a document's is; but
``Run`` took any object (an ``object()``, a set), and so did
``ReplaySession.harness_access``. Such a run validated, then could not be written:
``.cprun`` raised a CanonicalEncodingError, and msgpack a bare ``TypeError`` after 175
bytes were written. ``Run`` now refuses it as the document does (DocumentError at
``harness_accesses[i]``), and the session at the access (InvalidInputError).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from pg_cluster import backend_store  # noqa: F401 - fixture

import cpstore
from cpstore.errors import DocumentError, InvalidInputError
from cpstore.run.model import PackedTokens, Run
from cpstore.run.writer import write_document

NOT_CANONICAL: list[Any] = [object(), {1, 2}, [1, {"a": object()}], {(1, 2): 3}]


@pytest.mark.parametrize("access", NOT_CANONICAL, ids=["object", "set", "nested", "tuple-key"])
def test_a_run_refuses_a_harness_access_a_document_refuses(access: Any) -> None:
    with pytest.raises(DocumentError, match="cannot be canonically encoded") as told:
        Run("r", 0, "s", harness_accesses=("fine", access))
    assert told.value.where == "harness_accesses[1]"


def test_canonical_accesses_still_build_and_write() -> None:
    run = Run(
        "r",
        0,
        "s",
        tokens=PackedTokens.from_tokens([]),
        harness_accesses=((1, 2), None, {"a": [b"x", 1.5]}),
    )
    out = io.BytesIO()
    write_document(run, out, encoding="msgpack")
    assert cpstore.load_document(out.getvalue()).harness_accesses == (
        [1, 2],
        None,
        {"a": [b"x", 1.5]},
    )


def test_the_session_refuses_it_at_the_access(store: cpstore.Store) -> None:
    rec = store.recorder("r")
    rec.token("rng", 1)
    cid = str(rec.checkpoint(3, {"a": 1}))
    with store.read(cid) as cp:
        session = cpstore.ReplaySession(cp)
        session.cursor.resolve("rng")
        with pytest.raises(InvalidInputError, match="canonical value") as told:
            session.harness_access(object())
        assert told.value.where == "harness_access(access)"
        session.harness_access({"file": "/etc/hosts"})
        run = session.finish(cpstore.state_digest({"a": 1}))
        out = io.BytesIO()
        session.write(out, cpstore.state_digest({"a": 1}), encoding="msgpack")
    assert run.harness_accesses == ({"file": "/etc/hosts"},)
    assert cpstore.validate(cid, run, store=store).verdict.name == "QUARANTINE"
