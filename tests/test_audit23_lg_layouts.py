"""audit23: LangGraph checkpoint layout 2 (branch lgspeed) against independent oracles.

The oracle here reads each checkpoint through a :class:`CheckpointView` only (the
manifest and every part hash-checked by the view) and decodes with
``serde.loads_typed``, as the reads did before lgspeed; the saver's reads
(``Loader``, ``StateReads.state_and_metadata``, the typed index decode) must give
the same tuples on layout 1, layout 2 and threads mixing them, on both backends.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from unittest import mock

import msgpack
import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from pg_cluster import (  # noqa: F401 - fixtures
    backend_store,
    pg_cluster,
    pg_url,
)

from cpstore.errors import CpstoreError, IntegrityError
from cpstore.langgraph import CpstoreSaver, _read, diff_threads
from cpstore.langgraph._codec import (
    CHANNEL,
    HEAD_KEY,
    LIST_KIND,
    branch_label,
    load_value,
    pack_head,
    pack_typed,
    run_for,
    unpack_head,
    unpack_typed,
)
from cpstore.langgraph._read import Entry, _config, entry_at, load_parts, stored, stored_writes
from cpstore.native.binding import digest
from cpstore.store import Store
from cpstore.store.lg_index import checkpoint_key, pack, scan
from cpstore.store.lg_states import StateReads
from cpstore.store.reader import CheckpointView

ROOT = Path(__file__).resolve().parent.parent
THREAD = "t-a23"


def _cfg(checkpoint_id: str | None = None, thread: str = THREAD) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _record_layout_1(
    saver: CpstoreSaver,
    steps: list[dict[str, Any]],
    *,
    lg: dict[str, Any] | None = None,
) -> list[str]:
    """Record a layout-1 chain (the head as the state parts ``checkpoint`` and
    ``metadata``); ``lg`` also puts a *different* layout-2 head (these metadata) in
    each manifest's metadata."""
    store, serde = saver.store, saver.serde
    rec = store.recorder(run_for(THREAD), branch=branch_label(""))
    ids: list[str] = []
    parent: str | None = None
    for step, values in enumerate(steps):
        cp: dict[str, Any] = dict(empty_checkpoint())
        cp["channel_versions"] = {k: f"{step + 1:032}.0" for k in values}
        checkpoint_id = str(cp["id"])
        ck = pack_typed(serde.dumps_typed(cp))
        md = pack_typed(serde.dumps_typed({"source": "loop", "step": step, "parents": {}}))
        parts = {
            "checkpoint": ck,
            "metadata": md,
            **{CHANNEL + k: pack_typed(serde.dumps_typed(v)) for k, v in values.items()},
        }
        head = None
        if lg is not None:
            head = {HEAD_KEY: pack_head(ck, pack_typed(serde.dumps_typed(lg)))}
        key = checkpoint_key(THREAD, "", checkpoint_id)
        have = sorted(values)

        def extra(
            cid: bytes, key: bytes = key, parent: str | None = parent, have: list[str] = have
        ) -> list[tuple[bytes, bytes | None]]:
            body = Entry.body_of(
                bytes(cid), run=run_for(THREAD), branch="main", parent=parent, run_id=None,
                have=have,
            )  # fmt: skip
            return [(key, pack(key, body))]

        rec.checkpoint(step, parts, metadata=head, extra_meta=extra)
        ids.append(checkpoint_id)
        parent = checkpoint_id
    rec.close()
    return ids


def _oracle_tuple(saver: CpstoreSaver, entry: Entry) -> CheckpointTuple | None:
    """The tuple of ``entry`` read through a CheckpointView only (no StateReads, no
    Loader): layout 1 when the state has both head parts, else the manifest's head."""
    store, serde = saver.store, saver.serde
    backend = store.backend
    with backend.read_txn() as txn:
        if not stored(txn, store, entry):
            return None
        with CheckpointView(backend, entry.cid, verify=True, txn=txn) as view:
            state = view.state()
            meta = view.manifest.metadata
        assert isinstance(state, dict)
        if "checkpoint" in state and "metadata" in state:
            ck, md = state["checkpoint"], state["metadata"]
        else:
            ck, md = unpack_head(meta[HEAD_KEY], "oracle")
        checkpoint = serde.loads_typed(unpack_typed(ck, "oracle"))
        metadata = serde.loads_typed(unpack_typed(md, "oracle"))
        values: dict[str, Any] = {}
        for name, part in state.items():
            if not name.startswith(CHANNEL):
                continue
            channel = name[len(CHANNEL) :]
            kind, data = unpack_typed(part, name)
            if kind == LIST_KIND:
                values[channel] = load_value(serde, state, channel, name)
            elif kind != "empty":
                values[channel] = serde.loads_typed((kind, data))
        checkpoint["channel_values"] = values
        writes = [
            (w.task_id, w.channel, serde.loads_typed(w.typed))
            for w in stored_writes(
                txn, backend.db("meta"), entry.thread_id, entry.ns, entry.checkpoint_id
            )
        ]
    parent = None if entry.parent is None else _config(entry.thread_id, entry.ns, entry.parent)
    return CheckpointTuple(entry.config(), checkpoint, metadata, parent, writes)


def _oracle_list(saver: CpstoreSaver, thread: str) -> list[CheckpointTuple]:
    backend = saver.store.backend
    with backend.read_txn() as txn:
        found = [
            Entry.decode(k, v)
            for k, v in scan(txn, backend.db("meta"), checkpoint_key(thread, ""), reverse=True)
        ]
    return [t for t in (_oracle_tuple(saver, e) for e in found) if t is not None]


def _entry(store: Store, checkpoint_id: str, thread: str = THREAD) -> Entry:
    backend = store.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), thread, "", checkpoint_id)
    assert entry is not None
    return entry


def _mixed_thread(saver: CpstoreSaver) -> list[str]:
    """Two layout-1 checkpoints, then two layout-2 puts by a fresh saver: the first
    inherits channel ``b`` (same version, no value passed) from its layout-1 parent."""
    ids = _record_layout_1(saver, [{"a": "v0", "b": [1, 2]}, {"a": "v1", "b": [1, 2]}])
    fresh = CpstoreSaver(saver.store)  # no cached branch: the parent's parts are read
    config = _cfg(ids[-1])
    for step in (2, 3):
        cp: dict[str, Any] = dict(empty_checkpoint())
        cp["channel_values"] = {"a": f"v{step}"}
        cp["channel_versions"] = {"a": f"{step + 1:032}.0", "b": f"{2:032}.0"}
        meta: dict[str, Any] = {"source": "loop", "step": step, "parents": {}}
        config = fresh.put(config, cp, meta, {"a": cp["channel_versions"]["a"]})
        fresh.put_writes(config, [("a", f"w{step}")], f"task-{step}")
        ids.append(config["configurable"]["checkpoint_id"])
    return ids


def test_a_mixed_layout_thread_reads_copies_diffs_and_prunes_alike_on_each_backend(
    store: Store,
) -> None:
    """get_tuple, list, copy_thread, diff and keep_latest over layouts 1 and 2 give the
    view-only oracle's tuples on LMDB and PostgreSQL; the inherited channel is read."""
    saver = CpstoreSaver(store)
    ids = _mixed_thread(saver)
    for checkpoint_id in ids:
        got = saver.get_tuple(_cfg(checkpoint_id))
        assert got == _oracle_tuple(saver, _entry(store, checkpoint_id))
    listed = list(saver.list(_cfg()))
    assert listed == _oracle_list(saver, THREAD)
    assert [t.checkpoint["channel_values"] for t in listed] == [
        {"a": f"v{i}", "b": [1, 2]} for i in (3, 2, 1, 0)
    ]
    assert [t.metadata["step"] for t in listed] == [3, 2, 1, 0]
    saver.copy_thread(THREAD, "t-copy")
    copied = list(saver.list(_cfg(thread="t-copy")))
    assert [(t.checkpoint, t.metadata, t.pending_writes) for t in copied] == [
        (t.checkpoint, t.metadata, t.pending_writes) for t in listed
    ]
    assert diff_threads(store, _cfg(), _cfg(thread="t-copy")).same
    saver.prune([THREAD], strategy="keep_latest")
    kept = list(saver.list(_cfg()))
    assert [t.config for t in kept] == [listed[0].config]
    assert kept[0].checkpoint == listed[0].checkpoint and kept[0].metadata == listed[0].metadata
    assert store.verify().ok


def test_a_layout_1_checkpoint_that_also_holds_an_lg_head_is_read_from_its_parts(
    store: Store,
) -> None:
    """Both heads stored: every reader (get_tuple, list, copy_thread, diff's step) takes
    the parts' one, as documented; the other head is never handed out."""
    saver = CpstoreSaver(store)
    smuggled = {"source": "SMUGGLED", "step": 99, "parents": {}}
    ids = _record_layout_1(saver, [{"a": "v0"}, {"a": "v1"}], lg=smuggled)
    for i, checkpoint_id in enumerate(ids):
        got = saver.get_tuple(_cfg(checkpoint_id))
        assert got is not None and got.metadata == {"source": "loop", "step": i, "parents": {}}
    assert [t.metadata["source"] for t in saver.list(_cfg())] == ["loop", "loop"]
    saver.copy_thread(THREAD, "t-copy")
    assert [t.metadata["step"] for t in saver.list(_cfg(thread="t-copy"))] == [1, 0]
    other = CpstoreSaver(store)
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"a": "other"}
    cp["channel_versions"] = {"a": "1"}
    other.put(_cfg(thread="t-other"), cp, {"source": "loop", "step": 0}, {"a": "1"})
    assert diff_threads(store, _cfg(), _cfg(thread="t-other")).step == 0


def test_state_and_metadata_equals_the_views_state_and_metadata(store: Store) -> None:
    """For layout 1, layout 2, a chunked (> 4 KiB) part and a part-less checkpoint,
    StateReads.state_and_metadata gives the view's state and manifest metadata."""
    saver = CpstoreSaver(store)
    ids = _mixed_thread(saver)
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"big": "x" * 20000}
    cp["channel_versions"] = {"big": "1"}
    config = saver.put(_cfg(ids[-1]), cp, {"step": 4}, {"big": "1"})
    ids.append(config["configurable"]["checkpoint_id"])
    config = saver.put(_cfg(ids[-1]), dict(empty_checkpoint()), {"step": 5}, {})
    ids.append(config["configurable"]["checkpoint_id"])
    backend = store.backend
    entries = [_entry(store, i) for i in ids]
    with backend.read_txn() as txn:
        reads = StateReads(backend, txn)
        for entry in entries + entries[::-1]:  # again: the parts this txn checked before
            got = reads.state_and_metadata(entry.cid)
            with CheckpointView(backend, entry.cid, verify=True, txn=txn) as view:
                assert got == (view.state(), view.manifest.metadata)
    big = saver.get_tuple(_cfg(ids[-2]))
    assert big is not None and big.checkpoint["channel_values"] == {"big": "x" * 20000}


def test_load_parts_reads_through_a_checkpoint_view_not_the_fast_path(
    store: Store,
) -> None:
    """load_parts (copy_thread, prune, the oracle of audit19's read tests) must not
    share StateReads with the Loader it is compared with: it reads through a view."""
    saver = CpstoreSaver(store)
    ids = _mixed_thread(saver)
    with mock.patch.object(
        StateReads, "state_and_metadata", side_effect=AssertionError("fast path used")
    ):
        backend = store.backend
        for checkpoint_id in ids:
            entry = _entry(store, checkpoint_id)
            with backend.read_txn() as txn:
                parts = load_parts(txn, store, entry)
            assert {"checkpoint", "metadata", "channel/a"} <= set(parts)


def test_a_serde_whose_loads_typed_is_patched_after_the_saver_is_made_decodes_by_it(
    tmp_path: Path,
) -> None:
    """The saver keeps its part loaders between reads; replacing ``loads_typed`` on the
    serde afterwards (instance or class) is honoured, as it was when each read built them."""
    with CpstoreSaver.from_conn_string(tmp_path / "s", durability="none") as saver:
        cp: dict[str, Any] = dict(empty_checkpoint())
        cp["channel_values"] = {"a": "x"}
        cp["channel_versions"] = {"a": "1"}
        config = saver.put(_cfg(), cp, {"step": 0}, {"a": "1"})
        assert saver.get_tuple(config) is not None  # the loaders are built and kept
        seen: list[str] = []
        original = saver.serde.loads_typed

        def spy(typed: tuple[str, bytes]) -> Any:
            seen.append(typed[0])
            return original(typed)

        saver.serde.loads_typed = spy
        got = saver.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"] == {"a": "x"}
        assert seen == ["msgpack", "msgpack", "msgpack"]  # checkpoint, metadata, channel
        del saver.serde.loads_typed
        seen.clear()
        assert next(iter(saver.list(_cfg()))).checkpoint["channel_values"] == {"a": "x"}
        assert seen == []


# -- the typed index decode against the generic one -------------------------------------

_KEY = checkpoint_key(THREAD, "", "1f0-a23")
_FIELDS = ["cp", "run", "branch", "parent", "run_id", "have"]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=17),
)
_VALUES = st.one_of(
    _SCALARS, st.lists(_SCALARS, max_size=3), st.dictionaries(st.text(max_size=2), _SCALARS)
)
_GOOD = {
    "cp": st.binary(min_size=16, max_size=16),
    "run": st.text(max_size=4),
    "branch": st.text(max_size=4),
    "parent": st.one_of(st.none(), st.text(max_size=4)),
    "run_id": st.one_of(st.none(), st.text(max_size=4)),
    "have": st.lists(st.text(max_size=3), max_size=3),
}


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    """msgpack bodies near the stored shape: each field well typed, or any value, or
    absent; sometimes an extra field, a duplicate key, or trailing bytes."""
    items: list[tuple[Any, Any]] = []
    for name in draw(st.permutations(_FIELDS)):
        how = draw(st.sampled_from(["good", "good", "good", "any", "absent"]))
        if how != "absent":
            items.append((name, draw(_GOOD[name] if how == "good" else _VALUES)))
    if draw(st.booleans()):
        items.append((draw(st.sampled_from([*_FIELDS, "later", 1])), draw(_VALUES)))
    raw = bytes([0x80 | len(items)]) if len(items) < 16 else b"\xde" + len(items).to_bytes(2, "big")
    for k, v in items:
        raw += msgpack.packb(k) + msgpack.packb(v, use_bin_type=True)
    if draw(st.integers(0, 9)) == 0:
        raw += draw(st.binary(min_size=1, max_size=2))
    return raw


def _generic(key: bytes, value: bytes) -> Any:
    """Entry.decode with the typed decode switched off, or the class it raises."""
    with mock.patch.object(_read, "_decode_body", side_effect=msgspec.DecodeError):
        try:
            return Entry.decode(key, value)
        except Exception as exc:
            return type(exc)


@settings(max_examples=600, deadline=None)
@given(_bodies())
def test_the_typed_entry_decode_accepts_nothing_the_generic_decode_refuses(body: bytes) -> None:
    """Any body near the stored shape: the typed path's entry is the generic path's
    (equal fields, equal types), and where the generic path refuses, so does Entry.decode."""
    value = body + digest(_KEY + body)[:8]
    generic = _generic(_KEY, value)
    try:
        got: Any = Entry.decode(_KEY, value)
    except CpstoreError as exc:
        got = type(exc)
    if isinstance(generic, type):
        assert got is generic and issubclass(got, IntegrityError)
    else:
        assert got == generic
        assert [type(x) for x in got] == [type(x) for x in generic]


# -- docs ---------------------------------------------------------------------------------


def _layouts_paragraph() -> str:
    text = (ROOT / "docs" / "langgraph.md").read_text(encoding="utf-8")
    start = text.index("**Checkpoint layouts (the head).**")
    return text[start : text.index("\n\n", start)]


def test_the_layout_docs_name_each_pinning_test_in_the_file_that_holds_it() -> None:
    """Every ``test_…`` the layouts paragraph names is defined in the file it names."""
    para = " ".join(_layouts_paragraph().split())
    cited = re.findall(r"`(tests/[\w/]+\.py)` \(([^)]*)\)", para)
    assert cited, para
    for path, names in cited:
        source = (ROOT / path).read_text(encoding="utf-8")
        for name in re.findall(r"`(test_\w+)`", names):
            assert f"def {name}(" in source, (path, name)


def test_the_layout_docs_say_what_an_older_release_does_with_layout_2() -> None:
    """A release before layout 2 reads a layout-2 checkpoint as 'not a LangGraph
    checkpoint' (its state lacks the head parts): the docs say so, and to upgrade
    every reader before the first layout-2 put."""
    para = " ".join(_layouts_paragraph().split())
    assert "older release" in para
    assert "not a LangGraph checkpoint" in para


# -- the namespace key cache ----------------------------------------------------------------


def _caches() -> list[Any]:
    """The lru caches of the read module."""
    return [fn for fn in vars(_read).values() if callable(fn) and hasattr(fn, "cache_info")]


def _cached_entries() -> int:
    """How many results the lru caches of the read module hold now."""
    return sum(fn.cache_info().currsize for fn in _caches())


def test_namespace_key_caches_keep_no_long_names(tmp_path: Path) -> None:
    """Reads naming 60 KB thread ids and namespaces (none stored) and reads and puts of
    300-character ones work, and the key caches hold none of them (1,024 keys of 60 KB
    names would pin ~0.5 GB); short names are still served."""
    with CpstoreSaver.from_conn_string(tmp_path / "s", durability="none") as saver:
        for fn in _caches():  # empty: a full cache would hide a long name's entry
            fn.cache_clear()
        for i in range(3):
            huge = {
                "configurable": {"thread_id": f"{i}" + "t" * 60000, "checkpoint_ns": "n" * 60000}
            }
            assert saver.get_tuple(huge) is None and list(saver.list(huge)) == []
            thread, ns = f"{i}" + "t" * 150, "n" * 150
            cp: dict[str, Any] = dict(empty_checkpoint())
            cp["channel_values"] = {"a": i}
            cp["channel_versions"] = {"a": "1"}
            conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            config = saver.put(conf, cp, {"step": 0}, {"a": "1"})
            saver.put_writes(config, [("a", 5)], "task")
            got = saver.get_tuple(conf)
            assert got is not None and got.checkpoint["channel_values"] == {"a": i}
            assert got.pending_writes == [("task", "a", 5)]
            assert [t.config for t in saver.list(conf)] == [config]
        assert _cached_entries() == 0
        assert _read.ns_prefix("short", "") == checkpoint_key("short", "")
        assert _read.ns_prefix("t" * 300, "n") == checkpoint_key("t" * 300, "n")


# -- golden ---------------------------------------------------------------------------------


def test_a_layout_2_checkpoint_of_fixed_serde_bytes_has_a_pinned_id_on_each_backend(
    store: Store,
) -> None:
    """A put of fixed head and channel bytes is the same cpstore checkpoint on either
    backend: manifest metadata exactly ``{"lg": pack_head(...)}``, parts the channels only."""
    from cpstore.langgraph._write import Put  # noqa: PLC0415 - the put path under test

    saver = CpstoreSaver(store)
    head = {
        "checkpoint": b"msgpack\x00\x81\xa2id\xa4id-1",
        "metadata": b"msgpack\x00\x81\xa4step\x00",
    }
    fresh = {"a": {"channel/a": b"msgpack\x00\x01"}}
    saver._writer.commit(Put("t", "", None, "id-1", 0, None, head, fresh, {"a": "1"}, {}))
    entry = _entry(store, "id-1", thread="t")
    assert entry.cid.hex() == "e1898d78b324e8cba30fc9a581a379a1"
    with store.read(entry.cid.hex()) as view:
        assert view.manifest.metadata == {
            "lg": bytes.fromhex("0200000011")
            + b"msgpack\x00\x81\xa2id\xa4id-1msgpack\x00\x81\xa4step\x00"
        }
        assert list(view.manifest.raw["state"]["parts"]) == ["channel/a"]
