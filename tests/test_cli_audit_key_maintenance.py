"""`compact` and `copy` with `--audit-key-file`: the rewritten file / the copy is verified
with the key, as `verify` is. Before, both took the option (every command that opens a
store does, docs/security.md) and dropped it: compact opened the store without a key
(a wrong key, or a key for an unkeyed log, exit 0 and the file swapped), and both
verified the rewritten file / the copy without its MACs, so a sign-off forged in the
data file was compacted in or copied out under "verified"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_audit32_keyed_cli import _keyed_with_a_forged_sign_off
from test_cli_audit_key import _key_file, _run
from test_keyed_audit import KEY, _quarantined

import cpstore


def _data(path: Path) -> bytes:
    return (path / "data.mdb").read_bytes()


def test_compact_refuses_a_wrong_key_and_a_key_for_an_unkeyed_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keyed, plain = tmp_path / "keyed", tmp_path / "plain"
    with cpstore.open(keyed, audit_key=KEY) as store:
        _quarantined(store)
    with cpstore.open(plain) as store:
        _quarantined(store)
    (tmp_path / "w").mkdir()
    wrong = _key_file(tmp_path / "w", b"w" * 32)
    for path, key in ((keyed, wrong), (plain, _key_file(tmp_path))):
        before = _data(path)
        code, out, err = _run(["compact", "--store", str(path), "--audit-key-file", key], capsys)
        assert code == 7 and "key" in err, (path, code, out, err)
        assert _data(path) == before  # nothing swapped
        assert KEY.decode() not in out + err and "w" * 32 not in out + err


def test_compact_and_copy_check_the_macs_with_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged, dest = tmp_path / "forged", tmp_path / "copy"
    _keyed_with_a_forged_sign_off(forged)
    key = ["--audit-key-file", _key_file(tmp_path)]
    before = _data(forged)
    code, out, err = _run(["compact", "--store", str(forged), *key], capsys)
    assert code == 5 and "MAC" in err, (code, out, err)
    assert _data(forged) == before
    code, out, err = _run(["copy", str(dest), "--store", str(forged), *key], capsys)
    assert code == 5 and "MAC" in err, (code, out, err)
    assert not os.path.exists(dest)  # a copy that fails its verify is removed
    clean = tmp_path / "clean"
    with cpstore.open(clean, audit_key=KEY) as store:
        _quarantined(store)
    code, out, err = _run(["compact", "--store", str(clean), *key], capsys)
    assert code == 0, err
    code, out, err = _run(["copy", str(dest), "--store", str(clean), *key], capsys)
    assert code == 0 and os.path.exists(dest / "data.mdb"), err
