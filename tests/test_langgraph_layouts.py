"""LangGraph checkpoint layouts: layout 2 (head in the manifest) written, layout 1 still read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import cpstore.store as cpstore_store
from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.langgraph._codec import (
    HEAD_KEY,
    branch_label,
    pack_typed,
    run_for,
    unpack_head,
    unpack_typed,
)
from cpstore.langgraph._read import Entry, entry_at
from cpstore.store import Store
from cpstore.store.lg_index import checkpoint_key, pack

THREAD = "t-1"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    """A fresh store (durability none: the layouts, not fsync, are under test)."""
    st = cpstore_store.open(tmp_path / "s", durability="none")
    yield st
    st.close()


def _cfg(checkpoint_id: str | None = None, thread: str = THREAD) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _checkpoint(step: int, values: dict[str, Any]) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = {k: f"{step + 1:032}.0" for k in values}
    return cp


def _record_layout_1(saver: CpstoreSaver, steps: list[dict[str, Any]]) -> list[str]:
    """Record a thread as a layout-1 writer did: the head as the state parts
    ``checkpoint`` and ``metadata`` beside ``channel/<c>``, manifest metadata empty."""
    store, serde = saver.store, saver.serde
    rec = store.recorder(run_for(THREAD), branch=branch_label(""))
    ids: list[str] = []
    parent: str | None = None
    for step, values in enumerate(steps):
        cp = _checkpoint(step, values)
        cid_lg = str(cp["id"])
        head = {k: v for k, v in cp.items() if k != "channel_values"}
        meta = {"source": "loop", "step": step, "parents": {}}
        parts = {
            "checkpoint": pack_typed(serde.dumps_typed(head)),
            "metadata": pack_typed(serde.dumps_typed(meta)),
            **{f"channel/{k}": pack_typed(serde.dumps_typed(v)) for k, v in values.items()},
        }
        key = checkpoint_key(THREAD, "", cid_lg)

        have = sorted(values)

        def extra(
            cid: bytes, key: bytes = key, parent: str | None = parent, have: list[str] = have
        ) -> list[tuple[bytes, bytes | None]]:
            body = Entry.body_of(
                bytes(cid), run=run_for(THREAD), branch="main", parent=parent, run_id=None,
                have=have,
            )  # fmt: skip
            return [(key, pack(key, body))]

        rec.checkpoint(step, parts, extra_meta=extra)
        ids.append(cid_lg)
        parent = cid_lg
    rec.close()
    return ids


def _manifest(store: Store, checkpoint_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state parts map, manifest metadata) of the cpstore checkpoint behind an id."""
    backend = store.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), THREAD, "", checkpoint_id)
        assert entry is not None
        with store.read(entry.cid.hex()) as view:
            return dict(view.manifest.raw["state"]["parts"]), dict(view.manifest.metadata)


def test_a_put_writes_layout_2_the_head_in_the_manifest_not_as_parts(store: Store) -> None:
    """A put's checkpoint has only channel parts; its head is the manifest's ``lg`` bytes."""
    saver = CpstoreSaver(store)
    cp = _checkpoint(0, {"a": "x" * 100, "b": 7})
    out = saver.put(_cfg(), cp, {"source": "input", "step": -1}, {"a": "1", "b": "1"})
    parts, meta = _manifest(store, out["configurable"]["checkpoint_id"])
    assert sorted(parts) == ["channel/a", "channel/b"]
    ck, md = unpack_head(meta[HEAD_KEY], "test")
    assert saver.serde.loads_typed(unpack_typed(md, "test"))["source"] == "input"
    assert ck.startswith(b"msgpack\x00")
    got = saver.get_tuple(out)
    assert got is not None and got.checkpoint["id"] == cp["id"]
    assert got.checkpoint["channel_values"] == {"a": "x" * 100, "b": 7}
    assert got.metadata["step"] == -1


def test_a_layout_1_checkpoint_still_reads(store: Store) -> None:
    """get_tuple and list read checkpoints recorded with the head as state parts."""
    saver = CpstoreSaver(store)
    steps = [{"a": f"v{i}", "b": i} for i in range(4)]
    ids = _record_layout_1(saver, steps)
    assert sorted(_manifest(store, ids[0])[0]) == [
        "channel/a",
        "channel/b",
        "checkpoint",
        "metadata",
    ]
    for i, cid in enumerate(ids):
        tup = saver.get_tuple(_cfg(cid))
        assert tup is not None
        assert tup.checkpoint["channel_values"] == steps[i]
        assert tup.metadata["step"] == i
        assert (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id") == (
            ids[i - 1] if i else None
        )
    listed = list(saver.list(_cfg()))
    assert [t.config["configurable"]["checkpoint_id"] for t in listed] == ids[::-1]
    assert [t.checkpoint["channel_values"] for t in listed] == steps[::-1]


def test_a_thread_mixing_layouts_reads_puts_copies_and_diffs(store: Store) -> None:
    """A put on a layout-1 parent records layout 2; list, copy_thread and diff read both."""
    saver = CpstoreSaver(store)
    ids = _record_layout_1(saver, [{"a": "v0", "b": 0}, {"a": "v1", "b": 0}])
    cp = _checkpoint(2, {"a": "v2", "b": 0})
    cp["channel_versions"]["b"] = "00000000000000000000000000000001.0"
    out = saver.put(_cfg(ids[-1]), cp, {"source": "loop", "step": 2, "parents": {}}, {"a": "3"})
    new_id = out["configurable"]["checkpoint_id"]
    parts, meta = _manifest(store, new_id)
    assert "checkpoint" not in parts and HEAD_KEY in meta
    listed = list(saver.list(_cfg()))
    assert [t.checkpoint["channel_values"]["a"] for t in listed] == ["v2", "v1", "v0"]
    assert [t.metadata["step"] for t in listed] == [2, 1, 0]
    saver.copy_thread(THREAD, "t-2")
    copied = list(saver.list(_cfg(thread="t-2")))
    assert [t.checkpoint for t in copied] == [t.checkpoint for t in listed]
    assert [t.metadata for t in copied] == [t.metadata for t in listed]
    assert diff_threads(store, _cfg(), _cfg(thread="t-2")).same


def test_a_layout_2_checkpoint_without_its_head_is_an_integrity_error(store: Store) -> None:
    """Channel parts and no head (neither layout) are refused, never read as a checkpoint."""
    saver = CpstoreSaver(store)
    rec = store.recorder(run_for(THREAD), branch="main")
    key = checkpoint_key(THREAD, "", "1f0-headless")

    def extra(cid: bytes) -> list[tuple[bytes, bytes | None]]:
        body = Entry.body_of(
            bytes(cid), run=run_for(THREAD), branch="main", parent=None, run_id=None, have=["a"]
        )
        return [(key, pack(key, body))]

    rec.checkpoint(0, {"channel/a": pack_typed(saver.serde.dumps_typed("x"))}, extra_meta=extra)
    with pytest.raises(IntegrityError, match="not a LangGraph checkpoint"):
        saver.get_tuple(_cfg("1f0-headless"))
    with pytest.raises(IntegrityError, match="not a LangGraph checkpoint"):
        list(saver.list(_cfg()))


def test_list_of_a_namespace_reads_the_ids_a_thread_wide_list_reads(store: Store) -> None:
    """list with checkpoint_ns (ids cut after the prefix) equals list without it (keys split)."""
    saver = CpstoreSaver(store)
    config = _cfg()
    for step in range(3):
        cp = _checkpoint(step, {"a": f"v{step}"})
        config = saver.put(config, cp, {"source": "loop", "step": step}, {"a": f"{step}"})
    by_ns = [t.config for t in saver.list(_cfg())]
    thread_wide = [t.config for t in saver.list({"configurable": {"thread_id": THREAD}})]
    assert by_ns == thread_wide and len(by_ns) == 3


def test_an_entry_key_whose_id_is_not_utf8_is_an_integrity_error_in_list(store: Store) -> None:
    """A key under the namespace prefix with a non-UTF-8 id (its check valid) is refused."""
    saver = CpstoreSaver(store)
    key = checkpoint_key(THREAD, "") + b"\xff\xfe"
    body = Entry.body_of(
        bytes(16), run=run_for(THREAD), branch="main", parent=None, run_id=None, have=[]
    )
    store.backend.write_txn(lambda txn: txn.put(key, pack(key, body), db=store.backend.db("meta")))
    with pytest.raises(IntegrityError, match="damaged LangGraph index key"):
        list(saver.list(_cfg()))
