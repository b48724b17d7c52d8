"""audit32: the command line has no audit key, so on a keyed audit log (docs/security.md,
"Keyed audit") `verify` and `audit --check` walk only the unkeyed digest chain, which a
data-file writer can forge. They must say so, never "ok" / "audit chain verifies" alone
over a forged sign-off the MAC walk would name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_keyed_audit import KEY, _forge, _quarantined

import cpstore
from cpstore import cli


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _keyed_with_a_forged_sign_off(path: Path) -> None:
    with cpstore.open(path, audit_key=KEY) as store:
        cid, decision = _quarantined(store)
        audit_digest = decision.audit_digest
    body = {
        "decision_id": decision.id,
        "decision_audit": audit_digest,
        "checkpoint_id": cid,
        "operator": "mallory",
        "reason": "trust me",
    }
    _forge(path, "signoff", body)
    with cpstore.open(path, audit_key=KEY) as store:
        assert not store.verify().ok  # the MAC walk names it


def test_verify_and_audit_check_say_a_keyed_logs_macs_went_unchecked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    _keyed_with_a_forged_sign_off(path)
    code, out, _ = _run(["verify", "--store", str(path)], capsys)
    assert code == 0  # what it could check is sound
    assert "MACs NOT checked" in out and out.strip().splitlines()[-1] != "ok", out
    code, out, _ = _run(["verify", "--json", "--store", str(path)], capsys)
    assert json.loads(out)["audit_macs_checked"] is False
    code, out, _ = _run(["audit", "--check", "--store", str(path)], capsys)
    assert code == 0 and "MACs NOT checked" in out, out
    code, out, _ = _run(["audit", "--check", "--json", "--store", str(path)], capsys)
    data = json.loads(out)
    assert data["chain_ok"] is True and data["audit_macs_checked"] is False
    # The listing alone shows the forged sign-off as any other: it says MACs went unchecked.
    code, out, _ = _run(["audit", "--store", str(path)], capsys)
    assert code == 0 and "mallory" in out and "MACs NOT checked" in out, out
    code, out, _ = _run(["audit", "--json", "--store", str(path)], capsys)
    assert json.loads(out)["audit_macs_checked"] is False


def test_an_unkeyed_log_is_plain_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No keyed log, nothing to say: "ok" and audit_macs_checked null."""
    path = tmp_path / "s"
    with cpstore.open(path) as store:
        _quarantined(store)
    code, out, _ = _run(["verify", "--store", str(path)], capsys)
    assert code == 0 and out.strip().splitlines()[-1] == "ok" and "MAC" not in out
    code, out, _ = _run(["verify", "--json", "--store", str(path)], capsys)
    assert json.loads(out)["audit_macs_checked"] is None
    for argv in (["audit"], ["audit", "--check"]):
        code, out, _ = _run([*argv, "--store", str(path)], capsys)
        assert code == 0 and "MAC" not in out, out
        code, out, _ = _run([*argv, "--json", "--store", str(path)], capsys)
        assert json.loads(out)["audit_macs_checked"] is None


def test_gc_dry_run_says_what_the_real_gc_does_on_a_keyed_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Removing a checkpoint a decision names appends a gc record, which a keyed log
    takes only with the key: the real gc refuses (exit 7, nothing removed). The dry run
    said "would remove 1 checkpoint(s)" and exit 0; it must refuse as the real run does."""
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        rec = store.recorder("x")
        first = rec.checkpoint(1, {"a": 1})
        rec.checkpoint(2, {"a": 2})
        with store.read(first) as cp:
            replayed = cpstore.ReplaySession(cp, mode=cpstore.ReplayMode.BEST_EFFORT).finish("b")
        cpstore.validate(first, replayed, store=store)
    real = ["gc", "--keep-last", "1", "--store", str(path)]
    dry_code, dry_out, dry_err = _run([*real, "--dry-run"], capsys)
    code, _, err = _run(real, capsys)
    assert code == cli.EXIT_UNAVAILABLE and "keyed" in err
    assert (dry_code, dry_err) == (code, err), dry_out
    with cpstore.open(path, audit_key=KEY) as store:
        assert store.manifest(first).id == first and store.verify().ok
