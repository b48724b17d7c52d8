"""``cpstore repair-ref``: the API's ``repair_ref`` on the command line, its refusals kept.

``verify`` names a vanished or damaged ref and points to ``repair_ref``; until this
command an operator needed Python to mend it. Both engines; the damage is done behind
cpstore's back by another process (LMDB) or connection (PostgreSQL)."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref
from test_refs70_create_short import _main_vanished, _snapshot

import cpstore
from cpstore.cli import main
from cpstore.errors import IntegrityError

WHO = ["--operator", "ops", "--reason", "r/main vanished"]


def _cli(url: str, *args: str) -> int:
    return main(["repair-ref", "--store", url, *args])


def _vanished(url: str) -> tuple[list[str], str, Any, int]:
    """r's main deleted behind cpstore's back; the ids, s's head, the snapshot, audits."""
    with cpstore.open(url) as st:
        ids = _main_vanished(url, st)
        s0 = st.ref("s")
        assert s0 is not None
        return ids, s0, _snapshot(st), len(list(st.audit_records()))


def test_a_vanished_ref_is_put_back_and_the_run_goes_on(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids, _, _, audits = _vanished(url)
    assert main(["verify", "--store", url]) == 5
    capsys.readouterr()
    assert _cli(url, "r", "main", ids[2][:10], *WHO) == 0  # a prefix names the head
    out = capsys.readouterr().out
    assert f"repaired r@main: set to {ids[2]}" in out
    with cpstore.open(url) as st:
        assert st.ref("r") == ids[2]
        nxt = st.recorder("r").checkpoint(3, {"i": 3})  # extends the true head
        assert st.manifest(nxt).parent == ids[2]
        recs = list(st.audit_records())
        assert len(recs) == audits + 1
        body = recs[-1].body
        assert recs[-1].kind == "ref_repair"
        assert (body["operator"], body["reason"]) == ("ops", "r/main vanished")
        assert body["forced"] is False
        assert st.verify().ok


def test_a_put_back_that_is_not_the_vanished_ref_is_exit_5_naming_it(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids, s0, before, audits = _vanished(url)
    capsys.readouterr()
    assert _cli(url, "s", "typo", s0, *WHO) == 5
    err = capsys.readouterr().err
    assert "refs/r/main" in err and ids[2] in err and len(err.strip().splitlines()) == 1
    with cpstore.open(url) as st:
        assert _snapshot(st) == before and len(list(st.audit_records())) == audits
        with pytest.raises(IntegrityError, match="fewer refs"):
            st.recorder("r").checkpoint(9, {"new": "root"})


def test_force_accepts_it_and_the_record_names_what_it_overrode(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids, s0, _, _ = _vanished(url)
    capsys.readouterr()
    assert _cli(url, "s", "typo", s0, *WHO, "--force", "--json") == 0
    got = json.loads(capsys.readouterr().out)
    assert got["forced"] is True and got["checkpoint_id"] == s0
    assert got["overrode"] == {"run": "r", "branch": "main", "head": ids[2]}
    assert (got["run_id"], got["branch"]) == ("s", "typo")
    with cpstore.open(url) as st:
        assert st.ref("s", "typo") == s0
        rec = next(r for r in st.audit_records() if r.digest == got["audit"])
        assert rec.body["overrode"] == got["overrode"]


def test_text_output_of_a_forced_repair_says_what_it_overrode(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids, s0, _, _ = _vanished(url)
    capsys.readouterr()
    assert _cli(url, "s", "typo", s0, *WHO, "--force") == 0
    out = capsys.readouterr().out
    assert f"forced: the check named r@main at {ids[2]} as the ref that vanished" in out


def test_an_intact_ref_is_exit_8_and_nothing_is_written(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        before, audits = _snapshot(st), len(list(st.audit_records()))
    assert _cli(url, "r", "main", ids[0], *WHO) == 8
    assert "set_ref or reset_ref" in capsys.readouterr().err
    with cpstore.open(url) as st:
        assert _snapshot(st) == before and len(list(st.audit_records())) == audits
        assert st.ref("r") == ids[1]


def test_an_absent_ref_while_nothing_vanished_is_exit_4(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with cpstore.open(url) as st:
        cid = st.recorder("r").checkpoint(0, {"i": 0})
    assert _cli(url, "r", "nope", cid, *WHO) == 4
    assert "nothing to put back" in capsys.readouterr().err


def test_a_damaged_ref_is_deleted_and_its_head_kept_retained(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        st.fork("r", "side", ids[0])
    with cpstore.open(url) as st, st.backend.read_txn() as txn:
        raw = bytearray(txn.get(b"r\0side", None, st.backend.db("refs")))
    raw[-1] ^= 0x01  # the ref's check no longer holds
    _raw_ref(url, b"r\0side", bytes(raw))
    assert _cli(url, "r", "side", "--delete", *WHO, "--json") == 0
    got = json.loads(capsys.readouterr().out)
    assert got["checkpoint_id"] is None and got["damaged"] == bytes(raw).hex()
    assert got["retained"] == ids[0]
    with cpstore.open(url) as st:
        assert st.ref("r", "side") is None and ids[0] in st.retained()
        assert st.verify().ok


@pytest.mark.parametrize(
    "args",
    [
        ["r", "main", "0123456789abcdef0123456789abcdef", "--delete"],  # both
        ["r", "main"],  # neither
        ["r", "main", "zz"],  # not a checkpoint name
        ["", "main", "--delete"],  # an empty run
    ],
)
def test_bad_input_is_exit_3_and_nothing_is_written(
    url: str, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    _, _, before, audits = _vanished(url)
    assert _cli(url, *args, *WHO) == 3
    assert capsys.readouterr().err.strip()
    with cpstore.open(url) as st:
        assert _snapshot(st) == before and len(list(st.audit_records())) == audits


def test_operator_and_reason_are_required(url: str) -> None:
    with pytest.raises(SystemExit) as info:
        _cli(url, "r", "main", "--delete", "--operator", "ops")
    assert info.value.code == 2


def test_a_checkpoint_of_another_run_is_refused(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, s0, before, audits = _vanished(url)
    assert _cli(url, "r", "main", s0, *WHO) == 3
    assert "checkpoint of its own run" in capsys.readouterr().err
    with cpstore.open(url) as st:
        assert _snapshot(st) == before and len(list(st.audit_records())) == audits


def test_verify_names_the_vanished_ref_and_the_command_that_puts_it_back(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids, _, _, _ = _vanished(url)
    capsys.readouterr()
    assert main(["verify", "--store", url, "--json"]) == 5
    got = json.loads(capsys.readouterr().out)
    assert got["vanished_refs"] == [{"run": "r", "branch": "main", "head": ids[2]}]
    assert main(["verify", "--store", url]) == 5
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("vanished: "))
    cmd = shlex.split(line.split(": ", 2)[2])
    assert cmd[:4] == ["cpstore", "repair-ref", "--store", cmd[3]]
    assert cmd[-4:] == ["--", "r", "main", ids[2]]  # names after -- (review77)
    # the command as printed, with the operator and reason filled in, mends the store
    assert main([w.replace("WHO", "ops").replace("WHY", "why") for w in cmd[1:]]) == 0
    capsys.readouterr()
    assert main(["verify", "--store", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vanished_refs"] == []


def test_vanished_ref_is_none_when_the_digest_cannot_say_which(url: str) -> None:
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        st.fork("r", "side", ids[0])
        side = st.recorder("r", branch="side").checkpoint(5, {"side": 1})
        st.fork("r", "bare", ids[0])  # never recorded on: its name is in no checkpoint
        assert st.vanished_refs() == []  # nothing vanished
    _raw_ref(url, b"r\0side", None)
    with cpstore.open(url) as st:
        assert st.vanished_refs() == [{"run": "r", "branch": "side", "head": side}]
    _raw_ref(url, b"r\0main", None)  # two refs short: the difference is both
    with cpstore.open(url) as st:
        got = sorted(st.vanished_refs(), key=lambda d: d["branch"])
        assert got == [
            {"run": "r", "branch": "main", "head": ids[1]},
            {"run": "r", "branch": "side", "head": side},
        ]
    _raw_ref(url, b"r\0bare", None)  # three: not named
    with cpstore.open(url) as st:
        assert st.vanished_refs() == []


def test_a_vanished_fork_never_recorded_on_is_not_named(url: str) -> None:
    """Its branch name is in no stored checkpoint, so no name gives the difference: verify
    still reports the vanish and says how to mend it, without naming the ref."""
    with cpstore.open(url) as st:
        cid = st.recorder("r").checkpoint(0, {"i": 0})
        st.fork("r", "bare", cid)
    _raw_ref(url, b"r\0bare", None)
    with cpstore.open(url) as st:
        assert st.vanished_refs() == []
        assert any(p.where == "meta/refs_digest" for p in st.verify().problems)
