"""`--audit-key-file` (and $CPSTORE_AUDIT_KEY_FILE): the command line can work a keyed
audit log. Before it, on a keyed log `verify` and `audit --check` could walk only the
unkeyed digest chain (which a data-file writer forges), `sign-off`, the gates, `validate
--record` and a gc that must append were refused, and `push`/`pull` into a keyed store
were refused whenever a decision was to be carried (docs/security.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_audit32_keyed_cli import _keyed_with_a_forged_sign_off
from test_keyed_audit import KEY, _quarantined
from test_transfer_gates import _checkpoint, _rejected

import cpstore
from cpstore import cli


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _key_file(tmp_path: Path, key: bytes = KEY) -> str:
    f = tmp_path / "audit.key"
    f.write_bytes(key)
    return str(f)


def test_verify_and_audit_check_the_macs_with_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sign-off forged in the data file: with the key verify and audit --check name it
    (exit 5) and the listing stops at it; a clean keyed store is a plain "ok", MACs checked."""
    clean, forged = tmp_path / "clean", tmp_path / "forged"
    with cpstore.open(clean, audit_key=KEY) as store:
        _quarantined(store)
    _keyed_with_a_forged_sign_off(forged)
    key = ["--audit-key-file", _key_file(tmp_path)]
    code, out, _ = _run(["verify", "--store", str(clean), *key], capsys)
    assert code == 0 and out.strip().splitlines()[-1] == "ok" and "NOT" not in out, out
    code, out, _ = _run(["verify", "--json", "--store", str(clean), *key], capsys)
    assert json.loads(out)["audit_macs_checked"] is True
    code, out, _ = _run(["audit", "--json", "--store", str(clean), *key], capsys)
    assert code == 0 and json.loads(out)["audit_macs_checked"] is True
    code, out, _ = _run(["verify", "--store", str(forged), *key], capsys)
    assert code == 5 and "MAC" in out, out
    code, out, _ = _run(["audit", "--check", "--json", "--store", str(forged), *key], capsys)
    data = json.loads(out)
    assert code == 5 and data["audit_macs_checked"] is True and data["chain_ok"] is False
    code, out, err = _run(["audit", "--store", str(forged), *key], capsys)
    assert code == 5 and "MAC" in err and "audit/1" in err and "mallory" not in out, (out, err)


def test_sign_off_and_validate_record_append_with_the_key_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused without the key (exit 5: the gates trust no record of a keyed log read
    without it; nothing appended); with $CPSTORE_AUDIT_KEY_FILE the
    sign-off and a recorded decision are appended with their MACs (verify with the key)."""
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        cid, decision = _quarantined(store)
        count = len(list(store.audit_records()))
    argv = ["sign-off", decision.id, "--operator", "op", "--reason", "seen", "--store", str(path)]
    code, _, err = _run(argv, capsys)
    assert code == 5 and "keyed" in err, err
    monkeypatch.setenv("CPSTORE_AUDIT_KEY_FILE", _key_file(tmp_path))
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    code, _, err = _run(["validate", cid, cid, "--record", "--store", str(path)], capsys)
    assert code == 11, err  # a checkpoint against itself: QUARANTINE, recorded
    with cpstore.open(path, audit_key=KEY) as store:
        kinds = [r.kind for r in store.audit_records()][count:]
        assert kinds == ["signoff", "decision"]
        assert store.verify().ok


def test_push_into_a_keyed_store_carries_decisions_with_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """push to a keyed receiver: refused without its key (exit 7, nothing lands), carried
    with it (MAC and all); pull likewise takes the receiving (--store) store's key."""
    src, dst, pulled = tmp_path / "src", tmp_path / "dst", tmp_path / "pulled"
    for keyed in (dst, pulled):
        with cpstore.open(keyed, audit_key=KEY) as store:
            _rejected(store, _checkpoint(store, "own"))
    with cpstore.open(src) as store:
        _rejected(store, _checkpoint(store))
    code, _, err = _run(["push", str(dst), "--store", str(src)], capsys)
    assert code == 7 and "keyed" in err
    key = ["--audit-key-file", _key_file(tmp_path)]
    code, out, err = _run(["push", str(dst), "--store", str(src), "--json", *key], capsys)
    assert code == 0 and json.loads(out)["decisions"] == 1, err
    code, out, err = _run(["pull", str(src), "--store", str(pulled), "--json", *key], capsys)
    assert code == 0 and json.loads(out)["decisions"] == 1, err
    for at in (dst, pulled):
        with cpstore.open(at, audit_key=KEY) as store:
            assert sorted(store.runs()) == ["own", "r"]
            assert store.verify().ok


@pytest.mark.parametrize(
    ("key", "code", "said"),
    [
        (b"short", 3, "16 to 64 bytes"),
        (KEY + b"\n" * 40, 3, "more than 64 bytes"),
        (b"w" * 32, 7, "wrong audit key"),
    ],
)
def test_a_bad_key_file_is_refused_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: bytes, code: int, said: str
) -> None:
    path = tmp_path / "s"
    with cpstore.open(path, audit_key=KEY) as store:
        _, decision = _quarantined(store)
    before = (path / "data.mdb").read_bytes()
    argv = ["sign-off", decision.id, "--operator", "op", "--reason", "r", "--store", str(path)]
    got, out, err = _run([*argv, "--audit-key-file", _key_file(tmp_path, key)], capsys)
    assert (got, out) == (code, "") and said in err, err
    assert key.decode(errors="replace") not in err  # the key itself is never printed
    assert (path / "data.mdb").read_bytes() == before


def test_a_missing_key_file_and_a_key_for_an_unkeyed_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing file is exit 4; a key given to an unkeyed log is refused (exit 7) when the
    log has records, and a read-only command is refused on an empty unkeyed log too (it
    cannot key it; it said "cannot be written" before)."""
    empty, used = tmp_path / "empty", tmp_path / "used"
    with cpstore.open(empty) as store:
        store.recorder("r").checkpoint(1, b"x")
    with cpstore.open(used) as store:
        _quarantined(store)
    code, _, err = _run(
        ["verify", "--store", str(used), "--audit-key-file", str(tmp_path / "nope")], capsys
    )
    assert code == 4 and "nope" in err
    key = ["--audit-key-file", _key_file(tmp_path)]
    code, _, err = _run(["verify", "--store", str(used), *key], capsys)
    assert code == 7 and "unkeyed records" in err, err
    code, _, err = _run(["verify", "--store", str(empty), *key], capsys)
    assert code == 7 and "not keyed" in err, err
    with pytest.raises(cpstore.StoreError, match="not keyed"):
        cpstore.open(empty, readonly=True, create=False, audit_key=KEY)


def test_the_command_line_never_keys_an_existing_stores_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """$CPSTORE_AUDIT_KEY_FILE set (for other stores), then `gc`, `validate --record` or a
    push into an existing store whose audit log is unkeyed and empty: each keyed that log
    for good, and every later writer without the key (the runtime) was refused its
    appends. Now each is exit 7 naming the cause and the log stays unkeyed; a push into a
    store it creates keys the new store, as before."""
    path, src = tmp_path / "s", tmp_path / "src"
    with cpstore.open(path) as store:
        cid = _checkpoint(store)
    with cpstore.open(src) as store:
        _checkpoint(store, "other")
    monkeypatch.setenv("CPSTORE_AUDIT_KEY_FILE", _key_file(tmp_path))
    for argv in (
        ["gc", "--keep-last", "1", "--store", str(path)],
        ["validate", cid, cid, "--record", "--store", str(path)],
        ["push", str(path), "--store", str(src)],
        ["pull", str(src), "--store", str(path)],
    ):
        code, _, err = _run(argv, capsys)
        assert code == 7 and "never keys" in err, (argv, code, err)
    with cpstore.open(path) as store:
        assert not store.audit_keyed  # a writer without the key still appends
        store.append_audit("note", {"x": 1})
        assert sorted(store.runs()) == ["r"]  # nothing was pushed or pulled
    fresh = tmp_path / "fresh"
    code, _, err = _run(["push", str(fresh), "--store", str(src)], capsys)
    assert code == 0, err
    with cpstore.open(fresh, audit_key=KEY) as store:
        assert store.audit_keyed and sorted(store.runs()) == ["other"]
