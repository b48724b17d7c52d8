"""One reading of "a full checkpoint id" for the decision layer and the CLI.

Four places read "32 hex characters, either case" on their own (validate's side
loader, the replay-tag check, the gates, the CLI); they now share
``cpstore.native.args.full_checkpoint_id``. These pin what it accepts, so a place
that drifts back to lowercase-only or regex-with-newline reading fails here too."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cpstore.cli.common import names_checkpoint
from cpstore.decision.checks import _tagged_checkpoint
from cpstore.decision.gates import _checkpoint_named
from cpstore.native.args import full_checkpoint_id, is_hex

CID = "0123456789abcdef0123456789abcdef"


class _Sub(str):
    pass


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (CID, CID),
        (CID.upper(), CID),
        ("0123456789ABCDEF0123456789abcdef", CID),
        (_Sub(CID.upper()), CID),
        (CID + "\n", None),  # re.match's "$" would take it
        (" " + CID, None),  # stripping is the caller's choice
        (CID[:-1], None),
        (CID + "0", None),
        ("g" + CID[1:], None),
        ("\u0660" + CID[1:], None),  # an Arabic-Indic zero, a Unicode digit, is not a hex digit
        ("", None),
    ],
)
def test_full_checkpoint_id(text: str, want: str | None) -> None:
    got = full_checkpoint_id(text)
    assert got == want
    assert got is None or type(got) is str


@given(st.text(max_size=40))
def test_every_reader_agrees(text: str) -> None:
    cid = full_checkpoint_id(text)
    if cid is not None:
        assert len(cid) == 32 and is_hex(cid) and cid == cid.lower()
        assert _checkpoint_named(text) == cid
        assert _tagged_checkpoint("replay:" + text) == cid
        assert names_checkpoint(text)
    else:
        assert _tagged_checkpoint("replay:" + text.strip()) == full_checkpoint_id(text.strip())


def test_is_hex() -> None:
    assert is_hex("") and is_hex("aBc09") and not is_hex("abg") and not is_hex("a b")
