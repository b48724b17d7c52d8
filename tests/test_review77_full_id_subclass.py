"""review77: ``full_checkpoint_id`` reads a str's own characters, as the regex it replaced.

Before a76a561, ``sides._checkpoint_ref`` matched ``[0-9a-fA-F]{32}`` against the str's
characters; the shared ``full_checkpoint_id`` took ``len()`` and iterated, which a str
subclass answers itself: one whose ``__len__`` and ``__iter__`` claim 32 hex digits
was read as a checkpoint id, its own text (a path) then looked up as one."""

from __future__ import annotations

from collections.abc import Iterator

from cpstore.decision.sides import _checkpoint_ref
from cpstore.native.args import full_checkpoint_id


class _Lying(str):
    def __len__(self) -> int:
        return 32

    def __iter__(self) -> Iterator[str]:
        return iter("a" * 32)

    def lower(self) -> str:
        return "b" * 32


def test_a_str_subclass_is_read_by_its_characters() -> None:
    assert full_checkpoint_id(_Lying("run.json")) is None
    assert _checkpoint_ref(_Lying("run.json"), None) is None  # a path, as before
    upper = _Lying("AB" * 16)
    assert full_checkpoint_id(upper) == "ab" * 16  # its own text, lowercased by str
    assert type(full_checkpoint_id(upper)) is str
