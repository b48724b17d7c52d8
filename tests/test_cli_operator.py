"""Operator tools (issue 14): what an incident responder runs, and that it tells the truth."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from stored import edit_raw, flip_byte

import cpstore
from cpstore import cli
from cpstore.cli import entry as cli_entry
from cpstore.store import compact_store, copy_store, ids


@pytest.fixture()
def store_path(tmp_path: Path) -> tuple[str, str, str]:
    """A store with one run of two checkpoints; returns (path, first id, head id)."""
    path = str(tmp_path / "store")
    with cpstore.open(path) as store:
        rec = store.recorder("run-a")
        rec.observe(1, "read_config", b"cfg-v1", pinned_at=1.0)
        rec.token("rng", 7)
        rec.decision(1, {"node": "plan"})
        first = rec.checkpoint(1, {"memory": "hello", "plan": [1, 2]}, seal_ledger=False)
        rec.token("clock", 2.5)
        rec.effect("crm.update", b"ticket")
        rec.transcript(b"the answer")
        head = rec.checkpoint(2, {"memory": "hello", "plan": [1, 2, 3]}, metadata={"who": "bot"})
    return path, first, head


#: A minimal valid run document (every required field).
_DOC: dict[str, Any] = {
    "format": 1,
    "run_id": "r",
    "step": 1,
    "state_digest": "s",
    "observations": [],
    "tokens": [],
    "call_graph": [],
    "transcript_digest": None,
    "effects": [],
    "ledger_sealed": True,
    "mode": "strict",
}


def _subcommand(name: str) -> argparse.ArgumentParser:
    """The parser of one sub-command, as --help shows it."""
    sub = next(a for a in cli_entry._parser()._actions if a.dest == "command")
    assert isinstance(sub, argparse._SubParsersAction)
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr)."""
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _quarantine_decision(path: str, head: str) -> str:
    """Record a QUARANTINE decision (releasable) about ``head``; returns its id."""
    with cpstore.open(path) as store:
        with store.read(head) as cp:
            session = cpstore.ReplaySession(cp, mode=cpstore.ReplayMode.BEST_EFFORT)
            session.cursor.resolve("rng")
            session.cursor.resolve("clock")
            session.decision(1, "plan")
            session.observations.read(1, "read_config")
            replayed = session.finish(
                cp.manifest.state_digest, transcript_digest=cp.manifest.transcript_digest
            )
        decision = cpstore.validate(head, replayed, store=store)
    assert decision.verdict is cpstore.Verdict.QUARANTINE, decision.findings
    return decision.id


# -- sign-off ----------------------------------------------------------------------------


def test_sign_off_accepts_the_audit_digest_that_audit_prints(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The digest pasted from `cpstore audit` names the decision; text audit shows its id."""
    path, _, head = store_path
    decision_id = _quarantine_decision(path, head)
    code, out, _ = run(["audit", "--store", path], capsys)
    assert code == 0 and decision_id in out
    digest = re.search(r"^\s+0\s+\S+\s+([0-9a-f]{32})\s+decision", out, re.M)
    assert digest is not None, out
    code, out, err = run(
        ["sign-off", digest.group(1), "--store", path, "--operator", "ann", "--reason", "ok"],
        capsys,
    )
    assert code == 0, err
    assert decision_id in out


def test_sign_off_takes_a_decision_prefix_of_eight_or_more_hex(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An 8-character prefix of the decision id works; shorter is bad input (exit 3, as
    inspect's too-short checkpoint prefix; it was "no such decision", exit 4)."""
    path, _, head = store_path
    decision_id = _quarantine_decision(path, head)
    code, out, err = run(
        ["sign-off", decision_id[:8], "--store", path, "--operator", "a", "--reason", "r"], capsys
    )
    assert code == 0 and decision_id in out, err
    code, _, err = run(
        ["sign-off", decision_id[:7], "--store", path, "--operator", "a", "--reason", "r"], capsys
    )
    assert code == cli.EXIT_BAD_INPUT and "at least 8 hex" in err, err


def test_sign_off_refuses_a_superseded_decision_and_a_second_sign_off(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A decision a later one supersedes, and one already signed, are refused (exit 6)."""
    path, _, head = store_path
    older = _quarantine_decision(path, head)
    newer = _quarantine_decision(path, head)
    argv = ["--store", path, "--operator", "ann", "--reason", "r"]
    code, _, err = run(["sign-off", older, *argv], capsys)
    assert code == cli.EXIT_REFUSED and "supersedes" in err
    code, _, err = run(["sign-off", newer, *argv], capsys)
    assert code == 0, err
    code, _, err = run(["sign-off", newer, *argv], capsys)
    assert code == cli.EXIT_REFUSED and "already signed off" in err
    with cpstore.open(path) as store:
        assert len(list(store.audit_records(kind="signoff"))) == 1


# -- validate: $CPSTORE_PATH, looking does not act, errors name the file, --wide ------------


def test_validate_uses_cpstore_path_when_no_store_is_given(
    store_path: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`validate CID CID` finds the store through $CPSTORE_PATH, as every command does."""
    path, _, head = store_path
    monkeypatch.setenv("CPSTORE_PATH", path)
    parser = cli_entry._parser()
    args = parser.parse_args(["validate", head, head])
    assert args.store == path
    code = args.handler(args)
    capsys.readouterr()
    assert code == cli.EXIT_QUARANTINE  # a stored checkpoint as P declares no strict mode


def test_validate_from_the_command_line_records_nothing_unless_asked(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Looking does not act: no audit record without --record, one with it."""
    path, _, head = store_path
    run(["validate", head, head, "--store", path], capsys)
    with cpstore.open(path) as store:
        assert list(store.audit_records()) == []
    run(["validate", head, head, "--store", path, "--record"], capsys)
    with cpstore.open(path) as store:
        assert [r.kind for r in store.audit_records()] == ["decision"]


def test_validate_error_names_the_file_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`validate R.json bad.json` says `bad.json: ...` (issue 13's last bullet)."""
    good = tmp_path / "R.json"
    good.write_text(json.dumps({**_DOC, "state_digest": "s"}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({k: v for k, v in _DOC.items() if k != "run_id"}))
    code, _, err = run(["validate", str(good), str(bad)], capsys)
    assert code == cli.EXIT_BAD_INPUT
    assert err.startswith(f"cpstore validate: {bad}: ") and "run_id" in err


def test_validate_table_shows_values_in_full_with_wide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default table cuts long values at 30 characters; --wide shows the differing tail."""
    base = dict(_DOC)
    long_a, long_b = "x" * 40 + "-recorded", "x" * 40 + "-replayed"
    (tmp_path / "a.json").write_text(json.dumps({**base, "state_digest": long_a}))
    (tmp_path / "b.json").write_text(json.dumps({**base, "state_digest": long_b}))
    argv = ["validate", str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    _, out, _ = run(argv, capsys)
    table = out.split("\n\n")[1]
    assert "-recorded" not in table and "..." in table
    _, out, _ = run([*argv, "--wide"], capsys)
    table = out.split("\n\n")[1]
    assert long_a in table and long_b in table


# -- audit -------------------------------------------------------------------------------


def test_audit_check_fails_on_a_damaged_object_as_its_help_says(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--check verifies the store too: a damaged object is exit 5, not 'verifies'."""
    path, _, head = store_path
    with cpstore.open(path) as store:
        part = store.manifest(head).state_parts["plan"]
    edit_raw(path, "objects", bytes.fromhex(part), flip_byte(0))
    code, out, _ = run(["audit", "--store", path, "--check"], capsys)
    assert code == cli.EXIT_INTEGRITY
    assert "STORE DAMAGED" in out and part in out
    assert "verify the whole store" in _subcommand("audit").format_help()


def test_audit_shows_times_gate_rows_and_a_summary_and_refuses_a_bogus_kind(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each row has a UTC time; a gate row says what passed; --kind bogus is exit 2."""
    path, _, head = store_path
    with cpstore.open(path) as store:
        rec = store.recorder("run-a")
        rec.close()
        decision = cpstore.validate(head, head, store=store)
        cpstore.sign_off(store, decision, operator="ann", reason="seen")
    code, out, _ = run(["audit", "--store", path], capsys)
    assert code == 0
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", out)
    assert "decision " + decision.id in out and "signed off by 'ann'" in out
    assert re.search(r"^2 record\(s\): 1 decision, 1 signoff$", out, re.M)
    code, _, err = run(["audit", "--store", path, "--kind", "bogus"], capsys)
    assert code == cli.EXIT_USAGE and "unknown record kind 'bogus'" in err
    assert err.count("\n") == 1


# -- diff --------------------------------------------------------------------------------


def test_diff_exit_codes_and_no_difference_for_the_same_checkpoint(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """diff X X finds nothing (exit 0, no BEST_EFFORT); a difference is exit 12."""
    path, first, head = store_path
    code, out, _ = run(["diff", head, head, "--store", path], capsys)
    assert code == cli.EXIT_OK and "BEST_EFFORT" not in out and "no difference" in out
    code, out, _ = run(["diff", first, head, "--store", path, "--json"], capsys)
    data = json.loads(out)
    assert code == cli.EXIT_DIFFERENT == 12 and data["differs"] is True
    assert "mode" not in data["streams"] and "ledger" not in data["streams"]


def test_diff_names_the_state_parts_that_differ_with_json_values(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A state difference lists each differing part with both values, shown as JSON."""
    path, first, head = store_path
    code, out, _ = run(["diff", first, head, "--store", path], capsys)
    assert code == cli.EXIT_DIFFERENT
    assert "part 'plan'" in out and "expected [1, 2]" in out and "observed [1, 2, 3]" in out
    assert "part 'memory'" not in out
    code, out, _ = run(["diff", first, head, "--store", path, "--json"], capsys)
    parts = json.loads(out)["state_parts"]
    assert [(p["part"], p["expected"], p["observed"]) for p in parts] == [
        ("plan", [1, 2], [1, 2, 3])
    ]


# -- gc, compact, copy ---------------------------------------------------------------------


def test_gc_dry_run_changes_nothing_and_reports_what_would_go(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--dry-run lists the checkpoint a real run removes, and the store keeps it."""
    path, first, _ = store_path
    code, out, _ = run(["gc", "--keep-last", "1", "--dry-run", "--store", path, "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["dry_run"] is True and data["checkpoint_ids"] == [first]
    with cpstore.open(path) as store:
        assert store.manifest(first).id == first
    code, out, _ = run(["gc", "--keep-last", "1", "--store", path, "--json"], capsys)
    assert json.loads(out)["checkpoint_ids"] == [first]


def test_gc_of_an_unknown_run_is_not_found(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--delete-run no-such-run is exit 4, not 'removed 0'."""
    code, _, err = run(["gc", "--delete-run", "no-such-run", "--store", store_path[0]], capsys)
    assert code == cli.EXIT_NOT_FOUND and "no such run" in err


def test_gc_reports_a_decided_checkpoint_and_records_it_in_the_audit_log(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Pruning a checkpoint a decision names is listed and leaves a gc audit record."""
    path, first, head = store_path
    run(["validate", first, head, "--store", path, "--record"], capsys)
    code, out, _ = run(["gc", "--keep-last", "1", "--store", path], capsys)
    assert code == 0 and f"{first} is named by a decision" in out
    assert "never shrinks the file" in out and "reusable" in out and "compact" in out
    with cpstore.open(path) as store:
        gc = [r.body for r in store.audit_records(kind="gc")]
    assert gc == [{"operation": "prune", "checkpoints_removed": 1, "decided": [first]}]


def test_gc_space_figures_are_truthful_and_stats_dedupe_is_at_least_one(tmp_path: Path) -> None:
    """After gc the file does not shrink, freed pages are reusable, dedupe ratio >= 1."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        rec = store.recorder("big")
        for i in range(40):
            rec.observe(i, "blob", os.urandom(20_000), pinned_at=1.0)
            rec.checkpoint(i, {"i": i, "blob": os.urandom(8_000)})
        before = store.space()
        report = store.gc(keep_last=2)
        after = store.space()
        stats = cpstore.store.store_stats(store)
    assert len(report.checkpoints) == 38 and report.bytes_removed > 38 * 8_000
    assert after.file_bytes >= before.file_bytes  # LMDB never shrinks the file
    assert after.reusable_bytes > before.reusable_bytes + 30 * 8_000
    assert stats.dedupe_ratio >= 1.0


def test_compact_shrinks_the_file_after_gc_and_keeps_everything(tmp_path: Path) -> None:
    """compact rewrites the data file smaller; the store verifies and reads the same."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        rec = store.recorder("big")
        for i in range(40):
            rec.checkpoint(i, {"i": i, "blob": os.urandom(30_000)})
        store.gc(keep_last=1)
        head = store.ref("big")
        counts = store.verify().counts
    assert head is not None
    report = compact_store(path)
    assert report.bytes_after < report.bytes_before / 4
    assert os.path.getsize(os.path.join(path, "data.mdb")) == report.bytes_after
    assert not os.path.exists(os.path.join(path, "compact.tmp"))
    with cpstore.open(path) as store:
        verified = store.verify()
        assert verified.ok and verified.counts == counts
        assert store.ref("big") == head
        rec = store.recorder("big")  # and it takes writes again
        rec.checkpoint(41, {"i": 41})


def test_compact_refuses_a_store_open_in_this_process(tmp_path: Path) -> None:
    """Swapping the file under an open handle would lose writes: refused."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        store.recorder("r").checkpoint(1, {"a": 1})
        with pytest.raises(cpstore.StoreError, match="close the store"):
            compact_store(path)


def _hold_open(path: str, ready: Any, stop: Any) -> None:
    with cpstore.open(path) as store:
        ready.set()
        stop.wait(30)
        store.recorder("other").checkpoint(1, {"late": True})


def test_compact_refuses_while_another_process_has_the_store_open(tmp_path: Path) -> None:
    """Another process holding the store: compact says so and changes nothing; its writes land."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        store.recorder("r").checkpoint(1, {"a": 1})
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_open, args=(path, ready, stop))
    proc.start()
    try:
        assert ready.wait(30)
        size = os.path.getsize(os.path.join(path, "data.mdb"))
        with pytest.raises(cpstore.StoreError, match="another process"):
            compact_store(path)
        assert os.path.getsize(os.path.join(path, "data.mdb")) == size
    finally:
        stop.set()
        proc.join(30)
    assert proc.exitcode == 0
    with cpstore.open(path) as store:
        assert store.ref("other") is not None and store.verify().ok


def _keep_writing(path: str, seconds: float, ready: Any, result: Any) -> None:
    with cpstore.open(path) as store:
        rec = store.recorder("writer")
        end = time.monotonic() + seconds
        i = 0
        rec.checkpoint(i, {"i": i})
        ready.set()
        while time.monotonic() < end:
            i += 1
            rec.checkpoint(i, {"i": i, "pad": os.urandom(2_000)})
    result.put(i)


def test_hot_copy_while_another_process_writes_is_a_verified_store(tmp_path: Path) -> None:
    """copy during a writer process: each copy is one consistent snapshot and verifies."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        store.recorder("seed").checkpoint(1, {"a": 1})
    ctx = multiprocessing.get_context("spawn")
    ready, result = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_keep_writing, args=(path, 3.0, ready, result))
    proc.start()
    try:
        assert ready.wait(30)
        copies = []
        for n in range(3):
            with cpstore.open(path, readonly=True) as store:
                report = copy_store(store, tmp_path / f"copy{n}")
            assert report.ok
            copies.append(tmp_path / f"copy{n}")
            time.sleep(0.2)
        written = result.get(timeout=60)
    finally:
        proc.join(60)
    assert proc.exitcode == 0 and written > 0
    steps = []
    for copy in copies:
        with cpstore.open(copy, readonly=True) as c:
            head = c.ref("writer")
            assert head is not None and c.verify().ok
            steps.append(c.manifest(head).step)
            with cpstore.open(path, readonly=True) as src:  # a checkpoint the source holds
                assert src.manifest(head).step == steps[-1]
    assert steps == sorted(steps)


def test_copy_refuses_a_non_empty_destination(
    store_path: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy never overwrites: a folder with files in it is bad input (exit 3)."""
    dest = tmp_path / "full"
    dest.mkdir()
    (dest / "x").write_text("keep me")
    code, _, err = run(["copy", str(dest), "--store", store_path[0]], capsys)
    assert code == cli.EXIT_BAD_INPUT and "new or empty folder" in err
    assert (dest / "x").read_text() == "keep me"
    code, out, _ = run(["copy", str(tmp_path / "new"), "--store", store_path[0]], capsys)
    assert code == 0 and "verified" in out


# -- ids -----------------------------------------------------------------------------------


def test_every_id_taking_command_accepts_a_prefix_and_run_at_branch(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """inspect, cat, diff and validate take an 8-hex prefix, RUN@BRANCH and RUN@BRANCH~N."""
    path, first, head = store_path
    for name in (head[:8], "run-a@main", "run-a@main~0"):
        code, out, _ = run(["inspect", name, "--store", path, "--json"], capsys)
        assert code == 0 and json.loads(out)["checkpoint_id"] == head
    code, out, _ = run(["inspect", "run-a@main~1", "--store", path, "--json"], capsys)
    assert json.loads(out)["checkpoint_id"] == first
    code, _, _ = run(["diff", first[:10], "run-a@main~1", "--store", path], capsys)
    assert code == cli.EXIT_OK
    code, _, _ = run(["validate", head[:9], "run-a@main", "--store", path], capsys)
    assert code == cli.EXIT_QUARANTINE
    code, _, err = run(["inspect", "run-a@main~2", "--store", path], capsys)
    assert code == cli.EXIT_NOT_FOUND and "no ancestor" in err
    code, _, err = run(["inspect", head[:7], "--store", path], capsys)
    assert code == cli.EXIT_BAD_INPUT and "at least 8" in err


def test_an_ambiguous_prefix_lists_the_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids sharing a prefix: the error names every candidate, and none is picked."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        seen: dict[str, str] = {}
        i = 0
        while True:  # two real checkpoints whose ids share their first hex character
            cid = rec.checkpoint(i, {"i": i})
            i += 1
            if cid[0] in seen:
                other = seen[cid[0]]
                break
            seen[cid[0]] = cid
        # 8 shared characters would need ~2**32 checkpoints: lower the floor to reach the path.
        monkeypatch.setattr(ids, "MIN_PREFIX", 1)
        with pytest.raises(cpstore.InvalidInputError, match="ambiguous") as exc:
            store.resolve(cid[0])
        assert cid in str(exc.value) and other in str(exc.value)
        assert store.resolve(cid[:20]) == cid


def test_log_prints_ids_that_inspect_accepts_with_times(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each log line starts with a full id inspect takes, and shows a UTC time."""
    path, _, _ = store_path
    _, out, _ = run(["log", "run-a", "--store", path], capsys)
    for line in out.splitlines():
        cid = line.split()[0]
        assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line)
        assert run(["inspect", cid, "--store", path], capsys)[0] == 0
    _, out, _ = run(["log", "--store", path], capsys)
    head = out.split("-> ")[1].strip()
    assert run(["inspect", head, "--store", path], capsys)[0] == 0


# -- readability, vocabulary, --help -------------------------------------------------------------


def test_inspect_shows_created_at_and_metadata(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Text inspect prints the creation time and each metadata entry."""
    path, _, head = store_path
    _, out, _ = run(["inspect", head, "--store", path], capsys)
    assert re.search(r"created \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", out)
    assert 'metadata who = "bot"' in out


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    """cpstore --version prints the distribution's version and exits 0."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"cpstore {cpstore.__version__}"


def test_every_command_help_has_a_description_and_exit_codes() -> None:
    """Each sub-command's --help has a description and an exit-code epilog."""
    parser = cli_entry._parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert isinstance(sub, argparse._SubParsersAction)
    for name, command in sub.choices.items():
        assert command.description, name
        assert (command.epilog or "").startswith("exit codes: "), name


def test_json_uses_one_vocabulary_across_commands(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """checkpoint_id / decision_id / provenance_tags everywhere; no id, decision, tags keys."""
    path, _, head = store_path
    decision_id = _quarantine_decision(path, head)
    outputs = [
        run(["inspect", head, "--store", path, "--json"], capsys)[1],
        run(["log", "run-a", "--store", path, "--json"], capsys)[1],
        run(
            [
                "sign-off",
                decision_id,
                "--store",
                path,
                "--operator",
                "a",
                "--reason",
                "r",
                "--json",
            ],
            capsys,
        )[1],
    ]
    inspect_, log_, signed = (json.loads(o) for o in outputs)
    assert inspect_["checkpoint_id"] == head and "provenance_tags" in inspect_
    assert all({"checkpoint_id", "provenance_tags"} <= set(e) for e in log_)
    assert all("id" not in e and "tags" not in e for e in log_)
    assert signed["decision_id"] == decision_id and signed["checkpoint_id"] == head
    assert "decision" not in signed and "checkpoint" not in signed


def test_bytes_are_rendered_one_way_in_text_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bytes token value is {"bytes_hex": ...} in both cat's text and its JSON."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        rec.token("rng", b"\x01\xff")
        rec.checkpoint(1, {"a": 1})
    _, text, _ = run(["cat", "r@main", "tokens", "--store", path], capsys)
    _, js, _ = run(["cat", "r@main", "tokens", "--store", path, "--json"], capsys)
    assert '{"bytes_hex": "01ff"}' in text
    assert json.loads(js)[0]["value"] == {"bytes_hex": "01ff"}


# -- cat, verify ---------------------------------------------------------------------------


def test_cat_prints_payloads_effects_transcript_and_token_ranges(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """cat writes recorded bytes unchanged, and a token range one per line."""
    path, _, head = store_path
    script = "import sys; from cpstore import cli; sys.exit(cli.main(sys.argv[1:]))"

    def cat(*args: str) -> bytes:
        done = subprocess.run(
            [sys.executable, "-c", script, "cat", head, *args, "--store", path],
            capture_output=True,
            check=True,
        )
        return done.stdout

    assert cat("observation", "1", "read_config") == b"cfg-v1"
    assert cat("effect", "0") == b"ticket"
    assert cat("transcript") == b"the answer"
    code, out, _ = run(
        ["cat", head, "tokens", "--start", "1", "--count", "5", "--store", path], capsys
    )
    assert code == 0 and out.splitlines() == ["1\tclock\trecorded\t2.5"]
    code, _, err = run(["cat", head, "observation", "9", "nope", "--store", path], capsys)
    assert code == cli.EXIT_NOT_FOUND and "no recorded observation" in err


def test_verify_names_the_checkpoints_a_damaged_object_affects(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged state part is listed with the one checkpoint that reaches it."""
    path, first, head = store_path
    with cpstore.open(path) as store:
        part = store.manifest(head).state_parts["plan"]
        shared = store.manifest(head).state_parts["memory"]
    for key in (part, shared):
        edit_raw(path, "objects", bytes.fromhex(key), flip_byte(0))
    code, out, _ = run(["verify", "--store", path, "--json"], capsys)
    assert code == cli.EXIT_INTEGRITY
    affects = {
        p["where"].removeprefix("objects/"): sorted(a["checkpoint_id"] for a in p["affects"])
        for p in json.loads(out)["problems"]
    }
    assert affects[part] == [head]
    assert affects[shared] == sorted([first, head])  # "hello" is in both checkpoints


def _sign(path: str, decision_id: str, who: str) -> str:
    try:
        with cpstore.open(path) as store:
            cpstore.sign_off(store, decision_id, operator=who, reason="race")
        return "signed"
    except cpstore.SignOffError as exc:
        return "refused: " + exc.what


def test_two_processes_signing_one_decision_get_exactly_one_sign_off(
    store_path: tuple[str, str, str],
) -> None:
    """Racing sign-offs of one decision: one lands, the others are refused, the log has one."""
    path, _, head = store_path
    ctx = multiprocessing.get_context("spawn")
    for _ in range(3):
        decision_id = _quarantine_decision(path, head)
        with ctx.Pool(4) as pool:
            results = pool.starmap(_sign, [(path, decision_id, f"op{i}") for i in range(4)])
        with cpstore.open(path) as store:
            signed = [
                r
                for r in store.audit_records(kind="signoff")
                if r.body["decision_id"] == decision_id
            ]
        assert len(signed) == 1 and results.count("signed") == 1, results
        assert all(r == "signed" or "already signed off" in r for r in results), results


def test_a_missing_document_with_a_store_is_not_found_not_a_bad_id(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped file name beside a checkpoint is 'no such run document' (exit 4)."""
    path, _, head = store_path
    for command in ("validate", "diff"):
        code, _, err = run([command, "missing.json", head, "--store", path], capsys)
        assert code == cli.EXIT_NOT_FOUND and "missing.json" in err, (command, err)


def _open_read_close(path: str, seconds: float, ready: Any, result: Any) -> None:
    """Open, read the head's state whole (verified), close; again and again."""
    errors: list[str] = []
    reads = 0
    end = time.monotonic() + seconds
    ready.set()
    while time.monotonic() < end:
        try:
            with cpstore.open(path, readonly=True) as store, store.latest("big") as cp:
                cp.state()
                reads += 1
        except Exception as exc:  # every failure is the finding
            errors.append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.005)
    result.put((reads, errors))


def test_compact_with_another_process_opening_and_reading_loses_nothing(tmp_path: Path) -> None:
    """A process opening the store during compaction waits or is seen: its reads all verify."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        rec = store.recorder("big")
        for i in range(30):
            rec.checkpoint(i, {"i": i, "blob": os.urandom(40_000)})
        store.gc(keep_last=2)
        head = store.ref("big")
    ctx = multiprocessing.get_context("spawn")
    ready, result = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_open_read_close, args=(path, 4.0, ready, result))
    proc.start()
    compacted = refused = 0
    try:
        assert ready.wait(30)
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            try:
                compact_store(path)
                compacted += 1
            except cpstore.StoreError as exc:
                assert "another process" in str(exc) or "already open" in str(exc), exc
                refused += 1
        reads, errors = result.get(timeout=60)
    finally:
        proc.join(60)
    assert proc.exitcode == 0 and errors == [] and reads > 0
    assert compacted + refused > 0
    with cpstore.open(path) as store:
        assert store.ref("big") == head and store.verify().ok
