"""CommitLostError.stored is part of the error: set by its constructor, kept through pickling
(a forked command's child relays its error to the parent), None unless told."""

from __future__ import annotations

import pickle

import pytest

from cpstore.errors import CommitLostError, StoreConnectionError


@pytest.mark.parametrize("stored", [False, None])
def test_stored_survives_pickling(stored: bool | None) -> None:
    exc = CommitLostError("commit lost", where="put", got="socket closed", stored=stored)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is CommitLostError
    assert back.stored is stored
    assert (back.what, back.where, back.got) == ("commit lost", "put", "socket closed")
    assert str(back) == str(exc)


def test_stored_defaults_to_open() -> None:
    exc = CommitLostError("commit lost")
    assert exc.stored is None
    assert isinstance(exc, StoreConnectionError)
