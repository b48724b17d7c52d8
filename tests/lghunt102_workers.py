"""lghunt102: spawn-context workers putting to one LangGraph thread from several processes.

Every put a worker makes is recorded as a :class:`Put` once ``put`` returned (and its
``put_writes`` once that returned): what it gave, so the parent can read each one back
and compare. A checkpoint continuing another one carries the parent's ``log`` channel
at the parent's version (not in ``new_versions``, as LangGraph passes an unchanged
channel), so the value the saver stores for it is the parent's and equals what was given.
"""

from __future__ import annotations

import random
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from cpstore.errors import ConflictError
from cpstore.langgraph import CpstoreSaver

#: (thread, ns, id, parent id or None, channel_values, channel_versions, metadata, writes)
Put = tuple[str, str, str, str | None, dict[str, Any], dict[str, str], dict[str, Any], list[Any]]

WAIT = 120.0  # seconds: every wait in these tests has this timeout


def cfg(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def planned(
    where: tuple[str, str], name: str, i: int, parent: Any, checkpoint_id: str | None = None
) -> tuple[Any, Any, dict[str, Any], dict[str, str], list[Any], str, Put]:
    """Checkpoint ``i`` of worker ``name`` on ``where`` (thread, ns) under ``parent`` (a
    CheckpointTuple, or None for a root), and two writes of one task: (config,
    checkpoint, metadata, new_versions, writes, task id, the record once stored)."""
    thread, ns = where
    cp = empty_checkpoint()
    if checkpoint_id is not None:
        cp["id"] = checkpoint_id
    doc_version = f"{i + 1:08d}.{name}"
    if parent is None:
        log = [f"{name}:{i}:" + "m" * 900 for _ in range(3 + i % 25)]  # > 16 KiB: segments
        log_version = f"00000000.{name}.{i}"
        new = {"doc": doc_version, "log": log_version}
    else:
        log = parent.checkpoint["channel_values"]["log"]
        log_version = parent.checkpoint["channel_versions"]["log"]
        new = {"doc": doc_version}
    values = {"doc": f"{name}:{i}", "log": log}
    versions = {"doc": doc_version, "log": log_version}
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    # a step at least the parent's, as LangGraph's (the store refuses one going back)
    step = 0 if parent is None else parent.metadata["step"] + 1
    metadata: dict[str, Any] = {
        "source": "loop",
        "step": step,
        "i": i,
        "writer": name,
        "parents": {},
        "run_id": f"run-{thread}-{i % 4}",
    }
    pid = None if parent is None else parent.config["configurable"]["checkpoint_id"]
    writes = [("doc", f"w:{name}:{i}"), ("log", [f"w{i}"])]
    task = f"task-{name}-{i}"
    rec = (thread, ns, cp["id"], pid, values, versions, metadata, [(task, c, v) for c, v in writes])
    return cfg(thread, ns, pid), cp, metadata, new, writes, task, rec


def one_put(
    saver: CpstoreSaver,
    where: tuple[str, str],
    name: str,
    i: int,
    parent: Any,
    *,
    checkpoint_id: str | None = None,
) -> Put:
    """:func:`planned`'s put and writes; the record."""
    conf, cp, metadata, new, writes, task, rec = planned(where, name, i, parent, checkpoint_id)
    got = saver.put(conf, cp, dict(metadata), new)
    assert got["configurable"]["checkpoint_id"] == cp["id"]
    saver.put_writes(got, writes, task, "")
    return rec


async def aone_put(
    saver: CpstoreSaver, where: tuple[str, str], name: str, i: int, parent: Any
) -> Put:
    """:func:`one_put` through the async twins."""
    conf, cp, metadata, new, writes, task, rec = planned(where, name, i, parent)
    got = await saver.aput(conf, cp, dict(metadata), new)
    assert got["configurable"]["checkpoint_id"] == cp["id"]
    await saver.aput_writes(got, writes, task, "")
    return rec


def same_thread_worker(
    url: str,
    name: str,
    *,
    seed: int,
    n: int,
    threads: list[str],
    start: Any,
    out: Any,
    opts: dict[str, Any] | None = None,
) -> None:
    """:func:`put_loop` on a saver of this process's own; ``ready`` sent once it is open."""
    with CpstoreSaver.from_conn_string(url, **(opts or {})) as saver:
        out.put(("ready", name))
        if not start.wait(WAIT):
            raise TimeoutError("never started")
        put_loop(saver, name, seed=seed, n=n, threads=threads, out=out)
    out.put(("done", name))


def put_loop(
    saver: CpstoreSaver, name: str, *, seed: int, n: int, threads: list[str], out: Any
) -> None:
    """``n`` puts on ``threads`` (two namespaces each): a root, a continuation of this
    worker's own last put, or of whatever is newest now (which another worker may be
    continuing at the same moment); each record sent on ``out`` once acknowledged."""
    rng = random.Random(seed)
    mine: dict[tuple[str, str], Any] = {}
    for i in range(n):
        thread, ns = rng.choice(threads), rng.choice(["", "sub"])
        how = rng.random()
        if how < 0.1:
            parent = None
        elif how < 0.55 and (thread, ns) in mine:
            parent = saver.get_tuple(cfg(thread, ns, mine[thread, ns]))
        else:
            parent = saver.get_tuple(cfg(thread, ns))
        rec = one_put(saver, (thread, ns), name, i, parent)
        mine[thread, ns] = rec[2]
        out.put(("put", rec))


def same_id_worker(url: str, name: str, ids: list[str], go: Any, out: Any) -> None:
    """For each id of ``ids``: wait for ``go`` (one event per id), then put it as a root
    on thread ``same`` with this worker's content; the record sent on ``out``."""
    with CpstoreSaver.from_conn_string(url) as saver:
        out.put(("ready", name))
        for i, cid in enumerate(ids):
            if not go[i].wait(WAIT):
                raise TimeoutError("never started")
            rec = one_put(saver, ("same", ""), name, i, None, checkpoint_id=cid)
            out.put(("put", rec))
    out.put(("done", name))


def kill_worker(url: str, name: str, start: Any, out: Any, opts: dict[str, Any]) -> None:
    """Put continuations on thread ``kill`` until killed, each record sent once acknowledged."""
    with CpstoreSaver.from_conn_string(url, **opts) as saver:
        out.put(("ready", name))
        if not start.wait(WAIT):
            raise TimeoutError("never started")
        parent = None
        for i in range(100_000):
            rec = one_put(saver, ("kill", ""), name, i, parent)
            out.put(("put", rec))
            parent = saver.get_tuple(cfg("kill", "", rec[2]))


def maintainer(url: str, stop: Any, started: Any, out: Any) -> None:
    """Until ``stop``: delete thread ``a``, copy ``b`` to ``c<k>`` and ``a`` to ``d<k>``,
    prune ``a`` (keep_latest), delete ``a``'s runs (``delete_for_runs``); each outcome
    sent on ``out`` (a refused copy by its error)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        out.put(("ready", "maintainer"))
        if not started.wait(WAIT):
            raise TimeoutError("never started")
        k = 0
        while not stop.is_set() and k < 400:
            op = k % 5
            if op == 4:
                saver.delete_for_runs([f"run-a-{k % 3}"])
                out.put(("delete_for_runs", k))
            elif op == 0:
                saver.delete_thread("a")
                out.put(("delete", k))
            elif op == 1:
                saver.copy_thread("b", f"c{k}")
                out.put(("copy", f"c{k}"))
            elif op == 2:
                try:
                    saver.copy_thread("a", f"d{k}")
                    out.put(("copy_a", f"d{k}"))
                except ConflictError as e:
                    out.put(("copy_a_refused", (f"d{k}", str(e))))
            else:
                saver.prune(["a"], strategy="keep_latest")
                out.put(("prune", k))
            k += 1
    out.put(("done", "maintainer"))


def maintenance_victim(url: str, op: str, out: Any) -> None:
    """Loop ``op`` on thread ``c`` (``copy``: copy ``b`` to ``c``, delete ``c``; ``prune``:
    copy, keep_latest, delete) until killed; ``cp`` sent after each checkpoint recorded
    (the parent kills on a count of them: mid-copy, mid-prune, between)."""
    from cpstore.store import recorder  # noqa: PLC0415 - patched in this child only

    recorded = recorder.Recorder.checkpoint

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        cid = recorded(self, *args, **kwargs)
        out.put("cp")
        return cid

    recorder.Recorder.checkpoint = counted  # type: ignore[method-assign]
    with CpstoreSaver.from_conn_string(url) as saver:
        out.put("go")
        for _ in range(100_000):
            saver.copy_thread("b", "c")
            if op == "prune":
                saver.prune(["c"], strategy="keep_latest")
            saver.delete_thread("c")


def repeater(url: str, op: str, stop: Any, started: Any, out: Any) -> None:
    """``op`` until ``stop`` (at most 300 times), then ``("count", times)``: ``"prune"``,
    ``keep_latest`` of thread ``a``; ``"copy"``, ``copy_thread(S, T)``."""
    with CpstoreSaver.from_conn_string(url) as saver:
        out.put(("ready", op))
        if not started.wait(WAIT):
            raise TimeoutError("never started")
        k = 0
        while not stop.is_set() and k < 300:
            if op == "prune":
                saver.prune(["a"], strategy="keep_latest")
            else:
                saver.copy_thread("S", "T")
            k += 1
        out.put(("count", k))
    out.put(("done", op))


def chain_writer(url: str, start: Any, out: Any) -> None:
    """60 puts on thread ``T``, each continuing the last (the first: ``T``'s newest)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        out.put(("ready", "chain"))
        if not start.wait(WAIT):
            raise TimeoutError("never started")
        parent = saver.get_tuple(cfg("T"))
        for i in range(10, 70):
            rec = one_put(saver, ("T", ""), "w", i, parent)
            out.put(("put", rec))
            parent = saver.get_tuple(cfg("T", "", rec[2]))
    out.put(("done", "chain"))
