"""review76 (LIMIT, pinned): a ``.cprun`` file truncated while a run loaded from it lives.

``load_document(path)`` maps a packed run file and hands out zero-copy views of it
(docs/run-document.md); every section's digest is checked on load, so a file cut
*before* loading is refused. A file cut *after* loading (another process truncating
it) leaves the run's views pointing past the end of the file, and the first read of
them kills the process with SIGBUS: no Python code can catch it. This is the price of
the mapping; a caller that cannot trust other writers of the file reads it as bytes
(``load_document(path.read_bytes())`` copies) or copies it first. Policy, not fixed
here: docs/security.md, "Known weaknesses". The xfail is strict, so a fix shows.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cpstore.errors import DocumentError
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, Run, Token

CHILD = textwrap.dedent(
    """
    import os, sys
    from cpstore.run.document import load_document
    run = load_document(sys.argv[1])
    os.truncate(sys.argv[1], 0)
    try:
        bytes(run.tokens.view()[-32:])
    except Exception:
        pass
    """
)


def _write(tmp_path: Path) -> Path:
    run = Run(
        "r", 0, "s", tokens=PackedTokens.from_tokens([Token(i, "rng", i) for i in range(5000)])
    )
    path = tmp_path / "r.cprun"
    path.write_bytes(dump_document(run, encoding="cprun"))
    return path


def test_a_file_cut_before_loading_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DocumentError):
        load_document(path)


def test_a_copy_read_as_bytes_survives_the_file_being_cut(tmp_path: Path) -> None:
    path = _write(tmp_path)
    run = load_document(path.read_bytes())
    path.write_bytes(b"")
    assert len(bytes(run.tokens.view())) == 32 * 5000


@pytest.mark.xfail(
    strict=True,
    reason="LIMIT: a mapped .cprun cut after loading faults (SIGBUS) on the next read",
)
def test_a_mapped_file_cut_after_loading_does_not_kill_the_reader(tmp_path: Path) -> None:
    path = _write(tmp_path)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, timeout=120, check=False
    )
    assert child.returncode != -signal.SIGBUS, "the reader died of SIGBUS"
    assert child.returncode == 0
