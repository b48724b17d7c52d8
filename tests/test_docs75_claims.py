"""docs75: claims of the docs changed since ec16692 (ident72, repair72, pgcount72, review73,
review74, lgfix72, clinames75), checked against the code as it is now.

Each test pins a sentence a later change had left stale, and the behaviour it now says:
the ReplaySession note said a replay's tags are never compared as P (ident72 compares
them); architecture.md missed two modules and miscounted the public names; README's
decision table is checked against FINDING_RULES (docs/decision-table.md's already was);
store.md said a repair with the digest row missing is checked "where the difference
names a missing ref" (with no digest there is no difference), gave ``repair_ref``'s
signature without ``force`` and said a writable role that may not install the kept refs
count "counts as before" (it reads the kept count when nothing is missing); README's
exit-5 row and ``Store.repair_ref``'s docstring left out the intact-ref refusal and
``overrode``. One gap is pinned as ``xfail(strict=True)``: docs/format.md says a newer
counts version is left as it is, but an open that finds a trigger disabled installs
version 1 over it.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from pg_cluster import backend_store, backend_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from pg_counts import sql, triggers
from test_audit63_retention_digest import _raw_ref
from test_ident72_replayed_checkpoint import _replay, _two
from test_pgcount72_upgrade import _role_url
from test_refs70_create_short import _main_vanished

import cpstore
from cpstore.cli.exit_codes import EXIT_CODES
from cpstore.decision.table import FINDING_RULES, FindingCode, Verdict
from cpstore.errors import IntegrityError, PutBackMismatchError
from cpstore.store import pg_count
from cpstore.store.facade import Store
from cpstore.store.refs import REFS_DIGEST_KEY

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _flat(path: Path) -> str:
    """The file's text with line breaks and runs of spaces as one space."""
    return " ".join(path.read_text().split())


def test_the_session_note_says_a_replay_tag_is_compared_against_another_checkpoint(
    store: cpstore.Store,
) -> None:
    text = _flat(DOCS / "decision-table.md")
    assert "as P its tags are never compared" not in text  # stale since ident72
    note = text.split("`ReplaySession(cp)` bundles the three", 1)[1].split("Before audit43", 1)[0]
    assert "CHECKPOINT_MISMATCH" in note
    a, b = _two(store)
    replayed = _replay(store, a)
    assert cpstore.validate(a, replayed, store=store, record=False).verdict is Verdict.ACCEPT
    against_b = cpstore.validate(b, replayed, store=store, record=False)
    assert against_b.codes == {FindingCode.CHECKPOINT_MISMATCH}
    assert against_b.verdict is Verdict.QUARANTINE


def test_architecture_md_names_every_module_and_counts_the_public_names() -> None:
    text = (DOCS / "architecture.md").read_text()
    missing = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "cpstore").rglob("*.py"))
        if f"`{p.name}`" not in text and p.name != "__init__.py"  # a room's package
    ]
    assert missing == []
    assert f"{len(cpstore.__all__)} names in its `__all__`" in text


def test_the_readme_decision_table_is_finding_rules() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| ([A-Z_, ]+) \| (REJECT|QUARANTINE) \| (yes|no) \|$", readme, re.M)
    listed: dict[str, tuple[str, bool]] = {}
    for codes, verdict, releasable in rows:
        for code in codes.split(", "):
            assert code not in listed, code
            listed[code] = (verdict, releasable == "yes")
    assert listed == {c.value: (v.name, r) for c, (v, r) in FINDING_RULES.items()}
    assert "CHECKPOINT_MISMATCH" in listed


def test_with_the_digest_row_missing_an_intact_ref_repair_is_not_checked(url: str) -> None:
    """store.md: with the digest row missing, putting the vanished ref back or naming an
    intact ref at its own head records the table's own count, neither checked (it said
    the latter was "forced where the difference names a missing ref")."""
    text = _flat(DOCS / "store.md")
    assert "intact ref at its own head (forced where the difference names a missing" not in text
    assert "with no digest there is no difference to name it" in text
    with cpstore.open(url) as st:
        _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        _raw_ref(url, REFS_DIGEST_KEY, None, "meta")
        record = st.repair_ref("s", "main", s0, operator="o", reason="clear the digest")
        assert record.body["forced"] is False and record.body["overrode"] is None
        assert record.body["refs"] == {"recorded": None, "found": 1}


def test_store_md_and_the_docstring_give_repair_refs_force_and_the_intact_refusal() -> None:
    text = _flat(DOCS / "store.md")
    assert "`repair_ref(run, branch, new_or_None, *, operator, reason, force=False)`" in text
    assert inspect.signature(Store.repair_ref).parameters["force"].default is False
    doc = " ".join((Store.repair_ref.__doc__ or "").split())
    assert "intact ref" in doc and "``overrode``" in doc
    lines = (ROOT / "README.md").read_text().splitlines()
    row = next(line for line in lines if line.startswith("| 5 |"))
    assert "PutBackMismatchError" in row and "intact ref" in row
    assert EXIT_CODES[PutBackMismatchError] == 5


def test_a_writable_role_that_may_not_install_reads_the_kept_count_when_nothing_is_missing(
    pg_url: str,  # noqa: F811 - fixture
) -> None:
    """store.md, "Installed at open": such a role "counted as before" by the old text; it
    reads the kept count when nothing is missing, and counts with count(*) once a
    trigger is disabled (then its verify() reads the kept count beside it)."""
    text = _flat(DOCS / "store.md")
    assert "which then counts as before" not in text
    with cpstore.open(pg_url) as st:
        st.recorder("r").checkpoint(0, {"a": 0})
    writer = _role_url(
        pg_url,
        "cpstore_d75_writer",
        ["GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {role}"],
    )
    sql(pg_url, "UPDATE {s}.counts SET n = 0")  # below the rows: a kept-count read refuses
    with cpstore.open(writer) as st, pytest.raises(IntegrityError, match="fewer refs"):
        st.fork("r", "b", st.ref("r") or "")
    sql(pg_url, "ALTER TABLE {s}.refs DISABLE TRIGGER cpstore_count_added")
    with cpstore.open(writer) as st:  # may not enable it again: count(*) for its creates
        st.fork("r", "b", st.ref("r") or "")
        assert [p.where for p in st.verify().problems] == ["counts/refs"]


def test_a_newer_counts_version_is_left_as_it_is_with_a_trigger_disabled(
    pg_url: str,  # noqa: F811 - fixture
) -> None:
    with cpstore.open(pg_url) as st:
        st.recorder("r").checkpoint(0, {"a": 0})
    newer = f"cpstore counts {pg_count.COUNTS_VERSION + 1}"
    sql(pg_url, f"COMMENT ON TABLE {{s}}.counts IS '{newer}'")
    sql(pg_url, "ALTER TABLE {s}.refs DISABLE TRIGGER cpstore_count_added")
    with cpstore.open(pg_url) as st:
        # its creates count the rows (the kept count may be stale): still refused short
        st.recorder("s").checkpoint(0, {"a": 1})
        sql(pg_url, "DELETE FROM {s}.refs WHERE k = %s", (b"r\0main",))
        with pytest.raises(IntegrityError, match="fewer refs"):
            st.recorder("t").checkpoint(0, {"a": 2})
    [(comment,)] = sql(
        pg_url, "SELECT obj_description(to_regclass(%s), 'pg_class')", (_counts(pg_url),)
    )
    assert comment == newer  # not version 1 installed over it
    assert triggers(pg_url)["cpstore_count_added"] == "D"  # nor its trigger re-enabled


def _counts(url: str) -> str:
    return f'"{url.split("schema=")[1]}"."counts"'


def test_security_md_says_a_repair_keeps_the_xor_naming_a_missing_ref(url: str) -> None:
    """security.md said ``repair_ref`` re-derives the XOR from the table as it stands and
    a repair of the digest itself takes the table's count: since repair72 that repair is
    refused while the difference names the vanished ref, and since review73 a repair
    leaving the table one short keeps the XOR naming it."""
    text = _flat(DOCS / "security.md")
    assert "whose difference still names that ref: that XOR is kept, review73" in text
    assert "(refused, unless forced, while the difference names the vanished ref" in text
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref("s", "main", s0, operator="o", reason="clear the digest")
        assert info.value.expected == {"run": "r", "branch": "main", "head": ids[2]}
        record = st.repair_ref("s", "main", s0, operator="o", reason="accept", force=True)
        assert record.body["overrode"] == {"run": "r", "branch": "main", "head": ids[2]}


def test_runs_provenance_tags_doc_says_what_p_s_replay_tag_is_compared_with() -> None:
    """docs/api.md's ``Run.provenance_tags`` said only that a ``replay:`` tag marks a
    recording of a replay; as P (ident72) it names the checkpoint replayed."""
    api = _flat(DOCS / "api.md")
    line = api.split("- `provenance_tags`:", 1)[1].split("- `", 1)[0]
    assert "CHECKPOINT_MISMATCH" in line and "REPLAY_OF_REPLAY" in line


def test_pg_counts_docstring_says_a_role_that_may_not_install_reads_a_ready_count() -> None:
    """pg_count's docstring said such a role opens counting with ``count(*)``; it reads the
    kept count when nothing is missing (pinned by the role test above)."""
    doc = " ".join((pg_count.__doc__ or "").split())
    assert "reads the kept count when nothing is missing" in doc
