"""lgdiff83: ``cpstore lg-diff --serde MODULE:ATTR``, the serde of sealed threads.

``diff_threads`` opens values an ``EncryptedSerializer`` sealed when given the saver's
serde; the command took none, so threads written through one always exited 11 ("cannot
tell"), equal or not. ``--serde`` names a serializer object or a zero-argument factory
(a class, a function), imported as Python imports it (the current directory searched
last, for the console script too): equal sealed threads exit 0, other values 12, another
key 11. A bad spec, a module that fails to import, a factory that raises or an object
that is no serializer is exit 3, a module or attribute not found exit 4: one line on
stderr, never a traceback. The threads on both engines; the spec's errors, raised
before the store is opened, on LMDB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_lgsub80_diff_cipher import _cfg, _graph, _run, _serde

from cpstore.langgraph import CpstoreSaver

_TESTS = str(Path(__file__).parent)

_SERDES = """
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from lg_cipher import NonceCipher


def make():
    return EncryptedSerializer(NonceCipher(b"k" * 32), JsonPlusSerializer())


SERDE = make()
NUMBER = 5


class Holder:
    serde = SERDE


def wrong():
    return EncryptedSerializer(NonceCipher(b"w" * 32), JsonPlusSerializer())


def needs(key):
    return EncryptedSerializer(NonceCipher(key), JsonPlusSerializer())


def nothing():
    return NUMBER
"""


@pytest.fixture(name="mods")
def _mods(tmp_path: Path) -> Path:
    """A folder holding the serde modules (the commands run there)."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "lgserde83.py").write_text(_SERDES)
    (mods / "lgbroken83.py").write_text('raise RuntimeError("boom at import")\n')
    (mods / "lgdep83.py").write_text("import no_such_dependency_83  # noqa\n")
    (mods / "lgexit83.py").write_text("import sys\nsys.exit(3)\n")
    return mods


def _cli(mods: Path, *args: str, script: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": _TESTS}  # lg_cipher, the stand-in cipher
    cmd = (
        [str(Path(sys.executable).parent / "cpstore")]
        if script
        else [sys.executable, "-m", "cpstore.cli"]
    )
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, check=False, cwd=mods, env=env
    )


def _one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpstore lg-diff: "), out.stderr
    return lines[0]


def test_sealed_threads_are_compared_with_the_named_serde(url: str, mods: Path) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        _run(saver)  # a and b: equal values
        other = _graph(saver, values_by_thread=True, pending_by_thread=False)
        for t in ("xa", "xb"):  # xa and xb: other values
            other.invoke({"log": ["in"]}, _cfg(t))
    base = ("lg-diff", "--store", url)
    assert _cli(mods, *base, "a", "b").returncode == 11  # without it: cannot tell
    for spec in ("lgserde83:make", "lgserde83:SERDE", "lgserde83:Holder.serde"):
        out = _cli(mods, *base, "a", "b", "--serde", spec)
        assert out.returncode == 0, (spec, out.returncode, out.stdout, out.stderr)  # before: 2
    out = _cli(mods, *base, "xa", "xb", "--serde", "lgserde83:make", "--json")
    assert out.returncode == 12, out.stderr
    found = json.loads(out.stdout)
    assert not found["undecidable"] and "log" in found["channels"], found
    wrong = _cli(mods, *base, "a", "b", "--serde", "lgserde83:wrong")
    assert wrong.returncode == 11 and "cannot tell" in wrong.stdout, wrong.stdout


def test_the_console_script_finds_a_module_of_the_current_directory(
    tmp_path: Path, mods: Path
) -> None:
    path = str(tmp_path / "store")
    with CpstoreSaver.from_conn_string(path, serde=_serde()) as saver:
        _run(saver)
    out = _cli(mods, "lg-diff", "a", "b", "--store", path, "--serde", "lgserde83:make", script=True)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)


@pytest.mark.parametrize(
    ("spec", "code", "said"),
    [
        ("lgserde83", 3, "MODULE:ATTR"),
        ("lgserde83:", 3, "MODULE:ATTR"),
        (":make", 3, "MODULE:ATTR"),
        ("lgserde83:make()", 3, "MODULE:ATTR"),
        ("no_such_module_83:make", 4, "no module 'no_such_module_83'"),
        ("lgserde83.deeper:make", 4, "no module 'lgserde83.deeper'"),
        ("lgserde83:missing", 4, "lgserde83:missing not found"),
        ("lgserde83:Holder.missing", 4, "lgserde83:Holder.missing not found"),
        ("lgbroken83:make", 3, "importing lgbroken83 raised RuntimeError"),
        ("lgdep83:make", 3, "importing lgdep83 raised ModuleNotFoundError"),
        ("lgexit83:make", 3, "importing lgexit83 raised SystemExit"),
        ("lgserde83:NUMBER", 3, "not a serializer nor a factory"),
        ("lgserde83:needs", 3, "calling it with no argument raised TypeError"),
        ("lgserde83:nothing", 3, "the factory returned no serializer"),
    ],
)
def test_a_serde_it_cannot_load_is_one_line_and_its_code(
    tmp_path: Path, mods: Path, spec: str, code: int, said: str
) -> None:
    path = str(tmp_path / "store")
    with CpstoreSaver.from_conn_string(path) as saver:
        _run(saver)
    out = _cli(mods, "lg-diff", "a", "b", "--store", path, "--serde", spec)
    assert out.returncode == code, (spec, out.returncode, out.stderr)
    assert said in _one_line(out), out.stderr
