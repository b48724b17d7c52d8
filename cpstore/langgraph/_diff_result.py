"""What ``diff_threads`` returns (:class:`ThreadDiff`) and the position it compares
(:class:`Point`: one checkpoint of a chain, its step and its values' digests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cpstore.langgraph._read import Entry

__all__ = ["Point", "ThreadDiff"]


@dataclass(frozen=True, slots=True)
class ThreadDiff:
    """The first divergence of two checkpoint chains (``same`` when there is none)."""

    #: True when both chains hold the same values step for step (at the steps both keep:
    #: a pruned start, a run that recorded its last checkpoint only) and end alike.
    same: bool
    #: Position in the compared chains (0 = root, or the newest first step both keep; steps
    #: one side did not record skipped) of the first checkpoint that differs, or None.
    index: int | None
    #: ``metadata["step"]`` of that checkpoint on side A (or B when A ended), or None.
    step: int | None
    #: The node(s) whose writes produced it, from the writes' task paths, sorted.
    nodes: tuple[str, ...]
    #: The channels whose values differ there, sorted.
    channels: tuple[str, ...]
    #: The LangGraph checkpoint ids at that position (None: that chain ended).
    checkpoint_a: str | None
    checkpoint_b: str | None
    #: The last position both chains share the same cpstore checkpoint (a fork point), or None.
    shared_until: int | None
    #: One sentence saying what was found.
    summary: str
    #: True when every position holds equal values and the divergence is in the pending
    #: writes of the two last checkpoints (what a resume applies; ``channels`` and
    #: ``nodes`` then name the writes that differ), in which nodes a resume from them
    #: triggers (a version moved under an equal value) or considers (their
    #: ``updated_channels``), or in a subgraph a resume goes on in.
    pending: bool = False
    #: True when the diff cannot tell whether the chains are equal (``same`` is then
    #: False; ``summary`` says why, ``index`` is where, None when a checkpoint's
    #: metadata did not decode): bytes sealed by an encrypting serde the diff's serde
    #: does not decode, subgraphs of one side sharing a task path that differ and
    #: cannot be paired (lgsub80), last checkpoints whose ``updated_channels`` differ
    #: and are not the sets LangGraph's loop writes, or whose writes' task ids are not
    #: the ones it derives (lgdiff83); what turns on the graph, which a checkpoint does
    #: not hold (lgleft86): a channel held at a reducer's starting value (``[]``, ``0``)
    #: on one side and never written on the other, a node fresh on one side only by a
    #: channel no ``versions_seen`` names for it, a newest checkpoint named by its id
    #: against one its thread moved past; what turns on how a resume is invoked or on
    #: the graph (review86): a newest checkpoint named by its id against one named by
    #: none, holding a finished task's writes or resume values (invoked with None the
    #: first time-travels), last checkpoints equal but at other steps (a node may read
    #: its step). A divergence found past such a position is
    #: reported as found (``undecidable`` False; its summary notes the doubt).
    undecidable: bool = False

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "same": self.same,
            "index": self.index,
            "step": self.step,
            "nodes": list(self.nodes),
            "channels": list(self.channels),
            "checkpoint_a": self.checkpoint_a,
            "checkpoint_b": self.checkpoint_b,
            "shared_until": self.shared_until,
            "summary": self.summary,
            "pending": self.pending,
            "undecidable": self.undecidable,
        }


@dataclass(frozen=True, slots=True)
class Point:
    entry: Entry
    step: int | None
    values: dict[str, bytes]  # channel -> digest of its head part and segments
    #: The channels its metadata counts as DeltaChannels (``counters_since_delta_snapshot``).
    delta: frozenset[str] = frozenset()
