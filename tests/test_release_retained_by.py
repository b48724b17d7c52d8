"""``Store.release_retained_by`` / ``cpstore retained --release-by AUDIT``: free every head
one audit record retained, in one txn.

A repair of an unnameable refs damage (a flipped ``meta/refs_digest``) keeps every tip
of the store as a retained head (review68), so ``prune(keep_last=N)`` sweeps nothing
old until they are released; one ``release_retained`` call per head was the only way.
Heads another record retained are left; one ``retained_release`` record per head.
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore
from cpstore.cli import main
from cpstore.cli.exit_codes import EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_OK
from cpstore.errors import InvalidInputError, NotFoundError
from cpstore.store.facade import Store
from cpstore.store.model import AuditRecord
from cpstore.store.refs import REFS_DIGEST_KEY


def _flip_digest(st: Store) -> None:
    meta = st.backend.db("meta")
    with st.backend.read_txn() as txn:
        raw = bytearray(bytes(txn.get(REFS_DIGEST_KEY, db=meta)))
    raw[0] ^= 1
    st.backend.write_txn(lambda t: t.put(REFS_DIGEST_KEY, bytes(raw), db=meta))


def _setup(st: Store) -> tuple[str, list[str], AuditRecord]:
    """Runs r and s, 3 checkpoints each; r's main reset back one (its old head retained
    by the reset); the refs digest flipped and repaired through s. Returns (the reset's
    retained head, every checkpoint, the repair's record)."""
    made = []
    for run in ("r", "s"):
        rec = st.recorder(run)
        made += [str(rec.checkpoint(i, {"run": run, "i": i})) for i in range(3)]
    st.reset_ref("r", "main", made[1], expected_old=made[2], operator="o", reason="back")
    _flip_digest(st)
    repair = st.repair_ref("s", "main", made[5], operator="o", reason="flipped digest")
    return made[2], made, repair


def _audit_count(st: Store) -> int:
    return len(list(st.audit_records()))


def test_it_releases_what_one_record_kept_and_nothing_else(url: str) -> None:
    with cpstore.open(url) as st:
        by_reset, made, repair = _setup(st)
        kept = set(repair.body["kept"])
        # Every tip, the reset's retained head too: a hold of the repair's own beside the
        # reset's, which the reset's release must not take with it (holders69).
        assert kept and by_reset in kept
        assert {
            c
            for c, h in st.retained().items()
            if repair.digest in {hold["audit"] for hold in h["holds"]}
        } == kept
        assert st.prune(keep_last=1) == 0  # every lineage kept whole
        before = _audit_count(st)
        recs = st.release_retained_by(repair.digest, operator="o", reason="digest mended")
        assert sorted(str(r.body["checkpoint"]) for r in recs) == sorted(kept)
        assert all(r.kind == "retained_release" for r in recs)
        assert _audit_count(st) == before + len(kept)
        assert by_reset in {str(r.body["checkpoint"]) for r in recs}
        assert set(st.retained()) == {by_reset}  # the reset's hold stands
        assert [h["audit"] for h in st.retained()[by_reset]["holds"]] == [
            next(st.audit_records(kind="ref_reset")).digest
        ]
        assert st.prune(keep_last=1) == 2  # s's two older checkpoints; r's kept by the reset
        for cid in made[3:5]:
            with pytest.raises(NotFoundError):
                st.manifest(cid)
        assert [st.manifest(cid).id for cid in (*made[:3], made[5])] == [*made[:3], made[5]]
        assert st.verify().ok
        with pytest.raises(NotFoundError):
            st.release_retained_by(repair.digest, operator="o", reason="again")


@pytest.mark.parametrize("bad", ["", "zz" * 16, "ab" * 15, 7])
def test_a_bad_digest_is_bad_input_and_writes_nothing(url: str, bad: object) -> None:
    with cpstore.open(url) as st:
        _, _, repair = _setup(st)
        before, held = _audit_count(st), st.retained()
        with pytest.raises(InvalidInputError):
            st.release_retained_by(bad, operator="o", reason="r")  # type: ignore[arg-type]
        assert _audit_count(st) == before and st.retained() == held
        assert repair.digest in {h["audit"] for head in held.values() for h in head["holds"]}


def test_the_command_line_releases_by_record(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with cpstore.open(url) as st:
        by_reset, _, repair = _setup(st)
        kept = set(repair.body["kept"])
    capsys.readouterr()
    argv = ["retained", "--store", url, "--release-by", repair.digest]
    assert main(argv) == EXIT_BAD_INPUT  # --operator and --reason are audited: required
    assert main([*argv, "--operator", "o", "--reason", "r", "--release", by_reset]) == (
        EXIT_BAD_INPUT
    )
    assert main([*argv, "--operator", "o", "--reason", "r"]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert {line.split()[3] for line in out[:-1]} == kept
    assert out[-1].startswith(f"{len(kept)} hold(s) released")
    assert main([*argv, "--operator", "o", "--reason", "r"]) == EXIT_NOT_FOUND
    with cpstore.open(url) as st:
        assert set(st.retained()) == {by_reset}
