"""The command line: each sub-command's output, exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from stored import edit_raw, flip_byte

import cpstore
from cpstore import cli


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
        head = rec.checkpoint(2, {"memory": "hello", "plan": [1, 2, 3]})
    return path, first, head


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr)."""
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_verify_reports_ok_and_exit_zero(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """verify checks everything and exits 0 on a sound store."""
    code, out, _ = run(["verify", "--store", store_path[0]], capsys)
    assert code == cli.EXIT_OK
    assert out.strip().endswith("ok")


def test_verify_json_lists_counts_and_no_problems(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """verify --json is machine-readable."""
    code, out, _ = run(["verify", "--store", store_path[0], "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["ok"] is True and data["problems"] == []
    assert data["counts"]


def test_verify_finds_a_flipped_object_and_exits_integrity(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged object is reported by verify with exit code 5."""
    path, _, head = store_path
    with cpstore.open(path) as store:
        state_part = next(iter(store.manifest(head).state_parts.values()))
    edit_raw(path, "objects", bytes.fromhex(state_part), flip_byte(0))
    code, out, _ = run(["verify", "--store", path], capsys)
    assert code == cli.EXIT_INTEGRITY
    assert "PROBLEM" in out and state_part in out


def test_inspect_shows_manifest_logs_and_a_state_part(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """inspect names the run, the logs with counts, and prints a part."""
    path, _, head = store_path
    code, out, _ = run(["inspect", head, "--store", path, "--tokens", "2"], capsys)
    assert code == 0
    assert f"checkpoint {head}" in out and "run run-a" in out
    assert "tokens" in out and "2 records" in out
    assert "rng" in out and "clock" in out
    code, out, _ = run(["show", head, "--store", path, "--part", "plan"], capsys)
    assert code == 0 and out.strip() == "[1, 2, 3]"
    code, out, _ = run(["inspect", head, "--store", path, "--json"], capsys)
    data = json.loads(out)
    assert data["checkpoint_id"] == head and data["logs"]["effects"]["sealed"] is True
    assert data["logs"]["tokens"]["count"] == 2


def test_log_lists_runs_and_history_newest_first(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """log without a run lists runs; with one, its history newest first."""
    path, first, head = store_path
    code, out, _ = run(["log", "--store", path], capsys)
    assert code == 0 and "run-a" in out and head[:12] in out
    code, out, _ = run(["log", "run-a", "--store", path, "--json"], capsys)
    assert [e["checkpoint_id"] for e in json.loads(out)] == [head, first]


def test_log_of_an_unknown_run_is_not_found(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown run is exit 4 with one line on stderr."""
    code, _, err = run(["log", "nope", "--store", store_path[0]], capsys)
    assert code == cli.EXIT_NOT_FOUND
    assert err.count("\n") == 1 and "Traceback" not in err


def test_validate_records_decisions_and_audit_lists_and_checks_them(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """validate --record appends a decision; audit shows it and --check verifies the chain."""
    path, _, head = store_path
    code, _, _ = run(["validate", head, head, "--store", path, "--record"], capsys)
    assert code == cli.EXIT_QUARANTINE  # a stored checkpoint as P does not declare strict mode
    code, out, _ = run(["audit", "--store", path, "--check", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["chain_ok"] is True
    assert [r["kind"] for r in data["records"]] == ["decision"]


def test_diff_names_the_first_divergence_per_stream(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """diff of two checkpoints of one run shows where state and tokens part (exit 12)."""
    path, first, head = store_path
    code, out, _ = run(["diff", first, head, "--store", path], capsys)
    assert code == cli.EXIT_DIFFERENT == 12
    assert "state" in out and "STATE_MISMATCH" in out
    assert "tokens" in out and "TOKEN_COUNT" in out
    with cpstore.open(path) as store:
        assert sum(1 for _ in store.audit_records()) == 0  # diff never records


def test_sign_off_refuses_a_non_releasable_decision(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A REJECT for a state mismatch cannot be signed off: exit 6."""
    path, first, head = store_path
    code, out, _ = run(["validate", first, head, "--store", path, "--json", "--record"], capsys)
    decision = json.loads(out)["decision_id"]
    code, _, err = run(
        ["sign-off", decision, "--store", path, "--operator", "me", "--reason", "x"], capsys
    )
    assert code == cli.EXIT_REFUSED
    assert "Traceback" not in err


def test_gc_keeps_the_newest_and_stats_reports_dedupe(
    store_path: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """prune --keep-last 1 removes the older checkpoint; stats counts what is left."""
    path, _, _ = store_path
    code, out, _ = run(["stats", "--store", path, "--json"], capsys)
    before = json.loads(out)
    assert before["checkpoints"] == 2 and before["dedupe_ratio"] > 1.0
    code, out, _ = run(["prune", "--keep-last", "1", "--store", path, "--json"], capsys)
    assert code == 0 and json.loads(out)["checkpoints_removed"] == 1
    code, out, _ = run(["stats", "--store", path, "--json"], capsys)
    assert json.loads(out)["checkpoints"] == 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["verify"], cli.EXIT_BAD_INPUT),
        (["verify", "--store", "/nonexistent/cpstore"], cli.EXIT_NOT_FOUND),
        (["inspect", "00" * 16, "--store", "{store}"], cli.EXIT_NOT_FOUND),
        (["inspect", "not-hex", "--store", "{store}"], cli.EXIT_BAD_INPUT),
        (["validate", "/nonexistent.json", "/nonexistent.json"], cli.EXIT_NOT_FOUND),
    ],
)
def test_user_mistakes_are_one_line_with_their_exit_code(
    argv: list[str],
    expected: int,
    store_path: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bad input never shows a traceback; the exit code says what kind of mistake."""
    argv = [a.replace("{store}", store_path[0]) for a in argv]
    code, _, err = run(argv, capsys)
    assert code == expected
    assert "Traceback" not in err and err.count("\n") == 1


def test_entry_point_help_works_in_a_subprocess() -> None:
    """`python -m cpstore.cli --help` lists every command."""
    out = subprocess.run(
        [sys.executable, "-m", "cpstore.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in (
        "demo",
        "validate",
        "verify",
        "inspect",
        "diff",
        "log",
        "audit",
        "sign-off",
        "gc",
        "prune",
        "stats",
    ):
        assert command in out


def test_verify_reports_progress_up_to_the_total(store_path: tuple[str, str, str]) -> None:
    """Store.verify(progress=...) ends with (total, total) over every walked entry."""
    calls: list[tuple[int, int]] = []
    with cpstore.open(store_path[0]) as store:
        report = store.verify(progress=lambda done, total: calls.append((done, total)))
    walked = sum(report.counts[k] for k in ("objects", "checkpoints", "refs", "ledgers"))
    assert calls and calls[-1] == (walked, walked)


def test_verify_draws_a_progress_bar_only_on_a_terminal(
    store_path: tuple[str, str, str],
) -> None:
    """On a pty stderr shows a bar; piped, stderr stays empty."""
    argv = [sys.executable, "-m", "cpstore.cli", "verify", "--store", store_path[0]]
    piped = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert piped.stderr == "" and piped.stdout.strip().endswith("ok")
    leader, follower = pty.openpty()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=follower, check=True)
    os.close(follower)
    shown = os.read(leader, 65536).decode()
    os.close(leader)
    assert "verify [" in shown and "#" in shown
    assert proc.stdout.decode().strip().endswith("ok")
