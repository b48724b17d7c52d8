"""review101: a batched recorder whose head's batch commit failed with its outcome unknown.

hunt100 made a recorder refuse to extend a checkpoint a failed batch dropped, "not stored";
an outcome unknown (``OutcomeUnknownError``, a ``CommitLostError`` not settled by reading
back) was passed over, so the recorder went on: when the batch had not landed, its next
checkpoint extended one never stored, and the next flush failed ``ConflictError`` and
dropped every other recorder's checkpoint in that batch with it (hunt100's defect, one
batch long). Now such a recorder reads its branch's stored head at its next checkpoint:
not its head, it refuses as hunt100's does; its head (the batch landed), it goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, OutcomeUnknownError
from cpstore.store import lmdb_backend
from cpstore.store.content import tail_committed
from cpstore.store.pg_backend import PgBackend


def _unknown(*args: Any, **kwargs: Any) -> None:
    raise OutcomeUnknownError("injected: the batch may or may not be stored")


def check_not_stored(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with cpstore.open(url, durability="batched") as st:
        rec = st.recorder("a")
        first = rec.checkpoint(0, {"a": 0})
        st.flush()
        lost = rec.checkpoint(1, {"a": 1})
        with monkeypatch.context() as m:
            m.setattr(lmdb_backend, "apply_writes", _unknown)
            m.setattr(PgBackend, "_apply_all", _unknown)
            with pytest.raises(OutcomeUnknownError):
                st.flush()
        assert st.ref("a") == first  # it did not land
        with pytest.raises(ConflictError, match="not stored") as refused:
            rec.checkpoint(2, {"a": 2})  # was queued on ``lost``
        assert lost in str(refused.value)
        bystander = st.recorder("b").checkpoint(0, {"b": 0})
        st.flush()  # failed ConflictError before, the bystander's checkpoint dropped
        assert st.ref("b") == bystander
        again = st.recorder("a")
        assert again.head == first
        again.checkpoint(2, {"a": 2})
        st.flush()
        assert st.verify().ok


def test_an_unknown_outcome_not_stored_refuses_and_spares_the_next_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_not_stored(str(tmp_path / "s"), monkeypatch)


def test_an_unknown_outcome_not_stored_refuses_on_postgres(
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_not_stored(pg_url, monkeypatch)


def test_an_unknown_outcome_that_landed_lets_the_recorder_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch committed, the failure after it not settled by reading back (as a commit
    lost on PostgreSQL whose read-back failed): the stored head is the recorder's."""

    def after(*args: Any) -> None:
        tail_committed(*args)
        raise OutcomeUnknownError("injected after the commit")

    def unsettled(backend: Any, batch: Any, exc: BaseException) -> None:
        raise exc  # not read back: may or may not be stored

    with cpstore.open(str(tmp_path / "s"), durability="batched") as st:
        rec = st.recorder("a")
        rec.checkpoint(0, {"a": 0})
        st.flush()
        landed = rec.checkpoint(1, {"a": 1})
        with monkeypatch.context() as m:
            m.setattr(lmdb_backend, "tail_committed", after)
            m.setattr(lmdb_backend, "commit_failed", unsettled)
            with pytest.raises(OutcomeUnknownError):
                st.flush()
        assert st.ref("a") == landed
        nxt = rec.checkpoint(2, {"a": 2})
        st.flush()
        assert st.ref("a") == nxt and st.manifest(nxt).parent == landed
