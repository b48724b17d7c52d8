"""Exit codes: every public error class has one documented code, and the CLI gives it.

The table is ``cpstore.cli.exit_codes.EXIT_CODES``; README.md ("Command line") documents
it. The end-to-end tests provoke a full store, a read-only store, a lost
compare-and-set and a store of another format version through ``cli.main``.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore import cli
from cpstore.cli import common as cli_common
from cpstore.cli import entry as cli_main
from cpstore.cli import validate_command as _cli_validate
from cpstore.cli.exit_codes import EXIT_CODES, exit_code_for
from cpstore.errors import (
    ConflictError,
    CpstoreError,
    NativeError,
    StoreFullError,
    StoreReadOnlyError,
)
from cpstore.native.canonical import encode_value
from cpstore.store.facade import Store

README = Path(__file__).resolve().parent.parent / "README.md"
#: Error classes that stand for a bug in cpstore, so exit 1 ("internal error") is right.
BUG_CLASSES = {NativeError}


def _subclasses(cls: type[CpstoreError]) -> Iterator[type[CpstoreError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


PUBLIC_ERRORS = sorted(
    {
        cls
        for cls in _subclasses(CpstoreError)
        if cls.__module__.startswith("cpstore") and not cls.__name__.startswith("_")
    },
    key=lambda cls: cls.__name__,
)


def test_every_public_error_class_is_exported() -> None:
    """The sweep below sees every error class cpstore.errors exports (and nothing is hidden)."""
    exported = {
        obj
        for name in cpstore.errors.__all__
        if isinstance(obj := getattr(cpstore.errors, name), type) and issubclass(obj, CpstoreError)
    }
    assert exported - {CpstoreError} == set(PUBLIC_ERRORS)


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda cls: cls.__name__)
def test_every_public_error_class_has_its_own_code_not_internal(cls: type[CpstoreError]) -> None:
    """Each class is in the table, and only a bug class maps to 1 (internal error)."""
    assert cls in EXIT_CODES
    code = exit_code_for(cls("probe"))
    assert code == EXIT_CODES[cls]
    if cls in BUG_CLASSES:
        assert code == cli.EXIT_INTERNAL
    else:
        assert code not in (cli.EXIT_OK, cli.EXIT_INTERNAL, cli.EXIT_USAGE), code


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda cls: cls.__name__)
def test_the_readme_table_lists_each_class_under_its_code(cls: type[CpstoreError]) -> None:
    """README.md's exit-code table names every class in the row of its code."""
    section = README.read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    rows = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^\| (\d+) \|[^|]*\|([^\n]*)\|$", section, re.M)
    }
    assert f"`{cls.__name__}`" in rows[EXIT_CODES[cls]], (cls.__name__, rows)


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda cls: cls.__name__)
def test_the_entry_point_exits_with_the_mapped_code(
    cls: type[CpstoreError], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error raised inside a command leaves cli.main as its code and one stderr line."""

    def boom(args: Any, **_: Any) -> int:
        raise cls("provoked", where="here")

    monkeypatch.setattr(_cli_validate, "run_validate", boom)
    code = cli.main(["validate", "a", "b"])
    err = capsys.readouterr().err
    assert code == EXIT_CODES[cls]
    assert err.count("\n") == 1 and "provoked" in err


def test_an_interrupt_exits_130_as_the_readme_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C inside a command: exit 130 and one stderr line, the README's row for it."""

    def interrupted(args: Any, **_: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli_validate, "run_validate", interrupted)
    code = cli.main(["validate", "a", "b"])
    err = capsys.readouterr().err
    assert code == 130 and err == "cpstore validate: interrupted\n"
    section = README.read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| 130 |"))
    assert "interrupted" in row


def test_a_quarantine_raised_as_an_error_exits_11() -> None:
    """ValidationFailedError carries its decision: a QUARANTINE exits 11, a REJECT 10."""

    class Verdict:
        def __init__(self, name: str) -> None:
            self.name = name

    class Decision:
        def __init__(self, verdict: str) -> None:
            self.verdict = Verdict(verdict)

    for verdict, code in (("QUARANTINE", cli.EXIT_QUARANTINE), ("REJECT", cli.EXIT_REJECT)):
        exc = cpstore.ValidationFailedError("not accepted")
        exc.decision = Decision(verdict)
        assert exit_code_for(exc) == code


# -- end to end ---------------------------------------------------------------------

MAP = 256 * 1024


@pytest.fixture()
def store(tmp_path: Path) -> tuple[str, str]:
    """A store with one checkpoint; (path, checkpoint id)."""
    path = str(tmp_path / "s")
    with cpstore.open(path, map_size=MAP, max_map_size=MAP) as st:
        rec = st.recorder("run")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, {"a": 1})
    return path, cid


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return code, err


def test_a_full_store_exits_7(
    store: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """validate cannot record its decision in a full store: StoreFullError, exit 7 (was 1)."""
    path, cid = store
    with cpstore.open(path, map_size=MAP, max_map_size=MAP) as st:
        for pad in (4000, 400, 40, 0):  # ever smaller records until not even one fits
            with pytest.raises(StoreFullError):
                for i in range(100_000):
                    st.append_audit("note", {"i": i, "pad": os.urandom(pad)})
    # The command line opens stores with growth allowed; give it this one's fixed limit.
    tiny = functools.partial(cpstore.open, map_size=MAP, max_map_size=MAP)
    monkeypatch.setattr(_cli_validate, "open_store", tiny)
    code, err = _run(["validate", cid, cid, "--store", path, "--record"], capsys)
    assert code == cli.EXIT_UNAVAILABLE == 7 and "full" in err


def test_a_read_only_store_refusing_a_write_exits_7(
    store: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write to a store that can only be read: StoreReadOnlyError, exit 7 (was 1)."""
    path, _ = store

    def read_only(p: str, **options: Any) -> Store:
        return cpstore.open(p, **{**options, "readonly": True})

    monkeypatch.setattr(cli_common, "open_store", read_only)
    code, err = _run(["gc", "--store", path, "--delete-run", "run"], capsys)
    assert code == cli.EXIT_UNAVAILABLE == 7 and "read-only" in err
    assert exit_code_for(StoreReadOnlyError("x")) == 7


def test_a_lost_compare_and_set_exits_8(
    store: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ref that moved under a command: the store's ConflictError exits 8 (was 1)."""
    path, cid = store

    def racing_gc(self: Store, **_: Any) -> Any:
        # Another writer moved the branch between this command's read and its write.
        self.set_ref("run", "main", cid, expected_old="00" * 16)

    monkeypatch.setattr(Store, "gc", racing_gc)
    code, err = _run(["gc", "--store", path, "--keep-last", "1"], capsys)
    assert code == cli.EXIT_CONFLICT == 8 and "refs/run/main" in err
    assert exit_code_for(ConflictError("x")) == 8


def test_a_store_of_another_format_version_exits_9(
    store: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A store whose format record names another version: exit 9 (was 3, 'bad input')."""
    path, _ = store
    with cpstore.open(path) as st, st.backend.env.env.begin(write=True) as txn:
        record = {"layout": "cpstore", "version": 99, "digest": "xxh3-128"}
        txn.put(b"format", encode_value(record), db=st.backend.db("meta"))
    for argv in (["verify", "--store", path], ["log", "--store", path]):
        code, err = _run(argv, capsys)
        assert code == cli.EXIT_FORMAT == 9 and "version" in err


def test_every_command_help_lists_only_documented_exit_codes() -> None:
    """Each sub-command's --help has an exit-code epilog naming codes of the table."""
    parser = cli_main._parser()
    sub: argparse.Action = next(a for a in parser._actions if a.dest == "command")
    assert isinstance(sub, argparse._SubParsersAction)
    documented = {0, 2, *EXIT_CODES.values(), cli.EXIT_QUARANTINE, cli.EXIT_DIFFERENT}
    assert sub.choices
    for name, command in sub.choices.items():
        epilog = command.epilog or ""
        assert epilog.startswith("exit codes: "), name
        codes = {int(m) for m in re.findall(r"(?:^exit codes: |, )(\d+) ", epilog)}
        assert {0, 1, 2} <= codes <= documented, (name, codes)
