"""audit19: the LangGraph read path (Loader) against the read path before lgfast, on forged states.

The oracle is ``load_tuple`` as it was at e17d1ae (``stored()``, then a
CheckpointView, then ``serde.loads_typed`` of every part). Checkpoints whose
channel parts are odd (another value type, an ``empty`` or list tag with junk,
undecodable msgpack, another serde type, no type tag) are recorded and named by
LangGraph index entries; ``list`` and ``get_tuple`` must give the oracle's tuples,
or raise the oracle's error class, whatever the order and sharing of the parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple, PendingWrite, empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cpstore.errors import CpstoreError, IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import CHANNEL, LIST_KIND, load_value, pack_typed, unpack_typed
from cpstore.langgraph._read import Entry, _config, load_parts, stored, stored_writes
from cpstore.store.lg_index import checkpoint_key, pack, scan

_SERDE = JsonPlusSerializer()


def _typed(value: Any) -> bytes:
    return pack_typed(_SERDE.dumps_typed(value))


#: Channel part values: what the saver writes, and forged ones.
_PARTS: list[Any] = [
    _typed("text"),
    _typed([1, 2]),
    _typed({"k": [1]}),
    _typed(5),
    _typed(b"raw"),
    _typed(None),
    b"empty\x00",
    b"empty\x00junk",
    b"cpstore.list\x00junk",
    b"msgpack\x00\xc1",
    b"msgpack\x00",
    b"msgpack",
    b"no type tag",
    b"json\x00[1, 2]",
    b"bytes\x00xyz",
    b"bytearray\x00ab",
    b"null\x00",
    b"pickle\x00x",
    b"\xff\xfe\x00x",
    7,
    "msgpack\x00\xa1a",
    None,
    [b"msgpack\x00\x01"],
    {"a": b"msgpack\x00\x01"},
]


def _old_tuple(txn: Any, saver: CpstoreSaver, entry: Entry) -> CheckpointTuple | None:
    """load_tuple as it was before lgfast (e17d1ae)."""
    store, serde = saver.store, saver.serde
    if not stored(txn, store, entry):
        return None
    parts = load_parts(txn, store, entry)
    where = f"checkpoint {entry.cid.hex()}"
    checkpoint = serde.loads_typed(unpack_typed(parts["checkpoint"], where))
    metadata = serde.loads_typed(unpack_typed(parts["metadata"], where))
    values: dict[str, Any] = {}
    for name, part in parts.items():
        if name.startswith(CHANNEL):
            kind, data = unpack_typed(part, name)
            if kind == LIST_KIND:
                at = f"state[{name!r}] of {entry.cid.hex()}"
                values[name[len(CHANNEL) :]] = load_value(serde, parts, name[len(CHANNEL) :], at)
            elif kind != "empty":
                values[name[len(CHANNEL) :]] = serde.loads_typed((kind, data))
    checkpoint["channel_values"] = values
    meta = store.backend.db("meta")
    writes: list[PendingWrite] = [
        (w.task_id, w.channel, serde.loads_typed(w.typed))
        for w in stored_writes(txn, meta, entry.thread_id, entry.ns, entry.checkpoint_id)
    ]
    parent = None if entry.parent is None else _config(entry.thread_id, entry.ns, entry.parent)
    return CheckpointTuple(entry.config(), checkpoint, metadata, parent, writes)


def _outcome(fn: Any) -> Any:
    """repr of what ``fn()`` returns, or the class of what it raises."""
    try:
        return repr(fn())
    except Exception as exc:  # the class is what the two paths must share
        return type(exc)


def _old_outcome(fn: Any) -> Any:
    """:func:`_outcome` of the pre-lgfast path, with the rule the saver has since
    lgtrust: a serde's own exception on stored bytes is IntegrityError (the old path let
    NotImplementedError, ValueError... out; tests/test_lg_malformed.py pins the new rule)."""
    got = _outcome(fn)
    if isinstance(got, type) and not issubclass(got, CpstoreError):
        return IntegrityError
    return got


def _forge(saver: CpstoreSaver, thread: str, states: list[dict[str, Any]]) -> list[str]:
    """Record ``states`` (channel name -> part) as LangGraph checkpoints of ``thread``."""
    rec = saver.store.recorder("forged:" + thread)
    ids, parent = [], None
    backend = saver.store.backend
    for i, channels in enumerate(states):
        checkpoint_id = f"1ef00000-0000-6000-8000-{i:012d}"
        cp = empty_checkpoint()
        cp["id"] = checkpoint_id
        del cp["channel_values"]
        parts = {"checkpoint": _typed(cp), "metadata": _typed({"step": i, "source": "loop"})}
        parts.update({CHANNEL + name: part for name, part in channels.items()})
        cid = bytes.fromhex(rec.checkpoint(i, parts))
        key = checkpoint_key(thread, "", checkpoint_id)
        have = sorted(channels)
        entry = Entry(thread, "", checkpoint_id, cid, rec.run_id, "main", parent, None, tuple(have))
        backend.write_txn(
            lambda txn, key=key, entry=entry: txn.put(
                key, pack(key, entry.body()), db=backend.db("meta")
            )
        )
        ids.append(checkpoint_id)
        parent = checkpoint_id
    return ids


def _old_list(saver: CpstoreSaver, thread: str) -> Any:
    backend = saver.store.backend
    out = []
    with backend.read_txn() as txn:
        meta = backend.db("meta")
        for key, value in scan(txn, meta, checkpoint_key(thread, ""), reverse=True):
            tup = _old_tuple(txn, saver, Entry.decode(key, value))
            if tup is not None:
                out.append(tup)
    return out


_STATES = st.lists(
    st.dictionaries(st.sampled_from(["x", "y", "z"]), st.sampled_from(range(len(_PARTS)))),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(_STATES)
def test_list_and_get_tuple_of_forged_parts_equal_the_pre_lgfast_reads(
    tmp_path_factory: Any, picks: list[dict[str, int]]
) -> None:
    """Forged channel parts, repeated across checkpoints: list and get_tuple give the old
    path's tuples, or raise its error class."""
    path = Path(tmp_path_factory.mktemp("oracle")) / "s"
    states = [{name: _PARTS[i] for name, i in pick.items()} for pick in picks]
    with CpstoreSaver.from_conn_string(path, durability="none") as saver:
        ids = _forge(saver, "t", states)
        cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        assert _outcome(lambda: list(saver.list(cfg))) == _old_outcome(
            lambda: _old_list(saver, "t")
        )
        backend = saver.store.backend
        for checkpoint_id in ids:
            one = {"configurable": {**cfg["configurable"], "checkpoint_id": checkpoint_id}}

            def old(checkpoint_id: str = checkpoint_id) -> Any:
                with backend.read_txn() as txn:
                    key = checkpoint_key("t", "", checkpoint_id)
                    found = txn.get(key, db=backend.db("meta"))
                    return _old_tuple(txn, saver, Entry.decode(key, bytes(found)))

            assert _outcome(lambda one=one: saver.get_tuple(one)) == _old_outcome(old)


def _put_chain(saver: CpstoreSaver, thread: str, n: int) -> list[str]:
    """``n`` saver puts (two channels unchanged throughout, two new each step), each
    with one pending write; their ids."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    versions = {"same": 1, "also": 1, "doc": 1, "n": 1}
    ids = []
    for step in range(n):
        cp = empty_checkpoint()
        cp["channel_values"] = {
            "same": "s" * 50,
            "also": [1, {"k": "v"}],
            "doc": f"d{step}" * 20,
            "n": step,
        }
        new = {"same": 1, "also": 1} if step == 0 else {}
        for name in ("doc", "n"):
            versions[name] += 1
            new[name] = versions[name]
        cp["channel_versions"] = dict(versions)
        config = saver.put(config, cp, {"step": step}, new)
        saver.put_writes(config, [("doc", f"w{step}")], f"task-{step}")
        ids.append(config["configurable"]["checkpoint_id"])
    return ids


def _damaged(value: bytes, data: st.DataObject) -> bytes:
    raw = bytearray(value)
    how = data.draw(st.sampled_from(["flip", "cut", "grow"]))
    # A position drawn as a fraction of the value: a record's length follows its creation
    # time and LangGraph's ids, and hypothesis needs the same draws when it replays.
    where = data.draw(st.integers(0, _SCALE - 1))
    if how == "flip" and raw:
        raw[where * len(raw) // _SCALE] ^= data.draw(st.integers(1, 255))
    elif how == "cut" and raw:
        del raw[where * len(raw) // _SCALE :]
    else:
        at = where * (len(raw) + 1) // _SCALE
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=5))
    return bytes(raw)


#: Positions are drawn in 0..2**16 - 1 and scaled to the value (_damaged).
_SCALE = 1 << 16


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_damaged_stored_byte_reads_through_list_and_get_tuple_as_before(
    tmp_path_factory: Any, data: st.DataObject
) -> None:
    """A byte flipped, cut or grown in a LangGraph index entry, a pending write, a
    location index row or any heap entry (record, hint block, compact frame, object):
    list and get_tuple give the pre-lgfast tuples or raise its error class."""
    path = Path(tmp_path_factory.mktemp("dmg")) / "s"
    with CpstoreSaver.from_conn_string(path, durability="none") as saver:
        ids = _put_chain(saver, "t", 4)
        env = saver.store.backend.env.env
        table = data.draw(st.sampled_from(["meta", "cloc", "oloc", "heap"]))
        dbs = saver.store.backend.dbs
        with env.begin() as txn:
            rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=dbs[table])]
        if table == "meta":
            rows = [r for r in rows if r[0].startswith((b"lg/c/", b"lg/w/"))]
        key, value = data.draw(st.sampled_from(rows))
        bad = _damaged(value, data)
        with env.begin(write=True) as txn:
            txn.put(key, bad, db=dbs[table])
        cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        listed = _outcome(lambda: list(saver.list(cfg)))
        event(f"{table}: {listed.__name__ if isinstance(listed, type) else 'tuples'}")
        assert listed == _old_outcome(lambda: _old_list(saver, "t"))
        backend = saver.store.backend
        for checkpoint_id in ids:
            one = {"configurable": {**cfg["configurable"], "checkpoint_id": checkpoint_id}}

            def old(checkpoint_id: str = checkpoint_id) -> Any:
                with backend.read_txn() as txn:
                    key = checkpoint_key("t", "", checkpoint_id)
                    found = txn.get(key, db=backend.db("meta"))
                    return _old_tuple(txn, saver, Entry.decode(key, bytes(found)))

            assert _outcome(lambda one=one: saver.get_tuple(one)) == _old_outcome(old)
