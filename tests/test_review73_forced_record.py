"""review73: a forced ``repair_ref`` record names the vanished ref ``force`` overrode.

repair72 skipped the put-back check under ``force=True`` and recorded ``"forced": true``
only: the record of a put-back that replaced ``r/main`` by ``s/typo`` read like that of
an exact put-back forced for nothing, and named no vanished ref (``kept`` lists every
tip of the store when the XOR names no one ref). The check now runs when forced too, and
``overrode`` carries what it would have refused with: the vanished ref's ``{"run",
"branch", "head"}`` (each None when no stored checkpoint and branch name give it), or
None when force lifted nothing. Both engines.
"""

from __future__ import annotations

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_refs70_create_short import _main_vanished

import cpstore


def test_a_forced_put_back_under_another_name_names_the_vanished_ref(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        record = st.repair_ref("s", "typo", s0, operator="o", reason="accept", force=True)
        assert record.body["forced"] is True
        assert record.body["overrode"] == {"run": "r", "branch": "main", "head": ids[2]}
        [logged] = st.audit_records(kind="ref_repair")
        assert logged.body["overrode"] == record.body["overrode"]


def test_a_forced_wrong_head_names_the_true_one(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        record = st.repair_ref("r", "main", ids[1], operator="o", reason="older", force=True)
        assert record.body["overrode"] == {"run": "r", "branch": "main", "head": ids[2]}


def test_a_forced_exact_put_back_overrode_nothing(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="x", force=True)
        assert record.body["forced"] is True and record.body["overrode"] is None
        assert st.verify().ok


def test_an_unforced_repair_records_overrode_none(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="x")
        assert record.body["forced"] is False and record.body["overrode"] is None


def test_a_forced_repair_of_an_intact_ref_names_the_vanished_one(url: str) -> None:
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        record = st.repair_ref("s", "main", s0, operator="o", reason="clear", force=True)
        assert record.body["overrode"] == {"run": "r", "branch": "main", "head": ids[2]}


def test_a_forced_put_back_of_an_unnamed_vanished_fork_says_unnamed(url: str) -> None:
    """A fork never recorded on: no manifest holds its name, the check could not name it;
    ``overrode`` says a refusal was lifted all the same."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.fork("r", "exp", ids[1])
        _raw_ref(url, b"r\0exp", None)
        record = st.repair_ref("r", "other", ids[1], operator="o", reason="guess", force=True)
        assert record.body["overrode"] == {"run": None, "branch": None, "head": None}
