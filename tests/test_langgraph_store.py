"""CpstoreSaver on the store: dedup, verified reads, the index, DeltaChannel, the CLI."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from lg_delta import concat
from stored import raw_get, raw_items, raw_put

from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.langgraph._codec import load_value, pack_value
from cpstore.native.binding import digest
from cpstore.store import Store
from cpstore.store.lg_index import CHECKPOINT_PREFIX, scan


def _cfg(thread: str, parent: str | None = None, ns: str = "") -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if parent is not None:
        conf["checkpoint_id"] = parent
    return {"configurable": conf}


def _put(
    saver: CpstoreSaver, thread: str, values: dict[str, Any], parent: str | None = None
) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    out = saver.put(
        _cfg(thread, parent), cp, {"source": "loop", "step": 0}, dict.fromkeys(values, 1)
    )
    return str(out["configurable"]["checkpoint_id"])


def _objects(store: Store) -> tuple[int, int]:
    """(object count, object bytes) in the store."""
    with store.backend.read_txn() as txn:
        n, size = 0, 0
        for _, value in raw_items(txn, store.backend.dbs, "objects"):
            n += 1
            size += len(value)
    return n, size


@pytest.fixture
def saver(tmp_path: Path) -> Any:
    with CpstoreSaver.from_conn_string(tmp_path / "store", durability="none") as s:
        yield s


class TestDedup:
    def test_identical_values_are_stored_once_across_threads(self, saver: CpstoreSaver) -> None:
        """The same 200 KB value put on 20 threads adds its bytes once."""
        big = "x" * 200_000
        _put(saver, "t0", {"doc": big})
        before = _objects(saver.store)[1]
        for i in range(1, 20):
            _put(saver, f"t{i}", {"doc": big})
        assert _objects(saver.store)[1] - before < 20 * 2_000

    def test_copy_thread_writes_no_value_bytes(self, saver: CpstoreSaver) -> None:
        """copy_thread adds no object at all: values, checkpoint and metadata parts exist."""
        parent = None
        for i in range(5):
            parent = _put(saver, "src", {"doc": "v" * 50_000 + str(i)}, parent)
        before = _objects(saver.store)
        saver.copy_thread("src", "dst")
        assert _objects(saver.store) == before
        src = [t.checkpoint["channel_values"] for t in saver.list(_cfg("src"))]
        dst = [t.checkpoint["channel_values"] for t in saver.list(_cfg("dst"))]
        assert dst == src and len(dst) == 5


class TestVerifiedReads:
    def test_a_damaged_value_is_an_integrity_error_never_a_wrong_state(
        self, saver: CpstoreSaver
    ) -> None:
        """Flip bytes of a stored channel value: get_tuple and list raise; verify reports it."""
        cid = _put(saver, "t", {"secret": "the true value" * 10})
        store = saver.store
        backend = store.backend
        with backend.read_txn() as txn:
            targets = [k for k, v in raw_items(txn, backend.dbs, "objects") if b"the true" in v]
        assert targets

        def damage(txn: Any) -> None:
            for key in targets:
                value = raw_get(txn, backend.dbs, "objects", key) or b""
                raw_put(txn, backend.dbs, "objects", key, value.replace(b"true", b"fake"))

        backend.write_txn(damage)
        with pytest.raises(IntegrityError):
            saver.get_tuple(_cfg("t", cid))
        with pytest.raises(IntegrityError):
            list(saver.list(_cfg("t")))
        assert not store.verify().ok

    def test_a_damaged_index_entry_is_an_integrity_error(self, saver: CpstoreSaver) -> None:
        """A flipped bit in a LangGraph index entry is refused by reads and reported by verify."""
        cid = _put(saver, "t", {"a": 1})
        backend = saver.store.backend
        meta = backend.db("meta")
        with backend.read_txn() as txn:
            key, value = next(scan(txn, meta, CHECKPOINT_PREFIX))

        def damage(txn: Any) -> None:
            txn.put(key, value[:-1] + bytes([value[-1] ^ 1]), db=meta)

        backend.write_txn(damage)
        with pytest.raises(IntegrityError):
            saver.get_tuple(_cfg("t", cid))
        report = saver.store.verify()
        assert any("LangGraph index" in p.what for p in report.problems)

    def test_a_config_without_thread_id_is_a_clear_error(self, saver: CpstoreSaver) -> None:
        """get_tuple of a config with no thread_id raises InvalidInputError (a ValueError)."""
        with pytest.raises(InvalidInputError, match="thread_id"):
            saver.get_tuple({"configurable": {}})

    def test_a_batched_store_is_refused(self, tmp_path: Path) -> None:
        """A batched store would hide a put from the next read: the saver refuses it."""
        with (
            Store(tmp_path / "b", durability="batched") as store,
            pytest.raises(InvalidInputError, match="commits every put"),
        ):
            CpstoreSaver(store)

    def test_verify_counts_the_index(self, saver: CpstoreSaver) -> None:
        """verify() walks the LangGraph index and finds an intact store ok."""
        _put(saver, "t", {"a": 1})
        report = saver.store.verify()
        assert report.ok and report.counts["langgraph"] == 1


class Delta(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=3)]


def _delta_graph(cp: Any) -> Any:
    g = StateGraph(Delta)
    g.add_node("step", lambda s: {"log": [f"n{len(s['log'])}"]})
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(checkpointer=cp)


class TestDeltaChannel:
    def test_delta_channel_state_equals_in_memory(self, saver: CpstoreSaver) -> None:
        """A DeltaChannel rebuilt from get_delta_channel_history equals InMemorySaver's."""
        results = []
        for cp in (InMemorySaver(), saver):
            graph = _delta_graph(cp)
            config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
            for i in range(7):
                graph.invoke({"log": [f"in{i}"]}, config)
            results.append(graph.get_state(config).values["log"])
        assert results[0] == results[1]
        assert len(results[1]) == 14

    def test_prune_keep_latest_keeps_what_the_delta_channel_needs(
        self, saver: CpstoreSaver
    ) -> None:
        """keep_latest keeps ancestors back to the last snapshot: the state survives pruning."""
        graph = _delta_graph(saver)
        config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
        for i in range(7):
            graph.invoke({"log": [f"in{i}"]}, config)
        before = graph.get_state(config).values["log"]
        count = len(list(saver.list(config)))
        saver.prune(["d"], strategy="keep_latest")
        assert 1 < len(list(saver.list(config))) < count
        assert graph.get_state(config).values["log"] == before


class TestPruneReclaims:
    def test_keep_latest_sweeps_the_dropped_checkpoints_and_keeps_the_latest_intact(
        self, saver: CpstoreSaver
    ) -> None:
        """keep_latest sweeps the old checkpoints and their unique values; the rest reads."""
        parent = None
        for i in range(20):
            # random hex: what compression leaves of each value is still ~10 KB
            parent = _put(saver, "t", {"doc": f"{i:03d}" + os.urandom(10_000).hex()}, parent)
        saver.put_writes(_cfg("t", parent), [("doc", "pending")], "task-1")
        _put(saver, "other", {"doc": "kept elsewhere"})
        before = _objects(saver.store)
        saver.prune(["t"], strategy="keep_latest")
        after = _objects(saver.store)
        assert after[1] < before[1] - 15 * 9_000  # the 19 dropped values are gone
        tup = saver.get_tuple(_cfg("t"))
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == parent
        assert tup.checkpoint["channel_values"]["doc"].startswith("019")
        assert tup.pending_writes == [("task-1", "doc", "pending")]
        assert [len(saver.store.history("lg:t", b)) for b in saver.store.branches("lg:t")] == [1]
        assert saver.get_tuple(_cfg("other")) is not None
        assert saver.store.verify().ok
        _put(saver, "t", {"doc": "next"}, parent)  # the thread goes on from the kept head
        assert len(list(saver.list(_cfg("t")))) == 2


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *args], capture_output=True, text=True, check=False
    )


class TestCommandLine:
    def test_saver_threads_show_in_log_inspect_verify_and_gc(self, tmp_path: Path) -> None:
        """A thread is a run: log lists it, inspect reads it, verify passes, gc deletes it."""
        path = tmp_path / "store"
        with CpstoreSaver.from_conn_string(path) as saver:
            first = _put(saver, "chat-1", {"msgs": ["hi"]})
            _put(saver, "chat-1", {"msgs": ["hi", "there"]}, first)
        runs = json.loads(_cli("log", "--store", str(path), "--json").stdout)
        assert "lg:chat-1" in json.dumps(runs)
        log = _cli("log", "lg:chat-1", "--store", str(path), "--json")
        assert log.returncode == 0
        head = json.loads(log.stdout)
        cid = json.dumps(head)
        with Store(path) as store:
            head_id = store.ref("lg:chat-1", "main")
        assert head_id is not None and head_id in cid
        assert _cli("inspect", head_id, "--store", str(path)).returncode == 0
        verified = _cli("verify", "--store", str(path))
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert _cli("gc", "--delete-run", "lg:chat-1", "--store", str(path)).returncode == 0
        with CpstoreSaver.from_conn_string(path) as saver:
            assert saver.get_tuple(_cfg("chat-1")) is None
            assert list(saver.list(_cfg("chat-1"))) == []


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what msgpack holds
    | st.text(max_size=300)
    | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


class TestListChannels:
    @settings(max_examples=60, deadline=None)
    @given(st.lists(_json, max_size=200), st.integers(min_value=0, max_value=3))
    def test_a_list_reads_back_exactly_as_the_serde_decodes_it(
        self, value: list[Any], repeat: int
    ) -> None:
        """Any list (empty, tiny, over many segments) reads back as the whole-list serde pair."""
        serde = JsonPlusSerializer()
        value = value * (1 + repeat * 40)
        parts = pack_value(serde, "messages", value)
        expected = serde.loads_typed(serde.dumps_typed(value))
        assert load_value(serde, parts, "messages", "test") == expected

    def test_appending_keeps_every_closed_segment(self) -> None:
        """One more message changes only the last segment and the head, not the closed ones."""
        serde = JsonPlusSerializer()
        history = [{"role": "user", "content": "m" * 1000 + str(i)} for i in range(200)]
        before = pack_value(serde, "messages", history)
        after = pack_value(serde, "messages", [*history, {"content": "new"}], before)
        segments = len(before) - 1  # all but the head
        closed = [f"segment/messages/{i}" for i in range(segments - 1)]  # the last one fills
        assert len(closed) >= 10
        assert all(after[name] is before[name] for name in closed)
        assert after["segment/messages/0"] == before["segment/messages/0"]

    def test_a_missing_or_short_segment_is_an_integrity_error(self) -> None:
        """A segment gone or cut short is refused, never decoded into a shorter history."""
        serde = JsonPlusSerializer()
        parts = pack_value(serde, "m", ["x" * 1000] * 100)
        gone = {k: v for k, v in parts.items() if k != "segment/m/1"}
        with pytest.raises(IntegrityError):
            load_value(serde, gone, "m", "test")
        short = dict(parts, **{"segment/m/1": parts["segment/m/1"][:-10]})
        with pytest.raises(IntegrityError):
            load_value(serde, short, "m", "test")

    def test_a_chat_history_on_disk_grows_with_the_messages_not_their_square(
        self, saver: CpstoreSaver
    ) -> None:
        """300 steps of a growing message list: disk stays within 20x the unique message bytes."""
        parent = None
        history: list[str] = []
        for i in range(300):
            history = [*history, f"{i:04d}" + "m" * 1000]
            parent = _put(saver, "chat", {"messages": history}, parent)
        assert saver.store.disk_bytes() < 20 * sum(len(m) for m in history)
        tup = saver.get_tuple(_cfg("chat"))
        assert tup is not None and tup.checkpoint["channel_values"]["messages"] == history


class TestThreadDiff:
    def _graph(self, saver: CpstoreSaver, flip_at: int | None) -> Any:
        class S(TypedDict):
            n: int
            trail: Annotated[list[str], operator.add]

        def step(state: S) -> dict[str, Any]:
            n = state["n"] + 1
            mark = "flipped" if flip_at is not None and n == flip_at else "ok"
            return {"n": n, "trail": [f"{n}:{mark}"]}

        g = StateGraph(S)
        g.add_node("step", step)
        g.add_node("check", lambda s: {"trail": ["checked"]})
        g.add_edge(START, "step")
        g.add_conditional_edges("step", lambda s: "check" if s["n"] >= 4 else "step")
        g.add_edge("check", END)
        return g.compile(checkpointer=saver)

    def test_two_threads_diverge_at_the_first_different_step_node_and_channel(
        self, saver: CpstoreSaver, tmp_path: Path
    ) -> None:
        """Same graph, one step different: lg-diff names its step, node and channel."""
        self._graph(saver, None).invoke({"n": 0, "trail": []}, _cfg("a"))
        self._graph(saver, 3).invoke({"n": 0, "trail": []}, _cfg("b"))
        found = diff_threads(saver.store, _cfg("a"), _cfg("b"))
        assert not found.same
        assert found.step == 3 and found.nodes == ("step",) and found.channels == ("trail",)
        assert diff_threads(saver.store, _cfg("a"), _cfg("a")).same

    def test_a_thread_and_its_fork_share_history_until_the_fork(self, saver: CpstoreSaver) -> None:
        """A fork by update_state: the diff names the channel it changed and the shared part."""
        graph = self._graph(saver, None)
        graph.invoke({"n": 0, "trail": []}, _cfg("t"))
        head = graph.get_state(_cfg("t")).config  # the fork becomes the thread's newest
        past = next(s for s in graph.get_state_history(_cfg("t")) if s.values.get("n") == 2)
        fork = graph.update_state(past.config, {"trail": ["edited"]})
        found = diff_threads(saver.store, head, fork)
        # A went on to n=3; the fork holds n=2 with an edited trail
        assert found.channels == ("n", "trail") and found.step == 3
        assert found.shared_until is not None and found.index == found.shared_until + 1

    def test_the_lg_diff_command_prints_the_divergence(self, tmp_path: Path) -> None:
        """cpstore lg-diff --json on a store the saver wrote reports step, node and channel."""
        path = tmp_path / "store"
        with CpstoreSaver.from_conn_string(path) as saver:
            self._graph(saver, None).invoke({"n": 0, "trail": []}, _cfg("a"))
            self._graph(saver, 3).invoke({"n": 0, "trail": []}, _cfg("b"))
        out = _cli("lg-diff", "a", "b", "--store", str(path), "--json")
        assert out.returncode == 12, out.stderr  # they diverge: exit 12, as cpstore diff
        assert _cli("lg-diff", "a", "a", "--store", str(path)).returncode == 0
        found = json.loads(out.stdout)
        assert (found["step"], found["nodes"], found["channels"]) == (3, ["step"], ["trail"])
        missing = _cli("lg-diff", "a", "nope", "--store", str(path))
        assert missing.returncode == 4 and "no such LangGraph checkpoint" in missing.stderr


def test_a_thread_named_like_another_threads_hashed_run_does_not_share_its_run(
    saver: CpstoreSaver,
) -> None:
    """Thread "#<digest of a long id>" got the long thread's run: deleting it swept the other."""
    long_id = "t" * 300  # too long for a run name: its run is hashed
    mimic = "#" + digest(long_id.encode()).hex()
    kept = _put(saver, long_id, {"v": "keep me"})
    _put(saver, mimic, {"v": "other"})
    saver.delete_thread(mimic)
    got = saver.get_tuple(_cfg(long_id))
    assert got is not None and got.config["configurable"]["checkpoint_id"] == kept
    assert got.checkpoint["channel_values"] == {"v": "keep me"}
