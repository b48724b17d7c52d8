"""The build: the cdef comes from the header, and a missing xxHash header is one clear line."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import cpstore

ROOT = Path(__file__).resolve().parent.parent


def _probe(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import build; print(build.xxhash_include())"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_missing_header_stops_the_build_with_one_line_naming_the_package(tmp_path: Path) -> None:
    """A compiler that cannot find xxhash.h gives one line naming libxxhash-dev, no traceback."""
    fake_cc = tmp_path / "cc"
    fake_cc.write_text("#!/bin/sh\nexit 1\n")
    fake_cc.chmod(0o755)
    proc = _probe({"CC": str(fake_cc), "CPSTORE_XXHASH_INCLUDE": ""})
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "libxxhash-dev" in lines[0]
    assert "Traceback" not in proc.stderr


def test_include_override_without_the_header_is_refused(tmp_path: Path) -> None:
    """CPSTORE_XXHASH_INCLUDE pointing at a folder without xxhash.h is named in the error."""
    proc = _probe({"CPSTORE_XXHASH_INCLUDE": str(tmp_path)})
    assert proc.returncode != 0 and str(tmp_path) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cdef_is_read_from_the_header_and_matches_the_compiled_lib() -> None:
    """Every function the header declares is on the compiled lib; constants agree."""
    sys.path.insert(0, str(ROOT))
    try:
        import build  # noqa: PLC0415 - the project's cffi builder, not PyPA's

        cdef = build.cdef_source()
    finally:
        sys.path.remove(str(ROOT))
    from cpstore._cpstore_native import lib  # noqa: PLC0415 - the compiled module itself

    for name in (
        "cp_digest",
        "cp_digest_batch",
        "cp_seq_init",
        "cp_seq_update",
        "cp_seq_final",
        "cp_seq_digest",
        "cp_first_divergence",
        "cp_scan_tokens",
        "cp_simd_select",
    ):
        assert f"{name}(" in cdef and hasattr(lib, name)
    assert lib.CP_ERR_UNSUPPORTED == -7 and lib.CP_NONE == 2**64 - 1
    assert "#include" not in cdef


@pytest.mark.parametrize("level", ["auto", "baseline"])
def test_simd_path_is_named(level: str) -> None:
    """The chosen kernel has a name, and selecting one never changes a digest."""
    before = cpstore.native.digest(b"x" * 4096)
    cpstore.native.select_simd(level)
    try:
        assert cpstore.native.simd_path() in {"avx512", "avx2", "sse2", "scalar"}
        assert cpstore.native.digest(b"x" * 4096) == before
    finally:
        cpstore.native.select_simd("auto")


def test_the_wheel_metadata_names_the_license_and_ships_the_xxhash_notice() -> None:
    """pyproject names MIT and license files that exist, xxHash's BSD-2-Clause notice among them."""
    root = Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    files = [f for pattern in project["license-files"] for f in glob.glob(str(root / pattern))]
    names = {Path(f).name for f in files}
    assert {"LICENSE", "xxHash-BSD-2-Clause.txt"} <= names
    notice = (root / "LICENSES" / "xxHash-BSD-2-Clause.txt").read_text()
    assert "BSD 2-Clause License" in notice and "Yann Collet" in notice
    assert "MIT License" in (root / "LICENSE").read_text()
