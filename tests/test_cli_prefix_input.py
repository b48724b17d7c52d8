"""A name too short or not hex to be an id prefix is bad input (exit 3), on every
command that resolves a decision or checkpoint by prefix, and says the minimum.

``cpstore sign-off abc`` said "no such decision" (exit 4), while ``cpstore inspect``
with a short prefix was exit 3; ``diff``/``validate --store`` took a short hex
prefix for a file name and said "no such run document" (exit 4).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import run, store_path  # noqa: F401  (the fixture)

import cpstore
from cpstore import cli
from cpstore.decision.gates import certify_rollback, resume_gate, sign_off
from cpstore.errors import InvalidInputError, NotFoundError


def _recorded_decision(path: str, first: str, head: str, capsys: pytest.CaptureFixture[str]) -> str:
    _code, out, _ = run(["validate", first, head, "--store", path, "--json", "--record"], capsys)
    decision: str = json.loads(out)["decision_id"]
    return decision


@pytest.mark.parametrize("name", ["abc", "1234567", "not-hex!", "zzzzzzzz", "12345678-"])
def test_sign_off_with_a_name_no_id_can_have_is_bad_input(
    store_path: tuple[str, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:
    path, first, head = store_path
    _recorded_decision(path, first, head, capsys)
    code, _, err = run(
        ["sign-off", name, "--store", path, "--operator", "me", "--reason", "x"], capsys
    )
    assert code == cli.EXIT_BAD_INPUT == 3, err
    assert "8" in err and "hex" in err, err
    assert "Traceback" not in err and err.count("\n") == 1


def test_sign_off_with_an_unknown_long_enough_prefix_is_still_not_found(
    store_path: tuple[str, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, first, head = store_path
    decision = _recorded_decision(path, first, head, capsys)
    unknown = "0" * 8 if not decision.startswith("0" * 8) else "f" * 8
    code, _, err = run(
        ["sign-off", unknown, "--store", path, "--operator", "me", "--reason", "x"], capsys
    )
    assert code == cli.EXIT_NOT_FOUND == 4, err


def test_sign_off_by_a_prefix_of_eight_still_works(
    store_path: tuple[str, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, first, head = store_path
    decision = _recorded_decision(path, first, head, capsys)
    code, _, err = run(
        ["sign-off", decision[:8], "--store", path, "--operator", "me", "--reason", "x"], capsys
    )
    assert code == cli.EXIT_REFUSED, err  # found; refused because it is a REJECT


@pytest.mark.parametrize("gate", ["sign_off", "resume_gate", "certify_rollback"])
def test_the_api_names_the_minimum_too(
    store_path: tuple[str, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    gate: str,
) -> None:
    path, first, head = store_path
    decision = _recorded_decision(path, first, head, capsys)
    with cpstore.open(path) as store:

        def call(name: str) -> object:
            if gate == "sign_off":
                return sign_off(store, name, operator="o", reason="r")
            if gate == "resume_gate":
                return resume_gate(store, head, name)
            return certify_rollback(store, head, name)

        with pytest.raises(InvalidInputError) as err:
            call(decision[:7])
        assert ">= 8" in str(err.value.expected)
        with pytest.raises(NotFoundError):
            call("0" * 8 if not decision.startswith("0" * 8) else "f" * 8)


@pytest.mark.parametrize("command", ["diff", "validate"])
def test_a_short_hex_name_that_is_no_file_is_bad_input(
    store_path: tuple[str, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, first, head = store_path
    monkeypatch.chdir(tmp_path)
    code, _, err = run([command, first[:7], head, "--store", path], capsys)
    assert code == cli.EXIT_BAD_INPUT, err
    assert "at least 8 hex" in err, err
    # A file of that name is still a file.
    (tmp_path / first[:7]).write_text("{}")
    code, _, err = run([command, first[:7], head, "--store", path], capsys)
    assert code != cli.EXIT_BAD_INPUT or "at least 8 hex" not in err, err
