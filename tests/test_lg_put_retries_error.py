"""The error a LangGraph put gives when its branch moves on every try: what, where,
expected and got (cpstore.errors' four parts), never a bare message."""

from __future__ import annotations

from pathlib import Path

import pytest
from lg_puts import put_value

from cpstore.errors import ConflictError, StoreError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._write import _RETRIES, Writer, _Branch, _Plan


def test_a_put_whose_branch_moves_on_every_try_names_the_tries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with CpstoreSaver.from_conn_string(tmp_path / "s") as saver:
        tries: list[_Plan] = []

        def moved(self: Writer, plan: _Plan) -> _Branch:
            tries.append(plan)
            raise ConflictError("the branch was made meanwhile", where=plan.run)

        monkeypatch.setattr(Writer, "_branch", moved)
        with pytest.raises(StoreError, match="kept moving") as info:
            put_value(saver, "t", None, "v")
        assert len(tries) == _RETRIES
        assert info.value.expected == f"a commit within {_RETRIES} tries"
        assert info.value.got == f"the branch moved {_RETRIES} times"
