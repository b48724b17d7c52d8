"""review83: ``validate`` and ``diff`` read a checkpoint name as ``Store.resolve`` and
``inspect`` do.

``Store.resolve`` takes a padded id or prefix as that id (docs/store.md: "an id has no
spaces"), and ``cpstore inspect " ID"`` showed it, but ``validate`` and ``diff``
(``checkpoint_or_file``) asked ``is_hex`` of the name as typed: a padded id was a file,
"no such run document" (exit 4). Pinned besides: uppercase, prefixes of 7, 8 and 31,
33 hex characters, ``0x``, RUN@BRANCH~N with a 5,000-digit N, on each command.
"""

from __future__ import annotations

import pytest
from test_cli import run, store_path  # noqa: F401  (the fixture)

from cpstore import cli


def _forms(first: str) -> list[tuple[str, int]]:
    return [
        (first, cli.EXIT_OK),
        (first.upper(), cli.EXIT_OK),
        (f" {first}", cli.EXIT_OK),  # was exit 4 in validate and diff
        (f"{first}\t", cli.EXIT_OK),
        (f" {first[:8]} ", cli.EXIT_OK),
        (first[:31], cli.EXIT_OK),
        (first[:8].upper(), cli.EXIT_OK),
        (first[:7], cli.EXIT_BAD_INPUT),
        (first + "0", cli.EXIT_BAD_INPUT),
        ("run-a@main~1", cli.EXIT_OK),
        ("run-a@main~" + "1" * 5000, cli.EXIT_NOT_FOUND),  # was a traceback (ValueError)
        ("run-a@main~\u00b2", cli.EXIT_BAD_INPUT),
    ]


@pytest.mark.parametrize("index", range(12))
def test_every_command_reads_a_name_alike(
    store_path: tuple[str, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    index: int,
) -> None:
    path, first, _head = store_path
    name, want = _forms(first)[index]
    for argv in (
        ["inspect", name, "--store", path],
        ["validate", name, first, "--store", path],
        ["diff", name, first, "--store", path],
    ):
        code, _, err = run(argv, capsys)
        assert "Traceback" not in err
        if want == cli.EXIT_OK:  # as the plain id (validate and diff: not exit 0)
            want_here, _, _ = run([argv[0], first, *argv[2:]], capsys)
        else:
            want_here = want
        assert code == want_here, (argv[0], name[:40], err)
        assert "Traceback" not in err
