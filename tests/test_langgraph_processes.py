"""Two processes running LangGraph graphs on one store: different threads and the same thread."""

from __future__ import annotations

import multiprocessing
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

import cpstore
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.langgraph._read import entry_at
from cpstore.langgraph._write import Writer

RUNS = 12


class Count(TypedDict):
    seen: Annotated[list[str], operator.add]


class _Recording(CpstoreSaver):
    """A saver that remembers every checkpoint id it was told was stored."""

    acknowledged: list[str]

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        out = super().put(config, checkpoint, metadata, new_versions)
        self.acknowledged.append(out["configurable"]["checkpoint_id"])
        return out


def _graph(saver: Any) -> Any:
    g = StateGraph(Count)
    g.add_node("a", lambda s: {"seen": ["a"]})
    g.add_node("b", lambda s: {"seen": ["b"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


def _worker(path: str, name: str, shared: str) -> tuple[list[str], list[str]]:
    """Run RUNS invokes on the process's own thread and on the shared one, interleaved."""
    with CpstoreSaver.from_conn_string(path) as plain:
        saver = _Recording(plain.store)
        saver.acknowledged = []
        graph = _graph(saver)
        for i in range(RUNS):
            graph.invoke({"seen": [f"{name}{i}"]}, {"configurable": {"thread_id": name}})
            graph.invoke({"seen": [f"{name}{i}"]}, {"configurable": {"thread_id": shared}})
        return saver.acknowledged, graph.get_state({"configurable": {"thread_id": name}}).values[
            "seen"
        ]


def _ns_and_id(config: Any) -> tuple[str, str]:
    conf = config["configurable"]
    return conf["checkpoint_ns"], conf["checkpoint_id"]


def _lineage_breaks(saver: CpstoreSaver, thread: str) -> list[str]:
    """Checkpoints of ``thread`` whose cpstore parent is not their LangGraph parent's
    checkpoint (or whose LangGraph parent is not indexed), one line each."""
    st = saver.store
    meta = st.backend.db("meta")
    with st.backend.read_txn() as txn:
        entries = {
            e.checkpoint_id: e
            for t in saver.list({"configurable": {"thread_id": thread}})
            if (e := entry_at(txn, meta, thread, *_ns_and_id(t.config)))
        }
    out = []
    for e in entries.values():
        with st.read(e.cid.hex()) as view:
            recorded, step = view.manifest.parent, view.manifest.step
        parent = None if e.parent is None else entries.get(e.parent)
        if e.parent is not None and parent is None:
            out.append(f"{e.checkpoint_id} ({e.branch}): LangGraph parent {e.parent} not indexed")
        elif recorded != (None if parent is None else parent.cid.hex()):
            out.append(
                f"{e.checkpoint_id} ({e.branch}, step {step}): cpstore parent "
                f"{recorded}, LangGraph parent {e.parent} is "
                f"{None if parent is None else (parent.cid.hex(), parent.branch)}"
            )
    return out


def test_two_processes_on_one_store_lose_nothing(tmp_path: Path) -> None:
    """Every acknowledged checkpoint of both processes is readable; own threads are exact;
    every checkpoint's cpstore parent is its LangGraph parent's (no adopted lineage).

    Under load the processes' invokes on the shared thread interleave between a put's
    plan and its recorder: that window once made a put adopt the other process's newer
    head or refuse it as "steps never go backwards" (tests/test_lg_continue_race.py).
    Each assertion says what it compared, so a failure explains itself."""
    path = str(tmp_path / "store")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_worker, [(path, "p", "shared"), (path, "q", "shared")])
    with CpstoreSaver.from_conn_string(path) as saver:
        for name, (acked, own) in zip("pq", results, strict=True):
            expected = []
            for i in range(RUNS):
                expected += [f"{name}{i}", "a", "b"]
            assert own == expected, f"process {name}'s own thread"
            listed_all = {
                t.config["configurable"]["checkpoint_id"]
                for thread in (name, "shared")
                for t in saver.list({"configurable": {"thread_id": thread}})
            }
            lost = sorted(set(acked) - listed_all)
            assert not lost, f"acknowledged to {name} but not listed: {lost}"
        shared = list(saver.list({"configurable": {"thread_id": "shared"}}))
        everything = sorted(t.config["configurable"]["checkpoint_id"] for t in saver.list(None))
        acked_all = sorted(results[0][0] + results[1][0])
        # exactly what was acknowledged: nothing lost, nothing extra, no id twice
        assert everything == acked_all, (
            f"not listed: {sorted(set(acked_all) - set(everything))}; "
            f"never acknowledged: {sorted(set(everything) - set(acked_all))}; "
            f"{len(everything)} listed, {len(acked_all)} acknowledged"
        )
        # input, start, a, b per invoke
        assert len(shared) == 2 * RUNS * 4, f"{len(shared)} checkpoints on the shared thread"
        ids = {t.config["configurable"]["checkpoint_id"] for t in shared}
        dangling = [  # every parent link resolves: no lost or dangling checkpoint
            (t.config["configurable"]["checkpoint_id"], t.parent_config["configurable"])
            for t in shared
            if t.parent_config is not None
            and t.parent_config["configurable"]["checkpoint_id"] not in ids
        ]
        assert not dangling, dangling
        for thread in ("p", "q", "shared"):
            breaks = _lineage_breaks(saver, thread)
            assert not breaks, f"thread {thread}:\n" + "\n".join(breaks)
        final = saver.get_tuple({"configurable": {"thread_id": "shared"}})
        assert final is not None
        report = saver.store.verify()
        assert report.ok, report


def _putter(path: str, n: int) -> list[tuple[str, str]]:
    """Put ``n`` checkpoints in a chain on thread "p"; return (id, value) of each."""
    out = []
    with CpstoreSaver.from_conn_string(path) as saver:
        parent = None
        for i in range(n):
            cp = empty_checkpoint()
            value = f"v{i}" + "x" * 5000
            cp["channel_values"] = {"doc": value}
            cp["channel_versions"] = {"doc": i + 1}
            conf: dict[str, Any] = {"thread_id": "p", "checkpoint_ns": ""}
            if parent is not None:
                conf["checkpoint_id"] = parent
            got = saver.put({"configurable": conf}, cp, {"step": i}, {"doc": i + 1})
            parent = got["configurable"]["checkpoint_id"]
            out.append((parent, value))
    return out


def _pruner(path: str, rounds: int) -> int:
    with CpstoreSaver.from_conn_string(path) as saver:
        for _ in range(rounds):
            saver.prune(["p"], strategy="keep_latest")
        return rounds


def test_prune_while_another_process_puts_loses_no_head(tmp_path: Path) -> None:
    """keep_latest racing a writer: the writer's last checkpoint survives, every entry reads."""
    path = str(tmp_path / "store")
    _putter(path, 1)  # the store and the thread exist before the race
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        puts = pool.apply_async(_putter, (path, 40))
        prunes = pool.apply_async(_pruner, (path, 8))
        acked, _ = puts.get(timeout=120), prunes.get(timeout=120)
    with CpstoreSaver.from_conn_string(path) as saver:
        last_id, last_value = acked[-1]
        tup = saver.get_tuple({"configurable": {"thread_id": "p", "checkpoint_id": last_id}})
        assert tup is not None and tup.checkpoint["channel_values"]["doc"] == last_value
        listed = list(saver.list({"configurable": {"thread_id": "p"}}))
        assert last_id in {t.config["configurable"]["checkpoint_id"] for t in listed}
        assert saver.store.verify().ok


def test_a_root_put_whose_main_another_writer_makes_meanwhile_plans_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put with no parent plans a new main (none when its plan read the refs); another
    writer records main before the put's recorder is made (as a prune's keep_latest does
    on a free main): the put plans again and lands on a fork branch, not refused as "steps
    never go backwards" (audit19's PostgreSQL race test met this in CI), and the other
    writer's head stays."""
    with cpstore.open(tmp_path / "s") as st:
        saver = CpstoreSaver(st)
        plan_once = Writer._plan
        made: list[str] = []

        def plan(self: Writer, *args: Any) -> Any:
            planned = plan_once(self, *args)
            if not made:  # between the plan's read and the recorder: main is made
                made.append(st.recorder(planned.run, branch=planned.branch).checkpoint(5, {}))
            return planned

        monkeypatch.setattr(Writer, "_plan", plan)
        cp = empty_checkpoint()
        cp["channel_values"] = {"a": "v"}
        cp["channel_versions"] = {"a": 1}
        conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        got = saver.put(conf, cp, {"step": 0}, {"a": 1})
        tup = saver.get_tuple(got)
        assert tup is not None and tup.checkpoint["channel_values"] == {"a": "v"}
        assert made and st.ref(run_for("t")) == made[0]
