"""What ``diff_threads`` compares at the two last checkpoints once every position holds
equal values: what a resume from each reads beside the values. Their pending writes
(what it applies), which nodes their versions trigger (``_diff_triggers``), their
``updated_channels`` and the writes' task ids (``_diff_updated``, which nodes it
considers and which writes it hands back), and the subgraphs it goes on in
(``_diff_subgraphs``). Each answer is a :class:`ThreadDiff` with ``pending`` set, or None."""

from __future__ import annotations

import dataclasses
from typing import Any

from cpstore.langgraph._diff_chain import node_of
from cpstore.langgraph._diff_result import Point, ThreadDiff
from cpstore.langgraph._diff_sealed import SEALED, UNSURE, writes_digest
from cpstore.langgraph._diff_subgraphs import (
    Compare,
    Found,
    mid_run_below,
    subgraph_divergence,
    subgraph_tasks,
)
from cpstore.langgraph._diff_triggers import trigger_divergence
from cpstore.langgraph._diff_updated import resume_divergence
from cpstore.langgraph._read import Entry, StoredWrite, entry_at, stored_writes
from cpstore.store import Store
from cpstore.store.backend import Txn

__all__ = ["pending_diff", "replayed", "replayed_below"]


def pending_diff(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    pair: tuple[list[Point], list[Point]],
    shared: int | None,
    *,
    diff: Compare,
    named: tuple[bool, bool] | None = None,
) -> ThreadDiff | None:
    """The divergence in the pending writes of the two last checkpoints (chains of equal
    values and length), or None when they are equal. Resuming applies a checkpoint's
    pending writes (a super-step interrupted part-way: the finished tasks' writes, the
    interrupt) and skips the tasks that made them; before, threads whose pending writes
    differed were "same values" (review75's leftover). ``named``: whether each side's
    config names a checkpoint id (the compared threads; None for a subgraph's
    namespaces): a resume of a checkpoint its thread has moved past runs those tasks
    again (:func:`_moved_past`)."""
    a, b = pair
    if not a:
        return None
    meta = store.backend.db("meta")
    ea, eb = a[-1].entry, b[-1].entry
    wa = stored_writes(txn, meta, ea.thread_id, ea.ns, ea.checkpoint_id)
    wb = stored_writes(txn, meta, eb.thread_id, eb.ns, eb.checkpoint_id)
    da = writes_digest(_asking(wa), paths=True, serde=serde)
    db = writes_digest(_asking(wb), paths=True, serde=serde)
    differ = sorted(c for c in set(da) | set(db) if da.get(c) != db.get(c))
    unsure = [c for c in differ if c in da and c in db and UNSURE in (da[c][-1:], db[c][-1:])]
    lone, alike = None, (wa, wb)  # the writes but lone interrupts (lgdiff89)
    if differ == [_INTERRUPT]:
        lone, alike = _lone_doubt(serde, pair, shared, (wa, wb))
    if not differ or lone is not None:
        past = _moved_past(txn, store, serde, pair, (wa, wb), named=named, shared=shared)
        if past is not None and not past.undecidable:
            return past
        trig = _trigger_diff(txn, store, serde, pair, shared)
        if trig is not None and not trig.undecidable:
            return trig
        upd = _updated_diff(txn, store, serde, pair, shared=shared, writes=alike)
        if upd is not None and not upd.undecidable:
            return upd
        # a doubt: a divergence found in the subgraphs goes first
        upd = past or trig or upd or lone
        sub = _subgraph_diff(
            txn, store, serde, pair, shared=shared, writes=(wa, wb), diff=diff, named=named
        )
        if sub is None or upd is None or sub.undecidable:
            return sub or upd
        return dataclasses.replace(sub, summary=f"{sub.summary}; and {upd.summary}")
    replay = _replay_doubt(txn, store, serde, pair, (wa, wb), shared=shared, named=named)
    if replay is not None:
        return replay
    undecided = len(unsure) == len(differ)  # every differing channel sealed, unread
    if not undecided:
        differ = [c for c in differ if c not in unsure]
    nodes = sorted({node_of(w) for w in wa + wb if w.channel in differ})
    head = f"same values at all {len(a)} checkpoints, but the pending writes at the last"
    if undecided:
        said = f"{', '.join(differ)} by node {', '.join(nodes)} differ by their bytes, {SEALED}"
        summary = f"cannot tell: {head} (step {a[-1].step}) to {said}"
    else:
        summary = (
            f"{head} (step {a[-1].step}) differ: node {', '.join(nodes)} wrote different "
            f"{', '.join(differ)}"
        )
    return ThreadDiff(
        False,
        len(a) - 1,
        a[-1].step,
        tuple(nodes),
        tuple(differ),
        ea.checkpoint_id,
        eb.checkpoint_id,
        shared,
        summary,
        pending=True,
        undecidable=undecided,
    )


#: The channels LangGraph 1.2.24 does not count as a task's output
#: (``_task_status.CONTROL_WRITES``): a task with a write to any other has finished.
_NOT_OUTPUT = frozenset({"__interrupt__", "__error__", "__error_source_node__", "__resume__"})


def _asking(writes: list[StoredWrite]) -> list[StoredWrite]:
    """``writes`` but the ``__interrupt__`` writes of finished tasks (lgdiff89). A task
    that finished after an interrupt keeps its last question in the write's slot, but
    LangGraph reads a task with an output write as finished, its interrupts answered
    (``read_task_statuses``: none pending), and hands its output back: the question is
    read by nothing a resume does. A subgraph whose two interrupts were answered one at
    a time kept the one answered last, ``a?`` or ``b?`` by the order: "node sub wrote
    different __interrupt__" while the resumes ran alike."""
    done = {
        w.task_id for w in writes if w.task_id != _NULL_TASK_ID and w.channel not in _NOT_OUTPUT
    }
    return [w for w in writes if not (w.channel == "__interrupt__" and w.task_id in done)]


#: LangGraph's channel for the interrupts a task raised.
_INTERRUPT = "__interrupt__"


def _lone_doubt(
    serde: Any,
    pair: tuple[list[Point], list[Point]],
    shared: int | None,
    writes: tuple[list[StoredWrite], list[StoredWrite]],
) -> tuple[ThreadDiff | None, tuple[list[StoredWrite], list[StoredWrite]]]:
    """Undecidable when the pending writes differ only by the interrupts of unfinished
    tasks whose task path wrote nothing on the other side (lgdiff89), else None. An
    ``update_state(..., as_node="__copy__")`` copy of an interrupted checkpoint holds no
    pending write: its resume runs the task again and it asks again, as the original's
    does (the stored question is read by no resume), and the diff said "node asks
    wrote different __interrupt__" while both resumes ran alike, invoked with None or
    ``Command(resume=...)``. But LangGraph counts the stored interrupts: with two
    pending, ``Command(resume=value)`` raises on the original and answers the first
    task to ask on the copy; a resume map names them by id. Not the same, then. And
    ``writes`` without those interrupts (the task ids are checked on the rest)."""
    wa, wb = (_asking(w) for w in writes)
    paths = [{w.task_path for w in ws} for ws in (wa, wb)]
    kept: list[list[StoredWrite]] = [[], []]
    lone: list[StoredWrite] = []
    for k, ws in enumerate((wa, wb)):
        for w in ws:
            alone = w.channel == _INTERRUPT and w.task_path.strip() != ""
            if alone and w.task_path not in paths[1 - k]:
                lone.append(w)
            else:
                kept[k].append(w)
    if not lone or writes_digest(kept[0], paths=True, serde=serde) != writes_digest(
        kept[1], paths=True, serde=serde
    ):
        return None, writes
    nodes = tuple(sorted({node_of(w) for w in lone}))
    a = pair[0]
    said = (
        f"cannot tell: same values at all {len(a)} checkpoints, but at the last (step "
        f"{a[-1].step}) node {', '.join(nodes)} has an interrupt pending on one side only "
        "(a copy holds none): a resume runs it again on both, but LangGraph counts the "
        "pending interrupts (Command(resume=value) raises when more than one is) and a "
        "resume map names them by id"
    )
    return ThreadDiff(
        False, len(a) - 1, a[-1].step, nodes, (_INTERRUPT,), a[-1].entry.checkpoint_id,
        pair[1][-1].entry.checkpoint_id, shared, said, pending=True, undecidable=True,
    ), (kept[0], kept[1])  # fmt: skip


def _replayed_view(writes: list[StoredWrite], *, replays: bool, travels: bool) -> list[StoredWrite]:
    """The pending writes a resume reads (lgdiff89): all (but finished tasks' stale
    interrupts) when it hands them back; when it replays the checkpoint, none of a
    task's output or error writes (its task runs again: LangGraph 1.2.24
    ``_reapplies_pending_writes`` is False), and no ``__resume__`` write when it is a
    time travel (``is_time_traveling`` drops them), nor an ``__interrupt__`` one (a
    resume without a value reads no pending interrupt: each task asks again)."""
    out = _asking(writes)
    if not replays:
        return out
    return [
        w
        for w in out
        if w.task_id == _NULL_TASK_ID or (w.channel in (_INTERRUPT, _RESUME) and not travels)
    ]


def _replay_doubt(
    txn: Txn[memoryview], store: Store, serde: Any, pair: tuple[list[Point], list[Point]],
    writes: tuple[list[StoredWrite], list[StoredWrite]], *, shared: int | None,
    named: tuple[bool, bool] | None,
) -> ThreadDiff | None:  # fmt: skip
    """Undecidable when the pending writes differ but a resume invoked one way (None, or
    ``Command(resume=...)``) reads them alike, else None (lgdiff89): a side that replays
    its checkpoint (its thread moved past it, or its config names it and the resume is
    a time travel) runs its finished tasks again instead of taking their writes back.
    ``fast`` finished beside an interrupted ``asks``, the checkpoint then copied
    (``__copy__``): the original named against its copy "differed" by fast's writes,
    while both resumes ran ``fast`` again, alike. Only the compared threads' last
    checkpoints (``named`` given); differing writes read alike both ways are not told
    the same either (the checks after them are not made)."""
    if named is None:
        return None
    meta = store.backend.db("meta")
    last = pair[0][-1].entry, pair[1][-1].entry
    past = [entry_at(txn, meta, e.thread_id, e.ns, None) != e for e in last]
    alike: list[str] = []
    for how, command in (("None", False), ("Command(resume=...)", True)):
        views = [
            _replayed_view(
                ws,
                replays=past[k] or (named[k] and not command),
                travels=named[k] and not command,
            )
            for k, ws in enumerate(writes)
        ]
        if not command:  # no resume value: no pending interrupt is read, on either side
            views = [[w for w in ws if w.channel != _INTERRUPT] for ws in views]
        if not any(past[k] or (named[k] and not command) for k in (0, 1)):
            continue  # neither replays: the writes differ as compared
        kept = _lone_doubt(serde, pair, shared, (views[0], views[1]))[1]
        digests = [writes_digest(ws, paths=True, serde=serde) for ws in kept]
        if digests[0] == digests[1]:
            alike.append(how)
    if not alike:
        return None
    trig = _trigger_diff(txn, store, serde, pair, shared)
    if trig is not None and not trig.undecidable:
        return trig
    chosen = [w for w in writes[0] + writes[1] if w.task_id != _NULL_TASK_ID]
    nodes = tuple(sorted({node_of(w) for w in chosen}))
    a = pair[0]
    said = (
        f"cannot tell: same values at all {len(a)} checkpoints, but the pending writes at "
        f"the last (step {a[-1].step}) of node {', '.join(nodes)} differ, and a resume "
        f"invoked with {' or '.join(alike)} replays the checkpoint (its finished tasks run "
        "again) where they differ: "
        + (
            "read alike either way, but not told the same (what the diff compares after "
            "the pending writes is not compared)"
            if len(alike) == 2
            else "read alike that way only"
        )
    )
    return ThreadDiff(
        False, len(a) - 1, a[-1].step, nodes, tuple(sorted({w.channel for w in chosen})),
        last[0].checkpoint_id, last[1].checkpoint_id, shared, said, pending=True,
        undecidable=True,
    )  # fmt: skip


def _trigger_diff(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    pair: tuple[list[Point], list[Point]],
    shared: int | None,
) -> ThreadDiff | None:
    """The nodes a resume from one last checkpoint runs and from the other not (equal
    values, other versions: :func:`~cpstore.langgraph._diff_triggers.trigger_divergence`,
    review80), or None; undecidable when the channels that make it are not known to
    trigger those nodes (lgleft86)."""
    pa, pb = pair[0][-1], pair[1][-1]
    found = trigger_divergence(txn, store, serde, (pa.entry, pb.entry), (pa.values, pb.values))
    if found is None:
        return None
    nodes, channels, undecidable = found
    head = f"same values at all {len(pair[0])} checkpoints, but"
    if undecidable:
        said = (
            f"cannot tell: {head} at the last (step {pa.step}) {', '.join(channels)} is newer "
            f"than node {', '.join(nodes)} saw on one side only, and no versions_seen names "
            "it for them: whether it triggers them (and they run on one side) is not known "
            "without the graph"
        )
    else:
        said = (
            f"{head} a resume from the last (step {pa.step}) runs other tasks: node "
            f"{', '.join(nodes)} (the versions of, or Sends pending in, "
            f"{', '.join(channels) or 'the channels'} differ)"
        )
    return ThreadDiff(
        False, len(pair[0]) - 1, pa.step, nodes, channels, pa.entry.checkpoint_id,
        pb.entry.checkpoint_id, shared, said, pending=True, undecidable=undecidable,
    )  # fmt: skip


def _updated_diff(
    txn: Txn[memoryview], store: Store, serde: Any, pair: tuple[list[Point], list[Point]],
    *, shared: int | None, writes: tuple[list[StoredWrite], list[StoredWrite]],
) -> ThreadDiff | None:  # fmt: skip
    """:func:`~cpstore.langgraph._diff_updated.resume_divergence` of the last two, or None."""
    pa, pb = pair[0][-1], pair[1][-1]
    found = resume_divergence(
        txn, store, serde, (pa.entry, pb.entry), (pa.values, pb.values),
        delta=pa.delta | pb.delta, writes=writes,
    )  # fmt: skip
    if found is None:
        return None
    nodes, channels, undecidable, why = found
    said = ("cannot tell: " if undecidable else "") + f"same values at all {len(pair[0])} "
    said += f"checkpoints, but at the last (step {pa.step}) {why}"
    return ThreadDiff(
        False, len(pair[0]) - 1, pa.step, nodes, channels, pa.entry.checkpoint_id,
        pb.entry.checkpoint_id, shared, said, pending=True, undecidable=undecidable,
    )  # fmt: skip


def _subgraph_diff(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    pair: tuple[list[Point], list[Point]],
    *,
    shared: int | None,
    writes: tuple[list[StoredWrite], list[StoredWrite]],
    diff: Compare,
    named: tuple[bool, bool] | None = None,
) -> ThreadDiff | None:
    """The divergence inside a subgraph run from the two last checkpoints, or None
    (:func:`~cpstore.langgraph._diff_subgraphs.subgraph_divergence`). A subgraph mid-run
    on one side only, that side's resume invoked with None a time travel (its config
    names its checkpoint, or its thread moved past it), is undecidable (lgdiff89): the
    time travel starts the subgraph over, as the other side runs it afresh, while
    ``Command(resume=...)`` goes on mid-run. ``P1`` named against its ``__copy__``
    "diverged" (the subgraph mid-run on A only) while invoked with None both ran
    alike."""
    a, b = pair
    ea, eb = a[-1].entry, b[-1].entry
    last = ((ea, a[-1].step), (eb, b[-1].step))
    found = subgraph_divergence(txn, store, serde, last, writes, diff=diff)
    if found is None:
        return None
    meta = store.backend.db("meta")
    prefix = ""  # "cannot tell: " when a divergence is made a doubt here
    if (
        named is not None
        and not found.undecidable
        and all(
            named[k] or entry_at(txn, meta, e.thread_id, e.ns, None) != e
            for k, (e, _) in enumerate(last)
        )
    ):
        # lgdiff89: invoked with None both sides time-travel, a plain subgraph starting
        # over on both (a kept one from its state before): what differs mid-run is
        # dropped that way, and read with Command(resume=...)
        found = _undecidable(
            found,
            "; but both sides' resumes invoked with None time-travel (each config names its "
            "checkpoint, or its thread moved past it), starting the subgraphs over: whether "
            "the resumes differ turns on how they are invoked",
        )
        prefix = "cannot tell: "
    elif found.only is not None and named is not None and not found.undecidable:
        k = found.only
        e = last[k][0]
        if named[k] or entry_at(txn, meta, e.thread_id, e.ns, None) != e:
            found = _undecidable(
                found,
                ", whose resume invoked with None is a time travel starting it over (as the "
                "other side runs it afresh), and with Command(resume=...) goes on with it "
                "mid-run",
            )
            prefix = "cannot tell: "
    return ThreadDiff(
        False,
        len(a) - 1,
        a[-1].step,
        found.nodes,
        found.channels,
        ea.checkpoint_id,
        eb.checkpoint_id,
        shared,
        f"{prefix}same values at all {len(a)} checkpoints, but {found.said}",
        pending=True,
        undecidable=found.undecidable,
    )


def _undecidable(found: Found, why: str) -> Found:
    """``found`` made a doubt: undecidable, ``why`` said after what it said."""
    return dataclasses.replace(found, said=found.said + why, undecidable=True)


#: The channels of a task's writes that say what became of it, not what it produced
#: (LangGraph's ``CONTROL_WRITES`` but ``__error_source_node__``, which only a resume
#: handing writes back reads: it routes the failed task to its error handler).
_CONTROL = frozenset({"__interrupt__", "__error__", "__resume__"})
#: The task id LangGraph stores input and ``Command`` writes under (never handed back).
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
#: The channel of the resume values a task consumed (LangGraph's ``RESUME``).
_RESUME = "__resume__"


def replayed(writes: list[StoredWrite]) -> list[StoredWrite]:
    """The pending writes a resume of their checkpoint treats otherwise when it replays
    it (review86): a finished task's (handed back, or the task runs again) and the
    resume values an interrupted task consumed (``__resume__``, kept, or dropped by a
    time travel and its interrupts asked again)."""
    return [
        w
        for w in writes
        if w.channel == _RESUME or (w.task_id != _NULL_TASK_ID and w.channel not in _CONTROL)
    ]


def replayed_below(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    last: list[tuple[Entry, list[StoredWrite]]],
) -> tuple[list[StoredWrite], tuple[str, ...]]:
    """:func:`replayed` of each last checkpoint's pending writes (its entry and writes)
    or, when none, of those of the subgraphs mid-run under it (review86: a subgraph
    whose ``fast`` finished beside an interrupted ``asks`` holds fast's writes in its
    own namespace, the parent only the interrupt: a time travel of the parent replays
    the subgraph too, and ``fast`` ran again; lgleft87: a ``checkpointer=True``
    subgraph's too), and the nodes of the subgraphs such a time travel starts over
    (:func:`~cpstore.langgraph._diff_subgraphs.mid_run_below`)."""
    got = replayed([w for _, held in last for w in held])
    if got:
        return got, ()
    below: list[StoredWrite] = []
    restarted: set[str] = set()
    for e, held in last:
        more, again = mid_run_below(txn, store, serde, e, held, bound=None)
        below += more
        restarted.update(again)
    return replayed(below), tuple(sorted(restarted))


def named_newest(
    held: tuple[list[StoredWrite], tuple[str, ...]],
    named: tuple[bool, bool],
    n: int,
    step: object,
) -> tuple[tuple[str, ...], tuple[str, ...], str] | None:
    """``(nodes, channels, summary)`` of the doubt when both last checkpoints are their
    thread's newest, one side's config names its id and the other's names none, and
    they hold writes a replay treats otherwise (:func:`replayed`), else None
    (review86). Invoked with None (or a ``Command`` without ``resume``) the named side
    time-travels: LangGraph 1.2.24 replays it (``_loop``: ``is_time_traveling``), its
    finished tasks run again and its ``__resume__`` writes are dropped, while the
    unnamed side hands them back; with ``Command(resume=...)`` both hand them back. The
    diff said "same values at all 2 checkpoints" (and ``one_checkpoint`` the same for
    one thread named both ways) while the None resumes differed. ``held``: the writes
    and the subgraphs a time travel starts over (:func:`replayed_below`, lgleft87)."""
    if named[0] == named[1]:
        return None
    done, restarted = replayed(held[0]), held[1]
    if not done and not restarted:
        return None
    nodes = {node_of(w) for w in done if w.task_id != _NULL_TASK_ID} | set(restarted)
    channels = tuple(sorted({w.channel for w in done}))
    who, other = ("A", "B") if named[0] else ("B", "A")
    ran = sorted({node_of(w) for w in done if w.channel != _RESUME})
    asked = sorted(
        {node_of(w) for w in done if w.channel == _RESUME and w.task_id != _NULL_TASK_ID}
    )
    what = [f"node {', '.join(ran)} runs again"] if ran else []
    if any(w.channel == _RESUME for w in done):
        what.append(
            "the resume values given are dropped (interrupts"
            + (f" of node {', '.join(asked)}" if asked else "")
            + " asked again)"
        )
    if restarted:
        what.append(
            f"the subgraph of node {', '.join(restarted)} starts over (its steps past the "
            "first run again)"
        )
    said = (
        f"cannot tell: same values at all {n} checkpoints, but at the last (step {step}) "
        f"{who}'s config names its checkpoint id and {other}'s names none: a resume of "
        f"{who} invoked with None time-travels (a replay): {' and '.join(what)}, on a resume "
        f"of {other} not; with Command(resume=...) on neither"
    )
    return tuple(sorted(nodes)), channels, said


def _named_doubt(
    pair: tuple[list[Point], list[Point]],
    shared: int | None,
    found: tuple[tuple[str, ...], tuple[str, ...], str],
) -> ThreadDiff:
    """The undecidable answer at the last checkpoints for :func:`named_newest`'s doubt."""
    return ThreadDiff(
        False, len(pair[0]) - 1, pair[0][-1].step, found[0], found[1],
        pair[0][-1].entry.checkpoint_id, pair[1][-1].entry.checkpoint_id, shared, found[2],
        pending=True, undecidable=True,
    )  # fmt: skip


def _moved_past(
    txn: Txn[memoryview], store: Store, serde: Any, pair: tuple[list[Point], list[Point]],
    writes: tuple[list[StoredWrite], list[StoredWrite]], *, named: tuple[bool, bool] | None,
    shared: int | None,
) -> ThreadDiff | None:  # fmt: skip
    """The divergence when one last checkpoint is its namespace's newest and the other
    not (its thread moved past it: a copy, a fork, a later run), and they hold a
    finished task's writes (equal on both), or None (lgleft86). LangGraph 1.2.24 hands
    such writes back to their tasks only on a resume of the newest checkpoint (or of
    one no id names): a resume addressed at a checkpoint its thread moved past replays
    it, its finished tasks running again (``_loop``: ``is_replaying``). A tool call
    repeated on one side only: the diff said "same values at all 2 checkpoints". When
    the newest side's config names its id, a resume of it invoked with None replays it
    too (time travel) and one with ``Command(resume=...)`` does not: undecidable."""
    if named is None:
        return None
    meta = store.backend.db("meta")
    last = pair[0][-1].entry, pair[1][-1].entry
    past = [entry_at(txn, meta, e.thread_id, e.ns, None) != e for e in last]
    if not past[0] and not past[1]:
        if named[0] == named[1]:
            return None
        held = replayed_below(txn, store, serde, [(last[0], writes[0]), (last[1], writes[1])])
        found = named_newest(held, named, len(pair[0]), pair[0][-1].step)
        if found is None:
            return None
        return _named_doubt(pair, shared, found)
    if past[0] == past[1]:
        return None
    k = 0 if past[0] else 1
    done = [w for w in writes[k] if w.task_id != _NULL_TASK_ID and w.channel not in _CONTROL]
    if not done:
        if named[1 - k]:
            return None  # both drop their resume values with None, keep them with resume=
        # review86: resume values only, or writes pending in a subgraph mid-run under
        # it. Invoked with None the moved-past side time-travels, dropping the values
        # (its interrupts asked again) and replaying the subgraph; the newest does not
        held = replayed_below(txn, store, serde, [(last[k], writes[k])])
        found = named_newest(held, (k == 0, k == 1), len(pair[0]), pair[0][-1].step)
        if found is None:
            return None
        return _named_doubt(pair, shared, found)
    nodes = tuple(sorted({node_of(w) for w in done}))
    channels = tuple(sorted({w.channel for w in done}))
    moved, other = "AB"[k], "AB"[1 - k]
    undecidable = named[1 - k]
    said = (
        f"same values at all {len(pair[0])} checkpoints, but {moved}'s last (step "
        f"{pair[k][-1].step}) is not the newest of its thread: a resume of it replays it, "
        f"running node {', '.join(nodes)} again, whose writes a resume of {other}'s "
    )
    if undecidable:
        said = (
            f"cannot tell: {said}hands back when invoked with Command(resume=...), not "
            f"with None ({other} names its checkpoint id: a time travel replays it too)"
        )
    elif {w.task_id for w in done} <= subgraph_tasks(txn, store, last[k]):
        # lgdiff89: each task run again ran a subgraph, which goes on from its own
        # checkpoints (finished: nothing of it runs) when the replay is no time travel
        undecidable = True
        said = (
            f"cannot tell: {said}hands back; each ran a subgraph, which a replay invoked "
            "with Command(resume=...) goes on from its own checkpoints (a finished one runs "
            "nothing again) and one invoked with None starts over: whether anything runs "
            "again outside it is the node's"
        )
    else:
        said += "hands back"
    return ThreadDiff(
        False, len(pair[0]) - 1, pair[0][-1].step, nodes, channels, last[0].checkpoint_id,
        last[1].checkpoint_id, shared, said, pending=True, undecidable=undecidable,
    )  # fmt: skip
