"""review77: ``cpstore verify``'s printed ``repair-ref`` command, run as printed.

The command verify printed left out the store (``--store`` was needed, or it ran on
``$CPSTORE_PATH``'s store) and put the names before the options, so a run named ``-x``
was read as an option. Here the printed line is split as a POSIX shell splits it
(``shlex.split``) and run with nothing added and ``$CPSTORE_PATH`` unset. Both engines."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_keyed_audit import KEY, _quarantined

import cpstore
from cpstore.cli import main
from cpstore.cli.verify_command import repair_command
from cpstore.store.model import ref_key

NAMES = [
    ("-x", "main"),
    ("run with spaces", "-b"),
    ('it\'s "quoted"', "br@nch"),
    ("a@b", "line\nbreak"),
    ("--force", "--delete"),
    ("tab\there", "esc\x1b[2J"),
    ("caf\u00e9 \\ back'slash", "cr\rlf\n"),
]


def _printed(out: str) -> list[list[str]]:
    """Each printed repair-ref command, its words as bash reads them."""
    found = re.findall(
        r"^vanished: .*? at [0-9a-f]{32}: (cpstore repair-ref .*? [0-9a-f]{32})$", out, re.M
    )
    return [_bash_words(c) for c in found]


def _bash_words(line: str) -> list[str]:
    got = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + line], capture_output=True, check=True
    ).stdout
    return got.decode("utf-8", "surrogateescape").split("\0")[:-1]


@pytest.mark.parametrize(("run", "branch"), NAMES)
def test_the_printed_command_puts_the_ref_back_as_printed(
    url: str,
    run: str,
    branch: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CPSTORE_PATH", raising=False)
    with cpstore.open(url) as st:
        root = st.recorder(run).checkpoint(0, {"m": 0})
        if branch != "main":
            st.fork(run, branch, root)
        head = st.recorder(run, branch=branch).checkpoint(1, {"i": 1})
        st.recorder("other").checkpoint(0, {"o": 0})
    _raw_ref(url, ref_key(run, branch), None)
    capsys.readouterr()
    assert main(["verify", "--store", url]) == 5
    out = capsys.readouterr().out
    [cmd] = _printed(out)
    assert cmd[:2] == ["cpstore", "repair-ref"] and cmd[-3:] == [run, branch, head]
    argv = [w.replace("WHO", "ops").replace("WHY", "put back") for w in cmd[1:]]
    assert main(argv) == 0, capsys.readouterr().err
    with cpstore.open(url) as st:
        assert st.branches(run)[branch] == head
        assert st.verify().ok


def test_a_relative_store_is_printed_absolute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with cpstore.open("s") as st:
        st.recorder("r").checkpoint(0, {"i": 0})
        st.recorder("q").checkpoint(0, {"i": 0})
    _raw_ref("s", ref_key("r", "main"), None)
    capsys.readouterr()
    assert main(["verify", "--store", "s"]) == 5
    [cmd] = _printed(capsys.readouterr().out)
    assert cmd[cmd.index("--store") + 1] == str(tmp_path / "s")


def test_a_url_password_is_not_printed() -> None:
    args = argparse.Namespace(
        store="postgresql://u:secret@h/db?password=other", audit_key_file=None, macs=None
    )
    got = repair_command(args, {"run": "r", "branch": "main", "head": "ab" * 16})
    assert "secret" not in got and "other" not in got
    assert _bash_words(got)[-4:] == ["--", "r", "main", "ab" * 16]


def test_a_keyed_log_gets_its_key_file_in_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair appends a keyed audit record: it needs the key verify was given (and
    says ``FILE`` when verify walked a keyed log without it)."""
    monkeypatch.delenv("CPSTORE_PATH", raising=False)
    monkeypatch.delenv("CPSTORE_AUDIT_KEY_FILE", raising=False)
    url = str(tmp_path / "s")
    key_file = tmp_path / "audit.key"
    key_file.write_bytes(KEY)
    with cpstore.open(url, audit_key=KEY) as st:
        _quarantined(st)  # a keyed record in the log
        head = st.recorder("r").checkpoint(0, {"i": 0})
    _raw_ref(url, ref_key("r", "main"), None)
    capsys.readouterr()
    assert main(["verify", "--store", url]) == 5
    [cmd] = _printed(capsys.readouterr().out)
    assert cmd[cmd.index("--audit-key-file") + 1] == "FILE"
    assert main(["verify", "--store", url, "--audit-key-file", str(key_file)]) == 5
    [cmd] = _printed(capsys.readouterr().out)
    assert cmd[cmd.index("--audit-key-file") + 1] == str(key_file)
    argv = [w.replace("WHO", "ops").replace("WHY", "put back") for w in cmd[1:]]
    assert main(argv) == 0, capsys.readouterr().err
    with cpstore.open(url, audit_key=KEY) as st:
        assert st.ref("r") == head and st.verify().ok


def test_two_vanished_refs_are_put_back_by_the_two_printed_commands(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both commands, run in the order printed, put both back; the runs go on."""
    monkeypatch.delenv("CPSTORE_PATH", raising=False)
    with cpstore.open(url) as st:
        heads = {run: st.recorder(run).checkpoint(0, {run: 0}) for run in ("-r", "s s", "t")}
    _raw_ref(url, ref_key("-r", "main"), None)
    _raw_ref(url, ref_key("s s", "main"), None)
    capsys.readouterr()
    assert main(["verify", "--store", url]) == 5
    cmds = _printed(capsys.readouterr().out)
    assert sorted(c[-3] for c in cmds) == ["-r", "s s"]
    for cmd in cmds:
        argv = [w.replace("WHO", "ops").replace("WHY", "put back") for w in cmd[1:]]
        assert main(argv) == 0, capsys.readouterr().err
    with cpstore.open(url) as st:
        for run in ("-r", "s s"):
            assert st.manifest(st.recorder(run).checkpoint(1, {run: 1})).parent == heads[run]
        assert st.verify().ok
