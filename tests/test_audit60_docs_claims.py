"""audit60: claims of README.md and docs/ that a new user relies on, run against the code.

Each test pins one claim audit60 found wrong (in the doc or in the code) or that no test
ran: the README's AppendLog snippet, the opening table's regular-file row, which CLI
commands create a store, `validate`'s exit 5 against a judged INTEGRITY finding, and the
codes `convert --help` lists.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest
from test_cli_operator import _DOC

import cpstore
from cpstore import cli
from cpstore.store.refs import read_ref

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
STORE_MD = ROOT / "docs" / "store.md"
DECISION_MD = ROOT / "docs" / "decision-table.md"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _append_log_snippet() -> str:
    section = README.read_text().split("### Histories that only grow", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "README has no AppendLog code block"
    return match.group(1)


def test_readme_append_log_snippet_runs_and_reads_back_a_plain_list(tmp_path: Path) -> None:
    """The snippet checkpoints an AppendLog as the plain list's bytes and resumes from it."""
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("chat")
        scope: dict[str, object] = {"cpstore": cpstore, "store": store, "rec": rec}
        exec(compile(_append_log_snippet(), str(README), "exec"), scope)
        assert scope["history"] == [{"role": "user", "content": "hi"}]
        assert type(scope["history"]) is list
        assert isinstance(scope["log"], cpstore.AppendLog)
        assert scope["log"].to_list() == scope["history"]
        plain = store.recorder("plain").checkpoint(13, {"messages": scope["history"]})
        with store.read(plain) as a, store.read(str(scope["cid"])) as b:
            assert a.manifest.state_digest == b.manifest.state_digest  # "same bytes, digests"


def _opening_row(label: str) -> list[str]:
    """The cells of docs/store.md's opening table row whose first cell starts with label."""
    for line in STORE_MD.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].startswith(label):
            return cells
    raise AssertionError(f"no opening-table row for {label!r}")


def test_opening_a_regular_file_raises_the_class_the_opening_table_names(tmp_path: Path) -> None:
    """docs/store.md said FormatVersionError (exit 9); the code says InvalidInputError (3)."""
    cells = _opening_row("a regular file")
    file = tmp_path / "f"
    file.write_bytes(b"not a store")
    first = cells[1].strip("`")
    modes = ((True, False), (False, False), (True, True))  # (create, readonly) per column
    for cell, (create, readonly) in zip(cells[1:], modes, strict=True):
        named = first if cell == "same" else cell.strip("`")
        with pytest.raises(cpstore.CpstoreError) as info:
            cpstore.open(file, create=create, readonly=readonly)
        assert type(info.value).__name__ == named == "InvalidInputError", (create, cell)
    assert file.read_bytes() == b"not a store"


def _record(path: Path) -> str:
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        rec.effect("mail.send", b"audit60 payload that is unique in the data file .....")
        return rec.checkpoint(1, {"a": 1})


def test_the_commands_store_md_says_create_a_store_do_and_the_others_do_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/store.md said "No CLI command creates a store"; push/pull/copy/demo do."""
    text = " ".join(STORE_MD.read_text().split())
    assert "No CLI command creates a store but `demo`" in text
    src = tmp_path / "src"
    _record(src)
    for argv in (["log"], ["verify"], ["stats"], ["audit"], ["gc", "--keep-last", "1"]):
        missing = tmp_path / f"none-{argv[0]}"
        code, _, err = _run([*argv, "--store", str(missing)], capsys)
        assert code == cli.EXIT_NOT_FOUND and "no store" in err, (argv, code, err)
        assert not missing.exists()
    assert _run(["push", str(tmp_path / "pushed"), "--store", str(src)], capsys)[0] == 0
    assert _run(["pull", str(src), "--store", str(tmp_path / "pulled")], capsys)[0] == 0
    assert _run(["copy", str(tmp_path / "copied"), "--store", str(src)], capsys)[0] == 0
    for made in ("pushed", "pulled", "copied"):
        with cpstore.open(tmp_path / made, readonly=True) as store:
            assert store.runs() == ["r"], made


def test_validate_of_a_damaged_checkpoint_is_judged_and_a_damaged_ref_is_exit_5(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/decision-table.md's exit 5 row said "a stored checkpoint is damaged": that is
    a REJECT with an INTEGRITY finding (exit 10); exit 5 is damage met before judging."""
    row = next(ln for ln in DECISION_MD.read_text().splitlines() if ln.startswith("| 5 |"))
    assert "INTEGRITY finding, REJECT, exit 10" in row
    store_path = tmp_path / "s"
    cid = _record(store_path)
    data = store_path / "data.mdb"
    raw = bytearray(data.read_bytes())
    at = raw.find(b"audit60 payload")
    assert at > 0 and raw.find(b"audit60 payload", at + 1) < 0
    raw[at] ^= 1
    data.write_bytes(bytes(raw))
    code, out, err = _run(["validate", cid, cid, "--store", str(store_path), "--json"], capsys)
    assert code == cli.EXIT_REJECT, (code, err)
    assert "INTEGRITY" in [f["code"] for f in json.loads(out)["findings"]]
    with cpstore.open(store_path) as store, store.backend.env.env.begin(write=True) as txn:
        dbs = store.backend.env.dbs
        value = bytearray(txn.get(b"r\0main", db=dbs["refs"]))
        assert read_ref(txn, dbs, b"r\0main", layout=2) is not None
        value[0] ^= 1
        txn.put(b"r\0main", bytes(value), db=dbs["refs"])
    code, _, err = _run(["validate", "r@main", cid, "--store", str(store_path)], capsys)
    assert code == cli.EXIT_INTEGRITY, (code, err)


def test_convert_help_lists_exit_7_which_a_full_disk_gives(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README: "each command's --help lists the codes it can give"; convert's lacked 7."""
    with pytest.raises(SystemExit):
        cli.main(["convert", "--help"])
    assert "7 store unavailable" in " ".join(capsys.readouterr().out.split())


def test_an_os_error_without_a_file_name_is_one_line_without_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk at the fsync said "No space left on device: None"."""
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(_DOC))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    code, _, err = _run(["convert", str(doc), str(tmp_path / "out.cprun")], capsys)
    assert code == cli.EXIT_UNAVAILABLE, (code, err)
    assert err.strip() == f"cpstore convert: {os.strerror(errno.ENOSPC)}", err


def test_raise_on_failure_names_where_the_first_finding_is_without_none(tmp_path: Path) -> None:
    """A finding with no position made the error's ``where`` "mode  None"; a positional
    one says stream, unit and position ("tokens seq 0")."""
    base = {k: v for k, v in _DOC.items() if k != "mode"}
    with pytest.raises(cpstore.ValidationFailedError) as info:
        cpstore.validate(base, base, raise_on_failure=True)  # P declares no mode
    assert info.value.where == "mode", info.value.where
    assert "None" not in str(info.value)
    tokens = [{"seq": 0, "kind": "rng", "value": 1, "provenance": "recorded"}]
    replay = {**base, "mode": "strict", "tokens": [{**tokens[0], "value": 2}]}
    with pytest.raises(cpstore.ValidationFailedError) as info:
        cpstore.validate({**base, "tokens": tokens}, replay, raise_on_failure=True)
    assert info.value.where == "tokens seq 0", info.value.where


def test_an_empty_branch_in_a_checkpoint_name_is_main(tmp_path: Path) -> None:
    """docs/store.md, "Naming checkpoints": ``RUN@`` and ``RUN@~N`` name main (the code's
    ``branch or "main"``, undocumented before audit60)."""
    text = " ".join(STORE_MD.read_text().split())
    assert "an empty BRANCH is `main` (`RUN@`, `RUN@~N`" in text
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        first, head = rec.checkpoint(1, {"a": 1}), rec.checkpoint(2, {"a": 2})
        assert store.resolve("r@") == store.resolve("r@main") == head
        assert store.resolve("r@~1") == store.resolve("r@main~1") == first
        with pytest.raises(cpstore.NotFoundError):
            store.resolve("r@other")


def _foreign_lmdb(folder: Path) -> Path:
    env = lmdb.open(str(folder))
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    env.close()
    return folder


def _a_store(folder: Path) -> Path:
    cpstore.open(folder).close()
    return folder


def _file_in(folder: Path, name: str, data: bytes = b"") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder


_OPENING_SETUPS: dict[str, Callable[[Path], Path]] = {
    "nothing, or an empty folder": lambda d: d / "new",
    "a cpstore store": _a_store,
    "a 0-byte `data.mdb`": lambda d: _file_in(d, "data.mdb"),
    "an LMDB environment without the format record": _foreign_lmdb,
    "a folder of other files": lambda d: _file_in(d, "notes.txt", b"hi"),
    "a regular file": lambda d: _file_in(d, "f", b"x") / "f",
}


@pytest.mark.parametrize("label", sorted(_OPENING_SETUPS))
def test_each_row_of_the_opening_table_is_what_open_does(tmp_path: Path, label: str) -> None:
    """docs/store.md's opening table, row by row, against ``cpstore.open`` (and the open
    docstring in docs/api.md, which said a folder of other files is FormatVersionError
    whatever ``create``)."""
    cells = _opening_row(label)
    modes = ((True, False), (False, False), (True, True))  # (create, readonly) per column
    for column, (cell, (create, readonly)) in enumerate(zip(cells[1:], modes, strict=True)):
        folder = tmp_path / str(column)
        folder.mkdir()
        path = _OPENING_SETUPS[label](folder)
        said = (cells[1] if cell == "same" else cell).strip("`")
        try:
            cpstore.open(path, create=create, readonly=readonly).close()
            got = "opened" if label == "a cpstore store" else "a new store"
        except cpstore.CpstoreError as exc:
            got = type(exc).__name__
        assert got == said, (label, create, readonly)


def test_a_replay_handing_over_its_packed_buffer_needs_its_kind_names(tmp_path: Path) -> None:
    """docs/run-document.md's ``Run(..., tokens=PackedTokens(buffer))`` example left out
    ``kind_names``: with a kind beyond rng/clock/tool/env that replay is a REJECT
    (TOKEN_MISMATCH) of a faithful replay. The example now passes them."""
    example = (ROOT / "docs" / "run-document.md").read_text().split("replay = Run(", 1)[1]
    assert "kind_names=names" in example.split("```", 1)[0]
    from cpstore.native.records import kind_code  # noqa: PLC0415

    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.token("rng", 5)
        rec.token("llm_sample", "x")
        cid = rec.checkpoint(1, {"s": 1})
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp)
            session.cursor.resolve("rng")
            session.cursor.resolve("llm_sample")
            buffer = bytes(session.finish(cpstore.state_digest({"s": 1})).tokens.records)
        verdicts = []
        for names in ({}, {kind_code("llm_sample"): "llm_sample"}):
            replay = cpstore.Run(
                "r",
                1,
                cpstore.state_digest({"s": 1}),
                tokens=cpstore.PackedTokens(buffer, kind_names=names),
                mode=cpstore.ReplayMode.STRICT,
            )
            verdicts.append(cpstore.validate(cid, replay, store=store, record=False).verdict)
        assert verdicts == [cpstore.Verdict.REJECT, cpstore.Verdict.ACCEPT]


def test_a_best_effort_live_token_is_a_reject_and_a_live_recorded_token_is_refused(
    tmp_path: Path,
) -> None:
    """docs/decision-table.md said a live resolution makes the decision QUARANTINE
    (BEST_EFFORT, LIVE_RESOLUTION): the live token always also differs from R where the
    log could not answer (TOKEN_MISMATCH, or TOKEN_COUNT past its end), a REJECT."""
    text = " ".join(DECISION_MD.read_text().split())
    assert "so the decision holds BEST_EFFORT and LIVE_RESOLUTION" in text
    best = cpstore.ReplayMode.BEST_EFFORT
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, b"x")
        for asks, extra in ((["clock"], "TOKEN_MISMATCH"), (["rng", "rng"], "TOKEN_COUNT")):
            with store.read(cid) as cp:
                session = cpstore.ReplaySession(cp, mode=best)
                for kind in asks:
                    session.cursor.resolve(kind, live=lambda: 42)
                replay = session.finish(cpstore.state_digest(b"x"))
            decision = cpstore.validate(cid, replay, store=store, record=False)
            assert decision.verdict is cpstore.Verdict.REJECT, asks
            codes = {c.value for c in decision.codes}
            assert {"BEST_EFFORT", "LIVE_RESOLUTION", extra} <= codes, (asks, codes)
        live = store.recorder("q")
        live.token("rng", 1, provenance="live")
        cid = live.checkpoint(1, b"x")
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp, mode=best)
            with pytest.raises(cpstore.ReplayDivergenceError, match="refusing to audit"):
                session.cursor.resolve("rng", live=lambda: 1)


def test_push_carries_a_standing_non_accept_decision_as_the_readme_now_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README said push/pull copy no audit log at all; a standing QUARANTINE is carried,
    so recording on from the pushed checkpoint needs a permit there too."""
    text = " ".join(README.read_text().split())
    assert "only a checkpoint's standing decision that is not an ACCEPT is carried" in text
    src, dest = tmp_path / "src", tmp_path / "dest"
    with cpstore.open(src) as store:
        cid = store.recorder("r").checkpoint(1, {"a": 1})
        replay = {**_DOC, "run_id": "r", "state_digest": cpstore.state_digest({"a": 1})}
        replay.pop("mode")
        assert cpstore.validate(cid, replay, store=store).verdict is cpstore.Verdict.QUARANTINE
    assert _run(["push", str(dest), "--store", str(src)], capsys)[0] == 0
    with cpstore.open(dest) as store:
        assert [r.kind for r in store.audit_records()] == ["decision"]
        with pytest.raises(cpstore.GateError):
            store.recorder("r")


def test_cat_json_of_a_payload_is_json_with_bytes_hex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: "--json wherever the output is data (bytes as {"bytes_hex": ...})";
    ``cat CID effect 0 --json`` wrote the raw payload (binary bytes for a script that
    asked for JSON). Without --json the bytes stay unchanged."""
    path = tmp_path / "s"
    payload = b"\x00\xffbinary\n"
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        rec.observe(1, "cfg", payload, pinned_at=1.0)
        rec.effect("t", payload)
        rec.transcript(payload)
        rec.checkpoint(1, {"a": 1})
    for what in (["observation", "1", "cfg"], ["effect", "0"], ["transcript"]):
        code, out, err = _run(["cat", "r@main", *what, "--json", "--store", str(path)], capsys)
        assert code == 0, err
        assert json.loads(out) == {"bytes_hex": payload.hex()}, what


def test_log_branch_without_a_run_is_refused_not_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cpstore log --branch B`` (README: ``log [RUN] [--branch B]``) listed every run and
    branch, B ignored, exit 0: an operator asking for one branch got all of them."""
    path = tmp_path / "s"
    _record(path)
    code, out, err = _run(["log", "--branch", "nob", "--store", str(path)], capsys)
    assert code == cli.EXIT_BAD_INPUT and out == "" and "--branch" in err, (code, out, err)
    assert _run(["log", "--store", str(path)], capsys)[1].startswith("r: main -> ")
    assert _run(["log", "r", "--store", str(path)], capsys)[0] == 0  # main by default
    assert _run(["log", "r", "--branch", "main", "--store", str(path)], capsys)[0] == 0


def test_two_branches_of_a_run_number_different_effects_alike_as_effects_md_warns(
    tmp_path: Path,
) -> None:
    """docs/effects.md called `run:seq` unique per run; a fork numbers its own effects
    from the fork point, so two branches hold different effects at one seq (a receiver
    keyed on `run:seq` would drop the second). The digest tells them apart; an inherited
    entry keeps its seq and digest."""
    text = " ".join((ROOT / "docs" / "effects.md").read_text().split())
    assert 'f"{run_id}:{seq}:{digest}"' in text and "unique per run" not in text
    with cpstore.open(tmp_path / "s") as store:
        main = store.recorder("r")
        main.effect("mail", b"first")
        root = main.checkpoint(0, {"s": 0})
        fork = store.recorder("r", branch="b", parent=root)
        assert main.effect("mail", b"main two") == fork.effect("mail", b"fork two") == 1
        heads = [main.checkpoint(1, {"s": 1}), fork.checkpoint(1, {"s": 2})]
        ledgers = []
        for cid in heads:
            with store.read(cid) as cp:
                ledgers.append(cp.effects())
        assert ledgers[0][0] == ledgers[1][0]  # the inherited entry: same key either way
        assert ledgers[0][1][0] == ledgers[1][1][0] == 1
        assert ledgers[0][1][2] != ledgers[1][1][2]


def test_retained_json_uses_the_one_vocabulary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: "JSON output uses one vocabulary: checkpoint_id, ..."; ``retained --json``
    said ``checkpoint`` and ``run`` (inspect, log and verify say checkpoint_id, run_id),
    and ``--release --json`` ``released``."""
    path = tmp_path / "s"
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        first, head = rec.checkpoint(1, {"a": 1}), rec.checkpoint(2, {"a": 2})
        store.reset_ref("r", "main", first, expected_old=head, operator="o", reason="x")
    code, out, err = _run(["retained", "--json", "--store", str(path)], capsys)
    assert code == 0, err
    [row] = json.loads(out)
    assert (row["checkpoint_id"], row["run_id"], row["branch"]) == (head, "r", "main")
    assert "checkpoint" not in row and "run" not in row
    argv = ["retained", "--release", head, "--operator", "o", "--reason", "y", "--json"]
    code, out, err = _run([*argv, "--store", str(path)], capsys)
    assert code == 0, err
    assert json.loads(out)["checkpoint_id"] == head
