"""reads88: the saver's read path with its head split, pending-write seek and entry check
inline must read exactly what the calls it replaced read (issue 12's read CPU).

The inline head split (``Loader.tuple``) is checked against the oracle (a
CheckpointView and ``_read._head``) on forged framings, hash-valid but malformed;
the inline pending-write prefix against ``stored_writes`` on ids of any UTF-8
length; the entry check's ``digest_small`` against ``digest`` at any size.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from lg_audit24 import _conf, _oracle_of, _outcome
from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)

import cpstore.langgraph._loader as loader_module
from cpstore.errors import FormatVersionError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import CHANNEL, HEAD_KEY, branch_label, pack_typed, run_for
from cpstore.langgraph._read import Entry, stored_writes
from cpstore.native.binding import digest
from cpstore.store.lg_index import checked, checkpoint_key, pack

_SERDE = JsonPlusSerializer()
_CK = pack_typed(_SERDE.dumps_typed(dict(empty_checkpoint())))
_MD = pack_typed(_SERDE.dumps_typed({"source": "loop", "step": 0}))
_FRAME = struct.Struct(">BI")


@pytest.fixture
def saver(url: str) -> Iterator[CpstoreSaver]:
    with CpstoreSaver.from_conn_string(url, durability="none") as opened:
        yield opened


def _forge(saver: CpstoreSaver, thread: str, head: Any) -> dict[str, Any]:
    """A checkpoint whose manifest metadata holds ``head`` under HEAD_KEY as it is (any
    framing), named by a valid index entry."""
    rec = saver.store.recorder(run_for(thread), branch=branch_label(""))
    checkpoint_id = str(uuid.uuid4())
    key = checkpoint_key(thread, "", checkpoint_id)

    def extra(cid: bytes) -> list[tuple[bytes, bytes | None]]:
        body = Entry.body_of(
            bytes(cid), run=run_for(thread), branch="main", parent=None, run_id=None, have=["c"]
        )
        return [(key, pack(key, body))]

    rec.checkpoint(0, {CHANNEL + "c": _MD}, metadata={HEAD_KEY: head}, extra_meta=extra)
    rec.close()
    return _conf(thread, "", checkpoint_id)


def _framed(layout: int, declared: int, body: bytes) -> bytes:
    return _FRAME.pack(layout, declared) + body


#: Framings around the one a writer makes: the layout byte, the declared checkpoint
#: length (exact, short, past the end) and the bytes after it varied.
_HEADS = st.one_of(
    st.builds(
        _framed,
        st.sampled_from([0, 1, 2, 3, 255]),
        st.sampled_from([0, len(_CK) - 1, len(_CK), len(_CK) + 1, len(_CK) + len(_MD), 2**32 - 1]),
        st.sampled_from([_CK + _MD, _CK, _CK + _MD + b"\x00", b""]),
    ),
    st.binary(max_size=12),
    st.sampled_from([None, 7, "text", [_CK, _MD]]),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(head=_HEADS)
def test_a_forged_head_framing_reads_as_the_oracle_reads_it(saver: CpstoreSaver, head: Any) -> None:
    """Any head framing (layout byte, declared length, halves, non-bytes): get_tuple and
    list give the oracle's tuple or raise its class."""
    config = _forge(saver, f"t-{uuid.uuid4()}", head)
    want = _outcome(lambda: _oracle_of(saver, config))
    assert _outcome(lambda: saver.get_tuple(config)) == want
    thread = config["configurable"]["thread_id"]
    assert _outcome(lambda: list(saver.list(_conf(thread, "")))) == (
        want if want[0] == "raised" else ("ok", repr([_oracle_of(saver, config)]))
    )


def test_an_unknown_head_layout_is_a_format_version_error(saver: CpstoreSaver) -> None:
    """A later release's head layout is refused as FormatVersionError, never misread."""
    config = _forge(saver, "t", _framed(3, len(_CK), _CK + _MD))
    with pytest.raises(FormatVersionError):
        saver.get_tuple(config)


def test_a_layout_2_head_is_split_without_the_general_call(
    saver: CpstoreSaver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head a writer makes is split inline (``_read._head`` only for other shapes):
    get_tuple and list read it with ``_head`` made to fail."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = empty_checkpoint()
    cp["channel_values"] = {"a": "x", "b": [1, 2]}
    cp["channel_versions"] = {"a": 1, "b": 1}
    saved = saver.put(config, cp, {"source": "loop", "step": 1}, {"a": 1, "b": 1})
    want = saver.get_tuple(saved)

    def refuse(*args: Any) -> Any:
        raise AssertionError("the general head split was called")

    monkeypatch.setattr(loader_module, "_head", refuse)
    got = saver.get_tuple(saved)
    assert got == want and got is not None
    assert got.checkpoint["channel_values"] == {"a": "x", "b": [1, 2]}
    assert list(saver.list(config)) == [want]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    checkpoint_id=st.text(
        st.characters(codec="utf-8", exclude_characters="\x00"),
        min_size=1,
        max_size=40,
    ),
    writes=st.lists(
        st.tuples(st.sampled_from(["a", "b", "ch/ü"]), st.integers(-(2**63), 2**63 - 1)), max_size=3
    ),
)
def test_pending_writes_are_found_for_any_checkpoint_id(
    saver: CpstoreSaver, checkpoint_id: str, writes: list[tuple[str, int]]
) -> None:
    """The inline write prefix seeks what ``stored_writes`` (``write_key``) scans: the
    same writes, in its order, for ids of any UTF-8 length."""
    thread = f"t-{uuid.uuid4()}"
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    saved = saver.put(config, cp, {"source": "loop", "step": 0}, {})
    saver.put_writes(saved, writes, "task-1")
    backend = saver.store.backend
    with backend.read_txn() as txn:
        stored = stored_writes(txn, backend.db("meta"), thread, "", checkpoint_id)
        want = [(w.task_id, w.channel, _SERDE.loads_typed(w.typed)) for w in stored]
    got = saver.get_tuple(saved)
    assert got is not None
    assert got.pending_writes == want
    assert [(c, v) for _, c, v in got.pending_writes] == [(c, v) for c, v in writes]
    listed = list(saver.list(config))
    assert [t.pending_writes for t in listed] == [want]


@settings(max_examples=60, deadline=None)
@given(
    key=st.binary(max_size=64),
    data=st.binary(min_size=1, max_size=2048),
    flip=st.integers(0, 2**16),
)
def test_the_entry_check_matches_digest_at_any_size(key: bytes, data: bytes, flip: int) -> None:
    """``checked`` (digest_small) accepts exactly the value whose check ``digest`` made,
    and refuses it with any one byte changed."""
    value = data + digest(key + data)[:8]
    assert checked(key, value) == data
    assert checked(key, memoryview(value)) == data
    at = flip % len(value)
    bad = value[:at] + bytes([value[at] ^ 0x01]) + value[at + 1 :]
    assert checked(key, bad) is None


def test_the_entry_check_matches_digest_past_the_small_size() -> None:
    """An entry past 64 KiB (digest() then takes the C kernel): the same check."""
    key, data = b"k", bytes(range(256)) * 300
    assert checked(key, data + digest(key + data)[:8]) == data
